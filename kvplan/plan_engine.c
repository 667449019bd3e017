#include "kvplan/plan_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/node_setup.h"
#include "kvplan/args.h"
#include "kvplan/plan_json.h"
#include "kvplan/sglang_report.h"

const char *kvs_engine_free_source_name(kvs_budget_source source) {
  return source == KVS_BUDGET_EXPLICIT ? "given" : kvs_budget_source_name(source);
}

/* P, the least free memory before load of any GPU, and its source; and
 * the least total memory in MiB. */
static kvs_status least_memory(const kvs_engine_gpus *g, kvs_engine_memory *out, kvs_error *err) {
  uint64_t *before = calloc(g->n > 0 ? g->n : 1, sizeof *before);
  kvs_budget_source *sources = calloc(g->n > 0 ? g->n : 1, sizeof *sources);
  kvs_status status = before == NULL || sources == NULL
                          ? kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu GPUs", g->n)
                          : kvs_node_free_before_load(g->gpus, g->n, g->free_given, g->memory_given,
                                                      before, sources, err);
  out->free_before_load = UINT64_MAX;
  uint64_t least_total = UINT64_MAX;
  for (size_t i = 0; status == KVS_OK && i < g->n; i++) {
    uint64_t total;
    status = kvs_node_gpu_total_memory(&g->gpus[i], g->memory_given, &total, err);
    if (status == KVS_OK && total < least_total) least_total = total;
    if (status == KVS_OK && before[i] < out->free_before_load) {
      out->free_before_load = before[i];
      out->free_source = sources[i];
    }
  }
  out->gpu_memory_mib = least_total >> 20;
  free(before);
  free(sources);
  return status;
}

/* The heaviest of SGLang's pipeline stages (its own layer split; the last
 * stage also holds the MTP layers), per GPU. */
static kvs_status heaviest_stage(const kvs_plan_model *m, size_t pp, const kvs_engine_weights *w,
                                 uint64_t *out, kvs_error *err) {
  size_t n_main = m->config.geometry.n_layers, n_planned = kvs_geometry_layer_count(&m->geometry);
  uint64_t most = 0;
  for (size_t s = 0; s < pp; s++) {
    size_t first, end;
    kvs_status status = kvs_sglang_pp_range(n_main, pp, s, &first, &end, err);
    if (status != KVS_OK) return status;
    uint64_t sum = 0;
    size_t last = s + 1 == pp ? n_planned : end;
    for (size_t i = first; w->layer != NULL && i < last; i++) sum += w->layer[i];
    if (sum > most) most = sum;
  }
  *out = most + w->measured;
  return KVS_OK;
}

kvs_status kvs_engine_memory_at(kvs_engine_memory *memory, double fraction, kvs_error *err) {
  kvs_sglang_memory_input in = {memory->free_before_load, memory->available, fraction,
                                memory->distributed};
  return kvs_sglang_memory_rule(&in, &memory->rule, err);
}

kvs_status kvs_engine_memory_make(const kvs_plan_model *m, const kvs_parallel *layout,
                                  const kvs_engine_gpus *gpus, const kvs_engine_weights *weights,
                                  double fraction, kvs_engine_memory *out, kvs_error *err) {
  memset(out, 0, sizeof *out);
  kvs_status status = least_memory(gpus, out, err);
  if (status == KVS_OK) status = heaviest_stage(m, layout->pp, weights, &out->weights, err);
  if (status != KVS_OK) return status;
  out->available = out->free_before_load > out->weights ? out->free_before_load - out->weights : 0;
  kvs_sglang_launch launch = {
      out->gpu_memory_mib, layout->tp * layout->dp, layout->pp, layout->dp, layout->dp > 1, 0, 0};
  status = kvs_sglang_default_mem_fraction(&launch, &out->by_default, err);
  if (status != KVS_OK) return status;
  out->fraction_given = fraction > 0.0;
  out->fraction = out->fraction_given ? fraction : out->by_default.mem_fraction_static;
  /* One SGLang server is tp x pp x dp ranks: with more than one, P and A
   * are their minimum through a float32 all-reduce. */
  out->distributed = layout->tp * layout->pp * layout->dp > 1;
  kvs_sglang_memory_input in = {out->free_before_load, out->available, out->fraction,
                                out->distributed};
  status = kvs_sglang_memory_rule(&in, &out->rule, err);
  if (status != KVS_OK) return status;
  double by_default = out->by_default.mem_fraction_static;
  in.mem_fraction_static = by_default > 0.0 && by_default <= 1.0 ? by_default : 1.0;
  return kvs_sglang_memory_rule(&in, &out->at_default, err);
}

