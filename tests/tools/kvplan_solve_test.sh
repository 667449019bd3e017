#!/usr/bin/env bash
# kvplan solve end to end: the seed's numbers, the JSON contract, exit codes.
set -uo pipefail
kvplan=$1
source "$(dirname "$0")/check.sh"
# The seed's small geometry: head_dim 8, index_head_dim 4, ratios 0,4,128,4,
# in the seed's layout (rings per window page).
small=(--head-dim 8 --index-head-dim 4 --layers 4 --ratios 0,4,128,4 --floor-pages 21
  --state-rings per-page)
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }

out=$("$kvplan" solve "${small[@]}" --swa-ratio 0.5 --budget 500000B --json | tail -n 1)
check "500000 B at swa 0.5 buys 35 pages" 35 "$(echo "$out" | field num_pages)"

out=$("$kvplan" solve "${small[@]}" --swa-ratio 0.1 --budget 900000B --json | tail -n 1)
check "900000 B at swa 0.1 buys 190 pages" 190 "$(echo "$out" | field num_pages)"
check "the window pins at its floor" 21 "$(echo "$out" | field n_win_pages)"
check "full_token is 190 pages" 24320 "$(echo "$out" | field full_token)"
check "window slots" 2688 "$(echo "$out" | field n_win_slots)"
check "pool bytes: 19456 x 21 + 2576 x 190 + 64 + 456" $((19456 * 21 + 2576 * 190 + 64 + 456)) \
  "$(echo "$out" | field pool_bytes)"
check "a ratio-0 layer is null" "[null," "$(echo "$out" | sed -n 's/.*"layers":\(\[null,\).*/\1/p')"
# Top-level keys in order: cut the layers array (the last key), list the rest.
check "exactly the contract's keys" "num_pages full_token n_win_pages n_win_slots pool_bytes layers" \
  "$(echo "$out" | sed 's/"layers":\[.*\]}$/"layers":0}/' | grep -o '"[a-z_]*":' | tr -d '":' |
     tr '\n' ' ' | sed 's/ $//')"

# The default places rings per request: 65 slots (64 running + the dummy)
# of 11264 B each (two ratio-4 layers' 8-slot rings of 128 + 64 B rows, one
# ratio-128 layer's 128-slot ring of 64 B rows), and a window page costs its
# 8192 B of KV alone.
out=$("$kvplan" solve "${small[@]:0:10}" --swa-ratio 0.1 --budget 1700000 --json | tail -n 1)
pages=$(echo "$out" | field num_pages)
check "per-request rings: pool bytes" \
  $((8192 * $(echo "$out" | field n_win_pages) + 2576 * pages + 11264 * 65 + 64 + 456)) \
  "$(echo "$out" | field pool_bytes)"
check "per-request rings: state slots of the ratio-128 layer" $((65 * 128)) \
  "$(echo "$out" | sed -n 's/.*"ratio":128,"ring_size":128,[^}]*"state_slots":\([0-9]*\).*/\1/p')"

out=$("$kvplan" solve "${small[@]}" --swa-ratio 0.1 --budget 100000B --json)
status=$?
check "a budget below the minimal pool exits 1" 1 "$status"
check "and names the error" budget_too_small \
  "$(echo "$out" | tail -n 1 | sed -n 's/.*"error":"\([a-z_]*\)".*/\1/p')"
check "min_pages" 21 "$(echo "$out" | tail -n 1 | field min_pages)"
check "needed bytes" $((19456 * 21 + 2576 * 21 + 64 + 456)) "$(echo "$out" | tail -n 1 | field needed_bytes)"

"$kvplan" solve --budget 80GiB >/dev/null 2>&1
check "the built-in default solves" 0 $?
# The library's planning entry point, kvs_cost_solve, is this command:
# tests/core/cost_model_test.cc pins the same two figures for it (rings per
# request by default; the seed's per-page rings only when asked for).
check "DSV4-Flash at 80 GiB: 53653 pages" 53653 \
  "$("$kvplan" solve --budget 80GiB --json | tail -n 1 | field num_pages)"
check "with the seed's per-page rings: 27600 pages" 27600 \
  "$("$kvplan" solve --budget 80GiB --state-rings per-page --json | tail -n 1 | field num_pages)"
"$kvplan" solve --budget 12XiB >/dev/null 2>&1
check "a bad byte count is bad usage" 2 $?
"$kvplan" solve --budget 1GiB --model /nonexistent.json >/dev/null 2>&1
check "a missing model file is bad usage" 2 $?
"$kvplan" solve --budget 1GiB --floor-pages 3 --max-running 2 >/dev/null 2>&1
check "a floor given twice is bad usage" 2 $?
"$kvplan" solve --head-dim 8 --budget 1GiB >/dev/null 2>&1
check "a partial explicit geometry is bad usage" 2 $?
"$kvplan" solve >/dev/null 2>&1
check "a missing budget is bad usage" 2 $?
"$kvplan" solve --budget 1GiB --head-dim 8 --index-head-dim 4 --layers 2 --ratios 0,7 2>/dev/null
check "an unknown ratio is bad usage" 2 $?
msg=$("$kvplan" solve --budget 1GiB --head-dim 8 --index-head-dim 4 --layers 2 --ratios 0,7 2>&1)
check "and the message names the layer" yes "$(echo "$msg" | grep -q 'layer 1 has compress ratio 7' && echo yes)"

