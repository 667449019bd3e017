#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SECONDS FLAGS DICT [CORPUS...]: replays every corpus
# input (each CORPUS is a folder of inputs or one input file: seed inputs
# and kept regression inputs; each must pass), then fuzzes from them for
# SECONDS seconds (KVS_FUZZ_SECONDS overrides it, for long runs) with the
# extra libFuzzer FLAGS and DICT as its dictionary ("-" for none). A crash
# fails the test and leaves its input under the test's undeclared outputs,
# to be kept in a corpus folder as a regression input.
#
# Prints, for the reliability report, the harness's own counts of both
# phases (tests/fuzz/fuzz_stats.h):
#   kvs_fuzz replay: NAME: R inputs run, P past parsing (...)
#   kvs_fuzz: NAME: R inputs run, P past parsing (...)
set -euo pipefail
fuzzer=$1
seconds=${KVS_FUZZ_SECONDS:-$2}
read -r -a flags <<<"$3"
dict=$4
shift 4
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ] || [ "$seconds" -gt 86400 ]; then
  echo "FAIL: KVS_FUZZ_SECONDS must be a whole number of seconds from 1 to 86400, not '$seconds'"
  exit 1
fi
if [ "$dict" != "-" ]; then
  [ -f "$dict" ] || { echo "FAIL: dictionary $dict is missing from the test's runfiles"; exit 1; }
  flags+=("-dict=$dict")
fi
artifacts=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
inputs=0
add_input() {  # add_input FILE PREFIX
  cp "$1" "$work/corpus/$2_$(basename "$1")"
  inputs=$((inputs + 1))
}
for item in "$@"; do
  if [ -d "$item" ]; then
    for input in "$item"/*; do
      case "$input" in *.md | */README*) continue ;; esac
      [ -f "$input" ] || continue
      add_input "$input" "$(basename "$item")"
    done
  elif [ -f "$item" ]; then
    add_input "$item" file
  else
    echo "FAIL: corpus $item is missing from the test's runfiles"
    exit 1
  fi
done
if [ "$inputs" -gt 0 ]; then
  "$fuzzer" "${flags[@]}" -runs=0 "$work/corpus" >"$work/replay.log" 2>&1 || {
    tail -n 40 "$work/replay.log"
    echo "FAIL: a corpus input fails"
    exit 1
  }
  echo "replayed $inputs corpus inputs: all pass"
  grep -E '^kvs_fuzz: ' "$work/replay.log" | sed 's/^kvs_fuzz: /kvs_fuzz replay: /' || true
fi
status=0
"$fuzzer" "${flags[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "$work/corpus" >"$work/log" 2>&1 || status=$?
grep -E "^(Done [0-9]+ runs|stat::number_of_executed_units|SUMMARY|kvs_fuzz: )" "$work/log" || true
if [ "$status" -ne 0 ]; then
  tail -n 40 "$work/log"
  echo "FAIL: the fuzzer found a crash; its input is in $artifacts"
  exit 1
fi
if ! grep -qE '^kvs_fuzz: ' "$work/log"; then
  echo "FAIL: the harness printed no kvs_fuzz counts (tests/fuzz/fuzz_stats.h)"
  exit 1
fi
