#!/usr/bin/env bash
# Writes RELIABILITY.md from the last runs of tools/test.sh (a plain and an
# ASan + UBSan `bazel test //...`): tests passed, skipped and failed per
# build, per target and per case; pool operations checked; power-loss
# crash states explored and SIGKILLs survived; fuzz inputs run and inputs
# past parsing per target; divergences located; failure drills; leaks.
# Every figure is read from what the runs printed: nothing here is typed in
# by hand, and a skip is never counted as a pass.
#
# Sources: out/test-plain.log and out/test-asan.log (tools/test.sh keeps
# Bazel's output of each run there, with one summary line per target and
# its time), and each listed target's test.xml and test.log. Without those
# logs, every test.xml under the build's testlogs is taken, untimed.
#
# A target is skipped when every case it ran was skipped: GoogleTest's
# GTEST_SKIP, or, for a shell test, a line starting with "SKIPPED:" in its
# log (a shell test that cannot run here prints one and exits 0).
#
# Usage: tools/reliability-report.sh [OUTPUT]   (default RELIABILITY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-RELIABILITY.md}

plain_dir=bazel-out/k8-fastbuild/testlogs
asan_dir=bazel-out/k8-fastbuildasan/testlogs
plain_log=out/test-plain.log
asan_log=out/test-asan.log

