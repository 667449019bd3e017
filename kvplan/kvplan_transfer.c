/* kvplan transfer: what one request's prefill/decode transfer moves, link
 * by link, and what the decode side holds.
 *
 * Both sides are planned as `kvplan plan` plans them (kvplan_plan_make,
 * the same flags, each with its own tp x pp), and each rank's device
 * layout is the node's own (kvs_node_rank_layout), so the bytes are
 * shard/transfer_rows.h's rule over the layouts the nodes carve: the
 * counts the node's transfer moves, not a second estimate. The rows go as
 * the node sends them (shard/node_transfer.c): every decode rank takes
 * each of its layers once, straight from holder number (its rank mod the
 * holders) among the prefill ranks holding the layer. A node is one
 * replica (tp x pp ranks) of the layout on the topology. Exit status: 0
 * sized, 1 the plans cannot be made here (as for plan) or the decode side
 * holds no request of L tokens, 2 bad usage. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplan/args.h"
#include "kvplan/kvplan.h"
#include "kvplan/kvplan_plan_internal.h"
#include "kvplan/plan_json.h"
#include "kvplan/plan_options.h"
#include "kvplan/tool_io.h"
#include "plan/cluster.h"
#include "plan/device_layout.h"
#include "plan/node_setup.h"
#include "shard/transfer_rows.h"

#define TOOL "kvplan transfer"
/* The deployment flags transfer takes: all but --tp and --pp, which each
 * side gives under its own name. */
#define TRANSFER_DEPLOY_FLAGS \
  (KVS_DEPLOY_ALL & ~(KVS_DEPLOY_BIT(KVS_DEPLOY_TP) | KVS_DEPLOY_BIT(KVS_DEPLOY_PP)))
/* 50 GB/s: one 400 Gb/s NIC per GPU. */
#define DEFAULT_LINK_GBS 50.0

enum {
  OPT_PREFILL_TP = 1,
  OPT_PREFILL_PP,
  OPT_DECODE_TP,
  OPT_DECODE_PP,
  OPT_CONTEXT,
  OPT_REUSE,
  OPT_LINK_RATE,
  OPT_PREFIX_CACHE,
  OPT_JSON,
  OPT_TP,
  OPT_PP,
};

typedef struct side_flags {
  uint64_t tp, pp;
  bool have_tp, have_pp;
} side_flags;

typedef struct transfer_args {
  plan_args plan;     /* the flags both sides share */
  side_flags side[2]; /* prefill, decode */
  uint64_t context, reuse;
  bool have_context, have_reuse;
  double link_gbs;
} transfer_args;

static const char *const SIDE_NAME[2] = {"prefill", "decode"};

static void usage(FILE *out) {
  fputs(
      "usage: kvplan transfer --context L (--prefill-tp N | --prefill-pp N)..\n"
      "                       (--decode-tp N | --decode-pp N).. [flags]\n"
      "  --context L             tokens of the request moved: 32768, 32K, 1M\n"
      "  --reuse H               tokens the decode side already holds (a prefix of whole\n"
      "                          pages, below L; default none)\n"
      "  --prefill-tp N --prefill-pp N\n"
      "                          the prefill node's layout, each in [1, 1024] (one alone:\n"
      "                          the other is 1)\n"
      "  --decode-tp N --decode-pp N\n"
      "                          the decode node's layout, likewise\n"
      "  --link-rate GBPS        each GPU's link in GB/s (10^9 bytes/s), in [0.001,\n"
      "                          100000] (default 50: a 400 Gb/s NIC per GPU)\n"
      "  --prefix-cache          both nodes run a prefix cache (tail states move too)\n",
      out);
  kvs_deploy_flags_help(out, TRANSFER_DEPLOY_FLAGS);
  fprintf(out,
          "%s"
          "  --json                  one JSON object on stdout (notes go to stderr)\n"
          "Both nodes are planned as kvplan plan plans them on the same flags; a node is\n"
          "one replica (tp x pp ranks). Every decode rank receives the rows of all its\n"
          "layers once, from one prefill rank holding each.\n"
          "exit status: 0 sized, 1 the plans cannot be made here or the decode node holds\n"
          "no request of L tokens, 2 bad usage\n",
          kvs_plan_options_help);
}

