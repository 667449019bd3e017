#include "shard/node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/clock.h"
#include "core/mix.h"
#include "core/options.h"
#include "plan/device_budget.h"
#include "plan/rank_layout.h"
#include "shard/cluster_gather.h"
#include "shard/comm_nccl.h"
#include "shard/rank_word.h"
#include "shard/node_disk.h"
#include "shard/node_internal.h"
#include "shard/node_seal.h"
#include "shard/plan_overhead.h"
#include "topology/cuda_probe.h"

#define NONE UINT64_MAX

const char *kvs_node_device_name(kvs_node_device device) {
  switch (device) {
    case KVS_NODE_DEVICE_AUTO:
      return "auto";
    case KVS_NODE_DEVICE_CPU:
      return "cpu";
    case KVS_NODE_DEVICE_CUDA:
      return "cuda";
  }
  return "unknown";
}

/* ---- agreement ---- */

static uint64_t *words(kvs_node_t node) { return node->words.host; }

/* Collective: every rank says whether its local part succeeded; when any
 * failed, every rank returns the lowest failing rank's status and message,
 * naming that rank and the stage. */
kvs_status kvs_node_agree(kvs_node_t node, const char *stage, kvs_status local,
                          const kvs_error *local_err, kvs_error *err) {
  int root = -1;
  kvs_error reason;
  kvs_error_clear(&reason);
  kvs_status status = kvs_comm_agree(node->comm, &node->words, local, local_err, &root, &reason);
  if (status == KVS_OK) return KVS_OK;
  if (root < 0) return kvs_error_set(err, status, "%s", reason.message);
  return kvs_error_set(err, status, "node creation failed at %s on rank %d: %s", stage, root,
                       reason.message);
}

/* ---- the fingerprint of everything that shapes the pool ---- */

static uint64_t fingerprint(const struct kvs_node *node) {
  const kvs_node_options *o = &node->options;
  const kvs_geometry *g = &node->geometry;
  size_t layers = kvs_geometry_layer_count(g);
  uint64_t h = kvs_mix64(0x6b76736e6f646531ull, g->head_dim);
  h = kvs_mix64(h, g->index_head_dim);
  h = kvs_mix64(h, layers);
  for (size_t i = 0; i < layers; i++) h = kvs_mix64(h, g->compress_ratios[i]);
  const kvs_row_widths *w = &node->widths;
  h = kvs_mix64(kvs_mix64(kvs_mix64(h, w->kv), w->index), w->csa_state);
  h = kvs_mix64(kvs_mix64(h, w->hca_state), w->idx_state);
  h = kvs_mix64(kvs_mix64(h, (uint64_t)w->state_rings), w->n_req_slots);
  h = kvs_mix64_double(h, o->swa_ratio);
  h = kvs_mix64(kvs_mix64(h, o->page), o->max_seq_len);
  h = kvs_mix64(kvs_mix64(h, o->max_running), o->radix);
  h = kvs_mix64(kvs_mix64(h, node->request.floor_win_pages), o->n_scratch);
  h = kvs_mix64(kvs_mix64(kvs_mix64(h, (uint64_t)o->tp), (uint64_t)o->pp), (uint64_t)node->size);
  h = kvs_mix64(kvs_mix64(h, o->step_capacity), o->check_every);
  h = kvs_mix64(kvs_mix64(h, o->check_integrity), node->max_batch);
  h = kvs_mix64(kvs_mix64(h, o->prefix_cache), o->host_cache_bytes);
  h = kvs_mix64(h, o->index_only);
  h = kvs_mix64(h, o->disk_cache_bytes);
  h = kvs_mix64(kvs_mix64(h, node->n_gpus), o->allow_cross_host_tp);
  for (size_t i = 0; i < node->n_gpus; i++) {
    const kvs_gpu_info *gpu = &kvs_cluster_gpus(node->cluster)[i];
    h = kvs_mix64(kvs_mix64(h, gpu->pci.domain), gpu->pci.bus);
    h = kvs_mix64(kvs_mix64(h, gpu->pci.device), gpu->pci.function);
    h = kvs_mix64(h, gpu->host);
  }
  const kvs_budget_request *b = &node->budget;
  h = kvs_mix64(kvs_mix64(h, b->budget_bytes), b->budget_per_gpu != NULL);
  for (size_t i = 0; b->budget_per_gpu != NULL && i < b->n_budget_per_gpu; i++) {
    h = kvs_mix64(h, b->budget_per_gpu[i]);
  }
  h = kvs_mix64_double(h, b->memory_ratio);
  return kvs_mix64(h, b->reserve_bytes);
}

/* Collective: the first rank whose fingerprint differs from the leader's,
 * or -1. Three collectives, only on the path where they differ. */
static kvs_status compare_fingerprints(kvs_node_t node, uint64_t fp, int *differs, kvs_error *err) {
  uint64_t *w = words(node);
  w[0] = fp;
  w[1] = ~fp;
  kvs_status status = kvs_comm_allreduce_u64(node->comm, &node->words, 2, KVS_COMM_MIN, err);
  if (status != KVS_OK) return status;
  *differs = -1;
  if (w[0] == ~w[1]) return KVS_OK;
  w[0] = fp;
  if ((status =
           kvs_comm_broadcast(node->comm, &node->words, sizeof(uint64_t), KVS_SHARD_LEADER, err))) {
    return status;
  }
  uint64_t leader = w[0];
  w[0] = fp != leader ? (uint64_t)node->rank : NONE;
  if ((status = kvs_comm_allreduce_u64(node->comm, &node->words, 1, KVS_COMM_MIN, err))) {
    return status;
  }
  *differs = w[0] == NONE ? -1 : (int)w[0];
  return KVS_OK;
}

