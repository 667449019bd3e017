#!/usr/bin/env bash
# kvplan for real deployments, end to end: fp8 rows, MTP layers, model
# folders and their weights, SGLang's pools beside the plan, and
# `kvplan fit`. Expected numbers are computed here independently (awk
# for SGLang's formula, shell arithmetic for weights), never read back
# from the tool under test.
# Usage: kvplan_deploy_test.sh KVPLAN
set -uo pipefail
kvplan=$1
tiny=tests/data/model-tiny
source "$(dirname "$0")/check.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}/deploy
rm -rf "$T" && mkdir -p "$T"
bundled=(--topology bundled)

# ---- SGLang's DSV4 pools (revision 003fca80), formula recomputed in awk ----
# sglang MODEL(n_layers n4 n128) AVAILABLE SWA PAGE MAX_RUNNING SPEC -> "full swa c4 c128 c4_state c128_state"
sglang() {
  awk -v L="$1" -v n4="$2" -v n128="$3" -v avail="$4" -v swa="$5" -v page="$6" -v mr="$7" \
    -v spec="$8" 'BEGIN {
      avail += 0; mr += 0; L += 0; n4 += 0; n128 += 0; page += 0; swa += 0; spec += 0
      kv = 448 + 2 * 64 + 8; idx = 128 + 128 / 128 * 4; attn = 512
      r4 = spec ? 16 : 8; r128 = spec ? 256 : 128
      bpft = swa * kv * L + 0.25 * kv * n4 + 1 / 128 * kv * n128 + 0.25 * idx * n4 \
        + swa * (r4 / 128) * (16 * attn) * n4 + swa * (r4 / 128) * (16 * 128) * n4
      if (spec) bpft *= (L + 1) / L
      rows = (mr + 1) * r128 + r128 + 1; rows = int((rows + 127) / 128) * 128
      fixed = n128 ? rows * 2 * attn * 4 * n128 : 0
      full = int((avail - fixed) / bpft); full = int(full / page) * page
      s = int(int(full * swa) / page) * page
      printf "%d %d %d %d %d %d\n", full, s, int(full / 4), int(full / 128), int(s / 128) * r4, (mr + 1) * r128
    }'
}
pools() { jq -r '.sglang | "\(.full) \(.swa) \(.c4) \(.c128) \(.c4_state) \(.c128_state)"'; }

out=$("$kvplan" solve --budget 100GiB --engine sglang --swa-ratio 0.1 --max-running 64 --json)
check "flash: SGLang's published 7705.45 bytes per full token" 7705.45 \
  "$(echo "$out" | jq '.sglang.bytes_per_full_token * 100 | round / 100')"
check "flash 100 GiB, 64 running: the pools to the token" \
  "$(sglang 43 21 20 107374182400 0.1 256 64 0)" "$(echo "$out" | pools)"
out=$("$kvplan" solve --model dsv4-pro --budget 100GiB --engine sglang --swa-ratio 0.15 \
  --max-running 64 --json)
check "pro: SGLang's published 13735.04 bytes per full token" 13735.04 \
  "$(echo "$out" | jq '.sglang.bytes_per_full_token * 100 | round / 100')"
check "pro 100 GiB at 0.15: the pools to the token" \
  "$(sglang 61 30 31 107374182400 0.15 256 64 0)" "$(echo "$out" | pools)"
out=$("$kvplan" solve --model dsv4-pro --budget 40GiB --engine sglang --mtp 1 --max-running 32 \
  --page 128 --json)
check "pro 40 GiB, MTP, page 128: rings 16/256 and (L+1)/L" \
  "$(sglang 61 30 31 42949672960 0.1 128 32 1)" "$(echo "$out" | pools)"
check "SGLang's default launch runs 256 requests" 256 \
  "$("$kvplan" solve --budget 80GiB --engine sglang --json | jq .sglang.max_running)"
check "the object names the revision" 003fca8027387a3d6565b2c08e497e3020ac6211 \
  "$("$kvplan" solve --budget 80GiB --engine sglang --json | jq -r .sglang.revision)"
check "a budget below SGLang's c128 reservation: no pool" "true 0" \
  "$("$kvplan" solve --budget 2GiB --engine sglang --json 2>/dev/null | jq -r '"\(.sglang.no_pool) \(.sglang.full)"')"
"$kvplan" solve --budget 80GiB --engine sglang --page 192 >/dev/null 2>"$T/err"
check "a page SGLang refuses exits 2" 2 $?
grep -q "page" "$T/err" || check "and names the page" page "$(cat "$T/err")"

