/* An in-process group: `size` ranks in one process, one thread each,
 * meeting at a mutex and a condition variable. It moves bytes exactly as a
 * real backend would, with the same deadlines and failure semantics, so
 * the runtime's multi-rank behaviour (bisection, epochs, a peer that stops
 * answering, an abort) is testable without processes.
 *
 * Collectives are matched by order: every rank's k-th call meets the
 * others' k-th call, and a mismatch in kind, size, root or op fails the
 * group naming both ranks' calls. A rank that times out (or aborts)
 * fails the whole group: every waiter wakes with that message, because a
 * late peer could otherwise complete a collective into a buffer whose
 * owner has given up on it.
 *
 * Point to point (kvs_comm_exchange): each rank posts its whole batch to
 * the group, and a transfer completes, copied under the group's lock,
 * when its counterpart is posted (the k-th send from A to B with B's k-th
 * receive from A; a rank's send to itself with its own receive). A size
 * mismatch fails the group naming both transfers; a rank whose batch is
 * not complete by its deadline fails the group naming the transfers left
 * and their peers, as a collective's timeout does, and its posts are
 * withdrawn so no peer writes into them afterwards. */
#ifndef KVS_SHARD_COMM_LOOPBACK_H
#define KVS_SHARD_COMM_LOOPBACK_H

#include "core/status.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kvs_comm_loopback_group_create, kvs_comm_loopback_group_destroy (which
 * drops the creator's reference: the group lives until its last member
 * communicator is destroyed too) and kvs_comm_loopback_create (one rank's
 * communicator, used by one thread) are kvshard.h's. */

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_COMM_LOOPBACK_H */
