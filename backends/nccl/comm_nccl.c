#include "backends/nccl/comm_nccl.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/options.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "shard/wait.h"

typedef struct nccl_ctx {
  ncclComm_t comm;
  cudaStream_t stream;
  /* Recorded on a consumer's stream by kvs_comm_nccl_reads_done; the
   * communicator's stream waits for it before the next collective writes
   * a buffer. */
  cudaEvent_t reads_done;
  bool own_comm;
  bool own_stream;
  bool aborted;
  int device;
  int rank;
  int size;
  int timeout_ms;
  kvs_comm_buffer barrier_word; /* one device word for barriers */
} nccl_ctx;

/* Appends text to err's message (room permitting). */
static void append(kvs_error *err, const char *text) {
  if (err == NULL) return;
  size_t used = strlen(err->message);
  if (used + 1 < sizeof err->message) {
    snprintf(err->message + used, sizeof err->message - used, "%s", text);
  }
}

/* After a failed collective: in create mode the communicator is aborted,
 * so nothing queued on it runs and peers in a collective with this rank
 * get an error instead of waiting out their deadline. An adopted
 * communicator is the engine's: it is never aborted here (the engine
 * would go on with a freed comm); the message says what the engine must
 * do. */
static void stop(nccl_ctx *ctx, kvs_error *err) {
  if (ctx->comm == NULL || ctx->aborted) return;
  if (ctx->own_comm) {
    ctx->aborted = true;
    ncclCommAbort(ctx->comm);
    append(err, "; the communicator was aborted");
  } else {
    append(err,
           "; the engine's communicator was left as it is (a collective may still be queued "
           "on its stream): abort it before reusing it or destroying this kvs_comm");
  }
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

/* kvs_comm_abort: aborts a communicator this backend created; an adopted
 * one is the engine's to abort. */
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
  if (ctx->reads_done != NULL) (void)cudaEventDestroy(ctx->reads_done);
  if (ctx->own_stream && ctx->stream != NULL) (void)cudaStreamDestroy(ctx->stream);
  if (entered) kvs_cuda_device_leave(&scope);
  free(ctx);
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
};

static const nccl_ctx *context_of(const struct kvs_comm *comm, kvs_error *err) {
  if (comm == NULL || strcmp(kvs_comm_backend(comm), "nccl") != 0) {
    kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                  "communicator is a '%s' backend, not nccl; it has no CUDA stream",
                  comm != NULL ? kvs_comm_backend(comm) : "NULL");
    return NULL;
  }
  return kvs_comm_backend_context(comm);
}

kvs_status kvs_comm_nccl_stream(const struct kvs_comm *comm, cudaStream_t *stream, int *device,
                                kvs_error *err) {
  const nccl_ctx *ctx = context_of(comm, err);
  if (ctx == NULL) return KVS_ERR_INVALID_ARGUMENT;
  if (stream != NULL) *stream = ctx->stream;
  if (device != NULL) *device = ctx->device;
  return KVS_OK;
}

