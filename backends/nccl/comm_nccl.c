/* The NCCL backend (libkvshard-nccl.so.1): a kvs communicator on an NCCL
 * communicator of its own, with device buffers and a stream of its own.
 *
 * The communicator is created from a unique id or split from an engine's
 * (ncclCommSplit), always nonblocking (ncclConfig_t.blocking = 0), and its
 * initialisation is polled against its own deadline. Every collective runs
 * with the communicator's device current, from whichever thread makes it,
 * and then puts the thread's context back as it was (none, for a thread
 * that never chose a device: no context is created on GPU 0 behind the
 * caller's back). It stages host -> device on the stream, runs on the
 * device, stages back, and then polls its own stream and
 * ncclCommGetAsyncError until it is done, NCCL reports an error, or the
 * deadline passes. An exchange (point to point) runs the same way on the
 * engine's device memory: one group of ncclSend and ncclRecv, then the
 * same wait. On any failure (NCCL's, a CUDA call's, the deadline)
 * the communicator is aborted, so peers in a collective with this rank get
 * an error instead of waiting out their deadline. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "plan/node_overhead.h"
#include "shard/comm_nccl.h"
#include "shard/wait.h"

typedef struct nccl_ctx {
  ncclComm_t comm;
  cudaStream_t stream;
  /* Recorded on a consumer's stream by the reads_done entry (kvs_comm_reads_done); the
   * communicator's stream waits for it before the next collective writes
   * a buffer. */
  cudaEvent_t reads_done;
  bool own_comm; /* false until the communicator exists */
  bool aborted;
  int device;
  int rank;
  int size;
  int timeout_ms;
  kvs_comm_buffer barrier_word; /* one device word for barriers */
  /* exchange_host's staging: device memory as large as the largest host
   * exchange so far, and its transfers, kept for the communicator's life. */
  unsigned char *stage;
  size_t stage_bytes;
  kvs_comm_transfer *staged;
  size_t staged_cap;
} nccl_ctx;

/* Appends text to err's message (room permitting). */
static void append(kvs_error *err, const char *text) {
  if (err == NULL) return;
  size_t used = strlen(err->message);
  if (used + 1 < sizeof err->message) {
    snprintf(err->message + used, sizeof err->message - used, "%s", text);
  }
}

/* After a failed collective: the communicator is aborted, so nothing
 * queued on it runs and peers in a collective with this rank get an error
 * instead of waiting out their deadline. */
static void stop(nccl_ctx *ctx, kvs_error *err) {
  if (ctx->comm == NULL || ctx->aborted || !ctx->own_comm) return;
  ctx->aborted = true;
  ncclCommAbort(ctx->comm);
  append(err, "; the communicator was aborted");
}

/* A CUDA failure in a collective, named for this rank and device
 * (kvs_cuda_status: the one mapping of CUDA errors). The collective may be
 * half queued, so the communicator is stopped as for any other failure. */
static kvs_status cuda_failed(nccl_ctx *ctx, cudaError_t code, const char *what, kvs_error *err) {
  char call[160];
  snprintf(call, sizeof call, "nccl backend %s on rank %d (device %d)", what, ctx->rank,
           ctx->device);
  kvs_status status = kvs_cuda_status(code, call, err);
  stop(ctx, err);
  return status;
}

#define CUDA_CHECK(ctx, call, what, err)                                                         \
  do {                                                                                           \
    cudaError_t cuda_check_rc_ = (call);                                                         \
    if (cuda_check_rc_ != cudaSuccess) return cuda_failed((ctx), cuda_check_rc_, (what), (err)); \
  } while (0)

static kvs_status nccl_failed(nccl_ctx *ctx, ncclResult_t code, const char *what, kvs_error *err) {
  const char *last = ctx->comm != NULL && !ctx->aborted ? ncclGetLastError(ctx->comm) : "";
  kvs_error_set(err, KVS_ERR_COMM, "nccl %s on rank %d of %d failed: %s%s%s", what, ctx->rank,
                ctx->size, ncclGetErrorString(code), last != NULL && last[0] ? ": " : "",
                last != NULL ? last : "");
  stop(ctx, err);
  return KVS_ERR_COMM;
}

