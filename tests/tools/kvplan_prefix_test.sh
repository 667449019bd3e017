#!/usr/bin/env bash
# kvplan plan with a prefix cache: the host tier (--host-cache BYTES) and
# the retained window tails (--prefix-cache). Expected numbers are computed
# here from the plan's own per-rank tiers (jq and shell arithmetic), never
# read back from the keys under test.
# Usage: kvplan_prefix_test.sh KVPLAN
set -uo pipefail
kvplan=$1
source "$(dirname "$0")/check.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}/prefix
rm -rf "$T" && mkdir -p "$T"
B=(--topology bundled)

plan() { "$kvplan" "${B[@]}" "$@" --json 2>/dev/null; }
# A page's compressed and indexer rows on rank R of plan JSON: its tiers
# over the common page count.
rows() { jq "(.ranks[$1].tiers.compressed + .ranks[$1].tiers.indexer) / .num_pages"; }

# ---- the host tier: slots, slot bytes, tokens ----
# A host tier implies the prefix cache, whose carve keeps tail states.
base=$(plan --prefix-cache | jq -c 'del(.retained_tails)')
# (Each at most the bundled export's 2 TiB of host memory, which a tier
# cannot exceed.)
for bytes in 1099511627776 274877906944 1848290697216 123456789012 7045120 14090239; do
  out=$(plan --host-cache "$bytes")
  read -r b sb s tok page < <(echo "$out" |
    jq -r '"\(.host_tier.bytes) \(.host_tier.slot_bytes) \(.host_tier.slots) \(.host_tier.tokens) \(.full_token / .num_pages)"')
  check "--host-cache $bytes: bytes as given" "$bytes" "$b"
  check "--host-cache $bytes: slots x slot_bytes <= bytes < (slots + 1) x slot_bytes" yes \
    "$([ $((s * sb)) -le "$bytes" ] && [ "$bytes" -lt $(((s + 1) * sb)) ] && echo yes || echo no)"
  check "--host-cache $bytes: tokens = slots x page" $((s * page)) "$tok"
  # Every other key is the prefix cache's plan without the flag, key for key.
  check "--host-cache $bytes: every other key unchanged" "$(echo "$base" | jq -S -c .)" \
    "$(echo "$out" | jq -S -c 'del(.host_tier, .retained_tails)')"
done
check "one slot at exactly one slot's bytes" 1 "$(plan --host-cache 7045120 | jq .host_tier.slots)"
check "one slot one byte short of two" 1 "$(plan --host-cache 14090239 | jq .host_tier.slots)"

# tp 8 on one machine: a slot is every rank's own copy, 8 x one rank's rows.
tp8=$(plan --host-cache 1TiB)
one=$(echo "$tp8" | rows 0)
check "tp 8: slot_bytes = 8 x a rank's page rows" $((8 * one)) "$(echo "$tp8" | jq .host_tier.slot_bytes)"
# tp 1 x pp 1 runs 8 replicas of one rank; each rank holds the whole stack,
# the same rows per page as a tp 8 rank (the stages are equal).
tp1=$(plan --tp 1 --pp 1 --host-cache 1TiB)
check "tp 8's slot_bytes = 8 x a tp 1 rank's page rows on the same GPUs" \
  $((8 * $(echo "$tp1" | rows 0))) "$(echo "$tp8" | jq .host_tier.slot_bytes)"
check "tp 1 x 8 replicas: the same slot" "$(echo "$tp8" | jq .host_tier.slot_bytes)" \
  "$(echo "$tp1" | jq .host_tier.slot_bytes)"
# tp 4 x pp 2: four ranks of each stage on the machine.
tp4=$(plan --tp 4 --pp 2 --host-cache 1TiB)
check "tp 4 x pp 2: slot_bytes = 4 x stage 0's rows + 4 x stage 1's" \
  $((4 * $(echo "$tp4" | rows 0) + 4 * $(echo "$tp4" | rows 4))) \
  "$(echo "$tp4" | jq .host_tier.slot_bytes)"