kvs_sglang_options kvs_engine_options(const kvs_plan_options *o, size_t dp,
                                      uint64_t max_running_total) {
  kvs_sglang_options s = kvs_plan_options_sglang(o);
  s.max_running = max_running_total / (dp > 0 ? dp : 1);
  return s;
}

uint64_t kvs_engine_max_running_total(const kvs_plan_options *o) {
  return o->have_max_running ? o->max_running : KVS_ENGINE_DEFAULT_MAX_RUNNING;
}

kvs_status kvs_engine_pools_make(const kvs_plan_model *m, const kvs_sglang_options *options,
                                 size_t pp, const uint64_t *available_per_stage,
                                 kvs_engine_pools *out, json_t **stages_json, kvs_error *err) {
  size_t n_main = m->config.geometry.n_layers;
  json_t *stages = stages_json != NULL ? json_array() : NULL;
  kvs_status status = KVS_OK;
  for (size_t s = 0; s < pp && status == KVS_OK; s++) {
    size_t first, end;
    kvs_sglang_pools p;
    status = kvs_sglang_pp_range(n_main, pp, s, &first, &end, err);
    if (status == KVS_OK) {
      status = kvs_sglang_report_compute(m, options, first, end, available_per_stage[s], &p, err);
    }
    if (status != KVS_OK) break;
    if (stages != NULL) {
      json_t *one = kvs_sglang_report_json(&p, options, available_per_stage[s]);
      json_object_set_new(one, "layers",
                          json_pack("[II]", (json_int_t)first, (json_int_t)(end - 1)));
      json_array_append_new(stages, one);
    }
    if (s == 0 || p.full < out->least.full) {
      out->least = p, out->stage = s, out->available = available_per_stage[s];
    }
  }
  if (status != KVS_OK) {
    json_decref(stages);
    return status;
  }
  /* resolve_max_num_reqs: the requested count, at most half the tokens. */
  uint64_t half = out->least.full / 2;
  out->max_running = options->max_running < half ? options->max_running : half;
  if (stages_json != NULL) *stages_json = stages;
  return KVS_OK;
}

kvs_engine_demand kvs_engine_demand_of(const kvs_plan_model *m, const kvs_sglang_options *o,
                                       uint64_t requests, uint64_t context) {
  uint64_t page = o->page_size;
  kvs_engine_demand d = {requests, 0, 0};
  d.full_tokens = requests * ((context + page - 1) / page * page);
  d.swa_tokens = requests * (m->config.sliding_window + page);
  return d;
}

bool kvs_engine_holds(const kvs_engine_pools *pools, const kvs_engine_demand *d, const char **why) {
  const char *short_of = pools->least.no_pool                 ? "no full pool"
                         : pools->least.full < d->full_tokens ? "its full pool is short"
                         : pools->least.swa < d->swa_tokens   ? "its SWA pool is short"
                         : pools->max_running < d->requests   ? "max_running is short"
                                                              : NULL;
  if (why != NULL) *why = short_of;
  return short_of == NULL;
}

static void add_arg(json_t *args, const char *flag, const char *value) {
  json_array_append_new(args, json_string(flag));
  if (value != NULL) json_array_append_new(args, json_string(value));
}

static void add_count(json_t *args, const char *flag, uint64_t value) {
  char text[32];
  snprintf(text, sizeof text, "%llu", (unsigned long long)value);
  add_arg(args, flag, text);
}

