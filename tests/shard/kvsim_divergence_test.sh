#!/bin/bash
# One rank's binding is flipped after step S: the next check must detect
# it on every rank and name the flipped full page with the leader's and
# the rank's window pages; kvsim exits 3.
# Usage: kvsim_divergence_test.sh KVSIM NP TP PP RANK:STEP CHECK_EVERY
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 NP=$2 TP=$3 PP=$4 INJECT=$5 CHECK_EVERY=$6
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
RANK=${INJECT%%:*} STEP=${INJECT##*:}
# A roomy pool (1000 MiB per GPU): the flipped page's old window page is not
# handed out again before the next check, so the first differing page is
# the flipped one (a reuse would make a lower page differ first).
timeout 300 "${MPIRUN[@]}" -np "$NP" "$KVSIM" --tp "$TP" --pp "$PP" --steps 4000 --seed 5 \
  --json --check-every "$CHECK_EVERY" --inject-divergence "$INJECT" --budget-mib 1000 \
  "${SMALL_SIZING[@]}" >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 3 ] || fail "kvsim exited $rc, expected 3 (divergence)"

inj=$(grep -E "^kvsim: rank $RANK injected a divergence after step $STEP: " "$ERR") ||
  fail "no injection line"
[[ $inj =~ full\ page\ ([0-9]+)\ moved\ from\ window\ page\ ([0-9]+)\ to\ ([0-9]+) ]] ||
  fail "cannot parse: $inj"
page=${BASH_REMATCH[1]} from=${BASH_REMATCH[2]} to=${BASH_REMATCH[3]}

det=$(grep -E "^kvsim: divergence detected at step [0-9]+: " "$ERR") || fail "no detection line"
[[ $det =~ at\ step\ ([0-9]+):.*full\ page\ ([0-9]+)\ is\ window\ page\ ([0-9-]+)\ on\ the\ leader\ \(rank\ 0\)\ and\ window\ page\ ([0-9-]+)\ on\ rank\ ([0-9]+) ]] ||
  fail "cannot parse: $det"
at=${BASH_REMATCH[1]} dpage=${BASH_REMATCH[2]} lw=${BASH_REMATCH[3]} rw=${BASH_REMATCH[4]} drank=${BASH_REMATCH[5]}

[ "$dpage" = "$page" ] || fail "detected full page $dpage, injected $page"
if [ "$RANK" = 0 ]; then
  # The leader itself was flipped: every follower differs from it.
  [ "$lw" = "$to" ] && [ "$rw" = "$from" ] && [ "$drank" = 1 ] ||
    fail "leader flip reported as leader $lw / rank $drank $rw, injected $from -> $to"
else
  [ "$lw" = "$from" ] && [ "$rw" = "$to" ] && [ "$drank" = "$RANK" ] ||
    fail "reported leader $lw / rank $drank $rw, injected rank $RANK $from -> $to"
fi
# Detected at the next check: within one check interval of the injection.
latency=$((at - STEP))
[ $latency -ge 0 ] && [ $latency -lt "$CHECK_EVERY" ] ||
  fail "detected at step $at, injected after step $STEP, checks every $CHECK_EVERY"
json_check ".digests_agree == false and .steps == $((at + 1))"
echo "PASS: page $page flipped on rank $RANK after step $STEP, detected at step $at" \
  "(latency $latency steps): $det"
