#!/usr/bin/env bash
# Every function libkvshard.so.2 exports has a NULL-and-zero case in
# headers_c_test (which prints "called NAME" for each), and the test calls
# nothing the library does not export: adding an export without a case,
# or a case for a function that is no longer exported, fails here.
#   api_coverage_test.sh HEADERS_C_TEST LIBKVSHARD.SO.1
set -uo pipefail
test_binary=$1 lib=$2
"$test_binary" >"$TEST_TMPDIR/called" 2>"$TEST_TMPDIR/err" || {
  echo "FAIL: headers_c_test exited $?: $(cat "$TEST_TMPDIR/err")"
  exit 1
}
sed -n 's/^called //p' "$TEST_TMPDIR/called" | sort -u >"$TEST_TMPDIR/cases"
nm -D --defined-only "$lib" | awk '{print $3}' | sort -u >"$TEST_TMPDIR/exports"
missing=$(comm -23 "$TEST_TMPDIR/exports" "$TEST_TMPDIR/cases")
extra=$(comm -13 "$TEST_TMPDIR/exports" "$TEST_TMPDIR/cases")
[ -z "$missing" ] || { echo "FAIL: exported without a NULL-argument case: $missing"; exit 1; }
[ -z "$extra" ] || { echo "FAIL: cases for functions not exported: $extra"; exit 1; }
echo "PASS: all $(wc -l <"$TEST_TMPDIR/exports") exported functions are called with NULL and zero arguments"
