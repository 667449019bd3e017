#!/bin/bash
# Soak: random window-pool operations (binds and frees driven by a serving
# workload) on 8 MPI ranks, with every rank's integrity check and the
# cross-rank digest check every CHECK_EVERY steps. A short run in the
# suite; the full soak is
#   bazel test //tests/shard:kvsim_soak_test --test_env=KVS_SOAK_OPS=10000000 \
#     --test_env=KVS_SOAK_CHECK_EVERY=10000 --test_timeout=14400
# Usage: kvsim_soak_test.sh KVSIM
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1
OPS=${KVS_SOAK_OPS:-20000}
CHECK_EVERY=${KVS_SOAK_CHECK_EVERY:-500}
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
# This workload averages about 4.4 binds + frees per step; ask for steps
# enough for OPS at 4 per step and check the count after.
STEPS=$(((OPS + 3) / 4))
run_mpi $((600 + STEPS / 100)) -np 8 "$KVSIM" --tp 8 --steps "$STEPS" --seed 1234 \
  --requests 64 --arrival-rate 2 --budget-mib 8000 --swa-ratio 0.04 --no-radix \
  --check-every "$CHECK_EVERY" --timeout-ms 60000 --progress-s 30 --json
[ $rc -eq 0 ] || fail "kvsim exited $rc"
json_check '.digests_agree == true and .ranks == 8'
ops=$(json_get '.binds + .frees')
[ "$ops" -ge "$OPS" ] || fail "only $ops pool operations in $STEPS steps, wanted $OPS"
# The checks kvsim made (its periodic ones, as it counts them), plus the
# closing check every agreeing run ends with.
periodic=$(grep -oE '; [0-9]+ checks$' "$ERR" | grep -oE '[0-9]+' | tail -n 1)
[ -n "$periodic" ] || fail "kvsim did not report its check count"
checks=$((periodic + 1))
digest=$(json_get .digest)
for ((r = 0; r < 8; r++)); do
  grep -q "^kvsim: rank $r: integrity ok after $STEPS steps, digest $digest\$" "$ERR" ||
    fail "rank $r did not report integrity with digest $digest"
done
echo "reliability: soak_pool_ops $ops window-pool operations on 8 ranks over $STEPS steps, $checks integrity and digest checks, 0 divergences"
echo "PASS: $(tail -n 1 "$OUT" | jq -c 'del(.plan)')"