json_t *kvs_engine_launch_args(const kvs_parallel *layout, const kvs_sglang_options *options,
                               double fraction, uint64_t max_total_tokens,
                               uint64_t max_running_total, uint64_t context_length) {
  json_t *args = json_array();
  char text[32];
  add_count(args, "--tp-size", layout->tp * layout->dp);
  add_count(args, "--pp-size", layout->pp);
  add_count(args, "--dp-size", layout->dp);
  if (layout->dp > 1) add_arg(args, "--enable-dp-attention", NULL);
  add_count(args, "--ep-size", layout->ep);
  add_arg(args, "--kv-cache-dtype", "fp8_e4m3");
  add_count(args, "--page-size", options->page_size);
  snprintf(text, sizeof text, "%.3f", fraction);
  add_arg(args, "--mem-fraction-static", text);
  add_count(args, "--max-total-tokens", max_total_tokens);
  add_count(args, "--max-running-requests", max_running_total);
  snprintf(text, sizeof text, "%g", options->swa_ratio);
  add_arg(args, "--swa-full-tokens-ratio", text);
  add_count(args, "--context-length", context_length);
  return args;
}

void kvs_engine_memory_json(json_t *j, const kvs_engine_memory *m) {
  json_object_set_new(j, "free_before_load_bytes", kvs_json_u64(m->free_before_load));
  json_object_set_new(j, "free_before_load_source",
                      json_string(kvs_engine_free_source_name(m->free_source)));
  json_object_set_new(j, "weights_bytes", kvs_json_u64(m->weights));
  json_object_set_new(j, "available_after_load_bytes", kvs_json_u64(m->available));
  json_object_set_new(j, "mem_fraction_static", json_real(m->fraction));
  json_object_set_new(j, "mem_fraction_source",
                      json_string(m->fraction_given ? "given" : "sglang default"));
  json_object_set_new(j, "rest_bytes", kvs_json_u64(m->rule.rest_bytes));
  json_object_set_new(j, "min_viable_mem_fraction", json_real(m->rule.min_viable_mem_fraction));
  json_object_set_new(j, "suggested_mem_fraction", json_real(m->rule.suggested_mem_fraction));
  json_object_set_new(j, "default_mem_fraction_static",
                      json_real(m->by_default.mem_fraction_static));
  json_object_set_new(j, "default_reserved_mib", json_real(m->by_default.reserved_mib));
  json_object_set_new(j, "default_assumes",
                      json_string("chunked prefill and decode CUDA-graph slots by the GPU's "
                                  "memory, decode graphs on, prefill graphs off, no DeepEP"));
}

void kvs_engine_memory_print(FILE *out, const kvs_engine_memory *m) {
  char p[32], w[32], a[32], rest[32];
  fprintf(out,
          "\nSGLang's memory rule: free before load %s (%s), weights %s, free after load %s; "
          "at --mem-fraction-static %.3f (%s) the pools get %s - %s x %.3f = %s\n",
          kvs_format_bytes(m->free_before_load, p, sizeof p),
          kvs_engine_free_source_name(m->free_source), kvs_format_bytes(m->weights, w, sizeof w),
          kvs_format_bytes(m->available, a, sizeof a), m->fraction,
          m->fraction_given ? "given" : "SGLang's default", a, p, 1.0 - m->fraction,
          m->rule.no_kv ? "nothing" : kvs_format_bytes(m->rule.rest_bytes, rest, sizeof rest));
  fprintf(out,
          "  minimum viable %.4f (SGLang suggests %.3f); SGLang's default for this GPU and "
          "layout %.3f (%.0f MiB held back for activations and CUDA graphs)%s\n",
          m->rule.min_viable_mem_fraction, m->rule.suggested_mem_fraction,
          m->by_default.mem_fraction_static, m->by_default.reserved_mib,
          m->at_default.no_kv ? ", which leaves the pools nothing" : "");
}

kvs_engine_hosts kvs_engine_hosts_of(const kvs_parallel *l, const kvs_rank_slot *slots,
                                     const kvs_gpu_info *gpus, size_t n_gpus, size_t n_hosts) {
  size_t per_server = l->tp * l->pp * l->dp, dp = l->dp > 0 ? l->dp : 1;
  kvs_engine_hosts h = {n_hosts, per_server > 0 ? n_gpus / per_server : 0, 0, false};
  /* Each server's span of hosts, in one pass over the ranks (fit asks
   * this of every layout of clusters of thousands of GPUs). */
  size_t *lo = calloc(h.servers + 1, sizeof *lo), *hi = calloc(h.servers + 1, sizeof *hi);
  h.regular = h.servers > 0 && lo != NULL && hi != NULL;
  for (size_t s = 0; h.regular && s < h.servers; s++) lo[s] = SIZE_MAX;
  for (size_t r = 0; h.regular && r < n_gpus; r++) {
    size_t s = slots[r].replica / dp, host = gpus[slots[r].gpu].host;
    if (s >= h.servers) continue;
    lo[s] = host < lo[s] ? host : lo[s];
    hi[s] = host > hi[s] ? host : hi[s];
  }
  /* Regular: every server spans the same consecutive hosts, server s from
   * host s x hosts / servers, and the servers cover every host. */
  for (size_t s = 0; h.regular && s < h.servers; s++) {
    size_t span = lo[s] != SIZE_MAX ? hi[s] - lo[s] + 1 : 0;
    if (s == 0) h.per_server = span;
    h.regular = span > 0 && span == h.per_server && lo[s] == s * n_hosts / h.servers &&
                span * h.servers >= n_hosts;
  }
  free(lo);
  free(hi);
  return h;
}

