/* kvplan fit: every layout of a cluster, searched (kvplan/fit_search.h),
 * and, where no layout of one machine serves the demand, 2 and 4 of them
 * to say how many it takes. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "plan/node_setup.h"
#include "plan/rank_layout.h"
#include "kvplan/kvplan.h"
#include "kvplan/kvplan_fit_internal.h"
#include "kvplan/tool_io.h"

/* The layouts of n GPUs, fewest ranks per replica first: tp x pp x dp
 * dividing the GPUs, a stage holding at least one layer, a tensor-parallel
 * group within a node and kvplan's bound; dp > 1 (with ep = tp x dp) only
 * where the experts are told apart. At most cap into out; returns how many
 * there are. */
static size_t list_layouts(const kvs_gpu_info *gpus, size_t n, size_t n_planned, bool split,
                           kvs_rank_slot *slots, kvs_parallel *out, size_t cap) {
  size_t count = 0;
  for (size_t ranks = 1; ranks <= n; ranks++) {
    if (n % ranks != 0) continue;
    for (size_t pp = 1; pp <= ranks; pp++) {
      if (ranks % pp != 0 || pp > n_planned || pp > KVS_MAX_STAGES) continue;
      for (size_t dp = 1; dp <= ranks / pp; dp++) {
        size_t tp = ranks / pp / dp;
        if ((ranks / pp) % dp != 0 || (dp > 1 && !split) || tp > KVS_KVPLAN_MAX_GPUS) continue;
        /* The DP groups are laid out as replicas of tp x pp. */
        if (kvs_rank_layout_cluster(gpus, n, tp, pp, false, slots, NULL, NULL) != KVS_OK) continue;
        if (count < cap) out[count] = (kvs_parallel){tp, pp, dp, dp > 1 ? tp * dp : 1};
        count++;
      }
    }
  }
  return count;
}

/* Says on stderr, every --progress-s seconds, how far the search over a
 * large cluster has come (as kvsim does): each layout is bisections over
 * whole-cluster plans, minutes on thousands of GPUs. */
typedef struct fit_progress {
  uint64_t start_ns, last_ns;
  double every_s; /* 0: silent */
} fit_progress;

static void say_progress(fit_progress *p, size_t done, size_t total, size_t n,
                         const kvs_parallel *at) {
  uint64_t now = kvs_now_ns();
  if (p->every_s <= 0 || (double)(now - p->last_ns) < p->every_s * 1e9) return;
  fprintf(kvs_tool_err(),
          "kvplan fit: %zu of %zu layouts of %zu GPUs tried (now tp %zu x pp %zu x dp %zu), "
          "%.0f s\n",
          done, total, n, at->tp, at->pp, at->dp, (double)(now - p->start_ns) * 1e-9);
  p->last_ns = now;
}

/* One layout, every question asked of it. Returns 0, or the exit status. */
static int search_layout(fit_run *r, fit_cluster *c, const kvs_parallel *l, fit_row *row) {
  const fit_args *a = r->a;
  *row = (fit_row){.nodes = c->nodes, .layout = *l};
  row->replicas = kvs_parallel_replicas(l, c->n_gpus);
  row->groups = kvs_parallel_groups(l, c->n_gpus);
  row->requests = a->max_concurrency ? 1 : (a->concurrency + row->groups - 1) / row->groups;
  int rc = fit_size_row(c, row);
  if (rc != 0) return rc;
  /* fit_size_row laid the ranks out in c->slots: where the servers run. */
  row->hosts = kvs_engine_hosts_of(l, c->slots, c->gpus, c->n_gpus, c->nodes);
  if (a->max_concurrency) {
    fit_kvshard_capacity(c, row);
    if (!a->options.engine_sglang) fit_kvshard_buffers(c, row);
    return a->options.engine_sglang ? fit_sglang_capacity(c, row) : 0;
  }
  fit_kvshard_demand(c, row);
  if (!a->options.engine_sglang) fit_kvshard_buffers(c, row);
  return a->options.engine_sglang ? fit_sglang_demand(c, row) : 0;
}

/* The cluster's memory terms (share 1: the memory itself) and what every
 * layout of it shares. Returns 0, or 1 after a message. */