static kvs_status timed_out(nccl_ctx *ctx, const char *what, const char *how, kvs_error *err) {
  kvs_error_set(err, KVS_ERR_TIMEOUT,
                "nccl %s on rank %d of %d %s %d ms: a peer rank failed or stalled", what, ctx->rank,
                ctx->size, how, ctx->timeout_ms);
  stop(ctx, err);
  return KVS_ERR_TIMEOUT;
}

/* A nonblocking communicator may answer ncclInProgress; the call is done
 * when the async error leaves that state. */
static kvs_status settle(nccl_ctx *ctx, ncclResult_t code, const char *what, kvs_wait *w,
                         kvs_error *err) {
  while (code == ncclInProgress) {
    if (!kvs_wait_again(w)) return timed_out(ctx, what, "was still in progress after", err);
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(ctx->comm, &state);
    code = rc != ncclSuccess ? rc : state;
  }
  return code == ncclSuccess ? KVS_OK : nccl_failed(ctx, code, what, err);
}

/* Waits for everything queued on the stream, watching NCCL for a remote
 * failure and the clock for the deadline. NCCL is asked once more after
 * the stream drained: a collective that a peer's abort ended completes
 * without its data, and only the async error says so. */
static kvs_status wait_stream(nccl_ctx *ctx, const char *what, kvs_wait *w, kvs_error *err) {
  for (;;) {
    cudaError_t q = cudaStreamQuery(ctx->stream);
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(ctx->comm, &state);
    if (rc == ncclSuccess && state != ncclSuccess && state != ncclInProgress) rc = state;
    if (rc != ncclSuccess) return nccl_failed(ctx, rc, what, err);
    if (q == cudaSuccess) return KVS_OK;
    if (q != cudaErrorNotReady) return cuda_failed(ctx, q, what, err);
    if (!kvs_wait_again(w)) return timed_out(ctx, what, "did not complete within", err);
  }
}

/* Every entry point runs with the communicator's device current: a call
 * from any thread allocates and queues on the right GPU, and the thread's
 * own context is put back as it was (none, if it had none). */
static kvs_status enter(const nccl_ctx *ctx, kvs_cuda_device_scope *scope, kvs_error *err) {
  return kvs_cuda_device_enter(ctx->device, scope, err);
}