# ---- fp8 rows, priced byte for byte ----
f=$("$kvplan" plan "${bundled[@]}" --kv-dtype fp8 --json 2>/dev/null)
check "fp8 is recorded" fp8 "$(echo "$f" | jq -r .kv_dtype)"
check "fp8 window tier: slots x 584 B x 43 layers" \
  $(($(echo "$f" | jq .n_win_pages) * 128 * 584 * 43)) "$(echo "$f" | jq '.ranks[0].tiers.window')"
b=$("$kvplan" plan "${bundled[@]}" --json 2>/dev/null)
check "fp8 holds more history than bf16 on the same GPUs" true \
  "$(jq -n --argjson f "$f" --argjson b "$b" '$f.full_token > $b.full_token')"

# ---- MTP draft layers on the last stage ----
m=$("$kvplan" plan "${bundled[@]}" --mtp 1 --pp 2 --json 2>/dev/null)
check "--mtp 1: 44 layers, the last stage ends at the draft layer" "1 43" \
  "$(echo "$m" | jq -r '"\(.mtp_layers) \(.ranks[-1].layers[1])"')"
"$kvplan" plan "${bundled[@]}" --mtp 1 --layers 4 --ratios 0,4,128,4 --head-dim 512 \
  --index-head-dim 128 >/dev/null 2>"$T/err"
check "--mtp on an explicit geometry exits 2" 2 $?

# ---- a model folder: its weights per rank ----
# tests/data/README.md: embed 2048, layers 448 832 1088 1344, mtp 1056,
# head 2112. At tp 8, pp 1 every rank holds every layer; each planned
# layer's bytes (embedding with layer 0, head with the last) are divided
# over 8, rounded up.
ceil8() { echo $((($1 + 7) / 8)); }
w=$("$kvplan" plan --model "$tiny" "${bundled[@]}" --json 2>/dev/null)
check "weights come from the folder" folder "$(echo "$w" | jq -r .weights_source)"
check "the folder's total" 8928 "$(echo "$w" | jq .weights.total_bytes)"
check "tp 8: each rank's weights" \
  $(($(ceil8 $((2048 + 448))) + $(ceil8 832) + $(ceil8 1088) + $(ceil8 $((1344 + 2112))))) \
  "$(echo "$w" | jq '.ranks[3].weights_bytes')"
# The bundled server's H200s report 143,771 MiB to their driver.
h200=$((143771 * 1048576))
share=$((h200 * 9 / 10))
check "budget + weights + reserve = floor(143771 MiB x 0.9)" "$share" \
  "$(echo "$w" | jq '.ranks[0] | .budget_bytes + .weights_bytes + .reserve_bytes')"
w=$("$kvplan" plan --model "$tiny" "${bundled[@]}" --mtp 1 --json 2>/dev/null)
check "with an MTP layer its tensors load on the last stage" \
  $(($(ceil8 $((2048 + 448))) + $(ceil8 832) + $(ceil8 1088) + $(ceil8 1344) + $(ceil8 $((2112 + 1056))))) \
  "$(echo "$w" | jq '.ranks[0].weights_bytes')"
w=$("$kvplan" plan --model "$tiny" "${bundled[@]}" --tp 4 --pp 2 --json 2>/dev/null)
first=$(echo "$w" | jq '[.ranks[] | select(.pp_stage == 0)][0] | "\(.layers[0]) \(.layers[1])"' -r)
check "pp 2: stage 0 pays the embedding with its layers" \
  "$(echo "$w" | jq '[.ranks[] | select(.pp_stage == 0)][0].weights_bytes')" \
  "$(echo "$first" | awk '{ split("2496 832 1088 3456", b, " "); s = 0
     for (i = $1 + 1; i <= $2 + 1; i++) s += int((b[i] + 3) / 4); print s }')"

# Measured weights: taken off every GPU's share as given.
w=$("$kvplan" plan "${bundled[@]}" --weights 60GiB --json 2>/dev/null)
check "--weights 60GiB leaves floor(143771 MiB x 0.9) - 60 GiB - 512 MiB" \
  $((share - 60 * 1073741824 - 536870912)) "$(echo "$w" | jq '.ranks[5].budget_bytes')"
check "--weights is recorded as measured" "measured 64424509440" \
  "$(echo "$w" | jq -r '"\(.weights_source) \(.ranks[5].weights_bytes)"')"
