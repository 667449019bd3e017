#!/bin/bash
# kvsim over N ranks: thousands of steps, every rank's digest agrees with
# the leader's, every rank's pool passes its integrity check, one
# collective per step for bindings, 16 bytes per bound or freed page.
# Usage: kvsim_ranks_test.sh KVSIM NP TP PP STEPS BACKEND
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 NP=$2 TP=$3 PP=$4 STEPS=${KVS_SHARD_STEPS:-$5} BACKEND=$6
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
CHECK_EVERY=16
ARGS=(--tp "$TP" --pp "$PP" --backend "$BACKEND" --steps "$STEPS" --seed 11 --json
      --check-every "$CHECK_EVERY" --timeout-ms 20000)
if [ "$BACKEND" = self ]; then
  timeout 300 "$KVSIM" "${ARGS[@]}" >"$OUT" 2>"$ERR"
else
  timeout 300 "${MPIRUN[@]}" -np "$NP" "$KVSIM" "${ARGS[@]}" >"$OUT" 2>"$ERR"
fi
rc=$?
[ $rc -eq 0 ] || fail "kvsim exited $rc"

# The contract: one JSON object, last line, exactly these keys.
json_check 'keys == (["binds","bytes_per_step","collectives_per_step","digest","digests_agree","frees","ranks","steps","steps_per_s"])'
json_check ".ranks == $NP and .steps == $STEPS and .digests_agree == true"
json_check '.binds > 100 and .frees > 100 and .steps_per_s > 0'
json_check '.digest | test("^[0-9a-f]{16}$")'
# Bindings: one collective per step, plus one allreduce per check.
json_check "(.collectives_per_step - (1 + ((${STEPS} / ${CHECK_EVERY}) | floor) / ${STEPS})) | fabs < 0.0001"
# Payload: a 48-byte header plus 16 bytes per bound or freed page.
json_check "(.bytes_per_step - (48 + 16 * (.binds + .frees) / .steps)) | fabs < 0.01"

# Every rank reports integrity and the leader's digest.
digest=$(json_get .digest)
for ((r = 0; r < NP; r++)); do
  grep -q "^kvsim: rank $r: integrity ok after $STEPS steps, digest $digest\$" "$ERR" ||
    fail "rank $r did not report integrity with digest $digest"
done
# Each rank reported how far its budget was from the agreed page count.
[ "$(grep -c 'holds [0-9]* pages alone; agreed' "$ERR")" -eq "$NP" ] || fail "budget lines"
# The workload really exercised admission refusal and completions (1 stage).
if [ "$PP" = 1 ]; then
  grep -Eq '[1-9][0-9]* refusals \(pool full\)' "$OUT" "$ERR" || fail "no admission was refused"
fi
echo "PASS: $NP ranks (tp $TP x pp $PP, $BACKEND): $(tail -n 1 "$OUT")"
