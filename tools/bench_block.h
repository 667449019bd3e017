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
 * timed loops. It also sets "block_encoded_bytes". quick != 0 shortens
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