/* ---- local steps ---- */

static kvs_status check_options(const kvs_node_options *o, int size, kvs_error *err) {
  if (o->geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "options.geometry is required");
  }
  if (o->tp <= 0 || o->pp <= 0 || (int64_t)o->tp * o->pp != size) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "tp %d x pp %d must equal the communicator's %d ranks", o->tp, o->pp,
                         size);
  }
  if (o->device != KVS_NODE_DEVICE_AUTO && o->device != KVS_NODE_DEVICE_CPU &&
      o->device != KVS_NODE_DEVICE_CUDA) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "options.device %d is none of auto, cpu, "
                         "cuda",
                         (int)o->device);
  }
  if ((unsigned)o->kv_dtype > KVS_KV_FP8 ||
      (unsigned)o->state_rings > KVS_STATE_RINGS_HCA_PER_REQUEST) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "options.kv_dtype %d or options.state_rings %d is none of its kind",
                         (int)o->kv_dtype, (int)o->state_rings);
  }
  if (o->max_running == 0 || o->max_seq_len == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "max_running and max_seq_len must be at least 1 (got %llu and %llu)",
                         (unsigned long long)o->max_running, (unsigned long long)o->max_seq_len);
  }
  if (o->no_stream && o->stream != NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "options.no_stream says the engine has no stream, but options.stream is "
                         "%p: give one of them",
                         o->stream);
  }
  return KVS_OK;
}

/* Which device the tables go on, and its CUDA ordinal (-1 on the host). */
static kvs_status pick_device(const struct kvs_node *node, kvs_table_kind *kind, int *ordinal,
                              kvs_error *err) {
  const kvs_node_options *o = &node->options;
  int count = 0;
  kvs_error why;
  kvs_error_clear(&why);
  bool visible = kvs_cuda_probe_device_count(&count, &why) == KVS_OK;
  *ordinal = -1;
  if (!visible && o->device != KVS_NODE_DEVICE_CPU && kvs_backend_broken(KVS_BACKEND_CUDA)) {
    /* CUDA's backend or runtime there but broken: repaired, never worked
     * around on the host. */
    return kvs_error_set(err, why.status, "%s", why.message);
  }
  if (o->device == KVS_NODE_DEVICE_CPU || (o->device == KVS_NODE_DEVICE_AUTO && !visible)) {
    *kind = KVS_TABLE_HOST;
    return KVS_OK;
  }
  if (!visible) {
    /* No device (KVS_ERR_UNSUPPORTED), or no CUDA backend or runtime
     * installed (KVS_ERR_LIBRARY): the reason says which. */
    return kvs_error_set(err, why.status, "device cuda asked for, but %s", why.message);
  }
  int device = o->cuda_device >= 0 ? o->cuda_device : node->gpu.cuda_device;
  /* A topology not read from CUDA (XML, bundled) lists GPUs in PCI bus id
   * order, which is the CUDA order under CUDA_DEVICE_ORDER=PCI_BUS_ID. */
  if (device < 0) device = (int)kvs_cluster_local_index(node->cluster, node->gpu.index);
  if (device >= count) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "GPU %zu (%s) of topology '%s' is CUDA device %d, but CUDA sees %d; "
                         "name the device (cuda_device)",
                         node->gpu.index, node->gpu.pci_busid, kvs_cluster_label(node->cluster),
                         device, count);
  }
  *kind = KVS_TABLE_CUDA;
  *ordinal = device;
  return KVS_OK;
}

/* The local rank the launcher gave this process, or -1 when it says none. */
static int launcher_local_rank(const char **from) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                     "MPI_LOCALRANKID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    char *end = NULL;
    long value = v != NULL ? strtol(v, &end, 10) : -1;
    if (v != NULL && end != v && *end == '\0' && value >= 0 && value < INT32_MAX) {
      *from = vars[i];
      return (int)value;
    }
  }
  return -1;
}

/* The launcher's placement against the plan's: rank r runs as plan rank
 * r, so the ranks on a machine must be the plan's ranks on that node, in
 * order. local is this rank's position among the plan's ranks on its node. */
static kvs_status check_placement(const kvs_node_t node, size_t local, kvs_error *err) {
  const kvs_node_options *o = &node->options;
  size_t own = kvs_cluster_own_host(node->cluster);
  if (own != SIZE_MAX && own != node->gpu.host) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "rank %d runs on %s (node %zu), but the plan puts it on node %zu, %s "
                         "(GPU %zu %s): launch the ranks in blocks, one per GPU, in node order "
                         "(mpirun --map-by ppr:GPUS:node, srun --distribution=block)",
                         node->rank, kvs_cluster_host_label(node->cluster, own), own,
                         node->gpu.host, kvs_cluster_host_label(node->cluster, node->gpu.host),
                         node->gpu.index, node->gpu.pci_busid);
  }
  const char *from = "the node options";
  int launcher = o->local_rank;
  if (launcher == KVS_NODE_FROM_LAUNCHER) launcher = launcher_local_rank(&from);
  if (launcher >= 0 && (size_t)launcher != local) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "rank %d is local rank %d on its machine (%s), but the plan runs it as "
                         "local rank %zu of node %zu (GPU %zu %s): launch one rank per GPU, in "
                         "node order (mpirun --map-by ppr:GPUS:node, srun --distribution=block)",
                         node->rank, launcher, from, local, node->gpu.host, node->gpu.index,
                         node->gpu.pci_busid);
  }
  if (o->host_index >= 0 && (size_t)o->host_index != node->gpu.host) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "rank %d runs on node %d (the node options), but the plan puts it on "
                         "node %zu (GPU %zu %s): launch the ranks in node order",
                         node->rank, o->host_index, node->gpu.host, node->gpu.index,
                         node->gpu.pci_busid);
  }
  return KVS_OK;
}