static kvs_status transfer_flag(void *ctx, int id, const char *value, kvs_error *err) {
  transfer_args *t = ctx;
  static const char *const names[] = {"--prefill-tp", "--prefill-pp", "--decode-tp", "--decode-pp"};
  kvs_status status;
  switch (id) {
    case OPT_PREFILL_TP:
    case OPT_PREFILL_PP:
    case OPT_DECODE_TP:
    case OPT_DECODE_PP: {
      side_flags *s = &t->side[id >= OPT_DECODE_TP];
      bool tp = id == OPT_PREFILL_TP || id == OPT_DECODE_TP;
      *(tp ? &s->have_tp : &s->have_pp) = true;
      return kvs_parse_u64_in(names[id - OPT_PREFILL_TP], value, 1, KVS_KVPLAN_MAX_GPUS,
                              "a rank count in [1, 1024]", tp ? &s->tp : &s->pp, err);
    }
    case OPT_CONTEXT:
    case OPT_REUSE: {
      const char *flag = id == OPT_CONTEXT ? "--context" : "--reuse";
      uint64_t *out = id == OPT_CONTEXT ? &t->context : &t->reuse;
      *(id == OPT_CONTEXT ? &t->have_context : &t->have_reuse) = true;
      status = kvs_parse_tokens(flag, value, out, err);
      /* 0 reused is the default said twice: refused, as every count's 0. */
      if (status == KVS_OK && (*out == 0 || *out > (UINT64_C(1) << 40))) {
        return kvs_error_set(err, KVS_ERR_PARSE, "%s must be in [1, 2^40] tokens, got %s", flag,
                             value);
      }
      return status;
    }
    case OPT_LINK_RATE:
      return kvs_parse_double_in("--link-rate", value, 0.001, 100000.0,
                                 "a rate in GB/s in [0.001, 100000]", &t->link_gbs, err);
    case OPT_PREFIX_CACHE:
      t->plan.prefix_cache = true;
      return KVS_OK;
    case OPT_TP:
    case OPT_PP:
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "--%s names one layout; give each side's: --prefill-%s and --decode-%s",
                           id == OPT_TP ? "tp" : "pp", id == OPT_TP ? "tp" : "pp",
                           id == OPT_TP ? "tp" : "pp");
    default:
      t->plan.json = true; /* OPT_JSON */
      return KVS_OK;
  }
}

/* The combinations the flags alone refuse. 0, or 2 after a message. */
static int check_args(const transfer_args *t) {
  const char *why = NULL;
  char buf[160];
  if (!t->have_context) {
    why = "--context L is required: the request's tokens";
  } else if (!(t->side[0].have_tp || t->side[0].have_pp)) {
    why = "the prefill layout is required: give --prefill-tp and/or --prefill-pp";
  } else if (!(t->side[1].have_tp || t->side[1].have_pp)) {
    why = "the decode layout is required: give --decode-tp and/or --decode-pp";
  } else if (t->plan.options.engine_sglang) {
    why = "--engine sglang: the transfer is kvshard's; SGLang's pools are kvplan plan's";
  } else if (t->have_reuse && t->reuse % t->plan.options.page != 0) {
    snprintf(buf, sizeof buf, "--reuse must be whole pages of %llu tokens, got %llu",
             (unsigned long long)t->plan.options.page, (unsigned long long)t->reuse);
    why = buf;
  } else if (t->have_reuse && t->reuse >= t->context) {
    snprintf(buf, sizeof buf, "--reuse must be below --context (%llu tokens), got %llu",
             (unsigned long long)t->context, (unsigned long long)t->reuse);
    why = buf;
  }
  if (why == NULL) return 0;
  fprintf(kvs_tool_err(), TOOL ": %s\n", why);
  return 2;
}

