#!/bin/bash
# A cluster simulated on one machine: 16 ranks as 2 nodes of the bundled
# 8-GPU server (tp 8 x pp 2). Every rank runs on its plan rank's GPU and
# node, TP groups inside a node, stage 0 on node 0 and stage 1 on node 1;
# the binding broadcast stays one collective per step for the whole world;
# every digest agrees; the plan is kvplan's for --nodes 2. Then a divergence
# injected on a rank of node 1 is located. Oversubscribed and kept short.
# Usage: kvsim_nodes_test.sh KVSIM KVPLAN
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 KVPLAN=$2
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
# Collective deadlines far above what a step of 16 oversubscribed ranks
# needs on a loaded 2-core machine under ASan (a whole run takes about 16 s
# there): no healthy rank may time out first and change what is checked.
# A failed run's stderr and stdout are kept in the undeclared outputs.
TIMEOUT_MS=120000 KILL_TIMEOUT_MS=50000
STEPS=${KVS_SHARD_STEPS:-300}
ARGS=(--tp 8 --pp 2 --nodes 2 --topology bundled --steps "$STEPS" --seed 3 --json
      --check-every 16 --timeout-ms "$TIMEOUT_MS" --budget-per-gpu "$(printf '600MiB,%.0s' {1..16} | sed 's/,$//')"
      --device cpu "${SMALL_SIZING[@]}")
run_mpi 300 -np 16 "$KVSIM" "${ARGS[@]}"
[ $rc -eq 0 ] || fail "kvsim exited $rc"
json_check '.ranks == 16 and .digests_agree == true and .ring_ctx_digest_agree == true'
json_check '.plan.nodes | length == 2 and all(.gpus == 8)'
json_check '[.plan.ranks[] | "\(.node):\(.pp_stage)"] | unique == ["0:0", "1:1"]'
json_check '[.plan.ranks[] | select(.tp_rank == 0) | .node] == [0, 1]'
json_check ".collectives_per_step - (1 + (($STEPS / 16) | floor) / $STEPS) | fabs < 0.0001"
same_plan_as_kvplan "$KVPLAN" kvsim --topology bundled --nodes 2 --tp 8 --pp 2 \
  --budget-per-gpu "$(printf '600MiB,%.0s' {1..16} | sed 's/,$//')" "${SMALL_SIZING[@]}"
for ((r = 0; r < 16; r++)); do
  grep -q "^kvsim: rank $r (.*node $((r / 8)), " "$ERR" || fail "rank $r is not on node $((r / 8))"
done

# Two different machines as a topology list: the plan is kvplan's for it.
LIST=bundled,topology/data/hgx-h200-2socket-8gpu.xml
run_mpi 300 -np 16 "$KVSIM" --tp 4 --pp 4 --topology "$LIST" --steps "$STEPS" --seed 4 --json \
  --check-every 16 --timeout-ms "$TIMEOUT_MS" --budget-mib 600 --device cpu "${SMALL_SIZING[@]}"
[ $rc -eq 0 ] || fail "kvsim over a topology list exited $rc"
json_check '.digests_agree == true and (.plan.nodes | map(.label)) == ["bundled 8-GPU server (2 sockets x 4 H200, 4 NVSwitch)", "topology/data/hgx-h200-2socket-8gpu.xml"]'
json_check '[.plan.ranks[] | "\(.node):\(.pp_stage)"] | unique == ["0:0", "0:1", "1:2", "1:3"]'

# Two machines that discover themselves: ranks 0-7 name host gpu-a and read
# the bundled server, ranks 8-15 name gpu-b and read another 8-GPU machine;
# no rank is told the other's topology. The plan is kvplan's for the list
# of both (labels aside: the gathered nodes are named by host).
EPYC=tests/data/epyc-nps2-numa-per-pair-8gpu.xml
AS_HOST=$TEST_TMPDIR/as_host.sh
cat >"$AS_HOST" <<'WRAP'
#!/bin/bash
# as_host.sh "HOST per rank" "TOPOLOGY per rank" KVSIM ARGS...: this rank's
# host name and topology by its Open MPI rank.
read -r -a hosts <<<"$1"
read -r -a topos <<<"$2"
shift 2
r=$OMPI_COMM_WORLD_RANK
exec "$1" --host "${hosts[$r]}" --topology "${topos[$r]}" "${@:2}"
WRAP
chmod +x "$AS_HOST"
blocks() { printf "$1 %.0s" {1..8}; printf "$2 %.0s" {1..8}; }
PER_GPU=$(printf '600MiB,%.0s' {1..16} | sed 's/,$//')
GATHER_ARGS=(--tp 4 --pp 4 --steps "$STEPS" --seed 5 --json --check-every 16 --timeout-ms "$TIMEOUT_MS"
             --budget-per-gpu "$PER_GPU" --device cpu "${SMALL_SIZING[@]}")
