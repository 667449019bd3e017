#include "tools/kvsim_run.h"

#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/geometry.h"
#include "core/model_config.h"
#include "core/mix.h"
#include "plan/cluster.h"
#include "shard/cluster_gather.h"
#include "shard/comm_nccl.h"
#include "shard/node.h"
#include "shard/step_message.h"
#include "tools/workload.h"
#include "shard/plan_overhead.h"
#include "kvplan/args.h"
#include "kvplan/deploy_flags.h"
#include "kvplan/plan_json.h"

/* ---- termination by the launcher ----
 * When a peer dies, mpirun terminates the survivors with SIGTERM. Say so
 * on stderr before going, with this rank and step, so the log shows who
 * was stopped where; only async-signal-safe calls here. */
static volatile sig_atomic_t current_step = -1;
static int signal_rank = -1;

static size_t put_number(char *out, long v) {
  char digits[24];
  size_t n = 0;
  if (v < 0) {
    out[0] = '?';
    return 1;
  }
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0 && n < sizeof digits);
  for (size_t i = 0; i < n; i++) out[i] = digits[n - 1 - i];
  return n;
}

static void on_sigterm(int sig) {
  char line[160];
  size_t n = 0;
  static const char a[] = "kvsim: rank ";
  static const char b[] = ": terminated by the launcher (SIGTERM) during step ";
  static const char c[] = ": the job is being torn down after a failure\n";
  memcpy(line + n, a, sizeof a - 1), n += sizeof a - 1;
  n += put_number(line + n, signal_rank);
  memcpy(line + n, b, sizeof b - 1), n += sizeof b - 1;
  n += put_number(line + n, (long)current_step);
  memcpy(line + n, c, sizeof c - 1), n += sizeof c - 1;
  ssize_t ignored = write(2, line, n);
  (void)ignored;
  _exit(128 + sig);
}

/* ---- one rank's run ---- */

typedef struct run {
  const kvsim_args *a;
  kvs_comm_t comm;
  bool threads;
  int rank, world;
  bool speaker;
  int tp, pp; /* the layout: the flags', or the rest of the ranks */
  kvs_geometry geometry;
  kvs_workload_options wo;
  uint64_t *budgets;     /* per GPU, when kvsim derives them */
  kvs_cluster_t cluster; /* gathered once, lent to the node */
  kvs_node_t node;
  kvs_workload_t workload;
  uint64_t steps;
  bool diverged;      /* a check found a divergence */
  bool step_logged;   /* this rank logged a divergence seen in a step */
  bool ring_ok;       /* every step's table contexts equal the pool's */
  bool drill_failed;  /* a drill this rank was to run could not run */
  uint64_t ring_hash; /* every step's ring-context digest, folded */
  uint64_t schedule_ns;
  kvs_shard_report report;
  uint64_t start_ns;
  kvs_shard_stats stats; /* the shard's, before the closing check */
  kvs_trace trace;       /* --trace, read by every rank */
  bool have_trace;
} run;

/* A failure ends this rank. When the peers know it too (the leader's
 * abort reached them over the step protocol) everyone exits cleanly;
 * otherwise -- a dead or stalled peer, a local failure in the middle of
 * the protocol -- the group is aborted so that nobody waits out a
 * deadline. */
static int fail(run *r, const char *what, const kvs_error *err, bool peers_know) {
  fprintf(stderr, "kvsim: rank %d: %s: %s: %s\n", r->rank, what, kvs_status_string(err->status),
          err->message);
  fflush(stderr);
  if (!(peers_know && kvs_comm_health(r->comm) == KVS_OK)) {
    kvs_comm_abort(r->comm, KVSIM_EXIT_FAILED); /* MPI_Abort under mpi: does not return */
  }
  return KVSIM_EXIT_FAILED;
}

/* The node's budget flags: the caller's bytes, a MiB figure skewed per GPU
 * (the default), or measured memory through the one rule. */
static int budget_request(run *r, kvs_node_options *b) {
  const kvsim_args *a = r->a;
  const kvs_deploy_flags *d = &a->deploy;
  b->memory_ratio = d->mem_fraction;
  b->reserve_bytes = d->reserve;
  if (d->given[KVS_DEPLOY_BUDGET]) {
    b->budget_bytes = d->budget;
    return 0;
  }
  if (d->given[KVS_DEPLOY_BUDGET_PER_GPU]) {
    b->budget_per_gpu = d->budgets;
    b->n_budget_per_gpu = d->n_budgets;
    return 0;
  }
  if (d->given[KVS_DEPLOY_MEM_FRACTION] || d->given[KVS_DEPLOY_RESERVE]) return 0;
  /* --budget-mib: one budget per GPU of every node, GPU g skewed by g % 4
   * so the agreement and the split have work to do. */
  size_t n = kvs_cluster_gpu_count(r->cluster);
  r->budgets = calloc(n, sizeof *r->budgets);
  if (r->budgets == NULL) return KVSIM_EXIT_FAILED;
  for (size_t g = 0; g < n; g++) {
    double share = 1.0 - a->budget_skew * (double)(g % 4) / 100.0;
    r->budgets[g] = (uint64_t)(a->budget_mib * share * 1048576.0);
  }
  b->budget_per_gpu = r->budgets;
  b->n_budget_per_gpu = n;
  return 0;
}

static void describe_rank(const run *r) {
  const kvs_rank_plan *rp = kvs_node_rank_plan(r->node);
  const kvs_gpu_info *gpu = kvs_node_gpu(r->node);
  const kvs_split *split = kvs_deployment_split(kvs_deployment(r->node));
  uint64_t alone = 0;
  kvs_node_max_pages(kvs_deployment_request(r->node), rp->first, rp->end, rp->budget_bytes, &alone,
                     NULL);
  fprintf(stderr,
          "kvsim: rank %d (tp rank %zu, stage %zu, layers [%zu, %zu), GPU %zu %s, NUMA %d, "
          "node %zu, %s "
          "tables): budget %" PRIu64 " B holds %" PRIu64 " pages alone; agreed %" PRIu64
          " (rank %zu limits); pool %" PRIu64 " B, %" PRIu64 " B padding; %s\n",
          r->rank, rp->tp_rank, rp->pp_stage, rp->first, rp->end, gpu->index, gpu->pci_busid,
          gpu->numa_node, gpu->host,
          kvs_table_kind_name(kvs_table_kind_of(kvs_node_table(r->node))), rp->budget_bytes, alone,
          split->num_pages, kvs_deployment_limiting_rank(kvs_deployment(r->node)),
          rp->device.total_bytes, rp->device.padding_bytes,
          kvs_node_binding(r->node)->cpu_bound ? "thread bound to its GPU's CPUs"
                                               : kvs_node_binding(r->node)->reason);
}

/* ---- setup: the node every rank builds, then the workload on it ---- */

/* The model as kvplan reads --model (a built-in name, a model folder or a
 * config.json, every field kvplan needs), its main layers planned. */
static int resolve_model(run *r) {
  kvs_error err;
  kvs_error_clear(&err);
  kvs_model_config *config = malloc(sizeof *config);
  kvs_status status = config == NULL ? kvs_error_set(&err, KVS_ERR_NO_MEMORY, "out of memory")
                                     : kvs_model_config_resolve(r->a->model, config, &err);
  if (status == KVS_OK) status = kvs_model_config_planned_geometry(config, 0, &r->geometry, &err);
  free(config);
  if (status == KVS_OK) return 0;
  if (r->speaker) fprintf(stderr, "kvsim: %s\n", err.message);
  return status == KVS_ERR_NO_MEMORY ? KVSIM_EXIT_FAILED : KVSIM_EXIT_USAGE;
}

