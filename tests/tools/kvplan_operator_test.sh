#!/usr/bin/env bash
# What a new operator met (issue 30, section 6), each case as they ran it:
#   - "weights are not counted" said while --expert-weights and
#     --shared-weights were counted (weights_source split), with and
#     without --dp, and with --engine sglang;
#   - a multi-node --launch without SGLang's multi-node flags: one line per
#     host, each with --nnodes, --node-rank and --dist-init-addr, in the
#     text and the JSON;
#   - --host-cache under --dp not saying whether its capacity is a DP
#     group's or the machine's;
#   - plan and fit sizing Pro at dp 8 x ep 8 for different running counts
#     (plan's 385,024 tokens a group, 2.9 x 128K, against fit's 3 requests
#     of 128K): one rule, stated in both, and they agree;
#   - fit --max-concurrency --json giving mem_fraction_static null where its
#     launch set 0.893.
# Usage: kvplan_operator_test.sh KVPLAN
set -uo pipefail
kvplan=$1
source "$(dirname "$0")/check.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}/operator
rm -rf "$T" && mkdir -p "$T"
b=(--topology bundled --kv-dtype fp8)
split=(--expert-weights 142GB --shared-weights 7GB)

# ---- weights counted by kind are never "not counted" ----
for extra in "" "--dp 8 --ep 8" "--engine sglang" "--dp 8 --ep 8 --engine sglang"; do
  # shellcheck disable=SC2086
  "$kvplan" plan "${b[@]}" "${split[@]}" $extra >"$T/out" 2>&1
  check "split weights${extra:+ with $extra}: plans" 0 $?
  check "split weights${extra:+ with $extra}: no 'weights are not counted'" 0 \
    "$(grep -c "weights are not counted" "$T/out")"
  # shellcheck disable=SC2086
  check "split weights${extra:+ with $extra}: weights_source split" split \
    "$("$kvplan" plan "${b[@]}" "${split[@]}" $extra --json 2>/dev/null | jq -r .weights_source)"
done
"$kvplan" plan "${b[@]}" >"$T/out" 2>&1
check "nothing counted: still says so, first" 1 "$(head -n 1 "$T/out" | grep -c "weights are not counted")"

# ---- a 2-host --launch: SGLang's multi-node flags on each host's line ----
two=(--topology bundled --nodes 2 --kv-dtype fp8 --weights-total 149GB --engine sglang --launch)
"$kvplan" plan "${two[@]}" >"$T/out" 2>&1
check "2 hosts: plans" 0 $?
for i in 0 1; do
  check "2 hosts, text: host $i's line carries --nnodes 2 --node-rank $i --dist-init-addr" 1 \
    "$(grep -cE "^  host $i +sglang serve .* --nnodes 2 --node-rank $i --dist-init-addr HOST0:PORT$" "$T/out")"
done
check "2 hosts, text: says what HOSTk:PORT stands for" 1 \
  "$(grep -c "HOSTk:PORT stands for host k's address and a free port" "$T/out")"
j=$("$kvplan" plan "${two[@]}" --json 2>/dev/null)
flag() { jq -r --argjson h "$1" --arg f "$2" '.launch.hosts[$h].args as $a | $a[($a | index($f)) + 1]'; }
check "2 hosts, JSON: one entry per host" "0 1" "$(echo "$j" | jq -r '[.launch.hosts[].host] | join(" ")')"
for i in 0 1; do
  check "2 hosts, JSON: host $i's args carry the three flags" "2 $i HOST0:PORT" \
    "$(echo "$j" | flag "$i" --nnodes) $(echo "$j" | flag "$i" --node-rank) $(echo "$j" | flag "$i" --dist-init-addr)"
  check "2 hosts, JSON: host $i's keys say the same" "2 $i HOST0:PORT" \
    "$(echo "$j" | jq -r --argjson h "$i" '.launch.hosts[$h] | "\(.nnodes) \(.node_rank) \(.dist_init_addr)"')"
done
check "2 hosts, JSON: args (the contract) holds the flags every host gives, unchanged" \
  "$(echo "$j" | jq -c '.launch.hosts[0].args[0:-6]')" "$(echo "$j" | jq -c .launch.args)"
# DP attention over both hosts: one server of 16 GPUs.
j=$("$kvplan" plan --topology bundled --nodes 2 --kv-dtype fp8 "${split[@]}" --tp 8 --dp 2 --ep 16 \
  --engine sglang --launch --json 2>/dev/null)
check "dp 2 x tp 8 over 2 hosts: --nnodes 2 on each, ranks 0 and 1" "2 0 2 1" \
  "$(echo "$j" | jq -r '[.launch.hosts[] | "\(.nnodes) \(.node_rank)"] | join(" ")')"
# A replica per host: each host its own server, no multi-node flags.
j=$("$kvplan" plan "${two[@]}" --tp 8 --pp 1 --json 2>/dev/null)
check "a server per host: one line each, without --nnodes" "0 1 false" \
  "$(echo "$j" | jq -r '"\([.launch.hosts[].host] | join(" ")) \([.launch.hosts[].args[]] | index("--nnodes") != null)"')"
