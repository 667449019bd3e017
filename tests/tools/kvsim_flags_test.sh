#!/usr/bin/env bash
# kvsim and kvplan given IDENTICAL flags plan the same pool: every flag the
# two share means the same and defaults the same, so kvsim's `plan` is, key
# for key, what `kvplan plan --json` prints for the same flags with nothing
# added (kvsim's own flags, which say how long and how to run, aside). Then
# what kvsim refuses at setup rather than reporting later as a divergence or
# a pass: ranks launched with different workloads, and drills that cannot
# run.
#   kvsim_flags_test.sh KVSIM KVSIM_LOCAL KVPLAN
set -u
source tests/shard/common.sh
# Under ASan, LeakSanitizer's suppression counts would print after the
# tools' last line, which the error-last checks below read.
export LSAN_OPTIONS="$LSAN_OPTIONS:print_suppressions=0"
KVSIM=$1 KVSIM_LOCAL=$2 KVPLAN=$3
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
# kvsim's own flags: the run, not the plan.
RUN=(--steps 20 --seed 1 --device cpu --json)

# same NP FLAGS...: kvsim on NP ranks and kvplan, both given FLAGS.
same() {
  local np=$1
  shift
  run_mpi 300 -np "$np" "$KVSIM" "$@" "${RUN[@]}"
  [ $rc -eq 0 ] || fail "kvsim $* exited $rc"
  same_plan_as_kvplan "$KVPLAN" kvsim "$@"
  echo "same plan for: $* ($(json_get .plan.num_pages) pages)"
}

# The issue's case: tp 4 x pp 2 on the bundled server with one 12 GiB GPU
# (kvsim used to size its request slots from its workload, 17, where kvplan
# sizes 65 from --max-running), and with every GPU at 12 GiB.
ONE_SMALL=12GiB,80GiB,80GiB,80GiB,80GiB,80GiB,80GiB,80GiB
same 8 --topology bundled --tp 4 --pp 2 --budget-per-gpu "$ONE_SMALL"
json_check '.plan.num_pages == 60674 and .plan.request_slots == 65 and .max_running == 64'
same 8 --topology bundled --tp 4 --pp 2 --budget 12GiB
json_check '.plan.num_pages == 15490'
# The layout's defaults: one of --tp/--pp takes the rest (of kvplan's GPUs,
# of kvsim's ranks: the same where kvsim runs a rank per GPU); neither is
# kvplan's default (the whole machine as one group, here).
same 8 --topology bundled --tp 4 --budget 12GiB
json_check '.plan.tp == 4 and .plan.pp == 2'
same 8 --topology bundled --pp 2 --budget 12GiB
json_check '.plan.tp == 4 and .plan.pp == 2'
same 8 --topology bundled --budget 12GiB
json_check '.plan.tp == 8 and .plan.pp == 1'
# Every other flag the two share, each away from its default.
same 2 --topology tests/data/epyc-nps2-numa-per-pair-8gpu.xml --tp 2 --pp 1 --budget 10GiB \
  --max-running 32 --swa-ratio 0.2 --no-radix --state-rings hca-per-request --model dsv4-pro
same 2 --topology bundled --tp 1 --pp 2 --memory-ratio 0.5 --reserve 1GiB --radix \
  --state-rings per-page
same 2 --topology bundled --tp 2 --pp 1 --budget-per-gpu 9GiB,8GiB,7GiB,6GiB,5GiB,4GiB,4GiB,4GiB
# kvsim_local, the threads front end, too.
"$KVSIM_LOCAL" --topology bundled --tp 2 --pp 2 --budget 12GiB "${RUN[@]}" >"$OUT" 2>"$ERR" ||
  fail "kvsim_local exited $?"
same_plan_as_kvplan "$KVPLAN" kvsim_local --topology bundled --tp 2 --pp 2 --budget 12GiB

# --requests is the workload's, at most --max-running (the pool's).
expect 2 "--requests 65 is above --max-running 64" -- \
  "$KVSIM" --tp 1 --backend self "${RUN[@]}" --requests 65