# targets LOG DIR: "label status seconds" per test target of a run, from
# Bazel's summary lines (--test_summary=short), else from the testlogs.
targets() {
  local log=$1 dir=$2
  if [ -f "$log" ] && grep -qE '^//[^ ]+ +(\(cached\) )?[A-Z]' "$log"; then
    sed -nE 's#^(//[^ ]+) +(\(cached\) )?(PASSED|FAILED|FLAKY|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE|REMOTE FAILURE|SKIPPED)( in ([0-9.]+)s)?.*#\1 \3 \5#p' \
      "$log" | sed -E 's/ (NO|FAILED TO|REMOTE) (STATUS|BUILD|FAILURE)/ \1_\2/' |
      awk '{print $1, $2, ($3 == "" ? "-" : $3)}' | sort -u
  elif [ -d "$dir" ]; then
    find "$dir" -name test.xml | sort | while read -r xml; do
      local t=${xml#"$dir"/}
      t=${t%/test.xml}
      local status=PASSED
      grep -qE '<(failure|error)[ >]' "$xml" && status=FAILED
      echo "//${t%/*}:${t##*/} $status -"
    done
  fi
}

# cases DIR LABEL: "total<TAB>skipped<TAB>failed<TAB>reason<TAB>names" for
# one target's cases (names: the skipped cases, comma-separated): from
# GoogleTest's XML when it has its cases, else the target as one case.
cases() {
  local dir=$1 label=$2
  local path=${label#//}
  path=$dir/${path%%:*}/${path#*:}
  local xml=$path/test.xml log=$path/test.log
  if [ -f "$xml" ] && grep -q 'result="skipped"\|<testcase .*classname=' "$xml"; then
    awk '
      function skip() { if (!sk[cur]) { skipped++; sk[cur] = 1; names = names sep name; sep = ", " } }
      /<testcase / {
        total++; cur = total; name = ""
        if (match($0, / name="[^"]*"/)) name = substr($0, RSTART + 7, RLENGTH - 8)
        if ($0 ~ /result="skipped"/) skip()
      }
      /<skipped[ >]/ { skip()
                       if (reason == "" && match($0, /message="[^"]*"/)) {
                         reason = substr($0, RSTART + 9, RLENGTH - 10) } }
      /<(failure|error)[ >]/ { if (!bad[cur]) { failed++; bad[cur] = 1 } }
      END {
        n = split(reason, parts, "&#x0A;"); r = parts[n]
        gsub(/&quot;/, "\"", r); gsub(/&apos;/, "'"'"'", r); gsub(/&lt;/, "<", r)
        gsub(/&gt;/, ">", r); gsub(/&amp;/, "\\&", r); gsub(/\t/, " ", r)
        printf "%d\t%d\t%d\t%s\t%s\n", total, skipped, failed, r, names
      }' "$xml"
  else
    local failed=0 skipped=0 reason="" names=""
    if [ -f "$xml" ] && grep -qE '<(failure|error)[ >]' "$xml"; then failed=1; fi
    if [ -f "$log" ] && grep -qE '^SKIPPED:' "$log"; then
      skipped=1
      reason=$(grep -m1 -E '^SKIPPED:' "$log" | sed -E 's/^SKIPPED: *//' | tr '\t' ' ')
      names="(the whole target)"
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' 1 "$skipped" "$failed" "$reason" "$names"
  fi
}

# classify LOG DIR: per target "label verdict seconds total skipped failed
# reason names" (tab-separated), verdict one of passed, skipped, failed.
classify() {
  local log=$1 dir=$2
  targets "$log" "$dir" | while read -r label status seconds; do
    local total skipped failed reason names verdict
    IFS=$'\t' read -r total skipped failed reason names < <(cases "$dir" "$label")
    if [ "$status" != PASSED ] || [ "$failed" -gt 0 ]; then
      verdict=failed
    elif [ "$skipped" -ge "$total" ]; then
      verdict=skipped
    else
      verdict=passed
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$verdict" "$seconds" "$total" \
      "$skipped" "$failed" "$reason" "$names"
  done
}

plain_rows=$(classify "$plain_log" "$plain_dir")
asan_rows=$(classify "$asan_log" "$asan_dir")

# totals ROWS: "targets passed skipped failed cases passed skipped failed"
totals() {
  awk -F'\t' '$1 != "" {
      t++; v[$2]++; c += $4; cs += $5; cf += $6
    } END {
      printf "%d %d %d %d %d %d %d %d\n", t, v["passed"], v["skipped"], v["failed"],
        c, c - cs - cf, cs, cf
    }' <<<"$1"
}
read -r p_t p_pass p_skip p_fail p_c p_cpass p_cskip p_cfail < <(totals "$plain_rows")
read -r a_t a_pass a_skip a_fail a_c a_cpass a_cskip a_cfail < <(totals "$asan_rows")

# logs ROWS DIR: the test.log of every target of a run.
logs() {
  cut -f1 <<<"$1" | while read -r label; do
    [ -n "$label" ] || continue
    local path=${label#//}
    path=$2/${path%%:*}/${path#*:}/test.log
    [ -f "$path" ] && echo "$path"
  done
}
plain_logs=$(logs "$plain_rows" "$plain_dir")
asan_logs=$(logs "$asan_rows" "$asan_dir")

# lines LOGS REGEX: the matching lines of a run's logs.
lines() {
  [ -n "$1" ] || return 0
  xargs -d '\n' grep -hE "$2" <<<"$1" 2>/dev/null || true
}

# sum LOGS REGEX: the sum of the first group of REGEX over a run's lines.
sum() {
  lines "$1" "$2" | sed -E "s/.*$2.*/\1/" | awk '{s += $1} END {print s + 0}'
}

# figure LOGS REGEX: the sum, or "not run" when no line matched.
figure() {
  if [ -z "$(lines "$1" "$2")" ]; then echo "not run"; else sum "$1" "$2"; fi
}

count() {
  lines "$1" "$2" | wc -l
}

fuzz_cell() {  # fuzz_cell LOGS TARGET: "run / past (percent)" of the fuzzing phase
  local l
  l=$(lines "$1" "^kvs_fuzz: $2: " | tail -n 1)
  if [ -z "$l" ]; then
    echo "not run"
    return
  fi
  local run past
  run=$(sed -E 's/.*: ([0-9]+) inputs run.*/\1/' <<<"$l")
  past=$(sed -E 's/.* ([0-9]+) past parsing.*/\1/' <<<"$l")
  awk -v r="$run" -v p="$past" 'BEGIN { printf "%d / %d (%.1f%%)", r, p, r ? 100 * p / r : 0 }'
}

leaks="not measured (no ASan run found)"
if [ "$a_t" -gt 0 ]; then
  leak_logs=$(lines "$asan_logs" 'ERROR: LeakSanitizer' | wc -l)
  if [ "$leak_logs" -eq 0 ]; then
    leaks="0 reported by LeakSanitizer"
  else
    leaks="$leak_logs LeakSanitizer reports"
  fi
fi

cell() {  # cell ROWS LABEL: one target's verdict, cases and time in a run
  awk -F'\t' -v l="$2" '$1 == l {
      s = $2
      if ($4 > 1 || $5 > 0) s = s ", " $4 - $5 - $6 " of " $4 " cases passed"
      if ($5 > 0) s = s ", " $5 " skipped"
      if ($6 > 0) s = s ", " $6 " failed"
      if ($3 != "-") s = s ", " $3 " s"
      print s; found = 1
    } END { if (!found) print "not run" }' <<<"$1"
}

{
  echo "# Reliability figures"
  echo
  echo "Generated by \`tools/reliability-report.sh\` from the logs of the last"
  echo "runs of \`tools/test.sh\` on $(date -u +%Y-%m-%d) ($(uname -m), $(nproc) cores)."
  echo "Do not edit by hand: rerun the tests and the script. Every figure is read"
  echo "from what the tests printed; a skipped test or case is never counted as"
  echo "passed."
  echo
  echo "| figure | plain build | ASan + UBSan build |"
  echo "|---|---|---|"
  echo "| test targets passed / skipped / failed | $p_pass / $p_skip / $p_fail of $p_t | $a_pass / $a_skip / $a_fail of $a_t |"
  echo "| test cases passed / skipped / failed | $p_cpass / $p_cskip / $p_cfail of $p_c | $a_cpass / $a_cskip / $a_cfail of $a_c |"
  echo "| window-pool binds and frees checked (property tests) | $(figure "$plain_logs" 'reliability: pool_ops ([0-9]+)') | $(figure "$asan_logs" 'reliability: pool_ops ([0-9]+)') |"
  echo "| window-pool operations on 8 MPI ranks (soak) | $(figure "$plain_logs" 'reliability: soak_pool_ops ([0-9]+)') | $(figure "$asan_logs" 'reliability: soak_pool_ops ([0-9]+)') |"
  echo "| power-loss crash states of the block store explored | $(figure "$plain_logs" '^power loss: ([0-9]+) crash states explored') | $(figure "$asan_logs" '^power loss: ([0-9]+) crash states explored') |"
  echo "| SIGKILLs of a writer survived by the block store | $(figure "$plain_logs" '^crash test: ([0-9]+) kills survived') | $(figure "$asan_logs" '^crash test: ([0-9]+) kills survived') |"
  echo "| puts that returned and were intact after the kills | $(figure "$plain_logs" 'kills survived, ([0-9]+) puts returned') | $(figure "$asan_logs" 'kills survived, ([0-9]+) puts returned') |"
  echo "| fuzz inputs run, all targets | $(figure "$plain_logs" '^kvs_fuzz: [a-z_]+: ([0-9]+) inputs run') | $(figure "$asan_logs" '^kvs_fuzz: [a-z_]+: ([0-9]+) inputs run') |"
  echo "| fuzz inputs past parsing, all targets | $(figure "$plain_logs" '^kvs_fuzz: [a-z_]+: [0-9]+ inputs run, ([0-9]+) past parsing') | $(figure "$asan_logs" '^kvs_fuzz: [a-z_]+: [0-9]+ inputs run, ([0-9]+) past parsing') |"
  echo "| injected divergences detected and located (pages, request slots) | $(count "$plain_logs" '^PASS: (page [0-9]+ flipped|request [0-9]+ moved)') | $(count "$asan_logs" '^PASS: (page [0-9]+ flipped|request [0-9]+ moved)') |"
  echo "| killed or stalled ranks whose peers exited in bound | $(count "$plain_logs" '^PASS: (kill|stall|kill-recovery|kill-threads) of rank') | $(count "$asan_logs" '^PASS: (kill|stall|kill-recovery|kill-threads) of rank') |"
  echo "| of those, drills where every survivor left through kvshard's own timeout naming the dead rank | $(count "$plain_logs" '^reliability: drill kill-(recovery|threads):') | $(count "$asan_logs" '^reliability: drill kill-(recovery|threads):') |"
  echo "| hostile inputs replayed and refused as documented (tests/tools/hostile_cases.txt) | $(figure "$plain_logs" 'hostile inputs replayed [0-9]+, refused as documented ([0-9]+)') of $(figure "$plain_logs" 'hostile inputs replayed ([0-9]+)') | $(figure "$asan_logs" 'hostile inputs replayed [0-9]+, refused as documented ([0-9]+)') of $(figure "$asan_logs" 'hostile inputs replayed ([0-9]+)') |"
  echo "| leaks | - | $leaks |"
  echo
  echo "## Fuzz targets"
  echo
  echo "Inputs run and inputs that got past parsing into kvshard's own code,"
  echo "in the timed fuzzing phase (the corpus replay before it is not counted)."
  echo
  echo "| target | past parsing means | plain: run / past | ASan: run / past |"
  echo "|---|---|---|---|"
  lines "$plain_logs"$'\n'"$asan_logs" '^kvs_fuzz: ' | sed -E 's/^kvs_fuzz: ([a-z_]+): [0-9]+ inputs run, [0-9]+ past parsing \((.*)\)$/\1\t\2/' |
    sort -u -t$'\t' -k1,1 | while IFS=$'\t' read -r name meaning; do
    echo "| \`$name\` | $meaning | $(fuzz_cell "$plain_logs" "$name") | $(fuzz_cell "$asan_logs" "$name") |"
  done
  echo
  echo "## Skipped"
  echo
  echo "Per target and per case, in either build; a skip is not a pass."
  echo
  skipped=$(awk -F'\t' '$5 > 0 {print}' <<<"$plain_rows"$'\n'"$asan_rows" | cut -f1,5,7,8 | sort -u)
  if [ -z "$skipped" ]; then
    echo "Nothing was skipped."
  else
    echo "| target | cases skipped | reason | cases |"
    echo "|---|---|---|---|"
    while IFS=$'\t' read -r label n reason names; do
      echo "| \`$label\` | $n | ${reason:-(none given)} | $names |"
    done <<<"$skipped"
  fi
  echo
  echo "## Leak checking"
  echo
  echo "LeakSanitizer runs in every process of the ASan build. Third-party"
  echo "start-up allocations that become unreachable only when their library is"
  echo "unloaded are suppressed by \`tests/tools/lsan.supp\` in the processes that"
  echo "load them; what it suppressed in this run:"
  echo
  echo '```'
  supp=$(lines "$asan_logs" 'suppressed \(count bytes frame\)' | sed -E 's/^ +//' | sort | uniq -c)
  echo "${supp:-(no suppressed allocation reported)}"
  echo '```'
  if grep -q 'detect_leaks=0' tests/shard/common.sh 2>/dev/null; then
    echo
    echo "Processes that mpirun starts (tests/shard/common.sh) still run with leak"
    echo "checks off; the same runtime code is leak-checked in-process (kvsim on"
    echo "the self backend, the runtime over the loopback backend)."
  fi
  echo
  echo "## Every target"
  echo
  echo "| target | plain build | ASan + UBSan build |"
  echo "|---|---|---|"
  cut -f1 <<<"$plain_rows"$'\n'"$asan_rows" | grep -v '^$' | sort -u | while read -r label; do
    echo "| \`$label\` | $(cell "$plain_rows" "$label") | $(cell "$asan_rows" "$label") |"
  done
  echo
  echo "## Detail (plain run)"
  echo
  echo '```'
  lines "$plain_logs" '^(reliability: |power loss: [0-9]+ crash states|power loss: without|crash test: [0-9]+ kills (survived|asked)|PASS: page [0-9]+ flipped|PASS: (kill|stall|kill-recovery|kill-threads) of rank)' | sort
  echo '```'
  echo
  echo "Longer runs (pass each with \`--test_env\` and a longer \`--test_timeout\`):"
  echo "\`KVS_FUZZ_SECONDS=600\`; \`KVS_CRASH_KILLS=3000\` (\`KVS_CRASH_SEED\` replays"
  echo "a schedule); \`KVS_POWER_PUTS=2000\` (\`KVS_POWER_SEED\` replays a"
  echo "workload); \`KVS_SOAK_OPS=10000000 KVS_SOAK_CHECK_EVERY=10000\`."
} >"$out"
echo "wrote $out"
