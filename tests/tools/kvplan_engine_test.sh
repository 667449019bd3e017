#!/usr/bin/env bash
# kvplan in the engine's own terms (issue 24): SGLang's memory rule and the
# published InferenceX check, attention data parallelism with expert
# parallelism, the launch flags, fit's smallest --mem-fraction-static held
# against plan, --max-concurrency, the one-node headline, and what an
# operator types first (token suffixes, sizes with decimals, --gpu-memory).
# Expected numbers are worked out here (shell and awk arithmetic), never
# read back from the tool under test.
# Usage: kvplan_engine_test.sh KVPLAN
set -uo pipefail
kvplan=$1
source "$(dirname "$0")/check.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}/engine
rm -rf "$T" && mkdir -p "$T"
b=(--topology bundled)
GiB=1073741824
# last: the last line a command printed (stdout and stderr together).
last() { "$@" 2>&1 | tail -n 1; }

# ---- SGLang's memory rule: SemiAnalysisAI/InferenceX#2128 ----
# DSV4-Pro fp8 on H200 at tp 8: ~125.65 GiB of weights per GPU, ~137.90 GiB
# free before they load. At 0.88 the 16.55 GiB slack is more than the
# 12.25 GiB left: SGLang refuses to start; minimum viable 1 - 12.25/137.90.
pro=(--model dsv4-pro --kv-dtype fp8 --engine sglang --free-before-load 137.90GiB)
"$kvplan" plan "${b[@]}" "${pro[@]}" --weights 125.65GiB --mem-fraction 0.88 >"$T/out" 2>&1
check "InferenceX: 0.88 leaves Pro no KV memory (exit 1)" 1 $?
tail -n 1 "$T/out" | grep -q "SGLang would refuse to start" ||
  check "and says so on the last line" "refuse" "$(tail -n 1 "$T/out")"
j=$("$kvplan" plan "${b[@]}" "${pro[@]}" --weights 125.65GiB --mem-fraction 0.88 --json 2>/dev/null)
check "the JSON error names it" no_kv_memory "$(echo "$j" | jq -r .error)"
check "minimum viable 1 - 12.25/137.90 (SGLang printed 0.9113)" 0.9112 \
  "$(echo "$j" | jq '.min_viable_mem_fraction * 10000 | round / 10000')"
check "SGLang's suggestion rounds it up to 3 decimals" 0.912 "$(echo "$j" | jq .suggested_mem_fraction)"
j=$("$kvplan" plan "${b[@]}" "${pro[@]}" --mtp 1 --weights 128.72GiB --mem-fraction 0.88 --json \
  2>/dev/null)
check "with MTP the draft's 3.07 GiB count: 0.9334 (SGLang printed 0.9335)" 0.9334 \
  "$(echo "$j" | jq '.min_viable_mem_fraction * 10000 | round / 10000')"
j=$("$kvplan" plan "${b[@]}" "${pro[@]}" --weights 125.65GiB --mem-fraction 0.95 --json 2>/dev/null)
check "at 0.95 SGLang starts" "false" "$(echo "$j" | jq .sglang.no_pool)"
# P and A reach SGLang's rule as the minimum over 8 ranks, a float32
# all-reduce: 16 KiB steps at these sizes.
check "and its pools get A - P x 0.05, to float32's steps" true \
  "$(echo "$j" | jq '(.sglang.rest_bytes - (.sglang.available_after_load_bytes
     - .sglang.free_before_load_bytes * 0.05)) | (if . < 0 then -. else . end) < 65536')"
check "every GPU's budget is that rest" true \
  "$(echo "$j" | jq '.sglang.rest_bytes as $r | [.ranks[].budget_bytes] | all(. == $r)')"
check "SGLang's default fraction on an H200 at tp 8: 0.897" 0.897 \
  "$(echo "$j" | jq .sglang.default_mem_fraction_static)"
check "which holds nothing for Pro here" false "$(echo "$j" | jq .sglang.holds_at_default)"
"$kvplan" plan "${b[@]}" --free-before-load 130GiB >/dev/null 2>"$T/err"
check "--free-before-load without --engine sglang exits 2" 2 $?
"$kvplan" plan "${b[@]}" --engine sglang --reserve 1GiB >/dev/null 2>"$T/err"
check "--reserve under SGLang's rule exits 2" 2 $?

# ---- data-parallel attention and expert parallelism ----
flash=(--kv-dtype fp8 --expert-weights 142GB --shared-weights 7GB)
tp8=$("$kvplan" plan "${b[@]}" "${flash[@]}" --tp 8 --json 2>/dev/null)
dp8=$("$kvplan" plan "${b[@]}" "${flash[@]}" --dp 8 --ep 8 --json 2>/dev/null)
check "dp 8: one replica of 8 groups" "1 8 1 8 8" \
  "$(echo "$dp8" | jq -r '"\(.replicas) \(.cluster_tokens / .tokens_per_group) \(.tp) \(.dp) \(.ep)"')"