static int parse(int argc, char **argv, transfer_args *t) {
  static const struct option own[] = {
      {"prefill-tp", required_argument, NULL, OPT_PREFILL_TP},
      {"prefill-pp", required_argument, NULL, OPT_PREFILL_PP},
      {"decode-tp", required_argument, NULL, OPT_DECODE_TP},
      {"decode-pp", required_argument, NULL, OPT_DECODE_PP},
      {"context", required_argument, NULL, OPT_CONTEXT},
      {"reuse", required_argument, NULL, OPT_REUSE},
      {"link-rate", required_argument, NULL, OPT_LINK_RATE},
      {"prefix-cache", no_argument, NULL, OPT_PREFIX_CACHE},
      {"json", no_argument, NULL, OPT_JSON},
      /* plan's --tp and --pp name one layout; here there are two. */
      {"tp", required_argument, NULL, OPT_TP},
      {"pp", required_argument, NULL, OPT_PP},
  };
  const kvs_plan_parser parser = {TOOL,
                                  own,
                                  sizeof own / sizeof own[0],
                                  transfer_flag,
                                  t,
                                  TRANSFER_DEPLOY_FLAGS,
                                  &t->plan.deploy,
                                  &t->plan.options,
                                  usage};
  int rc = kvs_plan_options_parse(&parser, argc, argv);
  kvs_error err;
  if (rc == 0 &&
      kvs_deploy_flags_check(&t->plan.deploy, TRANSFER_DEPLOY_FLAGS, NULL, false, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), TOOL ": %s\n", err.message);
    rc = 2;
  }
  return rc == 0 ? check_args(t) : rc;
}

/* One side: its plan and its replica's ranks' layouts. */
typedef struct side {
  plan_args args;
  kvs_plan_model model;
  plan_run run;
  bool made;
  size_t tp, pp, n; /* n = tp x pp: one replica's ranks, ranks [0, n) */
  kvs_device_layout *layouts;
  uint64_t *bytes; /* per rank: sent (prefill) or received (decode) */
  size_t *peers;   /* per rank: decode ranks it sends to, prefill ranks it receives from */
} side;

/* Each side's tp x pp against the topology's GPUs, named by its own
 * flags (plan would name --tp): exit 1 as for plan, the GPUs cannot hold
 * it. */
static int check_layouts(const transfer_args *t, side *s) {
  kvs_cluster_t c;
  kvs_error err;
  char why[768];
  const kvs_deploy_flags *d = &t->plan.deploy;
  if (kvs_cluster_open_spec(d->topology, d->given[KVS_DEPLOY_NODES] ? (size_t)d->nodes : 0, false,
                            &c, why, sizeof why, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), TOOL ": %s\n", err.message);
    return err.status == KVS_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  size_t n = kvs_cluster_gpu_count(c);
  kvs_cluster_destroy(c);
  for (int k = 0; k < 2; k++) {
    if (s[k].n <= n && n % s[k].n == 0) continue;
    fprintf(kvs_tool_err(),
            TOOL ": --%s-tp %zu x --%s-pp %zu = %zu ranks, %s the %zu GPUs of a node\n",
            SIDE_NAME[k], s[k].tp, SIDE_NAME[k], s[k].pp, s[k].n,
            s[k].n > n ? "more than" : "which does not divide", n);
    return 1;
  }
  return 0;
}

/* Plans side k (quietly for the prefill side: one set of notes) and lays
 * out its replica's ranks. 0, or the exit status after a message. */
static int plan_side(const transfer_args *t, side *s, int k) {
  s->args = t->plan;
  s->args.deploy.tp = s->tp;
  s->args.deploy.pp = s->pp;
  s->args.deploy.given[KVS_DEPLOY_TP] = s->args.deploy.given[KVS_DEPLOY_PP] = true;
  FILE *notes = k == 0 ? NULL : t->plan.json ? kvs_tool_err() : kvs_tool_out();
  s->made = true;
  int rc = kvplan_plan_make(&s->run, &s->args, &s->model, notes);
  if (rc != 0) return rc;
  s->layouts = calloc(s->n, sizeof *s->layouts);
  s->bytes = calloc(s->n, sizeof *s->bytes);
  s->peers = calloc(s->n, sizeof *s->peers);
  if (s->layouts == NULL || s->bytes == NULL || s->peers == NULL) {
    fprintf(kvs_tool_err(), TOOL ": out of memory\n");
    return 1;
  }
  kvs_plan_request request = kvplan_plan_request(&s->run);
  kvs_error err;
  for (size_t r = 0; r < s->n; r++) {
    if (kvs_node_rank_layout(&request, s->run.plan, r, &s->layouts[r], &err) != KVS_OK) {
      fprintf(kvs_tool_err(), TOOL ": %s rank %zu: %s\n", SIDE_NAME[k], r, err.message);
      return 1;
    }
  }
  return 0;
}

