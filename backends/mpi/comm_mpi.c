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

/* An exchange moves a transfer in pieces of at most this many bytes, each
 * one message of MPI_BYTE: MPI's counts are int, so a transfer above
 * INT_MAX bytes (a long request's KV rows) cannot be one message. The
 * k-th piece from A to B matches B's k-th (MPI keeps one sender's
 * messages of one tag in order), so pieces reassemble in place. A test
 * build sets it small to run the pieces' arithmetic on small buffers. */
#ifndef KVS_MPI_CHUNK_BYTES
#define KVS_MPI_CHUNK_BYTES ((size_t)1 << 30)
#endif
_Static_assert(KVS_MPI_CHUNK_BYTES > 0 && KVS_MPI_CHUNK_BYTES <= (size_t)INT32_MAX,
               "an exchange piece must be an int count of MPI_BYTE");

/* The exchange's tag, apart from the roll call's: on our duplicate, so no
 * message of the program's own can match it. */
#define EXCHANGE_TAG 0x6b77

/* Pieces an exchange tests at once, from its first pending one. */
#define TEST_WINDOW 256

/* One posted piece of an exchange. */
typedef struct piece {
  size_t transfer; /* its transfer's index in the batch */
  int bytes;
} piece;

typedef struct mpi_ctx {
  MPI_Comm comm; /* our duplicate */
  int rank;
  int size;
  /* An exchange's requests and their pieces, grown to the largest batch
   * seen (an exchange allocates only when it is larger than every one
   * before it). */
  MPI_Request *requests;
  piece *pieces;
  int *completed;
  MPI_Status *statuses;
  size_t capacity;
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

/* ---- point to point ---- */

static size_t pieces_of(size_t bytes) {
  return bytes / KVS_MPI_CHUNK_BYTES + (bytes % KVS_MPI_CHUNK_BYTES != 0);
}

static kvs_status make_room(mpi_ctx *ctx, size_t n, kvs_error *err) {
  if (n <= ctx->capacity) return KVS_OK;
  MPI_Request *requests = realloc(ctx->requests, n * sizeof *requests);
  if (requests != NULL) ctx->requests = requests;
  piece *pieces = realloc(ctx->pieces, n * sizeof *pieces);
  if (pieces != NULL) ctx->pieces = pieces;
  int *completed = realloc(ctx->completed, n * sizeof *completed);
  if (completed != NULL) ctx->completed = completed;
  MPI_Status *statuses = realloc(ctx->statuses, n * sizeof *statuses);
  if (statuses != NULL) ctx->statuses = statuses;
  if (requests == NULL || pieces == NULL || completed == NULL || statuses == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY,
                         "mpi exchange on rank %d: no memory for %zu requests", ctx->rank, n);
  }
  ctx->capacity = n;
  return KVS_OK;
}

/* The transfers with a piece still pending (requests[i] not yet
 * MPI_REQUEST_NULL), described for a message. */
static void describe_pending(const mpi_ctx *ctx, const kvs_comm_transfer *t, int n_requests,
                             char *out, size_t cap) {
  kvs_comm_transfer pending[8];
  size_t k = 0, more = 0, last = (size_t)-1;
  for (int i = 0; i < n_requests; i++) {
    if (ctx->requests[i] == MPI_REQUEST_NULL || ctx->pieces[i].transfer == last) continue;
    last = ctx->pieces[i].transfer;
    if (k < sizeof pending / sizeof *pending) {
      pending[k++] = t[last];
    } else {
      more++;
    }
  }
  char list[KVS_ERROR_MESSAGE_MAX / 2];
  kvs_comm_transfers_describe(pending, k, list, sizeof list);
  snprintf(out, cap, "%s%s", list, more > 0 ? ", and more" : "");
}

/* After a failure: cancels the pieces still pending and frees their
 * requests, so nothing is left for MPI to match into this batch's memory
 * once it is cancelled (a receive not yet matched is; a send, or a
 * receive already matched, may still complete: kvshard.h says so). */
