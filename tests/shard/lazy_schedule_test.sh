#!/usr/bin/env bash
# The stand-in tests given, run again in the stand-in's lazy schedule
# (KVS_STANDIN_LAZY=1: a wait runs only the work it waits for, the rest
# stays queued, no background progress): an ordering the library forgot
# shows there at once. Each must pass as it does in the random schedules.
# Usage: lazy_schedule_test.sh TEST_BINARY...
set -uo pipefail
export KVS_STANDIN_LAZY=1
failed=0
for test in "$@"; do
  if "$test" >"$TEST_TMPDIR/out" 2>&1; then
    echo "ok: $(basename "$test") in the lazy schedule ($(grep -o '[0-9]* tests\?\.' "$TEST_TMPDIR/out" | tail -1))"
  else
    echo "FAIL: $(basename "$test") in the lazy schedule:"
    tail -n 40 "$TEST_TMPDIR/out"
    failed=1
  fi
done
exit $failed