# Two machines, one replica each: BYTES is per machine, the slot the same.
two=$(plan --nodes 2 --tp 8 --pp 1 --host-cache 1TiB)
check "two nodes, a replica each: a machine's slot is its own 8 ranks'" \
  "$(echo "$tp8" | jq .host_tier.slot_bytes)" "$(echo "$two" | jq .host_tier.slot_bytes)"
# Two machines, a stage each (tp 8 x pp 2): the machine whose stage holds
# more rows per page sets the slot.
two=$(plan --nodes 2 --host-cache 1TiB)
a=$(echo "$two" | rows 0) b=$(echo "$two" | rows 8)
check "two nodes, a stage each: the larger machine's 8 ranks" $((8 * (a > b ? a : b))) \
  "$(echo "$two" | jq .host_tier.slot_bytes)"
check "two nodes, a stage each: the stages differ (the test means something)" yes \
  "$([ "$a" -ne "$b" ] && echo yes || echo no)"

# Doubling the bytes doubles the slots, within one.
for bytes in 1TiB 333GiB 834567890123; do
  s1=$(plan --host-cache "$bytes" | jq .host_tier.slots)
  b2=$(plan --host-cache "$bytes" | jq '.host_tier.bytes * 2')
  s2=$(plan --host-cache "$b2" | jq .host_tier.slots)
  check "--host-cache $bytes doubled: slots $s1 -> 2x or 2x + 1" yes \
    "$([ "$s2" -eq $((2 * s1)) ] || [ "$s2" -eq $((2 * s1 + 1)) ] && echo yes || echo no)"
done

# The keys: host_tier only with --host-cache, retained_tails with either flag.
check "no flag: neither object" "false false" "$(plan | jq -r '"\(has("host_tier")) \(has("retained_tails"))"')"
check "--prefix-cache: retained_tails, no host tier" "false true" \
  "$(plan --prefix-cache | jq -r '"\(has("host_tier")) \(has("retained_tails"))"')"
check "--host-cache: both" "true true" "$(echo "$tp8" | jq -r '"\(has("host_tier")) \(has("retained_tails"))"')"
check "host_tier's keys" '["bytes","slot_bytes","slots","tokens","capacity_per","dp_groups_per_machine"]' \
  "$(echo "$tp8" | jq -c '.host_tier | keys_unsorted')"
check "retained_tails' keys" '["pages","bytes_per_tail","tails","window_pages","reserve_pages","left_pages","running_pages","max_running"]' \
  "$(echo "$tp8" | jq -c '.retained_tails | keys_unsorted')"
# With the prefix cache every window page keeps a tail state: two rows of
# each ratio-4 region (attention rings of 8,192 B rows, indexer rings of
# 2,048 B rows for DSV4-Flash), after the 65 request slots' rings of 8
# rows (the regions' scratch rows are the plan's scratch tier); the
# ratio-128 rings (128 rows of 4,096 B a slot) keep none. Priced by hand
# from the plan's window.
# csa LAYERS_JSON: DSV4-Flash's ratio-4 layers among [first, last].
csa() { jq "[range(.[0]; .[1] + 1) | select(. >= 2 and . % 2 == 0)] | length" <<<"$1"; }
hca() { jq "[range(.[0]; .[1] + 1) | select(. >= 3 and . % 2 == 1)] | length" <<<"$1"; }
for flags in "" "--tp 4 --pp 2" "--kv-dtype fp8"; do
  # shellcheck disable=SC2086
  out=$(plan --prefix-cache $flags)
  win=$(echo "$out" | jq .n_win_pages)
  layers=$(echo "$out" | jq -c '.ranks[0].layers')
  c=$(csa "$layers") h=$(hca "$layers")
  check "--prefix-cache ${flags:-(defaults)}: rank 0's attention rings and tail states" \
    $((c * (65 * 8 + 2 * win) * 8192 + h * 65 * 128 * 4096)) \
    "$(echo "$out" | jq .ranks[0].tiers.state)"
  check "--prefix-cache ${flags:-(defaults)}: rank 0's indexer rings and tail states" \
    $((c * (65 * 8 + 2 * win) * 2048)) "$(echo "$out" | jq .ranks[0].tiers.index_state)"