static void side_free(side *s) {
  if (s->made) kvplan_plan_release(&s->run);
  free(s->layouts);
  free(s->bytes);
  free(s->peers);
}

/* The transfer's sums. */
typedef struct totals {
  uint64_t copy[KVS_XFER_POOLS]; /* the whole model's rows, once */
  uint64_t link[KVS_XFER_POOLS]; /* over every link (each decode rank's copy) */
  uint64_t copy_bytes, link_bytes;
  uint64_t saved_bytes; /* what --reuse keeps off the links */
  int slow_side;        /* the busiest link: 0 prefill, 1 decode */
  size_t slow_rank;
  uint64_t slow_bytes;
} totals;

static uint64_t sum_pools(const uint64_t b[KVS_XFER_POOLS]) {
  uint64_t s = 0;
  for (int i = 0; i < KVS_XFER_POOLS; i++) s += b[i];
  return s;
}

/* Decode rank d's layers as the node assigns them (kvs_xfer_assign, the
 * prefill ranks in rank order, as a caller lists them as peers); [lo[p],
 * hi[p]) is what d takes from prefill rank p. 0, or 1 after a message. */
static int assign(const side *P, const side *D, size_t d, size_t *lo, size_t *hi) {
  const kvs_device_layout *ld = &D->layouts[d];
  size_t *ranges = calloc(2 * P->n, sizeof *ranges);
  if (ranges == NULL) {
    fprintf(kvs_tool_err(), TOOL ": no memory for %zu prefill ranks\n", P->n);
    return 1;
  }
  for (size_t p = 0; p < P->n; p++) {
    ranges[p] = P->layouts[p].first_layer;
    ranges[P->n + p] = P->layouts[p].end_layer;
  }
  size_t layer = 0, peer = 0;
  kvs_status status = kvs_xfer_assign(ld->first_layer, ld->end_layer, d, P->n, ranges,
                                      ranges + P->n, NULL, lo, hi, &layer, &peer);
  free(ranges);
  if (status == KVS_ERR_NOT_FOUND) {
    fprintf(kvs_tool_err(), TOOL ": layer %zu of decode rank %zu is held by no prefill rank\n",
            layer, d);
    return 1;
  }
  if (status == KVS_ERR_UNSUPPORTED) {
    fprintf(kvs_tool_err(),
            TOOL
            ": decode rank %zu would take layers %zu..%zu and %zu from prefill rank %zu: the "
            "node takes one range per peer\n",
            d, lo[peer], hi[peer] - 1, layer, peer);
    return 1;
  }
  return 0;
}

/* Every decode rank's pairs: the bytes each link carries, per pool. Both
 * ends price a pair's units; they agree or the node would refuse it. */
static int count(const side *P, const side *D, const kvs_xfer_shape *shape,
                 const kvs_xfer_shape *whole, totals *t, json_t *pairs) {
  size_t *lo = calloc(P->n, sizeof *lo), *hi = calloc(P->n, sizeof *hi);
  int rc = lo == NULL || hi == NULL ? (fprintf(kvs_tool_err(), TOOL ": out of memory\n"), 1) : 0;
  for (size_t d = 0; rc == 0 && d < D->n; d++) {
    rc = assign(P, D, d, lo, hi);
    for (size_t p = 0; rc == 0 && p < P->n; p++) {
      if (hi[p] == lo[p]) continue;
      uint64_t got[KVS_XFER_POOLS], sent[KVS_XFER_POOLS], all[KVS_XFER_POOLS];
      kvs_xfer_pool_bytes(&D->layouts[d], shape, lo[p], hi[p], got);
      kvs_xfer_pool_bytes(&P->layouts[p], shape, lo[p], hi[p], sent);
      kvs_xfer_pool_bytes(&D->layouts[d], whole, lo[p], hi[p], all);
      if (memcmp(got, sent, sizeof got) != 0) {
        fprintf(kvs_tool_err(),
                TOOL ": prefill rank %zu and decode rank %zu price layers %zu..%zu apart\n", p, d,
                lo[p], hi[p] - 1);
        rc = 1;
        break;
      }
      uint64_t bytes = sum_pools(got);
      for (int i = 0; i < KVS_XFER_POOLS; i++) t->link[i] += got[i];
      t->link_bytes += bytes;
      t->saved_bytes += sum_pools(all) - bytes;
      P->bytes[p] += bytes;
      D->bytes[d] += bytes;
      P->peers[p]++;
      D->peers[d]++;
      json_array_append_new(
          pairs, json_pack("{s:I,s:I,s:[I,I],s:I}", "prefill_rank", (json_int_t)p, "decode_rank",
                           (json_int_t)d, "layers", (json_int_t)lo[p], (json_int_t)(hi[p] - 1),
                           "bytes", (json_int_t)bytes));
    }
  }
  free(lo);
  free(hi);
  if (rc != 0) return rc;
  /* One copy: each prefill stage's layers once (its tp rank 0). */
  for (size_t p = 0; p < P->n; p++) {
    if (kvs_deployment_rank(P->run.plan, p)->tp_rank != 0) continue;
    uint64_t b[KVS_XFER_POOLS];
    const kvs_device_layout *l = &P->layouts[p];
    kvs_xfer_pool_bytes(l, shape, l->first_layer, l->end_layer, b);
    for (int i = 0; i < KVS_XFER_POOLS; i++) t->copy[i] += b[i];
  }
  t->copy_bytes = sum_pools(t->copy);
  for (int k = 0; k < 2; k++) {
    const side *s = k == 0 ? P : D;
    for (size_t r = 0; r < s->n; r++) {
      if (s->bytes[r] > t->slow_bytes)
        t->slow_side = k, t->slow_rank = r, t->slow_bytes = s->bytes[r];
    }
  }
  return 0;
}

