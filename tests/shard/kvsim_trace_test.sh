#!/bin/bash
# kvsim --trace (issue 26): the first requests of the committed Mooncake
# conversation trace on one rank, under each prefix policy on the same
# pool: the JSON prefix object holds exactly the keys docs/simulation.md lists,
# the ideal hit rate comes from the trace alone, none reuses nothing,
# kvshard reuses at least what the sglang and vllm policies do and never
# more than the ideal; two loopback ranks agree on every digest and
# integrity check; an injected cache divergence is named by the check; a
# malformed line is refused with its line number; a trace stamped in
# Unix-epoch milliseconds runs in seconds (idle time skipped, the same run
# as stamped from 0); a trace not served whole (a request longer than the
# pool, a run stopped at --steps) exits 1 saying so on its last line and
# in its JSON; --seed and --arrival-rate are refused with --trace.
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
KEYS='["evictions","gpu_hit_tokens","hit_rate","hit_tokens","host_copy_s","host_drops","host_hit_attempts","host_hit_fallbacks","host_hit_tokens","host_tier_tokens","ideal_hit_rate","idle_steps_skipped","peak_cached_tokens","policy","prompt_tokens","reprefill_tokens","requests","simulated_s","skipped_requests","spills","trace_requests"]'
declare -A HIT
for policy in kvshard sglang vllm none; do
  timeout 600 "$KVSIM" "${COMMON[@]}" --trace "$HEAD" --prefix-cache "$policy" >"$OUT" 2>"$ERR"
  rc=$?
  [ $rc -eq 0 ] || fail "kvsim --prefix-cache $policy exited $rc"
  json_check ".prefix | keys == $KEYS"
  json_check ".prefix.policy == \"$policy\" and .prefix.requests == 400 and .digests_agree == true"
  json_check '.prefix.trace_requests == 400 and .prefix.skipped_requests == 0'
  # The first 400 requests arrive back to back: no idle step to skip, and
  # the simulated time is the steps run.
  json_check '.prefix.idle_steps_skipped == 0 and (.prefix.simulated_s - .steps * 0.05 | . * .) < 1e-6'
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
# Issue 34: every host hit is taken whole (its evictions for the fetched
# blocks and the request's own pages in one decision); the old rule, four
# rounds of one eviction each, fell back on 3 of these 4.
json_check '.prefix.host_hit_attempts >= 3 and .prefix.host_hit_fallbacks == 0'
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

# Issue 34: the same host hits on two ranks as threads: the leader takes
# each whole (the old rule fell back on 3 of 4 here) and the follower
# replays its evictions and fetches to the same digests and checks.
head -n 400 "$TRACE" >"$TEST_TMPDIR/head400.jsonl"
timeout 600 "$KVSIM_LOCAL" --ranks 2 --tp 2 --topology bundled --device cpu --progress-s 0 \
  --json --trace "$TEST_TMPDIR/head400.jsonl" --check-every 8 --host-cache 64GiB >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] || fail "kvsim_local --host-cache 64GiB exited $rc: $(tail -3 "$ERR")"
json_check '.ranks == 2 and .digests_agree == true and .ring_ctx_digest_agree == true'
json_check '.prefix.host_hit_attempts >= 3 and .prefix.host_hit_fallbacks == 0'
json_check '.prefix.host_hit_tokens > 0 and .prefix.requests == 400'
for r in 0 1; do
  grep -q "^kvsim: rank $r: integrity ok after" "$ERR" || fail "rank $r (host hits)"
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

# Issue 30: a trace stamped in Unix-epoch milliseconds (six requests ten
# minutes apart from 2024-04-24) runs in its busy steps only: idle time is
# skipped to the next arrival, on the same grid of 50 ms steps, so the
# same trace stamped from 0 runs the same steps to the same digest, hits
# and simulated time; one rank and two alike, each well inside a minute.
EPOCH=$TEST_TMPDIR/epoch.jsonl ZERO=$TEST_TMPDIR/zero.jsonl
: >"$EPOCH"
: >"$ZERO"
for k in 0 1 2 3 4 5; do
  line='{"timestamp": %d, "input_length": 1000, "output_length": 20, "hash_ids": [%d, %d]}\n'
  printf "$line" $((1714000000000 + k * 600000)) $((k % 2)) $((10 + k)) >>"$EPOCH"
  printf "$line" $((k * 600000)) $((k % 2)) $((10 + k)) >>"$ZERO"