/* Steps 1-3 on this rank: the topology, this rank's GPU, the binding and
 * its own budget. */
static kvs_status local_setup(kvs_node_t node, bool *used, kvs_table_kind *kind, int *ordinal,
                              kvs_memory_budget *own, kvs_error *err) {
  const kvs_node_options *o = &node->options;
  const kvs_gpu_info *gpus = kvs_cluster_gpus(node->cluster);
  kvs_rank_slot *slots = calloc(node->n_gpus, sizeof *slots);
  if (slots == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the layout");
  kvs_status status = kvs_rank_layout_cluster(gpus, node->n_gpus, (size_t)o->tp, (size_t)o->pp,
                                              o->allow_cross_host_tp, slots, NULL, err);
  size_t local = 0;
  if (status == KVS_OK) {
    node->gpu = gpus[slots[node->rank].gpu];
    for (int r = 0; r < node->rank; r++) local += gpus[slots[r].gpu].host == node->gpu.host;
    for (int r = 0; r < node->size; r++) used[slots[r].gpu] = true;
  }
  free(slots);
  if (status != KVS_OK) return status;
  if ((status = check_placement(node, local, err)) != KVS_OK) return status;
  node->topology = kvs_cluster_host(node->cluster, node->gpu.host);

  if (o->bind_numa) {
    status = kvs_topology_bind_thread(node->topology,
                                      kvs_cluster_local_index(node->cluster, node->gpu.index),
                                      &node->binding, err);
    if (status != KVS_OK) return status;
  } else {
    snprintf(node->binding.reason, sizeof node->binding.reason, "binding not asked for");
  }
  if ((status = pick_device(node, kind, ordinal, err))) return status;

  /* The budget: the engine's bytes, else this rank's device measured now
   * (its free memory at create, after whatever the engine already took),
   * else what the topology knows, through the one rule. */
  const kvs_budget_request *b = &node->budget;
  bool explicit_bytes = b->budget_bytes != 0 || b->budget_per_gpu != NULL;
  if (explicit_bytes) {
    return kvs_node_gpu_budget(b, gpus, node->n_gpus, node->gpu.index, own, err);
  }
  if (*kind == KVS_TABLE_CUDA) {
    kvs_device_budget measured;
    if ((status = kvs_device_budget_query(*ordinal, b->memory_ratio, b->reserve_bytes, &measured,
                                          err))) {
      return status;
    }
    node->gpu.cuda_device = *ordinal;
    node->gpu.free_bytes = measured.free_bytes;
    node->gpu.total_bytes = measured.total_bytes;
  }
  return kvs_node_gpu_budget(b, &node->gpu, 1, 0, own, err);
}

/* Step 3's gather: every GPU's budget terms on every rank. A rank writes
 * its own GPU's; the leader also writes the GPUs no rank runs on (replica
 * GPUs, priced from the topology as kvplan prices them). */
enum { B_BUDGET, B_MEMORY, B_RESERVE, B_SOURCE, B_WORDS };

static kvs_status gather_budgets(kvs_node_t node, const kvs_memory_budget *own, const bool *used,
                                 kvs_error *err) {
  uint64_t *w = words(node);
  size_t n = node->n_gpus;
  memset(w, 0, n * B_WORDS * sizeof *w);
  kvs_status local = KVS_OK;
  kvs_error local_err;
  kvs_error_clear(&local_err);
  if (node->rank == KVS_SHARD_LEADER) {
    for (size_t g = 0; g < n && local == KVS_OK; g++) {
      if (used[g]) continue;
      kvs_memory_budget b;
      local =
          kvs_node_gpu_budget(&node->budget, kvs_cluster_gpus(node->cluster), n, g, &b, &local_err);
      w[g * B_WORDS + B_BUDGET] = b.budget_bytes;
      w[g * B_WORDS + B_MEMORY] = b.memory_bytes;
      w[g * B_WORDS + B_RESERVE] = b.reserve_bytes;
      w[g * B_WORDS + B_SOURCE] = (uint64_t)b.source;
    }
  }
  size_t g = node->gpu.index;
  w[g * B_WORDS + B_BUDGET] = own->budget_bytes;
  w[g * B_WORDS + B_MEMORY] = own->memory_bytes;
  w[g * B_WORDS + B_RESERVE] = own->reserve_bytes;
  w[g * B_WORDS + B_SOURCE] = (uint64_t)own->source;
  kvs_status status =
      kvs_comm_allreduce_u64(node->comm, &node->words, n * B_WORDS, KVS_COMM_SUM, err);
  if (status != KVS_OK) return status;
  for (size_t i = 0; i < n; i++) {
    kvs_memory_budget *b = &node->budgets[i];
    b->budget_bytes = w[i * B_WORDS + B_BUDGET];
    b->memory_bytes = w[i * B_WORDS + B_MEMORY];
    b->reserve_bytes = w[i * B_WORDS + B_RESERVE];
    b->source = (kvs_budget_source)w[i * B_WORDS + B_SOURCE];
    b->memory_ratio = b->source == KVS_BUDGET_EXPLICIT ? 1.0 : node->budget.memory_ratio;
  }
  return kvs_node_agree(node, "the budget gather", local, &local_err, err);
}

/* ---- create / destroy ---- */

void kvs_node_destroy(kvs_node_t node) {
  if (node == NULL) return;
  kvs_node_disk_close(node);
  kvs_node_seal_free(node);
  kvs_shard_destroy(node->shard);
  kvs_table_destroy(node->table);
  if (node->owns_step_comm) kvs_comm_destroy(node->step_comm);
  kvs_comm_buffer_free(node->comm, &node->words);
  kvs_deployment_destroy(node->plan);
  if (node->owns_cluster) kvs_cluster_destroy(node->cluster);
  free(node->budgets);
  free(node->layout);
  free(node->h_own);
  free(node->h_prev);
  free(node->h_ring);
  free(node->h_csa);
  free(node->h_hca);
  free(node->h_slots);
  free(node->w_blocks);
  free(node->w_positions);
  kvs_node_contract_destroy(node);
  free(node->check_map);
  free(node);
}

/* The collective scratch: the budget gather's words, an error message, and
 * the checks' few words. */
static size_t words_needed(size_t n_gpus) {
  _Static_assert(B_WORDS == 4, "kvs_node_agree_words prices four gather words a GPU");
  return kvs_node_agree_words(n_gpus);
}

/* Local: the options checked, the geometry and row widths taken, and the
 * plan request every later step prices with. */
static kvs_status prepare_request(kvs_node_t node, kvs_error *err) {
  const kvs_node_options *o = &node->options;
  if (node->options_status != KVS_OK) {
    if (err != NULL) *err = node->options_err;
    return node->options_status;
  }
  kvs_status status = check_options(o, node->size, err);
  if (status != KVS_OK) return status;
  node->geometry = *o->geometry;
  if ((status = kvs_geometry_validate(&node->geometry, err)) != KVS_OK) return status;
  /* Row widths from the dtype, the rings where the options put them, one
   * request slot per running request and the dummy, tail states with a
   * prefix cache (as kvplan sizes them). */
  if ((status = kvs_row_widths_for(&node->geometry, o->kv_dtype, o->qk_rope_head_dim, &node->widths,
                                   err)) != KVS_OK) {
    return status;
  }
  kvs_row_widths_place(&node->widths, o->state_rings, o->max_running, o->prefix_cache);
  uint64_t floor = o->floor_win_pages;
  if (floor == 0 && (status = kvs_cost_window_floor_pages(o->max_seq_len, o->max_running, o->radix,
                                                          o->page, &floor, err))) {
    return status;
  }
  kvs_plan_request r = {.geometry = &node->geometry,
                        .widths = &node->widths,
                        .swa_ratio = o->swa_ratio,
                        .page = o->page,
                        .floor_win_pages = floor,
                        .n_scratch = o->n_scratch,
                        .tp = (size_t)o->tp,
                        .pp = (size_t)o->pp,
                        .allow_cross_host_tp = o->allow_cross_host_tp};
  node->request = r;
  node->max_batch = o->max_batch > 0 ? o->max_batch : (size_t)o->max_running;
  return KVS_OK;
}

/* The collective scratch, large enough for n GPUs' budget terms. */
static kvs_status grow_words(kvs_node_t node, size_t n_gpus, kvs_error *err) {
  size_t need = words_needed(n_gpus > 0 ? n_gpus : 1);
  if (need <= node->words_count) return KVS_OK;
  kvs_comm_buffer_free(node->comm, &node->words);
  node->words_count = 0;
  kvs_status status = kvs_comm_buffer_alloc(node->comm, need * sizeof(uint64_t), &node->words, err);
  if (status == KVS_OK) node->words_count = need;
  return status;
}

/* Collective, step 1's cluster: the engine's, or one gather (every rank
 * learns every node's GPUs, or every rank fails alike). */
static kvs_status open_cluster(kvs_node_t node, kvs_error *err) {
  const kvs_node_options *o = &node->options;
  if (node->cluster != NULL) {
    node->owns_cluster = false; /* lent by kvs_node_create_in_cluster */
  } else {
    kvs_status status = kvs_cluster_gather(node->comm, o->topology, o->hosts, o->host,
                                           &node->cluster, node->note, sizeof node->note, err);
    if (status != KVS_OK) return status;
    node->owns_cluster = true;
  }
  node->n_gpus = kvs_cluster_gpu_count(node->cluster);
  return KVS_OK;
}

/* Collective: every rank's fingerprint is the leader's, or every rank fails
 * naming the first that differs. */
static kvs_status check_same_shape(kvs_node_t node, uint64_t fp, kvs_error *err) {
  int differs = -1;
  kvs_status status = compare_fingerprints(node, fp, &differs, err);
  if (status != KVS_OK || differs < 0) return status;
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                       "rank %d was given other options than the leader (geometry, layout, row "
                       "widths, sizing, budgets or its topology's GPUs differ): every rank "
                       "must build one pool shape",
                       differs);
}

