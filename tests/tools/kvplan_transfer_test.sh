#!/usr/bin/env bash
# kvplan transfer: the bytes a prefill/decode transfer of one request
# moves, pool by pool and link by link, against counts made here from the
# geometry alone (not from shard/transfer_rows.c); what --reuse saves; the
# decode side's capacity against kvplan plan's; the refusals.
set -uo pipefail
kvplan=$1
source "$(dirname "$0")/check.sh"
B=(--topology bundled)

# DSV4-Flash (core/models/dsv4-flash.json): head_dim 512, index_head_dim
# 128, qk_rope_head_dim 64, 43 layers: 0 and 1 window-only, then ratio 4 on
# even layers and 128 on odd ones. Page 128; a request of 32768 tokens
# fills 256 pages, its one tail page (positions 32641..32767) is page 255.
P=128 L=32768 PAGES=256
ratio() { if [ "$1" -lt 2 ]; then echo 0; elif [ $(($1 % 2)) -eq 0 ]; then echo 4; else echo 128; fi; }
# Row bytes: bf16 KV rows head_dim x 2, indexer index_head_dim x 2; fp8 as
# docs/engines.md's "Rows per tier and dtype": KV head_dim + rope + 8 = 584,
# indexer index_head_dim + 4 x index_head_dim / 128 = 132. Rings are fp32
# whatever the dtype: state_4 4 x head_dim x 4, index_state
# 4 x index_head_dim x 4, state_128 2 x head_dim x 4.
KV=1024 IDX=256
CSA_ST=$((4 * 512 * 4)) IDX_ST=$((4 * 128 * 4)) HCA_ST=$((2 * 512 * 4))
TAIL=0 # tail-state rows per tail page (2 with a prefix cache)

# pool_bytes POOL FIRST LAST [REUSED_PAGES]: the pool's rows of layers
# FIRST..LAST for the request: compressed and indexer rows of every page
# past the reused ones (P / ratio rows a page), the window's P rows of the
# tail page, per request slot the whole ring (8 rows at ratio 4, 128 at
# ratio 128) and, with a prefix cache, the ratio-4 rings' tail states.
pool_bytes() {
  local pool=$1 lo=$2 hi=$3 reused=${4:-0} sum=0 l r
  local pages=$((PAGES - reused))
  for ((l = lo; l <= hi; l++)); do
    r=$(ratio "$l")
    case "$pool:$r" in
      window:*) sum=$((sum + P * KV)) ;;
      compressed_4:4) sum=$((sum + pages * (P / 4) * KV)) ;;
      compressed_128:128) sum=$((sum + pages * (P / 128) * KV)) ;;
      indexer:4) sum=$((sum + pages * (P / 4) * IDX)) ;;
      state_4:4) sum=$((sum + (8 + TAIL) * CSA_ST)) ;;
      state_128:128) sum=$((sum + 128 * HCA_ST)) ;;
      index_state:4) sum=$((sum + (8 + TAIL) * IDX_ST)) ;;
    esac
  done
  echo "$sum"
}
POOLS=(window compressed_4 compressed_128 indexer state_4 state_128 index_state)
all_bytes() { # FIRST LAST [REUSED_PAGES]
  local s=0 p
  for p in "${POOLS[@]}"; do s=$((s + $(pool_bytes "$p" "$1" "$2" "${3:-0}"))); done
  echo "$s"
}
# column POOL N: the text table's one copy (N=2) or all links (N=3) bytes.
column() { awk -v p="$1" -v n="$2" '$1 == p { print $n }' <<<"$out"; }
check_pools() { # LABEL DECODE_RANKS [REUSED_PAGES]
  local p
  for p in "${POOLS[@]}"; do
    local want
    want=$(pool_bytes "$p" 0 42 "${3:-0}")
    check "$1: $p, one copy" "$want" "$(column "$p" 2)"
    check "$1: $p, over the links (x $2 decode ranks)" $((want * $2)) "$(column "$p" 3)"
  done
}

# (1) Per pool, P tp 1 x pp 4 -> D tp 4 and P tp 2 -> D tp 2.
out=$("$kvplan" transfer "${B[@]}" --context 32768 --prefill-pp 4 --decode-tp 4 2>/dev/null)
check "pp 4 -> tp 4 exits 0" 0 $?
check "the model line holds the geometry counted here" \
  "43 layers (2 window-only, 21 CSA, 20 HCA), head_dim 512, index_head_dim 128" \
  "$(grep -o '43 layers ([^)]*), head_dim 512, index_head_dim 128' <<<"$out")"
check_pools "bf16 pp 4 -> tp 4" 4
WHOLE=$(all_bytes 0 42)
check "bf16 pp 4 -> tp 4: total over the links" $((4 * WHOLE)) \
  "$(sed -n 's/^total  *\([0-9]*\) B .*/\1/p' <<<"$out")"

# (2) Per link: each prefill rank sends its stage's rows once per decode
# rank (4), each decode rank receives the whole model's.
n=0
while read -r rank lo hi sent; do
  check "prefill rank $rank (layers $lo-$hi) sends its stage x 4" $((4 * $(all_bytes "$lo" "$hi"))) "$sent"
  n=$((n + 1))