/* What the decode node holds, by its plan: tokens of history per replica
 * and requests of L (its pages, and its ring slots: --max-running). */
typedef struct capacity {
  uint64_t num_pages, page, tokens, pages_per_request, by_pages, max_running, requests;
} capacity;

static capacity capacity_of(const side *D, uint64_t context) {
  const kvs_split *split = kvs_deployment_split(D->run.plan);
  capacity c = {split->num_pages,
                split->stages[0].sizes.page,
                split->full_token,
                0,
                0,
                D->args.options.max_running,
                0};
  c.pages_per_request = (context + c.page - 1) / c.page;
  c.by_pages = c.num_pages / c.pages_per_request;
  c.requests = c.by_pages < c.max_running ? c.by_pages : c.max_running;
  return c;
}

static json_t *side_json(const side *s, int k) {
  json_t *o = json_pack("{s:I,s:I,s:I}", "tp", (json_int_t)s->tp, "pp", (json_int_t)s->pp,
                        "replicas", (json_int_t)kvs_deployment_replicas(s->run.plan));
  json_t *ranks = json_array();
  for (size_t r = 0; r < s->n; r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(s->run.plan, r);
    json_array_append_new(
        ranks, json_pack("{s:I,s:I,s:I,s:[I,I],s:I,s:I}", "rank", (json_int_t)r, "tp_rank",
                         (json_int_t)rp->tp_rank, "pp_stage", (json_int_t)rp->pp_stage, "layers",
                         (json_int_t)rp->first, (json_int_t)(rp->end - 1),
                         k == 0 ? "send_bytes" : "receive_bytes", (json_int_t)s->bytes[r], "peers",
                         (json_int_t)s->peers[r]));
  }
  json_object_set_new(o, "ranks", ranks);
  return o;
}

