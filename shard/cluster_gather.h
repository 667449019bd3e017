/* Step 1 for a launched group of ranks: the cluster they run on, learned
 * from the ranks themselves.
 *
 * A planner that is not one of the ranks (kvplan) must be told every
 * host's topology. The ranks need not: each reads its own machine (live
 * hwloc, or whatever single source it is given), names its host, and one
 * exchange gives every rank every host's GPU list. Ranks that share a host
 * name and kernel boot id (so that same-named containers on two machines
 * stay two hosts) are one host; hosts are numbered in the order of their
 * lowest rank, so a launcher that places ranks in blocks (mpirun --map-by
 * ppr:G:node, srun --distribution=block) numbers them as the plan walks
 * them. A
 * heterogeneous cluster then plans from what each machine really has.
 *
 * The same call serves a cluster that is described instead (a topology
 * list, or hosts > 0 copies of one topology): every rank opens it and the
 * ranks check that they opened the same one. Either way every rank ends
 * with an identical GPU list, or every rank fails with the same error. */
#ifndef KVS_SHARD_CLUSTER_GATHER_H
#define KVS_SHARD_CLUSTER_GATHER_H

#include <stddef.h>

#include "core/status.h"
#include "plan/cluster.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A host name's bytes at most, with its NUL. */
#define KVS_HOST_NAME_MAX 256

/* This machine's name (gethostname) into buf[cap]. */
kvs_status kvs_host_name(char *buf, size_t cap, kvs_error *err);

/* Collective over comm. topology and hosts as kvs_cluster_open's spec and
 * n_hosts; hosts 0 with a single topology (not a list) discovers the
 * hosts: each rank opens topology (NULL: live, the bundled server where no
 * GPU is visible) and names its host by host (NULL: kvs_host_name; 1 to
 * KVS_HOST_NAME_MAX - 1 printable characters without spaces, not starting
 * with '-'). Refused,
 * on every rank alike, naming the rank and host at fault: ranks of one
 * host that see different GPUs (a per-rank CUDA_VISIBLE_DEVICES); a host
 * whose ranks are not one block in rank order; a host with more ranks
 * than GPUs, or with fewer when a later host has ranks (the plan fills a
 * machine before the next); more than KVS_MAX_HOSTS hosts; ranks that
 * differ on whether they discover.
 * With discovery the cluster knows this rank's host
 * (kvs_cluster_own_host) and holds only that host's topology; other hosts
 * are their GPU lists. Over several hosts a host is labelled "host
 * (topology label)", on one host by its topology alone. A local failure
 * on any rank fails every rank with the lowest failing rank's status and
 * message. note as kvs_cluster_open's, for this rank's own topology. */
kvs_status kvs_cluster_gather(kvs_comm_t comm, const char *topology, size_t hosts, const char *host,
                              kvs_cluster_t *out, char *note, size_t note_cap, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_CLUSTER_GATHER_H */
