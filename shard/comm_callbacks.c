#include "shard/comm_callbacks.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"

/* kvshard.h's reduction numbers are the vtable's: the callbacks get the op
 * the wrapper checked, unchanged. */
_Static_assert(KVS_COMM_REDUCE_MIN == (int)KVS_COMM_MIN &&
                   KVS_COMM_REDUCE_MAX == (int)KVS_COMM_MAX &&
                   KVS_COMM_REDUCE_SUM == (int)KVS_COMM_SUM,
               "kvshard.h's KVS_COMM_REDUCE_* must equal kvs_comm_op");

typedef struct callbacks_ctx {
  kvs_comm_callbacks cb;
  int rank;
  int size;
  /* Whether destroy hands user back to cb.destroy: only once create
   * succeeded, so a failed create leaves the caller's user untouched. */
  bool owns_user;
} callbacks_ctx;

/* A callback's return as the wrapper takes it. A timeout stays one (the
 * node says "timed out" for it); any other failure, including
 * KVS_ERR_INVALID_ARGUMENT (which the wrapper would not poison on, yet the
 * peers may be mid-collective) and values that are no kvs_status, is
 * KVS_ERR_COMM naming the callback and what it returned. */
static kvs_status outcome(const callbacks_ctx *c, const char *what, kvs_status returned,
                          kvs_error *got, kvs_error *err) {
  if (returned == KVS_OK) return KVS_OK;
  got->message[KVS_ERROR_MESSAGE_MAX - 1] = '\0'; /* the callback's, maybe unterminated */
  const char *text = got->message[0] != '\0' ? got->message : "(no message)";
  char returned_text[64];
  const char *name = kvs_status_name(returned);
  if (strcmp(name, "KVS_ERR_UNKNOWN") == 0) {
    snprintf(returned_text, sizeof returned_text, "%d, which is no kvs_status", (int)returned);
  } else {
    snprintf(returned_text, sizeof returned_text, "%s", name);
  }
  kvs_status status = returned == KVS_ERR_TIMEOUT ? KVS_ERR_TIMEOUT : KVS_ERR_COMM;
  return kvs_error_set(err, status,
                       "callbacks %s on rank %d of %d failed (the callback returned %s): %s", what,
                       c->rank, c->size, returned_text, text);
}

static kvs_status cb_broadcast(void *ctx, kvs_comm_buffer *buffer, size_t bytes, int root,
                               int timeout_ms, kvs_error *err) {
  callbacks_ctx *c = ctx;
  kvs_error got;
  kvs_error_clear(&got);
  kvs_status returned = c->cb.broadcast(c->cb.user, buffer->host, bytes, root, timeout_ms, &got);
  char what[80];
  snprintf(what, sizeof what, "broadcast (%zu bytes, root %d)", bytes, root);
  return outcome(c, what, returned, &got, err);
}

static kvs_status cb_allreduce(void *ctx, kvs_comm_buffer *buffer, size_t count, kvs_comm_op op,
                               int timeout_ms, kvs_error *err) {
  callbacks_ctx *c = ctx;
  kvs_error got;
  kvs_error_clear(&got);
  kvs_status returned =
      c->cb.allreduce_u64(c->cb.user, buffer->host, count, (int)op, timeout_ms, &got);
  char what[80];
  snprintf(what, sizeof what, "allreduce_u64 (%s, %zu words)", kvs_comm_op_name(op), count);
  return outcome(c, what, returned, &got, err);
}

static kvs_status cb_barrier(void *ctx, int timeout_ms, kvs_error *err) {
  callbacks_ctx *c = ctx;
  kvs_error got;
  kvs_error_clear(&got);
  kvs_status returned = c->cb.barrier(c->cb.user, timeout_ms, &got);
  return outcome(c, "barrier", returned, &got, err);
}

static kvs_status cb_exchange(void *ctx, const kvs_comm_transfer *t, size_t n, int timeout_ms,
                              kvs_error *err) {
  callbacks_ctx *c = ctx;
  kvs_error got;
  kvs_error_clear(&got);
  kvs_status returned = c->cb.exchange(c->cb.user, t, n, timeout_ms, &got);
  if (returned == KVS_OK) return KVS_OK;
  char list[160], what[224];
  kvs_comm_transfers_describe(t, n, list, sizeof list);
  snprintf(what, sizeof what, "exchange (%s)", list);
  return outcome(c, what, returned, &got, err);
}

