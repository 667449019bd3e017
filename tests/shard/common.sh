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
# Under AddressSanitizer (bazel test --config=asan), LeakSanitizer stays on
# in every process these tests start, kvsim's own code included. What it
# would report from third-party start-up code (hwloc's PCI plugin, Open
# MPI's start-up, its progress thread) lives in libraries unloaded by exit
# time; tests/tools/lsan.supp names the nearest frames that stay loaded,
# which only the slow unwinder reaches. Addressing and undefined-behaviour
# errors stay fatal everywhere.
LSAN_SUPPRESSIONS="$(pwd)/tests/tools/lsan.supp"
[ -f "$LSAN_SUPPRESSIONS" ] || { echo "FAIL: $LSAN_SUPPRESSIONS is missing" >&2; exit 1; }
export LSAN_OPTIONS="suppressions=$LSAN_SUPPRESSIONS:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x LSAN_OPTIONS -x ASAN_OPTIONS)

# A run that must succeed: mpirun with a time limit, stdout to $OUT, stderr
# to $ERR, status in $rc. Open MPI 4.1 has a shutdown race in which a rank
# that finished and finalized is reported as "process rank N with PID 0 ...
# exiting improperly" and the job fails (seen under load, with programs
# that only init and finalize too); such a run is retried once, and says
# so. Anything else, and a second such failure, stands.
#   run_mpi SECONDS mpirun-args...
run_mpi() {
  local limit=$1 attempt
  shift
  for attempt in 1 2; do
    timeout "$limit" "${MPIRUN[@]}" "$@" >"$OUT" 2>"$ERR"
    rc=$?
    if [ $rc -ne 0 ] && [ $attempt -eq 1 ] && grep -q "with PID 0 on" "$ERR" &&
      grep -q "exiting improperly" "$ERR"; then
      echo "note: Open MPI's shutdown race (a finished rank reported as PID 0, exiting" \
        "improperly); running the job once more" >&2
      continue
    fi
    return 0
  done
}

# Copies the last run's stderr and stdout ($ERR, $OUT) into the test's
# undeclared outputs, which Bazel keeps after the test (in
# bazel-testlogs/.../test.outputs/outputs.zip), whole: the log of a failed
# run is not lost with the test's scratch space.
keep_logs() {
  local dir=${TEST_UNDECLARED_OUTPUTS_DIR:-} f
  [ -n "$dir" ] || return 0
  mkdir -p "$dir" || return 0
  for f in ${ERR:-} ${OUT:-}; do
    [ -f "$f" ] && cp "$f" "$dir/$(basename "$f").txt"
  done
  return 0
}

fail() {
  echo "FAIL: $*" >&2
  keep_logs
  [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ] &&
    echo "(the whole stderr and stdout are kept in the test's undeclared outputs)" >&2
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

# Runs a command that must exit CODE and say MESSAGE (on stderr or stdout):
#   expect CODE MESSAGE -- command...
expect() {  # expect CODE MESSAGE -- command...
  local code=$1 message=$2
  shift 3
  "$@" >"$OUT" 2>"$ERR"
  local rc=$?
  [ $rc -eq "$code" ] || fail "'$*' exited $rc, expected $code"
  grep -qF -- "$message" "$ERR" "$OUT" || fail "'$*' did not say: $message"
}

# jq -e on the last line of stdout.
json_check() {
  tail -n 1 "$OUT" | jq -e "$1" >/dev/null || fail "JSON check failed: $1 on $(tail -n 1 "$OUT")"
}

json_get() {
  tail -n 1 "$OUT" | jq -r "$1"
}

# The sizing the kvsim tests' small budgets (hundreds of MiB per GPU) were
# chosen for: 16 running requests, a window of 4 % of the history, no radix
# reserve. The serving defaults (64 running, 1/8, radix) need 2.75 GiB for
# DSV4-Flash's minimal pool. kvsim and kvplan take these flags alike.
SMALL_SIZING=(--max-running 16 --swa-ratio 0.04 --no-radix)

# The plan in the last JSON line of stdout (kvsim's `plan`) must be, key for
# key, what kvplan plans given the same flags: the ones kvsim was given
# that kvplan also takes (they mean the same and default the same), with
# nothing added.
#   same_plan_as_kvplan KVPLAN TOOL flags...
same_plan_as_kvplan() {
  local kvplan=$1 tool=$2
  shift 2
  "$kvplan" "$@" --json \
    >"$TEST_TMPDIR/kvplan.json" 2>"$TEST_TMPDIR/kvplan.err" ||
    fail "kvplan exited $?: $(cat "$TEST_TMPDIR/kvplan.err")"
  diff <(tail -n 1 "$OUT" | jq -S .plan) <(jq -S . "$TEST_TMPDIR/kvplan.json") \
    >"$TEST_TMPDIR/plan.diff" ||
    fail "$tool's plan differs from kvplan's: $(head -n 20 "$TEST_TMPDIR/plan.diff")"
}
