#!/usr/bin/env bash
# One planted bug in the Python package and the test that must catch it.
# The package ships without any switch: the bug is a patch
# (tests/mutants/python/MUTANT.patch, a unified diff against python/kvshard
# with a header saying what it plants), applied here to a copy of the
# package made for this test alone. The Python test TEST.py, run with the
# test names given, passes against the real package and fails against the
# copy saying $MUTANT_EXPECT (texts separated by '|||' are alternatives;
# a hang is not a catch, nor is a patch that no longer applies). A failed
# run keeps both outputs in the test's undeclared outputs.
# Usage: MUTANT_EXPECT=TEXT py_mutant_test.sh MUTANT PATCH LIBRARY TEST.py [NAMES...]
set -uo pipefail
mutant=$1 patch_file=$2 library=$3 test=$4 expect=${MUTANT_EXPECT:?the text the mutant must make the test say}
shift 4
source python/tests/python_env.sh
python_needs numpy
export KVSHARD_LIBRARY="$PWD/$library"
python_asan_preload "$KVSHARD_LIBRARY"
work=${TEST_TMPDIR:-$(mktemp -d)}
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
command -v patch >/dev/null || fail "patch is not installed (tools/setup.sh installs it)"

# The copy: the package's files (dereferenced from the runfiles), patched.
copy=$work/planted
rm -rf "$copy"
mkdir -p "$copy/python"
cp -rL python/kvshard "$copy/python/kvshard" || fail "cannot copy python/kvshard"
patch --quiet --fuzz=0 --no-backup-if-mismatch -p1 -d "$copy" -i "$PWD/$patch_file" \
  >"$work/patch.log" 2>&1 || {
  cat "$work/patch.log"
  fail "$patch_file no longer applies to python/kvshard: plant the bug again and regenerate it"
}
diff -rq python/kvshard "$copy/python/kvshard" >/dev/null &&
  fail "$patch_file changed nothing"

# Each run imports the package it is meant to: the real one, then the copy.
run() {
  local where=$1 log=$2
  shift 2
  local imported
  imported=$(PYTHONPATH="$where${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
    'import kvshard, os; print(os.path.dirname(os.path.abspath(kvshard.__file__)))') ||
    fail "kvshard does not import from $where"
  [ "$imported" = "$where/kvshard" ] ||
    fail "the run meant for $where imports kvshard from $imported"
  PYTHONPATH="$where${PYTHONPATH:+:$PYTHONPATH}" timeout 300 "$PYTHON" "$test" "$@" -v \
    >"$log" 2>&1
}

run "$PWD/python" "$work/original.log" "$@"
rc=$?
[ $rc -eq 0 ] || {
  tail -n 30 "$work/original.log"
  fail "$test exited $rc against the real package (${*:-all tests})"
}

run "$copy/python" "$work/mutant.log" "$@"
rc=$?
[ $rc -ne 0 ] || fail "survived: $test passed against the package with it (${*:-all tests})"
[ $rc -ne 124 ] || fail "$test hung until the time limit against it: a hang is not a catch"
patterns=()
while [[ $expect == *"|||"* ]]; do
  patterns+=(-e "${expect%%|||*}")
  expect=${expect#*|||}
done
patterns+=(-e "$expect")
if ! grep -qF "${patterns[@]}" "$work/mutant.log"; then
  tail -n 30 "$work/mutant.log"
  fail "$test exited $rc against it without saying: $MUTANT_EXPECT"
fi
said=$(grep -m1 -F "${patterns[@]}" "$work/mutant.log" | cut -c1-240)
echo "PASS: mutant $mutant: $test passes against the real package; against the package with" \
  "the bug it exits $rc: $said"
echo "reliability: mutant $mutant caught by $test"
