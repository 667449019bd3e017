#!/usr/bin/env bash
# The whole test suite on a fresh machine: install what is missing, check
# the sources' format (tools/format-check.sh), then run every test twice:
# a plain build, then under AddressSanitizer and UndefinedBehaviorSanitizer
# (--config=asan); a format difference fails the suite after the runs, so
# the summary line stays last. Extra arguments go to both
# `bazel test` runs. The last line printed is the test runner's summary of
# the last run made; a plain run that fails stops there, with its summary.
# Each run's output is kept in out/test-plain.log and out/test-asan.log
# (one summary line per target, with its time), and RELIABILITY.md is
# regenerated from them and the runs' test logs; its counts (targets and
# cases passed, skipped, failed) are printed before Bazel's summaries.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

mkdir -p out
summary_pattern='^Executed [0-9]+ out of [0-9]+ tests?'

# run LABEL LOG BAZEL_ARGS...: one `bazel test //...` with a summary line
# per target (for the report), its closing summary held back.
run() {
  local label=$1 log=$2
  shift 2
  echo "== $label: bazel test${*:+ $*} //..."
  bazel test --ui_event_filters=-info --noshow_progress --test_summary=short "$@" //... 2>&1 |
    tee "$log" | grep -Ev "$summary_pattern"
  status=${PIPESTATUS[0]}
  summary=$(grep -E "$summary_pattern" "$log" | tail -n 1)
  summary=${summary:-no test summary: bazel test exited with status $status}
}

# The sources as .clang-format says; a difference fails the suite, after
# the tests have run, so the summary line stays last.
echo "== format: tools/format-check.sh"
tools/format-check.sh
format_status=$?

rm -f out/test-plain.log out/test-asan.log
run "plain build" out/test-plain.log "$@"
if [ "$status" -ne 0 ]; then
  echo "$summary"
  exit "$status"
fi
plain_summary=$summary
run "ASan + UBSan build" out/test-asan.log --config=asan "$@"
asan_status=$status
# The report's counts first: Bazel's summary counts a target whose every
# case skipped as passed; the report's lines do not (quote those).
if report=$(tools/reliability-report.sh 2>/dev/null); then
  grep -E '^(plain build|ASan \+ UBSan build): ' <<<"$report" | sed 's/^/counted: /'
else
  echo "note: RELIABILITY.md could not be regenerated (tools/reliability-report.sh)"
fi
echo "plain build: $plain_summary"
[ "$format_status" -eq 0 ] || echo "format: tools/format-check.sh failed (see above)"
echo "$summary"
[ "$asan_status" -ne 0 ] && exit "$asan_status"
exit "$format_status"
