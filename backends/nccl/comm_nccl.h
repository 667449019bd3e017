/* The NCCL backend: device buffers, one CUDA stream, one communicator.
 *
 * Two ways in. Create: the ranks exchange NCCL's unique id over a
 * bootstrap communicator (the mpi backend across processes and nodes, or
 * any other kvs_comm), then build a nonblocking communicator
 * (ncclConfig_t.blocking = 0) and poll its initialisation against the
 * deadline. Adopt: an engine that already holds an ncclComm_t and a stream
 * passes them in; the backend uses them and never aborts, finalizes or
 * destroys them.
 *
 * Every call runs with the communicator's device current, from whichever
 * thread makes it, and then puts the thread's context back as it was --
 * none, for a thread that never chose a device (no context is created on
 * GPU 0 behind the caller's back; backends/cuda/cuda_device.h).
 *
 * Every collective stages host -> device on the stream, runs on the
 * device, stages back, and then polls the stream and
 * ncclCommGetAsyncError until it is done, NCCL reports an error, or the
 * deadline passes. On any failure -- NCCL's, a CUDA call's while staging
 * or reading back, or the deadline -- the kvs_comm is poisoned and, in
 * create mode, the communicator aborted (ncclCommAbort: nothing more runs
 * on it, and peers in a collective with this rank get an error instead of
 * waiting out their deadline). An adopted communicator is left to the
 * engine: the error says so, and the engine must abort it (a collective
 * may still be queued on its stream) before reusing it or destroying the
 * kvs_comm, whose buffers' cudaFree waits for that stream.
 *
 * On a machine with no usable CUDA device, creation fails on every rank
 * with KVS_ERR_UNSUPPORTED whose message says why (the cudaGetDeviceCount
 * result); the ranks agree on that over the bootstrap first, so none is
 * left waiting in NCCL's initialisation. */
#ifndef KVS_SHARD_COMM_NCCL_H
#define KVS_SHARD_COMM_NCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stddef.h>

#include "core/status.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_comm_nccl_options {
  size_t size; /* sizeof(kvs_comm_nccl_options) */
  /* CUDA ordinal; -1: the node-local rank (the ranks whose host name
   * matches, in rank order, found over the bootstrap) modulo the visible
   * devices, so ranks dealt round-robin over nodes get distinct GPUs. */
  int device;
  ncclComm_t comm;     /* adopt this communicator (not owned); NULL: create one */
  cudaStream_t stream; /* adopt this stream (not owned); NULL: create a non-blocking one */
  int timeout_ms;      /* deadline of every wait; > 0 */
} kvs_comm_nccl_options;

#define KVS_COMM_NCCL_OPTIONS_INIT \
  { sizeof(kvs_comm_nccl_options), -1, NULL, NULL, KVS_COMM_DEFAULT_TIMEOUT_MS }

/* Create mode needs bootstrap (a communicator over the same ranks; it is
 * used only during this call). Adopt mode ignores it (it may be NULL). */
kvs_status kvs_comm_nccl_create(const kvs_comm_nccl_options *options, kvs_comm_t bootstrap,
                                kvs_comm_t *out, kvs_error *err);

/* The communicator's stream and device, for kernels that consume a
 * collective's device buffer (the device binding table). Fails with
 * KVS_ERR_INVALID_ARGUMENT on a communicator of another backend. */
kvs_status kvs_comm_nccl_stream(const struct kvs_comm *comm, cudaStream_t *stream, int *device,
                                kvs_error *err);

/* The ordering contract for consumers of a collective's device buffer on
 * a stream of their own (on_apply's device_entries, say): the work queued
 * on `stream` so far reads the communicator's buffers, and every later
 * collective waits for it before it writes one. Without the call, the next
 * step's broadcast may overwrite the entries while that kernel still reads
 * them: CUDA orders nothing across streams. Call it after queuing the
 * reads, before the next collective. A consumer on the communicator's own
 * stream (kvs_comm_nccl_stream) needs no call. `stream` must belong to the
 * communicator's device. */
kvs_status kvs_comm_nccl_reads_done(kvs_comm_t comm, cudaStream_t stream, kvs_error *err);


#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_NCCL_H */
