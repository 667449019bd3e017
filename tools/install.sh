#!/usr/bin/env bash
# Installs kvshard for engines built outside Bazel: the core library, its
# backends, the public headers and a pkg-config file.
#
#   tools/install.sh PREFIX                  builds everything, then installs
#   tools/install.sh --lib FILE [--backend FILE]... PREFIX
#                                            installs already built files
#
# Then:  PKG_CONFIG_PATH=PREFIX/lib/pkgconfig \
#          cc engine.c $(pkg-config --cflags --libs kvshard)
#
# Layout: PREFIX/lib/libkvshard.so.2 (SONAME libkvshard.so.2) and the
# libkvshard.so link to it; the backends PREFIX/lib/libkvshard-cuda.so.1,
# libkvshard-nccl.so.1 and libkvshard-mpi.so.1, which the library loads
# from its own folder when asked for a GPU, NCCL or MPI; PREFIX/include/
# kvshard.h (the whole API) and kvshard_cuda.h, kvshard_nccl.h and
# kvshard_mpi.h (typed helpers for engines holding those handles); and
# PREFIX/lib/pkgconfig/kvshard.pc, which names no CUDA, NCCL or MPI folder;
# the Python package in PREFIX/lib/python/kvshard, with a libkvshard.so.2
# link beside it to the installed library, and its example in
# PREFIX/share/kvshard/examples. The last line says which PYTHONPATH finds
# the package.
#
# Exit 0 installed; 2 bad usage (a PREFIX holding white space or one of
# $ # \ " ' `, which kvshard.pc could not name usably, included); 1 a
# failure: the build, a file that is not the kvshard shared object it
# should be, a PREFIX that is not a directory or cannot be created, a
# copy, or the closing report (a full disk).
# Everything is checked before PREFIX is touched, and the files are staged
# in PREFIX and renamed into place last: a refused install writes nothing,
# and one that fails while copying leaves at most PREFIX itself.
set -uo pipefail

usage() {
  echo "usage: tools/install.sh [--lib LIBKVSHARD.SO.1 [--backend LIBKVSHARD-X.SO.1]...] PREFIX" >&2
  exit 2
}
fail() {
  echo "install: $*" >&2
  exit 1
}

lib="" prefix=""
backends=()
while [ $# -gt 0 ]; do
  case $1 in
    --lib)
      [ $# -ge 2 ] && [ -n "$2" ] || usage
      [ -z "$lib" ] || { echo "install: --lib is given twice" >&2; exit 2; }
      lib=$2
      shift 2
      ;;
    --backend)
      [ $# -ge 2 ] && [ -n "$2" ] || usage
      backends+=("$2")
      shift 2
      ;;
    -h | --help) sed -n '/^# Installs/,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "install: unknown flag $1" >&2; usage ;;
    *)
      [ -z "$prefix" ] || { echo "install: one PREFIX, not '$prefix' and '$1'" >&2; exit 2; }
      prefix=$1
      shift
      ;;
  esac