check "dp 8 holds at least 6x the tokens of tp 8 on the same GPUs" true \
  "$(jq -n --argjson d "$dp8" --argjson t "$tp8" '$d.cluster_tokens >= 6 * $t.cluster_tokens')"
check "tp 8: the cluster holds what its one group holds" true \
  "$(echo "$tp8" | jq '.cluster_tokens == .tokens_per_group')"
# Per GPU at dp 8 x ep 8: all the shared weights (tp 1) and an eighth of
# the experts, each layer's share rounded up per device.
check "dp 8 weights: 7 GB / 1 + 142 GB / 8 per GPU, by layer" \
  "$(awk 'BEGIN { L = 43; s = 7e9; e = 142e9; t = 0
       for (i = 0; i < L; i++) { si = int(s / L); ei = int(e / L)
         if (i == L - 1) { si += s - int(s / L) * L; ei += e - int(e / L) * L }
         t += si + int((ei + 7) / 8) }
       printf "%.0f", t }')" "$(echo "$dp8" | jq '.ranks[0].weights_bytes')"
"$kvplan" plan "${b[@]}" --dp 3 "${flash[@]}" >/dev/null 2>"$T/err"
check "--dp 3 on 8 GPUs exits 1" 1 $?
check "naming --dp and the values that divide" 1 "$(grep -c -- '--dp 3 does not divide the 8 GPUs; --dp can be 1, 2, 4 or 8' "$T/err")"
"$kvplan" plan "${b[@]}" --ep 16 "${flash[@]}" >/dev/null 2>"$T/err"
check "--ep past the GPUs exits 1, naming --ep" "1 1" "$? $(grep -c -- '--ep 16 is more than the 8 GPUs' "$T/err")"
"$kvplan" plan "${b[@]}" --tp 4 --pp 2 --ep 8 "${flash[@]}" >/dev/null 2>"$T/err"
check "--ep not dividing tp x dp exits 1, naming --ep" "1 1" \
  "$? $(grep -c -- '--ep 8 does not divide tp 4 x dp 1 = 4' "$T/err")"
"$kvplan" plan "${b[@]}" --dp 8 --ep 8 --weights-total 149GB >/dev/null 2>"$T/err"
check "--ep with an unsplit total exits 2, naming --ep" "2 1" \
  "$? $(grep -c -- '--ep 8 shares the routed experts' "$T/err")"
"$kvplan" plan "${b[@]}" --ep 8 >/dev/null 2>"$T/err"
check "--ep with no weights at all exits 2" 2 $?
"$kvplan" plan "${b[@]}" --dp 2 --weights-total 149GB >/dev/null 2>"$T/err"
check "--dp with an unsplit total exits 2, naming --dp" "2 1" "$? $(grep -c -- '--dp 2 shares' "$T/err")"
"$kvplan" plan "${b[@]}" --expert-weights 1GB >/dev/null 2>"$T/err"
check "--expert-weights alone exits 2" 2 $?

# A model folder whose experts are named: the tiny model's config and one
# shard of U8 tensors (shared 100 B per layer, experts 1000 B per layer).
shard() { # shard FILE NAME:BYTES...
  local file=$1 header='{' offset=0 sep='' item name bytes n le='' i
  shift
  for item in "$@"; do
    name=${item%:*} bytes=${item##*:}
    header+="$sep\"$name\":{\"dtype\":\"U8\",\"shape\":[$bytes],\"data_offsets\":[$offset,$((offset + bytes))]}"
    offset=$((offset + bytes)) sep=','
  done
  header+='}'
  n=${#header}
  for i in 0 1 2 3 4 5 6 7; do le+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255))); done
  { printf '%b' "$le"; printf '%s' "$header"; } >"$file" && truncate -s $((8 + n + offset)) "$file"
}
mkdir -p "$T/moe"
cp tests/data/model-tiny/config.json "$T/moe/"
tensors=()
for i in 0 1 2 3; do
  tensors+=("model.layers.$i.self_attn.w:60" "model.layers.$i.mlp.shared_experts.w:40"
    "model.layers.$i.mlp.experts.0.w:500" "model.layers.$i.mlp.experts.1.w:500")
done
shard "$T/moe/model.safetensors" "${tensors[@]}"
m=$("$kvplan" plan "${b[@]}" --model "$T/moe" --tp 2 --pp 1 --dp 2 --ep 4 --json 2>/dev/null)
check "a folder's experts: 8 named, 4000 bytes" "8 4000" \
  "$(echo "$m" | jq -r '"\(.weights.expert_tensors) \(.weights.expert_bytes)"')"
