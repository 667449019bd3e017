#!/usr/bin/env bash
# Writes RELIABILITY.md from the last runs of tools/test.sh (a plain and an
# ASan + UBSan `bazel test //...`): tests passed, skipped and failed per
# build, per target and per case; pool operations checked; power-loss
# crash states explored and SIGKILLs survived; fuzz inputs run and inputs
# past parsing per target; divergences detected and where they were
# located; failure drills and which exit path their survivors took; leaks.
# Every figure is read from what the runs printed: nothing here is typed in
# by hand, and a skip is never counted as a pass. Bazel's own summary
# ("Executed 82 out of 82 tests: 82 tests pass") counts a target whose every
# case skipped as passed; the counts this script prints on stdout, and the
# table, do not (80 passed, 2 skipped is not "82 of 82 pass"): quote those.
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

# totals ROWS: "targets passed skipped failed cases passed skipped failed
# partly-skipped" (partly-skipped: targets that passed with some cases
# skipped).
totals() {
  awk -F'\t' '$1 != "" {
      t++; v[$2]++; c += $4; cs += $5; cf += $6
      if ($2 == "passed" && $5 > 0) partly++
    } END {
      printf "%d %d %d %d %d %d %d %d %d\n", t, v["passed"], v["skipped"], v["failed"],
        c, c - cs - cf, cs, cf, partly
    }' <<<"$1"
}
read -r p_t p_pass p_skip p_fail p_c p_cpass p_cskip p_cfail p_partly < <(totals "$plain_rows")
read -r a_t a_pass a_skip a_fail a_c a_cpass a_cskip a_cfail a_partly < <(totals "$asan_rows")