static kvs_status nccl_buffer_alloc(void *vctx, size_t bytes, kvs_comm_buffer *out,
                                    kvs_error *err) {
  nccl_ctx *ctx = vctx;
  kvs_cuda_device_scope scope;
  kvs_status status = enter(ctx, &scope, err);
  if (status != KVS_OK) return status;
  void *device = NULL, *host = NULL;
  char what[96];
  snprintf(what, sizeof what, "cudaMalloc of a %zu-byte buffer on rank %d (device %d)", bytes,
           ctx->rank, ctx->device);
  status = kvs_cuda_status(cudaMalloc(&device, bytes), what, err);
  if (status == KVS_OK) {
    snprintf(what, sizeof what, "cudaMallocHost of a %zu-byte buffer on rank %d", bytes, ctx->rank);
    status = kvs_cuda_status(cudaMallocHost(&host, bytes), what, err); /* pinned: async copies */
  }
  if (status != KVS_OK) {
    if (device != NULL) (void)cudaFree(device);
  } else {
    memset(host, 0, bytes);
    out->host = host;
    out->device = device;
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

static void nccl_buffer_free(void *vctx, kvs_comm_buffer *buffer) {
  nccl_ctx *ctx = vctx;
  if (buffer->device == NULL && buffer->host == NULL) return;
  kvs_cuda_device_scope scope;
  bool entered = enter(ctx, &scope, NULL) == KVS_OK;
  if (buffer->device != NULL) (void)cudaFree(buffer->device);
  if (buffer->host != NULL) (void)cudaFreeHost(buffer->host);
  if (entered) kvs_cuda_device_leave(&scope);
}

static kvs_status broadcast_on_device(nccl_ctx *ctx, kvs_comm_buffer *buffer, size_t bytes,
                                      int root, kvs_wait *w, kvs_error *err) {
  if (ctx->rank == root) {
    CUDA_CHECK(
        ctx,
        cudaMemcpyAsync(buffer->device, buffer->host, bytes, cudaMemcpyHostToDevice, ctx->stream),
        "broadcast staging", err);
  }
  kvs_status status = settle(
      ctx,
      ncclBroadcast(buffer->device, buffer->device, bytes, ncclUint8, root, ctx->comm, ctx->stream),
      "broadcast", w, err);
  if (status != KVS_OK) return status;
  if (ctx->rank != root) {
    CUDA_CHECK(
        ctx,
        cudaMemcpyAsync(buffer->host, buffer->device, bytes, cudaMemcpyDeviceToHost, ctx->stream),
        "broadcast readback", err);
  }
  return wait_stream(ctx, "broadcast", w, err);
}

static kvs_status allreduce_on_device(nccl_ctx *ctx, kvs_comm_buffer *buffer, size_t count,
                                      kvs_comm_op op, kvs_wait *w, kvs_error *err) {
  size_t bytes = count * sizeof(uint64_t);
  ncclRedOp_t nop = op == KVS_COMM_MIN ? ncclMin : op == KVS_COMM_MAX ? ncclMax : ncclSum;
  CUDA_CHECK(
      ctx,
      cudaMemcpyAsync(buffer->device, buffer->host, bytes, cudaMemcpyHostToDevice, ctx->stream),
      "allreduce staging", err);
  kvs_status status = settle(
      ctx,
      ncclAllReduce(buffer->device, buffer->device, count, ncclUint64, nop, ctx->comm, ctx->stream),
      "allreduce", w, err);
  if (status != KVS_OK) return status;
  CUDA_CHECK(
      ctx,
      cudaMemcpyAsync(buffer->host, buffer->device, bytes, cudaMemcpyDeviceToHost, ctx->stream),
      "allreduce readback", err);
  return wait_stream(ctx, "allreduce", w, err);
}

/* One collective as the vtable asks for it: a broadcast of `n` bytes from
 * root, or an allreduce of `n` words. */
typedef struct nccl_call {
  bool reduce;
  kvs_comm_buffer *buffer;
  size_t n;
  int root;
  kvs_comm_op op;
} nccl_call;

/* Every collective runs with the communicator's device current and one
 * deadline over its queueing and its wait. */
static kvs_status run_call(void *vctx, const nccl_call *call, int timeout_ms, kvs_error *err) {
  nccl_ctx *ctx = vctx;
  ctx->timeout_ms = timeout_ms;
  kvs_wait w = kvs_wait_begin(timeout_ms);
  kvs_cuda_device_scope scope;
  kvs_status status = enter(ctx, &scope, err);
  if (status != KVS_OK) return status;
  status = call->reduce ? allreduce_on_device(ctx, call->buffer, call->n, call->op, &w, err)
                        : broadcast_on_device(ctx, call->buffer, call->n, call->root, &w, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

static kvs_status nccl_broadcast(void *vctx, kvs_comm_buffer *buffer, size_t bytes, int root,
                                 int timeout_ms, kvs_error *err) {
  const nccl_call call = {.reduce = false, .buffer = buffer, .n = bytes, .root = root};
  return run_call(vctx, &call, timeout_ms, err);
}

static kvs_status nccl_allreduce(void *vctx, kvs_comm_buffer *buffer, size_t count, kvs_comm_op op,
                                 int timeout_ms, kvs_error *err) {
  const nccl_call call = {.reduce = true, .buffer = buffer, .n = count, .op = op};
  return run_call(vctx, &call, timeout_ms, err);
}

/* NCCL has no barrier: a one-word allreduce is one. */
static kvs_status nccl_barrier(void *vctx, int timeout_ms, kvs_error *err) {
  nccl_ctx *ctx = vctx;
  return nccl_allreduce(ctx, &ctx->barrier_word, 1, KVS_COMM_SUM, timeout_ms, err);
}

/* ---- point to point ---- */

/* The batch as one group on the communicator's stream: ncclGroupStart,
 * a ncclSend or ncclRecv per transfer (bytes as ncclUint8: NCCL's counts
 * are size_t, so no piece is needed), ncclGroupEnd. In one group NCCL
 * runs the sends and receives together, so none waits for another queued
 * behind it: both directions between two ranks, and a send to this rank
 * with its own receive, complete (outside a group a send to oneself waits
 * for a receive queued after it, forever). Then, as for a collective,
 * the stream is polled with NCCL's async error against one deadline, so
 * the call returns once the bytes moved, and any failure aborts the
 * communicator. */
static kvs_status exchange_on_device(nccl_ctx *ctx, const kvs_comm_transfer *t, size_t n,
                                     const char *what, kvs_wait *w, kvs_error *err) {
  ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess) return nccl_failed(ctx, rc, what, err);
  ncclResult_t queued = ncclSuccess;
  for (size_t i = 0; i < n && (queued == ncclSuccess || queued == ncclInProgress); i++) {
    queued = t[i].send
                 ? ncclSend(t[i].data, t[i].bytes, ncclUint8, t[i].peer, ctx->comm, ctx->stream)
                 : ncclRecv(t[i].data, t[i].bytes, ncclUint8, t[i].peer, ctx->comm, ctx->stream);
  }
  /* The group is closed whatever happened inside it. */
  rc = ncclGroupEnd();
  if (queued != ncclSuccess && queued != ncclInProgress) return nccl_failed(ctx, queued, what, err);
  kvs_status status = settle(ctx, rc, what, w, err);
  if (status != KVS_OK) return status;
  return wait_stream(ctx, what, w, err);
}

/* Host messages through the device: each transfer gets a 256-byte aligned
 * piece of the staging; the sends are copied in on the stream before the
 * group, the receives copied out after it completed (the stream polled
 * against the deadline first, so a peer that never sends is a timeout,
 * not a copy that blocks). With the device current. */
#define STAGE_ALIGN 256

/* A message's piece of the staging: its bytes rounded up to STAGE_ALIGN
 * (0 when that overflows). */
static size_t stage_piece(size_t bytes) {
  return bytes > SIZE_MAX - (STAGE_ALIGN - 1)
             ? 0
             : (bytes + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
}

static kvs_status exchange_staged(nccl_ctx *ctx, const kvs_comm_transfer *t, size_t n,
                                  const char *what, kvs_wait *w, kvs_error *err) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    size_t piece = stage_piece(t[i].bytes);
    if (piece < t[i].bytes || total + piece < total) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "%s: the staging overflows", what);
    }
    total += piece;
  }
  if (n > ctx->staged_cap) {
    kvs_comm_transfer *grown = realloc(ctx->staged, n * sizeof *grown);
    if (grown == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "%s: no memory", what);
    ctx->staged = grown;
    ctx->staged_cap = n;
  }
  kvs_status status = KVS_OK;
  if (total > ctx->stage_bytes) {
    /* Every earlier call waited for its stream: nothing reads the old one. */
    (void)cudaFree(ctx->stage);
    ctx->stage = NULL;
    ctx->stage_bytes = 0;
    char grow[96];
    snprintf(grow, sizeof grow, "cudaMalloc of %zu bytes of staging for host messages", total);
    status = kvs_cuda_status(cudaMalloc((void **)&ctx->stage, total), grow, err);
    if (status == KVS_OK) ctx->stage_bytes = total;
  }
  size_t at = 0;
  for (size_t i = 0; i < n && status == KVS_OK; i++) {
    ctx->staged[i] = t[i];
    ctx->staged[i].data = ctx->stage + at;
    at += stage_piece(t[i].bytes);
    if (t[i].send) {
      status = kvs_cuda_status(cudaMemcpyAsync(ctx->staged[i].data, t[i].data, t[i].bytes,
                                               cudaMemcpyHostToDevice, ctx->stream),
                               "cudaMemcpyAsync of a host message to its staging", err);
    }
  }
  if (status == KVS_OK) status = exchange_on_device(ctx, ctx->staged, n, what, w, err);
  for (size_t i = 0; i < n && status == KVS_OK; i++) {
    if (!t[i].send) {
      status = kvs_cuda_status(cudaMemcpyAsync(t[i].data, ctx->staged[i].data, t[i].bytes,
                                               cudaMemcpyDeviceToHost, ctx->stream),
                               "cudaMemcpyAsync of a received host message", err);
    }
  }
  if (status == KVS_OK) status = wait_stream(ctx, what, w, err);
  /* A failed copy too: no peer waits on this rank's half of the group. */
  if (status != KVS_OK && !ctx->aborted) stop(ctx, NULL);
  return status;
}

