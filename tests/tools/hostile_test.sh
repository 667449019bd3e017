#!/usr/bin/env bash
# The hostile inputs of hostile_cases.txt, replayed on every run: each must
# exit with its documented status and say what is wrong on the last line it
# prints (stdout and stderr together: an error is never buried above other
# output), never hang, crash, or plan something that overcommits. The last
# line counts what ran.
# Usage: hostile_test.sh CASES KVPLAN KVSIM KVSIM_LOCAL KVBLOCK KVBENCH
# (with HOSTILE_SETUP_ONLY=1 it only sets up the cases' files in
# $TEST_TMPDIR/hostile).
set -uo pipefail
CASES=$1
# Under --config=asan: leak checks stay on, with only lsan.supp's third-party
# frames suppressed (a run on the live topology loads hwloc's PCI plugin).
# The suppression counts LeakSanitizer prints at exit would follow the
# tool's last line, which each case's text must be on: not printed.
export LSAN_OPTIONS="suppressions=$(pwd)/tests/tools/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
declare -A TOOL=([kvplan]=$2 [kvsim]=$3 [kvsim_local]=$4 [kvblock]=$5 [kvbench]=$6)
# kvsim_mpmd A : B runs two kvsim ranks under mpirun, rank 0 with flags A
# and rank 1 with flags B (MPMD). Open MPI keeps its session files in the
# test's scratch space, as tests/shard/common.sh sets up.
export TMPDIR=${TEST_TMPDIR:-${TMPDIR:-/tmp}}
export OMPI_MCA_btl_vader_backing_directory=$TMPDIR OMPI_MCA_btl_vader_single_copy_mechanism=none
kvsim_mpmd() {
  local -a first=() second=()
  local seen_colon=0 word
  for word in "$@"; do
    if [[ $word == : ]]; then seen_colon=1; elif ((seen_colon)); then second+=("$word"); else first+=("$word"); fi
  done
  timeout 60 mpirun --allow-run-as-root --oversubscribe -x LSAN_OPTIONS \
    -np 1 "${TOOL[kvsim]}" "${first[@]}" : -np 1 "${TOOL[kvsim]}" "${second[@]}"
}
# run_tool TOOL ARGS...: the tool under a time limit, with the case's
# NAME=value words (envs) in its environment, reading nothing (the cases
# file is the loop's stdin, and mpirun forwards stdin to its ranks).
run_tool() {
  if [[ $1 == kvsim_mpmd ]]; then
    kvsim_mpmd "${@:2}" </dev/null
  else
    timeout 60 env "${envs[@]}" "${TOOL[$1]}" "${@:2}" </dev/null
  fi
}
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
# The HGX export with 1100 GPUs (one machine past kvplan's 1024-GPU group):
# its first GPU copied at new PCI bus ids (domains 1.., 32 devices a bus).
awk -v extra=1092 '
  /<object type="PCIDev" gp_index="189" pci_busid="0000:1b:00.0"/ { grab = 1 }
  grab { block = block $0 "\n" }
  !grab { print }
  grab && /<\/object>/ {
    printf "%s", block
    for (i = 0; i < extra; i++) {
      copy = block
      sub(/gp_index="189"/, "gp_index=\"" (900000 + i) "\"", copy)
      sub(/pci_busid="0000:1b:00.0"/, sprintf("pci_busid=\"%04x:%02x:%02x.0\"", 1 + int(i / 4096),
          128 + int(i / 32) % 128, i % 32), copy)
      printf "%s", copy
    }
    grab = 0
  }' "$hgx" >"$T/gpus1100.xml"

# Shared objects that are broken files where the backend registry looks
# (backends/registry.h): the CUDA backend beside kvplan cut to half its size
# under every backend's and vendor library's name (so_cut), its ELF
# header alone (so_header), an empty file (so_empty), a FIFO (so_fifo) and
# a directory (so_dir) under the CUDA backend's name, and the cut copy
# alone under the NCCL (so_nccl) and MPI (so_mpi) backends' names.
so=$(dirname "${TOOL[kvplan]}")/libkvshard-cuda.so.1
[[ -f $so ]] || { echo "FAIL: no $so beside kvplan to cut"; exit 1; }
half=$(($(stat -L -c %s "$so") / 2))
mkdir -p "$T/so_cut" "$T/so_header" "$T/so_empty" "$T/so_fifo" "$T/so_nccl" "$T/so_mpi" \
  "$T/so_dir/libkvshard-cuda.so.1"
