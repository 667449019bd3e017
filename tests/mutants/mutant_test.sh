#!/usr/bin/env bash
# One planted bug (a test-only mutant build, see //:mutants.bzl) and the
# test that must catch it: the test binary built from the unmutated sources
# passes with ARGS, and the same test built with the bug fails with ARGS,
# saying $MUTANT_EXPECT (the assertion the bug must trip, not merely any
# failure: a crash or a timeout is not a catch; texts separated by '|||'
# are alternatives). A failed run keeps both
# outputs in the test's undeclared outputs.
# Usage: MUTANT_EXPECT=TEXT mutant_test.sh MUTANT TEST ORIGINAL MUTANT_BINARY [ARGS...]
set -uo pipefail
mutant=$1 test=$2 original=$3 planted=$4 expect=${MUTANT_EXPECT:?the text the mutant must make the test say}
shift 4
work=${TEST_TMPDIR:-$(mktemp -d)}
# The runs' own GoogleTest reports must not become this test's test.xml
# (Bazel takes the file at XML_OUTPUT_FILE as the test's result).
unset XML_OUTPUT_FILE GTEST_OUTPUT
keep() {
  local dir=${TEST_UNDECLARED_OUTPUTS_DIR:-}
  [ -n "$dir" ] && mkdir -p "$dir" && cp "$work"/*.log "$dir/" 2>/dev/null
  return 0
}
fail() {
  echo "FAIL: mutant $mutant: $*"
  keep
  exit 1
}

timeout 300 "$original" "$@" >"$work/original.log" 2>&1
rc=$?
[ $rc -eq 0 ] || {
  tail -n 30 "$work/original.log"
  fail "the unmutated $test exited $rc with the same arguments (${*:-none})"
}

timeout 300 "$planted" "$@" >"$work/mutant.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "survived: $test built with it passed (${*:-no arguments})"
[ $rc -ne 124 ] || fail "$test built with it hung until the time limit: a hang is not a catch"
# Any of the texts (separated by '|||'): the ways the bug may show.
patterns=()
while [[ $expect == *"|||"* ]]; do
  patterns+=(-e "${expect%%|||*}")
  expect=${expect#*|||}
done
patterns+=(-e "$expect")
if ! grep -qF "${patterns[@]}" "$work/mutant.log"; then
  tail -n 30 "$work/mutant.log"
  fail "$test built with it exited $rc without saying: $MUTANT_EXPECT"
fi
said=$(grep -m1 -F "${patterns[@]}" "$work/mutant.log" | cut -c1-240)
echo "PASS: mutant $mutant: the unmutated $test passes; built with the bug it exits $rc: $said"
echo "reliability: mutant $mutant caught by $test"
