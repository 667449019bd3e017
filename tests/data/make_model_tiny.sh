#!/usr/bin/env bash
# Regenerates tests/data/model-tiny/: a tiny DeepSeek-V4-shaped model folder
# (config.json, model.safetensors.index.json and two safetensors shards of
# zero-filled BF16/F32 tensors). The output is deterministic: running this
# again rewrites the same bytes. Usage: make_model_tiny.sh [output folder]
# (default: model-tiny/ next to this script). Bytes per layer: README.md.
set -euo pipefail
export LC_ALL=C

out="${1:-$(cd "$(dirname "$0")" && pwd)/model-tiny}"
mkdir -p "$out"

shard1=model-00001-of-00002.safetensors
shard2=model-00002-of-00002.safetensors

# name dtype shape (comma-separated dims), per shard, in file order. Each
# layer has its own wkv height (8, 16, 24, 32 rows) and the compressed
# layers (ratios 4, 128, 4) a compressor, so every layer's bytes differ.
# Layer 1 is split across the shards, as real checkpoints split layers.
# Layer 4 (num_hidden_layers) is the MTP layer.
tensors1=(
  "model.embed_tokens.weight BF16 64,16"
  "model.layers.0.input_layernorm.weight F32 16"
  "model.layers.0.self_attn.wkv.weight BF16 8,16"
  "model.layers.0.mlp.gate.weight BF16 4,16"
  "model.layers.1.input_layernorm.weight F32 16"
  "model.layers.1.self_attn.wkv.weight BF16 16,16"
  "model.layers.1.self_attn.compressor.wkv.weight BF16 4,16"
)
tensors2=(
  "model.layers.1.mlp.gate.weight BF16 4,16"
  "model.layers.2.input_layernorm.weight F32 16"
  "model.layers.2.self_attn.wkv.weight BF16 24,16"
  "model.layers.2.self_attn.compressor.wkv.weight BF16 4,16"
  "model.layers.2.mlp.gate.weight BF16 4,16"
  "model.layers.3.input_layernorm.weight F32 16"
  "model.layers.3.self_attn.wkv.weight BF16 32,16"
  "model.layers.3.self_attn.compressor.wkv.weight BF16 4,16"
  "model.layers.3.mlp.gate.weight BF16 4,16"
  "model.layers.4.eh_proj.weight BF16 16,32"
  "model.layers.4.enorm.weight BF16 16"
  "model.norm.weight F32 16"
  "lm_head.weight BF16 64,16"
)

dtype_bytes() {
  case "$1" in
    BF16 | F16) echo 2 ;;
    F32) echo 4 ;;
    *) echo "unknown dtype $1" >&2; exit 1 ;;
  esac
}

total_size=0
index_lines=()

# write_shard FILE TENSOR...: the 8-byte little-endian header length, the
# JSON header padded with spaces to a multiple of 8 (as the safetensors
# writer does), then the zero data.
write_shard() {
  local file="$1"
  shift
  local header='{"__metadata__":{"format":"pt"}'
  local offset=0 entry name dtype shape bytes dim
  for entry in "$@"; do
    read -r name dtype shape <<<"$entry"
    bytes=$(dtype_bytes "$dtype")
    for dim in ${shape//,/ }; do bytes=$((bytes * dim)); done
    header+=",\"$name\":{\"dtype\":\"$dtype\",\"shape\":[$shape],\"data_offsets\":[$offset,$((offset + bytes))]}"
    offset=$((offset + bytes))
    index_lines+=("    \"$name\": \"$file\"")
  done
  header+='}'
  while (( ${#header} % 8 != 0 )); do header+=' '; done
  local n=${#header} le='' i
  for i in 0 1 2 3 4 5 6 7; do le+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255))); done
  {
    printf '%b' "$le"
    printf '%s' "$header"
    head -c "$offset" /dev/zero
  } >"$out/$file"
  total_size=$((total_size + offset))
}

write_shard "$shard1" "${tensors1[@]}"
write_shard "$shard2" "${tensors2[@]}"

cat >"$out/config.json" <<'EOF'
{
  "model_type": "deepseek_v4",
  "architectures": ["DeepseekV4ForCausalLM"],
  "num_hidden_layers": 4,
  "num_nextn_predict_layers": 1,
  "hidden_size": 16,
  "vocab_size": 64,
  "head_dim": 512,
  "qk_rope_head_dim": 64,
  "index_head_dim": 128,
  "sliding_window": 128,
  "max_position_embeddings": 65536,
  "compress_ratios": [0, 4, 128, 4, 0],
  "torch_dtype": "bfloat16"
}
EOF

# The index lists the tensors sorted by name, as transformers writes it.
{
  printf '{\n  "metadata": {\n    "total_size": %d\n  },\n  "weight_map": {\n' "$total_size"
  printf '%s\n' "${index_lines[@]}" | sort | sed '$!s/$/,/'
  printf '  }\n}\n'
} >"$out/model.safetensors.index.json"