static int cluster_of(fit_run *r, kvs_cluster_t cluster, kvs_memory_budget *memory,
                      fit_cluster *c) {
  const fit_args *a = r->a;
  kvs_error err;
  size_t n = kvs_cluster_gpu_count(cluster);
  const kvs_gpu_info *gpus = kvs_cluster_gpus(cluster);
  kvs_budget_request br = KVS_BUDGET_REQUEST_INIT;
  if (a->deploy.given[KVS_DEPLOY_RESERVE]) br.reserve_bytes = a->deploy.reserve;
  br.memory_ratio = 1.0; /* the memory itself; the share is what is searched */
  if (kvs_node_budgets_on_memory(&br, a->deploy.gpu_memory, gpus, n, memory, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan fit: %s\n", err.message);
    return 1;
  }
  *c = (fit_cluster){
      .m = r->m,
      .options = &a->options,
      .gpus = gpus,
      .n_gpus = n,
      .nodes = kvs_cluster_host_count(cluster),
      .memory = memory,
      .budgets = r->budgets,
      .weights = r->weights,
      .layer = r->layer,
      .context = a->context,
      .fraction = a->deploy.mem_fraction,
      .engine = a->options.engine_sglang,
      .free_given = a->deploy.free_before_load,
      .memory_given = a->deploy.gpu_memory,
      .engine_fraction = a->deploy.given[KVS_DEPLOY_MEM_FRACTION] ? a->deploy.mem_fraction : -1.0};
  return 0;
}

/* Every layout of one cluster, appended to r->rows. Returns 0, or the
 * exit status after a message. */
static int evaluate(fit_run *r, kvs_cluster_t cluster, kvs_memory_budget *memory) {
  fit_cluster c;
  int rc = cluster_of(r, cluster, memory, &c);
  if (rc != 0) return rc;
  kvs_rank_slot *slots = calloc(c.n_gpus, sizeof *slots);
  kvs_parallel *layouts = calloc(FIT_MAX_LAYOUTS, sizeof *layouts);
  c.slots = calloc(c.n_gpus, sizeof *c.slots);
  c.stage_gpus = calloc(c.n_gpus, sizeof *c.stage_gpus);
  if (slots == NULL || layouts == NULL || c.slots == NULL || c.stage_gpus == NULL) {
    free(slots);
    free(layouts);
    free(c.slots);
    free(c.stage_gpus);
    fprintf(kvs_tool_err(), "kvplan fit: out of memory\n");
    return 1;
  }
  size_t room = FIT_MAX_LAYOUTS - r->n_rows;
  size_t total = list_layouts(c.gpus, c.n_gpus, kvs_geometry_layer_count(&r->m->geometry), r->split,
                              slots, layouts, room);
  if (total > room) {
    fprintf(kvs_tool_err(),
            "kvplan fit: %zu layouts of %zu GPUs; trying the %zu with the fewest ranks\n", total,
            c.n_gpus, room);
    total = room;
  }
  fit_progress progress = {kvs_now_ns(), kvs_now_ns(), r->a->progress_s};
  for (size_t i = 0; i < total && rc == 0; i++) {
    rc = search_layout(r, &c, &layouts[i], &r->rows[r->n_rows]);
    if (rc == 0) r->n_rows++;
    say_progress(&progress, i + 1, total, c.n_gpus, &layouts[i]);
  }
  free(slots);
  free(layouts);
  free(c.slots);
  free(c.stage_gpus);
  return rc;
}

/* The answer a row gives: the engine's with --engine sglang. */
static bool row_fits(const fit_run *r, const fit_row *row) {
  return r->a->options.engine_sglang ? row->sglang_fits : row->fits;
}

/* Under kvshard's rule every answer's node buffers must fit in the
 * reserve its share was found with (SGLang's rule reserves nothing by
 * design: its graphs and activations live in P x (1 - f)). Returns 0, or
 * 1 after naming the layout that needs the most, both numbers and the
 * flag. */
static int check_buffers(const fit_run *r, const kvs_memory_budget *memory) {
  const fit_row *worst = NULL;
  for (size_t i = 0; i < r->n_rows; i++) {
    const fit_row *row = &r->rows[i];
    if (row->buffers_priced &&
        (worst == NULL || row->buffers.total_bytes > worst->buffers.total_bytes)) {
      worst = row;
    }
  }
  if (worst == NULL) return 0;
  kvs_error err;
  if (kvs_node_overhead_check(&memory[0], &worst->buffers, "--reserve", &err) == KVS_OK) return 0;
  fprintf(kvs_tool_err(), "kvplan fit: tp %zu x pp %zu x dp %zu on %zu node%s: %s\n",
          worst->layout.tp, worst->layout.pp, worst->layout.dp, worst->nodes,
          worst->nodes > 1 ? "s" : "", err.message);
  return 1;
}

int fit_evaluate_all(fit_run *r) {
  int rc = evaluate(r, r->topo, r->memory);
  if (rc == 0) rc = check_buffers(r, r->memory);
  if (rc != 0) return rc;
  bool fits_one = false;
  for (size_t i = 0; i < r->n_rows; i++) fits_one |= row_fits(r, &r->rows[i]);
  bool grow =
      !fits_one && !r->a->deploy.given[KVS_DEPLOY_NODES] && kvs_cluster_host_count(r->topo) == 1;
  for (size_t nodes = 2; grow && nodes <= 4; nodes *= 2) {
    kvs_cluster_t more = NULL;
    if ((rc = fit_open_cluster(r->a, nodes, NULL, &more)) != 0) return rc;
    size_t before = r->n_rows;
    rc = evaluate(r, more, r->grown);
    kvs_cluster_destroy(more);
    if (rc == 0) rc = check_buffers(r, r->grown);
    if (rc != 0) return rc;
    for (size_t i = before; i < r->n_rows && r->hosts_needed == 0; i++) {
      if (row_fits(r, &r->rows[i])) r->hosts_needed = nodes;
    }
  }
  return 0;
}