static size_t gcd(size_t a, size_t b) { return b == 0 ? a : gcd(b, a % b); }

/* "1, 2 or 4": the divisors of n. */
static void list_divisors(size_t n, char *buf, size_t len) {
  size_t used = 0, count = 0, last = 0;
  buf[0] = '\0';
  for (size_t k = 1; k <= n; k++) {
    if (n % k != 0) continue;
    if (count > 0 && used < len) {
      used += (size_t)snprintf(buf + used, len - used, "%s%zu", count > 1 ? ", " : "", last);
    }
    last = k;
    count++;
  }
  if (used < len) snprintf(buf + used, len - used, "%s%zu", count > 1 ? " or " : "", last);
}

/* tp x pp, as kvplan picks it with a rank where kvplan has a GPU: the
 * flags; one alone takes the rest of the ranks; neither, the largest
 * group every node holds whole that divides the ranks, the rest as
 * stages. A layout that is not the group is refused naming the values
 * that would be. Every rank computes the same from the same cluster. */
static int resolve_layout(run *r) {
  const kvsim_args *a = r->a;
  const kvs_deploy_flags *d = &a->deploy;
  size_t world = (size_t)r->world;
  size_t tp = d->given[KVS_DEPLOY_TP] ? (size_t)d->tp : 0;
  size_t pp = d->given[KVS_DEPLOY_PP] ? (size_t)d->pp : 0;
  if (tp == 0 && pp == 0) {
    size_t per_host = 0;
    for (size_t k = 0; k < kvs_cluster_host_count(r->cluster); k++) {
      per_host = gcd(per_host, kvs_cluster_host_gpu_count(r->cluster, k));
    }
    tp = gcd(per_host, world);
    pp = world / tp;
  } else if (pp == 0) {
    pp = world % tp == 0 ? world / tp : 1;
  } else if (tp == 0) {
    tp = world % pp == 0 ? world / pp : 1;
  }
  r->tp = (int)tp;
  r->pp = (int)pp;
  if (tp * pp == world) return 0;
  if (r->speaker) {
    char values[256];
    list_divisors(world, values, sizeof values);
    fprintf(stderr, "kvsim: tp %zu x pp %zu = %zu ranks, but the group has %zu; %s can be %s\n", tp,
            pp, tp * pp, world, d->given[KVS_DEPLOY_TP] ? "--tp" : "--pp", values);
  }
  return KVSIM_EXIT_USAGE;
}

/* The arguments against the group the launcher made. Every rank sees the
 * same arguments and fails alike, so only the speaker says why. */
static int check_group(run *r) {
  const kvsim_args *a = r->a;
  const char *refusal = NULL;
  if ((a->inject && a->inject_rank >= r->world) || (a->kill && a->kill_rank >= r->world) ||
      (a->stall && a->stall_rank >= r->world) ||
      (a->inject_slot && a->inject_slot_rank >= r->world) ||
      (a->inject_cache && a->inject_cache_rank >= r->world)) {
    refusal = "a RANK:STEP names a rank outside the";
  } else if ((a->inject || a->inject_slot || a->inject_cache) && r->world == 1) {
    /* One rank has no peer to differ from: the check would agree and the
     * drill would pass without having tested anything. */
    refusal = "a divergence drill needs a second rank to diverge from: there is one of the";
  }
  if (refusal == NULL) return resolve_model(r);
  if (r->speaker) fprintf(stderr, "kvsim: %s %d ranks\n", refusal, r->world);
  return KVSIM_EXIT_USAGE;
}

/* The seeded scheduler every rank runs alike. */
static kvs_workload_options workload_options(const kvsim_args *a) {
  kvs_workload_options wo = KVS_WORKLOAD_OPTIONS_INIT;
  wo.seed = a->seed;
  wo.max_running = a->requests; /* at most --max-running (kvsim_args) */
  wo.max_waiting = 4 * a->requests;
  wo.arrival_rate = a->arrival_rate;
  wo.prompt_max = 1536; /* long prompts: the full-history pool, not the
                         * request cap, is what refuses admission */
  if (a->trace != NULL) {
    wo.step_ms = a->step_ms;
    wo.prefix_policy = a->prefix_cache;
  }
  return wo;
}

/* The node's options from the flags; the cluster and budgets come later. */
static void node_options(run *r, kvs_node_options *o) {
  const kvsim_args *a = r->a;
  kvs_node_options_init(o);
  o->geometry = &r->geometry;
  /* bf16 rows; the rings where --state-rings puts them: the node sizes
   * one request slot per --max-running request and the dummy, as kvplan
   * does, so that the same flags plan the same pool. The workload runs
   * --requests of them. */
  o->kv_dtype = a->kv_dtype;
  o->prefix_cache = a->trace != NULL && a->prefix_cache != KVS_PREFIX_POLICY_NONE;
  o->host_cache_bytes = a->deploy.host_cache;
  o->disk_cache_bytes = a->deploy.disk_cache;
  o->disk_path = a->disk_path;
  o->model_name = a->model != NULL ? a->model : "dsv4-flash";
  /* kvsim prices the copies by --host-bandwidth; its tables hold no KV. */
  o->index_only = true;
  o->state_rings = a->state_rings;
  o->swa_ratio = a->swa_ratio;
  /* The workload's longest request: its floor is kvplan's default one,
   * the prefill reach capped at 8 pages either way. */
  o->max_seq_len = kvs_workload_max_seq_len(&r->wo);
  o->max_running = a->max_running;
  o->radix = a->radix;
  o->topology = a->deploy.topology;
  o->cuda_device = a->cuda_device;
  o->device = a->device;
  /* NCCL steps: the node's own communicator on its plan's GPU, set up over
   * the launcher's (MPI, or loopback in kvsim_local); the tables on that
   * GPU. */
  if (strcmp(a->backend, "nccl") == 0) {
    o->step_backend = "nccl";
    if (o->device == KVS_NODE_DEVICE_AUTO) o->device = KVS_NODE_DEVICE_CUDA;
  }
  o->check_every = a->check_every;
  o->check_integrity = true;
  o->hosts = (size_t)a->deploy.nodes;
  /* A cluster simulated here runs every node's ranks on this one machine
   * (nodes, a list, or hosts named by --host): the launcher's local ranks
   * are this machine's, not the plan's nodes'. */
  o->host = a->host;
  const char *topology = a->deploy.topology;
  bool simulated =
      a->deploy.nodes > 1 || a->host != NULL || (topology != NULL && strchr(topology, ',') != NULL);
  o->local_rank =
      simulated && a->local_rank == KVS_NODE_FROM_LAUNCHER ? KVS_NODE_UNCHECKED : a->local_rank;
  o->host_index =
      simulated && a->host_index == KVS_NODE_FROM_LAUNCHER ? KVS_NODE_UNCHECKED : a->host_index;
}

/* The cluster, once (a collective): its GPU count sizes the skewed
 * budgets, and the node borrows it. */
/* A collective step of the setup failed on every rank alike: each says so
 * and exits. Options the ranks disagree on, or a layout or placement the
 * group is not, are bad usage; what the machine lacks is unavailable; a
 * budget, device or file that cannot serve is a failure. */
static int setup_failed(const run *r, const char *what, kvs_status status, const kvs_error *err) {
  fprintf(stderr, "kvsim: rank %d: %s: %s: %s\n", r->rank, what, kvs_status_string(status),
          err->message);
  return status == KVS_ERR_UNSUPPORTED        ? KVSIM_EXIT_UNAVAILABLE
         : status == KVS_ERR_INVALID_ARGUMENT ? KVSIM_EXIT_USAGE
                                              : KVSIM_EXIT_FAILED;
}

