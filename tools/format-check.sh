#!/usr/bin/env bash
# Every C, C++ and CUDA file kvshard owns is formatted as .clang-format says
# (Google style, 100 columns, includes in the order the code chose), by
# clang-format 14 (Debian's clang-format-14: another version formats some
# constructs differently). Prints each file that is not, with the fix, and
# exits 1; 0 when all are. third_party/ is not ours and is left alone.
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
echo "format-check: ${#files[@]} files formatted as .clang-format says"
