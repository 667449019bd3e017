#include "shard/comm_nccl.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_status.h"
#include "shard/wait.h"

typedef struct nccl_ctx {
  ncclComm_t comm;
  cudaStream_t stream;
  bool own_comm;
  bool own_stream;
  bool aborted;
  int device;
  int rank;
  int size;
  int timeout_ms;
  kvs_comm_buffer barrier_word; /* one device word for barriers */
} nccl_ctx;

/* A CUDA failure, named for this rank and device (kvs_cuda_status: the one
 * mapping of CUDA errors, which also clears a non-sticky one). */
static kvs_status cuda_failed(nccl_ctx *ctx, cudaError_t code, const char *what, kvs_error *err) {
  char call[160];
  snprintf(call, sizeof call, "nccl backend %s on rank %d (device %d)", what, ctx->rank,
           ctx->device);
  return kvs_cuda_status(code, call, err);
}

#define CUDA_CHECK(ctx, call, what, err)                                                         \
  do {                                                                                           \
    cudaError_t cuda_check_rc_ = (call);                                                         \
    if (cuda_check_rc_ != cudaSuccess) return cuda_failed((ctx), cuda_check_rc_, (what), (err)); \
  } while (0)

static void abort_comm(nccl_ctx *ctx) {
  if (ctx->comm != NULL && !ctx->aborted) {
    ctx->aborted = true;
    /* Frees the communicator; anything still queued on it is cancelled and
     * peers in a collective with us get an error rather than a hang. */
    ncclCommAbort(ctx->comm);
  }
}

static kvs_status nccl_failed(nccl_ctx *ctx, ncclResult_t code, const char *what, kvs_error *err) {
  const char *last = ctx->comm != NULL && !ctx->aborted ? ncclGetLastError(ctx->comm) : "";
  kvs_error_set(err, KVS_ERR_COMM, "nccl %s on rank %d of %d failed: %s%s%s", what, ctx->rank,
                ctx->size, ncclGetErrorString(code), last != NULL && last[0] ? ": " : "",
                last != NULL ? last : "");
  abort_comm(ctx);
  return KVS_ERR_COMM;
}

/* A nonblocking communicator may answer ncclInProgress; the call is done
 * when the async error leaves that state. */