static int gather_cluster(run *r) {
  const kvsim_args *a = r->a;
  kvs_error err;
  kvs_error_clear(&err);
  char note[768] = "";
  kvs_status gathered = kvs_cluster_gather(r->comm, a->deploy.topology, (size_t)a->deploy.nodes,
                                           a->host, &r->cluster, note, sizeof note, &err);
  if (gathered != KVS_OK) return setup_failed(r, "cluster", gathered, &err);
  if (r->speaker && note[0] != '\0') fprintf(stderr, "kvsim: %s\n", note);
  return 0;
}

/* Memory flags above what the cluster's GPUs have cannot be true: bad
 * usage, in the sentence kvplan and the node use (--budget-mib named as
 * given). Every rank reads the same flags and cluster, so only the
 * speaker says it. */
static int check_memory(const run *r, const kvs_node_options *o) {
  kvs_memory_input in[KVS_MEMORY_INPUT_COUNT];
  kvs_deploy_memory_inputs(&r->a->deploy, KVSIM_DEPLOY_FLAGS, in);
  if (r->a->have_budget_mib && r->budgets != NULL) {
    in[KVS_MEMORY_BUDGET] = (kvs_memory_input){"--budget-mib", 0, r->budgets, o->n_budget_per_gpu};
  }
  kvs_error err;
  kvs_error_clear(&err);
  uint64_t host = r->a->deploy.host_cache;
  if (kvs_memory_inputs_check(in, kvs_cluster_gpus(r->cluster), kvs_cluster_gpu_count(r->cluster),
                              &err) == KVS_OK &&
      (host == 0 ||
       kvs_cluster_host_tier_check(r->cluster, "--host-cache", host, &err) == KVS_OK)) {
    return 0;
  }
  if (r->speaker) fprintf(stderr, "kvsim: %s\n", err.message);
  return KVSIM_EXIT_USAGE;
}

/* The node itself (a collective): plan, agreement, pool and tables. */
static int create_node(run *r, kvs_node_options *o) {
  kvs_error err;
  kvs_error_clear(&err);
  int rc = budget_request(r, o);
  if (rc == 0) rc = check_memory(r, o);
  if (rc != 0) return rc;
  kvs_status status = kvs_node_create_in_cluster(r->comm, o, r->cluster, &r->node, &err);
  return status != KVS_OK ? setup_failed(r, "node setup", status, &err) : 0;
}

/* The speaker's line about the whole run, once the node is up. */
static void announce(const run *r) {
  const kvsim_args *a = r->a;
  kvs_shard_t shard = kvs_node_shard(r->node);
  const kvs_split *split = kvs_deployment_split(kvs_deployment(r->node));
  fprintf(stderr,
          "kvsim: %d ranks (tp %d x pp %d, backend %s, %s tables, topology %s): %" PRIu64
          " full pages, %" PRIu64
          " window pages, step capacity %zu entries (%zu-byte "
          "message), check every %" PRIu64 " steps\n",
          r->world, r->tp, r->pp, kvs_comm_backend(kvs_node_step_comm(r->node)),
          kvs_table_kind_name(kvs_table_kind_of(kvs_node_table(r->node))),
          kvs_cluster_label(kvs_node_cluster(r->node)), split->num_pages, split->n_win_pages,
          kvs_shard_step_capacity(shard), kvs_step_message_bytes(kvs_shard_step_capacity(shard)),
          a->check_every);
}

static kvs_status reduce(run *r, uint64_t *values, size_t n, kvs_comm_op op, kvs_error *err);

/* The flags that shape the steps rather than the pool, in the order a
 * disagreement is reported. */
enum { W_SEED, W_STEPS, W_ARRIVAL, W_REQUESTS, W_BARE, W_COUNT };
static const char *const workload_flags[W_COUNT] = {"--seed", "--steps", "--arrival-rate",
                                                    "--requests", "--bare-broadcasts"};

static void workload_words(const kvsim_args *a, uint64_t *w) {
  w[W_SEED] = a->seed;
  w[W_STEPS] = a->steps;
  memcpy(&w[W_ARRIVAL], &a->arrival_rate, sizeof w[W_ARRIVAL]);
  w[W_REQUESTS] = a->requests;
  w[W_BARE] = a->bare_broadcasts;
}

static const char *word_text(size_t flag, uint64_t word, char *buf, size_t len) {
  double rate;
  memcpy(&rate, &word, sizeof rate);
  if (flag == W_ARRIVAL) {
    snprintf(buf, len, "%g", rate);
  } else {
    snprintf(buf, len, "%" PRIu64, word);
  }
  return buf;
}

/* Collective, on the path where some rank differs: the leader's value of
 * the flag, the first rank that differs from it and that rank's value. */
static kvs_status name_the_difference(run *r, size_t flag, const uint64_t *mine, uint64_t *leader,
                                      uint64_t *rank, uint64_t *theirs, kvs_error *err) {
  *leader = r->rank == 0 ? mine[flag] : 0;
  kvs_status status = reduce(r, leader, 1, KVS_COMM_SUM, err);
  *rank = mine[flag] != *leader ? (uint64_t)r->rank : UINT64_MAX;
  if (status == KVS_OK) status = reduce(r, rank, 1, KVS_COMM_MIN, err);
  *theirs = (uint64_t)r->rank == *rank ? mine[flag] : 0;
  if (status == KVS_OK) status = reduce(r, theirs, 1, KVS_COMM_SUM, err);
  return status;
}

/* Collective: every rank runs the leader's workload, or every rank fails
 * at setup (exit 2) naming the flag and the first rank that differs. The
 * node fingerprints the options that shape the pool; these shape the
 * steps, and ranks launched (MPMD) with different ones would otherwise be
 * reported as a divergence or as corrupt data far from the cause. One
 * allreduce when they agree, three more to name the difference. */
static int agree_on_workload(run *r) {
  uint64_t mine[W_COUNT], v[2 * W_COUNT];
  workload_words(r->a, mine);
  for (size_t i = 0; i < W_COUNT; i++) v[i] = mine[i], v[W_COUNT + i] = ~mine[i];
  kvs_error err;
  kvs_error_clear(&err);
  kvs_status status = reduce(r, v, 2 * W_COUNT, KVS_COMM_MIN, &err);
  if (status != KVS_OK) return setup_failed(r, "workload agreement", status, &err);
  size_t flag = 0;
  while (flag < W_COUNT && v[flag] == ~v[W_COUNT + flag]) flag++; /* min == max */
  if (flag == W_COUNT) return 0;
  uint64_t leader, rank, theirs;
  status = name_the_difference(r, flag, mine, &leader, &rank, &theirs, &err);
  if (status != KVS_OK) return setup_failed(r, "workload agreement", status, &err);
  if (r->speaker) {
    char a[32], b[32];
    fprintf(stderr,
            "kvsim: rank %" PRIu64
            " was given %s %s, the leader %s %s: every rank runs the "
            "leader's workload, so --seed, --steps, --arrival-rate, --requests and "
            "--bare-broadcasts must be the same on every rank\n",
            rank, workload_flags[flag], word_text(flag, theirs, a, sizeof a), workload_flags[flag],
            word_text(flag, leader, b, sizeof b));
  }
  return KVSIM_EXIT_USAGE;
}

/* Everything before the first step, in the node's order: the arguments
 * against the group, the cluster, the node, then the workload on its
 * shard. */
