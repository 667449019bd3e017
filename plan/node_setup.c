#include "plan/node_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/memory_inputs.h"
#include "topology/source.h"

/* ---- step 1 ---- */

static kvs_status open_source(const kvs_topology_source *source,
                              const kvs_topology_options *options, kvs_topology_t *out,
                              kvs_error *err) {
  kvs_topology_t topo = NULL;
  kvs_status status = kvs_topology_create(source, options, &topo, err);
  if (status != KVS_OK) return status;
  if (kvs_topology_gpu_count(topo) == 0) {
    kvs_error_set(err, KVS_ERR_NOT_FOUND,
                  "topology '%s' has no NVIDIA GPU (vendor 0x10de, class display/3D)",
                  kvs_topology_label(topo));
    kvs_topology_destroy(topo);
    return KVS_ERR_NOT_FOUND;
  }
  *out = topo;
  return KVS_OK;
}

kvs_status kvs_host_topology_open(const char *spec, kvs_topology_t *out, char *note,
                                  size_t note_cap, kvs_error *err) {
  return kvs_topology_open_spec(spec, true, out, note, note_cap, err);
}

kvs_status kvs_topology_open_spec(const char *spec, bool measure_free, kvs_topology_t *out,
                                  char *note, size_t note_cap, kvs_error *err) {
  kvs_topology_options options = KVS_TOPOLOGY_OPTIONS_INIT;
  options.measure_free = measure_free;
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (note != NULL && note_cap > 0) note[0] = '\0';
  kvs_topology_source source;
  if (spec == NULL || strcmp(spec, "auto") == 0) {
    /* A machine hwloc's environment replaces is refused, never planned as
     * the bundled stand-in: on a real box that would budget the stand-in's
     * nominal memory, above what its own GPUs hold. */
    kvs_status replaced = kvs_topology_live_environment_check(err);
    if (replaced != KVS_OK) return replaced;
    source = kvs_topology_source_live();
    kvs_topology_t live = NULL;
    kvs_error live_err;
    kvs_error_clear(&live_err);
    kvs_status live_status = kvs_topology_create(&source, &options, &live, &live_err);
    if (live_status == KVS_OK && kvs_topology_cuda_used(live) && kvs_topology_gpu_count(live) > 0) {
      *out = live;
      return KVS_OK;
    }
    /* CUDA there but broken (backends/registry.h): never planned as a machine
     * without a GPU. */
    if (live_status == KVS_ERR_LIBRARY)
      return kvs_error_set(err, live_status, "%s", live_err.message);
    if (note != NULL && note_cap > 0) {
      snprintf(note, note_cap,
               "no GPU visible to CUDA (%s); planning the %s with each GPU's memory as its "
               "driver reports it (an H200: 143,771 MiB, 140.40 GiB)",
               live != NULL ? kvs_topology_cuda_note(live) : live_err.message,
               kvs_bundled_topology_description);
    }
    kvs_topology_destroy(live);
    source = kvs_topology_source_bundled();
  } else if (strcmp(spec, "live") == 0) {
    source = kvs_topology_source_live();
  } else if (strcmp(spec, "bundled") == 0) {
    source = kvs_topology_source_bundled();
  } else {
    source = kvs_topology_source_xml_file(spec);
  }
  return open_source(&source, &options, out, err);
}

/* ---- step 3 ---- */

static kvs_status check_request(const kvs_budget_request *r, kvs_error *err) {
  if (r->budget_bytes != 0 && r->budget_per_gpu != NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "give one budget for every GPU or one per GPU, not both");
  }
  if (r->weights_bytes != 0 && r->weights_per_gpu != NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "give one weight size for every GPU or one per GPU, not both");
  }
  if ((r->weights_bytes != 0 || r->weights_per_gpu != NULL) &&
      (r->budget_bytes != 0 || r->budget_per_gpu != NULL)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "weights are taken off measured or nominal memory; an explicit budget "
                         "is the KV bytes themselves");
  }
  if (!(r->memory_ratio > 0.0 && r->memory_ratio <= 1.0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "memory ratio must be in (0, 1], got %g",
                         r->memory_ratio);
  }
  return KVS_OK;
}

