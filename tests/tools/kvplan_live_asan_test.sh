#!/usr/bin/env bash
# kvplan on the live topology of this machine, the way the ASan build runs
# it: LeakSanitizer on, with only the third-party frames in lsan.supp
# suppressed (hwloc's PCI plugin). Without them every live run exits 1 with
# an empty stdout (LeakSanitizer ends the process before stdout is flushed).
#   - `kvplan plan` (live when CUDA sees GPUs, else the bundled server,
#     after a live probe) plans: exit 0 and a plan on stdout;
#   - `kvplan plan --topology live` plans (exit 0) on a GPU machine and on
#     one without NVIDIA GPUs exits 1 naming that, and nothing else;
#   - no leak is reported, and no suppression hides a kvshard symbol.
# In the plain build the same runs check live planning without leak checks.
# Usage: kvplan_live_asan_test.sh KVPLAN SUPPRESSIONS
set -uo pipefail
kvplan=$1
supp=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
work=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

if grep -qa __asan_init "$kvplan"; then
  echo "kvplan is built with AddressSanitizer: leak checks on, suppressions $supp"
else
  echo "kvplan is a plain build: live planning checked without leak checks"
fi
# Appended to what the suite set (.bazelrc), never replacing it.
export LSAN_OPTIONS="suppressions=$supp:fast_unwind_on_malloc=0:print_suppressions=1${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

# The suppressions name third-party functions only: none is defined by
# kvshard's code in kvplan.
if command -v nm >/dev/null; then
  defined=$(nm --defined-only "$kvplan" 2>/dev/null | awk '{print $3}' | sort -u)
  while read -r pattern; do
    name=${pattern#leak:}
    grep -qxF "$name" <<<"$defined" && fail "suppression $pattern names a symbol kvplan defines"
  done < <(grep -E '^leak:' "$supp")
fi

# run NAME ARGS...: kvplan with stdout and stderr kept; sets rc.
run() {
  local name=$1
  shift
  "$kvplan" "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  if grep -q "LeakSanitizer" "$work/$name.err"; then
    fail "$name: LeakSanitizer reported a leak"
    sed -n '/LeakSanitizer/,$p' "$work/$name.err" | head -n 40
  fi
  # Only suppressions from lsan.supp may have been used; print them.
  sed -n '/^Suppressions used:/,/^---/p' "$work/$name.err" | grep -E '^ +[0-9]' |
    sed "s/^/  $name: suppressed (count bytes frame): /"
}

run plan plan --budget 80GiB --json
if [ "$rc" -ne 0 ]; then
  fail "kvplan plan exited $rc"
  cat "$work/plan.err"
elif ! tail -n 1 "$work/plan.out" | jq -e 'type == "object"' >/dev/null; then
  fail "kvplan plan --json printed no JSON object"
  head -c 400 "$work/plan.out"
else
  echo "ok   kvplan plan: exit 0, $(wc -c <"$work/plan.out") bytes of JSON"
fi

run live plan --topology live --budget 80GiB
if [ "$rc" -eq 0 ]; then
  [ -s "$work/live.out" ] || fail "kvplan plan --topology live: exit 0 with an empty stdout"
  echo "ok   kvplan plan --topology live: exit 0 on this GPU machine"
elif [ "$rc" -eq 1 ] && grep -q "^kvplan plan: topology 'live' has no NVIDIA GPU" "$work/live.err"; then
  echo "ok   kvplan plan --topology live: exit 1, this machine has no NVIDIA GPU"
else
  fail "kvplan plan --topology live exited $rc"
  cat "$work/live.err"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures checks failed"
  exit 1
fi
echo "kvplan on the live topology: all checks pass"
