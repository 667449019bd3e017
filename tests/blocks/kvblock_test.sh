#!/bin/sh
# End-to-end test of kvblock: the exit-status and one-line-stderr contract.
set -u
kvblock="tools/kvblock"
work="${TEST_TMPDIR:-/tmp}/kvblock_e2e"
rm -rf "$work" && mkdir -p "$work"
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect STATUS NEEDLE CMD...: runs CMD, checks its exit status, that a
# refusal (status 1) prints exactly one stderr line, and that stderr
# contains NEEDLE.
expect() {
  want="$1"; needle="$2"; shift 2
  "$@" >"$work/out" 2>"$work/err"
  got=$?
  [ "$got" -eq "$want" ] || { fail "exit $got, want $want: $*"; cat "$work/err"; return; }
  if [ "$want" -eq 1 ]; then
    lines=$(wc -l <"$work/err")
    [ "$lines" -eq 1 ] || { fail "$lines stderr lines, want 1: $*"; cat "$work/err"; }
  fi
  if [ -n "$needle" ] && ! grep -qF -- "$needle" "$work/err" "$work/out"; then
    fail "'$needle' not in the output of: $*"; cat "$work/err" "$work/out"
  fi
}

A="$work/a.kvb"
R="--layers 3 --kv-heads 2 --head-dim 8 --block-size 4"
expect 0 "wrote" $kvblock write "$A" --model model-a --weights deadbeef $R --window 128 --seed 9
expect 0 "verified" $kvblock verify "$A" --model model-a --weights deadbeef $R --window 128
expect 0 "verified" $kvblock verify "$A" --model model-a --weights DEADBEEF $R --window=128 --seed 9
expect 1 "field model" $kvblock verify "$A" --model model-b --weights deadbeef $R --window 128
expect 1 "field weights_fingerprint" $kvblock verify "$A" --model model-a --weights deadbeee $R --window 128
expect 1 "field weights_fingerprint" $kvblock verify "$A" --model model-a $R --window 128
expect 1 "needs none (full causal)" $kvblock verify "$A" --model model-a --weights deadbeef $R
expect 1 "field sliding_window" $kvblock verify "$A" --model model-a --weights deadbeef $R --window 256
expect 1 "field n_layers" $kvblock verify "$A" --model model-a --weights deadbeef --layers 4 --kv-heads 2 --head-dim 8 --block-size 4 --window 128
expect 1 "field head_dim" $kvblock verify "$A" --model model-a --weights deadbeef --layers 3 --kv-heads 2 --head-dim 16 --block-size 4 --window 128
# tokens precede block_size in the comparison order (the reader wants 8 of each)
expect 1 "field tokens" $kvblock verify "$A" --model model-a --weights deadbeef --layers 3 --kv-heads 2 --head-dim 8 --block-size 8 --window 128
expect 1 "field dtype" $kvblock verify "$A" --model model-a --weights deadbeef $R --window 128 --dtype bf16

B="$work/b.kvb"
expect 0 "bf16" $kvblock write "$B" --model model-a $R --dtype bf16
expect 0 "verified" $kvblock verify "$B" --model model-a $R --dtype bf16
expect 1 "field dtype" $kvblock verify "$B" --model model-a $R

# Damage: one flipped bit, a truncation, foreign bytes, a missing file.
cp "$A" "$work/flip.kvb"
byte=$(od -An -tu1 -j200 -N1 "$work/flip.kvb" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 4)))" |
  dd of="$work/flip.kvb" bs=1 seek=200 conv=notrunc 2>/dev/null
cmp -s "$A" "$work/flip.kvb" && fail "the bit flip did not change the file"
expect 1 "checksum" $kvblock verify "$work/flip.kvb" --model model-a --weights deadbeef $R --window 128
expect 1 "corrupt" $kvblock inspect "$work/flip.kvb"
head -c 1000 "$A" >"$work/cut.kvb"
expect 1 "truncated" $kvblock verify "$work/cut.kvb" --model model-a --weights deadbeef $R --window 128
printf 'hello, this is not a block at all, not even close\n' >"$work/foreign.kvb"
expect 1 "not a kvshard block" $kvblock verify "$work/foreign.kvb" --model model-a $R
expect 1 "cannot open" $kvblock verify "$work/missing.kvb" --model model-a $R

# Only regular files are read, and nothing blocks: a FIFO with no writer,
# a directory, a device.
mkfifo "$work/fifo.kvb"
expect 1 "is a FIFO, not a regular file" timeout 10 $kvblock verify "$work/fifo.kvb" --model model-a $R
expect 1 "is a FIFO, not a regular file" timeout 10 $kvblock inspect "$work/fifo.kvb"
expect 1 "is a directory, not a regular file" $kvblock inspect "$work"
expect 1 "is a character device, not a regular file" $kvblock inspect /dev/zero

# A huge file that starts with the block magic is refused by its size (or
# by the body length its header records) before it is read: sparse files,
# so neither the disk nor the reader's memory pays for them.
printf 'KVSBLOCK' >"$work/huge.kvb"
truncate -s 3G "$work/huge.kvb"
expect 1 "larger than any block file can be" timeout 10 $kvblock inspect "$work/huge.kvb"
expect 1 "larger than any block file can be" timeout 10 $kvblock verify "$work/huge.kvb" --model model-a $R
# Magic, version 2, flags 3, body_len 256, then 100 MiB of zeros.
printf 'KVSBLOCK\002\000\000\000\003\000\000\000\000\001\000\000\000\000\000\000' >"$work/long.kvb"
truncate -s 100M "$work/long.kvb"
expect 1 "body_len says 256 bytes, the file holds 104857600" timeout 10 $kvblock inspect "$work/long.kvb"
rm -f "$work/huge.kvb" "$work/long.kvb"

