#include "shard/comm_mpi.h"

kvs_status kvs_mpi_init(int *world_rank, int *world_size, kvs_error *err) {
  if (world_rank == NULL || world_size == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "world_rank and world_size are required");
  }
  const kvs_mpi_table *t = NULL;
  kvs_status status = kvs_comm_mpi_table(&t, err);
  return status != KVS_OK ? status : t->init(world_rank, world_size, err);
}

kvs_status kvs_mpi_finalize(kvs_error *err) {
  const kvs_mpi_table *t = NULL;
  kvs_status status = kvs_comm_mpi_table(&t, err);
  return status != KVS_OK ? status : t->finalize(err);
}

kvs_status kvs_comm_mpi_create(const void *handle, size_t handle_bytes, int timeout_ms,
                               kvs_comm_t *out, kvs_error *err) {
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output handle is NULL");
  kvs_status status = kvs_comm_check_timeout(timeout_ms, err);
  if (status != KVS_OK) return status;
  const kvs_mpi_table *t = NULL;
  if ((status = kvs_comm_mpi_table(&t, err)) != KVS_OK) return status;
  const kvs_comm_vtable *vtable = NULL;
  void *ctx = NULL;
  int rank = 0, size = 0;
  if (t->vtable_bytes < sizeof(kvs_comm_vtable)) {
    return kvs_error_set(err, KVS_ERR_LIBRARY,
                         "the mpi backend's communicator vtable is %zu bytes, this build's %zu: "
                         "install the backend of the same kvshard build",
                         t->vtable_bytes, sizeof(kvs_comm_vtable));
  }
  status = t->open(handle, handle_bytes, timeout_ms, &vtable, &ctx, &rank, &size, err);
  if (status != KVS_OK) return status;
  return kvs_comm_create(vtable, ctx, rank, size, timeout_ms, out, err);
}
