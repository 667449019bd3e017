#!/usr/bin/env bash
# The library as an engine outside Bazel uses it: installed by
# tools/install.sh, found by pkg-config alone, linked by a plain cc.
#   - the installed libkvshard.so.2 has that SONAME and the libkvshard.so
#     link, exports at most 150 symbols, all kvs_, and needs no libcudart,
#     libnccl or libmpi; the backends sit beside it;
#   - kvshard.h compiles as strict C11 (-std=c11 -pedantic -Wall -Werror)
#     with `pkg-config --cflags kvshard` alone, which names no CUDA, NCCL
#     or MPI folder;
#   - examples/engine.c (the request-centric API alone: admit, bind, step,
#     translate, check, free, finish, a follower's bind refused) builds
#     with pkg-config alone and runs against the installed library with no
#     CUDA, NCCL or MPI on its include or library path;
#   - bad usage exits 2, a failure 1, and neither installs anything.
# Usage: install_test.sh INSTALL LIBKVSHARD.SO.1 ENGINE.C BACKEND...
set -uo pipefail
INSTALL=$1 LIB=$2 ENGINE=$3
shift 3
BACKENDS=("$@")
T=$TEST_TMPDIR
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
backend_flags=()
for b in "${BACKENDS[@]}"; do backend_flags+=(--backend "$b"); done

"$INSTALL" --lib "$LIB" "${backend_flags[@]}" "$T/prefix" >"$T/out" 2>&1 ||
  fail "install exited $?: $(cat "$T/out")"
P=$T/prefix
for f in lib/libkvshard.so.2 lib/libkvshard-cuda.so.1 lib/libkvshard-nccl.so.1 \
  lib/libkvshard-mpi.so.1 lib/pkgconfig/kvshard.pc include/kvshard.h include/kvshard_cuda.h \
  include/kvshard_nccl.h include/kvshard_mpi.h; do
  [ -f "$P/$f" ] || fail "$f was not installed"
done
[ "$(readlink "$P/lib/libkvshard.so")" = libkvshard.so.2 ] ||
  fail "lib/libkvshard.so is not a link to libkvshard.so.2"
soname=$(readelf -d "$P/lib/libkvshard.so.2" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libkvshard.so.2 ] || fail "SONAME is '$soname', not libkvshard.so.2"

