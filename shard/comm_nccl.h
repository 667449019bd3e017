/* Communicators on NCCL, through the NCCL backend (libkvshard-nccl.so.1,
 * loaded by backends/registry.h): nothing here names an NCCL or CUDA type, so
 * the core builds and loads without either.
 *
 * Three ways in, all collective over the ranks they join:
 *   - from a unique id: one rank mints it (kvs_comm_nccl_unique_id), the
 *     engine shares it over its own group (torch.distributed, MPI), every
 *     rank creates its communicator on its device (SGLang's and vLLM's
 *     own bootstrap);
 *   - split from an engine's ncclComm_t (ncclCommSplit): kvshard's
 *     traffic gets a communicator and a stream of its own, never
 *     interleaved with the engine's collectives on the engine's stream;
 *   - bootstrapped over another kvs communicator (MPI, loopback): the
 *     ranks agree that each has a device, rank 0's id travels over it,
 *     and after the last setup step they agree again, so one rank's
 *     failure fails every rank at once instead of leaving them waiting.
 *
 * The backend's communicator is nonblocking (its initialisation is polled
 * against init_timeout_ms), runs its collectives on a stream of its own on
 * `device`, stages through pinned host memory, and polls its own stream
 * and ncclCommGetAsyncError against timeout_ms; on any failure it aborts
 * the NCCL communicator (peers then fail instead of waiting) and poisons
 * the kvs communicator. An exchange (kvs_comm_exchange) is one
 * ncclGroupStart/End of ncclSend and ncclRecv on the engine's device
 * memory, on the same stream, waited for the same way. */
#ifndef KVS_SHARD_COMM_NCCL_H
#define KVS_SHARD_COMM_NCCL_H

#include <stddef.h>

#include "backends/nccl/entry.h"
#include "core/status.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kvs_comm_nccl_options (with KVS_NCCL_UNIQUE_ID_BYTES, sizeof
 * ncclUniqueId), kvs_comm_nccl_options_init, kvs_comm_nccl_unique_id and
 * kvs_comm_nccl_create are kvshard.h's. kvs_comm_nccl_create is
 * collective over the ranks of the id (or the parent); a missing NCCL
 * backend, libnccl.so.2 or libcudart is KVS_ERR_LIBRARY naming the library
 * and where it was looked for; a machine without the device is
 * KVS_ERR_UNSUPPORTED saying why. */

/* Collective over bootstrap: every rank of it joins one NCCL communicator
 * on `device` (-1: its rank among the ranks of its host, modulo the
 * devices it sees). Fails on every rank alike, naming the lowest failing
 * rank. bootstrap is used only during the call. */
kvs_status kvs_comm_nccl_bootstrap(kvs_comm_t bootstrap, int device, int init_timeout_ms,
                                   int timeout_ms, kvs_comm_t *out, kvs_error *err);

/* How many CUDA devices the NCCL backend sees (KVS_ERR_UNSUPPORTED saying
 * why when none; KVS_ERR_LIBRARY when the backend cannot be loaded). */
kvs_status kvs_comm_nccl_device_count(int *count, kvs_error *err);

/* The backend's entry table: backends/nccl/entry.h. */

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_NCCL_H */