/* The exchange slot (device memory as it is) and exchange_host (host
 * memory, staged). */
static kvs_status exchange(void *vctx, const kvs_comm_transfer *t, size_t n, int timeout_ms,
                           bool host, kvs_error *err) {
  nccl_ctx *ctx = vctx;
  ctx->timeout_ms = timeout_ms;
  kvs_wait w = kvs_wait_begin(timeout_ms);
  char list[KVS_ERROR_MESSAGE_MAX / 2], what[KVS_ERROR_MESSAGE_MAX / 2 + 48];
  kvs_comm_transfers_describe(t, n, list, sizeof list);
  snprintf(what, sizeof what, "exchange%s (%s)", host ? " of host memory" : "", list);
  kvs_cuda_device_scope scope;
  kvs_status status = enter(ctx, &scope, err);
  if (status != KVS_OK) return status;
  status = host ? exchange_staged(ctx, t, n, what, &w, err)
                : exchange_on_device(ctx, t, n, what, &w, err);
  kvs_cuda_device_leave(&scope);
  return status;
}

static kvs_status nccl_exchange(void *vctx, const kvs_comm_transfer *t, size_t n, int timeout_ms,
                                kvs_error *err) {
  return exchange(vctx, t, n, timeout_ms, false, err);
}

static kvs_status nccl_exchange_host(void *vctx, const kvs_comm_transfer *t, size_t n,
                                     int timeout_ms, kvs_error *err) {
  return exchange(vctx, t, n, timeout_ms, true, err);
}

