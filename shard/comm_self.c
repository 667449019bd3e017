#include "shard/comm_self.h"

#include <string.h>

/* The wrapper answers size-1 collectives on host buffers itself; these
 * are never reached but keep the slots total. */
static kvs_status self_broadcast(void *ctx, kvs_comm_buffer *buffer, size_t bytes, int root,
                                 int timeout_ms, kvs_error *err) {
  (void)ctx, (void)buffer, (void)bytes, (void)root, (void)timeout_ms, (void)err;
  return KVS_OK;
}

static kvs_status self_allreduce(void *ctx, kvs_comm_buffer *buffer, size_t count, kvs_comm_op op,
                                 int timeout_ms, kvs_error *err) {
  (void)ctx, (void)buffer, (void)count, (void)op, (void)timeout_ms, (void)err;
  return KVS_OK;
}

static kvs_status self_barrier(void *ctx, int timeout_ms, kvs_error *err) {
  (void)ctx, (void)timeout_ms, (void)err;
  return KVS_OK;
}

/* Every transfer's peer is rank 0, this one: the k-th send lands in the
 * k-th receive, in batch order. The whole batch is matched before a byte
 * moves, so one that cannot complete (a send without its receive, sizes
 * that differ) is refused as an argument error, with nothing moved: on
 * one rank the batch is the whole exchange, and no peer waits on it. */
static kvs_status self_exchange(void *ctx, const kvs_comm_transfer *t, size_t n, int timeout_ms,
                                kvs_error *err) {
  (void)ctx, (void)timeout_ms;
  size_t sends = 0, receives = 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i].send)
      sends++;
    else
      receives++;
  }
  if (sends != receives) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "self exchange of %zu sends and %zu receives: on one rank every send is "
                         "to itself and needs its receive in the same batch",
                         sends, receives);
  }
  /* Pair the k-th send with the k-th receive: two cursors over the batch. */
  for (int pass = 0; pass < 2; pass++) {
    size_t s = 0, r = 0;
    for (size_t k = 0; k < sends; k++, s++, r++) {
      while (!t[s].send) s++;
      while (t[r].send) r++;
      if (pass == 0 && t[s].bytes != t[r].bytes) {
        return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                             "self exchange: send %zu to rank 0 is %zu bytes (transfer %zu), its "
                             "receive is %zu bytes (transfer %zu); matched transfers must be the "
                             "same size",
                             k, t[s].bytes, s, t[r].bytes, r);
      }
      if (pass == 1) memmove(t[r].data, t[s].data, t[s].bytes);
    }
  }
  return KVS_OK;
}

static const kvs_comm_vtable self_vtable = {
    .name = "self",
    .buffer_alloc = kvs_comm_host_buffer_alloc,
    .buffer_free = kvs_comm_host_buffer_free,
    .broadcast = self_broadcast,
    .allreduce_u64 = self_allreduce,
    .barrier = self_barrier,
    .exchange = self_exchange,
    /* nothing to abort or release: one rank, no state */
};

kvs_status kvs_comm_self_create(kvs_comm_t *out, kvs_error *err) {
  return kvs_comm_create(&self_vtable, NULL, 0, 1, KVS_COMM_DEFAULT_TIMEOUT_MS, out, err);
}
