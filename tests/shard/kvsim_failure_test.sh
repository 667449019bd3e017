#!/bin/bash
# A rank killed (kill: SIGKILL) or stalled (stall: SIGSTOP) mid-run: the
# other ranks exit non-zero with a clear error within BOUND seconds, never
# hang.
# Usage: kvsim_failure_test.sh KVSIM MODE BOUND
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 MODE=$2 BOUND=$3
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
NP=4
start=$(date +%s.%N)
timeout 120 "${MPIRUN[@]}" -np $NP "$KVSIM" --tp $NP --steps 100000000 --seed 3 --json \
  --timeout-ms 2000 "--$MODE-rank" 2:400 >"$OUT" 2>"$ERR"
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
[ $rc -ne 124 ] || fail "the job hung until the test's own timeout"
[ $rc -ne 0 ] || fail "the job exited 0 after a rank failed"
echo "$elapsed < $BOUND" | bc | grep -q 1 || fail "survivors took ${elapsed}s (bound ${BOUND}s)"
case $MODE in
  kill)
    grep -q "kvsim: rank 2 kills itself at step 400" "$ERR" || fail "rank 2 was not killed"
    grep -q "exited on signal 9 (Killed)" "$ERR" || fail "mpirun did not name the killed rank"
    ;;
  stall)
    grep -q "kvsim: rank 2 stops itself at step 400" "$ERR" || fail "rank 2 did not stall"
    grep -Eq "kvsim: rank [013]: step failed: timed out: mpi broadcast of [0-9]+ bytes from rank 0 on rank [013] of 4 did not complete within 2000 ms: a peer rank failed or stalled" "$ERR" ||
      fail "no survivor reported the stalled peer"
    [ $rc -eq 4 ] || fail "kvsim exited $rc, expected 4 (comm failure)"
    ;;
esac
echo "PASS: $MODE of rank 2: job exited $rc after ${elapsed}s (bound ${BOUND}s)"
grep -E "kvsim: rank [0-9]+: (step failed|terminated)" "$ERR" | head -n 4
