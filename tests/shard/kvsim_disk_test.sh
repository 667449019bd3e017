#!/bin/bash
# kvsim's disk tier (issue 34): a restart finds what the last run wrote.
# Two halves of the first 800 requests of the conversation trace, each a
# new process over one --disk-path: the first writes every cached block
# through (once each, within each step's share), the second finds the
# first's blocks at its start on every rank and hits more of its prompts
# than the same half without the tier, never past what the ideal allows;
# the tier's counters are in the JSON; two loopback ranks agree on every
# digest and keep identical lists; a tier written under another geometry
# is refused block by block, saying why; a damaged list is ignored, saying
# so; every contradictory or bad flag is refused with exit 2.
# Usage: kvsim_disk_test.sh KVSIM KVSIM_LOCAL TRACE
set -u
source "$(dirname "$0")/common.sh"
KVSIM=$1 KVSIM_LOCAL=$2 TRACE=$3
OUT=$TEST_TMPDIR/out ERR=$TEST_TMPDIR/err
FIRST=$TEST_TMPDIR/first.jsonl SECOND=$TEST_TMPDIR/second.jsonl
head -n 400 "$TRACE" >"$FIRST"
sed -n 401,800p "$TRACE" >"$SECOND"
DISK=$TEST_TMPDIR/disk
COMMON=(--backend self --tp 1 --topology bundled --device cpu --progress-s 0 --json)
KEYS='["agreed_at_start","bandwidth_gbps","blocks","drops","found_at_start","hit_tokens","pages","read_s","refused_at_start","store_missed","stores","stores_per_s","tokens"]'

run() {  # run DESCRIPTION -- kvsim arguments...
  local what=$1
  shift 2
  timeout 600 "$@" >"$OUT" 2>"$ERR"
  local rc=$?
  [ $rc -eq 0 ] || fail "$what exited $rc: $(tail -3 "$ERR")"
}

# The first half: everything it caches is written, nothing found.
run "the first half" -- "$KVSIM" "${COMMON[@]}" --trace "$FIRST" --disk-cache 64GiB \
  --disk-path "$DISK"
json_check ".prefix.disk | keys == $KEYS"
json_check '.prefix.disk.found_at_start == 0 and .prefix.disk.agreed_at_start == 0'
json_check '.prefix.disk.stores > 0 and .prefix.disk.blocks > 0'
json_check '.prefix.disk.blocks == ([.prefix.disk.pages, .prefix.disk.stores - .prefix.disk.drops] | min)'
json_check '.prefix.hit_rate <= .prefix.ideal_hit_rate'
grep -q "^kvsim: disk tier of [0-9]* pages" "$ERR" || fail "no disk tier line"
[ -s "$DISK/rank-0/index-only.kvsdisk" ] || fail "no index-only list in $DISK/rank-0"
written=$(json_get .prefix.disk.blocks)
cp -r "$DISK" "$TEST_TMPDIR/disk.first"

# The second half after a restart, with and without the first's tier.
run "the second half alone" -- "$KVSIM" "${COMMON[@]}" --trace "$SECOND"
cold=$(json_get .prefix.hit_tokens)
run "the second half over the tier" -- "$KVSIM" "${COMMON[@]}" --trace "$SECOND" \
  --disk-cache 64GiB --disk-path "$DISK"
json_check ".prefix.disk.found_at_start == $written and .prefix.disk.agreed_at_start == $written"
json_check '.prefix.disk.refused_at_start == 0 and .prefix.disk.hit_tokens > 0'
json_check ".prefix.hit_tokens > $cold and .prefix.disk.read_s > 0"
warm=$(json_get .prefix.hit_tokens)
echo "second half: $cold hit tokens cold, $warm over the first half's disk tier"

# Two ranks over copies of the first half's tier: the same decisions, the
# same lists.
rm -rf "$DISK" && cp -r "$TEST_TMPDIR/disk.first" "$DISK" && cp -r "$DISK/rank-0" "$DISK/rank-1"
run "two ranks" -- "$KVSIM_LOCAL" --ranks 2 --tp 2 --topology bundled --device cpu \
  --progress-s 0 --json --trace "$SECOND" --check-every 8 --disk-cache 64GiB --disk-path "$DISK"
