/* kvshard with NCCL's types: for engines that hold an ncclComm_t or an
 * ncclUniqueId. The library reaches NCCL only through its NCCL backend
 * (libkvshard-nccl.so.1); these are typed forms of kvshard.h's calls.
 *
 *   cc engine.c $(pkg-config --cflags --libs kvshard) -I$CUDA_HOME/include */
#ifndef KVS_KVSHARD_NCCL_H
#define KVS_KVSHARD_NCCL_H

#include <nccl.h>
#include <string.h>

#include "kvshard.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
static_assert(sizeof(ncclUniqueId) == KVS_NCCL_UNIQUE_ID_BYTES, "ncclUniqueId size");
#else
_Static_assert(sizeof(ncclUniqueId) == KVS_NCCL_UNIQUE_ID_BYTES, "ncclUniqueId size");
#endif

/* A fresh id, for one rank to share over the engine's own group. */
static inline kvs_status kvs_nccl_unique_id(ncclUniqueId *id, kvs_error *err) {
  return kvs_comm_nccl_unique_id((unsigned char *)id, err);
}

/* Collective: every rank joins kvshard's communicator from the shared id,
 * on its device. */
static inline kvs_status kvs_comm_nccl_from_id(const ncclUniqueId *id, int rank, int nranks,
                                               int device, kvs_comm_t *out, kvs_error *err) {
  kvs_comm_nccl_options o;
  kvs_comm_nccl_options_init(&o);
  memcpy(o.unique_id, id, sizeof *id);
  o.rank = rank;
  o.nranks = nranks;
  o.device = device;
  return kvs_comm_nccl_create(&o, out, err);
}

/* Collective over the engine's communicator: kvshard's own, split from it
 * (ncclCommSplit), on `device` (the engine's). The engine's is untouched. */
static inline kvs_status kvs_comm_nccl_split(ncclComm_t engine, int device, kvs_comm_t *out,
                                             kvs_error *err) {
  kvs_comm_nccl_options o;
  kvs_comm_nccl_options_init(&o);
  o.parent = (void *)engine;
  o.device = device;
  return kvs_comm_nccl_create(&o, out, err);
}

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVSHARD_NCCL_H */
