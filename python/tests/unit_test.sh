#!/bin/bash
# The package's tests on one process (python/tests/node_test.py, ...).
# Usage: unit_test.sh LIBRARY [NAME=PATH|NAME=WORDS...] TEST.py...
# (each NAME=... before the tests is exported for them).
set -u
LIBRARY=$1
shift
while [[ $# -gt 0 && $1 == *=* ]]; do
  export "${1?}"
  shift
done
source "$(dirname "$0")/python_env.sh"
python_needs numpy
export KVSHARD_LIBRARY="$PWD/$LIBRARY"
python_asan_preload "$KVSHARD_LIBRARY"
rc=0
for t in "$@"; do
  "$PYTHON" "$t" -v || rc=1
done
exit $rc
