#!/bin/bash
# kvshard's Python package over mpi4py, 4 ranks under mpirun:
#   loop  a follower's bind is refused; 500 steps of the example's loop, every
#         rank's translation, contexts and check digest agree, and the mapping
#         viewed with numpy.from_dlpack equals translate
#   kill  rank 2 is SIGKILLed at step 50 under --enable-recovery (the
#         launcher keeps the job alive): every survivor raises kvshard.Error
#         KVS_ERR_TIMEOUT within BOUND seconds
# Usage: mpi_test.sh MODE LIBRARY MPI_BACKEND [BOUND]
set -u
MODE=$1 LIBRARY=$2 BACKEND=$3 BOUND=${4:-60}
source "$(dirname "$0")/python_env.sh"
python_needs numpy mpi4py
source tests/shard/common.sh
export KVSHARD_LIBRARY="$PWD/$LIBRARY" KVSHARD_BACKEND_PATH="$PWD/$(dirname "$BACKEND")"
python_asan_preload "$KVSHARD_LIBRARY"
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
RUN=("${MPIRUN[@]}" -x PYTHONPATH -x KVSHARD_LIBRARY -x KVSHARD_BACKEND_PATH)
[ -z "${LD_PRELOAD:-}" ] || RUN+=(-x LD_PRELOAD)
case $MODE in
  loop)
    MPIRUN=("${RUN[@]}")
    run_mpi 300 -np 4 "$PYTHON" python/tests/mpi_ranks.py loop
    [ "$rc" -eq 0 ] || fail "the loop exited $rc"
    for r in 1 2 3; do
      grep -q "^rank $r: follower bind refused: KVS_ERR_INVALID_ARGUMENT: .*rank $r" "$OUT" ||
        fail "rank $r's bind was not refused naming it"
    done
    grep -Eq "^ranks 4, steps 500, checks 11, bound locations [0-9]+, digest [0-9a-f]{16}, agree$" \
      "$OUT" || fail "the ranks did not agree"
    ;;
  kill)
    start=$(date +%s.%N)
    timeout 120 "${RUN[@]}" --enable-recovery -np 4 "$PYTHON" python/tests/mpi_ranks.py kill \
      >"$OUT" 2>"$ERR"
    rc=$?
    elapsed=$(echo "$(date +%s.%N) - $start" | bc)
    [ $rc -ne 124 ] || fail "the job hung until the test's own timeout"
    echo "$elapsed < $BOUND" | bc | grep -q 1 || fail "survivors took ${elapsed}s (bound ${BOUND}s)"
    grep -q "^rank 2 kills itself at step 50" "$OUT" || fail "rank 2 was not killed"
    for r in 0 1 3; do
      grep -Eq "^rank $r: step (50|51) raised KVS_ERR_TIMEOUT after [0-9.]+s: .*did not complete within 2000 ms" "$OUT" ||
        fail "rank $r did not raise kvshard.Error on the deadline"
    done
    ;;
  *) fail "unknown mode $MODE" ;;
esac
cat "$OUT"
echo "PASS: $MODE"