expect 2 "--requests 17 is above --max-running 16" -- \
  "$KVSIM" --tp 1 --backend self "${RUN[@]}" --max-running 16 --requests 17
"$KVSIM" --tp 1 --backend self "${RUN[@]}" --max-running 8 >"$OUT" 2>"$ERR" ||
  fail "--max-running 8 without --requests exited $?"
json_check '.requests == 8 and .max_running == 8 and .plan.request_slots == 9'
expect 2 "--max-running needs a request count in [1, 65536], got '0'" -- \
  "$KVSIM" --tp 1 --backend self "${RUN[@]}" --max-running 0
expect 2 "--max-running is given twice" -- \
  "$KVSIM" --tp 1 --backend self "${RUN[@]}" --max-running 8 --max-running 8
expect 2 "give --radix or --no-radix, once" -- \
  "$KVSIM" --tp 1 --backend self "${RUN[@]}" --radix --no-radix

# Ranks launched with different workloads (MPMD) are refused at setup,
# naming the flag and the first rank that differs, before any step.
# workload NAME VALUE: the leader's workload flags, NAME set to VALUE.
workload() {
  local -A w=([--seed]=1 [--arrival-rate]=0.25 [--steps]=20 [--bare-broadcasts]=2 [--requests]=4)
  w[$1]=$2
  local k
  for k in "${!w[@]}"; do printf '%s %s ' "$k" "${w[$k]}"; done
}
for flag in "--seed 7" "--arrival-rate 0.5" "--steps 30" "--bare-broadcasts 3" "--requests 8"; do
  read -r name value <<<"$flag"
  read -r -a leader <<<"$(workload --seed 1)"
  read -r -a other <<<"$(workload "$name" "$value")"
  expect 2 "rank 1 was given $name $value, the leader $name" -- \
    "${MPIRUN[@]}" -np 1 "$KVSIM" --tp 2 --device cpu "${leader[@]}" : \
    -np 1 "$KVSIM" --tp 2 --device cpu "${other[@]}"
  grep -q "integrity ok" "$ERR" && fail "ranks with other $name ran"
done

# A divergence drill that cannot run is an error, not a run that agreed:
# one rank has no peer to differ from; nothing bound yet at its step.
expect 2 "a divergence drill needs a second rank to diverge from" -- \
  "$KVSIM" --tp 1 --backend self "${RUN[@]}" --inject-divergence 0:5
expect 2 "a divergence drill needs a second rank to diverge from" -- \
  "$KVSIM_LOCAL" --tp 1 "${RUN[@]}" --inject-slot-divergence 0:5
for drill in --inject-divergence --inject-slot-divergence; do
  expect 2 "the divergence drill did not run" -- \
    "$KVSIM_LOCAL" --tp 2 "${RUN[@]}" "$drill" 1:0
  grep -q "could not inject" "$ERR" || fail "$drill 1:0 did not say why it could not run"
  [ "$(tail -n 1 "$ERR" | grep -c 'the divergence drill did not run')" = 1 ] ||
    fail "the drill's error is not the last line: $(tail -n 1 "$ERR")"
  grep -q '"digests_agree"' "$OUT" && fail "$drill 1:0 printed a report"
done

# Errors a new user meets: the nearest flag, the error the last line.
expect 2 "unknown flag '--max-runing'; did you mean --max-running?" -- \
  "$KVSIM" --tp 1 --backend self "${RUN[@]}" --max-runing 4
[ "$(wc -l <"$ERR")" = 1 ] || fail "an unknown flag printed more than its line: $(cat "$ERR")"
expect 2 "kvsim: tp 3 x pp 1 = 3 ranks, but the group has 2; --tp can be 1 or 2" -- \
  "${MPIRUN[@]}" -np 2 "$KVSIM" --tp 3 "${RUN[@]}"
"$KVSIM" --help | grep -q '%%' && fail "kvsim --help prints a stray %%"
echo PASS
