#!/bin/bash
# kvsim --trace (issue 26): the first requests of the committed Mooncake
# conversation trace on one rank, under each prefix policy on the same
# pool: the JSON prefix object holds exactly the keys the README lists,
# the ideal hit rate comes from the trace alone, none reuses nothing,
# kvshard reuses at least what the sglang and vllm policies do and never
# more than the ideal; two loopback ranks agree on every digest and
# integrity check; an injected cache divergence is named by the check; a
# malformed line is refused with its line number.
# Usage: kvsim_trace_test.sh KVSIM KVSIM_LOCAL TRACE
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 KVSIM_LOCAL=$2 TRACE=$3
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
HEAD=$TEST_TMPDIR/head.jsonl
head -n 400 "$TRACE" >"$HEAD"
# A pool of 4 GiB per GPU (the default): some 23,000 pages, so the cache
# evicts under 400 requests of 12,000 tokens on average.
COMMON=(--backend self --tp 1 --topology bundled --device cpu --progress-s 0 --json)
KEYS='["evictions","gpu_hit_tokens","hit_rate","hit_tokens","host_copy_s","host_drops","host_hit_tokens","host_tier_tokens","ideal_hit_rate","peak_cached_tokens","policy","prompt_tokens","reprefill_tokens","requests","spills"]'
declare -A HIT
for policy in kvshard sglang vllm none; do
  timeout 600 "$KVSIM" "${COMMON[@]}" --trace "$HEAD" --prefix-cache "$policy" >"$OUT" 2>"$ERR"
  rc=$?
  [ $rc -eq 0 ] || fail "kvsim --prefix-cache $policy exited $rc"
  json_check ".prefix | keys == $KEYS"
  json_check ".prefix.policy == \"$policy\" and .prefix.requests == 400 and .digests_agree == true"
  json_check '.prefix.ideal_hit_rate > 0.05 and .prefix.hit_rate <= .prefix.ideal_hit_rate'
  json_check '.prefix.hit_tokens == .prefix.gpu_hit_tokens and .prefix.host_hit_tokens == 0'
  json_check '.prefix.host_tier_tokens == 0 and .prefix.spills == 0'
  grep -q "^kvsim: prefix cache $policy: 400 of 400 trace requests served" "$ERR" ||
    fail "no text report for $policy"
  grep -q "requests per simulated s; simulated .* requests per wall-clock s" "$ERR" ||
    fail "no request rate for $policy"
  HIT[$policy]=$(json_get .prefix.hit_tokens)
done
[ "${HIT[none]}" -eq 0 ] || fail "--prefix-cache none hit ${HIT[none]} tokens"
[ "${HIT[kvshard]}" -gt 0 ] || fail "kvshard hit nothing"
[ "${HIT[kvshard]}" -ge "${HIT[sglang]}" ] || fail "kvshard ${HIT[kvshard]} < sglang ${HIT[sglang]}"
[ "${HIT[kvshard]}" -ge "${HIT[vllm]}" ] || fail "kvshard ${HIT[kvshard]} < vllm ${HIT[vllm]}"

# A host tier: evicted blocks spill there and later prompts fetch them
# back, so more of the prompts hit than on the GPU alone, never past the
# ideal; the GPU and host shares add up, and the copies take time.
timeout 600 "$KVSIM" "${COMMON[@]}" --trace "$HEAD" --host-cache 64GiB --host-bandwidth 25 \
  >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] || fail "kvsim --host-cache exited $rc: $(tail -3 "$ERR")"
json_check ".prefix | keys == $KEYS"
json_check '.prefix.spills > 0 and .prefix.host_hit_tokens > 0 and .prefix.host_copy_s > 0'
json_check '.prefix.hit_tokens == .prefix.gpu_hit_tokens + .prefix.host_hit_tokens'
json_check '.prefix.hit_rate <= .prefix.ideal_hit_rate and .prefix.host_tier_tokens > 0'
json_check ".prefix.hit_tokens > ${HIT[kvshard]} and .digests_agree == true"
grep -q "^kvsim: host tier of [0-9]* pages ([0-9]* tokens): [0-9]* of the hit tokens came back" \
  "$ERR" || fail "no host tier line: $(grep host "$ERR")"

