#!/bin/bash
# kvs_comm_exchange over MPI: exchange_mpi (tests/shard/exchange_mpi.c) under
# mpirun on NP ranks; every rank must say it is ok, with the bytes it
# compared, and the silent peer's timeout must have been seen.
# Usage: exchange_mpi_test.sh BINARY NP
set -u
source "$(dirname "$0")/common.sh"
BINARY=$1 NP=$2
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
run_mpi 300 -np "$NP" "$BINARY"
[ $rc -eq 0 ] || fail "exchange_mpi on $NP ranks exited $rc"
grep -q '^FAIL' "$ERR" "$OUT" && fail "a rank failed a check"
for ((r = 0; r < NP; r++)); do
  grep -Eq "^exchange_mpi: rank $r of $NP: ok \([1-9][0-9]* bytes compared\)\$" "$OUT" ||
    fail "rank $r did not report ok"
done
echo "PASS: $NP ranks: $(grep -c ': ok ' "$OUT") ok; $(grep -m1 '64 MiB each way' "$ERR")"
