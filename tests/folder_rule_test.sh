#!/usr/bin/env bash
# The house's one rule, drawn from the sources' own #include lines: a
# library concept includes only itself and the concepts below it, so no
# arrow runs back up and no two concepts include each other. Bottom up:
#   core                                the DSV4 arithmetic (its kernel
#                                       references read pool/journal.h alone)
#   pool, blocks, abi                   abi: backends/registry.*,
#                                       shared_object.*, each plugin's entry.h
#   topology < plan < shard             the runtime
#   plugins                             backends/{cuda,nccl,mpi}, the rest
#   kvplan                              the planner the library runs
#   tools                               the programs: anything
# kvshard*.h (the public face) may be included by anyone. Prints each
# include that breaks the rule and fails on any; prints the concept graph.
# Usage: folder_rule_test.sh FILE... (paths from the repository root).
set -uo pipefail

concept() {
  case "$1" in
    kvshard*.h) echo face ;;
    core/*) echo core ;;
    pool/*) echo pool ;;
    blocks/*) echo blocks ;;
    backends/registry.* | backends/shared_object.* | backends/*/entry.h) echo abi ;;
    backends/*) echo plugins ;;
    topology/*) echo topology ;;
    plan/*) echo plan ;;
    shard/*) echo shard ;;
    kvplan/*) echo kvplan ;;
    tools/*) echo tools ;;
    *) echo unknown ;;
  esac
}

# What each concept may include besides itself and the face.
allowed() {
  case "$1" in
    core) echo "pool/journal.h" ;;
    pool | blocks | abi) echo "core" ;;
    topology) echo "core abi" ;;
    plan) echo "core pool abi topology" ;;
    shard) echo "core pool abi topology plan" ;;
    plugins) echo "core pool abi topology plan shard" ;;
    kvplan) echo "core pool blocks abi topology plan shard" ;;
    tools) echo "core pool blocks abi topology plan shard plugins kvplan" ;;
  esac
}

[ $# -gt 0 ] || {
  echo "FAIL: no files given"
  exit 1
}
bad=0
edges=0
declare -A graph=()
for f in "$@"; do
  f=${f#./}
  from=$(concept "$f")
  if [ "$from" = unknown ] || [ "$from" = face ]; then
    [ "$from" = face ] && continue
    echo "FAIL: $f belongs to no concept of the rule (place it, or add it to the rule)"
    bad=$((bad + 1))
    continue
  fi
  for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
    [[ "$inc" == */* || "$inc" == kvshard*.h ]] || continue # a sibling by bare name: own folder
    to=$(concept "$inc")
    edges=$((edges + 1))
    [ "$to" = "$from" ] || [ "$to" = face ] && continue
    graph["$from -> $to"]=1
    rule=" $(allowed "$from") "
    if [[ "$rule" != *" $to "* && "$rule" != *" $inc "* ]]; then
      echo "FAIL: $f ($from) includes $inc ($to): against the rule"
      bad=$((bad + 1))
    fi
  done
done
printf '  %s\n' "${!graph[@]}" | sort
echo "folder rule: $edges includes in $# files, $bad against the rule"
[ "$bad" -eq 0 ] && [ "$edges" -gt 100 ]