# The ABI: at most 150 exports, every one kvs_.
nm -D --defined-only "$P/lib/libkvshard.so.2" | awk '{print $3}' | sort >"$T/exports"
n=$(wc -l <"$T/exports")
[ "$n" -le 150 ] || fail "$n exported symbols, more than 150"
grep -v '^kvs_' "$T/exports" >"$T/foreign" && fail "exports that are not kvs_: $(head "$T/foreign")"
# Its needs: no CUDA, NCCL or MPI library.
needs=$(readelf -d "$P/lib/libkvshard.so.2" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
grep -qE 'libcudart|libnccl|libmpi|libcuda\.' <<<"$needs" && fail "the core needs: $needs"

export PKG_CONFIG_PATH=$P/lib/pkgconfig
cflags=$(pkg-config --cflags kvshard) || fail "pkg-config does not know kvshard"
libs=$(pkg-config --libs kvshard)
grep -qiE 'cuda|nccl|mpi' <<<"$cflags $libs" && fail "pkg-config names CUDA, NCCL or MPI: $cflags $libs"
[ "$(pkg-config --modversion kvshard)" = "$(sed -n 's/^#define KVS_VERSION_STRING "\(.*\)"/\1/p' \
  "$P/include/kvshard.h")" ] || fail "kvshard.pc's version is not the header's"
printf '#include <kvshard.h>\nint main(void) { return kvs_version() == 0; }\n' >"$T/header.c"
# shellcheck disable=SC2086
cc -std=c11 -pedantic -Wall -Werror -fsyntax-only $cflags "$T/header.c" 2>"$T/cc.err" ||
  fail "kvshard.h does not compile as strict C11: $(head -20 "$T/cc.err")"

# A library built with the sanitizers needs their runtime in the program.
sanitize=()
# (Each producer's output is captured before grep -q reads it: grep stops
# at its first match, and under pipefail the producer's SIGPIPE would fail
# the pipeline, or hide a match, at random.)
grep -q " U __asan_" <<<"$(nm -D "$LIB")" && sanitize=(-fsanitize=address,undefined)
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror -pedantic "${sanitize[@]}" "$ENGINE" $cflags $libs \
  -o "$T/engine" 2>"$T/cc.err" || fail "the engine does not build: $(head -20 "$T/cc.err")"
# Nothing of CUDA, NCCL or MPI on the engine's library path.
(cd "$T" && env -u LD_LIBRARY_PATH -u KVSHARD_BACKEND_PATH ./engine) >"$T/engine.out" 2>&1 ||
  fail "the engine exited $?: $(cat "$T/engine.out")"
for r in 0 1; do
  grep -qE "^engine: rank $r: [0-9]+ pages of 128 tokens, token 128 in window slot [0-9]+ then -1, digest [0-9a-f]{16}$" \
    "$T/engine.out" || fail "the engine said: $(cat "$T/engine.out")"
done
[ "$(grep -o 'digest [0-9a-f]*' "$T/engine.out" | sort -u | wc -l)" -eq 1 ] ||
  fail "the ranks' digests differ: $(cat "$T/engine.out")"
engine_ldd=$(ldd "$T/engine")
grep -qF "libkvshard.so.2 => $P/lib/libkvshard.so.2 " <<<"$engine_ldd" ||
  fail "the engine does not load the installed library: $(grep kvshard <<<"$engine_ldd")"
grep -qE 'libcudart|libnccl|libmpi' <<<"$engine_ldd" && fail "the engine loads $engine_ldd"

# The Python package: installed beside the library, found with the
# PYTHONPATH the install's last line prints, by Debian's interpreter.
grep -q "^install: for Python: export PYTHONPATH=$P/lib/python" "$T/out" ||
  fail "install did not print the PYTHONPATH line: $(cat "$T/out")"
[ "$(readlink -f "$P/lib/python/kvshard/libkvshard.so.2")" = "$(readlink -f "$P/lib/libkvshard.so.2")" ] ||
  fail "lib/python/kvshard/libkvshard.so.2 is not the installed library"
[ -f "$P/share/kvshard/examples/serve_loop.py" ] || fail "the Python example was not installed"
PY=/usr/bin/python3
python_env=(env -u KVSHARD_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$P/lib/python"
  PYTHONDONTWRITEBYTECODE=1)
[ -n "${sanitize[*]}" ] && python_env+=(LD_PRELOAD="$(ldd "$LIB" | awk '/libasan|libubsan/ {print $3}' | paste -sd:)"
  ASAN_OPTIONS=detect_leaks=0)
if "$PY" -c "import numpy" 2>/dev/null; then
  "${python_env[@]}" "$PY" -c "
import kvshard
with kvshard.Node(topology='bundled', device='cpu', budget='4GiB', tp=1, pp=1) as n:
    print('python node', n.num_pages, n.page)
print('python plan', kvshard.plan(topology='bundled', tp=8).num_pages)
" >"$T/py.out" 2>&1 || fail "the installed package did not run: $(cat "$T/py.out")"
  grep -qE "^python node [0-9]+ 128$" "$T/py.out" || fail "the package said: $(cat "$T/py.out")"
  grep -qE "^python plan [0-9]+$" "$T/py.out" || fail "the package's plan said: $(cat "$T/py.out")"
  # pip, offline, into a venv that sees Debian's packages.
  if "$PY" -m venv --help >/dev/null 2>&1; then
    cp -r "$(dirname "$INSTALL")/../python" "$T/python-src"
    "$PY" -m venv --system-site-packages "$T/venv" >"$T/venv.out" 2>&1 ||
      fail "python3 -m venv failed: $(cat "$T/venv.out")"
    "$T/venv/bin/pip" install --no-index --no-cache-dir --no-build-isolation "$T/python-src" >"$T/pip.out" 2>&1 ||
      fail "pip install --no-build-isolation ./python failed: $(tail -20 "$T/pip.out")"
    (cd "$T" && "${python_env[@]}" PYTHONPATH= KVSHARD_LIBRARY="$P/lib" "$T/venv/bin/python" -c "
import kvshard, os
assert os.path.dirname(kvshard.__file__).startswith('$T/venv'), kvshard.__file__
print('pip package', kvshard.library_version())
") >"$T/pip-run.out" 2>&1 || fail "the pip-installed package did not run: $(cat "$T/pip-run.out")"
    grep -q "^pip package $(pkg-config --modversion kvshard)$" "$T/pip-run.out" ||
      fail "the pip-installed package said: $(cat "$T/pip-run.out")"
  else
    echo "note: no python3 venv module; the pip install is not tried" >&2
  fi
else
  echo "note: $PY has no numpy; the Python package is not run (tools/setup.sh installs it)" >&2
fi

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
CUDA=${BACKENDS[0]}
expect 2 "usage: tools/install.sh" --lib "$LIB"
expect 2 "one PREFIX, not" --lib "$LIB" "$T/a" "$T/b"
expect 2 "--lib is given twice" --lib "$LIB" --lib "$LIB" "$T/a"
expect 2 "unknown flag --prefix" --prefix "$T/a"
expect 2 "usage: tools/install.sh" --lib "" "$T/a"
expect 2 "--backend goes with --lib" --backend "$CUDA" "$T/a"
expect 2 "is given twice" --lib "$LIB" --backend "$CUDA" --backend "$CUDA" "$T/a"
expect 1 "is not a regular file" --lib "$T/missing.so" "$T/a"
expect 1 "is not a regular file" --lib "$T/fifo" "$T/a"
expect 1 "is not a regular file" --lib "$T" "$T/a"
expect 1 "is not libkvshard.so.2" --lib "$T/file" "$T/a"
expect 1 "is not libkvshard.so.2" --lib "$ENGINE" "$T/a"
expect 1 "is not libkvshard.so.2" --lib "$CUDA" "$T/a"
expect 1 "is not a kvshard backend" --lib "$LIB" --backend "$LIB" "$T/a"
expect 1 "exists and is not a directory" --lib "$LIB" "$T/file"
expect 1 "exists and is not a directory" --lib "$LIB" "$T/fifo"
expect 2 "unknown flag -5" --lib "$LIB" -5
expect 1 "exists and is not a directory" --lib "$LIB" /dev/full
# Issue 30, section 5: a PREFIX kvshard.pc cannot carry (pkg-config's
# output is split at white space by the shell that reads it; $ and # are
# pkg-config's own) is bad usage, and nothing is written: not even a
# relative one under a folder whose name has a space.
for bad in "$T/a b" "$T/a	tab" "$T/a\$x" "$T/a#x" "$T/a'q" "$T/a\\b"; do
  expect 2 "which kvshard.pc cannot carry" --lib "$LIB" "$bad"
  [ ! -e "$bad" ] || fail "a refused PREFIX '$bad' was created"
done
mkdir -p "$T/with space"
abs_install=$(realpath "$INSTALL") abs_lib=$(realpath "$LIB")
(cd "$T/with space" && "$abs_install" --lib "$abs_lib" rel >"$T/bad.out" 2>&1)
[ $? -eq 2 ] || fail "a relative PREFIX under '$T/with space' was not refused: $(cat "$T/bad.out")"
[ ! -e "$T/with space/rel" ] || fail "a refused relative PREFIX was created"
[ ! -e "$T/a" ] || fail "a refused install left $T/a behind"
grep -q "kvshard-install" <<<"$(ls -A "$P")" && fail "the staging folder was left in the prefix"
"$INSTALL" --lib "$LIB" "$T/prefix2" >/dev/full 2>/dev/null
[ $? -eq 1 ] || fail "install with its report to a full disk did not exit 1"
"$INSTALL" --help >"$T/help" || fail "install --help exited $?"
tail -n 1 "$T/help" | grep -q '\.$' || fail "install --help ends mid-sentence: $(tail -n 1 "$T/help")"
echo "PASS: installed ($n exports, needs $needs), built with pkg-config alone, ran:"
cat "$T/engine.out"
