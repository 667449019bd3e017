#!/bin/bash
# Heterogeneous budgets with pp 2 (GPU 5, in stage 1, is much smaller):
# the layer split kvsim runs is the optimal one kvplan prints for the same
# inputs, and it is not the even split (22 + 21 layers) a naive runtime
# would use; the run agrees.
# Usage: kvsim_split_test.sh KVSIM KVPLAN
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 KVPLAN=$2
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
BUDGETS=1200MiB,1200MiB,1200MiB,1200MiB,1200MiB,700MiB,1200MiB,1200MiB
run_mpi 300 -np 8 "$KVSIM" --tp 4 --pp 2 --steps 1500 --seed 4 --json \
  --topology bundled --budget-per-gpu "$BUDGETS" --device cpu "${SMALL_SIZING[@]}"
[ $rc -eq 0 ] || fail "kvsim exited $rc"
json_check '.digests_agree == true and .ring_ctx_digest_agree == true'
same_plan_as_kvplan "$KVPLAN" kvsim --topology bundled --tp 4 --pp 2 \
  --budget-per-gpu "$BUDGETS" "${SMALL_SIZING[@]}"
stage0=$(json_get '.plan.ranks[0].layers | "\(.[0])-\(.[1])"')
stage1=$(json_get '.plan.ranks[4].layers | "\(.[0])-\(.[1])"')
[ "$stage0" != "0-21" ] || fail "the split is the even one (0-21, 22-42)"
json_check '.plan.ranks[0].layers[1] > 21'
# Every rank ran its stage's layers.
for ((r = 0; r < 8; r++)); do
  want=$([ $r -lt 4 ] && echo "$stage0" || echo "$stage1")
  grep -q "^kvsim: rank $r (tp rank $((r % 4)), stage $((r / 4)), layers \[${want%-*}, $((${want#*-} + 1)))" "$ERR" ||
    fail "rank $r did not run layers $want"
done
echo "PASS: stages $stage0 and $stage1 (even would be 0-21 and 22-42)"