/* Collective, steps 3 and 4: every GPU's budget gathered (used: the GPUs
 * a rank of this group runs on), then the plan, identical on every rank
 * (the same inputs: a plan that fails fails every rank alike). plain is
 * n_gpus words of scratch. */
static kvs_status plan_cluster(kvs_node_t node, const kvs_memory_budget *own, const bool *used,
                               uint64_t *plain, kvs_error *err) {
  kvs_status status = gather_budgets(node, own, used, err);
  if (status != KVS_OK) return status;
  for (size_t g = 0; g < node->n_gpus; g++) plain[g] = node->budgets[g].budget_bytes;
  kvs_plan_shortfall shortfall;
  return kvs_deployment_make(&node->request, kvs_cluster_gpus(node->cluster), node->n_gpus, plain,
                             &node->plan, &shortfall, err);
}

/* Collective, step 4's agreement in one allreduce: the most pages each
 * rank's own layers fit in its own budget, MIN over ranks (with the rank
 * that has it), must hold the plan's page count. The plan may hold fewer:
 * it is limited by every GPU of the topology, replicas no rank here runs
 * on included, as kvplan plans them. */
static kvs_status agree_on_pages(kvs_node_t node, const kvs_memory_budget *own, kvs_error *err) {
  const kvs_rank_plan *rp = kvs_deployment_rank(node->plan, (size_t)node->rank);
  uint64_t own_pages = 0;
  if (kvs_node_max_pages(&node->request, rp->first, rp->end, own->budget_bytes, &own_pages, NULL) !=
      KVS_OK) {
    own_pages = 0;
  } else if (own_pages > KVS_RANK_WORD_VALUE_MAX) {
    own_pages = KVS_RANK_WORD_VALUE_MAX;
  }
  /* Pages and the rank in one word, so the one MIN names the tightest rank. */
  uint64_t *w = words(node);
  w[0] = kvs_rank_word(own_pages, node->rank);
  kvs_status status = kvs_comm_allreduce_u64(node->comm, &node->words, 1, KVS_COMM_MIN, err);
  if (status != KVS_OK) return status;
  uint64_t agreed = kvs_rank_word_value(w[0]);
  int tightest = kvs_rank_word_rank(w[0]);
  const kvs_split *split = kvs_deployment_split(node->plan);
  if (agreed >= split->num_pages) return KVS_OK;
  const kvs_rank_plan *tp = kvs_deployment_rank(node->plan, (size_t)tightest);
  return kvs_error_set(err, KVS_ERR_INTEGRITY,
                       "rank %d (GPU %zu, layers %zu-%zu) fits %llu pages in its budget, the "
                       "plan holds %llu: the plan and the devices disagree",
                       tightest, tp->gpu, tp->first, tp->end - 1, (unsigned long long)agreed,
                       (unsigned long long)split->num_pages);
}

