#include "shard/comm.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kvs_comm {
  const kvs_comm_vtable *vtable;
  void *ctx;
  int rank;
  int size;
  int timeout_ms;
  kvs_status health;                   /* sticky: the first failure */
  char failure[KVS_ERROR_MESSAGE_MAX]; /* its message */
  kvs_comm_stats stats;
  /* An exchange's transfers of at least one byte, handed to the backend:
   * grown to the largest batch seen, never shrunk, so a steady stream of
   * exchanges allocates nothing. */
  kvs_comm_transfer *moving;
  size_t moving_cap;
};

const char *kvs_comm_op_name(kvs_comm_op op) {
  switch (op) {
    case KVS_COMM_MIN:
      return "min";
    case KVS_COMM_MAX:
      return "max";
    case KVS_COMM_SUM:
      return "sum";
  }
  return "?";
}

kvs_status kvs_comm_create(const kvs_comm_vtable *vtable, void *ctx, int rank, int size,
                           int timeout_ms, kvs_comm_t *out, kvs_error *err) {
  kvs_status status = KVS_OK;
  if (vtable == NULL || out == NULL) {
    status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "vtable or output handle is NULL");
  } else if (vtable->buffer_alloc == NULL || vtable->buffer_free == NULL ||
             vtable->broadcast == NULL || vtable->allreduce_u64 == NULL ||
             vtable->barrier == NULL) {
    status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "comm backend '%s' leaves a required slot NULL (buffer_alloc, "
                           "buffer_free, broadcast, allreduce_u64 and barrier are required)",
                           vtable->name != NULL ? vtable->name : "?");
  } else if (size < 1 || rank < 0 || rank >= size) {
    status = kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "rank %d is outside a group of %d ranks",
                           rank, size);
  } else {
    status = kvs_comm_check_timeout(timeout_ms, err);
  }
  struct kvs_comm *comm = NULL;
  if (status == KVS_OK && (comm = calloc(1, sizeof *comm)) == NULL) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a communicator");
  }
  if (status != KVS_OK) {
    /* The communicator owns ctx even when it could not be built. */
    if (vtable != NULL && vtable->destroy != NULL) vtable->destroy(ctx);
    return status;
  }
  comm->vtable = vtable;
  comm->ctx = ctx;
  comm->rank = rank;
  comm->size = size;
  comm->timeout_ms = timeout_ms;
  *out = comm;
  return KVS_OK;
}

void kvs_comm_destroy(kvs_comm_t comm) {
  if (comm == NULL) return;
  if (comm->vtable->destroy != NULL) comm->vtable->destroy(comm->ctx);
  free(comm->moving);
  free(comm);
}

int kvs_comm_rank(const struct kvs_comm *comm) { return comm != NULL ? comm->rank : -1; }
int kvs_comm_size(const struct kvs_comm *comm) { return comm != NULL ? comm->size : 0; }
const char *kvs_comm_backend(const struct kvs_comm *comm) {
  if (comm == NULL) return "";
  return comm->vtable->name != NULL ? comm->vtable->name : "?";
}
int kvs_comm_timeout_ms(const struct kvs_comm *comm) { return comm != NULL ? comm->timeout_ms : 0; }
void *kvs_comm_backend_context(const struct kvs_comm *comm) {
  return comm != NULL ? comm->ctx : NULL;
}
kvs_status kvs_comm_health(const struct kvs_comm *comm) {
  return comm != NULL ? comm->health : KVS_ERR_INVALID_ARGUMENT;
}

kvs_status kvs_comm_device_stream(const struct kvs_comm *comm, void **stream, int *device,
                                  kvs_error *err) {
  if (comm == NULL || stream == NULL || device == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "comm, stream and device are required");
  }
  if (comm->vtable->device_stream == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "the '%s' communicator moves host buffers: it has no device stream",
                         kvs_comm_backend(comm));
  }
  return comm->vtable->device_stream(comm->ctx, stream, device, err);
}

kvs_status kvs_comm_reads_done(kvs_comm_t comm, void *stream, kvs_error *err) {
  if (comm == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "comm is NULL");
  if (comm->vtable->reads_done == NULL) return KVS_OK;
  return comm->vtable->reads_done(comm->ctx, stream, err);
}
const char *kvs_comm_failure(const struct kvs_comm *comm) { return comm->failure; }

