#!/bin/bash
# kvsim --backend nccl: on a machine with a GPU, one rank runs the
# workload over device buffers; without one, kvsim must refuse cleanly
# (exit 5) naming why, and the test skips with that reason.
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
timeout 120 "${MPIRUN[@]}" -np 1 "$KVSIM" --tp 1 --backend nccl --steps 500 --seed 2 --json \
  >"$OUT" 2>"$ERR"
rc=$?
if [ $rc -eq 5 ]; then
  why=$(grep -o "no CUDA device visible: .*" "$ERR" | head -n 1)
  [ -n "$why" ] || fail "exit 5 without naming why"
  echo "SKIPPED: $why"
  exit 0
fi
[ $rc -eq 0 ] || fail "kvsim --backend nccl exited $rc"
json_check '.ranks == 1 and .steps == 500 and .digests_agree == true'
echo "PASS: $(tail -n 1 "$OUT")"