/* The budget of one GPU from the measured, given (memory_bytes, 0: none)
 * or known memory: the rule's three sources in order. */
static kvs_status memory_budget(const kvs_budget_request *request, const kvs_gpu_info *gpu,
                                uint64_t weights, uint64_t memory_bytes, kvs_memory_budget *out,
                                kvs_error *err) {
  if (memory_bytes != 0) {
    /* The caller's figure for every GPU (kvplan --gpu-memory), above what
     * was measured or what the table knows: nothing is measured then. */
    return kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, memory_bytes, request->memory_ratio, weights,
                                  request->reserve_bytes, out, err);
  }
  if (gpu->cuda_device >= 0 && gpu->free_bytes > 0) {
    return kvs_memory_budget_rule(KVS_BUDGET_MEASURED, gpu->free_bytes, request->memory_ratio,
                                  weights, request->reserve_bytes, out, err);
  }
  uint64_t known = kvs_gpu_known_memory_bytes(gpu->vendor_id, gpu->device_id, NULL);
  if (known == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "GPU %zu (%s, %s, PCI %04x:%04x) has no measured memory and is not a "
                         "model whose memory kvshard knows: give its budget (--budget or "
                         "--budget-per-gpu) or its memory (--gpu-memory)",
                         gpu->index, gpu->pci_busid, gpu->model[0] ? gpu->model : "model unknown",
                         gpu->vendor_id, gpu->device_id);
  }
  return kvs_memory_budget_rule(KVS_BUDGET_NOMINAL, known, request->memory_ratio, weights,
                                request->reserve_bytes, out, err);
}

/* The pointers every budget call needs, refused naming the caller. */
static kvs_status check_pointers(const char *fn, const kvs_budget_request *request,
                                 const kvs_gpu_info *gpus, const kvs_memory_budget *out,
                                 kvs_error *err) {
  const char *missing = request == NULL ? "request"
                        : gpus == NULL  ? "gpus"
                        : out == NULL   ? "out"
                                        : NULL;
  if (missing != NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, missing);
  }
  return KVS_OK;
}

static kvs_status gpu_budget(const kvs_budget_request *request, const kvs_gpu_info *gpus,
                             size_t n_gpus, size_t index, uint64_t memory_bytes,
                             kvs_memory_budget *out, kvs_error *err) {
  if (index >= n_gpus) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "GPU %zu of %zu", index, n_gpus);
  }
  kvs_status status = check_request(request, err);
  if (status != KVS_OK) return status;
  const kvs_gpu_info *gpu = &gpus[index];
  uint64_t weights = request->weights_per_gpu != NULL && index < request->n_weights_per_gpu
                         ? request->weights_per_gpu[index]
                         : request->weights_bytes;
  if (request->budget_per_gpu != NULL) {
    if (request->n_budget_per_gpu != n_gpus) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "%zu per-GPU budgets for %zu GPUs: give one for every GPU, in index "
                           "order",
                           request->n_budget_per_gpu, n_gpus);
    }
    status = kvs_memory_budget_explicit(request->budget_per_gpu[index], out, err);
  } else if (request->budget_bytes != 0) {
    status = kvs_memory_budget_explicit(request->budget_bytes, out, err);
  } else if (request->weights_per_gpu != NULL && request->n_weights_per_gpu != n_gpus) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%zu per-GPU weights for %zu GPUs: give one for every GPU, in index "
                         "order",
                         request->n_weights_per_gpu, n_gpus);
  } else {
    status = memory_budget(request, gpu, weights, memory_bytes, out, err);
  }
  /* The unknown-model refusal names the GPU itself. */
  if (status != KVS_OK && status != KVS_ERR_INVALID_ARGUMENT && err != NULL) {
    kvs_error inner = *err;
    kvs_error_set(err, status, "GPU %zu (%s): %s", gpu->index, gpu->pci_busid, inner.message);
  }
  return status;
}

