#!/usr/bin/env bash
# pool/'s include rule (pool/pool_internal.h), drawn from the files' own
# #include lines: includes go one way, down
#   core (pool_internal.h, window_pool*.c)
#   -> slots (slots.*), prefix (prefix*) -> host (host.*)
#   -> probe map (probe_map.*) -> public (window_pool.h, free_list.*, journal.*)
# and never across (slots and the prefix index know nothing of each other).
# A file may include its own concept's headers and those the rule puts
# below it. Prints the graph, then each include that breaks the rule, and
# fails on any. Usage: include_rule_test.sh FILE... (pool/ paths).
set -uo pipefail

concept() {
  case "$(basename "$1")" in
    pool_internal.h | window_pool*.c) echo core ;;
    slots.*) echo slots ;;
    prefix*) echo prefix ;;
    host.*) echo host ;;
    probe_map.*) echo probe_map ;;
    window_pool.h | free_list.* | journal.*) echo public ;;
    *) echo unknown ;;
  esac
}

# What each concept may include besides itself.
allowed() {
  case "$1" in
    core) echo "slots prefix host probe_map public" ;;
    slots) echo "probe_map public" ;;
    prefix) echo "host probe_map public" ;;
    host) echo "probe_map public" ;;
    probe_map) echo "" ;;
    public) echo "" ;;
    *) echo "" ;;
  esac
}

[ $# -gt 0 ] || {
  echo "FAIL: no files given"
  exit 1
}
bad=0
edges=0
for f in "$@"; do
  from=$(concept "$f")
  if [ "$from" = unknown ]; then
    echo "FAIL: $f belongs to no concept of the rule (name it, or add it to the rule)"
    bad=$((bad + 1))
    continue
  fi
  for inc in $(sed -n 's/^#include "\(pool\/[^"]*\)".*/\1/p' "$f"); do
    to=$(concept "$inc")
    edges=$((edges + 1))
    echo "  $f ($from) -> $inc ($to)"
    if [ "$to" != "$from" ] && ! [[ " $(allowed "$from") " == *" $to "* ]]; then
      echo "FAIL: $f ($from) includes $inc ($to): against the rule"
      bad=$((bad + 1))
    fi
  done
done
echo "include rule: $edges includes between pool/ files, $bad against the rule"
[ "$bad" -eq 0 ] && [ "$edges" -gt 10 ]