kvs_status kvs_comm_nccl_reads_done(kvs_comm_t comm, cudaStream_t stream, kvs_error *err) {
  const nccl_ctx *ctx = context_of(comm, err);
  if (ctx == NULL) return KVS_ERR_INVALID_ARGUMENT;
  if (stream == ctx->stream) return KVS_OK; /* already in order */
  kvs_cuda_device_scope scope;
  kvs_status status = enter(ctx, &scope, err);
  if (status != KVS_OK) return status;
  char what[128];
  snprintf(what, sizeof what, "cudaEventRecord of rank %d's reads on the consumer's stream",
           ctx->rank);
  status = kvs_cuda_status(cudaEventRecord(ctx->reads_done, stream), what, err);
  if (status == KVS_OK) {
    snprintf(what, sizeof what, "cudaStreamWaitEvent of rank %d's collectives on the reads",
             ctx->rank);
    status = kvs_cuda_status(cudaStreamWaitEvent(ctx->stream, ctx->reads_done, 0), what, err);
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

/* One collective round on the bootstrap so every rank leaves creation with
 * the same verdict: the lowest failing rank, or -1 when all succeeded. */
static kvs_status agree_on_failure(kvs_comm_t bootstrap, kvs_comm_buffer *word, bool failed,
                                   int *lowest_failed, kvs_error *err) {
  ((uint64_t *)word->host)[0] = failed ? (uint64_t)kvs_comm_rank(bootstrap) : UINT64_MAX;
  kvs_status status = kvs_comm_allreduce_u64(bootstrap, word, 1, KVS_COMM_MIN, err);
  if (status != KVS_OK) return status;
  uint64_t v = ((uint64_t *)word->host)[0];
  *lowest_failed = v == UINT64_MAX ? -1 : (int)v;
  return KVS_OK;
}

/* This host's identity: a hash of its name (never 0). Two containers on one
 * machine with different host names count as two nodes; each then takes
 * device 0 upwards of what it sees, which is right when each is given its
 * own GPUs (CUDA_VISIBLE_DEVICES, a device plugin), as they usually are. */
static uint64_t host_key(void) {
  char name[256] = "";
  if (gethostname(name, sizeof name) != 0) name[0] = '\0';
  name[sizeof name - 1] = '\0';
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h != 0 ? h : 1;
}

/* The node-local rank: how many lower ranks share this rank's host. Every
 * rank puts its host key in its own word of one SUM allreduce, so each
 * sees every rank's host; ranks need not be laid out by node (mpirun
 * --map-by node deals them round-robin). */
static kvs_status local_rank_of(kvs_comm_t bootstrap, int *local_rank, kvs_error *err) {
  int size = kvs_comm_size(bootstrap), rank = kvs_comm_rank(bootstrap);
  kvs_comm_buffer keys = {NULL, NULL, 0, NULL};
  kvs_status status = kvs_comm_buffer_alloc(bootstrap, (size_t)size * sizeof(uint64_t), &keys, err);
  if (status != KVS_OK) return status;
  uint64_t *k = keys.host;
  for (int r = 0; r < size; r++) k[r] = 0;
  k[rank] = host_key();
  status = kvs_comm_allreduce_u64(bootstrap, &keys, (size_t)size, KVS_COMM_SUM, err);
  if (status == KVS_OK) {
    int below = 0;
    for (int r = 0; r < rank; r++) below += k[r] == k[rank];
    *local_rank = below;
  }
  kvs_comm_buffer_free(bootstrap, &keys);
  return status;
}

/* Create mode, first half: every rank picks its device (the option, or
 * the node-local rank modulo the visible devices) and the ranks agree
 * that all have one before anyone enters NCCL. */
static kvs_status choose_device(nccl_ctx *ctx, const kvs_comm_nccl_options *options,
                                kvs_comm_t bootstrap, kvs_comm_buffer *boot, kvs_error *err) {
  int local_rank = 0;
  kvs_status status = local_rank_of(bootstrap, &local_rank, err);
  if (status != KVS_OK) return status;
  kvs_error local;
  kvs_error_clear(&local);
  kvs_error why;
  int count = 0;
  kvs_status local_status = KVS_OK;
  if (kvs_cuda_device_count(&count, &why) != KVS_OK) {
    local_status =
        kvs_error_set(&local, KVS_ERR_UNSUPPORTED, "rank %d: %s", ctx->rank, why.message);
  } else if (options->device >= count) {
    local_status = kvs_error_set(&local, KVS_ERR_INVALID_ARGUMENT,
                                 "rank %d: device %d asked for, but CUDA sees %d device%s",
                                 ctx->rank, options->device, count, count == 1 ? "" : "s");
  } else {
    ctx->device = options->device >= 0 ? options->device : local_rank % count;
    /* Creates the device's context now, and proves it usable. */
    kvs_cuda_device_scope scope;
    local_status = kvs_cuda_device_enter(ctx->device, &scope, &local);
    if (local_status == KVS_OK) kvs_cuda_device_leave(&scope);
  }
  int lowest = -1;
  if ((status = agree_on_failure(bootstrap, boot, local_status != KVS_OK, &lowest, err))) {
    return status;
  }
  if (lowest < 0) return KVS_OK;
  if (local_status != KVS_OK) return kvs_error_set(err, local_status, "%s", local.message);
  return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                       "rank %d has no usable CUDA device, so no nccl communicator can be "
                       "built over the %d ranks",
                       lowest, ctx->size);
}

/* Create mode, second half, with the device current: rank 0 mints the
 * unique id, which travels over the bootstrap with a verdict word (a
 * failure on rank 0 stops everyone); then a nonblocking init polled
 * against the deadline, and one more agreement. */
static kvs_status init_comm(nccl_ctx *ctx, kvs_comm_t bootstrap, kvs_comm_buffer *boot,
                            kvs_error *err) {
  uint64_t *verdict = boot->host;
  ncclUniqueId *id = (ncclUniqueId *)((char *)boot->host + sizeof(uint64_t));
  if (ctx->rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(id);
    *verdict = (uint64_t)rc;
  }
  kvs_status status = kvs_comm_broadcast(bootstrap, boot, boot->bytes, 0, err);
  if (status != KVS_OK) return status;
  if (*verdict != (uint64_t)ncclSuccess) {
    return kvs_error_set(err, KVS_ERR_COMM, "ncclGetUniqueId failed on rank 0: %s",
                         ncclGetErrorString((ncclResult_t)*verdict));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  kvs_wait w = kvs_wait_begin(ctx->timeout_ms);
  kvs_error local;
  kvs_error_clear(&local);
  kvs_status local_status;
  ncclResult_t rc = ncclCommInitRankConfig(&ctx->comm, ctx->size, *id, ctx->rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    ctx->comm = NULL;
    local_status = kvs_error_set(&local, KVS_ERR_COMM, "ncclCommInitRankConfig on rank %d: %s",
                                 ctx->rank, ncclGetErrorString(rc));
  } else {
    ctx->own_comm = true;
    local_status = settle(ctx, rc, "communicator initialisation", &w, &local);
  }
  int lowest = -1;
  if ((status = agree_on_failure(bootstrap, boot, local_status != KVS_OK, &lowest, err))) {
    return status;
  }
  if (lowest < 0) return KVS_OK;
  stop(ctx, NULL);
  return local_status != KVS_OK
             ? kvs_error_set(err, local_status, "%s", local.message)
             : kvs_error_set(err, KVS_ERR_COMM,
                             "nccl communicator initialisation failed on rank %d", lowest);
}

static kvs_status create_comm(nccl_ctx *ctx, const kvs_comm_nccl_options *options,
                              kvs_comm_t bootstrap, kvs_error *err) {
  kvs_comm_buffer boot = {NULL, NULL, 0, NULL};
  kvs_status status =
      kvs_comm_buffer_alloc(bootstrap, sizeof(uint64_t) + sizeof(ncclUniqueId), &boot, err);
  if (status != KVS_OK) return status;
  ctx->rank = kvs_comm_rank(bootstrap);
  ctx->size = kvs_comm_size(bootstrap);
  status = choose_device(ctx, options, bootstrap, &boot, err);
  if (status == KVS_OK) {
    kvs_cuda_device_scope scope;
    status = kvs_cuda_device_enter(ctx->device, &scope, err);
    if (status == KVS_OK) {
      status = init_comm(ctx, bootstrap, &boot, err);
      kvs_cuda_device_leave(&scope);
    }
  }
  kvs_comm_buffer_free(bootstrap, &boot);
  return status;
}

/* Adopt mode: the engine's communicator tells rank, size and device. */
static kvs_status adopt_comm(nccl_ctx *ctx, ncclComm_t comm, kvs_error *err) {
  ctx->comm = comm;
  int device = -1;
  ncclResult_t rc = ncclCommCount(comm, &ctx->size);
  if (rc == ncclSuccess) rc = ncclCommUserRank(comm, &ctx->rank);
  if (rc == ncclSuccess) rc = ncclCommCuDevice(comm, &device);
  if (rc != ncclSuccess) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the adopted ncclComm_t cannot be queried: %s", ncclGetErrorString(rc));
  }
  ctx->device = device;
  return KVS_OK;
}

/* With the device current: the stream (unless adopted), the consumers'
 * event and the barrier word. */
static kvs_status finish_setup(nccl_ctx *ctx, const kvs_comm_nccl_options *options,
                               kvs_error *err) {
  if (options->stream != NULL) {
    ctx->stream = options->stream;
  } else {
    cudaError_t rc = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
    if (rc != cudaSuccess) {
      ctx->stream = NULL;
      return cuda_failed(ctx, rc, "stream creation", err);
    }
    ctx->own_stream = true;
  }
  cudaError_t rc = cudaEventCreateWithFlags(&ctx->reads_done, cudaEventDisableTiming);
  if (rc != cudaSuccess) {
    ctx->reads_done = NULL;
    return cuda_failed(ctx, rc, "event creation", err);
  }
  kvs_status status = nccl_buffer_alloc(ctx, sizeof(uint64_t), &ctx->barrier_word, err);
  if (status == KVS_OK) ctx->barrier_word.bytes = sizeof(uint64_t);
  return status;
}

kvs_status kvs_comm_nccl_create(const kvs_comm_nccl_options *options, kvs_comm_t bootstrap,
                                kvs_comm_t *out, kvs_error *err) {
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output handle is NULL");
  static const kvs_comm_nccl_options defaults = KVS_COMM_NCCL_OPTIONS_INIT;
  kvs_comm_nccl_options adopted;
  kvs_status adopt = kvs_options_adopt(options, &defaults, sizeof defaults,
                                       "KVS_COMM_NCCL_OPTIONS_INIT", &adopted, err);
  if (adopt != KVS_OK) return adopt;
  options = &adopted;
  kvs_status timeout = kvs_comm_check_timeout(options->timeout_ms, err);
  if (timeout != KVS_OK) return timeout;
  if (options->comm == NULL && bootstrap == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "creating an nccl communicator needs a bootstrap communicator to "
                         "exchange the unique id (or pass an existing ncclComm_t to adopt)");
  }
  nccl_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the nccl backend");
  ctx->timeout_ms = options->timeout_ms;
  ctx->device = -1;
  kvs_status status = options->comm != NULL ? adopt_comm(ctx, options->comm, err)
                                            : create_comm(ctx, options, bootstrap, err);
  if (status == KVS_OK) {
    kvs_cuda_device_scope scope;
    status = enter(ctx, &scope, err);
    if (status == KVS_OK) {
      status = finish_setup(ctx, options, err);
      kvs_cuda_device_leave(&scope);
    }
  }
  if (status != KVS_OK) {
    nccl_destroy(ctx);
    return status;
  }
  return kvs_comm_create(&nccl_vtable, ctx, ctx->rank, ctx->size, options->timeout_ms, out, err);
}
