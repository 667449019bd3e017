#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SECONDS CORPUS_DIR: replays every regression input in
# CORPUS_DIR (each must pass), then fuzzes from them for SECONDS seconds
# (KVS_FUZZ_SECONDS overrides, for long runs). A crash fails the test and
# leaves its input under the test's undeclared outputs, to be added to
# CORPUS_DIR as a regression input.
set -euo pipefail
fuzzer=$1
seconds=${KVS_FUZZ_SECONDS:-$2}
corpus=$3
artifacts=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -d "$corpus" ] && [ -n "$(ls -A "$corpus")" ]; then
  cp "$corpus"/* "$work"/
  echo "replaying $(ls "$corpus" | wc -l) regression inputs from $corpus"
  "$fuzzer" -runs=0 "$work" >"$work/replay.log" 2>&1 || { cat "$work/replay.log"; exit 1; }
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
status=0
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$work" >"$work/log" 2>&1 || status=$?
grep -E "^(Done [0-9]+ runs|stat::number_of_executed_units|SUMMARY)" "$work/log" || true
if [ "$status" -ne 0 ]; then
  tail -n 40 "$work/log"
  echo "FAIL: the fuzzer found a crash; its input is in $artifacts"
  exit 1
fi
