#!/bin/bash
# kvsim's argument errors are caught before any work, naming the problem.
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err

expect 2 "tp 3 x pp 1 = 3 ranks, but the group has 2" -- \
  "${MPIRUN[@]}" -np 2 "$KVSIM" --tp 3 --steps 10 --seed 1
expect 2 "--steps needs a step count" -- "$KVSIM" --tp 1 --backend self --seed 1
# A rank the launcher placed out of the plan's node order is refused.
expect 2 "rank 0 is local rank 3 on its machine (OMPI_COMM_WORLD_LOCAL_RANK), but the plan runs it as local rank 0 of node 0" -- \
  env OMPI_COMM_WORLD_LOCAL_RANK=3 "$KVSIM" --tp 1 --backend self --steps 5 --seed 1
expect 2 "rank 0 is local rank 2 on its machine (SLURM_LOCALID)" -- \
  env SLURM_LOCALID=2 "$KVSIM" --tp 1 --backend self --steps 5 --seed 1
expect 2 "--inject-divergence needs RANK:STEP, got '3'" -- \
  "$KVSIM" --tp 1 --backend self --steps 5 --seed 1 --inject-divergence 3
expect 2 "--backend needs one of mpi, nccl, self, got 'gloo'" -- \
  "$KVSIM" --tp 1 --backend gloo --steps 5 --seed 1
expect 2 "--backend self runs one rank, but mpirun started 2" -- \
  "${MPIRUN[@]}" -np 2 "$KVSIM" --tp 2 --backend self --steps 5 --seed 1
expect 2 "a RANK:STEP names a rank outside the 1 ranks" -- \
  "$KVSIM" --tp 1 --backend self --steps 5 --seed 1 --inject-divergence 4:2
expect 4 "for the minimal pool" -- \
  "$KVSIM" --tp 1 --backend self --steps 5 --seed 1 --budget-mib 100
# Ranks started with other layouts or geometries refuse to build one pool
# (they used to run and agree on digests of different pools).
M4=$TEST_TMPDIR/m4.json
echo '{"num_hidden_layers": 4, "head_dim": 512, "index_head_dim": 128,
  "compress_ratios": [0, 4, 128, 4], "qk_rope_head_dim": 64, "sliding_window": 128,
  "num_nextn_predict_layers": 0}' >"$M4"
expect 2 "rank 1 was given other options than the leader" -- \
  "${MPIRUN[@]}" -np 1 "$KVSIM" --tp 2 --steps 50 --seed 1 --device cpu : \
  -np 1 "$KVSIM" --tp 1 --pp 2 --steps 50 --seed 1 --device cpu
expect 2 "rank 1 was given other options than the leader" -- \
  "${MPIRUN[@]}" -np 1 "$KVSIM" --tp 2 --steps 50 --seed 1 --device cpu : \
  -np 1 "$KVSIM" --tp 2 --steps 50 --seed 1 --device cpu --model "$M4"
# --device cuda without a GPU is "unavailable" (on a GPU machine it runs).
if "$KVSIM" --tp 1 --backend self --steps 5 --seed 1 --device cuda >"$OUT" 2>"$ERR"; then
  echo "note: a GPU is visible; the no-GPU --device cuda case does not apply"
else
  expect 5 "device cuda asked for, but no CUDA device visible" -- \
    "$KVSIM" --tp 1 --backend self --steps 5 --seed 1 --device cuda
fi
expect 2 "above the 4611686018427387904 bytes (4 EiB)" -- \
  "$KVSIM" --tp 1 --backend self --steps 5 --seed 1 --budget 8000000TB
# The report lost to a full disk is a failed run.
"$KVSIM" --tp 1 --backend self --steps 20 --seed 1 --json --device cpu >/dev/full 2>"$ERR"
rc=$?
[ $rc -eq 4 ] || fail "kvsim to /dev/full exited $rc, expected 4"
grep -q "kvsim: writing standard output: No space left on device" "$ERR" ||
  fail "kvsim did not say its output was lost"
expect 0 "usage: mpirun -np N kvsim" -- "$KVSIM" --help
echo PASS