done
check "without it, no tail state: the 65 slots' rings" \
  $((21 * 65 * 8 * 8192 + 20 * 65 * 128 * 4096)) "$(plan | jq .ranks[0].tiers.state)"
check "--prefix-cache: fewer pages than without (its tail states cost window pages)" yes \
  "$([ "$(plan --prefix-cache | jq .num_pages)" -lt "$(plan | jq .num_pages)" ] && echo yes || echo no)"

# ---- retained tails: the window past the running requests' working set ----
# The reserve (2 x (max_running + 1), + 3 x max_running with radix, + the
# dummy) and two window pages per running request, recomputed here.
tails_case() { # NAME MAX_RUNNING RADIX(1|0) FLAGS...
  local name=$1 mr=$2 radix=$3
  shift 3
  local out win reserve want
  out=$(plan --prefix-cache --max-running "$mr" "$@")
  win=$(echo "$out" | jq .n_win_pages)
  reserve=$((2 * (mr + 1) + 3 * mr * radix + 1))
  want=$((win - 1 - reserve - 2 * mr))
  [ "$want" -lt 0 ] && want=0
  check "$name: window_pages is the plan's window" "$win" "$(echo "$out" | jq .retained_tails.window_pages)"
  check "$name: reserve_pages" "$reserve" "$(echo "$out" | jq .retained_tails.reserve_pages)"
  check "$name: pages = window - dummy - reserve - 2 x max_running" "$want" \
    "$(echo "$out" | jq .retained_tails.pages)"
  check "$name: one tail per window page" "$want" "$(echo "$out" | jq .retained_tails.tails)"
  check "$name: running_pages = 2 x max_running" $((2 * mr)) \
    "$(echo "$out" | jq .retained_tails.running_pages)"
  # A tail's bytes: the window-anchored tiers of the largest stage over its
  # window pages (window KV, and the rings when they are per page, or the
  # tail states when they are per request: two rows of each ratio-4 ring).
  local most=0 r bytes
  for r in $(seq 0 $(($(echo "$out" | jq '.ranks | length') - 1))); do
    local layers c
    layers=$(echo "$out" | jq -c ".ranks[$r].layers")
    c=$(csa "$layers")
    if [ "$(echo "$out" | jq -r .state_rings)" = per-page ]; then
      bytes=$(echo "$out" | jq "(.ranks[$r].tiers.window + .ranks[$r].tiers.state + .ranks[$r].tiers.index_state) / $win")
    else
      bytes=$(($(echo "$out" | jq ".ranks[$r].tiers.window / $win") + c * 2 * (8192 + 2048)))
    fi
    [ "$bytes" -gt "$most" ] && most=$bytes
  done
  check "$name: bytes_per_tail = a window page's rows on the rank paying most" "$most" \
    "$(echo "$out" | jq .retained_tails.bytes_per_tail)"
}
tails_case "defaults" 64 1
tails_case "--no-radix" 64 0 --no-radix
tails_case "256 running" 256 1
tails_case "per-page rings" 64 1 --state-rings per-page
tails_case "tp 4 x pp 2" 64 1 --tp 4 --pp 2
tails_case "window at its floor" 64 1 --window-cache 0
check "a window at its floor holds no retained tail beside 64 running" 0 \
  "$(plan --prefix-cache --window-cache 0 | jq .retained_tails.tails)"
check "defaults: a tail is 43 layers x 128 tokens x 1024-byte rows and 21 x 2 tail-state rows" \
  $((43 * 128 * 1024 + 21 * 2 * (8192 + 2048))) "$(plan --prefix-cache | jq .retained_tails.bytes_per_tail)"

