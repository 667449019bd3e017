#include "plan/memory_inputs.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

/* Why each input cannot be above the memory that holds it: said after the
 * two figures, so the reader sees which rule the typo broke. */
static const char *const kWhy[KVS_MEMORY_INPUT_COUNT] = {
    [KVS_MEMORY_GPU_MEMORY] = "the GPU has no more memory than that",
    [KVS_MEMORY_FREE_BEFORE_LOAD] =
        "memory free before the weights load is part of the GPU's memory",
    [KVS_MEMORY_BUDGET] = "a KV budget is carved from the GPU's memory",
    [KVS_MEMORY_RESERVE] = "the reserve is taken off the GPU's memory",
    [KVS_MEMORY_WEIGHTS] = "the weights load into the GPU's memory",
};

/* Bytes as people compare them here: GiB from 1 GiB up (so a 1379GiB typo
 * reads back as 1379.00 GiB), MiB from 1 MiB, else bytes. */
static void format_size(uint64_t bytes, char *buf, size_t len) {
  if (bytes >= (UINT64_C(1) << 30)) {
    snprintf(buf, len, "%.2f GiB", (double)bytes / (double)(UINT64_C(1) << 30));
  } else if (bytes >= (UINT64_C(1) << 20)) {
    snprintf(buf, len, "%.2f MiB", (double)bytes / (double)(UINT64_C(1) << 20));
  } else {
    snprintf(buf, len, "%" PRIu64 " bytes", bytes);
  }
}

/* Input `in`'s value for GPU i (its list's entry, else its one value); false
 * when it has none there. */
static bool value_at(const kvs_memory_input *in, size_t i, uint64_t *out) {
  if (in->name == NULL) return false;
  if (in->per_gpu == NULL) {
    *out = in->bytes;
    return true;
  }
  if (i >= in->n_per_gpu) return false;
  *out = in->per_gpu[i];
  return true;
}

/* "--budget 200.00 GiB" or "--budget-per-gpu's 200.00 GiB for GPU 3". */
static void describe(const kvs_memory_input *in, size_t i, uint64_t bytes, char *buf, size_t len) {
  char size[40];
  format_size(bytes, size, sizeof size);
  if (in->per_gpu == NULL) {
    snprintf(buf, len, "%s %s", in->name, size);
  } else {
    snprintf(buf, len, "%s's %s for GPU %zu", in->name, size, i);
  }
}

static kvs_status refuse(const kvs_memory_input *in, kvs_memory_input_id id, size_t i,
                         uint64_t bytes, const char *above, const char *why, kvs_error *err) {
  char subject[160];
  describe(&in[id], i, bytes, subject, sizeof subject);
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s is more than %s: %s", subject, above,
                       why != NULL ? why : kWhy[id]);
}

/* Input `id` against a one-value input `holder` (--gpu-memory or
 * --free-before-load) at every entry it has. */
static kvs_status against_input(const kvs_memory_input *in, kvs_memory_input_id id,
                                kvs_memory_input_id holder, const char *why, kvs_error *err) {
  uint64_t limit;
  if (id == holder || !value_at(&in[holder], 0, &limit) || in[holder].per_gpu != NULL) {
    return KVS_OK;
  }
  size_t n = in[id].per_gpu != NULL ? in[id].n_per_gpu : 1;
  for (size_t i = 0; i < n; i++) {
    uint64_t bytes;
    if (!value_at(&in[id], i, &bytes) || bytes <= limit) continue;
    char above[160];
    describe(&in[holder], 0, limit, above, sizeof above);
    return refuse(in, id, i, bytes, above, why, err);
  }
  return KVS_OK;
}

/* GPU i's own memory: what CUDA measured as its total, else what its
 * model's driver reports; false for a GPU of neither. */
static bool machine_memory(const kvs_gpu_info *gpu, uint64_t *out, const char **source) {
  if (gpu->cuda_device >= 0 && gpu->total_bytes > 0) {
    *out = gpu->total_bytes, *source = "its total, as CUDA measured it";
    return true;
  }
  *out = kvs_gpu_known_memory_bytes(gpu->vendor_id, gpu->device_id, NULL);
  *source = "the total its driver reports";
  return *out > 0;
}

/* Every input against the GPU's own memory; per-GPU lists are read at
 * its index (its place in the planner's list, also when the GPU is a
 * rank's copy checked alone). With --gpu-memory given, it
 * alone stands for the machine's (the rest were held to it above). */
static kvs_status against_gpu(const kvs_memory_input *in, const kvs_gpu_info *gpu, kvs_error *err) {
  uint64_t memory;
  const char *source;
  if (!machine_memory(gpu, &memory, &source)) return KVS_OK;
  bool replaced = in[KVS_MEMORY_GPU_MEMORY].name != NULL;
  for (int id = 0; id < KVS_MEMORY_INPUT_COUNT; id++) {
    if (replaced && id != KVS_MEMORY_GPU_MEMORY) continue;
    uint64_t bytes;
    if (!value_at(&in[id], gpu->index, &bytes) || bytes <= memory) continue;
    char size[40], above[200];
    format_size(memory, size, sizeof size);
    snprintf(above, sizeof above, "the memory of GPU %zu (%s), %s (%s)", gpu->index, gpu->pci_busid,
             size, source);
    return refuse(in, (kvs_memory_input_id)id, gpu->index, bytes, above, NULL, err);
  }
  return KVS_OK;
}

kvs_status kvs_memory_host_check(const char *name, uint64_t host_bytes, const uint64_t *memory,
                                 const char *const *labels, size_t n_machines, kvs_error *err) {
  if (name == NULL || (memory == NULL && n_machines > 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         name == NULL ? "name" : "memory");
  }
  for (size_t k = 0; k < n_machines; k++) {
    if (memory[k] == 0 || host_bytes <= memory[k]) continue;
    char bytes[40], have[40];
    format_size(host_bytes, bytes, sizeof bytes);
    format_size(memory[k], have, sizeof have);
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s %s is more than the memory of host %zu (%s), %s (as hwloc reports "
                         "it): the host tier is pinned in the host's memory",
                         name, bytes, k,
                         labels != NULL && labels[k] != NULL ? labels[k] : "unnamed", have);
  }
  return KVS_OK;
}

kvs_status kvs_memory_inputs_check(const kvs_memory_input *in, const kvs_gpu_info *gpus,
                                   size_t n_gpus, kvs_error *err) {
  if (in == NULL || (gpus == NULL && n_gpus > 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         in == NULL ? "inputs" : "gpus");
  }
  static const kvs_memory_input_id held[] = {KVS_MEMORY_FREE_BEFORE_LOAD, KVS_MEMORY_BUDGET,
                                             KVS_MEMORY_RESERVE, KVS_MEMORY_WEIGHTS};
  kvs_status status = KVS_OK;
  for (size_t k = 0; k < sizeof held / sizeof held[0] && status == KVS_OK; k++) {
    status = against_input(in, held[k], KVS_MEMORY_GPU_MEMORY, NULL, err);
  }
  if (status == KVS_OK) {
    status = against_input(in, KVS_MEMORY_WEIGHTS, KVS_MEMORY_FREE_BEFORE_LOAD,
                           "the weights load into the memory free before load", err);
  }
  for (size_t g = 0; g < n_gpus && status == KVS_OK; g++) status = against_gpu(in, &gpus[g], err);
  return status;
}