void kvs_comm_stats_get(const struct kvs_comm *comm, kvs_comm_stats *out) { *out = comm->stats; }

kvs_status kvs_comm_check_timeout(int timeout_ms, kvs_error *err) {
  if (timeout_ms > 0) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                       "timeout_ms is %d; every wait needs a deadline (> 0)", timeout_ms);
}

kvs_status kvs_comm_set_timeout_ms(kvs_comm_t comm, int timeout_ms, kvs_error *err) {
  if (comm == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "comm is NULL");
  kvs_status status = kvs_comm_check_timeout(timeout_ms, err);
  if (status != KVS_OK) return status;
  comm->timeout_ms = timeout_ms;
  return KVS_OK;
}

kvs_status kvs_comm_host_buffer_alloc(void *ctx, size_t bytes, kvs_comm_buffer *out,
                                      kvs_error *err) {
  (void)ctx;
  out->host = calloc(1, bytes);
  if (out->host == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %zu-byte comm buffer", bytes);
  }
  return KVS_OK;
}

void kvs_comm_host_buffer_free(void *ctx, kvs_comm_buffer *buffer) {
  (void)ctx;
  free(buffer->host);
}

kvs_status kvs_comm_buffer_alloc(kvs_comm_t comm, size_t bytes, kvs_comm_buffer *out,
                                 kvs_error *err) {
  if (out == NULL || bytes == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a comm buffer needs an output and at least one byte");
  }
  kvs_comm_buffer buffer = {NULL, NULL, 0, NULL};
  kvs_status status = comm->vtable->buffer_alloc(comm->ctx, bytes, &buffer, err);
  if (status != KVS_OK) return status;
  buffer.bytes = bytes;
  *out = buffer;
  return KVS_OK;
}

void kvs_comm_buffer_free(kvs_comm_t comm, kvs_comm_buffer *buffer) {
  if (comm == NULL || buffer == NULL || (buffer->host == NULL && buffer->device == NULL)) return;
  comm->vtable->buffer_free(comm->ctx, buffer);
  memset(buffer, 0, sizeof *buffer);
}

/* Records the first failure; later calls report it instead of touching a
 * group whose state is unknown. */
static kvs_status poison(kvs_comm_t comm, kvs_status status, const kvs_error *local) {
  if (comm->health == KVS_OK) {
    comm->health = status;
    snprintf(comm->failure, sizeof comm->failure, "%s", local->message);
  }
  return status;
}

static kvs_status check_live(const struct kvs_comm *comm, const char *what, kvs_error *err) {
  if (comm->health == KVS_OK) return KVS_OK;
  return kvs_error_set(err, KVS_ERR_COMM,
                       "%s comm %s on rank %d of %d refused: the communicator failed earlier "
                       "(%s): %s",
                       kvs_comm_backend(comm), what, comm->rank, comm->size,
                       kvs_status_string(comm->health), comm->failure);
}

/* Hands a backend's failure to the caller and, unless it was refused before
 * anything was sent, poisons the communicator with it. */
static kvs_status finish(kvs_comm_t comm, kvs_status status, const kvs_error *local,
                         kvs_error *err) {
  if (status == KVS_OK) return KVS_OK;
  if (err != NULL) *err = *local;
  if (status == KVS_ERR_INVALID_ARGUMENT) return status; /* nothing was sent */
  return poison(comm, status, local);
}

kvs_status kvs_comm_broadcast(kvs_comm_t comm, kvs_comm_buffer *buffer, size_t bytes, int root,
                              kvs_error *err) {
  kvs_status status = check_live(comm, "broadcast", err);
  if (status != KVS_OK) return status;
  if (buffer == NULL || buffer->host == NULL || bytes > buffer->bytes) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "broadcast of %zu bytes needs a comm buffer at least that large "
                         "(got %zu bytes)",
                         bytes, buffer != NULL ? buffer->bytes : 0);
  }
  if (root < 0 || root >= comm->size) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "broadcast root %d is outside a group of %d ranks", root, comm->size);
  }
  comm->stats.collectives++;
  comm->stats.broadcasts++;
  comm->stats.bytes += bytes;
  /* One rank has nothing to exchange, except that a device buffer must
   * still be staged so its device copy is what a kernel will read. */
  if (bytes == 0 || (comm->size == 1 && buffer->device == NULL)) return KVS_OK;
  kvs_error local;
  kvs_error_clear(&local);
  status = comm->vtable->broadcast(comm->ctx, buffer, bytes, root, comm->timeout_ms, &local);
  return finish(comm, status, &local, err);
}