/* kvs_comm_abort: aborts the communicator (its own, also when split from
 * an engine's: the engine's parent is untouched). */
static void nccl_abort(void *vctx, int code) {
  (void)code;
  nccl_ctx *ctx = vctx;
  kvs_cuda_device_scope scope;
  bool entered = enter(ctx, &scope, NULL) == KVS_OK;
  stop(ctx, NULL);
  if (entered) kvs_cuda_device_leave(&scope);
}

/* Finalizes (flushing what was queued, bounded like every other wait)
 * and destroys a communicator this backend created and did not abort;
 * abandons it for an abort when a peer never finishes. */
static void close_comm(nccl_ctx *ctx) {
  if (!ctx->own_comm || ctx->comm == NULL || ctx->aborted) return;
  kvs_wait w = kvs_wait_begin(ctx->timeout_ms);
  ncclResult_t rc = ncclCommFinalize(ctx->comm);
  if (rc == ncclInProgress || rc == ncclSuccess) {
    ncclResult_t state = rc;
    while (state == ncclInProgress && kvs_wait_again(&w)) {
      if (ncclCommGetAsyncError(ctx->comm, &state) != ncclSuccess) break;
    }
    rc = state;
  }
  if (rc == ncclSuccess) {
    ncclCommDestroy(ctx->comm);
  } else {
    stop(ctx, NULL);
  }
}

static void nccl_destroy(void *vctx) {
  nccl_ctx *ctx = vctx;
  if (ctx == NULL) return;
  kvs_cuda_device_scope scope;
  bool entered = ctx->device >= 0 && enter(ctx, &scope, NULL) == KVS_OK;
  close_comm(ctx);
  nccl_buffer_free(ctx, &ctx->barrier_word);
  (void)cudaFree(ctx->stage);
  free(ctx->staged);
  if (ctx->reads_done != NULL) (void)cudaEventDestroy(ctx->reads_done);
  if (ctx->stream != NULL) (void)cudaStreamDestroy(ctx->stream);
  if (entered) kvs_cuda_device_leave(&scope);
  free(ctx);
}