/* Local, before anything goes on the GPU: what this rank will put there
 * beside its carve (plan/node_overhead.h) with its actual configuration
 * (its tables' device, whether its steps' communicator keeps device
 * buffers and NCCL's, max_batch, the step capacity its shard will have),
 * and whether its budget's reserve holds it. An explicit budget is the
 * carve's own bytes: not checked. */
static kvs_status check_buffers(kvs_node_t node, kvs_table_kind kind, const kvs_memory_budget *own,
                                kvs_error *err) {
  const kvs_node_options *o = &node->options;
  /* The engine's communicator keeps device buffers when the node's words
   * from it have a device copy; the node's own NCCL one always does (and
   * connects NCCL's buffers at its first collective, after the budget was
   * measured). NCCL's estimate is counted on either. */
  bool engine_device = node->words.device != NULL;
  kvs_node_deployment d = {.cuda_tables = kind == KVS_TABLE_CUDA,
                           .device_comm = engine_device || o->step_backend != NULL,
                           .max_batch = node->max_batch,
                           .max_running = o->max_running,
                           .radix = o->radix,
                           .prefix_cache = o->prefix_cache,
                           .step_capacity = o->step_capacity,
                           .max_seq_len = o->max_seq_len,
                           .agree_words = engine_device ? node->words_count : 0,
                           .nccl = NULL};
  kvs_status status = kvs_deployment_overhead(node->plan, kvs_cluster_gpus(node->cluster),
                                              (size_t)node->rank, &d, &node->buffers, err);
  if (status != KVS_OK) return status;
  kvs_error why;
  kvs_error_clear(&why);
  if (kvs_node_overhead_check(own, &node->buffers, "reserve_bytes (--reserve)", &why) == KVS_OK) {
    return KVS_OK;
  }
  return kvs_error_set(err, why.status, "GPU %zu (%s): %s", node->gpu.index, node->gpu.pci_busid,
                       why.message);
}

/* The rows the tables move (unless index_only): ring clears and
 * tail-state restores, and the host tier's rows: this rank's slots, as
 * many as the pool's index has, each the page's rows of this rank's
 * layers, which is its share of what the plan priced a slot at. */
static kvs_status host_tier_rows(kvs_node_t node, kvs_error *err) {
  kvs_window_pool_t pool = kvs_shard_pool(node->shard);
  if (node->options.index_only) return KVS_OK;
  /* The rows each journal moves: ring clears, tail-state restores. */
  kvs_status status = kvs_table_keep_rows(node->table, node->layout, err);
  if (status != KVS_OK ||
      (node->options.host_cache_bytes == 0 && node->options.disk_cache_bytes == 0)) {
    return status;
  }
  kvs_prefix_stats s;
  status = kvs_window_pool_prefix_stats(pool, &s, err);
  if (status != KVS_OK) return status;
  uint64_t slots = s.host_slots;
  if (slots == 0) return KVS_OK; /* a disk tier alone moves rows through its own buffer */
  uint64_t priced = kvs_deployment_rank_host_bytes(node->plan, (size_t)node->rank);
  uint64_t slot = kvs_table_host_slot_bytes(node->layout);
  if (slot != priced) {
    return kvs_error_set(err, KVS_ERR_INTEGRITY,
                         "rank %d's host slot holds %llu bytes of rows, but the plan priced its "
                         "page's compressed and indexer rows at %llu",
                         node->rank, (unsigned long long)slot, (unsigned long long)priced);
  }
  kvs_error why;
  kvs_error_clear(&why);
  status = kvs_table_host_tier(node->table, node->layout, slots, &why);
  if (status != KVS_OK) {
    return kvs_error_set(err, status, "rank %d's host tier of %llu slots (%llu bytes): %s",
                         node->rank, (unsigned long long)slots, (unsigned long long)(slots * slot),
                         why.message);
  }
  return KVS_OK;
}

