#!/bin/bash
# kvsim_local --pd: the conversation trace's first 2,000 requests prefilled
# on a tp 1 x pp 4 node and decoded on a tp 4 node (then on tp 2 -> tp
# 2), every request's rows moved by kvs_node_send_request /
# kvs_node_receive_request and digested on both sides: every digest
# agrees, rows move, the decode side's prefix cache saves some, and what
# moved plus what was saved is the rule's count for those requests (the
# per-pool figures kvs_node_request_rows gives with no reuse). Then its
# argument errors and a report lost to a full disk.
# Usage: kvsim_pd_test.sh KVSIM_LOCAL TRACE MODEL_DIR
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 TRACE=$2 MODEL=$3
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
head -n 2000 "$TRACE" >"$TEST_TMPDIR/first2000.jsonl"
head -n 300 "$TRACE" >"$TEST_TMPDIR/first300.jsonl"
COMMON=(--model "$MODEL" --topology bundled --budget-mib 256 --max-running 4 --progress-s 0 --json)

check_pd() {
  json_check '.digests_agree == true and .pd.refused == 0 and .pd.send_failures == 0'
  json_check ".pd.requests == $1 and .pd.digests_agreed == $1 and .pd.skipped_requests == 0"
  json_check '.pd.bytes > 0 and .pd.wire_bytes >= .pd.bytes and .pd.messages > 0'
  json_check '.pd.reused_bytes > 0 and .pd.hit_requests > 0 and .pd.transfer_s > 0'
  # moved + saved = the rule's bytes, pool by pool summed.
  json_check '.pd.bytes + .pd.reused_bytes == ([.pd.rule_bytes[]] | add)'
  json_check '.pd.rule_total_bytes == ([.pd.rule_bytes[]] | add)'
}

timeout 600 "$KVSIM" --pd tp1xpp4:tp4 --trace "$TEST_TMPDIR/first2000.jsonl" "${COMMON[@]}" \
  >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] || fail "kvsim_local --pd tp1xpp4:tp4 exited $rc"
check_pd 2000
json_check '.ranks == 8 and .pd.prefill.pp == 4 and .pd.decode.tp == 4 and .pd.link_gbps == 50'

timeout 600 "$KVSIM" --pd tp2:tp2 --trace "$TEST_TMPDIR/first2000.jsonl" "${COMMON[@]}" \
  --link-bandwidth 25 >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] || fail "kvsim_local --pd tp2:tp2 exited $rc"
check_pd 2000
json_check '.ranks == 4 and .pd.prefill.tp == 2 and .pd.decode.tp == 2 and .pd.link_gbps == 25'

SHORT=(--trace "$TEST_TMPDIR/first300.jsonl" --model "$MODEL" --topology bundled --budget-mib 256)
PDWANT="--pd needs PREFILL:DECODE layouts"
for bad in "" tp0:tp2 tp2:tp0 -1:tp2 tp2 tp2:tp2:tp2 tp1xpp0:tp4 tp200:tp2 tp99999999999999999999:tp1 \
  tp2xpp:tp2 pp4:tp4 tp2:tp2x tp1xpp4xpp2:tp4; do
  expect 2 "$PDWANT" -- "$KVSIM" --pd "$bad" "${SHORT[@]}"
done
expect 2 "--pd needs PREFILL:DECODE" -- "$KVSIM" "${SHORT[@]}" --pd
expect 2 "--pd is given twice" -- "$KVSIM" --pd tp2:tp2 --pd tp2:tp2 "${SHORT[@]}"
for bad in 0 -1 nan 10001 1e300 fast ""; do
  expect 2 "--link-bandwidth needs GB/s in (0, 10000]" -- \
    "$KVSIM" --pd tp2:tp2 --link-bandwidth "$bad" "${SHORT[@]}"
done
expect 2 "--link-bandwidth is given twice" -- \
  "$KVSIM" --pd tp2:tp2 --link-bandwidth 5 --link-bandwidth 5 "${SHORT[@]}"
expect 2 "--link-bandwidth prices --pd's transfers: give --pd too" -- \
  "$KVSIM" --tp 1 --link-bandwidth 5 "${SHORT[@]}"
expect 2 "--pd gives both nodes' layouts: leave out --ranks, --tp and --pp" -- \
  "$KVSIM" --pd tp2:tp2 --tp 2 "${SHORT[@]}"
expect 2 "--pd gives both nodes' layouts" -- "$KVSIM" --pd tp2:tp2 --ranks 4 "${SHORT[@]}"
expect 2 "--pd replays a trace: give --trace FILE" -- \
  "$KVSIM" --pd tp2:tp2 --steps 5 --seed 1 --model "$MODEL"
expect 2 "--pd's decode side keeps kvshard's prefix cache" -- \
  "$KVSIM" --pd tp2:tp2 --prefix-cache none "${SHORT[@]}"
expect 2 "--pd runs over the loopback backend only" -- \
  "$KVSIM" --pd tp2:tp2 --backend nccl "${SHORT[@]}"
expect 2 "--pd takes no drills" -- "$KVSIM" --pd tp2:tp2 --kill-rank 0:1 --steps 5 "${SHORT[@]}"
# A report lost to a full disk is exit 4, naming it.
if [ -w /dev/full ]; then
  timeout 300 "$KVSIM" --pd tp2:tp2 --trace "$TEST_TMPDIR/first300.jsonl" "${COMMON[@]}" \
    >/dev/full 2>"$ERR"
  rc=$?
  [ $rc -eq 4 ] || fail ">/dev/full: kvsim_local --pd exited $rc, not 4"
  grep -q "No space left on device" "$ERR" || fail ">/dev/full: no reason on stderr"
fi
echo PASS