static kvs_status nccl_device_stream(void *vctx, void **stream, int *device, kvs_error *err) {
  (void)err;
  nccl_ctx *ctx = vctx;
  *stream = ctx->stream;
  *device = ctx->device;
  return KVS_OK;
}

static kvs_status nccl_reads_done(void *vctx, void *stream, kvs_error *err) {
  nccl_ctx *ctx = vctx;
  if ((cudaStream_t)stream == ctx->stream) return KVS_OK; /* already in order */
  kvs_cuda_device_scope scope;
  kvs_status status = enter(ctx, &scope, err);
  if (status != KVS_OK) return status;
  char what[128];
  snprintf(what, sizeof what, "cudaEventRecord of rank %d's reads on the consumer's stream",
           ctx->rank);
  status = kvs_cuda_status(cudaEventRecord(ctx->reads_done, (cudaStream_t)stream), what, err);
  if (status == KVS_OK) {
    snprintf(what, sizeof what, "cudaStreamWaitEvent of rank %d's collectives on the reads",
             ctx->rank);
    status = kvs_cuda_status(cudaStreamWaitEvent(ctx->stream, ctx->reads_done, 0), what, err);
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

static const kvs_comm_vtable nccl_vtable = {
    .name = "nccl",
    .buffer_alloc = nccl_buffer_alloc,
    .buffer_free = nccl_buffer_free,
    .broadcast = nccl_broadcast,
    .allreduce_u64 = nccl_allreduce,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
    .device_stream = nccl_device_stream,
    .reads_done = nccl_reads_done,
    .exchange = nccl_exchange,
    .exchange_host = nccl_exchange_host,
};

/* ---- creation ---- */

/* With the device current: the communicator from the id, or split from
 * the parent, polled against the initialisation's own deadline. */
static kvs_status init_comm(nccl_ctx *ctx, const kvs_nccl_open_args *args, kvs_error *err) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  /* A step message is at most a few hundred KiB: two channels move it in
   * microseconds over NVLink, and each channel NCCL connects costs its
   * buffers on this GPU (9.2 MiB of LL, LL128 and Simple per ring
   * connection, after the budget was measured). The cap is what
   * plan/node_overhead.h prices. */
  config.maxCTAs = KVS_NCCL_MAX_CHANNELS;
  ncclResult_t rc;
  const char *what;
  if (args->parent != NULL) {
    what = "ncclCommSplit";
    ncclComm_t parent = (ncclComm_t)args->parent;
    /* The split's rank and size are the parent's: known before it starts,
     * so a failure or a timeout names them. */
    rc = ncclCommUserRank(parent, &ctx->rank);
    if (rc == ncclSuccess) rc = ncclCommCount(parent, &ctx->size);
    if (rc == ncclSuccess) rc = ncclCommSplit(parent, 0, ctx->rank, &ctx->comm, &config);
  } else {
    what = "ncclCommInitRankConfig";
    ncclUniqueId id;
    memcpy(&id, args->unique_id, sizeof id);
    rc = ncclCommInitRankConfig(&ctx->comm, args->nranks, id, args->rank, &config);
  }
  if ((rc != ncclSuccess && rc != ncclInProgress) || ctx->comm == NULL) {
    ctx->comm = NULL;
    return kvs_error_set(err, KVS_ERR_COMM, "%s on rank %d (device %d): %s", what, ctx->rank,
                         ctx->device, ncclGetErrorString(rc));
  }
  ctx->own_comm = true;
  kvs_wait w = kvs_wait_begin(args->init_timeout_ms);
  ctx->timeout_ms = args->init_timeout_ms;
  kvs_status status = settle(ctx, rc, "communicator initialisation", &w, err);
  ctx->timeout_ms = args->timeout_ms;
  if (status != KVS_OK) return status;
  if ((rc = ncclCommCount(ctx->comm, &ctx->size)) != ncclSuccess ||
      (rc = ncclCommUserRank(ctx->comm, &ctx->rank)) != ncclSuccess) {
    return nccl_failed(ctx, rc, "ncclCommCount/UserRank after initialisation", err);
  }
  return KVS_OK;
}

/* With the device current: the stream, the consumers' event and the
 * barrier word. */
static kvs_status finish_setup(nccl_ctx *ctx, kvs_error *err) {
  cudaError_t rc = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
  if (rc != cudaSuccess) {
    ctx->stream = NULL;
    return cuda_failed(ctx, rc, "stream creation", err);
  }
  rc = cudaEventCreateWithFlags(&ctx->reads_done, cudaEventDisableTiming);
  if (rc != cudaSuccess) {
    ctx->reads_done = NULL;
    return cuda_failed(ctx, rc, "event creation", err);
  }
  kvs_status status = nccl_buffer_alloc(ctx, sizeof(uint64_t), &ctx->barrier_word, err);
  if (status == KVS_OK) ctx->barrier_word.bytes = sizeof(uint64_t);
  return status;
}

static kvs_status nccl_open(const kvs_nccl_open_args *args, const kvs_comm_vtable **vtable,
                            void **out, int *rank, int *nranks, kvs_error *err) {
  if (args == NULL || vtable == NULL || out == NULL || rank == NULL || nranks == NULL ||
      (args->parent == NULL && args->unique_id == NULL)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "nccl open needs its arguments (a unique id or a parent) and outputs");
  }
  nccl_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the nccl backend");
  ctx->device = args->device;
  ctx->rank = args->rank;
  ctx->size = args->nranks;
  ctx->timeout_ms = args->timeout_ms;
  /* A device this process does not have is the machine's lack, said as
   * such, before anything touches it. */
  int count = 0;
  kvs_status status = kvs_cuda_device_count(&count, err);
  if (status == KVS_OK && args->device >= count) {
    status = kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                           "rank %d: CUDA device %d asked for, but CUDA sees %d device%s",
                           args->rank, args->device, count, count == 1 ? "" : "s");
  }
  if (status != KVS_OK) {
    free(ctx);
    return status;
  }
  /* Entering creates the device's context now, and proves it usable. */
  kvs_cuda_device_scope scope;
  status = enter(ctx, &scope, err);
  if (status != KVS_OK) {
    free(ctx);
    return status;
  }
  status = init_comm(ctx, args, err);
  if (status == KVS_OK) status = finish_setup(ctx, err);
  kvs_cuda_device_leave(&scope);
  if (status != KVS_OK) {
    stop(ctx, NULL);
    nccl_destroy(ctx);
    return status;
  }
  *vtable = &nccl_vtable;
  *out = ctx;
  *rank = ctx->rank;
  *nranks = ctx->size;
  return KVS_OK;
}

static kvs_status nccl_unique_id(unsigned char *out, size_t bytes, kvs_error *err) {
  ncclUniqueId id;
  if (out == NULL || bytes < sizeof id) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "a unique id needs %zu bytes, got %zu",
                         sizeof id, bytes);
  }
  ncclResult_t rc = ncclGetUniqueId(&id);
  if (rc != ncclSuccess) {
    return kvs_error_set(err, KVS_ERR_COMM, "ncclGetUniqueId: %s", ncclGetErrorString(rc));
  }
  memcpy(out, &id, sizeof id);
  return KVS_OK;
}

static int nccl_version(void) {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? version : 0;
}

__attribute__((visibility("default"))) const void *kvs_backend_nccl_v1(void);

const void *kvs_backend_nccl_v1(void) {
  static const kvs_nccl_table table = {
      .header = KVS_BACKEND_HEADER("nccl", kvs_nccl_table),
      .unique_id = nccl_unique_id,
      .device_count = kvs_cuda_device_count,
      .open = nccl_open,
      .version = nccl_version,
      .vtable_bytes = sizeof(kvs_comm_vtable),
  };
  return &table;
}
