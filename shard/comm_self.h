/* The one-rank backend: every collective is the identity, nothing waits;
 * an exchange copies each send to itself into the receive it matches.
 * For single-GPU serving and for tests of the runtime without a group. */
#ifndef KVS_SHARD_COMM_SELF_H
#define KVS_SHARD_COMM_SELF_H

#include "core/status.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kvs_comm_self_create (kvshard.h): a communicator of size 1, rank 0, on
 * host buffers. */

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_SELF_H */