# Two ranks as threads: the followers learn every admission, completion
# and eviction from the step's journal; digests and checks agree.
head -n 150 "$TRACE" >"$HEAD"
timeout 600 "$KVSIM_LOCAL" --ranks 2 --tp 2 --topology bundled --device cpu --progress-s 0 \
  --json --trace "$HEAD" --check-every 8 >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] || fail "kvsim_local --trace exited $rc"
json_check '.ranks == 2 and .digests_agree == true and .ring_ctx_digest_agree == true'
json_check '.prefix.requests == 150 and .prefix.hit_tokens > 0'
for r in 0 1; do
  grep -q "^kvsim: rank $r: integrity ok after" "$ERR" || fail "rank $r"
done
steps=$(json_get .steps)

# The same over a host tier: every spill and fetch is replayed alike.
timeout 600 "$KVSIM_LOCAL" --ranks 2 --tp 2 --topology bundled --device cpu --progress-s 0 \
  --json --trace "$HEAD" --check-every 8 --host-cache 8GiB >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] || fail "kvsim_local --trace --host-cache exited $rc: $(tail -3 "$ERR")"
json_check '.ranks == 2 and .digests_agree == true and .prefix.spills > 0'
for r in 0 1; do
  grep -q "^kvsim: rank $r: integrity ok after" "$ERR" || fail "rank $r (host tier)"
done

# A cached block's reference count changed on rank 1: the next check
# names the block, every rank exits 3.
timeout 600 "$KVSIM_LOCAL" --ranks 2 --tp 2 --topology bundled --device cpu --progress-s 0 \
  --trace "$HEAD" --check-every 8 --inject-cache-divergence 1:$((steps / 2)) >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 3 ] || fail "the cache divergence drill exited $rc, expected 3"
grep -q "injected a cache divergence after step $((steps / 2)): cached block at full page" "$ERR" ||
  fail "no injection line"
grep -q "prefix caches diverged (checked after step .*): cached block at full page" "$ERR" ||
  fail "the check did not name the cached block"

# Refusals, each exit 2 with its sentence.
printf '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n{"timestamp": 1, "input_length": 600}\n' >"$HEAD"
expect 2 "line 2 has no output_length" -- "$KVSIM" "${COMMON[@]}" --trace "$HEAD"
printf '{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n{"timestamp": 1, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n' >"$HEAD"
expect 2 "line 2 has a timestamp before the previous line's" -- "$KVSIM" "${COMMON[@]}" --trace "$HEAD"
printf '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1]}\n' >"$HEAD"
expect 2 "line 1 has hash_ids whose count is not ceil(input_length / block)" -- \
  "$KVSIM" "${COMMON[@]}" --trace "$HEAD"
printf 'not json\n' >"$HEAD"
expect 2 "line 1 is not JSON" -- "$KVSIM" "${COMMON[@]}" --trace "$HEAD"
: >"$HEAD"
expect 2 "holds no request" -- "$KVSIM" "${COMMON[@]}" --trace "$HEAD"
expect 2 "need --trace FILE" -- "$KVSIM" --backend self --tp 1 --steps 5 --seed 1 --step-ms 10
expect 2 "need --trace FILE" -- "$KVSIM" --backend self --tp 1 --steps 5 --seed 1 --host-cache 1GiB
expect 2 "above 0" -- "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --host-cache 0
expect 2 "--host-cache" -- "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --host-cache -5GiB
expect 2 "needs --prefix-cache kvshard" -- \
  "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --host-cache 1GiB --prefix-cache vllm
expect 2 "give --host-cache too" -- "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --host-bandwidth 10
expect 2 "GB/s in (0, 10000]" -- \
  "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --host-cache 1GiB --host-bandwidth 0
expect 2 "--trace needs rings per request" -- \
  "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --state-rings per-page
echo PASS
