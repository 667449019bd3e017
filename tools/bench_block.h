/* Block codec throughput, for kvbench.
 *
 * kvs_bench_block measures, for one DeepSeek-V4-sized block (61 layers,
 * 1 KV head, head_dim 512, 128 tokens, bf16: about 16 MB of K and V),
 *   "block_encode_gbps"         encode + XXH3-64 checksum into a
 *                               preallocated buffer,
 *   "block_decode_verify_gbps"  zero-copy decode (checksum, bounds) + full
 *                               signature verification against a reader,
 * in GB/s (1e9 bytes of encoded block per second, median of several
 * timed batches), all in memory: no file system, no allocation in the
 * timed loops. It also sets "block_encoded_bytes". For one DSV4-Flash
 * page block (format version 3, blocks/page_block.h: a 256-token page's
 * fp8 compressed and indexer rows and tail states, about 1.4 MB) it
 * measures, interleaved batch by batch in GB/s of the page's rows,
 *   "page_memcpy_gbps"          memcpy of the rows (the baseline),
 *   "page_digest_gbps"          every section's position digest,
 *   "page_encode_gbps"          encode (copy + checksum),
 *   "page_decode_verify_gbps"   zero-copy decode + verification against
 *                               a reader (checksum, measure, digests),
 * and sets "page_digest_over_memcpy" (the digest's time over memcpy's),
 * "page_encoded_bytes" and "page_row_bytes". quick != 0 shortens
 * the runs (for tests and smoke runs). On failure it sets "block_error"
 * to a message instead. */
#ifndef KVS_TOOLS_BENCH_BLOCK_H
#define KVS_TOOLS_BENCH_BLOCK_H

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

void kvs_bench_block(json_t *results, int quick);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_BENCH_BLOCK_H */
