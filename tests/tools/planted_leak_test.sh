#!/usr/bin/env bash
# The leak check still finds a leak under the options the suite runs with:
# a program that loses one 4 KiB block must be reported by LeakSanitizer,
# naming the allocating function, both as one process and as 4 MPI ranks
# started the way the kvsim tests start theirs (tests/shard/common.sh).
# Only meaningful in the ASan build; the plain build skips, saying so.
#   planted_leak_test.sh PLANTED_LEAK
set -uo pipefail
planted=$1
source tests/shard/common.sh

if ! grep -qa __asan_init "$planted"; then
  echo "SKIPPED: a plain build has no leak checker; the ASan build (--config=asan) runs this test"
  exit 0
fi
echo "LSAN_OPTIONS=$LSAN_OPTIONS"

OUT=$TEST_TMPDIR/out
ERR=$TEST_TMPDIR/err
# check LABEL EXPECTED_REPORTS EXIT: the last run exited EXIT ("nonzero": any
# failure), with one leak report naming the planted allocation per process.
check() {
  local label=$1 expected=$2 want_rc=$3
  if [ "$want_rc" = nonzero ]; then
    [ "$rc" -ne 0 ] || fail "$label: exited 0; LeakSanitizer did not fail the process"
  else
    [ "$rc" -eq "$want_rc" ] || fail "$label: exited $rc, expected $want_rc"
  fi
  grep -q "planted" "$OUT" || fail "$label: the program did not run to its end"
  local reports frames
  reports=$(grep -c "ERROR: LeakSanitizer: detected memory leaks" "$ERR")
  frames=$(grep -c "in planted_leak_allocation" "$ERR")
  [ "$reports" -eq "$expected" ] ||
    fail "$label: $reports leak reports, expected $expected (one per process)"
  [ "$frames" -ge "$expected" ] ||
    fail "$label: the reports name planted_leak_allocation $frames times, expected $expected"
  grep -q "Tracer caught signal" "$ERR" && fail "$label: LeakSanitizer's tracer crashed"
  echo "ok   $label: exit $rc, $reports leak reports naming planted_leak_allocation"
}

"$planted" >"$OUT" 2>"$ERR"
rc=$?
check "one process" 1 nonzero

# mpirun ends the job at the first rank that fails, which can cut the other
# ranks' reports short: here the reports must not fail the ranks
# (exitcode=0, appended so it wins), and every rank must print its own.
LSAN_OPTIONS="$LSAN_OPTIONS:exitcode=0" timeout 120 "${MPIRUN[@]}" -np 4 "$planted" \
  >"$OUT" 2>"$ERR"
rc=$?
check "4 MPI ranks" 4 0
echo "the leak check finds a planted leak"