done < <(sed -n 's/^link  *prefill rank \([0-9]*\) (.*layers \([0-9]*\)-\([0-9]*\)) sends \([0-9]*\) B.*/\1 \2 \3 \4/p' <<<"$out")
check "four prefill links" 4 "$n"
check "four decode links, each the whole model's rows" "$WHOLE $WHOLE $WHOLE $WHOLE" \
  "$(sed -n 's/^link  *decode rank [0-9]* (.*) receives \([0-9]*\) B.*from 4 prefill ranks$/\1/p' <<<"$out" | tr '\n' ' ' | sed 's/ $//')"
check "the stages are plan's" "0-10, 11-20, 21-31, 32-42" \
  "$(sed -n "s/^prefill .*stages' layers \(.*\)$/\1/p" <<<"$out")"
# Time: the busiest link (the last stage's, 4 copies) at the 50 GB/s default.
busiest=$(sed -n 's/^link  *prefill rank 3 .* sends \([0-9]*\) B.*/\1/p' <<<"$out")
check "time at 50 GB/s is the busiest link's" \
  "$(awk -v b="$busiest" 'BEGIN { printf "%.3f ms", b / 50e9 * 1e3 }')" \
  "$(sed -n 's/^time  *\([0-9.]* ms\) at 50 GB\/s.*/\1/p' <<<"$out")"
out2=$("$kvplan" transfer "${B[@]}" --context 32768 --prefill-pp 4 --decode-tp 4 --link-rate 12.5 2>/dev/null)
check "--link-rate 12.5 takes 4x as long" \
  "$(awk -v b="$busiest" 'BEGIN { printf "%.3f ms", b / 12.5e9 * 1e3 }')" \
  "$(sed -n 's/^time  *\([0-9.]* ms\) at 12.5 GB\/s.*/\1/p' <<<"$out2")"

out=$("$kvplan" transfer "${B[@]}" --context 32K --prefill-tp 2 --decode-tp 2 2>/dev/null)
check "tp 2 -> tp 2 exits 0" 0 $?
check_pools "bf16 tp 2 -> tp 2" 2
check "tp 2 -> tp 2: each prefill rank sends the whole model once" "$WHOLE $WHOLE" \
  "$(sed -n 's/^link  *prefill rank [0-9]* .* sends \([0-9]*\) B.* to 1 decode rank$/\1/p' <<<"$out" | tr '\n' ' ' | sed 's/ $//')"

# fp8 rows, with a prefix cache (tail states: 2 rows per tail page of each
# ratio-4 ring).
KV=584 IDX=132 TAIL=2
out=$("$kvplan" transfer "${B[@]}" --context 32768 --prefill-pp 4 --decode-tp 4 --kv-dtype fp8 \
  --prefix-cache 2>/dev/null)
check_pools "fp8 + prefix cache pp 4 -> tp 4" 4
KV=1024 IDX=256 TAIL=0

# (3) --reuse 16384 (128 pages): exactly those pages' compressed and
# indexer rows stay off the links; the window's tail page and the rings
# still move.
out=$("$kvplan" transfer "${B[@]}" --context 32768 --reuse 16384 --prefill-pp 4 --decode-tp 4 2>/dev/null)
check_pools "bf16 pp 4 -> tp 4, 128 pages reused" 4 128
saved=$((128 * (21 * 32 * KV + 20 * 1 * KV + 21 * 32 * IDX)))
check "reuse saves the 128 pages' compressed and indexer rows, x 4 decode ranks" $((4 * saved)) \
  "$(sed -n 's/.*--reuse keeps \([0-9]*\) B off them$/\1/p' <<<"$out")"
check "reused total + saved = the whole" $((4 * WHOLE)) \
  $(($(sed -n 's/^total  *\([0-9]*\) B .*/\1/p' <<<"$out") + 4 * saved))

# JSON: the keys and the same figures.
json=$("$kvplan" transfer "${B[@]}" --context 32768 --prefill-pp 4 --decode-tp 4 --json 2>/dev/null)
check "JSON top-level keys" \
  "model kv_dtype context reuse page prefill decode pools copy_bytes total_bytes reuse_saved_bytes links link_rate_gbs slowest_link transfer_s capacity" \
  "$(python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)))' <<<"$json")"
check "JSON pools.compressed_4" "$(pool_bytes compressed_4 0 42) $((4 * $(pool_bytes compressed_4 0 42)))" \
  "$(python3 -c 'import json,sys; p=json.load(sys.stdin)["pools"]["compressed_4"]; print(p["copy_bytes"], p["link_bytes"])' <<<"$json")"
check "JSON links: 16 pairs of 4 x 4" 16 \
  "$(python3 -c 'import json,sys; print(len(json.load(sys.stdin)["links"]))' <<<"$json")"

