/* kvsim's simulation of one rank over a communicator, shared by kvsim
 * (MPI processes) and kvsim_local (threads over the loopback backend).
 *
 * Each rank builds a node (shard/node.h) on the flags' topology, budgets
 * and device, runs the same seeded serving workload through it (the
 * leader binds; every step's bindings reach every rank's pool and tables
 * in one broadcast), computes every running request's ring context on the
 * tables and checks it against its pool's, and rank 0 prints one JSON
 * object as the last line of stdout. */
#ifndef KVS_TOOLS_KVSIM_RUN_H
#define KVS_TOOLS_KVSIM_RUN_H

#include "shard/comm.h"
#include "tools/kvsim_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs rank kvs_comm_rank(comm) of the simulation; returns its exit
 * status (KVSIM_EXIT_*). threads: the ranks share this process (no
 * signal handlers, no self-inflicted kills). */
int kvsim_simulate(kvs_comm_t comm, const kvsim_args *args, bool threads);

/* Whether the NCCL backend and its libraries load (KVS_ERR_LIBRARY naming
 * what is missing and where it was looked for): asked first, so a machine
 * without libnccl says so whatever else it lacks. With --backend nccl the
 * node makes its own NCCL communicator on its plan's GPU over the
 * launcher's (kvs_node_options.step_backend). */
kvs_status kvsim_nccl_ready(kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_KVSIM_RUN_H */
