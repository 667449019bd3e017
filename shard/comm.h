/* Collective communication for the shard runtime: one small vtable, three
 * backends (nccl: device buffers; mpi: host buffers, real processes;
 * self: one rank), plus an in-process loopback group for tests.
 *
 * Only what the runtime needs: broadcast, allreduce (min, max, sum) on
 * 64-bit unsigned words, barrier, abort, and one optional batched
 * point-to-point exchange (kvshard.h's kvs_comm_exchange: the KV rows of a
 * request moving from a prefill rank to a decode rank, on the engine's own
 * memory rather than a comm buffer). Every wait has a deadline
 * (timeout_ms of the communicator): a peer that died or stalled turns into
 * KVS_ERR_TIMEOUT (or KVS_ERR_COMM when the backend noticed the failure
 * itself) naming the operation, the rank and the wait, never a silent hang.
 *
 * A failed collective poisons the communicator: the peers' view of the
 * group is unknown after it, so every later call returns KVS_ERR_COMM
 * with the first failure's message. Argument errors do not poison.
 *
 * Buffers come from the backend (kvs_comm_buffer_alloc) because the NCCL
 * backend needs device memory and staging: a collective reads `host` on
 * entry (on the root, for a broadcast) and leaves the result in `host` --
 * and, on a device backend, in `device` too, where a kernel can consume it
 * without another copy. */
#ifndef KVS_SHARD_COMM_H
#define KVS_SHARD_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "kvshard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_comm_op {
  KVS_COMM_MIN = 0,
  KVS_COMM_MAX = 1,
  KVS_COMM_SUM = 2 /* wraps modulo 2^64 */
} kvs_comm_op;

/* "min", "max", "sum"; "?" for anything else. */
const char *kvs_comm_op_name(kvs_comm_op op);

/* A collective buffer. host is always valid; device is the same bytes in
 * device memory on a device backend, NULL on host backends. priv belongs to
 * the backend. */
typedef struct kvs_comm_buffer {
  void *host;
  void *device;
  size_t bytes;
  void *priv;
} kvs_comm_buffer;

/* The backend interface. ctx is the backend's state, passed back on every
 * call. The wrapper (kvs_comm_*) has already checked arguments, so slots
 * only see in-range roots, counts that fit the buffer, and a live group.
 * timeout_ms is always > 0: every slot that waits must give up by then.
 * A slot that fails fills err naming the operation and what was seen. */
typedef struct kvs_comm_vtable {
  const char *name; /* "self", "mpi", "nccl", "loopback" */
  kvs_status (*buffer_alloc)(void *ctx, size_t bytes, kvs_comm_buffer *out, kvs_error *err);
  void (*buffer_free)(void *ctx, kvs_comm_buffer *buffer);
  /* After return, every rank's first `bytes` bytes equal the root's. */
  kvs_status (*broadcast)(void *ctx, kvs_comm_buffer *buffer, size_t bytes, int root,
                          int timeout_ms, kvs_error *err);
  /* In place over the first `count` uint64 words of every rank's buffer. */
  kvs_status (*allreduce_u64)(void *ctx, kvs_comm_buffer *buffer, size_t count, kvs_comm_op op,
                              int timeout_ms, kvs_error *err);
  kvs_status (*barrier)(void *ctx, int timeout_ms, kvs_error *err);
  /* Optional (may be NULL): tear the whole group down so that no peer
   * waits on this rank again (MPI_Abort, ncclCommAbort). May not return
   * (MPI_Abort ends the process). */
  void (*abort)(void *ctx, int code);
  /* Optional: releases ctx. */
  void (*destroy)(void *ctx);
  /* Optional, device backends: the CUDA stream (a cudaStream_t) the
   * collectives run on and its device, so consumers of a collective's
   * device buffer can order themselves after it. */
  kvs_status (*device_stream)(void *ctx, void **stream, int *device, kvs_error *err);
  /* Optional, device backends: the work queued on `stream` so far reads
   * the communicator's buffers; every later collective waits for it (on
   * the device) before it writes one. */
  kvs_status (*reads_done)(void *ctx, void *stream, kvs_error *err);
  /* Optional (NULL: kvs_comm_exchange is KVS_ERR_UNSUPPORTED): this rank's
   * batch of point-to-point transfers as one group, returning once all
   * completed or the deadline passed. The wrapper hands it n >= 1
   * transfers, each of at least one byte, non-NULL data and an in-range
   * peer (zero-byte ones dropped: they match nothing). The k-th send from
   * A to B matches B's k-th receive from A over the communicator's life;
   * matched sizes must agree (a mismatch is a failure). A failed slot
   * leaves no transfer of the batch touching memory after it returns,
   * where the backend can stop it (kvshard.h says where it cannot). */
  kvs_status (*exchange)(void *ctx, const kvs_comm_transfer *transfers, size_t n, int timeout_ms,
                         kvs_error *err);
  /* Optional, device backends whose messages must be device memory: the
   * same batch with every transfer's data in host memory, staged through
   * device memory of the backend's own (sends copied in before the group,
   * receives copied out once it completed). NULL: exchange moves host
   * memory as it is. */
  kvs_status (*exchange_host)(void *ctx, const kvs_comm_transfer *transfers, size_t n,
                              int timeout_ms, kvs_error *err);
} kvs_comm_vtable;

/* "send of 4096 bytes to rank 1", "receive of 4096 bytes from rank 1":
 * one transfer as every backend's message names it. */
void kvs_comm_transfer_describe(const kvs_comm_transfer *t, char *out, size_t cap);
/* The batch's transfers described ("send of ... to rank 1, receive of ...
 * from rank 2"), as many as fit in cap, then "and N more". */
