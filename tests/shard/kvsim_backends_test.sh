#!/bin/bash
# The tools load CUDA, NCCL and MPI only as backends, when asked for:
#   - kvplan, kvsim and kvsim_local link none of libcudart, libnccl, libmpi;
#   - with no CUDA to be found (KVSHARD_CUDA_PATH naming an empty folder,
#     LD_LIBRARY_PATH unset), kvplan plans (the bundled server, saying why)
#     and kvsim --backend mpi runs 2 ranks on host tables, exit 0;
#   - kvsim --backend nccl where libnccl.so.2 cannot be found (a CUDA folder
#     holding libcudart alone) exits 4 naming libnccl.so.2 and where it
#     looked; with no backend file beside a copied kvsim, --backend mpi and
#     --backend nccl exit 4 naming the backend file.
# Usage: kvsim_backends_test.sh KVSIM KVSIM_LOCAL KVPLAN
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 KVSIM_LOCAL=$2 KVPLAN=$3
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
unset LD_LIBRARY_PATH KVSHARD_BACKEND_PATH

for tool in "$KVSIM" "$KVSIM_LOCAL" "$KVPLAN"; do
  libs=$(ldd "$tool" | grep -E 'libcudart|libnccl|libmpi' || true)
  [ -z "$libs" ] || fail "$(basename "$tool") links $libs"
done

empty=$TEST_TMPDIR/empty
mkdir -p "$empty"
KVSHARD_CUDA_PATH=$empty "$KVPLAN" --json >"$OUT" 2>"$ERR" || fail "kvplan without CUDA exited $?"
grep -q "libcudart.so.13, which could not be loaded" "$ERR" ||
  fail "kvplan without CUDA did not say why it planned the bundled server"
json_check '.num_pages > 0'
echo "ok   kvplan plans with no CUDA to be found"

KVSHARD_CUDA_PATH=$empty run_mpi 120 -x KVSHARD_CUDA_PATH -np 2 "$KVSIM" --tp 2 --backend mpi \
  --steps 200 --seed 3 --json
[ "$rc" -eq 0 ] || fail "kvsim --backend mpi without CUDA exited $rc"
json_check '.ranks == 2 and .digests_agree == true and .device == "cpu"'
echo "ok   kvsim --backend mpi runs 2 ranks on host tables with no CUDA to be found"

# CUDA without NCCL: libcudart alone in the folder KVSHARD_CUDA_PATH names.
cudart=$(ldconfig -p | sed -n 's/.*libcudart.so.13 .*=> \(.*\)/\1/p' | head -n 1)
[ -n "$cudart" ] || cudart=/usr/local/cuda/lib64/libcudart.so.13
if [ -e "$cudart" ]; then
  only=$TEST_TMPDIR/cuda-without-nccl
  mkdir -p "$only"
  ln -sf "$cudart" "$only/libcudart.so.13"
  expect 4 "needs libnccl.so.2, which could not be loaded: $only/libnccl.so.2: not there" -- \
    env KVSHARD_CUDA_PATH="$only" "$KVSIM" --tp 1 --backend nccl --steps 5 --seed 1
  expect 4 "needs libnccl.so.2" -- env KVSHARD_CUDA_PATH="$only" "$KVSIM_LOCAL" --ranks 2 --tp 2 \
    --backend nccl --steps 5 --seed 1
  echo "ok   kvsim --backend nccl without libnccl exits 4 naming it"
else
  echo "note: no libcudart.so.13 on this machine; the CUDA-without-NCCL case is the no-CUDA one"
  expect 4 "needs libcudart.so.13" -- env KVSHARD_CUDA_PATH="$empty" "$KVSIM" --tp 1 \
    --backend nccl --steps 5 --seed 1
fi

# No backend files beside the tool, none on the loader's path.
alone=$TEST_TMPDIR/alone
mkdir -p "$alone"
cp "$KVSIM" "$alone/kvsim"
expect 4 "the nccl backend (libkvshard-nccl.so.1) could not be loaded: KVSHARD_BACKEND_PATH is not set; $alone/libkvshard-nccl.so.1: not there" -- \
  "$alone/kvsim" --tp 1 --backend nccl --steps 5 --seed 1
expect 4 "the mpi backend (libkvshard-mpi.so.1) could not be loaded" -- \
  "$alone/kvsim" --tp 1 --backend mpi --steps 5 --seed 1
echo "ok   a missing backend file is exit 4 naming it and where it was looked for"
echo "PASS: the tools load CUDA, NCCL and MPI only as backends"
