#!/usr/bin/env bash
# Every function declared in a header under core/, pool/, blocks/, plan/,
# topology/ and backends/ (the registry and each backend's entry.h), and
# every function kvshard.h declares that one of those
# folders defines, must appear in one of the NULL-argument tests (a case,
# or a line of a test's no-pointer list). A function added without one
# fails this test, by name. Excluded, with the reason:
#   pool/'s private headers (one per concept: //pool:headers names only the
#   public ones, so they are not here to read): tests cannot include them.
# static inline helpers (checked.h, mix.h, table_math.h, ...) define rather
# than declare: they are arithmetic on values, outside this check.
# Usage: null_arguments_coverage_test.sh AWK TEST.cc... (from the runfiles
# root, where the headers and sources lie at their paths).
set -uo pipefail
awk_file=$1
shift
tests=("$@")
for t in "${tests[@]}"; do
  [ -f "$t" ] || { echo "FAIL: no test file $t"; exit 1; }
done

declared() {
  local h
  for h in core/*.h pool/*.h blocks/*.h plan/*.h topology/*.h backends/*.h backends/*/entry.h; do
    awk -f "$awk_file" "$h"
  done
  # kvshard.h's functions whose definition is in these folders.
  local name
  for name in $(awk -f "$awk_file" kvshard.h); do
    if grep -qE "^[A-Za-z_].*[^A-Za-z0-9_]$name\(" core/*.c pool/*.c blocks/*.c plan/*.c topology/*.c \
      backends/*.c; then
      echo "$name"
    fi
  done
}

names=$(declared | sort -u)
total=0 missing=0
for name in $names; do
  total=$((total + 1))
  if ! grep -qw "$name" "${tests[@]}"; then
    missing=$((missing + 1))
    echo "FAIL: $name is declared but no NULL-argument test calls or lists it"
  fi
done
echo "null arguments: $((total - missing)) of $total declared functions have a case"
[ "$missing" -eq 0 ] && [ "$total" -gt 200 ]