void kvs_comm_transfers_describe(const kvs_comm_transfer *t, size_t n, char *out, size_t cap);

/* The host backends' buffer slots (self, loopback, callbacks): zeroed host
 * memory and no device copy, one implementation for all of them. */
kvs_status kvs_comm_host_buffer_alloc(void *ctx, size_t bytes, kvs_comm_buffer *out,
                                      kvs_error *err);
void kvs_comm_host_buffer_free(void *ctx, kvs_comm_buffer *buffer);

/* kvs_comm_t, KVS_COMM_DEFAULT_TIMEOUT_MS and kvs_comm_destroy, _rank,
 * _size, _backend and _set_timeout_ms are kvshard.h's. */

/* Wraps a backend. The communicator owns ctx from here on (destroy calls
 * vtable->destroy), also when this call fails. rank in [0, size), size >=
 * 1, timeout_ms > 0; the vtable's required slots must be set. */
kvs_status kvs_comm_create(const kvs_comm_vtable *vtable, void *ctx, int rank, int size,
                           int timeout_ms, kvs_comm_t *out, kvs_error *err);

int kvs_comm_timeout_ms(const struct kvs_comm *comm);
/* KVS_OK for a deadline a wait can have (> 0 ms); the one refusal every
 * backend and kvs_comm_create give. */
kvs_status kvs_comm_check_timeout(int timeout_ms, kvs_error *err);
/* The backend's ctx as given to kvs_comm_create. */
void *kvs_comm_backend_context(const struct kvs_comm *comm);

/* A device backend's stream (a cudaStream_t) and CUDA device; a host
 * backend has none (KVS_ERR_UNSUPPORTED naming the backend). */
kvs_status kvs_comm_device_stream(const struct kvs_comm *comm, void **stream, int *device,
                                  kvs_error *err);

/* kvs_comm_exchange of host memory on any backend: a device backend
 * (NCCL) stages it through device memory of its own; the others move it
 * as kvs_comm_exchange does. For small messages beside device rows: a
 * transfer's headers, digests and verdicts. */
kvs_status kvs_comm_exchange_host(kvs_comm_t comm, const kvs_comm_transfer *transfers, size_t n,
                                  kvs_error *err);

/* The ordering contract for consumers of a collective's device buffer on
 * a stream of their own: the work queued on `stream` (of the
 * communicator's device) so far reads the communicator's buffers, and
 * every later collective waits for it before it writes one. Without it
 * the next collective may overwrite data a kernel still reads: CUDA
 * orders nothing across streams. A host backend needs no call (KVS_OK). */
kvs_status kvs_comm_reads_done(kvs_comm_t comm, void *stream, kvs_error *err);
/* KVS_OK, or the status of the failure that poisoned the communicator. */
kvs_status kvs_comm_health(const struct kvs_comm *comm);
/* The first failure's message ("" while healthy). */
const char *kvs_comm_failure(const struct kvs_comm *comm);

kvs_status kvs_comm_buffer_alloc(kvs_comm_t comm, size_t bytes, kvs_comm_buffer *out,
                                 kvs_error *err);
/* Frees a buffer from kvs_comm_buffer_alloc; a zeroed buffer is a no-op. */
void kvs_comm_buffer_free(kvs_comm_t comm, kvs_comm_buffer *buffer);

/* Collectives: every rank calls the same ones, in the same order, with the
 * same sizes. Failures other than bad arguments poison the communicator. */
kvs_status kvs_comm_broadcast(kvs_comm_t comm, kvs_comm_buffer *buffer, size_t bytes, int root,
                              kvs_error *err);
kvs_status kvs_comm_allreduce_u64(kvs_comm_t comm, kvs_comm_buffer *buffer, size_t count,
                                  kvs_comm_op op, kvs_error *err);
kvs_status kvs_comm_barrier(kvs_comm_t comm, kvs_error *err);
/* kvs_comm_exchange (point to point, not collective) and its transfer,
 * kvs_comm_transfer, are kvshard.h's: the vtable's exchange slot above. */

/* Collective: whether every rank's local part succeeded (local, with its
 * message in local_err). KVS_OK when all did; otherwise every rank returns
 * the status of the lowest failing rank, err holding that rank's message
 * as it wrote it, and *failed_rank (may be NULL) that rank. scratch must
 * hold KVS_COMM_AGREE_BYTES. A communicator failure returns its own
 * status with *failed_rank -1. Two collectives, one when all succeeded. */
#define KVS_COMM_AGREE_BYTES (sizeof(uint64_t) + KVS_ERROR_MESSAGE_MAX)
kvs_status kvs_comm_agree(kvs_comm_t comm, kvs_comm_buffer *scratch, kvs_status local,
                          const kvs_error *local_err, int *failed_rank, kvs_error *err);

/* Tears the group down (when the backend can) after an unrecoverable
 * error, so that peers fail fast instead of waiting out their deadline.
 * Poisons this communicator. With the mpi backend this ends the process. */
void kvs_comm_abort(kvs_comm_t comm, int code);

/* What this communicator has moved: collectives issued (successful or
 * not) and the bytes they covered on this rank; and, apart from them (an
 * exchange is no collective), the exchanges it ran and the bytes their
 * transfers named, sent and received. */
typedef struct kvs_comm_stats {
  uint64_t collectives;
  uint64_t broadcasts;
  uint64_t allreduces;
  uint64_t barriers;
  uint64_t bytes;
  uint64_t exchanges;
  uint64_t exchange_bytes;
} kvs_comm_stats;

void kvs_comm_stats_get(const struct kvs_comm *comm, kvs_comm_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_H */