kvs_status kvs_comm_allreduce_u64(kvs_comm_t comm, kvs_comm_buffer *buffer, size_t count,
                                  kvs_comm_op op, kvs_error *err) {
  kvs_status status = check_live(comm, "allreduce", err);
  if (status != KVS_OK) return status;
  if (buffer == NULL || buffer->host == NULL || count > buffer->bytes / sizeof(uint64_t)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "allreduce of %zu words needs a comm buffer of %zu bytes (got %zu)", count,
                         count * sizeof(uint64_t), buffer != NULL ? buffer->bytes : 0);
  }
  if (op != KVS_COMM_MIN && op != KVS_COMM_MAX && op != KVS_COMM_SUM) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "allreduce op %d is none of min, max, sum",
                         (int)op);
  }
  comm->stats.collectives++;
  comm->stats.allreduces++;
  comm->stats.bytes += count * sizeof(uint64_t);
  if (count == 0 || (comm->size == 1 && buffer->device == NULL)) return KVS_OK;
  kvs_error local;
  kvs_error_clear(&local);
  status = comm->vtable->allreduce_u64(comm->ctx, buffer, count, op, comm->timeout_ms, &local);
  return finish(comm, status, &local, err);
}

kvs_status kvs_comm_barrier(kvs_comm_t comm, kvs_error *err) {
  kvs_status status = check_live(comm, "barrier", err);
  if (status != KVS_OK) return status;
  comm->stats.collectives++;
  comm->stats.barriers++;
  if (comm->size == 1) return KVS_OK;
  kvs_error local;
  kvs_error_clear(&local);
  status = comm->vtable->barrier(comm->ctx, comm->timeout_ms, &local);
  return finish(comm, status, &local, err);
}

void kvs_comm_transfer_describe(const kvs_comm_transfer *t, char *out, size_t cap) {
  snprintf(out, cap, "%s of %zu bytes %s rank %d", t->send ? "send" : "receive", t->bytes,
           t->send ? "to" : "from", t->peer);
}

void kvs_comm_transfers_describe(const kvs_comm_transfer *t, size_t n, char *out, size_t cap) {
  if (cap == 0) return;
  out[0] = '\0';
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    char one[96], more[48];
    kvs_comm_transfer_describe(&t[i], one, sizeof one);
    snprintf(more, sizeof more, ", and %zu more", n - i);
    /* Room for this one and, should the next not fit, the tail. */
    size_t need = strlen(one) + (used > 0 ? 2 : 0) + (i + 1 < n ? strlen(more) + 2 : 0);
    if (used + need >= cap) {
      if (used + strlen(more) < cap) snprintf(out + used, cap - used, "%s", more);
      return;
    }
    used += (size_t)snprintf(out + used, cap - used, "%s%s", used > 0 ? ", " : "", one);
  }
}

/* The batch's refusals: what the backend would otherwise be handed. */
static kvs_status check_transfers(const struct kvs_comm *comm, const kvs_comm_transfer *t, size_t n,
                                  kvs_error *err) {
  if (n > 0 && t == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "exchange of %zu transfers needs their array (got NULL)", n);
  }
  for (size_t i = 0; i < n; i++) {
    if (t[i].peer < 0 || t[i].peer >= comm->size) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "exchange transfer %zu of %zu (a %s of %zu bytes): peer %d is outside "
                           "a group of %d ranks",
                           i, n, t[i].send ? "send" : "receive", t[i].bytes, t[i].peer, comm->size);
    }
    if (t[i].data == NULL && t[i].bytes > 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "exchange transfer %zu of %zu (a %s of %zu bytes %s rank %d) has NULL "
                           "data",
                           i, n, t[i].send ? "send" : "receive", t[i].bytes,
                           t[i].send ? "to" : "from", t[i].peer);
    }
  }
  return KVS_OK;
}

