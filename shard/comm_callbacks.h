/* The "callbacks" backend: a communicator whose collectives are an
 * engine's own (torch.distributed through Python's kvshard.torch_comm, a
 * framework's group in C), handed over as function pointers. A host
 * backend: buffers are plain host memory, so any group that can move host
 * bytes can carry a node's steps. The engine's callbacks are untrusted:
 * what they return is read as a status only when it is one, and every
 * failure, whatever its status, poisons the communicator (the wrapper
 * spares argument errors, but a callback's failure may leave ranks
 * anywhere in the collective). The optional `exchange` callback (a struct
 * of an older size has none) carries kvs_comm_exchange's batches; without
 * it the communicator has no exchange slot. */
#ifndef KVS_SHARD_COMM_CALLBACKS_H
#define KVS_SHARD_COMM_CALLBACKS_H

#include "core/status.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kvs_comm_callbacks, KVS_COMM_REDUCE_* and kvs_comm_callbacks_create are
 * kvshard.h's. */

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_CALLBACKS_H */
