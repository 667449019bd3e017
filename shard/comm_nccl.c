#include "shard/comm_nccl.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/options.h"

#define DEFAULT_INIT_TIMEOUT_MS 120000

void kvs_comm_nccl_options_init(kvs_comm_nccl_options *options) {
  if (options == NULL) return;
  memset(options, 0, sizeof *options);
  options->size = sizeof *options;
  options->rank = 0;
  options->nranks = 1;
  options->device = 0;
  options->parent = NULL;
  options->init_timeout_ms = DEFAULT_INIT_TIMEOUT_MS;
  options->timeout_ms = KVS_COMM_DEFAULT_TIMEOUT_MS;
}

kvs_status kvs_comm_nccl_unique_id(unsigned char out[KVS_NCCL_UNIQUE_ID_BYTES], kvs_error *err) {
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output is NULL");
  const kvs_nccl_table *t = NULL;
  kvs_status status = kvs_comm_nccl_table(&t, err);
  return status != KVS_OK ? status : t->unique_id(out, KVS_NCCL_UNIQUE_ID_BYTES, err);
}

kvs_status kvs_comm_nccl_device_count(int *count, kvs_error *err) {
  if (count == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "count is NULL");
  const kvs_nccl_table *t = NULL;
  kvs_status status = kvs_comm_nccl_table(&t, err);
  return status != KVS_OK ? status : t->device_count(count, err);
}

static kvs_status check_options(const kvs_comm_nccl_options *o, kvs_error *err) {
  kvs_status status = kvs_comm_check_timeout(o->timeout_ms, err);
  if (status != KVS_OK) return status;
  if (o->init_timeout_ms <= 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "init_timeout_ms must be > 0 (a deadline for the initialisation), got %d",
                         o->init_timeout_ms);
  }
  if (o->device < 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "device must be a CUDA ordinal, got %d",
                         o->device);
  }
  if (o->parent == NULL && (o->nranks < 1 || o->rank < 0 || o->rank >= o->nranks)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "rank %d is outside a group of %d ranks",
                         o->rank, o->nranks);
  }
  return KVS_OK;
}

/* The backend's communicator for args, wrapped. */
static kvs_status open_comm(const kvs_nccl_table *t, const kvs_nccl_open_args *args,
                            kvs_comm_t *out, kvs_error *err) {
  const kvs_comm_vtable *vtable = NULL;
  void *ctx = NULL;
  int rank = 0, nranks = 0;
  if (t->vtable_bytes < sizeof(kvs_comm_vtable)) {
    return kvs_error_set(err, KVS_ERR_LIBRARY,
                         "the nccl backend's communicator vtable is %zu bytes, this build's %zu: "
                         "install the backend of the same kvshard build",
                         t->vtable_bytes, sizeof(kvs_comm_vtable));
  }
  kvs_status status = t->open(args, &vtable, &ctx, &rank, &nranks, err);
  if (status != KVS_OK) return status;
  return kvs_comm_create(vtable, ctx, rank, nranks, args->timeout_ms, out, err);
}

kvs_status kvs_comm_nccl_create(const kvs_comm_nccl_options *options, kvs_comm_t *out,
                                kvs_error *err) {
  if (options == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "options and output are required");
  }
  kvs_comm_nccl_options defaults;
  kvs_comm_nccl_options_init(&defaults);
  kvs_comm_nccl_options o;
  kvs_status status =
      kvs_options_adopt(options, &defaults, sizeof defaults, "kvs_comm_nccl_options_init", &o, err);
  if (status != KVS_OK || (status = check_options(&o, err)) != KVS_OK) return status;
  const kvs_nccl_table *t = NULL;
  if ((status = kvs_comm_nccl_table(&t, err)) != KVS_OK) return status;
  kvs_nccl_open_args args = {
      o.rank,   o.nranks,          o.device,    o.parent != NULL ? NULL : o.unique_id,
      o.parent, o.init_timeout_ms, o.timeout_ms};
  return open_comm(t, &args, out, err);
}

/* ---- bootstrapped over another communicator ---- */

/* This host's identity: a hash of its name (never 0). Two containers on one
 * machine with different host names count as two hosts; each then takes
 * device 0 upwards of what it sees, which is right when each is given its
 * own GPUs (CUDA_VISIBLE_DEVICES, a device plugin), as they usually are. */
static uint64_t host_key(void) {
  char name[256] = "";
  if (gethostname(name, sizeof name) != 0) name[0] = '\0';
  name[sizeof name - 1] = '\0';
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h != 0 ? h : 1;
}

/* How many lower ranks share this rank's host: every rank puts its host
 * key in its own word of one SUM allreduce, so ranks need not be laid out
 * by host. */