static kvs_status exchange(kvs_comm_t comm, const kvs_comm_transfer *transfers, size_t n, bool host,
                           kvs_error *err) {
  if (comm == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "exchange: comm is NULL");
  kvs_status status = check_live(comm, "exchange", err);
  if (status != KVS_OK) return status;
  if ((status = check_transfers(comm, transfers, n, err)) != KVS_OK) return status;
  if (comm->vtable->exchange == NULL) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "the '%s' communicator has no point-to-point exchange%s",
                         kvs_comm_backend(comm),
                         strcmp(kvs_comm_backend(comm), "callbacks") == 0
                             ? " (its kvs_comm_callbacks has no exchange)"
                             : "");
  }
  /* Zero-byte transfers move nothing and match nothing: the backend never
   * sees them. */
  size_t moving = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    moving += transfers[i].bytes > 0;
    bytes += transfers[i].bytes;
  }
  if (moving > comm->moving_cap) {
    kvs_comm_transfer *grown = realloc(comm->moving, moving * sizeof *grown);
    if (grown == NULL) {
      return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for an exchange of %zu transfers",
                           moving);
    }
    comm->moving = grown;
    comm->moving_cap = moving;
  }
  for (size_t i = 0, k = 0; i < n; i++) {
    if (transfers[i].bytes > 0) comm->moving[k++] = transfers[i];
  }
  comm->stats.exchanges++;
  comm->stats.exchange_bytes += bytes;
  if (moving == 0) return KVS_OK;
  kvs_error local;
  kvs_error_clear(&local);
  status =
      host && comm->vtable->exchange_host != NULL
          ? comm->vtable->exchange_host(comm->ctx, comm->moving, moving, comm->timeout_ms, &local)
          : comm->vtable->exchange(comm->ctx, comm->moving, moving, comm->timeout_ms, &local);
  return finish(comm, status, &local, err);
}

kvs_status kvs_comm_exchange(kvs_comm_t comm, const kvs_comm_transfer *transfers, size_t n,
                             kvs_error *err) {
  return exchange(comm, transfers, n, false, err);
}

kvs_status kvs_comm_exchange_host(kvs_comm_t comm, const kvs_comm_transfer *transfers, size_t n,
                                  kvs_error *err) {
  return exchange(comm, transfers, n, true, err);
}

void kvs_comm_abort(kvs_comm_t comm, int code) {
  if (comm == NULL) return;
  kvs_error local;
  kvs_error_set(&local, KVS_ERR_COMM, "rank %d aborted the group (code %d)", comm->rank, code);
  poison(comm, KVS_ERR_COMM, &local);
  if (comm->vtable->abort != NULL) comm->vtable->abort(comm->ctx, code);
}

kvs_status kvs_comm_agree(kvs_comm_t comm, kvs_comm_buffer *scratch, kvs_status local,
                          const kvs_error *local_err, int *failed_rank, kvs_error *err) {
  if (failed_rank != NULL) *failed_rank = -1;
  if (scratch == NULL || scratch->host == NULL || scratch->bytes < KVS_COMM_AGREE_BYTES) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "agreement needs a comm buffer of %zu bytes (got %zu)",
                         (size_t)KVS_COMM_AGREE_BYTES, scratch != NULL ? scratch->bytes : 0);
  }
  uint64_t *w = scratch->host;
  const uint64_t none = UINT64_MAX;
  w[0] = local == KVS_OK ? none : (uint64_t)kvs_comm_rank(comm);
  kvs_status status = kvs_comm_allreduce_u64(comm, scratch, 1, KVS_COMM_MIN, err);
  if (status != KVS_OK) return status;
  if (w[0] == none) return KVS_OK;
  int root = (int)w[0];
  char *text = (char *)(w + 1);
  if (kvs_comm_rank(comm) == root) {
    w[0] = (uint64_t)local;
    snprintf(text, KVS_ERROR_MESSAGE_MAX, "%s", local_err != NULL ? local_err->message : "");
  }
  status = kvs_comm_broadcast(comm, scratch, KVS_COMM_AGREE_BYTES, root, err);
  if (status != KVS_OK) return status;
  text[KVS_ERROR_MESSAGE_MAX - 1] = '\0';
  if (failed_rank != NULL) *failed_rank = root;
  kvs_status reason = (kvs_status)w[0];
  return kvs_error_set(err, reason != KVS_OK ? reason : KVS_ERR_INVALID_ARGUMENT, "%s", text);
}
