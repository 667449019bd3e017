/* What a node puts on its GPU beside its carve, priced before it does.
 *
 * The plan prices the device tables' one allocation byte for byte
 * (plan/device_layout.h). A node on a GPU allocates more, after its budget
 * was measured, none of it in the carve:
 *
 *   - the table's batch buffers (backends/cuda/table_cuda.c): one
 *     block-table row of ceil(max_seq_len / P) int32 blocks per request of
 *     a step, a ring context of P slots per request, and six int64 words
 *     per request (positions, own and previous slots, request slots, the
 *     ratio-4 and ratio-128 ring locations);
 *   - the step's buffers, two of each for the two step parities
 *     (backends/cuda/table_cuda_step.c): the batch block copied whole
 *     (8 + 24 B per request), the results (own, previous, two ring
 *     locations and the P-slot ring context per request), the message's
 *     device copy when the communicator keeps host buffers, and the digest
 *     word;
 *   - on a communicator with device buffers (NCCL), the shard's two step
 *     messages and its check words, the node's agreement words and the
 *     communicator's barrier word (shard/shard.c, shard/node.c,
 *     backends/nccl/comm_nccl.c);
 *   - NCCL's own buffers, which it connects lazily at the communicator's
 *     first collective (NCCL_RUNTIME_CONNECT, default 1 since NCCL 2.22).
 *
 * kvs_node_overhead_compute gives the first three exactly (the sizes the
 * code asks cudaMalloc for; pinned host memory beside them, which is not
 * GPU memory, separately) and the fourth as an estimate
 * (kvs_nccl_buffer_estimate, below). They are priced in the reserve: a
 * budget from GPU memory, measured or nominal, is memory x ratio - weights
 * - reserve, and the reserve must hold them (kvs_node_overhead_check). The
 * node checks its own at create (its device, its communicator, max_batch,
 * its shard's step capacity: shard/plan_overhead.h), and kvplan checks
 * the deployment it plans (device tables, NCCL between the ranks of a
 * group); a reserve below them is refused naming both numbers, never
 * silently carved into. The 512 MiB default holds them (53.0 MiB below)
 * with the rest for what the CUDA runtime takes lazily (module loads,
 * local memory, the driver's rounding of each allocation to its pages),
 * which this prices no better than the reserve did. An explicit budget is
 * the carve's own bytes and takes nothing off: no check.
 * kvs_node_overhead_reserve gives the reserve with the buffers added, for
 * a caller that wants them on top of its own reserve instead.
 *
 * A DSV4 node stepping 64 requests of up to 1 Mi tokens at P = 128 over
 * NCCL allocates 2,765,144 bytes (2.6 MiB) beside its carve, most of it
 * the block-table rows; NCCL's estimate at kvshard's two channels on an
 * 8-GPU NVSwitch node is 52,822,016 bytes (50.4 MiB); 53.0 MiB in all off
 * each GPU (tests/plan/node_overhead_test.cc asserts the figures).
 *
 * NULL: the kvs_status calls refuse a NULL request or output with
 * KVS_ERR_INVALID_ARGUMENT naming it; *out is written only on success. */
#ifndef KVS_PLAN_NODE_OVERHEAD_H
#define KVS_PLAN_NODE_OVERHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "plan/memory_budget.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- NCCL's buffers ---- */

/* NCCL's per-connection buffer of each protocol, its defaults
 * (src/init.cc computeBuffSizes; NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE and
 * NCCL_BUFFSIZE replace them): LL 8 lines x 512 threads x 8 steps x 16 B,
 * LL128 120 elements x 640 threads x 8 steps x 8 B, Simple 4 MiB (the
 * NCCL_BUFFSIZE the user guide documents). */
#define KVS_NCCL_LL_BUFFSIZE 524288u
#define KVS_NCCL_LL128_BUFFSIZE 4915200u
#define KVS_NCCL_SIMPLE_BUFFSIZE 4194304u
/* NVLink SHARP (src/transport/nvls.cc): each channel holds two buffers of
 * NCCL_STEPS (8) x NCCL_NVLS_CHUNKSIZE (128 KiB) per head. */
#define KVS_NCCL_NVLS_CHUNKSIZE 131072u
#define KVS_NCCL_STEPS 8u
/* The channels kvshard's own NCCL communicator may use: its config's
 * maxCTAs (backends/nccl/comm_nccl.c). A step message is at most a few
 * hundred KiB, which two channels move in microseconds over NVLink; NCCL
 * would otherwise connect every channel its topology search finds (up to
 * 64, MAXCHANNELS), each with its buffers. */
#define KVS_NCCL_MAX_CHANNELS 2u

/* What the estimate assumes. Start from KVS_NCCL_ESTIMATE_INIT. */
typedef struct kvs_nccl_estimate {
  uint32_t channels;   /* ring channels connected (kvshard's: KVS_NCCL_MAX_CHANNELS) */
  uint32_t ring_peers; /* connections whose buffers one rank holds per ring channel: 1 */
  uint32_t tree_peers; /* per tree channel: 0 on one node, up to 3 (NCCL_MAX_TREE_ARITY) */
  uint64_t ll_bytes;   /* per connection, each protocol */
  uint64_t ll128_bytes;
  uint64_t simple_bytes;
  uint32_t nvls_channels; /* 0: no NVLink SHARP (not an NVSwitch node, or NCCL_NVLS_ENABLE=0) */
  uint32_t nvls_heads;    /* at most the node's ranks */
  uint64_t nvls_chunk_bytes;
} kvs_nccl_estimate;