json_check '.ranks == 2 and .digests_agree == true and .ring_ctx_digest_agree == true'
json_check '.prefix.disk.agreed_at_start > 0 and .prefix.disk.hit_tokens > 0'
for r in 0 1; do
  grep -q "^kvsim: rank $r: integrity ok after" "$ERR" || fail "rank $r"
done
cmp -s "$DISK/rank-0/index-only.kvsdisk" "$DISK/rank-1/index-only.kvsdisk" ||
  fail "the two ranks' lists differ"

# Another geometry (fp8 rows) refuses the whole tier, saying why, and
# starts empty.
rm -rf "$DISK" && cp -r "$TEST_TMPDIR/disk.first" "$DISK"
run "fp8 over a bf16 tier" -- "$KVSIM" "${COMMON[@]}" --trace "$SECOND" --kv-dtype fp8 \
  --disk-cache 64GiB --disk-path "$DISK"
json_check ".prefix.disk.refused_at_start == $written and .prefix.disk.agreed_at_start == 0"
grep -q "$written blocks refused: cached under another geometry" "$ERR" ||
  fail "the refusal did not say why"

# A damaged list is ignored, saying so; the run starts empty.
printf 'not a list' >"$DISK/rank-0/index-only.kvsdisk"
run "a damaged list" -- "$KVSIM" "${COMMON[@]}" --trace "$SECOND" --disk-cache 64GiB \
  --disk-path "$DISK"
json_check '.prefix.disk.agreed_at_start == 0'
grep -q "is not a disk tier's index-only list: ignored" "$ERR" || fail "no word on the list"

# Flags: each refusal exits 2 and says why.
F=(--backend self --tp 1 --topology bundled --device cpu --trace "$FIRST")
expect 2 "--disk-cache needs its folder" -- "$KVSIM" "${F[@]}" --disk-cache 64GiB
expect 2 "--disk-path is the disk tier's folder" -- "$KVSIM" "${F[@]}" --disk-path "$DISK"
expect 2 "--disk-cache needs a size above 0" -- "$KVSIM" "${F[@]}" --disk-cache 0 \
  --disk-path "$DISK"
expect 2 "did you mean 64GiB" -- "$KVSIM" "${F[@]}" --disk-cache 64 --disk-path "$DISK"
expect 2 "--disk-bandwidth" -- "$KVSIM" "${F[@]}" --disk-cache 64GiB --disk-path "$DISK" \
  --disk-bandwidth 0
expect 2 "give --disk-cache too" -- "$KVSIM" "${F[@]}" --disk-bandwidth 5
expect 2 "it needs --prefix-cache kvshard" -- "$KVSIM" "${F[@]}" --disk-cache 64GiB \
  --disk-path "$DISK" --prefix-cache vllm
expect 2 "need --trace FILE" -- "$KVSIM" --backend self --tp 1 --topology bundled --device cpu --steps 10 --seed 1 \
  --disk-cache 64GiB --disk-path "$DISK"
expect 2 "--disk-path" -- "$KVSIM" "${F[@]}" --disk-cache 64GiB --disk-path ""
# A folder that cannot be one: the node's creation fails naming it (exit 4).
touch "$TEST_TMPDIR/a-file"
expect 4 "node creation failed at the disk tier on rank 0" -- "$KVSIM" "${F[@]}" --disk-cache 64GiB \
  --disk-path "$TEST_TMPDIR/a-file"
# A report lost to a full disk is exit 4 naming the reason, though the
# node's teardown writes the tier's list after the report.
"$KVSIM" "${F[@]}" --disk-cache 64GiB --disk-path "$TEST_TMPDIR/full" --json >/dev/full 2>"$ERR"
rc=$?
[ $rc -eq 4 ] || fail ">/dev/full exited $rc, expected 4"
grep -q "writing standard output: No space left on device" "$ERR" || fail "no reason for the lost report"
echo "PASS"
