#!/bin/bash
# kvsim_local: four ranks as threads over the loopback backend (tp 2 x pp
# 2), the host twin as tables; the same JSON contract as kvsim, the plan
# kvplan prints, every rank's ring contexts equal to the leader's and to
# its pool's. Then its argument errors.
# Usage: kvsim_local_test.sh KVSIM_LOCAL KVPLAN
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 KVPLAN=$2
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
BUDGETS=900MiB,890MiB,880MiB,870MiB,900MiB,890MiB,880MiB,870MiB
SIZING=(--max-running 32 --swa-ratio 0.04 --no-radix)
timeout 300 "$KVSIM" --ranks 4 --tp 2 --pp 2 --steps 2000 --seed 9 --json --topology bundled \
  --budget-per-gpu "$BUDGETS" --device cpu --requests 32 "${SIZING[@]}" >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] || fail "kvsim_local exited $rc"
json_check '.ranks == 4 and .steps == 2000 and .backend == "loopback" and .device == "cpu"'
json_check '.digests_agree == true and .ring_ctx_digest_agree == true and .requests == 32'
json_check '.bare_broadcast_us > 0 and .step_over_bare_broadcast > 0'
same_plan_as_kvplan "$KVPLAN" kvsim_local --topology bundled --tp 2 --pp 2 \
  --budget-per-gpu "$BUDGETS" "${SIZING[@]}"
for ((r = 0; r < 4; r++)); do
  grep -q "^kvsim: rank $r: integrity ok after 2000 steps" "$ERR" || fail "rank $r"
done

expect 2 "kvsim: tp 2 x pp 1 = 2 ranks, but the group has 3" -- \
  "$KVSIM" --ranks 3 --tp 2 --steps 5 --seed 1 --device cpu
expect 2 "--backend needs one of loopback, nccl, self, got 'mpi'" -- \
  "$KVSIM" --tp 1 --backend mpi --steps 5 --seed 1
expect 2 "--backend self runs one rank, not 2" -- \
  "$KVSIM" --ranks 2 --tp 2 --backend self --steps 5 --seed 1
expect 2 "unknown flag '--stall-rank'" -- "$KVSIM" --tp 1 --steps 5 --seed 1 --stall-rank 0:1
expect 4 "no rank survived" -- "$KVSIM" --tp 1 --steps 5 --seed 1 --kill-rank 0:1 --device cpu
expect 2 "--ranks needs a rank count in [1, 256], got '0'" -- "$KVSIM" --ranks 0 --tp 1 --steps 5 --seed 1
expect 2 "--device needs cpu or cuda, got 'gpu'" -- "$KVSIM" --tp 1 --steps 5 --seed 1 --device gpu
expect 2 "must be below --steps" -- \
  "$KVSIM" --tp 1 --steps 5 --seed 1 --inject-divergence 0:5
expect 2 "give one of --budget, --budget-per-gpu and --budget-mib" -- \
  "$KVSIM" --tp 1 --steps 5 --seed 1 --budget 1GiB --budget-mib 900
expect 4 "for the minimal pool" -- \
  "$KVSIM" --tp 1 --steps 5 --seed 1 --budget 100MiB --device cpu --topology bundled
expect 4 "topology file 'tests/data/none.xml' cannot be read" -- \
  "$KVSIM" --tp 1 --steps 5 --seed 1 --topology tests/data/none.xml --device cpu
expect 2 "kvsim_local: --steps is given twice; give it once" -- \
  "$KVSIM" --tp 1 --steps 5 --seed 1 --steps 6
expect 0 "usage: kvsim_local --ranks N" -- "$KVSIM" --help
echo PASS