/* kvshard's communicator on an 8-GPU NVSwitch node, NCCL's defaults: two
 * ring channels of one connection each, no tree, NVLS on its two channels
 * with eight heads. A rank of a ring receives from one peer and sends to
 * one per channel; NCCL places each connection's buffers on one end (the
 * receiver, or the sender for Simple with P2P read), so one connection's
 * three buffers per channel and rank. */
#define KVS_NCCL_ESTIMATE_INIT                                                      \
  {                                                                                 \
    KVS_NCCL_MAX_CHANNELS, 1, 0, KVS_NCCL_LL_BUFFSIZE, KVS_NCCL_LL128_BUFFSIZE,     \
        KVS_NCCL_SIMPLE_BUFFSIZE, KVS_NCCL_MAX_CHANNELS, 8, KVS_NCCL_NVLS_CHUNKSIZE \
  }

/* channels x (ring_peers + tree_peers) x (ll + ll128 + simple)
 *   + nvls_channels x 2 x nvls_heads x KVS_NCCL_STEPS x nvls_chunk_bytes.
 * The INIT values: 2 x 9,633,792 + 2 x 2 x 8 x 1 MiB = 52,822,016 B
 * (50.4 MiB). A sum past 2^64 is KVS_ERR_OVERFLOW. */
kvs_status kvs_nccl_buffer_estimate(const kvs_nccl_estimate *estimate, uint64_t *out,
                                    kvs_error *err);

/* ---- the node's buffers ---- */

typedef struct kvs_node_overhead_request {
  size_t max_batch;     /* rows a step carries (kvs_node_options.max_batch, else max_running) */
  uint64_t max_seq_len; /* tokens of one request's history */
  uint64_t page;        /* P */
  bool cuda_tables;     /* the tables are on the GPU (device cuda): else nothing below */
  bool device_comm;     /* the steps' communicator keeps device buffers (NCCL) */
  /* kvs_step_message_bytes of the shard's step capacity
   * (kvs_shard_step_capacity): 48 + 16 x entries. Before the shard exists
   * kvs_shard_step_capacity_of over the planned stage's sizes (what
   * shard/plan_overhead.h does); a page more or less of window changes it
   * by 32 bytes. */
  size_t message_bytes;
  size_t agree_words; /* the node's agreement scratch on a device communicator, in words */
  const kvs_nccl_estimate *nccl; /* with device_comm; NULL: KVS_NCCL_ESTIMATE_INIT */
} kvs_node_overhead_request;

typedef struct kvs_node_overhead {
  uint64_t table_bytes;  /* the table's batch buffers */
  uint64_t step_bytes;   /* both parities' step buffers and the digest word */
  uint64_t comm_bytes;   /* step messages, check, agreement and barrier words on the device */
  uint64_t device_bytes; /* the three: what the node asks cudaMalloc for beside its carve */
  uint64_t nccl_bytes;   /* NCCL's buffers, estimated; 0 without a device communicator */
  uint64_t total_bytes;  /* device_bytes + nccl_bytes: what the plan takes off each GPU */
  /* Pinned host memory beside it (not GPU memory; for the record): the
   * staging above, the communicator's twins, and the device tables' check
   * download buffer and journal staging (plan/device_layout.h). */
  uint64_t pinned_bytes;
} kvs_node_overhead;

/* The node's device memory beside its carve, as above. A request of
 * max_batch, max_seq_len or page 0 with cuda_tables is
 * KVS_ERR_INVALID_ARGUMENT naming the field; sizes past 2^64 are
 * KVS_ERR_OVERFLOW. Without cuda_tables the table and step figures are 0
 * (the host twin allocates nothing on a GPU); the communicator's are
 * counted whenever device_comm. */
kvs_status kvs_node_overhead_compute(const kvs_node_overhead_request *request,
                                     kvs_node_overhead *out, kvs_error *err);

/* reserve_bytes + overhead->total_bytes into *out: the reserve a budget
 * request gives when the node's overhead is priced. A sum past 2^64 is
 * KVS_ERR_OVERFLOW naming both. */
kvs_status kvs_node_overhead_reserve(uint64_t reserve_bytes, const kvs_node_overhead *overhead,
                                     uint64_t *out, kvs_error *err);

/* Whether budget's reserve holds the node's buffers: KVS_OK when the
 * budget is explicit (the carve's own bytes: nothing was taken off memory,
 * nothing is asked) or overhead->total_bytes <= budget->reserve_bytes;
 * else KVS_ERR_BUDGET_TOO_SMALL: "the node's buffers need N bytes beside
 * its carve but RESERVE is M; give RESERVE of at least N (...)", RESERVE
 * being reserve_name (the flag or option the caller gives the reserve by;
 * NULL: "the reserve"), with the buffers' parts. */
kvs_status kvs_node_overhead_check(const kvs_memory_budget *budget,
                                   const kvs_node_overhead *overhead, const char *reserve_name,
                                   kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_NODE_OVERHEAD_H */
