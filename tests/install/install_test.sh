#!/bin/bash
# The installed library, as an engine outside Bazel uses it: tools/install.sh
# puts libkvshard.so, the headers and kvshard.pc under a prefix; a C program
# then builds with `cc engine.c $(pkg-config --cflags --libs kvshard)` only,
# and runs (a node on the bundled server, one step). Then install.sh's bad
# inputs, each with its documented exit code.
# Usage: install_test.sh INSTALL_SH LIBKVSHARD_SO ENGINE_C
set -u
INSTALL=$1 LIB=$2 ENGINE=$3
T=$TEST_TMPDIR
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$INSTALL" --lib "$LIB" "$T/prefix" >"$T/out" 2>&1 || fail "install exited $?: $(cat "$T/out")"
for f in lib/libkvshard.so lib/pkgconfig/kvshard.pc include/kvshard/kvshard.h \
  include/kvshard/blocks/block_store.h include/kvshard/shard/node.h; do
  [ -f "$T/prefix/$f" ] || fail "$f was not installed"
done
export PKG_CONFIG_PATH=$T/prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs kvshard) || fail "pkg-config does not know kvshard"
[ "$(pkg-config --modversion kvshard)" = "$(sed -n 's/^#define KVS_VERSION_STRING "\(.*\)"/\1/p' \
  "$T/prefix/include/kvshard/core/version.h")" ] || fail "kvshard.pc's version is not the headers'"
# A library built with the sanitizers needs their runtime in the program.
sanitize=()
nm -D "$LIB" | grep -q " U __asan_" && sanitize=(-fsanitize=address,undefined)
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror -pedantic "${sanitize[@]}" "$ENGINE" $flags -o "$T/engine" \
  2>"$T/cc.err" || fail "the engine does not build: $(head -20 "$T/cc.err")"
(cd "$T" && ./engine) >"$T/engine.out" 2>&1 || fail "the engine exited $?: $(cat "$T/engine.out")"
grep -q "^engine: kvshard [0-9.]*, [0-9]* pages of 128 tokens on GPU 0000:1b:00.0, 2 bindings stepped" \
  "$T/engine.out" || fail "the engine said: $(cat "$T/engine.out")"
# The library the engine ran is the installed one, found through its rpath.
ldd "$T/engine" | grep -q "libkvshard.so => $T/prefix/lib/libkvshard.so" ||
  fail "the engine does not load the installed library: $(ldd "$T/engine" | grep kvshard)"

# Bad usage: exit 2; a failure: exit 1; nothing installed either way.
expect() {
  local want=$1 says=$2
  shift 2
  "$INSTALL" "$@" >"$T/bad.out" 2>&1
  local rc=$?
  [ $rc -eq "$want" ] || fail "install $* exited $rc, expected $want: $(cat "$T/bad.out")"
  grep -q -- "$says" "$T/bad.out" || fail "install $* said: $(cat "$T/bad.out") (want: $says)"
}
touch "$T/file"
mkfifo "$T/fifo"
expect 2 "usage: tools/install.sh" --lib "$LIB"
expect 2 "one PREFIX, not" --lib "$LIB" "$T/a" "$T/b"
expect 2 "--lib is given twice" --lib "$LIB" --lib "$LIB" "$T/a"
expect 2 "unknown flag --prefix" --prefix "$T/a"
expect 2 "usage: tools/install.sh" --lib "" "$T/a"
expect 1 "is not a regular file" --lib "$T/missing.so" "$T/a"
expect 1 "is not a regular file" --lib "$T/fifo" "$T/a"
expect 1 "is not a regular file" --lib "$T" "$T/a"
expect 1 "is not a kvshard shared object" --lib "$T/file" "$T/a"
expect 1 "is not a kvshard shared object" --lib "$ENGINE" "$T/a"
expect 1 "exists and is not a directory" --lib "$LIB" "$T/file"
expect 1 "exists and is not a directory" --lib "$LIB" "$T/fifo"
expect 2 "unknown flag -5" --lib "$LIB" -5
expect 1 "exists and is not a directory" --lib "$LIB" /dev/full
[ ! -e "$T/a" ] || fail "a refused install left $T/a behind"
ls -A "$T/prefix" | grep -q "kvshard-install" && fail "the staging folder was left in the prefix"
"$INSTALL" --lib "$LIB" "$T/prefix2" >/dev/full 2>/dev/null
[ $? -eq 1 ] || fail "install with its report to a full disk did not exit 1"
echo "PASS: installed, built with pkg-config alone, ran: $(cat "$T/engine.out")"