/* The engine's stream as the CUDA tables take it: NULL only when the
 * engine said it has none; a NULL stream is the legacy default stream. */
static void *engine_stream(const kvs_node_options *o) {
  if (o->no_stream) return NULL;
  return o->stream != NULL ? o->stream : KVS_CUDA_LEGACY_STREAM;
}

/* Local, step 5: this rank's layout carved as planned, its tables, and the
 * host copies of a step's ring contexts. */
static kvs_status create_tables(kvs_node_t node, kvs_table_kind kind, int ordinal, kvs_error *err) {
  const kvs_node_options *o = &node->options;
  node->layout = malloc(sizeof *node->layout);
  if (node->layout == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory");
  kvs_status status =
      kvs_node_rank_layout(&node->request, node->plan, (size_t)node->rank, node->layout, err);
  if (status != KVS_OK) return status;
  kvs_table_limits limits = {node->max_batch, (o->max_seq_len + o->page - 1) / o->page};
  if (kind == KVS_TABLE_CUDA) {
    /* On a device communicator the tables read the broadcast's device
     * buffer after it lands (an event on the communicator's stream); the
     * communicator must run on the tables' GPU, the plan's. */
    kvs_cuda_table_options to = {sizeof to, NULL, engine_stream(o),
                                 kvs_shard_step_capacity(node->shard), o->cuda_graphs};
    int comm_device = -1;
    if (kvs_comm_device_stream(node->step_comm, &to.comm_stream, &comm_device, NULL) == KVS_OK) {
      if (comm_device != ordinal) {
        return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                             "rank %d's %s communicator runs on CUDA device %d, but its tables go "
                             "on device %d (GPU %zu %s): create the communicator on the plan's "
                             "GPU, or let the node make its own (step_backend \"nccl\")",
                             node->rank, kvs_comm_backend(node->step_comm), comm_device, ordinal,
                             node->gpu.index, node->gpu.pci_busid);
      }
      node->table_reads_device_entries = true;
    } else {
      to.comm_stream = NULL;
    }
    status = kvs_table_create_cuda_step(ordinal, node->layout, &limits, &to, &node->table, err);
  } else {
    status = kvs_table_create_host(node->layout, &limits, &node->table, err);
  }
  if (status != KVS_OK || (status = host_tier_rows(node, err))) return status;
  if ((status = kvs_node_results_adopt(node, o->result_buffers, err)) != KVS_OK) return status;
  node->options.result_buffers =
      node->has_results ? &node->results : NULL; /* the caller's may go */
  size_t ring_rows = node->max_batch * (size_t)o->page;
  node->h_own = malloc(node->max_batch * sizeof *node->h_own);
  node->h_prev = malloc(node->max_batch * sizeof *node->h_prev);
  node->h_ring = malloc((ring_rows > 0 ? ring_rows : 1) * sizeof *node->h_ring);
  node->h_csa = malloc(node->max_batch * sizeof *node->h_csa);
  node->h_hca = malloc(node->max_batch * sizeof *node->h_hca);
  node->h_slots = malloc(node->max_batch * sizeof *node->h_slots);
  node->w_blocks = malloc(2 * node->max_batch * sizeof *node->w_blocks);
  node->w_positions = malloc(node->max_batch * sizeof *node->w_positions);
  if (node->h_own == NULL || node->h_prev == NULL || node->h_ring == NULL || node->h_csa == NULL ||
      node->h_hca == NULL || node->h_slots == NULL || node->w_blocks == NULL ||
      node->w_positions == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu ring contexts",
                         node->max_batch);
  }
  return KVS_OK;
}

/* Collective, step 6: this rank's stage's shard. Its steps hand the node
 * each journal (the node then steps the tables); its checks carry the
 * tables' verdict (kvs_node_check_report). */
/* Prefix hits end where every ring is empty: a multiple of every
 * compression ratio the model has (their lcm; 1 for none). */
static uint64_t node_prefix_align(const kvs_geometry *g) {
  uint64_t lcm = 1;
  size_t layers = kvs_geometry_layer_count(g);
  for (size_t i = 0; i < layers; i++) {
    uint64_t r = g->compress_ratios[i];
    if (r == 0) continue;
    uint64_t a = lcm, b = r;
    while (b != 0) {
      uint64_t t = a % b;
      a = b;
      b = t;
    }
    lcm = lcm / a * r;
  }
  return lcm;
}

