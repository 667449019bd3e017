#!/bin/bash
# kvsim over N ranks on the node: thousands of steps, every rank's digest
# and ring contexts agree with the leader's, every rank's pool and tables
# pass their checks, one collective per step for bindings, 16 bytes per
# bound or freed page, and the plan every rank ran is, key for key, the one
# `kvplan plan --json` prints for the same topology, layout and budgets.
# Usage: kvsim_ranks_test.sh KVSIM KVPLAN NP TP PP STEPS BACKEND TOPOLOGY
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 KVPLAN=$2 NP=$3 TP=$4 PP=$5 STEPS=${KVS_SHARD_STEPS:-$6} BACKEND=$7 TOPOLOGY=$8
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
CHECK_EVERY=16
# Eight GPUs (every test topology has eight), budgets skewed per GPU so
# the agreement and the split have work to do.
BUDGETS=600MiB,590MiB,580MiB,570MiB,600MiB,590MiB,580MiB,570MiB
ARGS=(--tp "$TP" --pp "$PP" --backend "$BACKEND" --steps "$STEPS" --seed 11 --json
      --check-every "$CHECK_EVERY" --timeout-ms 20000 --topology "$TOPOLOGY"
      --budget-per-gpu "$BUDGETS" --device cpu "${SMALL_SIZING[@]}")
if [ "$BACKEND" = self ]; then
  timeout 300 "$KVSIM" "${ARGS[@]}" >"$OUT" 2>"$ERR"
  rc=$?
else
  run_mpi 300 -np "$NP" "$KVSIM" "${ARGS[@]}"
fi
[ $rc -eq 0 ] || fail "kvsim exited $rc"

# The contract: one JSON object, last line, exactly these keys.
json_check 'keys == (["backend","bare_broadcast_us","binds","bytes_per_step","collectives_per_step","device","digest","digests_agree","frees","max_running","plan","ranks","requests","ring_ctx_digest_agree","state_rings","step_over_bare_broadcast","step_us","steps","steps_per_s","time_us"])'
json_check ".ranks == $NP and .steps == $STEPS and .digests_agree == true"
json_check '.ring_ctx_digest_agree == true and .device == "cpu"'
json_check '.binds > 100 and .frees > 100 and .steps_per_s > 0'
json_check '.digest | test("^[0-9a-f]{16}$")'
json_check '.time_us | keys == (["apply","broadcast","digest","mirror","ring_ctx","schedule"])'
json_check '.step_us > 0 and .time_us.ring_ctx > 0'
# Bindings: one collective per step, plus one allreduce per check.
json_check "(.collectives_per_step - (1 + ((${STEPS} / ${CHECK_EVERY}) | floor) / ${STEPS})) | fabs < 0.0001"
# Payload: a 48-byte header plus 16 bytes per bound or freed page.
json_check "(.bytes_per_step - (48 + 16 * (.binds + .frees) / .steps)) | fabs < 0.01"

# The plan kvsim ran is kvplan's for the same flags.
same_plan_as_kvplan "$KVPLAN" kvsim --topology "$TOPOLOGY" --tp "$TP" --pp "$PP" \
  --budget-per-gpu "$BUDGETS" "${SMALL_SIZING[@]}"
json_check ".plan.ranks | length == 8"

# Every rank reports integrity and the leader's digest.
digest=$(json_get .digest)
for ((r = 0; r < NP; r++)); do
  grep -q "^kvsim: rank $r: integrity ok after $STEPS steps, digest $digest\$" "$ERR" ||
    fail "rank $r did not report integrity with digest $digest"
  # Each rank ran its plan rank's layers on its plan rank's GPU.
  layers=$(json_get ".plan.ranks[$r] | \"layers [\(.layers[0]), \(.layers[1] + 1)), GPU \(.gpu.index) \(.gpu.pci_busid)\"")
  grep "^kvsim: rank $r (" "$ERR" | grep -qF "$layers" || fail "rank $r did not run $layers"
done
# Each rank reported how far its budget was from the agreed page count.
[ "$(grep -c 'holds [0-9]* pages alone; agreed' "$ERR")" -eq "$NP" ] || fail "budget lines"
# The workload really exercised admission refusal and completions (1 stage).
if [ "$PP" = 1 ]; then
  grep -Eq '[1-9][0-9]* refusals \(pool full\)' "$OUT" "$ERR" || fail "no admission was refused"
fi
echo "PASS: $NP ranks (tp $TP x pp $PP, $BACKEND, $TOPOLOGY): $(tail -n 1 "$OUT" | jq -c 'del(.plan)')"
