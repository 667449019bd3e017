#!/bin/bash
# The package's tests on one process (python/tests/node_test.py, ...).
# Usage: unit_test.sh LIBRARY TEST.py...
set -u
LIBRARY=$1
shift
source "$(dirname "$0")/python_env.sh"
python_needs numpy
export KVSHARD_LIBRARY="$PWD/$LIBRARY"
python_asan_preload "$KVSHARD_LIBRARY"
rc=0
for t in "$@"; do
  "$PYTHON" "$t" -v || rc=1
done
exit $rc
