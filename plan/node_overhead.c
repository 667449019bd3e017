#include "plan/node_overhead.h"

#include "core/checked.h"
#include "core/device_ref.h"
#include "plan/device_layout.h"

/* The shard's check words (shard/shard.c, C_WORDS) and the NCCL
 * communicator's barrier word (backends/nccl/comm_nccl.c): fixed buffers
 * on a device communicator, 88 bytes, counted so the sum is the code's. */
#define CHECK_WORDS 10u
#define BARRIER_WORDS 1u
#define WORD 8u

kvs_status kvs_nccl_buffer_estimate(const kvs_nccl_estimate *e, uint64_t *out, kvs_error *err) {
  if (e == NULL)
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: estimate is NULL", __func__);
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  bool of = false;
  uint64_t connection = kvs_add(kvs_add(e->ll_bytes, e->ll128_bytes, &of), e->simple_bytes, &of);
  uint64_t peers = (uint64_t)e->ring_peers + e->tree_peers;
  uint64_t rings = kvs_mul(kvs_mul(e->channels, peers, &of), connection, &of);
  uint64_t nvls = kvs_mul(
      kvs_mul(kvs_mul((uint64_t)e->nvls_channels * 2u, e->nvls_heads, &of), KVS_NCCL_STEPS, &of),
      e->nvls_chunk_bytes, &of);
  uint64_t total = kvs_add(rings, nvls, &of);
  if (of) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "NCCL's buffers for %u channels of %llu peers and %u NVLS channels of %u "
                         "heads exceed 2^64 bytes",
                         e->channels, (unsigned long long)peers, e->nvls_channels, e->nvls_heads);
  }
  *out = total;
  return KVS_OK;
}

kvs_status kvs_node_overhead_compute(const kvs_node_overhead_request *r, kvs_node_overhead *out,
                                     kvs_error *err) {
  if (r == NULL)
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request is NULL", __func__);
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  kvs_node_overhead o = {0, 0, 0, 0, 0, 0, 0};
  bool of = false;
  if (r->cuda_tables) {
    const char *zero = r->max_batch == 0     ? "max_batch"
                       : r->max_seq_len == 0 ? "max_seq_len"
                       : r->page == 0        ? "page"
                                             : NULL;
    if (zero != NULL) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "request.%s is 0: device tables size their batch buffers by it", zero);
    }
    uint64_t rows = r->max_batch, page = r->page;
    uint64_t blocks = r->max_seq_len / page + (r->max_seq_len % page != 0);
    /* table_cuda.c: int32 block rows, six int64 words and a P-slot ring
     * context per request; and their pinned staging (blocks, positions,
     * request slots). */
    uint64_t block_bytes = kvs_mul(kvs_mul(rows, blocks, &of), 4, &of);
    uint64_t ring_bytes = kvs_mul(kvs_mul(rows, page, &of), WORD, &of);
    /* And a transfer's rows digests: a batch of units and digests. */
    const uint64_t digests = KVS_ROWS_DIGEST_BATCH * (sizeof(kvs_rows_unit) + WORD);
    o.table_bytes =
        kvs_add(kvs_add(kvs_add(block_bytes, kvs_mul(rows, 6 * WORD, &of), &of), ring_bytes, &of),
                digests, &of);
    o.pinned_bytes = kvs_add(kvs_add(block_bytes, kvs_mul(rows, 2 * WORD, &of), &of), digests, &of);
    /* table_cuda_step.c, per parity: the batch block (count word,
     * positions, slots, two int32 blocks per row), the results (own,
     * previous, two ring locations, the ring context), and the message's
     * device copy when the communicator's buffers are on the host; then
     * the digest word. The batch and the message are staged in pinned
     * memory too. */
    uint64_t batch = kvs_add(WORD, kvs_mul(rows, 2 * WORD + 2 * 4, &of), &of);
    uint64_t results = kvs_mul(kvs_mul(rows, 4 + page, &of), WORD, &of);
    uint64_t message = r->device_comm ? 0 : r->message_bytes;
    uint64_t side = kvs_add(kvs_add(batch, results, &of), message, &of);
    o.step_bytes = kvs_add(kvs_mul(side, 2, &of), WORD, &of);
    o.pinned_bytes = kvs_add(
        o.pinned_bytes, kvs_add(kvs_mul(kvs_add(batch, message, &of), 2, &of), WORD, &of), &of);
    /* device_tables.c: a check's download buffer (two halves) and the
     * journal staging of the node's layout (its default capacity). */
    const kvs_device_layout_options layout = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
    o.pinned_bytes =
        kvs_add(o.pinned_bytes,
                kvs_add(2 * KVS_DEVICE_READ_HALF_BYTES,
                        kvs_mul(layout.journal_capacity, sizeof(kvs_journal_entry), &of), &of),
                &of);
  }
  if (r->device_comm) {
    /* Device buffers with pinned twins (comm_nccl.c's buffer_alloc): the
     * shard's two step messages and check words, the node's agreement
     * words, the barrier word. */
    uint64_t words = kvs_add(kvs_add(CHECK_WORDS, BARRIER_WORDS, &of), r->agree_words, &of);
    o.comm_bytes = kvs_add(kvs_mul(r->message_bytes, 2, &of), kvs_mul(words, WORD, &of), &of);
    o.pinned_bytes = kvs_add(o.pinned_bytes, o.comm_bytes, &of);
    static const kvs_nccl_estimate defaults = KVS_NCCL_ESTIMATE_INIT;
    kvs_status status =
        kvs_nccl_buffer_estimate(r->nccl != NULL ? r->nccl : &defaults, &o.nccl_bytes, err);
    if (status != KVS_OK) return status;
  }
  o.device_bytes = kvs_add(kvs_add(o.table_bytes, o.step_bytes, &of), o.comm_bytes, &of);
  o.total_bytes = kvs_add(o.device_bytes, o.nccl_bytes, &of);
  if (of) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "the node's buffers for %zu rows of %llu tokens (page %llu) exceed 2^64 "
                         "bytes",
                         r->max_batch, (unsigned long long)r->max_seq_len,
                         (unsigned long long)r->page);
  }
  *out = o;
  return KVS_OK;
}

