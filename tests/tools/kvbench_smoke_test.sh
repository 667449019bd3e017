#!/usr/bin/env bash
# kvbench runs its workloads (quick mode) and prints the contract's keys.
set -euo pipefail
out=$("$1" --quick --json | tail -n 1)
for key in alloc_free_page_ns window_ctx_ns solve_ns block_encode_gbps block_decode_verify_gbps \
  tier_spill_gbps_64 tier_spill_memcpy_gbps_64 tier_spill_vs_memcpy_64 tier_fetch_gbps_256 \
  tier_fetch_memcpy_gbps_256 tier_fetch_vs_memcpy_256 tier_slot_bytes; do
  if ! echo "$out" | grep -Eq "\"$key\":[0-9.e+-]+"; then
    echo "FAIL: key $key missing or not a number in: $out"
    exit 1
  fi
done
echo "ok: $out"
