#!/bin/sh
# Runs the block decoder fuzzer: first every kept regression input, then a
# bounded fuzzing session from the seed corpus. KVS_FUZZ_SECONDS sets the
# session length (default 5); e.g.
#   bazel test //tests/block:decode_fuzz_test --test_env=KVS_FUZZ_SECONDS=600 \
#     --test_timeout=900
set -eu
fuzzer="tests/block/decode_fuzzer"
seconds="${KVS_FUZZ_SECONDS:-5}"
work="${TEST_TMPDIR:-/tmp}/decode_fuzz"
artifacts="${TEST_UNDECLARED_OUTPUTS_DIR:-$work}"
mkdir -p "$work/corpus" "$artifacts"

found=0
for f in tests/block/fuzz_regressions/*.bin; do
  [ -e "$f" ] || continue
  "$fuzzer" -runs=1 "$f" >"$work/regression.log" 2>&1 || {
    echo "regression input $f fails:"; cat "$work/regression.log"; exit 1; }
  found=$((found + 1))
done
echo "decode_fuzz: $found regression inputs pass"

cp tests/block/fuzz_corpus/* "$work/corpus/"
"$fuzzer" -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "$work/corpus" 2>&1 |
  tee "$work/fuzz.log" | grep -E "^(stat::|INFO: seed corpus|#[0-9]+ +DONE|==[0-9]+==|SUMMARY)" || true
# The pipeline hides the fuzzer's status; its log tells.
if grep -qE "ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error|SUMMARY:" \
  "$work/fuzz.log"; then
  echo "decode_fuzz: the fuzzer found a failure (input kept in $artifacts):"
  tail -60 "$work/fuzz.log"
  exit 1
fi
grep -q "Done [0-9]* runs" "$work/fuzz.log" || { tail -30 "$work/fuzz.log"; exit 1; }
grep "Done [0-9]* runs" "$work/fuzz.log"
