#!/usr/bin/env bash
# Every C, C++ and CUDA file kvshard owns is formatted as .clang-format says
# (Google style, 100 columns, includes in the order the code chose), by
# clang-format 14 (Debian's clang-format-14: another version formats some
# constructs differently), and every header's include guard follows its
# path. Prints each file that is not, with the fix, and exits 1; 0 when all
# are. third_party/ is not ours and is left alone.
#   tools/format-check.sh [--fix]   (--fix formats them in place)
set -uo pipefail
cd "$(dirname "$0")/.."
fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  *)
    echo "usage: tools/format-check.sh [--fix]" >&2
    exit 2
    ;;
esac
formatter=clang-format-14
command -v "$formatter" >/dev/null || {
  echo "format-check: $formatter is not installed (tools/setup.sh installs it)" >&2
  exit 1
}
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.cuh' | grep -v '^third_party/')
if [ ${#files[@]} -eq 0 ]; then
  echo "format-check: no sources found (not a git checkout?)" >&2
  exit 1
fi
if [ "$fix" -eq 1 ]; then
  "$formatter" -i --style=file "${files[@]}" || exit 1
fi
bad=()
for f in "${files[@]}"; do
  "$formatter" --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -ne 0 ]; then
  printf 'format-check: not formatted: %s\n' "${bad[@]}" >&2
  echo "format-check: ${#bad[@]} of ${#files[@]} files differ from .clang-format; fix with: tools/format-check.sh --fix" >&2
  exit 1
fi
# Every header's include guard is KVS_ and its path in capitals, / and .
# as _ (core/window_pool.h: KVS_CORE_WINDOW_POOL_H), so a header that moves
# cannot keep a guard naming where it was.
guards=()
for f in "${files[@]}"; do
  case "$f" in *.h | *.cuh) ;; *) continue ;; esac
  want="KVS_$(tr 'a-z/.' 'A-Z__' <<<"$f")"
  got=$(grep -m1 -oE '^#ifndef [A-Za-z0-9_]+' "$f" | cut -d' ' -f2)
  [ "$got" = "$want" ] && grep -qx "#define $want" "$f" || guards+=("$f: ${got:-no guard}, want $want")
done
if [ ${#guards[@]} -ne 0 ]; then
  printf 'format-check: include guard: %s\n' "${guards[@]}" >&2
  echo "format-check: ${#guards[@]} headers' guards do not follow their paths" >&2
  exit 1
fi
echo "format-check: ${#files[@]} files formatted as .clang-format says, every guard its path"