static int setup_node(run *r) {
  int rc = check_group(r);
  if (rc == 0) rc = agree_on_workload(r);
  if (rc != 0) return rc;
  r->wo = workload_options(r->a);
  if (r->a->trace != NULL) {
    /* Every rank reads the trace; a line it cannot take is bad usage. */
    kvs_error terr;
    kvs_error_clear(&terr);
    kvs_status loaded = kvs_trace_load(r->a->trace, r->a->trace_block, &r->trace, &terr);
    if (loaded != KVS_OK) {
      if (r->speaker) fprintf(stderr, "kvsim: %s\n", terr.message);
      return loaded == KVS_ERR_NO_MEMORY ? KVSIM_EXIT_FAILED : KVSIM_EXIT_USAGE;
    }
    r->have_trace = true;
    r->wo.trace = &r->trace;
    /* The simulated clock counts steps of --step-ms exactly up to 2^53. */
    double last = r->trace.timestamp[r->trace.n - 1];
    if (!(last / r->a->step_ms < 0x1p53)) {
      if (r->speaker) {
        fprintf(stderr,
                "kvsim: trace %s's last arrival, at %.0f ms, is 2^53 or more steps of --step-ms "
                "%g away: give a longer --step-ms\n",
                r->a->trace, last, r->a->step_ms);
      }
      return KVSIM_EXIT_USAGE;
    }
  }
  kvs_node_options o;
  node_options(r, &o);
  if ((rc = gather_cluster(r)) != 0 || (rc = resolve_layout(r)) != 0) return rc;
  o.tp = r->tp;
  o.pp = r->pp;
  if ((rc = create_node(r, &o)) != 0) return rc;
  describe_rank(r);
  kvs_error err;
  kvs_error_clear(&err);
  /* A kvshard hit may re-prefill one window (P tokens) before its
   * boundary rather than recompute down to the deepest retained tail. */
  r->wo.reprefill_tokens = kvs_node_page(r->node);
  if (r->a->deploy.host_cache > 0 || r->a->deploy.disk_cache > 0) {
    /* Every rank copies its own page rows over its GPU's own host link, at
     * once (a host fetch, and a block read from disk on its way to the
     * GPU): a copy takes as long as the largest share (the stage with the
     * most compressed and indexer rows), not the machine's sum. A
     * machine's disk reads every one of its ranks' share of a block: the
     * deployment's bytes a block over its machines. */
    kvs_deployment_t plan = kvs_deployment(r->node);
    uint64_t share = 0, total = 0;
    for (size_t k = 0; k < kvs_deployment_rank_count(plan); k++) {
      uint64_t bytes = kvs_deployment_rank_host_bytes(plan, k);
      if (bytes > share) share = bytes;
      total += bytes;
    }
    r->wo.host_ms_per_page = (double)share / (r->a->host_bandwidth * 1e6);
    uint64_t hosts = r->a->deploy.nodes > 0 ? r->a->deploy.nodes : 1;
    if (r->a->deploy.disk_cache > 0) {
      r->wo.disk_ms_per_page = (double)total / (double)hosts / (r->a->disk_bandwidth * 1e6);
    }
  }
  if (kvs_workload_create(kvs_node_shard(r->node), &r->wo, &r->workload, &err) != KVS_OK) {
    if (r->speaker) fprintf(stderr, "kvsim: %s\n", err.message);
    return KVSIM_EXIT_USAGE;
  }
  if (r->speaker) announce(r);
  return 0;
}

/* Whether this rank dies now. A process raises SIGKILL; a rank thread
 * (kvsim_local) stops where it is, leaving its communicator as a crashed
 * process leaves its sockets: its peers learn of it only by their own
 * deadlines. */
static bool killed_now(run *r, uint64_t s) {
  const kvsim_args *a = r->a;
  if (!(a->kill && r->rank == a->kill_rank && s == a->kill_step) || !r->threads) return false;
  fprintf(stderr,
          "kvsim: rank %d dies at step %" PRIu64
          " (--kill-rank): its thread stops without a word to its peers\n",
          r->rank, s);
  fflush(stderr);
  return true;
}

static void drills(run *r, uint64_t s) {
  const kvsim_args *a = r->a;
  if (a->kill && r->rank == a->kill_rank && s == a->kill_step) {
    fprintf(stderr, "kvsim: rank %d kills itself at step %" PRIu64 " (--kill-rank)\n", r->rank, s);
    fflush(stderr);
    raise(SIGKILL);
  }
  if (a->stall && r->rank == a->stall_rank && s == a->stall_step) {
    fprintf(stderr, "kvsim: rank %d stops itself at step %" PRIu64 " (--stall-rank)\n", r->rank, s);
    fflush(stderr);
    raise(SIGSTOP);
  }
}

/* A drill: one binding moved on this rank only, as a lost or misapplied
 * update would: a full page's window page (slot false) or a running
 * request's request slot (slot true). The line names what moved, for the
 * tests to match the check's report against. */
static void inject(run *r, uint64_t s, bool slot) {
  uint64_t what;
  int64_t from, to;
  kvs_error err;
  kvs_shard_t shard = kvs_node_shard(r->node);
  kvs_status status = slot ? kvs_workload_live_request(r->workload, &what, &err)
                           : kvs_workload_live_page(r->workload, &what, &err);
  if (status == KVS_OK) {
    status = slot ? kvs_shard_inject_slot_flip(shard, what, &from, &to, &err)
                  : kvs_shard_inject_flip(shard, what, &from, &to, &err);
  }
  if (status != KVS_OK) {
    /* Nothing moved, so the run goes on and its checks would agree: the
     * closing verdict turns that into an error rather than a pass. */
    fprintf(stderr, "kvsim: rank %d could not inject a%s divergence at step %" PRIu64 ": %s\n",
            r->rank, slot ? " slot" : "", s, err.message);
    r->drill_failed = true;
    return;
  }
  fprintf(stderr,
          "kvsim: rank %d injected a divergence after step %" PRIu64 ": %s %" PRIu64
          " moved from %s %" PRId64 " to %" PRId64 "\n",
          r->rank, s, slot ? "request" : "full page", what, slot ? "request slot" : "window page",
          from, to);
}

/* --inject-cache-divergence: one cached block's reference count changes on
 * this rank alone (a block a running request holds, else the lowest). */
static void inject_cache(run *r, uint64_t s) {
  kvs_window_pool_t pool = kvs_node_pool(r->node);
  uint64_t block = UINT64_MAX;
  kvs_error err;
  kvs_error_clear(&err);
  if (kvs_workload_live_block(r->workload, &block, &err) != KVS_OK) {
    uint64_t pages = kvs_window_pool_full_tokens(pool) / kvs_window_pool_page_size(pool);
    for (uint64_t p = 0; p < pages && block == UINT64_MAX; p++) {
      if (kvs_window_pool_prefix_node(pool, p, NULL, NULL, NULL, NULL, NULL) == KVS_OK) block = p;
    }
  }
  uint64_t key = 0;
  uint32_t refs = 0;
  kvs_status status = block == UINT64_MAX
                          ? kvs_error_set(&err, KVS_ERR_NOT_FOUND, "nothing is cached yet")
                          : kvs_window_pool_prefix_node(pool, block, &key, NULL, &refs, NULL, &err);
  if (status == KVS_OK) status = kvs_window_pool_prefix_inject(pool, block, +1, &err);
  if (status != KVS_OK) {
    fprintf(stderr, "kvsim: rank %d could not inject a cache divergence at step %" PRIu64 ": %s\n",
            r->rank, s, err.message);
    r->drill_failed = true;
    return;
  }
  fprintf(stderr,
          "kvsim: rank %d injected a cache divergence after step %" PRIu64
          ": cached block at full page %" PRIu64 " (key %" PRIu64
          ") holds %u references here, "
          "%u on the leader\n",
          r->rank, s, block, key, refs + 1, refs);
}

