#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SECONDS FLAGS [CORPUS_DIR...]: replays every input in
# the corpus folders (seed inputs and kept regression inputs; each must
# pass), then fuzzes from them for SECONDS seconds (KVS_FUZZ_SECONDS
# overrides it, for long runs) with the extra libFuzzer FLAGS. A crash fails
# the test and leaves its input under the test's undeclared outputs, to be
# kept in a corpus folder as a regression input.
set -euo pipefail
fuzzer=$1
seconds=${KVS_FUZZ_SECONDS:-$2}
read -r -a flags <<<"$3"
shift 3
artifacts=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
inputs=0
for dir in "$@"; do
  if [ ! -d "$dir" ]; then
    echo "FAIL: corpus folder $dir is missing from the test's runfiles"
    exit 1
  fi
  for input in "$dir"/*; do
    case "$input" in *.md | */README*) continue ;; esac
    [ -f "$input" ] || continue
    cp "$input" "$work/corpus/$(basename "$dir")_$(basename "$input")"
    inputs=$((inputs + 1))
  done
done
if [ "$inputs" -gt 0 ]; then
  "$fuzzer" "${flags[@]}" -runs=0 "$work/corpus" >"$work/replay.log" 2>&1 || {
    tail -n 40 "$work/replay.log"
    echo "FAIL: a corpus input fails"
    exit 1
  }
  echo "replayed $inputs corpus inputs: all pass"
fi
status=0
"$fuzzer" "${flags[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "$work/corpus" >"$work/log" 2>&1 || status=$?
grep -E "^(Done [0-9]+ runs|stat::number_of_executed_units|SUMMARY)" "$work/log" || true
if [ "$status" -ne 0 ]; then
  tail -n 40 "$work/log"
  echo "FAIL: the fuzzer found a crash; its input is in $artifacts"
  exit 1
fi