# targets_cell PASS SKIP FAIL TOTAL PARTLY: the targets row of one build.
targets_cell() {
  local s="$1 / $2 / $3 of $4"
  [ "$5" -gt 0 ] && s="$s ($5 of the $1 passed skipped some of their cases)"
  echo "$s"
}

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
  # The planted leaks below are reported into files of their own tests'
  # scratch space, not their logs: a report in a log is a leak.
  leak_logs=$(lines "$asan_logs" 'ERROR: LeakSanitizer' | wc -l)
  if [ "$leak_logs" -eq 0 ]; then
    leaks="0 reported by LeakSanitizer"
  else
    leaks="$leak_logs LeakSanitizer reports"
  fi
  # That the leak checker was on: a planted leak, run as the suite runs its
  # processes, was reported.
  planted=()
  lines "$asan_logs" '^the leak check finds a planted leak' | grep -q . &&
    planted+=("one process and 4 MPI ranks (planted_leak_test)")
  lines "$asan_logs" '^\[       OK \] KvplanASan\.live_children_keep_leak_detection' | grep -q . &&
    planted+=("kvplan's live children (kvplan_test)")
  if [ ${#planted[@]} -gt 0 ]; then
    leaks="$leaks; a planted leak was reported in $(printf '%s, ' "${planted[@]}" | sed 's/, $//')"
  else
    leaks="$leaks; no planted leak was reported (the leak checker may have been off)"
  fi
fi

# The drills' exit paths (tests/shard/kvsim_failure_test.sh): every drill
# run, and those whose survivors left through kvshard's own deadline (the
# plain kill ends through Open MPI's teardown of the job instead).
drills_run() { count "$1" '^PASS: (kill|stall|kill-recovery|kill-threads) of rank'; }
drills_own_deadline() { count "$1" "^reliability: drill [a-z-]+: .* left through kvshard's own deadline"; }
drills_named() { count "$1" "^reliability: drill [a-z-]+: .*every survivor left through kvshard's own deadline naming the collective and rank"; }
# The planted bugs' targets run (tests/mutants), caught or not.
mutants_run() { awk -F'\t' '$1 ~ /^\/\/tests\/mutants:/' <<<"$1" | grep -c . || true; }
# Divergences: detected with their page or request slot located; the rank
# is named only when the flip was on a follower (a flip on the leader is
# reported as the first follower that differs from it).
divergences_located() { count "$1" '^PASS: (page [0-9]+ flipped|request [0-9]+ moved)'; }
divergences_rank_named() {
  count "$1" '^PASS: (page [0-9]+ flipped on rank [1-9][0-9]*|request [0-9]+ moved from slot [0-9]+ to [0-9]+ on rank [1-9][0-9]*) '
}
divergences_on_leader() {
  count "$1" '^PASS: (page [0-9]+ flipped on rank 0|request [0-9]+ moved from slot [0-9]+ to [0-9]+ on rank 0) '
}

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
  echo "| test targets passed / skipped / failed | $(targets_cell "$p_pass" "$p_skip" "$p_fail" "$p_t" "$p_partly") | $(targets_cell "$a_pass" "$a_skip" "$a_fail" "$a_t" "$a_partly") |"
  echo "| test cases passed / skipped / failed | $p_cpass / $p_cskip / $p_cfail of $p_c | $a_cpass / $a_cskip / $a_cfail of $a_c |"
  echo "| window-pool binds and frees checked (property tests) | $(figure "$plain_logs" 'reliability: pool_ops ([0-9]+)') | $(figure "$asan_logs" 'reliability: pool_ops ([0-9]+)') |"
  echo "| window-pool operations on 8 MPI ranks (soak) | $(figure "$plain_logs" 'reliability: soak_pool_ops ([0-9]+)') | $(figure "$asan_logs" 'reliability: soak_pool_ops ([0-9]+)') |"
  echo "| prefix-cache schedules searched for a hit taken on blocks other than its match found (none was) | $(figure "$plain_logs" 'reliability: hit_schedules ([0-9]+)') | $(figure "$asan_logs" 'reliability: hit_schedules ([0-9]+)') |"
  echo "| of their uses of a hit whose block had left the index, refused (all were) | $(figure "$plain_logs" 'reliability: hit_schedules [0-9]+, stale uses refused ([0-9]+)') | $(figure "$asan_logs" 'reliability: hit_schedules [0-9]+, stale uses refused ([0-9]+)') |"
  echo "| of their exact uses of a tail another request was re-prefilling, refused (all were) | $(figure "$plain_logs" 'reliability: hit_schedules [0-9]+, stale uses refused [0-9]+, exact uses of a tail being re-prefilled refused ([0-9]+)') | $(figure "$asan_logs" 'reliability: hit_schedules [0-9]+, stale uses refused [0-9]+, exact uses of a tail being re-prefilled refused ([0-9]+)') |"
  echo "| refused prefix inserts and fetches whose whole pool was compared before and after (none changed it) | $(figure "$plain_logs" 'reliability: refused prefix calls compared whole ([0-9]+)') | $(figure "$asan_logs" 'reliability: refused prefix calls compared whole ([0-9]+)') |"
  echo "| impossible prefix entries in a replayed step, refused with the follower unchanged | $(figure "$plain_logs" 'reliability: impossible prefix entries refused ([0-9]+)') | $(figure "$asan_logs" 'reliability: impossible prefix entries refused ([0-9]+)') |"
  echo "| kvs_plan_run calls from 8 threads at once, compared with the same run alone | $(figure "$plain_logs" 'reliability: concurrent plan runs ([0-9]+)') | $(figure "$asan_logs" 'reliability: concurrent plan runs ([0-9]+)') |"
  echo "| of those, answered otherwise (none should) | $(figure "$plain_logs" 'reliability: concurrent plan runs [0-9]+ .* ([0-9]+) answered otherwise') | $(figure "$asan_logs" 'reliability: concurrent plan runs [0-9]+ .* ([0-9]+) answered otherwise') |"
  echo "| power-loss crash states of the block store explored | $(figure "$plain_logs" '^power loss: ([0-9]+) crash states explored') | $(figure "$asan_logs" '^power loss: ([0-9]+) crash states explored') |"
  echo "| SIGKILLs of a writer survived by the block store | $(figure "$plain_logs" '^crash test: ([0-9]+) kills survived') | $(figure "$asan_logs" '^crash test: ([0-9]+) kills survived') |"
  echo "| puts that returned and were intact after the kills | $(figure "$plain_logs" 'kills survived, ([0-9]+) puts returned') | $(figure "$asan_logs" 'kills survived, ([0-9]+) puts returned') |"
  echo "| fuzz inputs run, all targets | $(figure "$plain_logs" '^kvs_fuzz: [a-z_]+: ([0-9]+) inputs run') | $(figure "$asan_logs" '^kvs_fuzz: [a-z_]+: ([0-9]+) inputs run') |"
  echo "| fuzz inputs past parsing, all targets | $(figure "$plain_logs" '^kvs_fuzz: [a-z_]+: [0-9]+ inputs run, ([0-9]+) past parsing') | $(figure "$asan_logs" '^kvs_fuzz: [a-z_]+: [0-9]+ inputs run, ([0-9]+) past parsing') |"
  echo "| injected divergences detected, their page or request slot located | $(divergences_located "$plain_logs") | $(divergences_located "$asan_logs") |"
  echo "| of those injected on a follower, the flipped rank named | $(divergences_rank_named "$plain_logs") | $(divergences_rank_named "$asan_logs") |"
  echo "| of those injected on the leader (reported naming the first follower that differs, not the leader) | $(divergences_on_leader "$plain_logs") | $(divergences_on_leader "$asan_logs") |"
  echo "| rank failure drills run (a rank killed or stalled; the job ended within the bound) | $(drills_run "$plain_logs") | $(drills_run "$asan_logs") |"
  echo "| of those, drills whose survivors left through kvshard's own deadline (not Open MPI's teardown) | $(drills_own_deadline "$plain_logs") | $(drills_own_deadline "$asan_logs") |"
  echo "| of those, drills where every survivor left through it naming the collective and the dead rank | $(drills_named "$plain_logs") | $(drills_named "$asan_logs") |"
  echo "| planted bugs caught by the test named for them (tests/mutants: the mutant build fails, the unmutated test passes) | $(count "$plain_logs" '^reliability: mutant [a-z0-9_]+ caught by') of $(mutants_run "$plain_rows") | $(count "$asan_logs" '^reliability: mutant [a-z0-9_]+ caught by') of $(mutants_run "$asan_rows") |"
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
  off=$(grep -rlE 'detect_leaks=(0|false)' .bazelrc tests tools 2>/dev/null |
    grep -v '^tools/reliability-report.sh$' || true)
  if [ -n "$off" ]; then
    echo
    echo "These files turn leak checks off for the processes they start:"
    echo
    sed 's/^/- `/; s/$/`/' <<<"$off"
  else
    echo
    echo "No test turns leak checks off (no \`detect_leaks=0\` under tests/, tools/"
    echo "or .bazelrc): MPI ranks and kvplan's live runs are leak-checked with the"
    echo "suppressions above."
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
  lines "$plain_logs" '^(reliability: |power loss: [0-9]+ crash states|power loss: without|crash test: [0-9]+ kills (survived|asked)|PASS: page [0-9]+ flipped|PASS: request [0-9]+ moved|PASS: (kill|stall|kill-recovery|kill-threads) of rank)' | sort
  echo '```'
  echo
  echo "Longer runs (pass each with \`--test_env\` and a longer \`--test_timeout\`):"
  echo "\`KVS_FUZZ_SECONDS=600\`; \`KVS_CRASH_KILLS=3000\` (\`KVS_CRASH_SEED\` replays"
  echo "a schedule); \`KVS_POWER_PUTS=2000\` (\`KVS_POWER_SEED\` replays a"
  echo "workload); \`KVS_SOAK_OPS=10000000 KVS_SOAK_CHECK_EVERY=10000\`."
} >"$out"
# The counts to quote (commit messages, reports), as the table counts them.
summary() {  # summary NAME TOTALS...
  local name=$1 t=$2 pass=$3 skip=$4 fail=$5 c=$6 cpass=$7 cskip=$8 cfail=$9
  [ "$t" -gt 0 ] || { echo "$name: not run"; return; }
  echo "$name: $pass passed, $skip skipped, $fail failed of $t targets; $cpass passed, $cskip skipped, $cfail failed of $c cases"
}
summary "plain build" "$p_t" "$p_pass" "$p_skip" "$p_fail" "$p_c" "$p_cpass" "$p_cskip" "$p_cfail"
summary "ASan + UBSan build" "$a_t" "$a_pass" "$a_skip" "$a_fail" "$a_c" "$a_cpass" "$a_cskip" "$a_cfail"
echo "wrote $out"