/* The step's ring contexts against the pool's own (the CPU reference):
 * a mismatch is logged once and ends in a divergence verdict. */
static void verify_ring(run *r, uint64_t s) {
  const int64_t *own, *prev, *ring;
  size_t n = 0;
  kvs_error err;
  kvs_status status = kvs_node_host_ring(r->node, &own, &prev, &ring, &n, &err);
  if (status == KVS_OK) status = kvs_workload_verify_ring(r->workload, own, prev, ring, n, &err);
  const int64_t *csa, *hca;
  if (status == KVS_OK) status = kvs_node_host_state(r->node, &csa, &hca, &n, &err);
  if (status == KVS_OK) status = kvs_workload_verify_state(r->workload, csa, hca, n, &err);
  if (status != KVS_OK && r->ring_ok) {
    fprintf(stderr,
            "kvsim: rank %d: step %" PRIu64
            ": the tables' ring contexts differ from the pool's: "
            "%s\n",
            r->rank, s, err.message);
    r->ring_ok = false;
  }
}

/* One scheduler step: the leader's scheduling, the node's step (broadcast,
 * apply, ring contexts on the tables), the check against the pool. */
static int one_step(run *r, uint64_t s) {
  kvs_error err;
  kvs_error_clear(&err);
  current_step = (sig_atomic_t)s;
  uint64_t start = kvs_now_ns();
  kvs_status status = kvs_workload_schedule(r->workload, s, &err);
  r->schedule_ns += kvs_now_ns() - start;
  if (status != KVS_OK) return fail(r, "step failed", &err, true);
  kvs_ring_batch batch;
  kvs_workload_batch(r->workload, &batch);
  kvs_node_step_info result;
  status = kvs_node_step_rows(r->node, &batch, true, &result, &err);
  if (status == KVS_ERR_DIVERGENCE) {
    if (!r->step_logged) {
      fprintf(stderr, "kvsim: rank %d: step %" PRIu64 ": %s\n", r->rank, s, err.message);
    }
    r->step_logged = true;
  } else if (status != KVS_OK) {
    return fail(r, "step failed", &err, kvs_shard_health(kvs_node_shard(r->node)) == KVS_ERR_COMM);
  }
  r->ring_hash = kvs_mix64(r->ring_hash, result.digest);
  if (r->a->verify) verify_ring(r, s);
  kvs_workload_advance(r->workload);
  /* With a trace, the leader's decisions of this step, on every rank. */
  if (r->have_trace) {
    kvs_error lerr;
    kvs_error_clear(&lerr);
    kvs_status learned =
        kvs_workload_learn(r->workload, result.info.entries_at, result.info.entries, &lerr);
    if (learned != KVS_OK && !r->step_logged) {
      fprintf(stderr, "kvsim: rank %d: step %" PRIu64 ": %s\n", r->rank, s, lerr.message);
      r->step_logged = true;
    }
  }
  r->steps = s + 1;
  return 0;
}

static int check(run *r, uint64_t s, const char *when) {
  kvs_error err;
  kvs_status status = kvs_node_check_report(r->node, &r->report, &err);
  if (status == KVS_ERR_DIVERGENCE) {
    r->diverged = true;
    if (r->speaker) {
      if (strcmp(when, "end") == 0) {
        fprintf(stderr, "kvsim: divergence detected at the end: %s\n", err.message);
      } else {
        fprintf(stderr, "kvsim: divergence detected at step %" PRIu64 ": %s\n", s, err.message);
      }
    }
    return 0;
  }
  if (status != KVS_OK) {
    return fail(r, strcmp(when, "end") == 0 ? "final check failed" : "digest check failed", &err,
                false);
  }
  return 0;
}

static void progress(run *r, uint64_t *last_ns) {
  if (!r->speaker || r->a->progress_s <= 0) return;
  uint64_t now = kvs_now_ns();
  if ((double)(now - *last_ns) < r->a->progress_s * 1e9) return;
  kvs_workload_counters c;
  kvs_workload_counters_get(r->workload, &c);
  double elapsed = (double)(now - r->start_ns) * 1e-9;
  if (r->have_trace) {
    fprintf(stderr,
            "kvsim: step %" PRIu64 ", %.0f steps/s, trace requests: %" PRIu64
            " of %zu served, %" PRIu64 " running, %" PRIu64 " waiting; hit rate %.4f so far\n",
            r->steps, (double)r->steps / elapsed, c.trace_done, r->trace.n, c.running, c.waiting,
            c.prompt_tokens > 0 ? (double)c.hit_tokens / (double)c.prompt_tokens : 0.0);
    *last_ns = now;
    return;
  }
  fprintf(stderr,
          "kvsim: step %" PRIu64 "/%" PRIu64 " (%.0f%%), %.0f steps/s, %" PRIu64
          " running, %" PRIu64 " waiting, %" PRIu64 " completed, %" PRIu64 " refusals\n",
          r->steps, r->a->steps, 100.0 * (double)r->steps / (double)r->a->steps,
          (double)r->steps / elapsed, c.running, c.waiting, c.completed, c.refused);
  *last_ns = now;
}

/* The collective the runtime cannot avoid, timed alone: a broadcast of the
 * step message's bytes from the leader, on the same communicator. Mean
 * nanoseconds per broadcast, or 0 when none are asked for. */
static kvs_status bare_broadcast(run *r, double *mean_ns, kvs_error *err) {
  *mean_ns = 0;
  uint64_t n = r->a->bare_broadcasts;
  if (n == 0) return KVS_OK;
  size_t bytes = kvs_step_message_bytes(kvs_shard_step_capacity(kvs_node_shard(r->node)));
  kvs_comm_buffer buf = {NULL, NULL, 0, NULL};
  kvs_comm_t comm = kvs_node_step_comm(r->node);
  kvs_status status = kvs_comm_buffer_alloc(comm, bytes, &buf, err);
  if (status != KVS_OK) return status;
  memset(buf.host, 0x5a, bytes);
  uint64_t start = kvs_now_ns();
  for (uint64_t i = 0; i < n && status == KVS_OK; i++) {
    status = kvs_comm_broadcast(comm, &buf, bytes, 0, err);
  }
  *mean_ns = (double)(kvs_now_ns() - start) / (double)n;
  kvs_comm_buffer_free(comm, &buf);
  return status;
}

/* Sums per-rank figures over the ranks, or takes min and max of words,
 * in one allreduce each. */
static kvs_status reduce(run *r, uint64_t *values, size_t n, kvs_comm_op op, kvs_error *err) {
  kvs_comm_buffer buf = {NULL, NULL, 0, NULL};
  kvs_status status = kvs_comm_buffer_alloc(r->comm, n * sizeof(uint64_t), &buf, err);
  if (status != KVS_OK) return status;
  memcpy(buf.host, values, n * sizeof(uint64_t));
  status = kvs_comm_allreduce_u64(r->comm, &buf, n, op, err);
  if (status == KVS_OK) memcpy(values, buf.host, n * sizeof(uint64_t));
  kvs_comm_buffer_free(r->comm, &buf);
  return status;
}

enum { T_BROADCAST, T_MIRROR, T_APPLY, T_RING, T_DIGEST, T_SCHEDULE, T_BARE, T_COUNT };

static json_t *time_json(const double *us) {
  json_t *o = json_object();
  json_object_set_new(o, "broadcast", json_real(us[T_BROADCAST]));
  json_object_set_new(o, "mirror", json_real(us[T_MIRROR]));
  json_object_set_new(o, "apply", json_real(us[T_APPLY]));
  json_object_set_new(o, "ring_ctx", json_real(us[T_RING]));
  json_object_set_new(o, "digest", json_real(us[T_DIGEST]));
  json_object_set_new(o, "schedule", json_real(us[T_SCHEDULE]));
  return o;
}