static kvs_status create_shard(kvs_node_t node, kvs_error *err) {
  const kvs_node_options *o = &node->options;
  kvs_status made = kvs_node_contract_create(node, err);
  if (made != KVS_OK) return made;
  kvs_shard_options so = KVS_SHARD_OPTIONS_INIT;
  so.app_capacity = node->app_capacity;
  so.max_running = o->max_running;
  so.radix = o->radix;
  so.step_capacity = o->step_capacity;
  so.check_every = o->check_every;
  so.check_integrity = o->check_integrity;
  so.prefix_cache = o->prefix_cache;
  so.prefix_align = node_prefix_align(&node->geometry);
  if (o->host_cache_bytes > 0) {
    kvs_error why;
    kvs_error_clear(&why);
    uint64_t slots = 0;
    if (!o->prefix_cache ||
        kvs_deployment_host_slots(node->plan, kvs_node_gpus(node), kvs_node_gpu_count(node),
                                  o->host_cache_bytes, &slots, &why) != KVS_OK) {
      return kvs_error_set(
          err, KVS_ERR_INVALID_ARGUMENT, "options.host_cache_bytes (--host-cache) is %llu: %s",
          (unsigned long long)o->host_cache_bytes,
          !o->prefix_cache ? "a host tier needs the prefix cache (prefix_cache)" : why.message);
    }
    /* More than a machine has cannot be true: kvplan and kvsim's sentence. */
    kvs_status held =
        kvs_cluster_host_tier_check(node->cluster, "--host-cache", o->host_cache_bytes, err);
    if (held != KVS_OK) return held;
    so.host_pages = slots;
  }
  if (o->disk_cache_bytes > 0) {
    kvs_error why;
    kvs_error_clear(&why);
    uint64_t slots = 0;
    const char *missing =
        !o->prefix_cache ? "a disk tier needs the prefix cache (prefix_cache, --prefix-cache)"
        : o->disk_path == NULL || o->disk_path[0] == '\0'
            ? "a disk tier needs its folder (disk_path, --disk-path)"
        : o->model_name == NULL || o->model_name[0] == '\0'
            ? "a disk tier needs the model's name (model_name, --disk-model): its blocks are "
              "signed with it"
            : NULL;
    if (missing != NULL ||
        kvs_deployment_host_slots(node->plan, kvs_node_gpus(node), kvs_node_gpu_count(node),
                                  o->disk_cache_bytes, &slots, &why) != KVS_OK) {
      return kvs_error_set(
          err, KVS_ERR_INVALID_ARGUMENT, "options.disk_cache_bytes (--disk-cache) is %llu: %s",
          (unsigned long long)o->disk_cache_bytes, missing != NULL ? missing : why.message);
    }
    so.disk_pages = slots;
    so.disk_stores_per_step = KVS_NODE_DISK_STORES_PER_STEP;
  }
  const kvs_rank_plan *rp = kvs_deployment_rank(node->plan, (size_t)node->rank);
  const kvs_stage_plan *stage = &kvs_deployment_split(node->plan)->stages[rp->pp_stage];
  return kvs_shard_create(node->step_comm, &stage->sizes, &so, &node->shard, err);
}

/* Collective: the steps' communicator. The given one, or, with
 * step_backend "nccl", one of the node's own on its tables' GPU, set up
 * over the given one (every rank agrees after the last setup step). */
static kvs_status open_step_comm(kvs_node_t node, kvs_table_kind kind, int ordinal,
                                 kvs_error *err) {
  const char *backend = node->options.step_backend;
  node->step_comm = node->comm;
  if (backend == NULL) return KVS_OK;
  kvs_error local_err;
  kvs_error_clear(&local_err);
  kvs_status local = KVS_OK;
  if (strcmp(backend, "nccl") != 0) {
    local = kvs_error_set(&local_err, KVS_ERR_INVALID_ARGUMENT,
                          "options.step_backend '%s' is not \"nccl\" (or NULL: the given "
                          "communicator)",
                          backend);
  } else if (kind != KVS_TABLE_CUDA) {
    local = kvs_error_set(&local_err, KVS_ERR_INVALID_ARGUMENT,
                          "step_backend \"nccl\" runs on the tables' GPU, but rank %d's tables "
                          "are on the host (device cpu, or no GPU)",
                          node->rank);
  }
  kvs_status status = kvs_node_agree(node, "the steps' communicator", local, &local_err, err);
  if (status != KVS_OK) return status;
  int timeout = kvs_comm_timeout_ms(node->comm);
  status = kvs_comm_nccl_bootstrap(node->comm, ordinal, timeout > 30000 ? timeout : 30000, timeout,
                                   &node->step_comm, err);
  if (status != KVS_OK) {
    node->step_comm = node->comm;
    return status;
  }
  node->owns_step_comm = true;
  return KVS_OK;
}

/* Steps 1-6 (node.h). Local work is agreed on before each collective that
 * depends on it, so a rank that fails locally still joins every collective
 * and every rank returns the same error. */
static kvs_status build(kvs_node_t node, kvs_error *err) {
  kvs_error local_err;
  kvs_error_clear(&local_err);
  kvs_status local = prepare_request(node, &local_err), status;
  if ((status = grow_words(node, 1, err))) return status;
  if ((status = kvs_node_agree(node, "the options", local, &local_err, err))) return status;
  if ((status = open_cluster(node, err))) return status;

  kvs_table_kind kind = KVS_TABLE_HOST;
  int ordinal = -1;
  kvs_memory_budget own;
  memset(&own, 0, sizeof own);
  /* The per-GPU arrays are allocated here, so that a failure is agreed on
   * with the rest of the local setup before any collective needs them. */
  size_t n = node->n_gpus > 0 ? node->n_gpus : 1;
  node->budgets = calloc(n, sizeof *node->budgets);
  bool *used = calloc(n, sizeof *used);
  uint64_t *plain = calloc(n, sizeof *plain);
  local = node->budgets != NULL && used != NULL && plain != NULL
              ? local_setup(node, used, &kind, &ordinal, &own, &local_err)
              : kvs_error_set(&local_err, KVS_ERR_NO_MEMORY, "no memory for %zu GPUs' budgets",
                              node->n_gpus);
  /* The GPU count is part of the fingerprint, so ranks that disagree on it
   * fail before the budget gather sizes its words by it. */
  uint64_t fp = local == KVS_OK ? fingerprint(node) : 0;
  if ((status = grow_words(node, node->n_gpus, err)) == KVS_OK &&
      (status = kvs_node_agree(node, "topology, GPU and budget", local, &local_err, err)) ==
          KVS_OK &&
      (status = check_same_shape(node, fp, err)) == KVS_OK) {
    status = plan_cluster(node, &own, used, plain, err);
  }
  free(used);
  free(plain);
  if (status != KVS_OK || (status = agree_on_pages(node, &own, err))) return status;
  local = check_buffers(node, kind, &own, &local_err);
  if ((status = kvs_node_agree(node, "the node's buffers", local, &local_err, err))) return status;

  if ((status = open_step_comm(node, kind, ordinal, err)) || (status = create_shard(node, err))) {
    return status;
  }
  local = create_tables(node, kind, ordinal, &local_err);
  if ((status = kvs_node_agree(node, "the tables", local, &local_err, err))) return status;
  return kvs_node_disk_open(node, err);
}