"$kvplan" plan "${bundled[@]}" --weights 130GiB >/dev/null 2>"$T/err"
check "weights larger than the share exit 1" 1 $?
grep -q "weights" "$T/err" || check "and say so" weights "$(cat "$T/err")"
# Larger than the GPU itself (140.40 GiB) cannot be true: bad usage (issue
# 30, section 5), naming both.
"$kvplan" plan "${bundled[@]}" --weights 200GB >/dev/null 2>"$T/err"
check "weights larger than the GPU exit 2" 2 $?
check "and name the weights and the GPU's memory" \
  "kvplan plan: --weights 186.26 GiB is more than the memory of GPU 0 (0000:1b:00.0), 140.40 GiB (the total its driver reports): the weights load into the GPU's memory" \
  "$(tail -n 1 "$T/err")"

# A total not yet measured: spread evenly over the 43 layers (100 B each),
# each rank paying ceil(100 / tp) per layer it holds.
w=$("$kvplan" plan "${bundled[@]}" --weights-total 4300B --tp 4 --pp 2 --json 2>/dev/null)
check "--weights-total: each rank pays its own layers' share" true \
  "$(echo "$w" | jq '[.ranks[] | .weights_bytes == 25 * (.layers[1] - .layers[0] + 1)] | all')"
check "--weights-total is recorded" total "$(echo "$w" | jq -r .weights_source)"
"$kvplan" plan "${bundled[@]}" --weights-total 1GB --weights 1GB >/dev/null 2>&1
check "--weights-total with --weights exits 2" 2 $?

# SGLang beside a folder plan: each of its stages on its own layers' bytes.
s=$("$kvplan" plan --model "$tiny" "${bundled[@]}" --kv-dtype fp8 --engine sglang --json 2>/dev/null)
check "plan --engine sglang: one stage at pp 1, on the rank's budget before weights less its weights" \
  "1 $(echo "$s" | jq '.ranks[0].budget_bytes')" \
  "$(echo "$s" | jq -r '"\(.sglang.stages | length) \(.sglang.available_bytes)"')"

# ---- refusals that name the file and the field ----
mkdir -p "$T/nocfg" "$T/norope" "$T/liar"
"$kvplan" solve --model "$T/nocfg" --budget 80GiB >/dev/null 2>"$T/err"
check "a folder without config.json exits 2" 2 $?
check "and says so" 1 "$(grep -c "has no config.json" "$T/err")"
jq 'del(.qk_rope_head_dim)' "$tiny/config.json" >"$T/norope/config.json"
"$kvplan" solve --model "$T/norope" --budget 80GiB >/dev/null 2>"$T/err"
check "a config without qk_rope_head_dim exits 2" 2 $?
check "naming the file and the field" 1 \
  "$(grep -c "$T/norope/config.json: config field qk_rope_head_dim is missing" "$T/err")"
cp "$tiny/config.json" "$T/liar/"
printf '\377\377\0\0\0\0\0\0{}' >"$T/liar/model.safetensors"
"$kvplan" plan --model "$T/liar" "${bundled[@]}" >/dev/null 2>"$T/err"
check "a safetensors header that lies about its length exits 2" 2 $?
check "naming the file" 1 "$(grep -c "$T/liar/model.safetensors.*lies about its length" "$T/err")"

# ---- kvplan fit ----
j=$("$kvplan" fit --context 1048576 --concurrency 8 "${bundled[@]}" --json 2>/dev/null)
check "fit: some layout serves 8 x 1M tokens (exit 0)" "true 10" \
  "$(echo "$j" | jq -r '"\(.fits) \(.layouts | length)"')"
check "fit: the layouts that fit come first" true \
  "$(echo "$j" | jq '[.layouts[].fits] as $f | $f == ($f | sort | reverse)')"
# The minimal KV budget is exact: kvplan plan on it holds every page the
# layout needs, one byte less does not.
read -r tp pp need budget requests <<<"$(echo "$j" | jq -r '.layouts[] | select(.tp == 4 and .pp == 2) |
  "\(.tp) \(.pp) \(.pages_needed) \(.min_kv_budget_bytes) \(.requests_per_replica)"')"
demand=(--max-seq-len 1048576 --max-running "$requests")
got=$("$kvplan" plan "${bundled[@]}" --tp "$tp" --pp "$pp" --budget "$budget" "${demand[@]}" \
  --json 2>/dev/null | jq .num_pages)