/* The node's step, of the times: broadcast + mirror + apply + ring contexts. */
static double node_step_us(const double *us) {
  return us[T_BROADCAST] + us[T_MIRROR] + us[T_APPLY] + us[T_RING];
}

/* The simulated seconds of a trace run from its first arrival: the steps
 * run and the idle ones the clock jumped over since (a trace stamped in
 * Unix-epoch milliseconds does not count the decades before it). */
static double simulated_s(const run *r, const kvs_workload_counters *c) {
  uint64_t clock = r->steps + c->idle_steps_skipped;
  uint64_t span = clock > c->trace_start_step ? clock - c->trace_start_step : 0;
  return (double)span * r->a->step_ms / 1000.0;
}

/* The run for people: on stdout, or on stderr when stdout holds the JSON. */
static void print_summary(run *r, const kvs_shard_stats *s, const double *us, double elapsed_s) {
  double per = r->steps > 0 ? (double)r->steps : 1.0;
  kvs_workload_counters c;
  kvs_workload_counters_get(r->workload, &c);
  FILE *human = r->a->json ? stderr : stdout;
  fprintf(human,
          "kvsim: %" PRIu64 " steps in %.3f s (%.1f us/step): %" PRIu64 " arrivals, %" PRIu64
          " admitted, %" PRIu64 " completed, %" PRIu64 " refusals (pool full), %" PRIu64
          " dropped; %" PRIu64 " prefill + %" PRIu64 " decode tokens; %" PRIu64 " ring contexts\n",
          r->steps, elapsed_s, r->steps ? 1e6 * elapsed_s / per : 0.0, c.arrivals, c.admitted,
          c.completed, c.refused, c.dropped, c.prefill_tokens, c.decode_tokens, c.contexts);
  fprintf(human,
          "kvsim: %" PRIu64 " binds + %" PRIu64 " frees; fullest step %" PRIu64
          " entries; payload %.1f B/step, wire %.1f B/step (fixed capacity); %" PRIu64 " checks\n",
          s->binds, s->frees, s->max_entries, (double)s->payload_bytes / per,
          (double)s->wire_bytes / per, s->checks);
  double step_us = node_step_us(us);
  fprintf(human,
          "kvsim: per step, mean over ranks: broadcast %.1f us, mirror %.1f us, table apply %.1f "
          "us, ring contexts %.1f us (the node's step: %.1f us), digest %.1f us, scheduling "
          "%.1f us; a bare broadcast of the same bytes: %.1f us (step / bare %.2f)\n",
          us[T_BROADCAST], us[T_MIRROR], us[T_APPLY], us[T_RING], step_us, us[T_DIGEST],
          us[T_SCHEDULE], us[T_BARE], us[T_BARE] > 0 ? step_us / us[T_BARE] : 0.0);
  if (r->have_trace) {
    static const char *const policies[] = {"none", "kvshard", "sglang", "vllm"};
    double ideal = r->trace.prompt_tokens > 0
                       ? (double)r->trace.ideal_hit_tokens / (double)r->trace.prompt_tokens
                       : 0.0;
    double rate = c.prompt_tokens > 0 ? (double)c.hit_tokens / (double)c.prompt_tokens : 0.0;
    double sim_s = simulated_s(r, &c);
    fprintf(human,
            "kvsim: prefix cache %s: %" PRIu64 " of %zu trace requests served (%" PRIu64
            " skipped: longer than the pool); %" PRIu64 " prompt tokens, %" PRIu64
            " hit (rate %.4f, ideal %.4f, %.3f of it), %" PRIu64 " re-prefilled; %" PRIu64
            " evictions, %" PRIu64 " tails dropped, peak %" PRIu64 " cached tokens\n",
            policies[r->a->prefix_cache], c.trace_done, r->trace.n, c.trace_skipped,
            c.prompt_tokens, c.hit_tokens, rate, ideal, ideal > 0 ? rate / ideal : 0.0,
            c.reprefill_tokens, c.evictions, c.tail_drops,
            c.peak_cached_pages * kvs_node_page(r->node));
    if (c.host_slots > 0) {
      fprintf(human,
              "kvsim: host tier of %" PRIu64 " pages (%" PRIu64 " tokens): %" PRIu64
              " of the hit tokens came back from it (GPU %" PRIu64 "), %" PRIu64
              " blocks spilled, %" PRIu64
              " let go; its copies took %.1f simulated s at %g GB/s; %" PRIu64 " of %" PRIu64
              " host hits fell back to their GPU part\n",
              c.host_slots, c.host_slots * kvs_node_page(r->node), c.host_hit_tokens,
              c.hit_tokens - c.host_hit_tokens, c.spills, c.host_drops, c.host_copy_ms / 1000.0,
              r->a->host_bandwidth, c.host_hit_fallbacks, c.host_hit_attempts);
    }
    if (c.disk_slots > 0) {
      kvs_node_prefix_counts pc;
      pc.size = sizeof pc;
      kvs_node_prefix_stats(r->node, &pc, NULL);
      fprintf(human,
              "kvsim: disk tier of %" PRIu64 " pages (%" PRIu64 " tokens): %" PRIu64
              " found at start (%" PRIu64 " refused), %" PRIu64
              " of the hit tokens read from it"
              " (%.1f simulated s at %g GB/s), %" PRIu64 " blocks written (%" PRIu64
              " evicted before their write), %" PRIu64 " let go\n",
              c.disk_slots, c.disk_slots * kvs_node_page(r->node), pc.disk_agreed, pc.disk_refused,
              c.disk_hit_tokens, c.disk_read_ms / 1000.0, r->a->disk_bandwidth, c.stores,
              c.store_missed, c.disk_drops);
    }
    fprintf(human,
            "kvsim: %.1f simulated s from the first arrival (%" PRIu64
            " steps of %g ms run, %" PRIu64
            " idle ones skipped): %.2f requests per simulated "
            "s; simulated %.1f requests per wall-clock s\n",
            sim_s, r->steps, r->a->step_ms, c.idle_steps_skipped,
            sim_s > 0 ? (double)c.trace_done / sim_s : 0.0,
            elapsed_s > 0 ? (double)c.trace_done / elapsed_s : 0.0);
  }
  if (r->diverged) {
    fprintf(human,
            "kvsim: divergence: %s at full page %" PRIu64 ", leader window page %" PRId64
            ", rank %d window page %" PRId64 "\n",
            kvs_shard_divergence_name(r->report.kind), r->report.full_page,
            r->report.leader_window_page, r->report.rank, r->report.rank_window_page);
  }
  fflush(human);
}

/* The plan the node made, as kvplan plan --json prints it (tests diff the
 * two). The node plans bf16 rows without draft layers, on memory that
 * already excludes the engine's weights. */