done
[ -n "$prefix" ] || usage
[ ${#backends[@]} -eq 0 ] || [ -n "$lib" ] || {
  echo "install: --backend goes with --lib (without them, install.sh builds both)" >&2
  exit 2
}
case $prefix in
  /*) ;;
  *) prefix=$PWD/$prefix ;;
esac
# kvshard.pc names PREFIX in Cflags and Libs, which engines read as
# $(pkg-config --cflags --libs kvshard): the shell splits that output at
# white space, so no escape survives it, and pkg-config reads $ as a
# variable, # as a comment and \ and quotes as its own quoting. A PREFIX
# holding any of them would install a kvshard.pc nothing can use: refused
# before anything is written.
case $prefix in
  *[[:space:]\$\#\\\"\'\`]*)
    printf 'install: PREFIX %q holds white space or one of $ # \\ " '"'"' `, which kvshard.pc cannot carry (pkg-config'"'"'s output is split at spaces by the shell that reads it); choose a PREFIX without them\n' "$prefix" >&2
    exit 2
    ;;
esac
[ ! -e "$prefix" ] || [ -d "$prefix" ] || fail "PREFIX $prefix exists and is not a directory"

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$lib" ]; then
  (cd "$root" && bazel build //:libkvshard.so.2 //backends:shared_objects) ||
    fail "bazel build //:libkvshard.so.2 //backends:shared_objects failed"
  bin=$(cd "$root" && bazel info bazel-bin 2>/dev/null)
  lib=$bin/libkvshard.so.2
  backends=("$bin/backends/cuda/libkvshard-cuda.so.1" "$bin/backends/nccl/libkvshard-nccl.so.1"
    "$bin/backends/mpi/libkvshard-mpi.so.1")
fi

# An ELF shared object whose SONAME is `want`, not any file by that name.
check_object() {
  local file=$1 want=$2
  [ -f "$file" ] || fail "$file is not a regular file"
  [ "$(head -c 4 "$file" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] &&
    [ "$(readelf -d "$file" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')" = "$want" ] ||
    fail "$file is not $want (a kvshard shared object with that SONAME)"
}
check_object "$lib" libkvshard.so.2
names=()
for b in "${backends[@]}"; do
  name=$(basename "$b")
  case $name in
    libkvshard-cuda.so.1 | libkvshard-nccl.so.1 | libkvshard-mpi.so.1) ;;
    *) fail "$b is not a kvshard backend (libkvshard-cuda.so.1, -nccl.so.1 or -mpi.so.1)" ;;
  esac
  case " ${names[*]} " in
    *" $name "*) echo "install: --backend $name is given twice" >&2; exit 2 ;;
  esac
  names+=("$name")
  check_object "$b" "$name"
done
for h in kvshard.h kvshard_cuda.h kvshard_nccl.h kvshard_mpi.h python/kvshard/__init__.py \
  python/examples/serve_loop.py; do
  [ -f "$root/$h" ] || fail "no $h under $root: run from a kvshard tree"
done
version=$(sed -n 's/^#define KVS_VERSION_STRING "\(.*\)"/\1/p' "$root/kvshard.h")
[ -n "$version" ] || fail "no KVS_VERSION_STRING in $root/kvshard.h"

# Staged inside PREFIX, so that putting each piece in place is a rename on
# one file system.
mkdir -p "$prefix" || fail "cannot create $prefix"
stage=$(mktemp -d "$prefix/.kvshard-install.XXXXXX") || fail "cannot create a staging folder in $prefix"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib/pkgconfig" "$stage/include" "$stage/python/kvshard" "$stage/examples" ||
  fail "staging failed"
for f in "$lib" "${backends[@]}"; do
  cp "$f" "$stage/lib/$(basename "$f")" && chmod 0755 "$stage/lib/$(basename "$f")" ||
    fail "copying $f failed"
done
ln -s libkvshard.so.2 "$stage/lib/libkvshard.so" || fail "linking libkvshard.so failed"
(cd "$root" && cp kvshard.h kvshard_cuda.h kvshard_nccl.h kvshard_mpi.h "$stage/include/") ||
  fail "copying the headers failed"
# The package finds the library beside itself: a link to the installed one
# (the library then finds its backends in its own, real, folder).
(cd "$root/python" && cp kvshard/*.py "$stage/python/kvshard/" &&
  cp examples/*.py "$stage/examples/") || fail "copying the Python package failed"
ln -s ../../libkvshard.so.2 "$stage/python/kvshard/libkvshard.so.2" ||
  fail "linking the package's libkvshard.so.2 failed"
cat >"$stage/lib/pkgconfig/kvshard.pc" <<PC || fail "writing kvshard.pc failed"
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: kvshard
Description: Plans, allocates and keeps consistent the paged KV cache of hybrid-attention LLMs
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lkvshard
PC

mkdir -p "$prefix/lib/pkgconfig" "$prefix/include" || fail "creating $prefix/lib failed"
for f in "$stage"/lib/libkvshard*; do
  mv -f "$f" "$prefix/lib/" || fail "moving $(basename "$f") into $prefix/lib failed"
done
for f in "$stage"/include/*.h; do
  mv -f "$f" "$prefix/include/" || fail "moving $(basename "$f") into $prefix/include failed"
done
mv -f "$stage/lib/pkgconfig/kvshard.pc" "$prefix/lib/pkgconfig/kvshard.pc" ||
  fail "moving kvshard.pc into $prefix failed"
mkdir -p "$prefix/lib/python" "$prefix/share/kvshard" || fail "creating $prefix/lib/python failed"
rm -rf "$prefix/lib/python/kvshard" "$prefix/share/kvshard/examples" &&
  mv "$stage/python/kvshard" "$prefix/lib/python/kvshard" &&
  mv "$stage/examples" "$prefix/share/kvshard/examples" ||
  fail "moving the Python package into $prefix failed"
echo "install: kvshard $version in $prefix (lib/libkvshard.so.2 and ${#backends[@]} backends," \
  "include/kvshard.h, lib/pkgconfig/kvshard.pc, lib/python/kvshard)" &&
  echo "install: for Python: export PYTHONPATH=$prefix/lib/python\${PYTHONPATH:+:\$PYTHONPATH}" ||
  exit 1