# One host: the one line, as before.
"$kvplan" plan "${b[@]}" --weights-total 149GB --engine sglang --launch >"$T/out" 2>&1
check "one host: the one launch line, no multi-node flag" "1 0" \
  "$(grep -c "^launch      sglang serve" "$T/out") $(grep -c -- "--nnodes" "$T/out")"

# ---- the host tier under --dp: per DP group, and how many share a machine ----
"$kvplan" plan "${b[@]}" "${split[@]}" --dp 8 --ep 8 --host-cache 1TiB >"$T/out" 2>&1
check "dp 8 host tier, text: per DP group, 8 groups sharing the machine's bytes" 1 \
  "$(grep -c "^host tier .* per DP group: each of the 8 DP groups .* sharing the machine's 1.00 TiB" "$T/out")"
j=$("$kvplan" plan "${b[@]}" "${split[@]}" --dp 8 --ep 8 --host-cache 1TiB --json 2>/dev/null)
check "dp 8 host tier, JSON: capacity_per dp_group, 8 groups a machine" "dp_group 8" \
  "$(echo "$j" | jq -r '.host_tier | "\(.capacity_per) \(.dp_groups_per_machine)"')"
j=$("$kvplan" plan "${b[@]}" "${split[@]}" --host-cache 1TiB --json 2>/dev/null)
check "tp 8 host tier, JSON: one group a machine" "dp_group 1" \
  "$(echo "$j" | jq -r '.host_tier | "\(.capacity_per) \(.dp_groups_per_machine)"')"

# ---- Pro at dp 8 x ep 8: plan and fit size by one rule, and agree ----
pro=(--topology bundled --model dsv4-pro --kv-dtype fp8 --expert-weights 840GB --shared-weights 25GB)
f=$("$kvplan" fit "${pro[@]}" --context 128K --max-concurrency --json 2>/dev/null)
row=$(echo "$f" | jq -c '.layouts[] | select(.dp == 8 and .ep == 8 and .tp == 1 and .pp == 1)')
n=$(echo "$row" | jq .max_requests_per_group)
check "fit, dp 8 x ep 8: sized for its requests, all running, of --context tokens" "$n $n 131072" \
  "$(echo "$row" | jq -r '"\(.requests_per_group) \(.running_per_group) \(.max_seq_len)"')"
held() { "$kvplan" plan "${pro[@]}" --dp 8 --ep 8 --max-running "$1" --max-seq-len 128K --json 2>/dev/null |
  jq -r --argjson n "$1" '"\(.tokens_per_group >= $n * 131072) \(.running_per_group) \(.max_seq_len)"'; }
check "plan at fit's $n running of 128K holds them (plan agrees with fit)" "true $n 131072" "$(held "$n")"
check "plan at one more running request of 128K does not hold it (neither does fit)" \
  "false $((n + 1)) 131072" "$(held $((n + 1)))"
p=$("$kvplan" plan "${pro[@]}" --dp 8 --ep 8 --json 2>/dev/null)
check "plan's default: sized for 64 running of 1M, and says so in the JSON" "64 1048576" \
  "$(echo "$p" | jq -r '"\(.running_per_group) \(.max_seq_len)"')"
"$kvplan" plan "${pro[@]}" --dp 8 --ep 8 >"$T/out" 2>&1
check "plan's text says what it sized for and how fit's answer maps onto it" 1 \
  "$(grep -c "^running     sized for 64 running requests per DP group of up to 1048576 tokens .*--max-running N --max-seq-len L" "$T/out")"
"$kvplan" fit "${pro[@]}" --context 128K --max-concurrency >"$T/out" 2>&1
check "fit's text says the same rule" 1 \
  "$(grep -c "^sizing      each layout for the requests a DP group holds, all running.* --max-running N --max-seq-len 131072" "$T/out")"

# ---- fit --max-concurrency --json: the fraction its launch uses ----
f=$("$kvplan" fit "${b[@]}" --weights-total 149GB --context 1M --max-concurrency --engine sglang \
  --json 2>/dev/null)
check "fit --max-concurrency: every launch's --mem-fraction-static is its row's mem_fraction_static" \
  0 "$(echo "$f" | jq '[.layouts[] | select(.launch != null) | .launch.args as $a |
    select(($a[($a | index("--mem-fraction-static")) + 1] | tonumber) != .mem_fraction_static)] | length')"
check "fit --max-concurrency: some rows have a launch" true \
  "$(echo "$f" | jq '[.layouts[] | select(.launch != null)] | length > 0')"
check "fit --max-concurrency: mem_fraction_static null only without a launch" 0 \
  "$(echo "$f" | jq '[.layouts[] | select((.launch == null) != (.mem_fraction_static == null))] | length')"
f=$("$kvplan" fit "${b[@]}" --weights-total 149GB --context 1M --max-concurrency --engine sglang \
  --mem-fraction 0.8935 --json 2>/dev/null)
check "a finer --mem-fraction: the JSON carries what the launch line sets" "0.893 0.893" \
  "$(echo "$f" | jq -r '.layouts[0] | .launch.args as $a | "\(.mem_fraction_static) \($a[($a | index("--mem-fraction-static")) + 1])"')"

echo "$failures failures"
[ "$failures" -eq 0 ]