static json_t *plan_json(const run *r) {
  kvs_cluster_t cluster = kvs_node_cluster(r->node);
  const char *labels[KVS_MAX_HOSTS];
  for (size_t k = 0; k < kvs_cluster_host_count(cluster); k++) {
    labels[k] = kvs_cluster_host_label(cluster, k);
  }
  /* Each rank's buffers beside its carve as kvplan prices them for the
   * same flags: the deployment kvplan plans (device tables, NCCL between
   * the ranks), its --max-running and --radix, and its --max-seq-len,
   * which kvsim does not take (its default; kvsim's own requests are
   * shorter). What this run's node put beside its carve, on its own device
   * and communicator, it checked at create (kvs_node_buffers). */
  kvs_deployment_t plan = kvs_deployment(r->node);
  size_t n = kvs_deployment_rank_count(plan);
  uint64_t *overheads = calloc(n > 0 ? n : 1, sizeof *overheads);
  kvs_node_deployment d = kvs_node_deployment_planned(
      plan, kvs_node_gpu_count(r->node), r->a->max_running, r->a->radix, KVS_DEFAULT_MAX_SEQ_LEN);
  if (overheads != NULL &&
      kvs_deployment_overheads(plan, kvs_node_gpus(r->node), &d, overheads, NULL) != KVS_OK) {
    free(overheads);
    overheads = NULL;
  }
  /* The node plans one DP group per communicator: dp and ep 1. */
  const kvs_plan_json_context context = {r->a->kv_dtype == KVS_KV_FP8 ? "fp8" : "bf16",
                                         0,
                                         "none",
                                         labels,
                                         kvs_cluster_host_count(cluster),
                                         1,
                                         1,
                                         overheads,
                                         r->a->max_running,
                                         KVS_DEFAULT_MAX_SEQ_LEN};
  json_t *o = kvs_plan_json(plan, kvs_node_gpus(r->node), kvs_node_gpu_budgets(r->node), &context);
  free(overheads);
  return o;
}

/* The one JSON object, the last line of stdout (keys as docs/simulation.md
 * lists them). */
static void report_json(run *r, const kvs_shard_stats *s, uint64_t digest, bool agree,
                        bool ring_agree, const double *us, double elapsed_s) {
  const kvsim_args *a = r->a;
  double per = r->steps > 0 ? (double)r->steps : 1.0;
  double step_us = node_step_us(us);
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, digest);
  json_t *o = json_object();
  json_object_set_new(o, "ranks", json_integer(r->world));
  json_object_set_new(o, "steps", kvs_json_u64(r->steps));
  json_object_set_new(o, "binds", kvs_json_u64(s->binds));
  json_object_set_new(o, "frees", kvs_json_u64(s->frees));
  json_object_set_new(o, "collectives_per_step",
                      json_real((double)(s->step_collectives + s->check_collectives) / per));
  json_object_set_new(o, "bytes_per_step", json_real((double)s->payload_bytes / per));
  json_object_set_new(o, "digest", json_string(hex));
  json_object_set_new(o, "digests_agree", json_boolean(agree));
  json_object_set_new(o, "ring_ctx_digest_agree", json_boolean(ring_agree));
  json_object_set_new(o, "steps_per_s",
                      json_real(elapsed_s > 0 ? (double)r->steps / elapsed_s : 0));
  json_object_set_new(o, "backend", json_string(kvs_comm_backend(kvs_node_step_comm(r->node))));
  json_object_set_new(o, "device",
                      json_string(kvs_table_kind_name(kvs_table_kind_of(kvs_node_table(r->node)))));
  json_object_set_new(o, "requests", kvs_json_u64(a->requests));
  json_object_set_new(o, "max_running", kvs_json_u64(a->max_running));
  json_object_set_new(o, "state_rings", json_string(kvs_state_rings_name(a->state_rings)));
  json_object_set_new(o, "time_us", time_json(us));
  json_object_set_new(o, "step_us", json_real(step_us));
  json_object_set_new(o, "bare_broadcast_us", json_real(us[T_BARE]));
  json_object_set_new(o, "step_over_bare_broadcast",
                      json_real(us[T_BARE] > 0 ? step_us / us[T_BARE] : 0.0));
  json_object_set_new(o, "plan", plan_json(r));
  if (r->have_trace) {
    static const char *const policies[] = {"none", "kvshard", "sglang", "vllm"};
    kvs_workload_counters c;
    kvs_workload_counters_get(r->workload, &c);
    json_t *p = json_object();
    json_object_set_new(p, "policy", json_string(policies[a->prefix_cache]));
    json_object_set_new(p, "requests", kvs_json_u64(c.trace_done));
    json_object_set_new(p, "trace_requests", kvs_json_u64(r->trace.n));
    json_object_set_new(p, "skipped_requests", kvs_json_u64(c.trace_skipped));
    json_object_set_new(p, "simulated_s", json_real(simulated_s(r, &c)));
    json_object_set_new(p, "idle_steps_skipped", kvs_json_u64(c.idle_steps_skipped));
    json_object_set_new(p, "prompt_tokens", kvs_json_u64(c.prompt_tokens));
    json_object_set_new(p, "hit_tokens", kvs_json_u64(c.hit_tokens));
    json_object_set_new(
        p, "hit_rate",
        json_real(c.prompt_tokens > 0 ? (double)c.hit_tokens / (double)c.prompt_tokens : 0.0));
    json_object_set_new(p, "ideal_hit_rate",
                        json_real(r->trace.prompt_tokens > 0 ? (double)r->trace.ideal_hit_tokens /
                                                                   (double)r->trace.prompt_tokens
                                                             : 0.0));
    json_object_set_new(p, "reprefill_tokens", kvs_json_u64(c.reprefill_tokens));
    json_object_set_new(p, "gpu_hit_tokens", kvs_json_u64(c.hit_tokens - c.host_hit_tokens));
    json_object_set_new(p, "host_hit_tokens", kvs_json_u64(c.host_hit_tokens));
    json_object_set_new(p, "host_tier_tokens", kvs_json_u64(c.host_slots * kvs_node_page(r->node)));
    json_object_set_new(p, "spills", kvs_json_u64(c.spills));
    json_object_set_new(p, "host_drops", kvs_json_u64(c.host_drops));
    json_object_set_new(p, "host_copy_s", json_real(c.host_copy_ms / 1000.0));
    json_object_set_new(p, "host_hit_attempts", kvs_json_u64(c.host_hit_attempts));
    json_object_set_new(p, "host_hit_fallbacks", kvs_json_u64(c.host_hit_fallbacks));
    if (c.disk_slots > 0) {
      kvs_node_prefix_counts pc;
      pc.size = sizeof pc;
      kvs_node_prefix_stats(r->node, &pc, NULL);
      json_t *d = json_object();
      json_object_set_new(d, "pages", kvs_json_u64(c.disk_slots));
      json_object_set_new(d, "tokens", kvs_json_u64(c.disk_slots * kvs_node_page(r->node)));
      json_object_set_new(d, "blocks", kvs_json_u64(c.disk_blocks));
      json_object_set_new(d, "found_at_start", kvs_json_u64(pc.disk_found));
      json_object_set_new(d, "refused_at_start", kvs_json_u64(pc.disk_refused));
      json_object_set_new(d, "agreed_at_start", kvs_json_u64(pc.disk_agreed));
      json_object_set_new(d, "stores", kvs_json_u64(c.stores));
      json_object_set_new(d, "store_missed", kvs_json_u64(c.store_missed));
      json_object_set_new(d, "drops", kvs_json_u64(c.disk_drops));
      json_object_set_new(d, "hit_tokens", kvs_json_u64(c.disk_hit_tokens));
      json_object_set_new(d, "read_s", json_real(c.disk_read_ms / 1000.0));
      json_object_set_new(d, "bandwidth_gbps", json_real(r->a->disk_bandwidth));
      double sim_s = simulated_s(r, &c);
      json_object_set_new(d, "stores_per_s", json_real(sim_s > 0 ? (double)c.stores / sim_s : 0));
      json_object_set_new(p, "disk", d);
    }
    json_object_set_new(p, "evictions", kvs_json_u64(c.evictions));
    json_object_set_new(p, "peak_cached_tokens",
                        kvs_json_u64(c.peak_cached_pages * kvs_node_page(r->node)));
    json_object_set_new(o, "prefix", p);
  }
  char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
  json_decref(o);
  if (text != NULL) printf("%s\n", text);
  free(text);
  kvs_flush_stdout(); /* the node's teardown comes after: keep a failure's reason */
}