check "tp 2 x dp 2: each rank pays 100/2 + 1000/4 per layer" $((4 * (50 + 250))) \
  "$(echo "$m" | jq '.ranks[0].weights_bytes')"

# ---- the launch flags are the plan's own ----
j=$("$kvplan" plan "${b[@]}" "${flash[@]}" --tp 8 --engine sglang --launch --json 2>/dev/null)
arg() { echo "$j" | jq -r --arg f "$1" '.launch.args as $a | ($a | index($f)) as $i | $a[$i + 1]'; }
check "launch: --tp-size is the plan's tp" "$(echo "$j" | jq .tp)" "$(arg --tp-size)"
check "launch: --max-total-tokens is SGLang's full pool" "$(echo "$j" | jq .sglang.full)" \
  "$(arg --max-total-tokens)"
check "launch: --mem-fraction-static is the one sized with" \
  "$(echo "$j" | jq -r '.sglang.mem_fraction_static * 1000 | round / 1000')" "$(arg --mem-fraction-static)"
check "launch: page, running requests, swa ratio, context" "256 256 0.1 1048576" \
  "$(arg --page-size) $(arg --max-running-requests) $(arg --swa-full-tokens-ratio) $(arg --context-length)"
check "launch: engine" sglang "$(echo "$j" | jq -r .launch.engine)"
j=$("$kvplan" plan "${b[@]}" "${flash[@]}" --dp 8 --ep 8 --engine sglang --launch --json 2>/dev/null)
check "launch at dp 8: SGLang's tp counts every GPU of the stage, DP attention on" \
  "8 8 8 true" \
  "$(arg --tp-size) $(arg --dp-size) $(arg --ep-size) $(echo "$j" | jq '.launch.args | index("--enable-dp-attention") != null')"
check "SGLang's default at dp 8 (DP attention's graphs): 0.769" 0.769 \
  "$(echo "$j" | jq .sglang.default_mem_fraction_static)"
check "--max-running-requests 256 over 8 groups: 32 a worker" 32 "$(echo "$j" | jq .sglang.max_running)"
"$kvplan" plan "${b[@]}" --launch >/dev/null 2>"$T/err"
check "--launch without --engine sglang exits 2" 2 $?
"$kvplan" plan "${b[@]}" --engine sglang --launch --budget 80GiB >/dev/null 2>"$T/err"
check "--launch with an explicit budget exits 2" 2 $?

# ---- fit: SGLang's smallest fraction is tight against plan ----
f=$("$kvplan" fit "${b[@]}" "${flash[@]}" --context 1M --concurrency 8 --engine sglang --json \
  --progress-s 0 2>/dev/null)
check "fit tries dp x ep layouts once the weights are split" true \
  "$(echo "$f" | jq '[.layouts[] | select(.dp == 8 and .ep == 8)] | length == 1')"
for layout in "8 1 1" "4 2 1" "1 1 8" "4 1 2"; do
  read -r tp pp dp <<<"$layout"
  row=$(echo "$f" | jq -c --argjson tp "$tp" --argjson pp "$pp" --argjson dp "$dp" \
    '.layouts[] | select(.nodes == 1 and .tp == $tp and .pp == $pp and .dp == $dp)')
  frac=$(echo "$row" | jq -r .mem_fraction_static) per=$(echo "$row" | jq .requests_per_group)
  ep=$(echo "$row" | jq .ep)
  need=$((per * 1048576))
  at=(plan "${b[@]}" "${flash[@]}" --tp "$tp" --pp "$pp" --dp "$dp" --ep "$ep" --engine sglang --json)
  got=$("$kvplan" "${at[@]}" --mem-fraction "$frac" 2>/dev/null | jq .sglang.full)
  check "tp $tp x pp $pp x dp $dp: plan at fit's $frac holds $per x 1M" true \
    "$([ "${got:-0}" -ge "$need" ] && echo true)"
  below=$(awk -v f="$frac" 'BEGIN { printf "%.3f", f - 0.002 }')
  got=$("$kvplan" "${at[@]}" --mem-fraction "$below" 2>/dev/null | jq .sglang.full)
  check "and at $below it does not" true "$([ "${got:-0}" -lt "$need" ] && echo true)"
done
check "a layout SGLang cannot serve says why" true \
  "$(echo "$f" | jq '[.layouts[] | select(.mem_fraction_static == null) | .sglang_why | type == "string"] | all')"