/* The request's bytes against each GPU's own memory (memory_inputs.h),
 * named by the node's flags. Not with memory_bytes given: that figure is
 * the caller's (kvplan --gpu-memory), whose flags it checks itself, and the
 * default reserve a flag never named would then be held to it. */
static kvs_status check_inputs(const kvs_budget_request *r, uint64_t memory_bytes,
                               const kvs_gpu_info *gpus, size_t n_gpus, kvs_error *err) {
  if (memory_bytes != 0) return KVS_OK;
  kvs_memory_input in[KVS_MEMORY_INPUT_COUNT] = {{0}};
  if (r->budget_per_gpu != NULL) {
    in[KVS_MEMORY_BUDGET] =
        (kvs_memory_input){"--budget-per-gpu", 0, r->budget_per_gpu, r->n_budget_per_gpu};
  } else if (r->budget_bytes != 0) {
    in[KVS_MEMORY_BUDGET] = (kvs_memory_input){"--budget", r->budget_bytes, NULL, 0};
  }
  in[KVS_MEMORY_RESERVE] = (kvs_memory_input){"--reserve", r->reserve_bytes, NULL, 0};
  if (r->weights_per_gpu != NULL) {
    in[KVS_MEMORY_WEIGHTS] =
        (kvs_memory_input){"--weights-per-gpu", 0, r->weights_per_gpu, r->n_weights_per_gpu};
  } else if (r->weights_bytes != 0) {
    in[KVS_MEMORY_WEIGHTS] = (kvs_memory_input){"--weights", r->weights_bytes, NULL, 0};
  }
  return kvs_memory_inputs_check(in, gpus, n_gpus, err);
}

kvs_status kvs_node_gpu_budget(const kvs_budget_request *request, const kvs_gpu_info *gpus,
                               size_t n_gpus, size_t index, kvs_memory_budget *out,
                               kvs_error *err) {
  kvs_status status = check_pointers(__func__, request, gpus, out, err);
  if (status == KVS_OK && index < n_gpus) status = check_inputs(request, 0, gpus, n_gpus, err);
  return status != KVS_OK ? status : gpu_budget(request, gpus, n_gpus, index, 0, out, err);
}

