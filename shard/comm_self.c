#include "shard/comm_self.h"
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

static const kvs_comm_vtable self_vtable = {
    .name = "self",
    .buffer_alloc = kvs_comm_host_buffer_alloc,
    .buffer_free = kvs_comm_host_buffer_free,
    .broadcast = self_broadcast,
    .allreduce_u64 = self_allreduce,
    .barrier = self_barrier,
    /* nothing to abort or release: one rank, no state */
};

kvs_status kvs_comm_self_create(kvs_comm_t *out, kvs_error *err) {
  return kvs_comm_create(&self_vtable, NULL, 0, 1, KVS_COMM_DEFAULT_TIMEOUT_MS, out, err);
}
