# Helpers shared by the kvsim tests (sourced).
# Open MPI writes its session directory under TMPDIR: keep it in the
# test's own scratch space.
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
# Tests run side by side in PID-namespaced sandboxes, where two mpiruns can
# get the same pid and so the same job id: their shared-memory segments
# would collide in /dev/shm (seen as a segfault and a failed unlink). Keep
# them in the test's scratch space too.
export OMPI_MCA_btl_vader_backing_directory="$TMPDIR"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Under AddressSanitizer (bazel test --config=asan), LeakSanitizer reports
# what Open MPI and its plugins allocate at start-up and never free, from
# libraries unloaded by exit time, so no suppression can name them. Leak
# checking is therefore off in processes mpirun starts; kvshard's own code
# is leak-checked in-process instead (kvsim on the self backend, the
# runtime tests over the loopback backend, the fuzzers). Addressing and
# undefined-behaviour errors stay fatal everywhere.
MPIRUN=(env "ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
        mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS)

fail() {
  echo "FAIL: $*" >&2
  if [ -n "${ERR:-}" ] && [ -f "$ERR" ]; then
    echo "---- stderr (last 40 lines) ----" >&2
    tail -n 40 "$ERR" >&2
  fi
  if [ -n "${OUT:-}" ] && [ -f "$OUT" ]; then
    echo "---- stdout (last 10 lines) ----" >&2
    tail -n 10 "$OUT" >&2
  fi
  exit 1
}

# jq -e on the last line of stdout.
json_check() {
  tail -n 1 "$OUT" | jq -e "$1" >/dev/null || fail "JSON check failed: $1 on $(tail -n 1 "$OUT")"
}

json_get() {
  tail -n 1 "$OUT" | jq -r "$1"
}
