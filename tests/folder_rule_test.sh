#!/usr/bin/env bash
# The house's one rule, drawn from the sources' own #include lines: a
# library concept includes only itself and the concepts below it, so no
# arrow runs back up and no two concepts include each other. Bottom up:
#   core                                the DSV4 arithmetic (its kernel
#                                       references read pool/journal.h alone)
#   pool, blocks, abi                   abi: backends/registry.*,
#                                       shared_object.*, each plugin's entry.h
#   topology < plan < shard             the runtime (shard stores pages as
#                                       blocks' page blocks: the disk tier)
#   plugins                             backends/{cuda,nccl,mpi}, the rest
#   kvplan                              the planner the library runs
#   tools                               the programs: anything
# kvshard*.h (the public face) may be included by anyone. Prints each
# include that breaks the rule and fails on any; prints the concept graph.
# Usage: folder_rule_test.sh FILE... (paths from the repository root).
set -uo pipefail

# concept PATH: sets REPLY to the path's concept (no subshell: this runs
# once per include).
concept() {
  case "$1" in
    kvshard*.h) REPLY=face ;;
    core/*) REPLY=core ;;
    pool/*) REPLY=pool ;;
    blocks/*) REPLY=blocks ;;
    backends/registry.* | backends/shared_object.* | backends/*/entry.h) REPLY=abi ;;
    backends/*) REPLY=plugins ;;
    topology/*) REPLY=topology ;;
    plan/*) REPLY=plan ;;
    shard/*) REPLY=shard ;;
    kvplan/*) REPLY=kvplan ;;
    tools/*) REPLY=tools ;;
    *) REPLY=unknown ;;
  esac
}

# What each concept may include besides itself and the face.
declare -A allowed=(
  [core]="pool/journal.h"
  [pool]="core" [blocks]="core" [abi]="core"
  [topology]="core abi"
  [plan]="core pool abi topology"
  [shard]="core pool blocks abi topology plan"
  [plugins]="core pool blocks abi topology plan shard"
  [kvplan]="core pool blocks abi topology plan shard"
  [tools]="core pool blocks abi topology plan shard plugins kvplan"
)

[ $# -gt 0 ] || {
  echo "FAIL: no files given"
  exit 1
}
bad=0
edges=0
declare -A graph=()
for f in "$@"; do
  f=${f#./}
  concept "$f"
  from=$REPLY
  if [ "$from" = unknown ] || [ "$from" = face ]; then
    [ "$from" = face ] && continue
    echo "FAIL: $f belongs to no concept of the rule (place it, or add it to the rule)"
    bad=$((bad + 1))
    continue
  fi
  while IFS= read -r line; do
    [[ "$line" =~ ^#include\ \"([^\"]*)\" ]] || continue
    inc=${BASH_REMATCH[1]}
    [[ "$inc" == */* || "$inc" == kvshard*.h ]] || continue # a sibling by bare name: own folder
    concept "$inc"
    to=$REPLY
    edges=$((edges + 1))
    [ "$to" = "$from" ] || [ "$to" = face ] && continue
    graph["$from -> $to"]=1
    rule=" ${allowed[$from]} "
    if [[ "$rule" != *" $to "* && "$rule" != *" $inc "* ]]; then
      echo "FAIL: $f ($from) includes $inc ($to): against the rule"
      bad=$((bad + 1))
    fi
  done <"$f"
done
printf '  %s\n' "${!graph[@]}" | sort
echo "folder rule: $edges includes in $# files, $bad against the rule"
[ "$bad" -eq 0 ] && [ "$edges" -gt 100 ]