static void print_json(const transfer_args *a, const side *S, const totals *t, const capacity *c,
                       json_t *pairs) {
  json_t *root = json_object();
  json_object_set_new(root, "model", json_string(S[1].model.name));
  json_object_set_new(root, "kv_dtype", json_string(kvs_kv_dtype_name(a->plan.options.kv_dtype)));
  json_object_set_new(root, "context", kvs_json_u64(a->context));
  json_object_set_new(root, "reuse", kvs_json_u64(a->reuse));
  json_object_set_new(root, "page", kvs_json_u64(c->page));
  json_object_set_new(root, "prefill", side_json(&S[0], 0));
  json_object_set_new(root, "decode", side_json(&S[1], 1));
  json_t *pools = json_object();
  for (int i = 0; i < KVS_XFER_POOLS; i++) {
    json_object_set_new(pools, kvs_xfer_pool_name((kvs_xfer_pool)i),
                        json_pack("{s:o,s:o}", "copy_bytes", kvs_json_u64(t->copy[i]), "link_bytes",
                                  kvs_json_u64(t->link[i])));
  }
  json_object_set_new(root, "pools", pools);
  json_object_set_new(root, "copy_bytes", kvs_json_u64(t->copy_bytes));
  json_object_set_new(root, "total_bytes", kvs_json_u64(t->link_bytes));
  json_object_set_new(root, "reuse_saved_bytes", kvs_json_u64(t->saved_bytes));
  json_object_set_new(root, "links", json_incref(pairs));
  json_object_set_new(root, "link_rate_gbs", json_real(a->link_gbs));
  json_object_set_new(root, "slowest_link",
                      json_pack("{s:s,s:I,s:o}", "side", SIDE_NAME[t->slow_side], "rank",
                                (json_int_t)t->slow_rank, "bytes", kvs_json_u64(t->slow_bytes)));
  json_object_set_new(root, "transfer_s", json_real((double)t->slow_bytes / (a->link_gbs * 1e9)));
  json_object_set_new(
      root, "capacity",
      json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "num_pages", kvs_json_u64(c->num_pages), "tokens",
                kvs_json_u64(c->tokens), "pages_per_request", kvs_json_u64(c->pages_per_request),
                "requests_by_pages", kvs_json_u64(c->by_pages), "max_running",
                kvs_json_u64(c->max_running), "requests", kvs_json_u64(c->requests)));
  char *text = json_dumps(root, JSON_COMPACT);
  fprintf(kvs_tool_out(), "%s\n", text != NULL ? text : "null");
  free(text);
  json_decref(root);
}

static void print_side(const side *s, int k, size_t n_gpus) {
  char layers[512] = "";
  size_t used = 0;
  for (size_t r = 0; r < s->n && used < sizeof layers; r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(s->run.plan, r);
    if (rp->tp_rank != 0) continue;
    used += (size_t)snprintf(layers + used, sizeof layers - used, "%s%zu-%zu", used ? ", " : "",
                             rp->first, rp->end - 1);
  }
  fprintf(kvs_tool_out(),
          "%-11s tp %zu x pp %zu = %zu ranks, %zu replica%s on the %zu GPUs; stages' layers %s\n",
          SIDE_NAME[k], s->tp, s->pp, s->n, kvs_deployment_replicas(s->run.plan),
          kvs_deployment_replicas(s->run.plan) > 1 ? "s" : "", n_gpus, layers);
}

static void print_text(const transfer_args *a, const side *S, const totals *t, const capacity *c) {
  char buf[32], buf2[32];
  kvs_plan_model_print(kvs_tool_out(), &S[1].model, &a->plan.options);
  print_side(&S[0], 0, S[0].run.n);
  print_side(&S[1], 1, S[1].run.n);
  uint64_t first,
      tails = kvs_xfer_tail(&(kvs_xfer_shape){a->context, a->reuse, c->page, 0}, &first);
  fprintf(kvs_tool_out(),
          "request     %llu tokens = %llu pages of %llu, %llu reused: pages %llu-%llu's "
          "compressed and indexer rows, %llu tail page%s window rows, the rings\n",
          (unsigned long long)a->context, (unsigned long long)c->pages_per_request,
          (unsigned long long)c->page, (unsigned long long)a->reuse,
          (unsigned long long)(a->reuse / c->page), (unsigned long long)(c->pages_per_request - 1),
          (unsigned long long)tails, tails == 1 ? "'s" : "s'");
  fprintf(kvs_tool_out(), "\n%-15s %15s %15s\n", "pool", "one copy (B)", "all links (B)");
  for (int i = 0; i < KVS_XFER_POOLS; i++) {
    fprintf(kvs_tool_out(), "%-15s %15llu %15llu\n", kvs_xfer_pool_name((kvs_xfer_pool)i),
            (unsigned long long)t->copy[i], (unsigned long long)t->link[i]);
  }
  fprintf(kvs_tool_out(), "%-15s %15llu %15llu\n\n", "total", (unsigned long long)t->copy_bytes,
          (unsigned long long)t->link_bytes);
  for (int k = 0; k < 2; k++) {
    for (size_t r = 0; r < S[k].n; r++) {
      const kvs_rank_plan *rp = kvs_deployment_rank(S[k].run.plan, r);
      fprintf(kvs_tool_out(),
              "link        %s rank %zu (tp %zu, stage %zu, layers %zu-%zu) %s %llu B (%s) %s %zu "
              "%s rank%s\n",
              SIDE_NAME[k], r, rp->tp_rank, rp->pp_stage, rp->first, rp->end - 1,
              k == 0 ? "sends" : "receives", (unsigned long long)S[k].bytes[r],
              kvs_format_bytes(S[k].bytes[r], buf, sizeof buf), k == 0 ? "to" : "from",
              S[k].peers[r], SIDE_NAME[1 - k], S[k].peers[r] == 1 ? "" : "s");
    }
  }
  fprintf(kvs_tool_out(), "total       %llu B (%s) over the links; --reuse keeps %llu B off them\n",
          (unsigned long long)t->link_bytes, kvs_format_bytes(t->link_bytes, buf, sizeof buf),
          (unsigned long long)t->saved_bytes);
  fprintf(kvs_tool_out(),
          "time        %.3f ms at %g GB/s per link: the busiest, %s rank %zu's, carries %s\n",
          (double)t->slow_bytes / (a->link_gbs * 1e9) * 1e3, a->link_gbs, SIDE_NAME[t->slow_side],
          t->slow_rank, kvs_format_bytes(t->slow_bytes, buf2, sizeof buf2));
  fprintf(kvs_tool_out(),
          "capacity    decode replica: %llu pages of %llu = %llu tokens of history; a request "
          "of %llu tokens takes %llu pages: %llu by pages, at most %llu running "
          "(--max-running): holds %llu\n",
          (unsigned long long)c->num_pages, (unsigned long long)c->page,
          (unsigned long long)c->tokens, (unsigned long long)a->context,
          (unsigned long long)c->pages_per_request, (unsigned long long)c->by_pages,
          (unsigned long long)c->max_running, (unsigned long long)c->requests);
}