static void cb_destroy(void *ctx) {
  callbacks_ctx *c = ctx;
  if (c == NULL) return;
  if (c->owns_user && c->cb.destroy != NULL) c->cb.destroy(c->cb.user);
  free(c);
}

static const kvs_comm_vtable callbacks_vtable = {
    .name = "callbacks",
    .buffer_alloc = kvs_comm_host_buffer_alloc,
    .buffer_free = kvs_comm_host_buffer_free,
    .broadcast = cb_broadcast,
    .allreduce_u64 = cb_allreduce,
    .barrier = cb_barrier,
    /* no abort: the engine's group is the engine's to tear down */
    .destroy = cb_destroy,
};

/* The same with point to point, for callbacks that give an exchange: a
 * communicator without one has no exchange slot, so kvs_comm_exchange is
 * the wrapper's KVS_ERR_UNSUPPORTED and poisons nothing. */
static const kvs_comm_vtable callbacks_p2p_vtable = {
    .name = "callbacks",
    .buffer_alloc = kvs_comm_host_buffer_alloc,
    .buffer_free = kvs_comm_host_buffer_free,
    .broadcast = cb_broadcast,
    .allreduce_u64 = cb_allreduce,
    .barrier = cb_barrier,
    .destroy = cb_destroy,
    .exchange = cb_exchange,
};

/* The first required callback left NULL, or NULL when all are set. */
static const char *missing_callback(const kvs_comm_callbacks *cb) {
  if (cb->broadcast == NULL) return "broadcast";
  if (cb->allreduce_u64 == NULL) return "allreduce_u64";
  if (cb->barrier == NULL) return "barrier";
  return NULL;
}

kvs_status kvs_comm_callbacks_create(const kvs_comm_callbacks *callbacks, int rank, int size,
                                     int timeout_ms, kvs_comm_t *out, kvs_error *err) {
  if (callbacks == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_comm_callbacks_create: callbacks is NULL");
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_comm_callbacks_create: out is NULL");
  }
  /* An older caller's shorter struct gets NULL for what it lacks; a newer
   * caller's longer one is refused (core/options.h). */
  const kvs_comm_callbacks none = {sizeof none, NULL, NULL, NULL, NULL, NULL, NULL};
  if (callbacks->size < sizeof callbacks->size || callbacks->size > sizeof none) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_comm_callbacks.size is %zu, but this build's struct is %zu bytes "
                         "(an older caller's may be shorter): set it to sizeof(kvs_comm_callbacks)",
                         callbacks->size, sizeof none);
  }
  kvs_comm_callbacks cb;
  kvs_status status =
      kvs_options_adopt(callbacks, &none, sizeof none, "sizeof(kvs_comm_callbacks)", &cb, err);
  if (status != KVS_OK) return status;
  const char *missing = missing_callback(&cb);
  if (missing != NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_comm_callbacks.%s is NULL: a callback communicator needs broadcast, "
                         "allreduce_u64 and barrier",
                         missing);
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_comm_callbacks_create: rank %d is outside a group of %d ranks (size "
                         ">= 1, rank in [0, size))",
                         rank, size);
  }
  if ((status = kvs_comm_check_timeout(timeout_ms, err)) != KVS_OK) return status;
  callbacks_ctx *c = calloc(1, sizeof *c);
  if (c == NULL)
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a callback communicator");
  c->cb = cb;
  c->rank = rank;
  c->size = size;
  /* kvs_comm_create frees c if it fails; owns_user is still false then. */
  kvs_comm_t comm = NULL;
  status = kvs_comm_create(cb.exchange != NULL ? &callbacks_p2p_vtable : &callbacks_vtable, c, rank,
                           size, timeout_ms, &comm, err);
  if (status != KVS_OK) return status;
  c->owns_user = true;
  *out = comm;
  return KVS_OK;
}