/* Every GPU's budget into out, all or nothing. */
static kvs_status all_budgets(const char *fn, const kvs_budget_request *request,
                              uint64_t memory_bytes, const kvs_gpu_info *gpus, size_t n_gpus,
                              kvs_memory_budget *out, kvs_error *err) {
  kvs_status status = check_pointers(fn, request, gpus, out, err);
  if (status != KVS_OK) return status;
  if (n_gpus == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: n_gpus is 0: no GPU to budget", fn);
  }
  status = check_inputs(request, memory_bytes, gpus, n_gpus, err);
  if (status != KVS_OK) return status;
  kvs_memory_budget *b = calloc(n_gpus, sizeof *b);
  if (b == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu budgets", n_gpus);
  for (size_t i = 0; i < n_gpus && status == KVS_OK; i++) {
    status = gpu_budget(request, gpus, n_gpus, i, memory_bytes, &b[i], err);
  }
  if (status == KVS_OK) memcpy(out, b, n_gpus * sizeof *b);
  free(b);
  return status;
}

kvs_status kvs_node_budgets(const kvs_budget_request *request, const kvs_gpu_info *gpus,
                            size_t n_gpus, kvs_memory_budget *out, kvs_error *err) {
  return all_budgets(__func__, request, 0, gpus, n_gpus, out, err);
}

kvs_status kvs_node_budgets_on_memory(const kvs_budget_request *request, uint64_t memory_bytes,
                                      const kvs_gpu_info *gpus, size_t n_gpus,
                                      kvs_memory_budget *out, kvs_error *err) {
  return all_budgets(__func__, request, memory_bytes, gpus, n_gpus, out, err);
}

kvs_status kvs_node_gpu_total_memory(const kvs_gpu_info *gpu, uint64_t memory_bytes, uint64_t *out,
                                     kvs_error *err) {
  if (gpu == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: gpu is NULL", __func__);
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  uint64_t total = memory_bytes != 0 ? memory_bytes
                   : gpu->cuda_device >= 0 && gpu->total_bytes > 0
                       ? gpu->total_bytes
                       : kvs_gpu_known_memory_bytes(gpu->vendor_id, gpu->device_id, NULL);
  if (total == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "GPU %zu (%s, %s, PCI %04x:%04x) has no measured memory and is not a "
                         "model whose memory kvshard knows: give its memory (--gpu-memory)",
                         gpu->index, gpu->pci_busid, gpu->model[0] ? gpu->model : "model unknown",
                         gpu->vendor_id, gpu->device_id);
  }
  *out = total;
  return KVS_OK;
}

/* One GPU's free memory before load and its source. */
static kvs_status free_before_load(const kvs_gpu_info *gpu, uint64_t given, uint64_t memory,
                                   uint64_t *out, kvs_budget_source *source, kvs_error *err) {
  if (given != 0) {
    *out = given, *source = KVS_BUDGET_EXPLICIT;
    return KVS_OK;
  }
  if (memory == 0 && gpu->cuda_device >= 0 && gpu->free_bytes > 0) {
    *out = gpu->free_bytes, *source = KVS_BUDGET_MEASURED;
    return KVS_OK;
  }
  uint64_t total;
  kvs_status status = kvs_node_gpu_total_memory(gpu, memory, &total, err);
  if (status != KVS_OK) return status;
  if (total <= KVS_DEFAULT_CONTEXT_OVERHEAD_BYTES) {
    return kvs_error_set(err, KVS_ERR_BUDGET_TOO_SMALL,
                         "GPU %zu (%s): %llu bytes of memory hold no more than the %llu a serving "
                         "process takes before its weights load",
                         gpu->index, gpu->pci_busid, (unsigned long long)total,
                         (unsigned long long)KVS_DEFAULT_CONTEXT_OVERHEAD_BYTES);
  }
  *out = total - KVS_DEFAULT_CONTEXT_OVERHEAD_BYTES, *source = KVS_BUDGET_NOMINAL;
  return KVS_OK;
}

kvs_status kvs_node_free_before_load(const kvs_gpu_info *gpus, size_t n_gpus, uint64_t given_bytes,
                                     uint64_t memory_bytes, uint64_t *out,
                                     kvs_budget_source *sources, kvs_error *err) {
  if (gpus == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: gpus is NULL", __func__);
  }
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  /* Free memory above the memory that holds it cannot be true. */
  kvs_memory_input in[KVS_MEMORY_INPUT_COUNT] = {{0}};
  if (memory_bytes != 0)
    in[KVS_MEMORY_GPU_MEMORY] = (kvs_memory_input){"--gpu-memory", memory_bytes, NULL, 0};
  if (given_bytes != 0) {
    in[KVS_MEMORY_FREE_BEFORE_LOAD] =
        (kvs_memory_input){"--free-before-load", given_bytes, NULL, 0};
  }
  kvs_status checked = kvs_memory_inputs_check(in, gpus, n_gpus, err);
  if (checked != KVS_OK) return checked;
  uint64_t *values = calloc(n_gpus > 0 ? n_gpus : 1, sizeof *values);
  if (values == NULL)
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu GPUs", n_gpus);
  kvs_status status = KVS_OK;
  kvs_budget_source source = KVS_BUDGET_NOMINAL;
  for (size_t i = 0; i < n_gpus && status == KVS_OK; i++) {
    status = free_before_load(&gpus[i], given_bytes, memory_bytes, &values[i], &source, err);
    if (status == KVS_OK && sources != NULL) sources[i] = source;
  }
  if (status == KVS_OK) memcpy(out, values, n_gpus * sizeof *values);
  free(values);
  return status;
}

/* ---- step 4 ---- */

kvs_device_layout_options kvs_node_layout_options(const kvs_plan_request *request) {
  kvs_device_layout_options o = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
  if (request != NULL) o.n_scratch = request->n_scratch;
  return o;
}

/* The split prices every candidate with this: the carve of the tables. */
static kvs_status device_footprint(void *ctx, const kvs_cost_terms *terms,
                                   const kvs_pool_sizes *sizes, const kvs_pool_breakdown *exact,
                                   kvs_device_footprint *out, kvs_error *err) {
  (void)exact;
  return kvs_device_layout_footprint(terms, sizes, ctx, out, err);
}

kvs_status kvs_deployment_make(const kvs_plan_request *request, const kvs_gpu_info *gpus,
                               size_t n_gpus, const uint64_t *budgets, kvs_deployment_t *out,
                               kvs_plan_shortfall *shortfall, kvs_error *err) {
  if (request == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request is NULL", __func__);
  }
  kvs_plan_request r = *request;
  kvs_device_layout_options options = kvs_node_layout_options(request);
  r.footprint = device_footprint;
  r.footprint_ctx = &options;
  return kvs_deployment_create(&r, gpus, n_gpus, budgets, out, shortfall, err);
}

/* The stage split's question for request over n_stages stages, each
 * stage's device layout priced with options (stage budgets: the caller's). */
static kvs_split_request split_request_of(const kvs_plan_request *request, size_t n_stages,
                                          kvs_device_layout_options *options) {
  return (kvs_split_request){.geometry = request->geometry,
                             .widths = request->widths,
                             .swa_ratio = request->swa_ratio,
                             .page = request->page,
                             .floor_win_pages = request->floor_win_pages,
                             .n_scratch = request->n_scratch,
                             .n_stages = n_stages,
                             .footprint = device_footprint,
                             .footprint_ctx = options,
                             .layer_weight_bytes = request->layer_weight_bytes};
}

kvs_status kvs_deployment_holds(const kvs_plan_request *request, const uint64_t *stage_budgets,
                                uint64_t num_pages, bool *out, kvs_error *err) {
  if (request == NULL || stage_budgets == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                         request == NULL         ? "request"
                         : stage_budgets == NULL ? "stage_budgets"
                                                 : "out");
  }
  kvs_device_layout_options options = kvs_node_layout_options(request);
  kvs_split_request r = split_request_of(request, request->pp, &options);
  r.stage_budgets = stage_budgets;
  return kvs_split_holds(&r, num_pages, out, err);
}

