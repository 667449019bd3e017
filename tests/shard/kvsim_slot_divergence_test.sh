#!/bin/bash
# One rank's request slot is moved after step S (per-request rings, the
# default): the next check must find it on every rank by the same bisection
# as pages, name the slot with the request the leader and the rank hold
# there, and kvsim exits 3.
# Usage: kvsim_slot_divergence_test.sh KVSIM NP TP PP RANK:STEP CHECK_EVERY
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 NP=$2 TP=$3 PP=$4 INJECT=$5 CHECK_EVERY=$6
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
RANK=${INJECT%%:*} STEP=${INJECT##*:}
timeout 300 "${MPIRUN[@]}" -np "$NP" "$KVSIM" --tp "$TP" --pp "$PP" --steps 4000 --seed 5 \
  --json --check-every "$CHECK_EVERY" --inject-slot-divergence "$INJECT" --budget-mib 1000 \
  "${SMALL_SIZING[@]}" >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 3 ] || fail "kvsim exited $rc, expected 3 (divergence)"

inj=$(grep -E "^kvsim: rank $RANK injected a divergence after step $STEP: " "$ERR") ||
  fail "no injection line"
[[ $inj =~ request\ ([0-9]+)\ moved\ from\ request\ slot\ ([0-9]+)\ to\ ([0-9]+) ]] ||
  fail "cannot parse: $inj"
req=${BASH_REMATCH[1]} from=${BASH_REMATCH[2]} to=${BASH_REMATCH[3]}

det=$(grep -E "^kvsim: divergence detected at step [0-9]+: " "$ERR") || fail "no detection line"
[[ $det =~ at\ step\ ([0-9]+):.*request\ slot\ ([0-9]+)\ holds\ request\ ([0-9-]+)\ on\ the\ leader\ \(rank\ 0\)\ and\ request\ ([0-9-]+)\ on\ rank\ ([0-9]+) ]] ||
  fail "cannot parse: $det"
at=${BASH_REMATCH[1]} slot=${BASH_REMATCH[2]} lr=${BASH_REMATCH[3]} rr=${BASH_REMATCH[4]} drank=${BASH_REMATCH[5]}

# The lowest differing slot is one of the two the flip touched: the one
# the request left (the leader holds it there) or the one it took (the
# flipped rank holds it there). With every slot bound the flip is a swap,
# so the other side holds another request.
low=$((from < to ? from : to))
[ "$slot" = "$low" ] || fail "detected slot $slot, injected $from -> $to"
flipped=$rr
[ "$RANK" != 0 ] || flipped=$lr
if [ "$slot" = "$from" ]; then
  [ "$flipped" != "$req" ] || fail "slot $from still holds request $req on the flipped rank"
else
  [ "$flipped" = "$req" ] || fail "slot $to does not hold request $req on the flipped rank"
fi
if [ "$RANK" != 0 ]; then [ "$drank" = "$RANK" ] || fail "named rank $drank, injected $RANK"; fi
latency=$((at - STEP))
[ $latency -ge 0 ] && [ $latency -lt "$CHECK_EVERY" ] ||
  fail "detected at step $at, injected after step $STEP, checks every $CHECK_EVERY"
json_check ".digests_agree == false and .steps == $((at + 1))"
echo "PASS: request $req moved from slot $from to $to on rank $RANK after step $STEP," \
  "detected at step $at: $det"