for f in libkvshard-cuda.so.1 libkvshard-nccl.so.1 libkvshard-mpi.so.1 libcudart.so.13 \
  libnccl.so.2 libmpi.so.40; do
  head -c "$half" "$so" >"$T/so_cut/$f"
done
head -c 64 "$so" >"$T/so_header/libkvshard-cuda.so.1"
: >"$T/so_empty/libkvshard-cuda.so.1"
mkfifo "$T/so_fifo/libkvshard-cuda.so.1"
cp "$T/so_cut/libkvshard-nccl.so.1" "$T/so_nccl/"
cp "$T/so_cut/libkvshard-mpi.so.1" "$T/so_mpi/"

# Traces: epoch.jsonl (six requests stamped in Unix-epoch milliseconds,
# ten minutes apart) and toolong.jsonl (three requests, the second of
# 1,048,576 prompt tokens in blocks of 65,536: longer than kvsim's default
# pool holds).
for k in 0 1 2 3 4 5; do
  printf '{"timestamp": %d, "input_length": 1000, "output_length": 20, "hash_ids": [%d, %d]}\n' \
    $((1714000000000 + k * 600000)) $((k % 2)) $((10 + k))
done >"$T/epoch.jsonl"
{
  echo '{"timestamp": 0, "input_length": 100000, "output_length": 10, "hash_ids": [1, 2]}'
  echo '{"timestamp": 10, "input_length": 1048576, "output_length": 10, "hash_ids": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]}'
  echo '{"timestamp": 20, "input_length": 65536, "output_length": 10, "hash_ids": [1]}'
} >"$T/toolong.jsonl"

# HOSTILE_SETUP_ONLY=1: the files above are all that is wanted (the Python
# package's test replays the kvplan lines as calls).
[[ -n ${HOSTILE_SETUP_ONLY:-} ]] && exit 0

ran=0 failed=0
while IFS= read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  want=${line%% | *}
  rest=${line#* | }
  command=${rest%% | *}
  says=${rest#* | }
  # The expected text must name the refusal, not merely hold a word that
  # any error would (a tool's name, "page", "FIFO"): 16 characters at least.
  if ((${#says} < 16)); then
    failed=$((failed + 1))
    ran=$((ran + 1))
    echo "FAIL: $command: the expected text '$says' is too short to name one refusal"
    continue
  fi
  command=${command//\$T/$T}
  says=${says//\$T/$T}
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
  tail_word=""
  ((${#args[@]} > 0)) && tail_word=${args[-1]}
  if [[ $tail_word == ">/dev/full" ]]; then
    unset 'args[${#args[@]}-1]'
    out=/dev/full
  fi
  if [[ $tail_word == ">&-" ]]; then # standard output closed
    unset 'args[${#args[@]}-1]'
    got=$(run_tool "$tool" "${args[@]}" 2>&1 >&-)
  else
    got=$(run_tool "$tool" "${args[@]}" 2>&1 >"$out")
  fi
  rc=$?
  ran=$((ran + 1))
  # The text on the last line; mpirun adds its own lines after the ranks'.
  last=$(printf '%s\n' "$got" | tail -n 1)
  [[ $tool == kvsim_mpmd ]] && last=$got
  if [[ $rc != "$want" ]] || [[ $last != *"$says"* ]]; then
    failed=$((failed + 1))
    echo "FAIL: $command: exit $rc (want $want), said: ${got:0:300} (want: $says)"
  fi
done <"$CASES"
echo "reliability: hostile inputs replayed $ran, refused as documented $((ran - failed))"
[ "$failed" -eq 0 ] && [ "$ran" -gt 40 ]
