#!/bin/bash
# Prefill/decode over MPI: pd_mpi (tests/shard/pd_mpi.c) on 8 ranks, prefill
# node on world ranks 0-3 (tp 1 x pp 4), decode node on 4-7 (tp 4).
#   flow   200 requests with decode-side prefix reuse, every unit's rows
#          compared and every report's bytes checked against the rule; then
#          a wrong page planted in each pool (one request each) refused on
#          every decode rank naming its unit, the decode node consistent
#          after each; one planted past a prefix hit, whose refusal gives
#          the hit back; and a request sent with other tokens than the
#          decode side admitted, refused there and reported by every send.
#   kill   prefill rank 2 SIGKILLs itself when it should send request 5,
#          under mpirun --enable-recovery (the launcher keeps the job
#          alive): every decode rank refuses the request within the link's
#          3 s deadline naming link rank 2, the leader's refusal returns the
#          slot and window pages, and the decode node's check passes. Open
#          MPI 4.1 under --enable-recovery reports the job's status as it
#          likes (kvsim_failure_test.sh): the survivors' lines are the
#          verdict, and the job must end within BOUND seconds.
# Usage: pd_mpi_test.sh BINARY MODE
set -u
source "$(dirname "$0")/common.sh"
BINARY=$1 MODE=$2
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
NP=8
case $MODE in
  flow)
    run_mpi 600 -np $NP "$BINARY" flow 200
    [ $rc -eq 0 ] || fail "pd_mpi flow exited $rc"
    grep -q '^FAIL' "$ERR" "$OUT" && fail "a rank failed a check"
    for ((r = 0; r < NP; r++)); do
      grep -Eq "^pd_mpi: rank $r: ok " "$OUT" || fail "rank $r did not report ok"
    done
    for r in 0 1 2 3; do
      grep -q "^pd_mpi: rank $r: send of request 300000 refused by the decode side: KVS_ERR_INVALID_ARGUMENT: .*decode link rank 4 refused it" "$ERR" ||
        fail "prefill rank $r's send did not say the decode side refused request 300000"
    done
    for r in 4 5 6 7; do
      grep -q "^pd_mpi: rank $r: planted request 100000 (shift 1) refused: .*decode rank 2: .*its compressed_4 rows of layer 1 (positions 384..511)" "$ERR" ||
        fail "decode rank $r did not refuse the planted request naming its unit"
      [ "$(grep -c "^pd_mpi: rank $r: planted request 1000[0-9][0-9] (shift -\?1) refused: " "$ERR")" -eq 10 ] ||
        fail "decode rank $r did not refuse all 10 planted requests"
      grep -q "^pd_mpi: rank $r: planted request 200001 (shift 1) refused: .*its compressed_4 rows of layer 1 (positions 640..767)" "$ERR" ||
        fail "decode rank $r did not refuse the planted request past a hit"
      grep -q "^pd_mpi: rank $r: request 300000 (other tokens) refused: " "$ERR" ||
        fail "decode rank $r did not refuse the request sent with other tokens"
      [ "$(grep -c "^pd_mpi: rank $r: decode node consistent after the refusal" "$ERR")" -eq 12 ] ||
        fail "decode rank $r: the node was not consistent after each refusal"
    done
    line=$(grep '^pd_mpi: decode leader: ' "$OUT")
    echo "$line" | grep -Eq ' [1-9][0-9]* hits reusing ' || fail "no request reused a prefix: $line"
    echo "$line" | grep -Eq ', [1-9][0-9]* bytes saved by reuse' || fail "reuse saved nothing: $line"
    echo "PASS: flow: $line"
    ;;
  kill)
    BOUND=120
    start=$(date +%s.%N)
    timeout $((BOUND * 2)) "${MPIRUN[@]}" --enable-recovery -np $NP "$BINARY" kill 5 >"$OUT" 2>"$ERR"
    rc=$?
    elapsed=$(echo "$(date +%s.%N) - $start" | bc)
    [ $rc -ne 124 ] || fail "the job hung until the test's own timeout"
    echo "$elapsed < $BOUND" | bc | grep -q 1 || fail "the job took ${elapsed}s (bound ${BOUND}s)"
    grep -q "^FAIL" "$ERR" "$OUT" && fail "a rank failed a check"
    grep -q "^pd_mpi: rank 2 kills itself before sending request 5" "$ERR" ||
      fail "prefill rank 2 was not killed"
    for r in 4 5 6 7; do
      line=$(grep -E "^pd_mpi: rank $r: request 5 refused after [0-9.]+ s: KVS_ERR_(TIMEOUT|COMM): " "$ERR" | head -n 1)
      [ -n "$line" ] || fail "decode rank $r did not refuse request 5"
      echo "$line" | grep -q "from rank 2" || fail "decode rank $r did not name link rank 2: $line"
      grep -q "^pd_mpi: rank $r: decode node consistent after the refusal" "$ERR" ||
        fail "decode rank $r: the node was not consistent after the refusal"
    done
    for r in 0 1 3 4 5 6 7; do
      grep -Eq "^pd_mpi: rank $r: ok " "$OUT" || fail "survivor $r did not report ok"
    done
    echo "PASS: kill: job exited $rc after ${elapsed}s (bound ${BOUND}s)"
    grep -m1 "^pd_mpi: rank 4: request 5 refused" "$ERR"
    ;;
  *) fail "unknown mode $MODE" ;;
esac
