# The kvplan shell tests' one assertion: check NAME EXPECTED ACTUAL prints
# "ok" or "FAIL" and counts failures; the test ends with
# `echo "$failures failures"; [ "$failures" -eq 0 ]`.
failures=0
check() { # check NAME EXPECTED ACTUAL
  if [ "$2" != "$3" ]; then
    echo "FAIL $1: expected [$2], got [$3]"
    failures=$((failures + 1))
  else
    echo "ok   $1"
  fi
}
