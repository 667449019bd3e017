/* The MPI backend (libkvshard-mpi.so.1): a kvs communicator on a
 * duplicate of an MPI communicator (shard/comm_mpi.h says how it
 * behaves), and MPI's start and end for programs that do not run MPI
 * themselves. */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/comm_mpi.h"
#include "shard/wait.h"

typedef struct mpi_ctx {
  MPI_Comm comm; /* our duplicate */
  int rank;
  int size;
} mpi_ctx;

static void mpi_message(int code, char *out, size_t cap) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
  snprintf(out, cap, "%s", len > 0 ? text : "unknown MPI error");
}

/* After a collective timed out, a roll call names the ranks that are gone:
 * every rank still running sends every other one word (point to point, a
 * tag of its own, on our duplicate communicator) and listens for theirs
 * for up to ROLL_CALL_MS. Survivors of one stuck collective time out
 * within moments of each other, so they hear each other; a dead or stopped
 * rank stays silent. The stuck collective is left as it is: the caller
 * aborts the group next. Writes "2" or "2, 5" into out, "" when every rank
 * answered. Allocates, but only on this failure path. */
#define ROLL_CALL_TAG 0x6b76
#define ROLL_CALL_MS 1000

static void roll_call(mpi_ctx *ctx, int timeout_ms, char *out, size_t cap) {
  out[0] = '\0';
  int n = ctx->size;
  MPI_Request *reqs = calloc((size_t)(2 * n), sizeof *reqs);
  uint64_t *in = calloc((size_t)n, sizeof *in);
  bool *heard = calloc((size_t)n, sizeof *heard);
  uint64_t word = (uint64_t)ctx->rank;
  if (reqs == NULL || in == NULL || heard == NULL) goto done;
  for (int r = 0; r < n; r++) {
    reqs[r] = reqs[n + r] = MPI_REQUEST_NULL;
    if (r == ctx->rank) continue;
    MPI_Irecv(&in[r], 1, MPI_UINT64_T, r, ROLL_CALL_TAG, ctx->comm, &reqs[r]);
    MPI_Isend(&word, 1, MPI_UINT64_T, r, ROLL_CALL_TAG, ctx->comm, &reqs[n + r]);
  }
  heard[ctx->rank] = true;
  kvs_wait w = kvs_wait_begin(timeout_ms < ROLL_CALL_MS ? timeout_ms : ROLL_CALL_MS);
  for (;;) {
    bool all = true;
    for (int r = 0; r < n; r++) {
      if (heard[r]) continue;
      int flag = 0;
      if (MPI_Test(&reqs[r], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
        heard[r] = true;
      } else {
        all = false;
      }
    }
    if (all || !kvs_wait_again(&w)) break;
  }
  size_t used = 0;
  for (int r = 0; r < n && used + 8 < cap; r++) {
    if (!heard[r]) used += (size_t)snprintf(out + used, cap - used, "%s%d", used ? ", " : "", r);
  }
  /* The sends and receives left pending go down with the group. */
done:
  free(reqs);
  free(in);
  free(heard);
}

/* Polls one request to completion or to the deadline. */
static kvs_status wait_request(mpi_ctx *ctx, MPI_Request *request, const char *what, int timeout_ms,
                               kvs_error *err) {
  kvs_wait w = kvs_wait_begin(timeout_ms);
  for (;;) {
    int flag = 0;
    int code = MPI_Test(request, &flag, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      mpi_message(code, text, sizeof text);
      return kvs_error_set(err, KVS_ERR_COMM, "mpi %s on rank %d of %d failed: %s", what, ctx->rank,
                           ctx->size, text);
    }
    if (flag) return KVS_OK;
    if (!kvs_wait_again(&w)) {
      char silent[160];
      roll_call(ctx, timeout_ms, silent, sizeof silent);
      if (silent[0] != '\0') {
        return kvs_error_set(err, KVS_ERR_TIMEOUT,
                             "mpi %s on rank %d of %d did not complete within %d ms: a peer rank "
                             "failed or stalled; rank(s) %s gave no sign of life in a roll call",
                             what, ctx->rank, ctx->size, timeout_ms, silent);
      }
      return kvs_error_set(err, KVS_ERR_TIMEOUT,
                           "mpi %s on rank %d of %d did not complete within %d ms: a peer rank "
                           "failed or stalled",
                           what, ctx->rank, ctx->size, timeout_ms);
    }
  }
}

static kvs_status start_failed(mpi_ctx *ctx, int code, const char *what, kvs_error *err) {
  char text[MPI_MAX_ERROR_STRING];
  mpi_message(code, text, sizeof text);
  return kvs_error_set(err, KVS_ERR_COMM, "mpi %s on rank %d of %d could not start: %s", what,
                       ctx->rank, ctx->size, text);
}

static kvs_status mpi_buffer_alloc(void *ctx, size_t bytes, kvs_comm_buffer *out, kvs_error *err) {
  (void)ctx;
  if (bytes > (size_t)INT32_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a %zu-byte comm buffer exceeds MPI's int count", bytes);
  }
  out->host = calloc(1, bytes);
  if (out->host == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %zu-byte comm buffer", bytes);
  }
  return KVS_OK;
}

static void mpi_buffer_free(void *ctx, kvs_comm_buffer *buffer) {
  (void)ctx;
  free(buffer->host);
}

static kvs_status mpi_broadcast(void *vctx, kvs_comm_buffer *buffer, size_t bytes, int root,
                                int timeout_ms, kvs_error *err) {
  mpi_ctx *ctx = vctx;
  MPI_Request request;
  int code = MPI_Ibcast(buffer->host, (int)bytes, MPI_BYTE, root, ctx->comm, &request);
  if (code != MPI_SUCCESS) return start_failed(ctx, code, "broadcast", err);
  char what[64];
  snprintf(what, sizeof what, "broadcast of %zu bytes from rank %d", bytes, root);
  return wait_request(ctx, &request, what, timeout_ms, err);
}

static kvs_status mpi_allreduce(void *vctx, kvs_comm_buffer *buffer, size_t count, kvs_comm_op op,
                                int timeout_ms, kvs_error *err) {
  mpi_ctx *ctx = vctx;
  MPI_Op mop = op == KVS_COMM_MIN ? MPI_MIN : op == KVS_COMM_MAX ? MPI_MAX : MPI_SUM;
  MPI_Request request;
  int code = MPI_Iallreduce(MPI_IN_PLACE, buffer->host, (int)count, MPI_UINT64_T, mop, ctx->comm,
                            &request);
  if (code != MPI_SUCCESS) return start_failed(ctx, code, "allreduce", err);
  char what[64];
  snprintf(what, sizeof what, "allreduce (%s) of %zu words", kvs_comm_op_name(op), count);
  return wait_request(ctx, &request, what, timeout_ms, err);
}

static kvs_status mpi_barrier(void *vctx, int timeout_ms, kvs_error *err) {
  mpi_ctx *ctx = vctx;
  MPI_Request request;
  int code = MPI_Ibarrier(ctx->comm, &request);
  if (code != MPI_SUCCESS) return start_failed(ctx, code, "barrier", err);
  return wait_request(ctx, &request, "barrier", timeout_ms, err);
}

static void mpi_abort(void *vctx, int code) {
  mpi_ctx *ctx = vctx;
  /* Takes every process of the job down: the only way MPI offers to stop
   * peers that are blocked waiting on this rank. */
  MPI_Abort(ctx->comm, code != 0 ? code : 1);
}

static void mpi_destroy(void *vctx) {
  mpi_ctx *ctx = vctx;
  if (ctx == NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && ctx->comm != MPI_COMM_NULL) MPI_Comm_free(&ctx->comm);
  free(ctx);
}

static const kvs_comm_vtable mpi_vtable = {
    .name = "mpi",
    .buffer_alloc = mpi_buffer_alloc,
    .buffer_free = mpi_buffer_free,
    .broadcast = mpi_broadcast,
    .allreduce_u64 = mpi_allreduce,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

/* Duplicates parent (a collective: nonblocking, so a peer that never
 * arrives is a timeout here too) with errors returned, not fatal. */
static kvs_status duplicate(mpi_ctx *ctx, MPI_Comm parent, int timeout_ms, kvs_error *err) {
  int code = MPI_Comm_rank(parent, &ctx->rank);
  if (code == MPI_SUCCESS) code = MPI_Comm_size(parent, &ctx->size);
  MPI_Request request = MPI_REQUEST_NULL;
  if (code == MPI_SUCCESS) code = MPI_Comm_idup(parent, &ctx->comm, &request);
  if (code == MPI_SUCCESS) {
    kvs_status status = wait_request(ctx, &request, "communicator duplication", timeout_ms, err);
    /* A pending duplicate cannot be freed safely: it is left with ctx. */
    if (status != KVS_OK) return status;
    code = MPI_Comm_set_errhandler(ctx->comm, MPI_ERRORS_RETURN);
  }
  if (code == MPI_SUCCESS) return KVS_OK;
  char text[MPI_MAX_ERROR_STRING];
  mpi_message(code, text, sizeof text);
  return kvs_error_set(err, KVS_ERR_COMM, "mpi backend setup failed: %s", text);
}

static kvs_status mpi_open(const void *handle, size_t handle_bytes, int timeout_ms,
                           const kvs_comm_vtable **vtable, void **out, int *rank, int *size,
                           kvs_error *err) {
  if (vtable == NULL || out == NULL || rank == NULL || size == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "mpi open needs its outputs");
  }
  if (handle != NULL && handle_bytes != sizeof(MPI_Comm)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "an MPI_Comm handle of %zu bytes; this MPI's is %zu (is it the same MPI "
                         "library the program runs?)",
                         handle_bytes, sizeof(MPI_Comm));
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "MPI is %s; initialise it (kvs_mpi_init or MPI_Init) before creating an "
                         "mpi communicator",
                         finalized ? "already finalized" : "not initialized");
  }
  MPI_Comm parent = MPI_COMM_WORLD;
  if (handle != NULL) memcpy(&parent, handle, sizeof parent);
  if (parent == MPI_COMM_NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "the MPI communicator is MPI_COMM_NULL");
  }
  mpi_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the mpi backend");
  ctx->comm = MPI_COMM_NULL;
  kvs_status status = duplicate(ctx, parent, timeout_ms, err);
  if (status != KVS_OK) {
    if (status != KVS_ERR_TIMEOUT) mpi_destroy(ctx);
    return status;
  }
  *vtable = &mpi_vtable;
  *out = ctx;
  *rank = ctx->rank;
  *size = ctx->size;
  return KVS_OK;
}

/* Whether this backend started MPI (and so ends it). */
static bool g_started;

static kvs_status mpi_init(int *world_rank, int *world_size, kvs_error *err) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return kvs_error_set(err, KVS_ERR_UNSUPPORTED, "MPI is already finalized");
  if (!initialized) {
    int provided = 0;
    int code = MPI_Init_thread(NULL, NULL, MPI_THREAD_SINGLE, &provided);
    if (code != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      mpi_message(code, text, sizeof text);
      return kvs_error_set(err, KVS_ERR_COMM, "MPI_Init_thread failed: %s", text);
    }
    g_started = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, world_size);
  return KVS_OK;
}

static kvs_status mpi_finalize(kvs_error *err) {
  (void)err;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_started && !finalized) MPI_Finalize();
  g_started = false;
  return KVS_OK;
}

__attribute__((visibility("default"))) const void *kvs_backend_mpi_v1(void);

const void *kvs_backend_mpi_v1(void) {
  static const kvs_mpi_table table = {
      .header = KVS_BACKEND_HEADER("mpi", kvs_mpi_table),
      .init = mpi_init,
      .finalize = mpi_finalize,
      .open = mpi_open,
  };
  return &table;
}