done
declare -A RUN
for t in EPOCH ZERO; do
  start=$(date +%s)
  timeout 60 "$KVSIM" "${COMMON[@]}" --trace "${!t}" >"$OUT" 2>"$ERR"
  rc=$?
  [ $rc -eq 0 ] || fail "kvsim --trace ($t) exited $rc"
  json_check '.prefix.requests == 6 and .prefix.trace_requests == 6 and .digests_agree == true'
  json_check '.steps < 1000 and .prefix.simulated_s > 3000 and .prefix.simulated_s < 3010'
  RUN[$t]=$(json_get '[.steps, .digest, .prefix.hit_tokens, .prefix.simulated_s] | tostring')
  echo "trace stamped $t: $(json_get '.steps') steps run, $(json_get '.prefix.idle_steps_skipped') idle skipped, $(($(date +%s) - start)) s of wall clock"
done
[ "${RUN[EPOCH]}" = "${RUN[ZERO]}" ] || fail "epoch-stamped ${RUN[EPOCH]} != zero-based ${RUN[ZERO]}"
timeout 60 "$KVSIM" "${COMMON[@]}" --trace "$EPOCH" >"$OUT" 2>"$ERR"
json_check '.prefix.idle_steps_skipped > 34280000000'
grep -q "simulated s from the first arrival (.* steps of 50 ms run, 34280059878 idle ones skipped)" \
  "$ERR" || fail "no simulated-time line for the epoch trace"
timeout 60 "$KVSIM_LOCAL" --ranks 2 --tp 2 --topology bundled --device cpu --progress-s 0 --json \
  --trace "$EPOCH" --check-every 8 >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] || fail "kvsim_local --trace (epoch) exited $rc"
json_check '.ranks == 2 and .digests_agree == true and .prefix.requests == 6 and .steps < 1000'
expect 2 "is 2^53 or more steps of --step-ms 1e-06 away" -- \
  "$KVSIM" "${COMMON[@]}" --trace "$EPOCH" --step-ms 0.000001

# A trace not served whole exits 1 (every check agreed), its last line and
# JSON saying so: a request longer than the pool is skipped...
LONG=$TEST_TMPDIR/long.jsonl
{
  echo '{"timestamp": 0, "input_length": 100000, "output_length": 10, "hash_ids": [1, 2]}'
  echo '{"timestamp": 10, "input_length": 1048576, "output_length": 10, "hash_ids": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]}'
  echo '{"timestamp": 20, "input_length": 65536, "output_length": 10, "hash_ids": [1]}'
} >"$LONG"
timeout 60 "$KVSIM" "${COMMON[@]}" --trace "$LONG" --trace-block 65536 >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 1 ] || fail "a trace with a request longer than the pool exited $rc, expected 1"
json_check '.prefix.requests == 2 and .prefix.trace_requests == 3 and .prefix.skipped_requests == 1'
json_check '.digests_agree == true'
tail -n 1 "$ERR" | grep -q "^kvsim: the trace was not served whole: 2 of 3 requests served; 1 skipped, longer than the pool holds (the longest needs 1048586 tokens, a request holds at most [0-9]* here: give a larger budget) (exit 1)$" ||
  fail "the last line does not say the trace was not served whole: $(tail -n 1 "$ERR")"
# ...over two rank threads too (their own lines come before the verdict)...
timeout 60 "$KVSIM_LOCAL" --ranks 2 --tp 2 --topology bundled --device cpu --progress-s 0 \
  --trace "$LONG" --trace-block 65536 >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 1 ] || fail "kvsim_local: a trace with a request longer than the pool exited $rc"
tail -n 1 "$ERR" | grep -q "^kvsim: the trace was not served whole: 2 of 3 requests served" ||
  fail "kvsim_local's last line: $(tail -n 1 "$ERR")"
# ...and a run stopped at --steps leaves requests unserved.
timeout 60 "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --steps 20 >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 1 ] || fail "a trace stopped at --steps exited $rc, expected 1"
tail -n 1 "$ERR" | grep -q "not served when the run stopped at --steps 20 (exit 1)$" ||
  fail "the last line does not say the run stopped at --steps: $(tail -n 1 "$ERR")"
# A report lost to a full disk is a failure all the same (exit 4).
timeout 60 "$KVSIM" "${COMMON[@]}" --trace "$LONG" --trace-block 65536 >/dev/full 2>"$ERR"
rc=$?
[ $rc -eq 4 ] || fail "a trace not served whole, its report to a full disk, exited $rc, expected 4"

# Flags with no effect under --trace are refused, as the trace flags are
# without it.
expect 2 "--arrival-rate has no effect under --trace" -- \
  "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --arrival-rate 4
expect 2 "--seed has no effect under --trace" -- "$KVSIM" "${COMMON[@]}" --trace "$TRACE" --seed 1

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
