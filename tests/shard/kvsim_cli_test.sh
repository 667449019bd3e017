#!/bin/bash
# kvsim's argument errors are caught before any work, naming the problem.
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err

expect() {  # expect CODE MESSAGE -- command...
  local code=$1 message=$2
  shift 3
  "$@" >"$OUT" 2>"$ERR"
  local rc=$?
  [ $rc -eq "$code" ] || fail "'$*' exited $rc, expected $code"
  grep -qF -- "$message" "$ERR" "$OUT" || fail "'$*' did not say: $message"
}

expect 2 "tp 3 x pp 1 = 3 ranks, but the group has 2" -- \
  "${MPIRUN[@]}" -np 2 "$KVSIM" --tp 3 --steps 10 --seed 1
expect 2 "--steps needs a step count" -- "$KVSIM" --tp 1 --backend self --seed 1
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
expect 0 "usage: mpirun -np N kvsim" -- "$KVSIM" --help
echo PASS
