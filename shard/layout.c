#include "shard/layout.h"

#include <stdint.h>

static kvs_status check_shape(int world, int rank, int tp, int pp, size_t n_layers,
                              kvs_shard_layout *out, kvs_error *err) {
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output layout is NULL");
  if (tp < 1 || pp < 1) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "tp %d and pp %d must both be at least 1",
                         tp, pp);
  }
  if (world < 1 || world > KVS_SHARD_MAX_RANKS || (int64_t)tp * pp != world) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "tp %d x pp %d = %lld ranks, but the group has %d", tp, pp,
                         (long long)tp * pp, world);
  }
  if (rank < 0 || rank >= world) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "rank %d is outside a group of %d", rank,
                         world);
  }
  if (n_layers == 0 || (size_t)pp > n_layers) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%d pipeline stages need at least as many layers, the model has %zu", pp,
                         n_layers);
  }
  return KVS_OK;
}

static void fill(int world, int rank, int tp, int pp, size_t first, size_t end,
                 kvs_shard_layout *out) {
  kvs_shard_layout l = {world, rank, tp, pp, rank % tp, rank / tp, first, end};
  *out = l;
}

kvs_status kvs_shard_layout_make(int world, int rank, int tp, int pp, size_t n_layers,
                                 kvs_shard_layout *out, kvs_error *err) {
  kvs_status status = check_shape(world, rank, tp, pp, n_layers, out, err);
  if (status != KVS_OK) return status;
  size_t stage = (size_t)(rank / tp);
  size_t base = n_layers / (size_t)pp, extra = n_layers % (size_t)pp;
  size_t first = stage * base + (stage < extra ? stage : extra);
  size_t end = first + base + (stage < extra ? 1 : 0);
  fill(world, rank, tp, pp, first, end, out);
  return KVS_OK;
}

kvs_status kvs_shard_layout_make_bounds(int world, int rank, int tp, int pp, size_t n_layers,
                                        const size_t *bounds, kvs_shard_layout *out,
                                        kvs_error *err) {
  kvs_status status = check_shape(world, rank, tp, pp, n_layers, out, err);
  if (status != KVS_OK) return status;
  if (bounds == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "stage bounds are NULL");
  }
  if (bounds[0] != 0 || bounds[pp] != n_layers) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "stage bounds must run from layer 0 to %zu, got %zu to %zu", n_layers,
                         bounds[0], bounds[pp]);
  }
  for (int s = 0; s < pp; s++) {
    if (bounds[s + 1] <= bounds[s]) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "stage %d is empty or reversed: layers [%zu, %zu)", s, bounds[s],
                           bounds[s + 1]);
    }
  }
  int stage = rank / tp;
  fill(world, rank, tp, pp, bounds[stage], bounds[stage + 1], out);
  return KVS_OK;
}