/* A divergence drill that could not run (nothing bound on its rank at its
 * step) tested nothing: every rank exits 2 without a report, the speaker's
 * line last, rather than a run that "agreed". */
static int drill_not_run(const run *r) {
  if (r->speaker) {
    fprintf(stderr,
            "kvsim: the divergence drill did not run (its rank said why above): a drill that "
            "cannot run is an error; name a step by which the workload has bound what it moves\n");
  }
  return KVSIM_EXIT_USAGE;
}

/* Whether every request of the trace (if any) was served; if not, the
 * speaker's last line says how many were not and why. Every rank counts
 * alike (each learns the leader's decisions), so every rank answers
 * alike. */
static bool trace_served_whole(const run *r) {
  if (!r->have_trace) return true;
  kvs_workload_counters c;
  kvs_workload_counters_get(r->workload, &c);
  if (c.trace_done == r->trace.n) return true;
  if (r->speaker) {
    fflush(stdout);
    char skipped[320] = "", stopped[160] = "";
    if (c.trace_skipped > 0) {
      snprintf(skipped, sizeof skipped,
               "; %" PRIu64 " skipped, longer than the pool holds (the longest needs %" PRIu64
               " tokens, a request holds at most %" PRIu64 " here: give a larger budget)",
               c.trace_skipped, c.trace_longest, c.max_request_tokens);
    }
    uint64_t unserved = (uint64_t)r->trace.n - c.trace_done - c.trace_skipped;
    if (unserved > 0) {
      snprintf(stopped, sizeof stopped,
               "; %" PRIu64 " not served when the run stopped at --steps %" PRIu64, unserved,
               r->a->steps);
    }
    fprintf(stderr,
            "kvsim: the trace was not served whole: %" PRIu64
            " of %zu requests served%s%s "
            "(exit 1)\n",
            c.trace_done, r->trace.n, skipped, stopped);
    fflush(stderr);
  }
  return false;
}

static int finish(run *r) {
  kvs_error err;
  kvs_error_clear(&err);
  double elapsed = (double)(kvs_now_ns() - r->start_ns) * 1e-9;
  double bare_ns = 0;
  /* The run's figures are the steps' and the periodic checks'. */
  kvs_shard_stats_get(kvs_node_shard(r->node), &r->stats);
  if (bare_broadcast(r, &bare_ns, &err) != KVS_OK) return fail(r, "bare broadcast", &err, false);
  /* The closing check: every rank's integrity, digests and tables. */
  if (!r->diverged) {
    int rc = check(r, r->steps, "end");
    if (rc != 0) return rc;
  }
  kvs_node_stats ns;
  kvs_node_stats_get(r->node, &ns);
  /* The verdicts and the time split, over every rank. */
  uint64_t v[5] = {r->ring_hash, ~r->ring_hash, r->ring_ok ? 1 : 0, r->diverged ? 0 : 1,
                   r->drill_failed ? 0 : 1};
  uint64_t t[T_COUNT] = {ns.broadcast_ns, ns.mirror_ns,   ns.apply_ns,      ns.ring_ns,
                         ns.digest_ns,    r->schedule_ns, (uint64_t)bare_ns};
  if (reduce(r, v, 5, KVS_COMM_MIN, &err) != KVS_OK || reduce(r, t, T_COUNT, KVS_COMM_SUM, &err)) {
    return fail(r, "final check failed", &err, false);
  }
  if (v[4] == 0) return drill_not_run(r);
  bool ring_agree = v[0] == ~v[1] && v[2] == 1;
  bool agree = v[3] == 1 && ring_agree;
  double us[T_COUNT];
  double per = r->steps > 0 ? (double)r->steps : 1.0;
  for (int i = 0; i < T_COUNT; i++) {
    us[i] = (double)t[i] / (double)r->world / (i == T_BARE ? 1.0 : per) / 1000.0;
  }
  uint64_t digest = kvs_window_pool_digest(kvs_node_pool(r->node));
  fprintf(stderr, "kvsim: rank %d: %s after %" PRIu64 " steps, digest %016" PRIx64 "\n", r->rank,
          agree ? "integrity ok" : "DIVERGED", r->steps, digest);
  /* Every rank's line before the speaker's report, whose last line is the
   * run's verdict (rank threads share stderr). */
  uint64_t said = 1;
  if (r->world > 1 && reduce(r, &said, 1, KVS_COMM_MIN, &err) != KVS_OK) {
    return fail(r, "final check failed", &err, false);
  }
  if (r->speaker) {
    print_summary(r, &r->stats, us, elapsed);
    report_json(r, &r->stats, digest, agree, ring_agree, us, elapsed);
  }
  if (!agree) return KVSIM_EXIT_DIVERGED;
  return trace_served_whole(r) ? KVSIM_EXIT_AGREE : KVSIM_EXIT_NOT_WHOLE;
}

kvs_status kvsim_nccl_ready(kvs_error *err) {
  const kvs_nccl_table *table = NULL;
  return kvs_comm_nccl_table(&table, err);
}

/* The drills that act after a step: a binding or a request slot moved on
 * the named rank. */
static void inject_due(run *r, uint64_t s) {
  const kvsim_args *a = r->a;
  if (a->inject && r->rank == a->inject_rank && s == a->inject_step) inject(r, s, false);
  if (a->inject_slot && r->rank == a->inject_slot_rank && s == a->inject_slot_step) {
    inject(r, s, true);
  }
  if (a->inject_cache && r->rank == a->inject_cache_rank && s == a->inject_cache_step) {
    inject_cache(r, s);
  }
}

/* The steps, until --steps, a divergence or a failure. Each: the drills
 * due, the step, the injections due, the periodic check, a progress line. */
static int run_steps(run *r) {
  r->start_ns = kvs_now_ns();
  uint64_t last_progress = r->start_ns;
  int code = 0;
  for (uint64_t s = 0; s < r->a->steps && !r->diverged && code == 0; s++) {
    if (r->have_trace && kvs_workload_trace_done(r->workload)) break;
    if (!r->threads) drills(r, s);
    if (killed_now(r, s)) {
      /* The rank's memory goes (as a dead process's does: destroying a
       * node communicates nothing), its communicator stays, silent. */
      return KVSIM_RANK_KILLED;
    }
    code = one_step(r, s);
    if (code != 0) break;
    inject_due(r, s);
    if (kvs_shard_check_due(kvs_node_shard(r->node), s)) code = check(r, s, "periodic");
    progress(r, &last_progress);
  }
  return code;
}

/* A process rank says who it was and where when the launcher ends it; rank
 * threads share the process and its handlers, so they install none. */
static void catch_sigterm(int rank) {
  signal_rank = rank;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
}

int kvsim_simulate(kvs_comm_t comm, const kvsim_args *a, bool threads) {
  run r;
  memset(&r, 0, sizeof r);
  r.a = a;
  r.comm = comm;
  r.threads = threads;
  r.rank = kvs_comm_rank(comm);
  r.world = kvs_comm_size(comm);
  r.speaker = r.rank == 0;
  r.ring_ok = true;
  if (!threads) catch_sigterm(r.rank);
  int code = setup_node(&r);
  if (code == 0) code = run_steps(&r);
  if (code == 0) code = finish(&r);
  kvs_workload_destroy(r.workload);
  kvs_trace_free(&r.trace);
  kvs_node_destroy(r.node);
  kvs_cluster_destroy(r.cluster);
  free(r.budgets);
  return code;
}