# ---- fit: the one-node headline, how many, token counts ----
# DSV4-Pro, fp8, 1005.2 GiB of weights (SGLang logs 125.65 GiB per GPU at tp 8):
# 101 requests of 1M tokens take 4 nodes.
pro=(--model dsv4-pro --kv-dtype fp8 --weights-total 1005.2GiB)
"$kvplan" fit "${b[@]}" --context 1M --concurrency 101 "${pro[@]}" --progress-s 0 >"$T/out" 2>&1
check "101 x 1M needs more than one node: exit 1" 1 $?
tail -n 1 "$T/out" | grep -qE "no layout of one node serves 101 requests of 1048576 tokens; [0-9]+ nodes do \(give --nodes [0-9]+\)" ||
  check "the last line names the nodes it needs" nodes "$(tail -n 1 "$T/out")"
n=$(tail -n 1 "$T/out" | sed -n 's/.*give --nodes \([0-9]*\).*/\1/p')
"$kvplan" fit "${b[@]}" --context 1M --concurrency 101 "${pro[@]}" --nodes "${n:-2}" \
  --progress-s 0 >/dev/null 2>&1
check "with --nodes $n it is served (exit 0)" 0 $?
c=$("$kvplan" fit "${b[@]}" --context 128K --max-concurrency --kv-dtype fp8 --weights-total 149GB \
  --json --progress-s 0 2>/dev/null)
check "128K is 131072 tokens" 131072 "$(echo "$c" | jq .context)"
mc=$(echo "$c" | jq '.layouts[] | select(.tp == 8 and .nodes == 1) | .max_concurrency')
check "tp 8 holds some requests of 128K" true "$([ "${mc:-0}" -gt 0 ] && echo true)"
r=$("$kvplan" fit "${b[@]}" --context 128K --concurrency "$mc" --kv-dtype fp8 --weights-total 149GB \
  --json --progress-s 0 2>/dev/null | jq '.layouts[] | select(.tp == 8 and .nodes == 1) | .fits')
check "and fit says $mc of them fit at tp 8" true "$r"
r=$("$kvplan" fit "${b[@]}" --context 128K --concurrency $((mc + 1)) --kv-dtype fp8 \
  --weights-total 149GB --json --progress-s 0 2>/dev/null |
  jq '.layouts[] | select(.tp == 8 and .nodes == 1) | .fits')
check "and $((mc + 1)) do not" false "$r"
"$kvplan" fit "${b[@]}" --context 1M --concurrency 1 --max-concurrency >/dev/null 2>&1
check "--concurrency with --max-concurrency exits 2" 2 $?

# ---- what an operator types first ----
check "a size with decimals, to the nearest byte" \
  "$(awk 'BEGIN { printf "%.0f", 17.35 * 1073741824 }')" \
  "$("$kvplan" plan "${b[@]}" --weights 17.35GiB --json 2>/dev/null | jq '.ranks[0].weights_bytes')"
check "a bare --budget 80 asks what was meant" \
  "kvplan plan: --budget 80 is 80 bytes, under 1 MiB: did you mean 80GiB? (write 80B for bytes)" \
  "$(last "$kvplan" plan "${b[@]}" --budget 80)"
check "--gpu-memory replaces the driver's total" $((80 * GiB)) \
  "$("$kvplan" plan "${b[@]}" --gpu-memory 80GiB --json 2>/dev/null | jq '.ranks[0].memory_bytes')"
check "an unmeasured H200 is its driver's 143,771 MiB" $((143771 * 1048576)) \
  "$("$kvplan" plan "${b[@]}" --json 2>/dev/null | jq '.ranks[0].memory_bytes')"
"$kvplan" plan "${b[@]}" --engine sglang "${flash[@]}" >"$T/out" 2>&1
grep -q "full [0-9]* tokens, swa [0-9]* tokens" "$T/out" ||
  check "SGLang's pool lines name their unit" tokens "$(grep full "$T/out")"
# The SVG maps a whole GPU: weights at the bottom, the memory share's
# outside at the top, and a picture wide enough for its title.
"$kvplan" plan "${b[@]}" "${flash[@]}" --svg "$T/map.svg" >/dev/null 2>&1
check "the SVG draws weights, reserve and free memory" "yes yes yes" \
  "$(for s in weights reserve free; do grep -q "<title>$s: " "$T/map.svg" && printf 'yes ' || printf 'no '; done | sed 's/ $//')"
width=$(sed -n 's/.*<svg [^>]*width="\([0-9]*\)".*/\1/p' "$T/map.svg" | head -n 1)
title=$(sed -n 's/.*class="title">\([^<]*\)<.*/\1/p' "$T/map.svg" | head -n 1)
check "the picture is wider than its title" true "$([ "$width" -ge $((${#title} * 10)) ] && echo true)"

echo "$failures failures"
[ "$failures" -eq 0 ]