/* One host's entry: the server starting at host `first`, node rank `rank`
 * of its `nnodes`. */
static json_t *host_entry(const json_t *args, size_t host, size_t first, size_t nnodes,
                          size_t rank) {
  json_t *o = json_object();
  json_t *own = json_deep_copy(args);
  char addr[48];
  snprintf(addr, sizeof addr, KVS_ENGINE_DIST_INIT_PLACEHOLDER, first);
  if (nnodes > 1) {
    add_count(own, "--nnodes", nnodes);
    add_count(own, "--node-rank", rank);
    add_arg(own, "--dist-init-addr", addr);
  }
  json_object_set_new(o, "host", kvs_json_u64(host));
  json_object_set_new(o, "nnodes", kvs_json_u64(nnodes));
  json_object_set_new(o, "node_rank", kvs_json_u64(rank));
  json_object_set_new(o, "dist_init_addr", nnodes > 1 ? json_string(addr) : json_null());
  json_object_set_new(o, "args", own);
  return o;
}

json_t *kvs_engine_launch_json(json_t *args, const kvs_engine_hosts *h) {
  json_t *launch = json_object();
  json_t *hosts = h->regular ? json_array() : json_null();
  for (size_t host = 0; h->regular && host < h->hosts; host++) {
    /* Servers in host order: those whose hosts include this one. */
    for (size_t s = 0; s < h->servers; s++) {
      size_t first = s * h->hosts / h->servers;
      if (host < first || host >= first + h->per_server) continue;
      json_array_append_new(hosts, host_entry(args, host, first, h->per_server, host - first));
    }
  }
  json_object_set_new(launch, "engine", json_string("sglang"));
  json_object_set_new(launch, "args", args);
  json_object_set_new(launch, "hosts", hosts);
  return launch;
}

static void print_args(FILE *out, const char *model, const json_t *args) {
  fprintf(out, "sglang serve --model-path %s", model);
  size_t i;
  json_t *arg;
  json_array_foreach(args, i, arg) fprintf(out, " %s", json_string_value(arg));
  fputc('\n', out);
}

void kvs_engine_launch_print(FILE *out, const char *model, const json_t *launch) {
  const json_t *hosts = json_object_get(launch, "hosts");
  size_t n = json_array_size(hosts);
  json_t *last = json_array_get(hosts, n > 0 ? n - 1 : 0);
  bool one_host = last == NULL || json_integer_value(json_object_get(last, "host")) == 0;
  fputs("\nlaunch      ", out);
  if (json_is_null(hosts)) {
    fputs("(the servers straddle the machines unevenly: no per-host lines) ", out);
  }
  if (one_host) {
    print_args(out, model, json_object_get(launch, "args"));
    return;
  }
  size_t nnodes = (size_t)json_integer_value(json_object_get(last, "nnodes"));
  fprintf(out, "one line per host%s", nnodes > 1 ? "" : " (each SGLang server within one host)\n");
  if (nnodes > 1) {
    fprintf(out,
            ": each SGLang server spans %zu hosts (--nnodes), its rank 0 on the first; "
            "HOSTk:PORT stands for host k's address and a free port there (--dist-init-addr), "
            "which kvplan cannot know: write them in\n",
            nnodes);
  }
  size_t i;
  json_t *entry;
  json_array_foreach(hosts, i, entry) {
    fprintf(out, "  host %-4lld ", (long long)json_integer_value(json_object_get(entry, "host")));
    print_args(out, model, json_object_get(entry, "args"));
  }
}