# ---- the text report says the same numbers ----
text=$("$kvplan" "${B[@]}" --host-cache 1TiB 2>/dev/null)
h=$(echo "$tp8" | jq -r '"\(.host_tier.slots) slots of .* (\(.host_tier.slot_bytes) bytes: .* = \(.host_tier.tokens) tokens"')
check "text: the host tier line" 1 "$(echo "$text" | grep -c "^host tier   1.00 TiB per machine (--host-cache): $h")"
r=$(echo "$tp8" | jq -r '.retained_tails | "\(.pages) window pages past .* \(.window_pages) pages less the dummy and the reserve of \(.reserve_pages) leave \(.left_pages); 64 running requests hold 2 each): \(.tails) retained tails fit at once, each .* (\(.bytes_per_tail) bytes) per rank"')
check "text: the retained line" 1 "$(echo "$text" | grep -c "^retained    $r")"
check "text without the flags: neither line" 0 \
  "$("$kvplan" "${B[@]}" 2>/dev/null | grep -c '^host tier\|^retained')"

# ---- refusals: exit 2 naming --host-cache ----
mkfifo "$T/fifo" && mkdir -p "$T/dir"
refused() { # NAME WANT_TEXT ARGS...
  local name=$1 want=$2
  shift 2
  "$kvplan" "${B[@]}" "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  check "$name: exit 2" 2 "$rc"
  check "$name: says so" 1 "$(tail -n 1 "$T/err" | grep -cF -- "$want")"
  check "$name: prints no plan" 0 "$(grep -c '^num_pages\|^host tier\|^retained\|^{' "$T/out")"
}
refused "zero" "--host-cache needs a size above 0" --host-cache 0
refused "negative" "--host-cache needs a byte count" --host-cache -1GiB
refused "not a number" "--host-cache needs a byte count" --host-cache lots
refused "missing value" "--host-cache needs a value" --host-cache
refused "twice" "--host-cache is given twice" --host-cache 1TiB --host-cache 1TiB
refused "a FIFO" "--host-cache needs a byte count" --host-cache "$T/fifo"
refused "a directory" "--host-cache needs a byte count" --host-cache "$T/dir"
refused "below one slot" "not one page: a host slot" --host-cache 7045119B
refused "below one slot, --json" "not one page: a host slot" --host-cache 1MiB --json
check "below one slot, --json: nothing on stdout" 0 "$(wc -c <"$T/out")"
refused "2^30 slots" "a host tier holds fewer than 2^30" --host-cache $((7045120 * (1 << 30)))
# 2^30 - 1 slots are 7.5 PiB: the bundled server's export with 4 PiB on
# each of its two NUMA nodes holds them.
sed 's/local_memory="[0-9]*"/local_memory="4503599627370496"/' \
  topology/data/hgx-h200-2socket-8gpu.xml >"$T/huge.xml"
check "2^30 - 1 slots are taken" 1073741823 \
  "$("$kvplan" --topology "$T/huge.xml" --host-cache $((7045120 * (1 << 30) - 1)) --json 2>/dev/null |
    jq .host_tier.slots)"
# A tier above the machine's own memory (issue 30, section 5): the bundled
# export's two NUMA nodes of 1 TiB hold 2 TiB and no more.
refused "above the machine's memory" \
  "--host-cache 3072.00 GiB is more than the memory of host 0 (bundled 8-GPU server (2 sockets x 4 H200, 4 NVSwitch)), 2048.00 GiB" \
  --host-cache 3TiB
check "all of the machine's memory is taken" 2199023255552 \
  "$(plan --host-cache 2TiB | jq .host_tier.bytes)"
refused "past 4 EiB" "above the 4611686018427387904 bytes" --host-cache 5000000TiB
refused "--prefix-cache twice" "--prefix-cache is given twice" --prefix-cache --prefix-cache
"$kvplan" "${B[@]}" --host-cache 1TiB >/dev/full 2>"$T/err"
check "a full disk: exit 1" 1 $?
check "a full disk: says so" 1 "$(tail -n 1 "$T/err" | grep -c 'writing standard output')"

echo "$failures failures"
[ "$failures" -eq 0 ]
