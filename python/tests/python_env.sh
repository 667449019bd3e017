# The interpreter and environment of the package's tests (sourced).
# Debian's /usr/bin/python3: a python3 earlier on PATH (pyenv, conda) may
# lack Debian's numpy, mpi4py and torch, which tools/setup.sh installs.
PYTHON=/usr/bin/python3
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
# Under --config=asan the library carries AddressSanitizer, which must be
# the first library of the process: the interpreter is not built with it,
# so the runtime is preloaded. CPython's own allocations at exit are not
# kvshard's: leak checking is off there, every other check stays fatal.
python_asan_preload() {
  local lib=$1 asan
  asan=$(ldd "$lib" 2>/dev/null | awk '/libasan/ {print $3}')
  [ -n "$asan" ] || return 0
  local ubsan
  ubsan=$(ldd "$lib" 2>/dev/null | awk '/libubsan/ {print $3}')
  export LD_PRELOAD="$asan${ubsan:+:$ubsan}"
  export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  echo "note: $lib carries AddressSanitizer; preloading $LD_PRELOAD, leak checks off" >&2
}
# Skips the test (exit 0 with the reason) when a module is missing.
python_needs() {
  local m
  for m in "$@"; do
    if ! "$PYTHON" -c "import $m" 2>/dev/null; then
      echo "SKIP: $PYTHON cannot import $m (tools/setup.sh installs python3-$m)"
      exit 0
    fi
  done
}
