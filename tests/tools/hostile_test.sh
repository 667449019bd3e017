#!/usr/bin/env bash
# The hostile inputs of hostile_cases.txt, replayed on every run: each must
# exit with its documented status and say what is wrong, never hang, crash,
# or plan something that overcommits. The last line counts what ran.
# Usage: hostile_test.sh CASES KVPLAN KVSIM KVSIM_LOCAL KVBLOCK
set -uo pipefail
CASES=$1
# Under --config=asan: leak checks stay on, with only lsan.supp's third-party
# frames suppressed (a run on the live topology loads hwloc's PCI plugin).
export LSAN_OPTIONS="suppressions=$(pwd)/tests/tools/lsan.supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
declare -A TOOL=([kvplan]=$2 [kvsim]=$3 [kvsim_local]=$4 [kvblock]=$5)
T=${TEST_TMPDIR:-$(mktemp -d)}/hostile
rm -rf "$T" && mkdir -p "$T/dir" "$T/fifomodel" "$T/fifoshard"
mkfifo "$T/fifo" "$T/fifomodel/config.json" "$T/fifoshard/model.safetensors"
cp tests/data/model-tiny/config.json "$T/fifoshard/"
ln -s "$T/nowhere" "$T/link.kvb"
printf 'not xml at all\n' >"$T/text.txt"
echo '{"num_hidden_layers": 61, "head_dim": 512, "index_head_dim": 128, "compress_ratios": [0, 4]}' \
  >"$T/m61.json"
hgx=topology/data/hgx-h200-2socket-8gpu.xml
sed 's/pci_busid="0000:43:00.0"/pci_busid="0000:1b:00.0"/' "$hgx" >"$T/dup.xml"
sed 's/pci_busid="0000:43:00.0"/pci_busid="zz:43:00.0"/' "$hgx" >"$T/dropped.xml"
sed 's/\[10de:2335\]/[10de:9999]/g' "$hgx" >"$T/unknown.xml"
sed 's/<topology version="2.0">/<topology version="3.0">/' "$hgx" >"$T/v3.xml"
sed 's/ pci_busid="0000:1b:00.0"//' "$hgx" >"$T/nobusid.xml"
# shard FILE HEADER DATA_BYTES: a safetensors file of that JSON header and
# that many zero bytes of data (sparse).
shard() {
  local n=${#2} le='' i
  for i in 0 1 2 3 4 5 6 7; do le+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255))); done
  { printf '%b' "$le"; printf '%s' "$2"; } >"$1" && truncate -s $((8 + n + $3)) "$1"
}
mkdir -p "$T/gapshard" "$T/sameshard"
cp tests/data/model-tiny/config.json "$T/gapshard/"
cp tests/data/model-tiny/config.json "$T/sameshard/"
shard "$T/gapshard/model.safetensors" \
  '{"model.norm.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' 1000000
shard "$T/sameshard/model.safetensors" \
  '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"c":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}' 16
"${TOOL[kvblock]}" write "$T/good.kvb" --model m --layers 1 --kv-heads 1 --head-dim 8 \
  --block-size 16 >/dev/null || { echo "FAIL: cannot write a good block"; exit 1; }
# A sparse 3 GiB file that starts with the block magic.
head -c 8 "$T/good.kvb" >"$T/big.kvb" && truncate -s 3G "$T/big.kvb"

ran=0 failed=0
while IFS= read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  want=${line%% | *}
  rest=${line#* | }
  command=${rest%% | *}
  says=${rest#* | }
  command=${command//\$T/$T}
  read -r -a words <<<"$command"
  # Leading NAME=value words are the tool's environment.
  envs=()
  while [[ ${words[0]} =~ ^[A-Z_][A-Z0-9_]*= ]]; do
    envs+=("${words[0]}")
    words=("${words[@]:1}")
  done
  tool=${words[0]}
  args=("${words[@]:1}")
  out=/dev/stdout
  if [[ ${args[-1]} == ">/dev/full" ]]; then
    unset 'args[${#args[@]}-1]'
    out=/dev/full
  fi
  got=$(timeout 60 env "${envs[@]}" "${TOOL[$tool]}" "${args[@]}" 2>&1 >"$out")
  rc=$?
  ran=$((ran + 1))
  if [[ $rc != "$want" ]] || [[ $got != *"$says"* ]]; then
    failed=$((failed + 1))
    echo "FAIL: $command: exit $rc (want $want), said: ${got:0:300} (want: $says)"
  fi
done <"$CASES"
echo "reliability: hostile inputs replayed $ran, refused as documented $((ran - failed))"
[ "$failed" -eq 0 ] && [ "$ran" -gt 40 ]