static kvs_status local_rank_of(kvs_comm_t bootstrap, int *local_rank, kvs_error *err) {
  int size = kvs_comm_size(bootstrap), rank = kvs_comm_rank(bootstrap);
  kvs_comm_buffer keys = {NULL, NULL, 0, NULL};
  kvs_status status = kvs_comm_buffer_alloc(bootstrap, (size_t)size * sizeof(uint64_t), &keys, err);
  if (status != KVS_OK) return status;
  uint64_t *k = keys.host;
  for (int r = 0; r < size; r++) k[r] = 0;
  k[rank] = host_key();
  status = kvs_comm_allreduce_u64(bootstrap, &keys, (size_t)size, KVS_COMM_SUM, err);
  if (status == KVS_OK) {
    int below = 0;
    for (int r = 0; r < rank; r++) below += k[r] == k[rank];
    *local_rank = below;
  }
  kvs_comm_buffer_free(bootstrap, &keys);
  return status;
}

/* Local: the table and this rank's device. */
static kvs_status choose_device(kvs_comm_t bootstrap, int asked, const kvs_nccl_table **t,
                                int *device, kvs_error *err) {
  int local_rank = 0, count = 0;
  kvs_status status = local_rank_of(bootstrap, &local_rank, err);
  if (status != KVS_OK) return status;
  if ((status = kvs_comm_nccl_table(t, err)) != KVS_OK ||
      (status = (*t)->device_count(&count, err)) != KVS_OK) {
    return status;
  }
  if (asked >= count) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "device %d asked for, but CUDA sees %d device%s", asked, count,
                         count == 1 ? "" : "s");
  }
  *device = asked >= 0 ? asked : local_rank % count;
  return KVS_OK;
}

/* Collective: the step's verdict, every rank failing with the lowest
 * failing rank's message. */
static kvs_status agree(kvs_comm_t bootstrap, kvs_comm_buffer *scratch, const char *stage,
                        kvs_status local, const kvs_error *local_err, kvs_error *err) {
  int failed = -1;
  kvs_error reason;
  kvs_error_clear(&reason);
  kvs_status status = kvs_comm_agree(bootstrap, scratch, local, local_err, &failed, &reason);
  if (status == KVS_OK) return KVS_OK;
  if (failed < 0) return kvs_error_set(err, status, "%s", reason.message);
  return kvs_error_set(err, status, "nccl communicator %s failed on rank %d: %s", stage, failed,
                       reason.message);
}

kvs_status kvs_comm_nccl_bootstrap(kvs_comm_t bootstrap, int device, int init_timeout_ms,
                                   int timeout_ms, kvs_comm_t *out, kvs_error *err) {
  if (bootstrap == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "bootstrap and output are required");
  }
  kvs_comm_buffer scratch = {NULL, NULL, 0, NULL};
  size_t bytes = KVS_COMM_AGREE_BYTES > KVS_NCCL_UNIQUE_ID_BYTES ? KVS_COMM_AGREE_BYTES
                                                                 : KVS_NCCL_UNIQUE_ID_BYTES;
  kvs_status status = kvs_comm_buffer_alloc(bootstrap, bytes, &scratch, err);
  if (status != KVS_OK) return status;
  kvs_error local_err;
  kvs_error_clear(&local_err);
  const kvs_nccl_table *t = NULL;
  kvs_nccl_open_args args = {kvs_comm_rank(bootstrap),
                             kvs_comm_size(bootstrap),
                             -1,
                             NULL,
                             NULL,
                             init_timeout_ms,
                             timeout_ms};
  kvs_status local = init_timeout_ms > 0
                         ? kvs_comm_check_timeout(timeout_ms, &local_err)
                         : kvs_error_set(&local_err, KVS_ERR_INVALID_ARGUMENT,
                                         "init_timeout_ms must be > 0, got %d", init_timeout_ms);
  if (local == KVS_OK) local = choose_device(bootstrap, device, &t, &args.device, &local_err);
  if ((status = agree(bootstrap, &scratch, "device choice", local, &local_err, err))) goto done;
  /* Rank 0's id, with its verdict agreed first so no rank waits in NCCL
   * for an id that never came. */
  unsigned char id[KVS_NCCL_UNIQUE_ID_BYTES];
  local = args.rank == 0 ? t->unique_id(id, sizeof id, &local_err) : KVS_OK;
  if ((status = agree(bootstrap, &scratch, "unique id", local, &local_err, err))) goto done;
  if (args.rank == 0) memcpy(scratch.host, id, sizeof id);
  if ((status = kvs_comm_broadcast(bootstrap, &scratch, sizeof id, 0, err))) goto done;
  memcpy(id, scratch.host, sizeof id);
  args.unique_id = id;
  kvs_comm_t comm = NULL;
  local = open_comm(t, &args, &comm, &local_err);
  /* After the last setup step: a rank that failed fails everyone now. */
  status = agree(bootstrap, &scratch, "setup", local, &local_err, err);
  if (status != KVS_OK) {
    if (comm != NULL) kvs_comm_abort(comm, 1);
    kvs_comm_destroy(comm);
    goto done;
  }
  *out = comm;
done:
  kvs_comm_buffer_free(bootstrap, &scratch);
  return status;
}
