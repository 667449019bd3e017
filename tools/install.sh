#!/usr/bin/env bash
# Installs kvshard for engines built outside Bazel: libkvshard.so, every
# public header (kvshard.h includes them all) and a pkg-config file.
#
#   tools/install.sh PREFIX            builds //:libkvshard.so, then installs
#   tools/install.sh --lib FILE PREFIX installs an already built library
#
# Then:  PKG_CONFIG_PATH=PREFIX/lib/pkgconfig \
#          cc engine.c $(pkg-config --cflags --libs kvshard)
#
# Layout: PREFIX/lib/libkvshard.so, PREFIX/include/kvshard/{kvshard.h,
# core/, blocks/, cuda/, shard/, topology/}, PREFIX/lib/pkgconfig/
# kvshard.pc. Exit 0 installed; 2 bad usage; 1 a failure: the build, a
# library that is not kvshard's shared object, a PREFIX that is not a
# directory or cannot be created, a copy, or the closing report (a full
# disk). Everything is checked before PREFIX is touched, and the files are
# staged in PREFIX and renamed into place last: a refused install writes
# nothing, and one that fails while copying leaves at most PREFIX itself.
set -uo pipefail

usage() {
  echo "usage: tools/install.sh [--lib LIBKVSHARD.SO] PREFIX" >&2
  exit 2
}
fail() {
  echo "install: $*" >&2
  exit 1
}

lib="" prefix=""
while [ $# -gt 0 ]; do
  case $1 in
    --lib)
      [ $# -ge 2 ] && [ -n "$2" ] || usage
      [ -z "$lib" ] || { echo "install: --lib is given twice" >&2; exit 2; }
      lib=$2
      shift 2
      ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "install: unknown flag $1" >&2; usage ;;
    *)
      [ -z "$prefix" ] || { echo "install: one PREFIX, not '$prefix' and '$1'" >&2; exit 2; }
      prefix=$1
      shift
      ;;
  esac
done
[ -n "$prefix" ] || usage
case $prefix in
  /*) ;;
  *) prefix=$PWD/$prefix ;;
esac
[ ! -e "$prefix" ] || [ -d "$prefix" ] || fail "PREFIX $prefix exists and is not a directory"

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$lib" ]; then
  (cd "$root" && bazel build //:libkvshard.so) || fail "bazel build //:libkvshard.so failed"
  lib=$(cd "$root" && bazel info bazel-bin 2>/dev/null)/libkvshard.so
fi
[ -f "$lib" ] || fail "the library $lib is not a regular file"
# An ELF shared object that carries kvshard's API, not any file by that name.
[ "$(head -c 4 "$lib" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] &&
  grep -q -a kvs_version "$lib" || fail "the library $lib is not a kvshard shared object"
[ -f "$root/kvshard.h" ] || fail "no kvshard.h under $root: run from a kvshard tree"
version=$(sed -n 's/^#define KVS_VERSION_STRING "\(.*\)"/\1/p' "$root/core/version.h")
[ -n "$version" ] || fail "no KVS_VERSION_STRING in $root/core/version.h"

# Where the headers kvshard.h reaches beyond its own come from: CUDA's
# runtime and NCCL, and Open MPI's mpi.h.
cuda_inc=/usr/local/cuda/include
[ -f "$cuda_inc/cuda_runtime_api.h" ] || fail "no CUDA headers in $cuda_inc (the library has CUDA in it)"
mpi_inc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
[ -n "$mpi_inc" ] || mpi_inc=/usr/lib/x86_64-linux-gnu/openmpi/include
[ -f "$mpi_inc/mpi.h" ] || fail "no mpi.h in $mpi_inc"

# Staged inside PREFIX, so that putting each piece in place is a rename on
# one file system.
mkdir -p "$prefix" || fail "cannot create $prefix"
stage=$(mktemp -d "$prefix/.kvshard-install.XXXXXX") || fail "cannot create a staging folder in $prefix"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib/pkgconfig" "$stage/include/kvshard" || fail "staging failed"
cp "$lib" "$stage/lib/libkvshard.so" && chmod 0755 "$stage/lib/libkvshard.so" ||
  fail "copying $lib failed"
(cd "$root" && cp --parents kvshard.h core/*.h blocks/*.h plan/*.h backends/*/*.h shard/*.h topology/*.h \
  "$stage/include/kvshard/") || fail "copying the headers failed"
cat >"$stage/lib/pkgconfig/kvshard.pc" <<PC || fail "writing kvshard.pc failed"
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include/kvshard

Name: kvshard
Description: Plans, allocates and keeps consistent the paged KV cache of hybrid-attention LLMs
Version: $version
Cflags: -I\${includedir} -I$cuda_inc -I$mpi_inc
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lkvshard
PC

mkdir -p "$prefix/lib/pkgconfig" "$prefix/include" &&
  rm -rf "$prefix/include/kvshard" &&
  mv "$stage/include/kvshard" "$prefix/include/kvshard" &&
  mv -f "$stage/lib/libkvshard.so" "$prefix/lib/libkvshard.so" &&
  mv -f "$stage/lib/pkgconfig/kvshard.pc" "$prefix/lib/pkgconfig/kvshard.pc" ||
  fail "moving the files into $prefix failed"
echo "install: kvshard $version in $prefix (lib/libkvshard.so, include/kvshard/, lib/pkgconfig/kvshard.pc)" ||
  exit 1