static int run(transfer_args *a, side *S) {
  for (int k = 0; k < 2; k++) {
    side_flags *f = &a->side[k];
    S[k].tp = f->have_tp ? (size_t)f->tp : 1;
    S[k].pp = f->have_pp ? (size_t)f->pp : 1;
    S[k].n = S[k].tp * S[k].pp;
  }
  int rc = check_layouts(a, S);
  /* The decode side first: its notes are the ones said. */
  if (rc == 0) rc = plan_side(a, &S[1], 1);
  if (rc == 0) rc = plan_side(a, &S[0], 0);
  if (rc != 0) return rc;
  kvs_xfer_shape shape = {a->context, a->reuse, a->plan.options.page, 0};
  kvs_xfer_shape whole = {a->context, 0, a->plan.options.page, 0};
  totals t;
  memset(&t, 0, sizeof t);
  json_t *pairs = json_array();
  rc = count(&S[0], &S[1], &shape, &whole, &t, pairs);
  capacity c = capacity_of(&S[1], a->context);
  if (rc == 0 && a->plan.json) print_json(a, S, &t, &c, pairs);
  if (rc == 0 && !a->plan.json) print_text(a, S, &t, &c);
  json_decref(pairs);
  if (rc == 0 && c.requests == 0) {
    fflush(kvs_tool_out());
    fprintf(kvs_tool_err(),
            TOOL
            ": the decode node holds no request of %llu tokens: it takes %llu pages of the "
            "%llu a replica has\n",
            (unsigned long long)a->context, (unsigned long long)c.pages_per_request,
            (unsigned long long)c.num_pages);
    rc = 1;
  }
  return rc;
}

int kvs_kvplan_transfer(int argc, char **argv) {
  /* On the heap: the flags' per-GPU lists and the layouts are large, and
   * kvs_plan_run may run on a thread with a small stack. */
  transfer_args *a = calloc(1, sizeof *a);
  side *S = calloc(2, sizeof *S);
  int rc = 1;
  if (a == NULL || S == NULL) {
    fprintf(kvs_tool_err(), TOOL ": out of memory\n");
  } else {
    kvs_plan_options_init(&a->plan.options);
    kvs_deploy_flags_init(&a->plan.deploy);
    a->link_gbs = DEFAULT_LINK_GBS;
    rc = parse(argc, argv, a);
    if (rc == 0) rc = run(a, S);
    for (int k = 0; S != NULL && k < 2; k++) side_free(&S[k]);
  }
  free(a);
  free(S);
  return rc < 0 ? 0 : rc;
}
