#!/usr/bin/env bash
# The whole test suite on a fresh machine: install what is missing, then
# run every test. The last line printed is the test runner's summary.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
summary_pattern='^Executed [0-9]+ out of [0-9]+ tests?'

# Bazel prints hints after its summary; hold the summary back and print it
# last, so the runner's verdict is the final line.
bazel test --ui_event_filters=-info --noshow_progress //... "$@" 2>&1 | tee "$log" |
  grep -Ev "$summary_pattern"
status=${PIPESTATUS[0]}
summary=$(grep -E "$summary_pattern" "$log" | tail -n 1)
echo "${summary:-no test summary: bazel test exited with status $status}"
exit "$status"