# Capacity: the decode layout's plan, as kvplan plan makes it.
pages=$("$kvplan" plan "${B[@]}" --tp 4 --pp 1 --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["num_pages"])')
check "capacity: kvplan plan's pages at tp 4 x pp 1, requests of 256 pages, --max-running 64" \
  "$pages $((pages / 256)) 64" \
  "$(python3 -c 'import json,sys; c=json.load(sys.stdin)["capacity"]; print(c["num_pages"], c["requests_by_pages"], c["requests"])' <<<"$json")"

# (4) Refusals: exit 2 naming the flag, 1 where the node cannot hold it.
refuses() { # EXIT TEXT ARGS...
  local want=$1 text=$2
  shift 2
  local err rc
  err=$("$kvplan" transfer "${B[@]}" "$@" 2>&1 >/dev/null)
  rc=$?
  check "$* exits $want" "$want" "$rc"
  check "$* says: $text" 1 "$(tail -n 1 <<<"$err" | grep -cF -- "$text")"
}
D=(--prefill-pp 4 --decode-tp 4)
refuses 2 "--context L is required" "${D[@]}"
refuses 2 "--context must be in [1, 2^40] tokens, got 0" --context 0 "${D[@]}"
refuses 2 "--context must be in [1, 2^40] tokens, got 2097152M" --context 2097152M "${D[@]}"
refuses 2 "--context needs a token count" --context -5 "${D[@]}"
refuses 2 "--context needs a token count" --context lots "${D[@]}"
refuses 2 "--context is given twice; give it once" --context 1K --context 2K "${D[@]}"
refuses 2 "--context needs a value" "${D[@]}" --context
refuses 2 "the prefill layout is required" --context 32K --decode-tp 4
refuses 2 "the decode layout is required" --context 32K --prefill-pp 4
refuses 2 "--decode-tp needs a rank count in [1, 1024], got '0'" --context 32K --prefill-pp 4 --decode-tp 0
refuses 2 "--prefill-pp needs a rank count in [1, 1024], got '-1'" --context 32K --prefill-pp -1 --decode-tp 4
refuses 2 "--prefill-tp needs a rank count in [1, 1024], got '2048'" --context 32K --prefill-tp 2048 --decode-tp 4
refuses 2 "--decode-pp needs a rank count in [1, 1024], got 'two'" --context 32K --prefill-tp 2 --decode-pp two
refuses 2 "--decode-tp is given twice; give it once" --context 32K "${D[@]}" --decode-tp 4
refuses 2 "--prefill-pp needs a value" --context 32K --decode-tp 4 --prefill-pp
refuses 2 "--reuse must be in [1, 2^40] tokens, got 0" --context 32K --reuse 0 "${D[@]}"
refuses 2 "--reuse must be whole pages of 128 tokens, got 100" --context 32K --reuse 100 "${D[@]}"
refuses 2 "--reuse must be below --context (32768 tokens), got 32768" --context 32K --reuse 32K "${D[@]}"
refuses 2 "--reuse needs a token count" --context 32K --reuse x "${D[@]}"
refuses 2 "--reuse is given twice; give it once" --context 32K --reuse 128 --reuse 128 "${D[@]}"
refuses 2 "--link-rate needs a rate in GB/s in [0.001, 100000], got '0'" --context 32K "${D[@]}" --link-rate 0
refuses 2 "--link-rate needs a rate in GB/s in [0.001, 100000], got '-50'" --context 32K "${D[@]}" --link-rate -50
refuses 2 "--link-rate needs a rate in GB/s in [0.001, 100000], got '1e9'" --context 32K "${D[@]}" --link-rate 1e9
refuses 2 "--link-rate needs a rate in GB/s in [0.001, 100000], got 'fast'" --context 32K "${D[@]}" --link-rate fast
refuses 2 "--link-rate is given twice; give it once" --context 32K "${D[@]}" --link-rate 50 --link-rate 50
refuses 2 "--link-rate needs a value" --context 32K "${D[@]}" --link-rate
refuses 2 "--tp names one layout; give each side's: --prefill-tp and --decode-tp" --context 32K "${D[@]}" --tp 4
refuses 2 "--engine sglang: the transfer is kvshard's" --context 32K "${D[@]}" --engine sglang
refuses 1 "--prefill-tp 1 x --prefill-pp 3 = 3 ranks, which does not divide the 8 GPUs" --context 32K --prefill-pp 3 --decode-tp 4
refuses 1 "--decode-tp 16 x --decode-pp 1 = 16 ranks, more than the 8 GPUs" --context 32K --prefill-pp 4 --decode-tp 16
refuses 1 "the decode node holds no request of 4194304 tokens" --context 4M "${D[@]}" --budget 20GiB
"$kvplan" transfer "${B[@]}" --context 32K "${D[@]}" >/dev/full 2>/dev/null
check "a full disk is exit 1" 1 $?
"$kvplan" transfer "${B[@]}" --context 32K "${D[@]}" --json >/dev/full 2>/dev/null
check "a full disk is exit 1 (--json)" 1 $?
err=$("$kvplan" trasnfer 2>&1)
check "a mistyped subcommand names transfer" 1 "$(grep -c "did you mean transfer?" <<<"$err")"

echo "$failures failures"
[ "$failures" -eq 0 ]
