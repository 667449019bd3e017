#!/bin/bash
# kvsim --backend nccl: on a machine with a GPU, one rank runs the
# workload over device buffers. Whether there is one is asked of CUDA
# (GPU_PROBE: the CUDA backend's probe, gpu_gate.h), never read off kvsim's
# output: where CUDA says there is none, kvsim must refuse cleanly (exit 5)
# naming CUDA's reason, and the test skips with it; where asking CUDA fails,
# the test fails.
# Usage: kvsim_nccl_test.sh KVSIM GPU_PROBE
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 GPU_PROBE=$2
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
answer=$(KVSHARD_BACKEND_PATH=backends/cuda "$GPU_PROBE")
probe_rc=$?
case $probe_rc in
  0) echo "CUDA: $answer" ;;
  3) why=${answer#none: } ;;
  *) fail "cannot tell whether this machine has a GPU (gpu_probe exited $probe_rc): $answer" ;;
esac
timeout 120 "${MPIRUN[@]}" -np 1 "$KVSIM" --tp 1 --backend nccl --steps 500 --seed 2 --json \
  >"$OUT" 2>"$ERR"
rc=$?
if [ $probe_rc -eq 3 ]; then
  [ $rc -eq 5 ] || fail "without a GPU kvsim --backend nccl exited $rc, expected 5"
  grep -qF -- "$why" "$ERR" || fail "exit 5 without naming CUDA's reason: $why"
  echo "SKIPPED: $why"
  exit 0
fi
[ $rc -eq 0 ] || fail "kvsim --backend nccl exited $rc"
json_check '.ranks == 1 and .steps == 500 and .digests_agree == true'
echo "PASS: $(tail -n 1 "$OUT")"