static void cancel_pending(mpi_ctx *ctx, int n_requests) {
  for (int i = 0; i < n_requests; i++) {
    if (ctx->requests[i] != MPI_REQUEST_NULL) MPI_Cancel(&ctx->requests[i]);
  }
  /* A cancelled receive completes at once; give the rest a moment. */
  kvs_wait w = kvs_wait_begin(100);
  for (;;) {
    int flag = 0;
    if (MPI_Testall(n_requests, ctx->requests, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS || flag ||
        !kvs_wait_again(&w)) {
      break;
    }
  }
  for (int i = 0; i < n_requests; i++) {
    if (ctx->requests[i] != MPI_REQUEST_NULL) MPI_Request_free(&ctx->requests[i]);
  }
}

/* A failed piece (or a receive that got another size than its transfer's
 * piece: the peer's matching send differs in size), named with its
 * transfer. */
static kvs_status piece_failed(mpi_ctx *ctx, const kvs_comm_transfer *t, int at, int code, int got,
                               kvs_error *err) {
  char one[96];
  kvs_comm_transfer_describe(&t[ctx->pieces[at].transfer], one, sizeof one);
  if (code != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    mpi_message(code, text, sizeof text);
    return kvs_error_set(err, KVS_ERR_COMM,
                         "mpi exchange on rank %d of %d failed in its %s (transfer %zu): %s%s",
                         ctx->rank, ctx->size, one, ctx->pieces[at].transfer, text,
                         code == MPI_ERR_TRUNCATE
                             ? " (the peer's matching send is larger: matched transfers must be "
                               "the same size)"
                             : "");
  }
  return kvs_error_set(err, KVS_ERR_COMM,
                       "mpi exchange on rank %d of %d: its %s (transfer %zu) got a piece of %d "
                       "bytes where it expected %d: the peer's matching send differs in size",
                       ctx->rank, ctx->size, one, ctx->pieces[at].transfer, got,
                       ctx->pieces[at].bytes);
}

/* Every piece posted (Irecv and Isend, nonblocking: no order of sends and
 * receives between two ranks can deadlock, a send to this rank matches its
 * receive here), then one wait over all of them against the deadline. */
static kvs_status mpi_exchange(void *vctx, const kvs_comm_transfer *t, size_t n, int timeout_ms,
                               kvs_error *err) {
  mpi_ctx *ctx = vctx;
  size_t total = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    total += pieces_of(t[i].bytes);
    bytes += t[i].bytes;
  }
  if (total > (size_t)INT32_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "mpi exchange of %zu pieces: MPI waits on at most %d requests at once",
                         total, INT32_MAX);
  }
  kvs_status status = make_room(ctx, total, err);
  if (status != KVS_OK) return status;
  int posted = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t at = 0; at < t[i].bytes; at += KVS_MPI_CHUNK_BYTES) {
      size_t left = t[i].bytes - at;
      int len = (int)(left < KVS_MPI_CHUNK_BYTES ? left : KVS_MPI_CHUNK_BYTES);
      char *p = (char *)t[i].data + at;
      int code = t[i].send ? MPI_Isend(p, len, MPI_BYTE, t[i].peer, EXCHANGE_TAG, ctx->comm,
                                       &ctx->requests[posted])
                           : MPI_Irecv(p, len, MPI_BYTE, t[i].peer, EXCHANGE_TAG, ctx->comm,
                                       &ctx->requests[posted]);
      if (code != MPI_SUCCESS) {
        cancel_pending(ctx, posted);
        char one[96], what[128];
        kvs_comm_transfer_describe(&t[i], one, sizeof one);
        snprintf(what, sizeof what, "exchange's %s", one);
        return start_failed(ctx, code, what, err);
      }
      ctx->pieces[posted++] = (piece){i, len};
    }
  }
  kvs_wait w = kvs_wait_begin_bytes(timeout_ms, bytes);
  int left = posted, first = 0;
  while (left > 0) {
    /* Tests a window from the first piece still pending: MPI_Testsome
     * scans every request it is given, so testing all of a batch of many
     * pieces costs a poll the batch's size and the wait grows as its
     * square (32K pieces: seconds). Pieces past the window progress all
     * the same (MPI's progress runs on any test) and are seen as the
     * window reaches them. */
    while (first < posted && ctx->requests[first] == MPI_REQUEST_NULL) first++;
    int span = posted - first < TEST_WINDOW ? posted - first : TEST_WINDOW;
    int done = 0;
    int code = MPI_Testsome(span, ctx->requests + first, &done, ctx->completed, ctx->statuses);
    if (done != MPI_UNDEFINED) {
      for (int j = 0; j < done; j++) ctx->completed[j] += first;
    }
    if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
      char text[MPI_MAX_ERROR_STRING], list[KVS_ERROR_MESSAGE_MAX / 2];
      mpi_message(code, text, sizeof text);
      kvs_comm_transfers_describe(t, n, list, sizeof list);
      cancel_pending(ctx, posted);
      return kvs_error_set(err, KVS_ERR_COMM, "mpi exchange on rank %d of %d (%s) failed: %s",
                           ctx->rank, ctx->size, list, text);
    }
    if (done == MPI_UNDEFINED) break; /* none active: all complete */
    for (int j = 0; j < done; j++) {
      int at = ctx->completed[j];
      const MPI_Status *st = &ctx->statuses[j];
      int piece_code = code == MPI_ERR_IN_STATUS ? st->MPI_ERROR : MPI_SUCCESS;
      int got = ctx->pieces[at].bytes;
      if (piece_code == MPI_SUCCESS && !t[ctx->pieces[at].transfer].send) {
        MPI_Get_count(st, MPI_BYTE, &got);
      }
      if (piece_code != MPI_SUCCESS || got != ctx->pieces[at].bytes) {
        status = piece_failed(ctx, t, at, piece_code, got, err);
        cancel_pending(ctx, posted);
        return status;
      }
    }
    left -= done;
    if (left > 0 && done == 0 && !kvs_wait_again(&w)) {
      char pending[KVS_ERROR_MESSAGE_MAX / 2 + 16];
      describe_pending(ctx, t, posted, pending, sizeof pending);
      kvs_error_set(err, KVS_ERR_TIMEOUT,
                    "mpi exchange on rank %d of %d did not complete within %d ms, still pending: "
                    "%s: a peer rank failed or stalled (its pending requests were cancelled)",
                    ctx->rank, ctx->size, timeout_ms, pending);
      cancel_pending(ctx, posted);
      return KVS_ERR_TIMEOUT;
    }
  }
  return KVS_OK;
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
  free(ctx->requests);
  free(ctx->pieces);
  free(ctx->completed);
  free(ctx->statuses);
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
    .exchange = mpi_exchange,
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
      .vtable_bytes = sizeof(kvs_comm_vtable),
  };
  return &table;
}