check "fit's minimal budget holds the pages" true "$([ "${got:-0}" -ge "$need" ] && echo true)"
got=$("$kvplan" plan "${bundled[@]}" --tp "$tp" --pp "$pp" --budget $((budget - 1)) "${demand[@]}" \
  --json 2>/dev/null | jq .num_pages)
check "one byte less does not" true "$([ "${got:-0}" -lt "$need" ] && echo true)"
"$kvplan" fit --context 1048576 --concurrency 4096 "${bundled[@]}" >"$T/out" 2>&1
check "fit: a demand no layout serves exits 1" 1 $?
grep -q "no layout of this node serves the demand" "$T/out" ||
  check "and says so" "no layout" "$(tail -n 2 "$T/out")"
# Weights move the answer: the whole model on one GPU no longer fits.
j=$("$kvplan" fit --context 131072 --concurrency 8 --weights-total 1000GB "${bundled[@]}" --json)
check "fit with 1000 GB of weights: tp 1 x pp 1 does not fit" false \
  "$(echo "$j" | jq '.layouts[] | select(.nodes == 1 and .tp == 1 and .pp == 1) | .fits')"
check "fit: the weights are the total spread" total "$(echo "$j" | jq -r .weights_source)"
"$kvplan" fit --context 1048576 "${bundled[@]}" >/dev/null 2>&1
check "fit without --concurrency exits 2" 2 $?
"$kvplan" fit --context 1048576 --concurrency 8 --max-running 8 "${bundled[@]}" >/dev/null 2>&1
check "fit with --max-running exits 2" 2 $?

# ---- a cluster: nodes in order, TP inside a node ----
c=$("$kvplan" plan --topology bundled --nodes 2 --tp 8 --pp 2 --json 2>/dev/null)
check "2 nodes: each node's GPUs" "8 8" "$(echo "$c" | jq -r '[.nodes[].gpus] | map(tostring) | join(" ")')"
check "2 nodes: stage 0 on node 0, stage 1 on node 1" '["0:0","1:1"]' \
  "$(echo "$c" | jq -c '[.ranks[] | "\(.node):\(.pp_stage)"] | unique')"
check "2 nodes: no TP group crosses" false "$(echo "$c" | jq .cross_node_tp)"
c=$("$kvplan" plan --topology "bundled,topology/data/hgx-h200-2socket-8gpu.xml" --tp 4 --pp 4 --json \
  2>/dev/null)
check "a topology list: node labels in order" "topology/data/hgx-h200-2socket-8gpu.xml" \
  "$(echo "$c" | jq -r '.nodes[1].label')"
check "a topology list: consecutive stages on one node first" '["0:0","0:1","1:2","1:3"]' \
  "$(echo "$c" | jq -c '[.ranks[] | "\(.node):\(.pp_stage)"] | unique')"
"$kvplan" plan --topology bundled --nodes 2 --svg "$T/cluster.svg" >/dev/null 2>&1
check "the SVG boxes each machine" 2 "$(grep -c 'stroke-dasharray="6 3"' "$T/cluster.svg")"
check "and each machine's NUMA nodes apart" 4 "$(grep -c '>NUMA node ' "$T/cluster.svg")"
"$kvplan" plan --topology bundled --nodes 2 --tp 16 >/dev/null 2>"$T/err"
check "tp 16 over two 8-GPU nodes exits 1" 1 $?
check "naming the group and the nodes" 1 \
  "$(grep -c "the tensor-parallel group of ranks 0-15 spans nodes 0 and 1" "$T/err")"
check "--allow-cross-node-tp lets it, and says so" true \
  "$("$kvplan" plan --topology bundled --nodes 2 --tp 16 --allow-cross-node-tp --json 2>/dev/null |
    jq .cross_node_tp)"
j=$("$kvplan" fit --model dsv4-pro --context 1048576 --concurrency 16 --kv-dtype fp8 \
  --weights-total 1005.2GiB "${bundled[@]}" --json 2>/dev/null)
check "fit: Pro does not fit one node; 2 and 4 nodes are compared" "false true true" \
  "$(echo "$j" | jq -r '[([.layouts[] | select(.nodes == 1) | .fits] | any),
     ([.layouts[] | select(.nodes == 2) | .fits] | any),
     ([.layouts[] | select(.nodes == 4) | .fits] | any)] | map(tostring) | join(" ")')"

echo "$failures failures"
[ "$failures" -eq 0 ]