kvs_status kvs_node_max_pages(const kvs_plan_request *request, size_t first, size_t end,
                              uint64_t budget, uint64_t *out, kvs_error *err) {
  if (request == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request is NULL", __func__);
  }
  kvs_device_layout_options options = kvs_node_layout_options(request);
  kvs_split_request r = split_request_of(request, 1, &options);
  return kvs_split_range_max_pages(&r, first, end, budget, out, err);
}

kvs_status kvs_node_rank_layout(const kvs_plan_request *request, kvs_deployment_t plan, size_t rank,
                                kvs_device_layout *out, kvs_error *err) {
  if (request == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: request is NULL", __func__);
  }
  if (plan == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: plan is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  const kvs_rank_plan *rp = kvs_deployment_rank(plan, rank);
  if (rp == NULL) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "rank %zu of a %zu-rank plan", rank,
                         kvs_deployment_rank_count(plan));
  }
  const kvs_stage_plan *stage = &kvs_deployment_split(plan)->stages[rp->pp_stage];
  kvs_device_layout_options options = kvs_node_layout_options(request);
  kvs_device_layout *l = malloc(sizeof *l);
  if (l == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a device layout");
  kvs_status status = kvs_device_layout_build(request->geometry, rp->first, rp->end,
                                              request->widths, &stage->sizes, &options, l, err);
  if (status == KVS_OK && l->total_bytes != rp->device.total_bytes) {
    status = kvs_error_set(
        err, KVS_ERR_INTEGRITY, "rank %zu's layout carves %llu bytes, its plan priced %llu", rank,
        (unsigned long long)l->total_bytes, (unsigned long long)rp->device.total_bytes);
  }
  if (status == KVS_OK) *out = *l;
  free(l);
  return status;
}