static kvs_status settle(nccl_ctx *ctx, ncclResult_t code, const char *what, kvs_wait *w,
                         kvs_error *err) {
  while (code == ncclInProgress) {
    if (!kvs_wait_again(w)) {
      abort_comm(ctx);
      return kvs_error_set(err, KVS_ERR_TIMEOUT,
                           "nccl %s on rank %d of %d was still in progress after %d ms: a peer "
                           "rank failed or stalled; the communicator was aborted",
                           what, ctx->rank, ctx->size, ctx->timeout_ms);
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(ctx->comm, &state);
    code = rc != ncclSuccess ? rc : state;
  }
  return code == ncclSuccess ? KVS_OK : nccl_failed(ctx, code, what, err);
}

/* Waits for everything queued on the stream, watching NCCL for a remote
 * failure and the clock for the deadline. */
static kvs_status wait_stream(nccl_ctx *ctx, const char *what, kvs_wait *w, kvs_error *err) {
  for (;;) {
    cudaError_t q = cudaStreamQuery(ctx->stream);
    if (q == cudaSuccess) return KVS_OK;
    if (q != cudaErrorNotReady) {
      kvs_status status = cuda_failed(ctx, q, what, err);
      abort_comm(ctx);
      return status;
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(ctx->comm, &state);
    if (rc == ncclSuccess && state != ncclSuccess && state != ncclInProgress) rc = state;
    if (rc != ncclSuccess) return nccl_failed(ctx, rc, what, err);
    if (!kvs_wait_again(w)) {
      abort_comm(ctx);
      return kvs_error_set(err, KVS_ERR_TIMEOUT,
                           "nccl %s on rank %d of %d did not complete within %d ms: a peer "
                           "rank failed or stalled; the communicator was aborted",
                           what, ctx->rank, ctx->size, ctx->timeout_ms);
    }
  }
}

static kvs_status nccl_buffer_alloc(void *vctx, size_t bytes, kvs_comm_buffer *out,
                                    kvs_error *err) {
  nccl_ctx *ctx = vctx;
  void *device = NULL, *host = NULL;
  cudaError_t rc = cudaMalloc(&device, bytes);
  if (rc == cudaSuccess) rc = cudaMallocHost(&host, bytes); /* pinned: async copies */
  if (rc != cudaSuccess) {
    if (device != NULL) cudaFree(device);
    return cuda_failed(ctx, rc, "buffer allocation", err);
  }
  memset(host, 0, bytes);
  out->host = host;
  out->device = device;
  return KVS_OK;
}

static void nccl_buffer_free(void *vctx, kvs_comm_buffer *buffer) {
  (void)vctx;
  if (buffer->device != NULL) cudaFree(buffer->device);
  if (buffer->host != NULL) cudaFreeHost(buffer->host);
}

static kvs_status nccl_broadcast(void *vctx, kvs_comm_buffer *buffer, size_t bytes, int root,
                                 int timeout_ms, kvs_error *err) {
  nccl_ctx *ctx = vctx;
  ctx->timeout_ms = timeout_ms;
  kvs_wait w = kvs_wait_begin(timeout_ms);
  if (ctx->rank == root) {
    CUDA_CHECK(
        ctx,
        cudaMemcpyAsync(buffer->device, buffer->host, bytes, cudaMemcpyHostToDevice, ctx->stream),
        "broadcast staging", err);
  }
  kvs_status status = settle(
      ctx,
      ncclBroadcast(buffer->device, buffer->device, bytes, ncclUint8, root, ctx->comm, ctx->stream),
      "broadcast", &w, err);
  if (status != KVS_OK) return status;
  if (ctx->rank != root) {
    CUDA_CHECK(
        ctx,
        cudaMemcpyAsync(buffer->host, buffer->device, bytes, cudaMemcpyDeviceToHost, ctx->stream),
        "broadcast readback", err);
  }
  return wait_stream(ctx, "broadcast", &w, err);
}

static kvs_status nccl_allreduce(void *vctx, kvs_comm_buffer *buffer, size_t count, kvs_comm_op op,
                                 int timeout_ms, kvs_error *err) {
  nccl_ctx *ctx = vctx;
  ctx->timeout_ms = timeout_ms;
  kvs_wait w = kvs_wait_begin(timeout_ms);
  size_t bytes = count * sizeof(uint64_t);
  ncclRedOp_t nop = op == KVS_COMM_MIN ? ncclMin : op == KVS_COMM_MAX ? ncclMax : ncclSum;
  CUDA_CHECK(
      ctx,
      cudaMemcpyAsync(buffer->device, buffer->host, bytes, cudaMemcpyHostToDevice, ctx->stream),
      "allreduce staging", err);
  kvs_status status = settle(
      ctx,
      ncclAllReduce(buffer->device, buffer->device, count, ncclUint64, nop, ctx->comm, ctx->stream),
      "allreduce", &w, err);
  if (status != KVS_OK) return status;
  CUDA_CHECK(
      ctx,
      cudaMemcpyAsync(buffer->host, buffer->device, bytes, cudaMemcpyDeviceToHost, ctx->stream),
      "allreduce readback", err);
  return wait_stream(ctx, "allreduce", &w, err);
}

/* NCCL has no barrier: a one-word allreduce is one. */
static kvs_status nccl_barrier(void *vctx, int timeout_ms, kvs_error *err) {
  nccl_ctx *ctx = vctx;
  return nccl_allreduce(ctx, &ctx->barrier_word, 1, KVS_COMM_SUM, timeout_ms, err);
}

static void nccl_abort(void *vctx, int code) {
  (void)code;
  abort_comm(vctx);
}

static void nccl_destroy(void *vctx) {
  nccl_ctx *ctx = vctx;
  if (ctx == NULL) return;
  nccl_buffer_free(ctx, &ctx->barrier_word);
  if (ctx->own_comm && ctx->comm != NULL && !ctx->aborted) {
    /* Finalize flushes outstanding work; bounded like every other wait,
     * and abandoned for an abort when a peer never finishes. */
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
      abort_comm(ctx);
    }
  }
  if (ctx->own_stream && ctx->stream != NULL) cudaStreamDestroy(ctx->stream);
  free(ctx);
}

static const kvs_comm_vtable nccl_vtable = {
    "nccl",         nccl_buffer_alloc, nccl_buffer_free, nccl_broadcast,
    nccl_allreduce, nccl_barrier,      nccl_abort,       nccl_destroy,
};

int kvs_comm_nccl_device_count(char *why, size_t why_cap) {
  int count = 0;
  kvs_error err;
  if (kvs_cuda_device_count(&count, &err) == KVS_OK) return count;
  if (why != NULL && why_cap > 0) snprintf(why, why_cap, "%s", err.message);
  return 0;
}

kvs_status kvs_comm_nccl_stream(const struct kvs_comm *comm, cudaStream_t *stream, int *device,
                                kvs_error *err) {
  if (comm == NULL || strcmp(kvs_comm_backend(comm), "nccl") != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "communicator is a '%s' backend, not nccl; it has no CUDA stream",
                         comm != NULL ? kvs_comm_backend(comm) : "NULL");
  }
  const nccl_ctx *ctx = kvs_comm_backend_context(comm);
  if (stream != NULL) *stream = ctx->stream;
  if (device != NULL) *device = ctx->device;
  return KVS_OK;
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

static kvs_status create_comm(nccl_ctx *ctx, const kvs_comm_nccl_options *options,
                              kvs_comm_t bootstrap, kvs_error *err) {
  kvs_comm_buffer boot = {NULL, NULL, 0, NULL};
  kvs_status status =
      kvs_comm_buffer_alloc(bootstrap, sizeof(uint64_t) + sizeof(ncclUniqueId), &boot, err);
  if (status != KVS_OK) return status;
  ctx->rank = kvs_comm_rank(bootstrap);
  ctx->size = kvs_comm_size(bootstrap);

  /* 1. Every rank needs a device; agree before anyone enters NCCL. */
  kvs_error local;
  kvs_error_clear(&local);
  char why[KVS_ERROR_MESSAGE_MAX];
  int count = kvs_comm_nccl_device_count(why, sizeof why);
  kvs_status local_status = KVS_OK;
  if (count == 0) {
    local_status = kvs_error_set(&local, KVS_ERR_UNSUPPORTED, "rank %d: %s", ctx->rank, why);
  } else {
    ctx->device = options->device >= 0 ? options->device : ctx->rank % count;
    cudaError_t rc = cudaSetDevice(ctx->device);
    if (rc != cudaSuccess) local_status = cuda_failed(ctx, rc, "cudaSetDevice", &local);
  }
  int lowest = -1;
  if ((status = agree_on_failure(bootstrap, &boot, local_status != KVS_OK, &lowest, err))) {
    goto done;
  }
  if (lowest >= 0) {
    if (local_status != KVS_OK) {
      status = kvs_error_set(err, local_status, "%s", local.message);
    } else {
      status = kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                             "rank %d has no usable CUDA device, so no nccl communicator can be "
                             "built over the %d ranks",
                             lowest, ctx->size);
    }
    goto done;
  }

  /* 2. Rank 0 mints the unique id; it travels over the bootstrap with a
   * verdict word, so a failure on rank 0 stops everyone. */
  uint64_t *verdict = boot.host;
  ncclUniqueId *id = (ncclUniqueId *)((char *)boot.host + sizeof(uint64_t));
  if (ctx->rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(id);
    *verdict = (uint64_t)rc;
  }
  if ((status = kvs_comm_broadcast(bootstrap, &boot, boot.bytes, 0, err))) goto done;
  if (*verdict != (uint64_t)ncclSuccess) {
    status = kvs_error_set(err, KVS_ERR_COMM, "ncclGetUniqueId failed on rank 0: %s",
                           ncclGetErrorString((ncclResult_t)*verdict));
    goto done;
  }

  /* 3. Nonblocking init, polled against the deadline. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  kvs_wait w = kvs_wait_begin(ctx->timeout_ms);
  ncclResult_t rc = ncclCommInitRankConfig(&ctx->comm, ctx->size, *id, ctx->rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    ctx->comm = NULL;
    local_status = kvs_error_set(&local, KVS_ERR_COMM, "ncclCommInitRankConfig on rank %d: %s",
                                 ctx->rank, ncclGetErrorString(rc));
  } else {
    ctx->own_comm = true;
    local_status = settle(ctx, rc, "communicator initialisation", &w, &local);
  }
  if ((status = agree_on_failure(bootstrap, &boot, local_status != KVS_OK, &lowest, err))) {
    goto done;
  }
  if (lowest >= 0) {
    abort_comm(ctx);
    status = local_status != KVS_OK
                 ? kvs_error_set(err, local_status, "%s", local.message)
                 : kvs_error_set(err, KVS_ERR_COMM,
                                 "nccl communicator initialisation failed on rank %d", lowest);
  }
done:
  kvs_comm_buffer_free(bootstrap, &boot);
  return status;
}

kvs_status kvs_comm_nccl_create(const kvs_comm_nccl_options *options, kvs_comm_t bootstrap,
                                kvs_comm_t *out, kvs_error *err) {
  kvs_comm_nccl_options defaults = KVS_COMM_NCCL_OPTIONS_INIT;
  if (options == NULL) options = &defaults;
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output handle is NULL");
  if (options->size < sizeof(kvs_comm_nccl_options)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "options.size %zu is smaller than this build's %zu; start from "
                         "KVS_COMM_NCCL_OPTIONS_INIT",
                         options->size, sizeof(kvs_comm_nccl_options));
  }
  if (options->timeout_ms <= 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "timeout_ms is %d; every wait needs a deadline (> 0)",
                         options->timeout_ms);
  }
  if (options->comm == NULL && bootstrap == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "creating an nccl communicator needs a bootstrap communicator to "
                         "exchange the unique id (or pass an existing ncclComm_t to adopt)");
  }
  nccl_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the nccl backend");
  ctx->timeout_ms = options->timeout_ms;
  ctx->device = options->device;
  kvs_status status = KVS_OK;
  if (options->comm != NULL) {
    ctx->comm = options->comm;
    int device = -1;
    ncclResult_t rc = ncclCommCount(ctx->comm, &ctx->size);
    if (rc == ncclSuccess) rc = ncclCommUserRank(ctx->comm, &ctx->rank);
    if (rc == ncclSuccess) rc = ncclCommCuDevice(ctx->comm, &device);
    if (rc != ncclSuccess) {
      status =
          kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                        "the adopted ncclComm_t cannot be queried: %s", ncclGetErrorString(rc));
    } else {
      ctx->device = device;
      cudaError_t crc = cudaSetDevice(device);
      if (crc != cudaSuccess) status = cuda_failed(ctx, crc, "cudaSetDevice", err);
    }
  } else {
    status = create_comm(ctx, options, bootstrap, err);
  }
  if (status == KVS_OK) {
    if (options->stream != NULL) {
      ctx->stream = options->stream;
    } else {
      cudaError_t rc = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
      if (rc != cudaSuccess) {
        ctx->stream = NULL;
        status = cuda_failed(ctx, rc, "stream creation", err);
      } else {
        ctx->own_stream = true;
      }
    }
  }
  if (status == KVS_OK) {
    status = nccl_buffer_alloc(ctx, sizeof(uint64_t), &ctx->barrier_word, err);
    if (status == KVS_OK) ctx->barrier_word.bytes = sizeof(uint64_t);
  }
  if (status != KVS_OK) {
    nccl_destroy(ctx);
    return status;
  }
  return kvs_comm_create(&nccl_vtable, ctx, ctx->rank, ctx->size, options->timeout_ms, out, err);
}