# write replaces a regular file only: a symbolic link, a device node, a
# FIFO or a directory at FILE is refused and left as it was.
ln -s "$A" "$work/link.kvb"
expect 1 "it is a symbolic link, not a regular file" $kvblock write "$work/link.kvb" --model m $R
[ -L "$work/link.kvb" ] || fail "write replaced the symbolic link"
cmp -s "$A" "$work/link.kvb" || fail "write changed the file behind the symbolic link"
expect 1 "it is a character device, not a regular file" $kvblock write /dev/full --model m $R
expect 1 "it is a FIFO, not a regular file" timeout 10 $kvblock write "$work/fifo.kvb" --model m $R
[ -p "$work/fifo.kvb" ] || fail "write replaced the FIFO"
mkdir "$work/dir.kvb"
expect 1 "it is a directory, not a regular file" $kvblock write "$work/dir.kvb" --model m $R
expect 1 "No such file or directory" $kvblock write "$work/no/such/dir.kvb" --model m $R
cp "$A" "$work/over.kvb"
expect 0 "wrote" $kvblock write "$work/over.kvb" --model m $R --seed 3
ls "$work" | grep -q '\.tmp-' && fail "write left a temporary file"

# Output that cannot be written is an error, not a silent exit 0.
expect 1 "writing standard output: No space left on device" sh -c "$kvblock inspect $A >/dev/full"
expect 1 "writing standard output: No space left on device" sh -c "$kvblock verify $A --model model-a --weights deadbeef $R --window 128 >/dev/full"
expect 1 "writing standard output: No space left on device" sh -c "$kvblock write $work/full.kvb --model m $R >/dev/full"

# Bad usage.
expect 2 "" $kvblock
expect 2 "unknown command" $kvblock frob "$A"
expect 2 "--model is required" $kvblock verify "$A" $R
expect 2 "--layers is required" $kvblock write "$A" --model m --kv-heads 2 --head-dim 8 --block-size 4
expect 2 "unknown flag" $kvblock verify "$A" --model m $R --colour red
expect 2 "needs a value" $kvblock verify "$A" --model m $R --window
expect 2 "--layers" $kvblock verify "$A" --model m --layers 0 --kv-heads 2 --head-dim 8 --block-size 4
expect 2 "--head-dim" $kvblock verify "$A" --model m --layers 3 --kv-heads 2 --head-dim 8x --block-size 4
expect 2 "does not divide" $kvblock verify "$A" --model m --layers 3 --kv-heads 2 --head-dim 8 --block-size 3 --window 128
expect 2 "--dtype" $kvblock write "$A" --model m $R --dtype f16
expect 2 "--weights" $kvblock write "$A" --model m $R --weights abc
expect 2 "given twice" $kvblock verify "$A" --model m --model n $R
expect 2 "not accepted here" $kvblock inspect "$A" --model m
expect 2 "not accepted here" $kvblock verify "$A" --model m $R --json

# inspect prints the recorded signature, as text and as JSON.
expect 0 "model:          model-a" $kvblock inspect "$A"
expect 0 "sliding_window: 128" $kvblock inspect "$A"
expect 0 "payload_check:  ok" $kvblock inspect "$A"
expect 0 '"model": "model-a"' $kvblock inspect "$A" --json
expect 0 '"weights_fingerprint": "deadbeef"' $kvblock inspect "$A" --json
expect 0 '"sliding_window": null' $kvblock inspect "$B" --json
expect 0 '"dtype": "bf16"' $kvblock inspect "$B" --json

# The same seed gives the same bytes; another seed other bytes.
$kvblock write "$work/s1.kvb" --model m $R --seed 5 >/dev/null
$kvblock write "$work/s2.kvb" --model m $R --seed 5 >/dev/null
$kvblock write "$work/s3.kvb" --model m $R --seed 6 >/dev/null
cmp -s "$work/s1.kvb" "$work/s2.kvb" || fail "same seed, different files"
cmp -s "$work/s1.kvb" "$work/s3.kvb" && fail "different seeds, same file"

# A version 3 DSV4 page block (the fuzz corpus's seed): inspect shows its
# identity and sections and checks the stamp and digests; verify, whose
# flags describe version 2 readers, refuses it by its version.
P="tests/blocks/fuzz_corpus/page_fp8_tails.kvb"
expect 0 "format_version: 3 (DSV4 page sections)" $kvblock inspect "$P"
expect 0 "section 1:      indexer, fp8+scales, 1 layers x 4 rows x 12 bytes" $kvblock inspect "$P"
expect 0 "payload_check:  ok" $kvblock inspect "$P"
expect 0 '"tier": "tail state"' $kvblock inspect "$P" --json
expect 0 '"page_size": 16' $kvblock inspect "$P" --json
expect 1 "other format: KV block is format version 3" $kvblock verify "$P" --model deepseek-ai/DeepSeek-V4-Flash $R
expect 1 "this reader reads version 2" $kvblock verify "$P" --model deepseek-ai/DeepSeek-V4-Flash $R
head -c 100 "$P" >"$work/page_cut.kvb"
expect 1 "truncated" $kvblock inspect "$work/page_cut.kvb"

if [ "$failures" -ne 0 ]; then
  echo "$failures kvblock checks failed"
  exit 1
fi
echo "kvblock end-to-end: all checks pass"