kvs_status kvs_node_overhead_reserve(uint64_t reserve_bytes, const kvs_node_overhead *overhead,
                                     uint64_t *out, kvs_error *err) {
  if (overhead == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: overhead is NULL", __func__);
  }
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  bool of = false;
  uint64_t sum = kvs_add(reserve_bytes, overhead->total_bytes, &of);
  if (of) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "reserve_bytes %llu + overhead %llu exceed 2^64",
                         (unsigned long long)reserve_bytes,
                         (unsigned long long)overhead->total_bytes);
  }
  *out = sum;
  return KVS_OK;
}

kvs_status kvs_node_overhead_check(const kvs_memory_budget *budget,
                                   const kvs_node_overhead *overhead, const char *reserve_name,
                                   kvs_error *err) {
  if (budget == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: budget is NULL", __func__);
  }
  if (overhead == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: overhead is NULL", __func__);
  }
  if (reserve_name == NULL) reserve_name = "the reserve";
  /* An explicit budget is the carve's own bytes: nothing was taken off
   * memory for anything, and nothing is asked of it. */
  if (budget->source == KVS_BUDGET_EXPLICIT || overhead->total_bytes <= budget->reserve_bytes) {
    return KVS_OK;
  }
  return kvs_error_set(
      err, KVS_ERR_BUDGET_TOO_SMALL,
      "the node's buffers need %llu bytes beside its carve but %s is %llu; give "
      "%s of at least %llu (%.1f MiB: the tables' batch buffers %llu, the step "
      "buffers %llu, the communicator's %llu, NCCL's estimated %llu)",
      (unsigned long long)overhead->total_bytes, reserve_name,
      (unsigned long long)budget->reserve_bytes, reserve_name,
      (unsigned long long)overhead->total_bytes, (double)overhead->total_bytes / 1048576.0,
      (unsigned long long)overhead->table_bytes, (unsigned long long)overhead->step_bytes,
      (unsigned long long)overhead->comm_bytes, (unsigned long long)overhead->nccl_bytes);
}