# Fewer ratios than layers would drop the layers without one, more would
# drop the extra ratios: either is refused, naming both counts (a config
# file may list one extra, for its draft layers; the flags cannot ask for
# draft layers).
msg=$("$kvplan" solve --budget 80GiB --head-dim 512 --index-head-dim 128 --layers 61 \
  --ratios 0,4 2>&1)
check "fewer ratios than layers is bad usage" 2 $?
check "and names both counts" yes \
  "$(echo "$msg" | grep -q -- '--layers is 61 but --ratios lists 2' && echo yes)"
"$kvplan" solve --budget 80GiB --head-dim 512 --index-head-dim 128 --layers 100000 --ratios 4 \
  >/dev/null 2>&1
check "a huge layer count with one ratio is bad usage" 2 $?
msg=$("$kvplan" solve --head-dim 8 --index-head-dim 4 --layers 3 --ratios 0,4,128,4 \
  --floor-pages 21 --swa-ratio 0.1 --budget 900000B 2>&1)
check "one ratio more than layers is bad usage" 2 $?
check "and names both counts" yes \
  "$(echo "$msg" | grep -q -- '--ratios lists 4 but --layers is 3' && echo yes)"
config=$(mktemp)
echo '{"num_hidden_layers": 61, "head_dim": 512, "index_head_dim": 128, "compress_ratios": [0, 4]}' \
  >"$config"
msg=$("$kvplan" solve --budget 80GiB --model "$config" 2>&1)
check "a config with fewer ratios than layers is bad usage" 2 $?
check "and names the fields" yes \
  "$(echo "$msg" | grep -q 'num_hidden_layers is 61 but compress_ratios lists 2' && echo yes)"
rm -f "$config"
# Sizes past what JSON integers hold are refused at the flag, naming the
# limit; a pool whose bytes overflow 64 bits is its own error, not "a
# budget too small by 18446744073709551615 bytes".
msg=$("$kvplan" solve --budget 16000000TB --json 2>&1)
check "a budget above 4 EiB is bad usage" 2 $?
check "and names the limit" yes "$(echo "$msg" | grep -q '4611686018427387904 bytes (4 EiB)' && echo yes)"
msg=$("$kvplan" solve --head-dim 4000000000 --index-head-dim 4000000000 --layers 4 \
  --ratios 0,4,128,4 --budget 1GiB --max-running 1000000000000000 --json 2>&1)
check "a minimal pool past 2^64 bytes is bad usage" 2 $?
check "and says it overflows" yes "$(echo "$msg" | grep -q 'needs more than 2^64 bytes' && echo yes)"
check "with no negative or saturated number" no \
  "$(echo "$msg" | grep -qE -- '-1|18446744073709551615' && echo yes || echo no)"
# Output lost to a full disk is a failure, said on stderr.
"$kvplan" solve --budget 80GiB --json >/dev/full 2>/dev/null
check "solve to a full disk exits 1" 1 $?
"$kvplan" --topology bundled --budget 80GiB --json >/dev/full 2>/dev/null
check "plan to a full disk exits 1" 1 $?
# A memory map whose write fails (here: past a file-size limit, as a full
# disk would) exits 1 and leaves the previous map whole: it is written to
# a temporary file and renamed over the old one, never truncated in place.
svg=$(mktemp -d)/map.svg
"$kvplan" --topology bundled --budget 80GiB --svg "$svg" >/dev/null 2>&1
check "an SVG is written" 0 $?
cp "$svg" "$svg.before"
(trap '' XFSZ; ulimit -f 4; "$kvplan" --topology bundled --budget 40GiB --svg "$svg" >/dev/null 2>&1)
check "an SVG that cannot be written exits 1" 1 $?
check "and the previous map is whole" same "$(cmp -s "$svg" "$svg.before" && echo same)"
check "and no temporary file is left" 2 "$(ls "$(dirname "$svg")" | wc -l)"
# Numbers are written plainly: no leading space, '+', hex, inf or nan,
# as byte counts refuse them.
for bad in " 0.1" "0.1 " "+0.1" "0x1p-3" "inf" "nan" "1e" ".e1"; do
  "$kvplan" solve --budget 80GiB --swa-ratio "$bad" >/dev/null 2>&1
  check "--swa-ratio '$bad' is bad usage" 2 $?
done
for good in "0.1" ".5" "5e-2" "1E-1" "0"; do
  "$kvplan" solve --budget 80GiB --swa-ratio "$good" >/dev/null 2>&1
  check "--swa-ratio '$good' solves" 0 $?
done
[ "$failures" -eq 0 ]