void kvs_node_options_init(kvs_node_options *o) {
  if (o == NULL) return;
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->kv_dtype = KVS_KV_BF16;
  o->qk_rope_head_dim = KVS_DEFAULT_QK_ROPE_HEAD_DIM;
  o->state_rings = KVS_STATE_RINGS_PER_REQUEST;
  o->swa_ratio = KVS_DEFAULT_SWA_RATIO;
  o->page = KVS_DEFAULT_WINDOW_PAGE;
  o->max_seq_len = KVS_DEFAULT_MAX_SEQ_LEN;
  o->max_running = KVS_DEFAULT_MAX_RUNNING;
  o->radix = KVS_DEFAULT_RADIX;
  o->n_scratch = KVS_DEFAULT_N_SCRATCH;
  o->tp = 1;
  o->pp = 1;
  o->cuda_device = -1;
  o->device = KVS_NODE_DEVICE_AUTO;
  o->bind_numa = true;
  o->memory_ratio = KVS_DEFAULT_MEMORY_RATIO;
  o->reserve_bytes = KVS_DEFAULT_RESERVE_BYTES;
  o->check_every = 64;
  o->check_integrity = true;
  o->local_rank = KVS_NODE_FROM_LAUNCHER;
  o->host_index = KVS_NODE_FROM_LAUNCHER;
  o->cuda_graphs = true;
  o->prefix_cache = false;
  o->host_cache_bytes = 0;
  o->index_only = false;
  o->no_stream = false;
}

/* The options' budget terms as plan/node_setup.h takes them. */
static kvs_budget_request budget_of(const kvs_node_options *o) {
  kvs_budget_request b = {o->budget_bytes,    o->budget_per_gpu,   o->n_budget_per_gpu,
                          o->memory_ratio,    o->reserve_bytes,    o->weights_bytes,
                          o->weights_per_gpu, o->n_weights_per_gpu};
  return b;
}

kvs_status kvs_node_create_in_cluster(kvs_comm_t comm, const kvs_node_options *options,
                                      kvs_cluster_t cluster, kvs_node_t *out, kvs_error *err) {
  if (comm == NULL || options == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "comm, options and output are required");
  }
  struct kvs_node *node = calloc(1, sizeof *node);
  if (node == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a node");
  node->comm = comm;
  node->rank = kvs_comm_rank(comm);
  node->size = kvs_comm_size(comm);
  node->cluster = cluster;
  /* An older caller's shorter options take this build's defaults for the
   * rest; a refusal here is agreed on like any other option error. */
  kvs_node_options defaults;
  kvs_node_options_init(&defaults);
  kvs_error_clear(&node->options_err);
  node->options_status =
      kvs_options_adopt(options, &defaults, sizeof defaults, "kvs_node_options_init",
                        &node->options, &node->options_err);
  node->budget = budget_of(&node->options);
  kvs_status status = build(node, err);
  if (status != KVS_OK) {
    kvs_node_destroy(node);
    return status;
  }
  *out = node;
  return KVS_OK;
}

kvs_status kvs_node_create(kvs_comm_t comm, const kvs_node_options *options, kvs_node_t *out,
                           kvs_error *err) {
  return kvs_node_create_in_cluster(comm, options, NULL, out, err);
}

/* ---- accessors ---- */

kvs_topology_t kvs_node_topology(const struct kvs_node *node) { return node->topology; }
const kvs_gpu_info *kvs_node_gpus(const struct kvs_node *node) {
  return kvs_cluster_gpus(node->cluster);
}
size_t kvs_node_gpu_count(const struct kvs_node *node) { return node->n_gpus; }
kvs_cluster_t kvs_node_cluster(const struct kvs_node *node) { return node->cluster; }
const char *kvs_node_topology_note(const struct kvs_node *node) { return node->note; }
kvs_deployment_t kvs_deployment(const struct kvs_node *node) { return node->plan; }
const kvs_plan_request *kvs_deployment_request(const struct kvs_node *node) {
  return &node->request;
}
const kvs_rank_plan *kvs_node_rank_plan(const struct kvs_node *node) {
  return kvs_deployment_rank(node->plan, (size_t)node->rank);
}
const kvs_memory_budget *kvs_node_gpu_budgets(const struct kvs_node *node) { return node->budgets; }
const kvs_gpu_info *kvs_node_gpu(const struct kvs_node *node) { return &node->gpu; }
const kvs_binding_report *kvs_node_binding(const struct kvs_node *node) { return &node->binding; }
const kvs_device_layout *kvs_node_layout(const struct kvs_node *node) { return node->layout; }
kvs_table_t kvs_node_table(const struct kvs_node *node) { return node->table; }
const kvs_node_overhead *kvs_node_buffers(const struct kvs_node *node) { return &node->buffers; }
kvs_shard_t kvs_node_shard(const struct kvs_node *node) { return node->shard; }
kvs_comm_t kvs_node_step_comm(const struct kvs_node *node) { return node->step_comm; }
kvs_window_pool_t kvs_node_pool(const struct kvs_node *node) { return kvs_shard_pool(node->shard); }
void kvs_node_stats_get(const struct kvs_node *node, kvs_node_stats *out) { *out = node->stats; }