run_mpi 300 -np 16 "$AS_HOST" "$(blocks gpu-a gpu-b)" "$(blocks bundled "$EPYC")" "$KVSIM" \
  "${GATHER_ARGS[@]}"
[ $rc -eq 0 ] || fail "kvsim over two discovered machines exited $rc"
json_check '.digests_agree == true and .ring_ctx_digest_agree == true'
json_check '(.plan.nodes | map(.label)) == ["gpu-a (bundled 8-GPU server (2 sockets x 4 H200, 4 NVSwitch))", "gpu-b ('"$EPYC"')"]'
json_check '[.plan.ranks[] | "\(.node):\(.pp_stage)"] | unique == ["0:0", "0:1", "1:2", "1:3"]'
"$KVPLAN" --topology "bundled,$EPYC" --tp 4 --pp 4 --budget-per-gpu "$PER_GPU" \
  "${SMALL_SIZING[@]}" --json >"$TEST_TMPDIR/kvplan.json" ||
  fail "kvplan over the list exited $?"
diff <(tail -n 1 "$OUT" | jq -S '.plan | del(.nodes[].label)') \
  <(jq -S 'del(.nodes[].label)' "$TEST_TMPDIR/kvplan.json") >"$TEST_TMPDIR/plan.diff" ||
  fail "the discovered plan differs from kvplan's for the list: $(head -n 20 "$TEST_TMPDIR/plan.diff")"
for ((r = 0; r < 16; r++)); do
  grep -q "^kvsim: rank $r (.*NUMA [0-9-]*, node $((r / 8)), " "$ERR" ||
    fail "rank $r is not on node $((r / 8))"
done

# Machines interleaved by the launcher: refused on every rank (exit 2),
# naming the first rank out of block order.
run_mpi 120 -np 16 "$AS_HOST" "$(for r in {0..15}; do printf 'gpu-%s ' $((r % 2)); done)" \
  "$(blocks bundled bundled)" "$KVSIM" "${GATHER_ARGS[@]}"
[ $rc -eq 2 ] || fail "interleaved machines exited $rc, expected 2"
grep -q "rank 2 is on host gpu-0 again after rank 1 on host gpu-1" "$ERR" ||
  fail "the interleaving was not named: $(grep -m2 cluster "$ERR")"
# A rank of gpu-a that reads another machine's GPUs: refused naming it.
TOPOS="$(blocks bundled "$EPYC")"
TOPOS=$(echo "$TOPOS" | awk -v e="$EPYC" '{ $4 = e; print }')
run_mpi 120 -np 16 "$AS_HOST" "$(blocks gpu-a gpu-b)" "$TOPOS" "$KVSIM" "${GATHER_ARGS[@]}"
[ $rc -eq 2 ] || fail "a rank seeing other GPUs exited $rc, expected 2"
grep -q "rank 3 on host gpu-a sees 8 GPUs and rank 0 on the same host sees 8 with other" "$ERR" ||
  fail "the rank seeing other GPUs was not named: $(grep -m2 cluster "$ERR")"

# A divergence on rank 12 (node 1) is found by the next check.
run_mpi 300 -np 16 "$KVSIM" "${ARGS[@]}" --inject-divergence 12:100
[ $rc -eq 3 ] || fail "kvsim with a flipped binding on rank 12 exited $rc, expected 3"
grep -Eq "^kvsim: divergence detected at step 1[01][0-9]: .*on rank 12" "$ERR" ||
  fail "the divergence on rank 12 was not located: $(grep divergence "$ERR" | head -3)"
# Rank 12 (node 1) killed mid-run: every other rank exits non-zero within
# the bound, never hangs.
KILL_ARGS=(--tp 8 --pp 2 --nodes 2 --topology bundled --steps 100000000 --seed 3 --json
           --timeout-ms "$KILL_TIMEOUT_MS" --budget-mib 600 --device cpu --kill-rank 12:100
           "${SMALL_SIZING[@]}")
start=$(date +%s.%N)
timeout 240 "${MPIRUN[@]}" -np 16 "$KVSIM" "${KILL_ARGS[@]}" >"$OUT" 2>"$ERR"
rc=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "with rank 12 killed the job exited $rc"
[ "$(echo "$took < 120" | bc)" = 1 ] || fail "the survivors took ${took}s (bound 120s)"
grep -q "rank 12" "$ERR" || fail "nothing names rank 12: $(tail -n 3 "$ERR")"
echo "PASS: 16 ranks as 2 nodes agree (described, and discovered by host over two" \
  "different machines); misplaced ranks are refused; a flip on node 1 is located; a kill on" \
  "node 1 ends the job in ${took}s"
