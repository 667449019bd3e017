#!/bin/bash
# A rank killed or stalled mid-run: the other ranks exit non-zero with a
# clear error within BOUND seconds, never hang.
#   kill            SIGKILL; Open MPI tears the job down (its own path)
#   stall           SIGSTOP; the survivors' own deadline fires, then MPI_Abort
#   kill-recovery   SIGKILL under mpirun --enable-recovery: the launcher
#                   keeps the job alive, so every survivor must leave through
#                   kvshard's own timeout, naming the collective and (by the
#                   MPI backend's roll call) the dead rank
#   kill-threads    kvsim_local: rank 2's thread stops without a word; every
#                   survivor leaves through the loopback backend's timeout,
#                   naming the collective and the rank it waited for
# The collective deadline (TIMEOUT_MS, 20 s) is ten times what a step needs
# on a loaded 2-core machine under AddressSanitizer, so that no healthy rank
# times out first and the wording checked below is the dead rank's; BOUND
# (seconds, from the BUILD file) is what the job may take in all. A failed
# run's stderr and stdout are kept in the test's undeclared outputs.
# Usage: kvsim_failure_test.sh KVSIM MODE BOUND
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 MODE=$2 BOUND=$3
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
NP=4
TIMEOUT_MS=20000
ARGS=(--tp $NP --steps 100000000 --seed 3 --json --timeout-ms $TIMEOUT_MS --device cpu)
LIMIT=$((BOUND * 2))  # the test's own time limit: a hang is named, not waited out by Bazel
start=$(date +%s.%N)
case $MODE in
  kill | stall)
    timeout $LIMIT "${MPIRUN[@]}" -np $NP "$KVSIM" "${ARGS[@]}" "--$MODE-rank" 2:400 >"$OUT" 2>"$ERR" ;;
  kill-recovery)
    timeout $LIMIT "${MPIRUN[@]}" --enable-recovery -np $NP "$KVSIM" "${ARGS[@]}" --kill-rank 2:400 \
      >"$OUT" 2>"$ERR" ;;
  kill-threads)
    timeout $LIMIT "$KVSIM" --ranks $NP "${ARGS[@]}" --kill-rank 2:400 >"$OUT" 2>"$ERR" ;;
  *) fail "unknown mode $MODE" ;;
esac
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
[ $rc -ne 124 ] || fail "the job hung until the test's own timeout"
echo "$elapsed < $BOUND" | bc | grep -q 1 || fail "survivors took ${elapsed}s (bound ${BOUND}s)"

# Every survivor left through kvshard's own timeout, naming the collective
# and rank 2 (the MPI backend's roll call, or the loopback group's count).
survivors_named_the_dead_rank() {
  local collective=$1 r line
  for r in 0 1 3; do
    line=$(grep -E "^kvsim: rank $r: step failed: timed out: $collective" "$ERR" | head -n 1)
    [ -n "$line" ] || fail "rank $r did not leave through kvshard's timeout on a $collective"
    echo "$line" | grep -qE "rank\(s\) 2( |:)" || fail "rank $r did not name rank 2: $line"
  done
}

case $MODE in
  kill)
    [ $rc -ne 0 ] || fail "the job exited 0 after a rank failed"
    grep -q "kvsim: rank 2 kills itself at step 400" "$ERR" || fail "rank 2 was not killed"
    grep -q "exited on signal 9 (Killed)" "$ERR" || fail "mpirun did not name the killed rank"
    ;;
  stall)
    grep -q "kvsim: rank 2 stops itself at step 400" "$ERR" || fail "rank 2 did not stall"
    grep -Eq "kvsim: rank [013]: step failed: timed out: mpi broadcast of [0-9]+ bytes from rank 0 on rank [013] of 4 did not complete within $TIMEOUT_MS ms: a peer rank failed or stalled" "$ERR" ||
      fail "no survivor reported the stalled peer"
    [ $rc -eq 4 ] || fail "kvsim exited $rc, expected 4 (comm failure)"
    ;;
  kill-recovery)
    grep -q "kvsim: rank 2 kills itself at step 400" "$ERR" || fail "rank 2 was not killed"
    survivors_named_the_dead_rank "mpi broadcast"
    # Open MPI 4.1 under --enable-recovery reports the job's status as 0
    # even after MPI_Abort; the survivors' own lines are the verdict here.
    ;;
  kill-threads)
    grep -q "kvsim: rank 2 dies at step 400" "$ERR" || fail "rank 2's thread did not stop"
    survivors_named_the_dead_rank "loopback broadcast"
    [ $rc -eq 4 ] || fail "kvsim_local exited $rc, expected 4 (comm failure)"
    ;;
esac
echo "PASS: $MODE of rank 2: job exited $rc after ${elapsed}s (bound ${BOUND}s)"
# The exit path the survivors took (tools/reliability-report.sh counts
# drills by it): the launcher's teardown, or kvshard's own deadline.
deadline="collective deadline $((TIMEOUT_MS / 1000)) s"
case $MODE in
  kill)
    echo "reliability: drill kill: rank 2 died at step 400; Open MPI tore the job down (exit $rc) ${elapsed} s after the start: the launcher's path, not kvshard's deadline" ;;
  stall)
    echo "reliability: drill stall: rank 2 stopped at step 400; a survivor left through kvshard's own deadline on the mpi broadcast, then MPI_Abort ended the job (exit $rc), ${elapsed} s after the start ($deadline)" ;;
  kill-recovery | kill-threads)
    echo "reliability: drill $MODE: rank 2 died at step 400; every survivor left through kvshard's own deadline naming the collective and rank 2 (ranks 0, 1, 3), ${elapsed} s after the start ($deadline)" ;;
esac
grep -E "kvsim: rank [0-9]+: (step failed|terminated)" "$ERR" | head -n 4
