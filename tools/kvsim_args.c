#include "tools/kvsim_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/shard.h"
#include "kvplan/args.h"
#include "tools/workload.h"

static const char usage_mpi[] =
    "usage: mpirun -np N kvsim [--tp N] [--pp M] [--backend mpi|nccl|self] --steps S --seed X\n"
    "                          [--requests R] [--json] [--inject-divergence RANK:STEP]\n";
static const char usage_local[] =
    "usage: kvsim_local --ranks N --tp N [--pp M] [--backend loopback|nccl|self] --steps S\n"
    "                   --seed X [--requests R] [--json] [--inject-divergence RANK:STEP]\n";
/* The deployment flags are the table's (kvplan/deploy_flags.h), read as
 * kvplan reads them; the flags kvplan also has mean what they mean there,
 * with kvplan's defaults, so that the same flags plan the same pool. */
static const char usage_layout[] =
    "tp x pp must equal the number of ranks; one alone takes the rest of them (as\n"
    "kvplan's take the rest of the GPUs); neither: the largest group every node holds\n"
    "whole that divides the ranks, the rest as stages. With --nodes rank r runs on\n"
    "plan rank r's GPU, on its node.\n";
static const char usage_flags[] =
    "  --backend B             mpi (default; host buffers), nccl (GPUs), self (one rank);\n"
    "                          kvsim_local: loopback (default; ranks as threads), nccl, self\n"
    "  --ranks N               kvsim_local: ranks (threads) to run\n"
    "  --steps S               scheduler steps to run, 1..2^40\n"
    "  --seed X                workload seed (the same on every rank)\n"
    "  --max-running N         concurrent requests the pool is sized for (request slots,\n"
    "                          window floor), 1..65536, default 64 (as kvplan's)\n"
    "  --requests R            concurrent requests the workload runs, 1..--max-running,\n"
    "                          default 16 (or --max-running when that is less)\n"
    "  --json                  stdout holds only the JSON object\n"
    "  --inject-divergence R:S flip one binding on rank R after step S (S < --steps); the\n"
    "                          next check must name the page\n"
    "  --inject-slot-divergence R:S  move one running request's request slot on rank R\n"
    "                          after step S (per-request rings); the next check must name\n"
    "                          the slot\n"
    "  --state-rings MODE      per-request (default), hca-per-request or per-page: where\n"
    "                          the compress-state rings live (as kvplan --state-rings)\n"
    "  --check-every N         steps between digest checks (default 16)\n"
    "  --kill-rank R:S         rank R kills itself (SIGKILL) at step S: a failure drill;\n"
    "                          kvsim_local: rank R's thread stops without a word to its\n"
    "                          peers, as a crashed process would\n"
    "  --stall-rank R:S        rank R stops itself (SIGSTOP) at step S: its peers must\n"
    "                          give up after --timeout-ms and abort the job\n"
    "  --timeout-ms T          deadline of every collective wait (default 10000)\n"
    "  --host NAME             this rank's host name (default: the machine's): without\n"
    "                          --nodes or a list, ranks that share a host are one node,\n"
    "                          each node's GPUs read by its own ranks; naming hosts\n"
    "                          simulates several machines on one\n"
    "  --local-rank N, --node N  where another launcher placed this rank, checked against\n"
    "                          the plan (default: Open MPI's, Slurm's or MPICH's local rank\n"
    "                          from the environment; not checked when a cluster is\n"
    "                          simulated on one machine)\n"
    "  --budget-mib B          every GPU g gets B x (1 - skew x (g % 4) / 100) MiB\n"
    "                          (any budget flag: at most 1 TiB per GPU)\n"
    "                          (the default: 4096, skew 1, when no budget flag is given)\n"
    "  --budget-skew P         that skew in percent, [0, 25) (default 1)\n"
    "  --device cpu|cuda       where the tables live (default: cuda when a GPU is\n"
    "                          visible, else cpu: the host twin of the device tables)\n"
    "  --cuda-device N         the CUDA device of every rank's tables (default: the plan's)\n"
    "  --no-verify             skip comparing each step's ring contexts with the pool's\n"
    "  --radix | --no-radix    size the window floor for radix prefix sharing or not\n"
    "                          (default on, as kvplan's; the workload shares no prefixes)\n"
    "  --swa-ratio F           window share of the history, [0, 1] (default 0.125)\n"
    "  --arrival-rate F        expected arrivals per step, [0, 1024] (default 0.25)\n"
    "  --model M               dsv4-flash (default), dsv4-pro, a model folder or a\n"
    "                          config.json, read as kvplan reads it\n"
    "  --bare-broadcasts N     timed bare broadcasts of the step message at the end\n"
    "                          (default min(steps, 2000))\n"
    "  --progress-s T          seconds between progress lines on stderr (default 2)\n"
    "  --trace FILE            replay a Mooncake trace (JSONL: timestamp ms, input_length,\n"
    "                          output_length, hash_ids) instead of the seeded workload;\n"
    "                          the run ends when the trace is served (--steps optional;\n"
    "                          idle time to the next arrival is skipped), --requests\n"
    "                          defaults to --max-running; --seed and --arrival-rate, which\n"
    "                          only the seeded workload has, are refused\n"
    "  --trace-block N         tokens per hash id, a multiple of the page (default 512)\n"
    "  --step-ms F             simulated milliseconds of one step, (0, 3600000] (default 50)\n"
    "  --prefix-cache P        kvshard (default with --trace), sglang, vllm or none: whose\n"
    "                          prefix policy the trace's requests reuse pages under\n"
    "  --host-bandwidth GBPS   each GPU's host link for those copies, (0, 10000] GB/s\n"
    "                          (default 50); a fetching request waits for its copy\n"
    "  --disk-path DIR         the --disk-cache tier's folder: each rank's index of it\n"
    "                          (DIR/rank-r) is kept there and found again by the next run\n"
    "  --disk-bandwidth GBPS   each machine's disk read rate for the tier, (0, 10000] GB/s\n"
    "                          (default 5); a block read from disk waits for it, then\n"
    "                          for its host copy\n"
    "  --kv-dtype bf16|fp8     how KV rows are stored (default bf16)\n"
    "  --inject-cache-divergence R:S  change one cached block's reference count on rank R\n"
    "                          after step S (S < --steps); the next check must name it\n"
    "  --pd P:D                kvsim_local with --trace: every request prefills on a node\n"
    "                          of layout P, moves (kvs_node_send_request/receive_request)\n"
    "                          and decodes on a node of layout D, each tpN or tpNxppM\n"
    "                          (e.g. tp1xpp4:tp4, tp2:tp2); the nodes hold rows (host\n"
    "                          twin), the decode side keeps kvshard's prefix cache; no\n"
    "                          --ranks, --tp or --pp (docs/simulation.md, \"Prefill/decode\")\n"
    "  --link-bandwidth GBPS   --pd: each rank's link between the nodes, (0, 10000] GB/s\n"
    "                          (default 50): the transfer time reported\n"
    "Without a budget flag, --budget-mib's default; --mem-fraction and --reserve make\n"
    "the budgets from measured (or nominal) memory instead (the reserve is checked at\n"
    "create). With --trace, --host-cache is kvshard's policy's host tier: evicted\n"
    "blocks move there and hits fetch them back.\n";

static void print_usage(FILE *out, bool local) {
  fputs(local ? usage_local : usage_mpi, out);
  kvs_deploy_flags_help(out, KVSIM_DEPLOY_FLAGS);
  fputs(usage_flags, out);
  fputs(usage_layout, out);
}

static const char *tool_name(bool local) { return local ? "kvsim_local" : "kvsim"; }

/* One parse of argv: the arguments being filled and how to speak. */
typedef struct parser {
  kvsim_args *a;
  bool local;   /* kvsim_local: --ranks and loopback; no --stall-rank */
  bool speaker; /* this process prints the errors (one rank of many) */
  const char *tool;
  bool have_steps, have_seed, have_requests, have_radix, have_arrival_rate;
} parser;

/* A flag handler's answer for a flag of another group. */
enum { NOT_MINE = 1 };

/* A value the flag does not take: what it takes and what it got, then the
 * usage. Printed here rather than from the shared parsers' kvs_error,
 * whose message is capped, so any value is echoed whole. */
static int bad_arg(const parser *p, const char *flag, const char *value, const char *want) {
  if (p->speaker) {
    fprintf(stderr, "%s: %s needs %s, got '%s'\n", p->tool, flag, want, value ? value : "");
  }
  return KVSIM_EXIT_USAGE;
}

/* A value the shared parsers refused, with their message (which names the
 * flag, the value and, for sizes, the limit). */
static int parse_error(const parser *p, const char *flag, const kvs_error *err, const char *value) {
  if (p->speaker) {
    if (value != NULL) {
      fprintf(stderr, "%s: %s\n", p->tool, err->message);
    } else {
      fprintf(stderr, "%s: %s needs a value\n", p->tool, flag);
    }
  }
  return KVSIM_EXIT_USAGE;
}

/* A count in [lo, hi] into *out: 0, or the usage error saying `want`. */
static int count_arg(const parser *p, const char *flag, const char *value, uint64_t lo, uint64_t hi,
                     const char *want, uint64_t *out) {
  if (kvs_parse_u64_in(flag, value, lo, hi, want, out, NULL) == KVS_OK) return 0;
  return bad_arg(p, flag, value, want);
}

/* A number in [lo, hi] into *out: 0, or the usage error saying `want`. */
static int number_arg(const parser *p, const char *flag, const char *value, double lo, double hi,
                      const char *want, double *out) {
  if (kvs_parse_double_in(flag, value, lo, hi, want, out, NULL) == KVS_OK) return 0;
  return bad_arg(p, flag, value, want);
}

static bool parse_rank_step(const char *s, int *rank, uint64_t *step) {
  if (s == NULL) return false;
  const char *colon = strchr(s, ':');
  if (colon == NULL || colon == s) return false;
  char head[32];
  size_t len = (size_t)(colon - s);
  if (len >= sizeof head) return false;
  memcpy(head, s, len);
  head[len] = '\0';
  uint64_t r;
  if (kvs_parse_u64_in("", head, 0, KVS_SHARD_MAX_RANKS, "", &r, NULL) != KVS_OK ||
      kvs_parse_u64("", colon + 1, step, NULL) != KVS_OK) {
    return false;
  }
  *rank = (int)r;
  return true;
}

/* Every flag's default (docs/flags.md's). */
static void set_defaults(kvsim_args *a, bool local) {
  memset(a, 0, sizeof *a);
  kvs_deploy_flags_init(&a->deploy); /* kvplan's memory share and reserve */
  a->backend = local ? "loopback" : "mpi";
  /* kvplan's defaults (core/serving_defaults.h) for the flags both take. */
  a->max_running = KVS_DEFAULT_MAX_RUNNING;
  a->radix = KVS_DEFAULT_RADIX;
  a->swa_ratio = KVS_DEFAULT_SWA_RATIO;
  a->requests = KVSIM_DEFAULT_REQUESTS; /* at most --max-running, once it is known */
  a->check_every = 16;
  a->timeout_ms = 10000;
  a->budget_mib = KVSIM_DEFAULT_BUDGET_MIB;
  a->budget_skew = 1.0;
  a->arrival_rate = 0.25;
  a->progress_s = 2.0;
  a->model = "dsv4-flash";
  a->verify = true;
  a->device = KVS_NODE_DEVICE_AUTO;
  a->cuda_device = -1;
  a->state_rings = KVS_STATE_RINGS_PER_REQUEST;
  a->local_rank = KVS_NODE_FROM_LAUNCHER;
  a->host_index = KVS_NODE_FROM_LAUNCHER;
  a->bare_broadcasts = UINT64_MAX; /* min(steps, 2000), once --steps is known */
  a->trace_block = 512;
  a->step_ms = 50.0;
  a->prefix_cache = KVS_PREFIX_POLICY_KVSHARD;
  a->host_bandwidth = 50.0;
  a->disk_bandwidth = 5.0;
  a->kv_dtype = KVS_KV_BF16;
  a->link_bandwidth = 50.0;
}

/* One side of --pd: "tpN" or "tpNxppM", N and M in [1, 128]. */
static bool parse_side(const char *s, size_t len, int *tp, int *pp) {
  char buf[32];
  if (len == 0 || len >= sizeof buf || strncmp(s, "tp", 2) != 0) return false;
  memcpy(buf, s, len);
  buf[len] = '\0';
  char *x = strstr(buf, "xpp");
  if (x != NULL) *x = '\0';
  uint64_t t, p = 1;
  if (kvs_parse_u64_in("", buf + 2, 1, 128, "", &t, NULL) != KVS_OK) return false;
  if (x != NULL && kvs_parse_u64_in("", x + 3, 1, 128, "", &p, NULL) != KVS_OK) return false;
  if (t * p > 128) return false;
  *tp = (int)t;
  *pp = (int)p;
  return true;
}

static bool parse_pd(const char *value, kvsim_args *a) {
  if (value == NULL) return false;
  const char *colon = strchr(value, ':');
  if (colon == NULL || strchr(colon + 1, ':') != NULL) return false;
  return parse_side(value, (size_t)(colon - value), &a->pd_tp[0], &a->pd_pp[0]) &&
         parse_side(colon + 1, strlen(colon + 1), &a->pd_tp[1], &a->pd_pp[1]);
}

/* The flags without a value. */
static int switch_flag(parser *p, const char *flag) {
  if (strcmp(flag, "--json") == 0) {
    p->a->json = true;
  } else if (strcmp(flag, "--no-verify") == 0) {
    p->a->verify = false;
  } else if (strcmp(flag, "--radix") == 0 || strcmp(flag, "--no-radix") == 0) {
    /* One choice in two spellings, made once (kvplan's rule). */
    if (p->have_radix) {
      if (p->speaker) fprintf(stderr, "%s: give --radix or --no-radix, once\n", p->tool);
      return KVSIM_EXIT_USAGE;
    }
    p->have_radix = true;
    p->a->radix = flag[2] == 'r';
  } else {
    return NOT_MINE;
  }
  return 0;
}

static int backend_flag(parser *p, const char *flag, const char *value) {
  /* kvsim_local's ranks are threads of one process: loopback where kvsim has MPI. */
  const char *own = p->local ? "loopback" : "mpi";
  bool ok = value != NULL &&
            (strcmp(value, own) == 0 || strcmp(value, "nccl") == 0 || strcmp(value, "self") == 0);
  if (!ok) {
    return bad_arg(p, flag, value,
                   p->local ? "one of loopback, nccl, self" : "one of mpi, nccl, self");
  }
  p->a->backend = value;
  return 0;
}

/* The run: its ranks and backend, its length and seed, its load, its checks. */
static int run_flag(parser *p, const char *flag, const char *value) {
  kvsim_args *a = p->a;
  uint64_t u;
  int rc;
  if (p->local && strcmp(flag, "--ranks") == 0) {
    rc = count_arg(p, flag, value, 1, KVSIM_LOCAL_MAX_RANKS, "a rank count in [1, 256]", &u);
    if (rc == 0) a->ranks = (int)u;
    return rc;
  }
  if (strcmp(flag, "--backend") == 0) return backend_flag(p, flag, value);
  if (strcmp(flag, "--steps") == 0) {
    rc = count_arg(p, flag, value, 1, UINT64_C(1) << 40, "a step count in [1, 2^40]", &a->steps);
    if (rc == 0) p->have_steps = true;
    return rc;
  }
  if (strcmp(flag, "--seed") == 0) {
    rc = count_arg(p, flag, value, 0, UINT64_MAX, "an unsigned integer", &a->seed);
    if (rc == 0) p->have_seed = true;
    return rc;
  }
  if (strcmp(flag, "--requests") == 0) {
    rc = count_arg(p, flag, value, 1, 65536, "a request count in [1, 65536]", &a->requests);
    if (rc == 0) p->have_requests = true;
    return rc;
  }
  if (strcmp(flag, "--max-running") == 0) {
    return count_arg(p, flag, value, 1, 65536, "a request count in [1, 65536]", &a->max_running);
  }
  if (strcmp(flag, "--check-every") == 0) {
    return count_arg(p, flag, value, 1, UINT64_MAX, "a positive step count", &a->check_every);
  }
  if (strcmp(flag, "--timeout-ms") == 0) {
    rc = count_arg(p, flag, value, 1, INT32_MAX, "a positive number of milliseconds", &u);
    if (rc == 0) a->timeout_ms = (int)u;
    return rc;
  }
  if (strcmp(flag, "--bare-broadcasts") == 0) {
    return count_arg(p, flag, value, 0, 1000000, "a count in [0, 1000000]", &a->bare_broadcasts);
  }
  if (strcmp(flag, "--state-rings") == 0) {
    if (value == NULL || kvs_state_rings_parse(value, &a->state_rings, NULL) != KVS_OK) {
      return bad_arg(p, flag, value, "one of per-request, hca-per-request, per-page");
    }
    return 0;
  }
  return NOT_MINE;
}

/* The failure drills, each RANK:STEP. */
static int drill_flag(parser *p, const char *flag, const char *value) {
  kvsim_args *a = p->a;
  bool *on;
  int *rank;
  uint64_t *step;
  if (strcmp(flag, "--inject-divergence") == 0) {
    on = &a->inject;
    rank = &a->inject_rank;
    step = &a->inject_step;
  } else if (strcmp(flag, "--inject-slot-divergence") == 0) {
    on = &a->inject_slot;
    rank = &a->inject_slot_rank;
    step = &a->inject_slot_step;
  } else if (strcmp(flag, "--kill-rank") == 0) {
    on = &a->kill;
    rank = &a->kill_rank;
    step = &a->kill_step;
  } else if (!p->local && strcmp(flag, "--stall-rank") == 0) {
    on = &a->stall;
    rank = &a->stall_rank;
    step = &a->stall_step;
  } else if (strcmp(flag, "--inject-cache-divergence") == 0) {
    on = &a->inject_cache;
    rank = &a->inject_cache_rank;
    step = &a->inject_cache_step;
  } else {
    return NOT_MINE;
  }
  if (!parse_rank_step(value, rank, step)) return bad_arg(p, flag, value, "RANK:STEP");
  *on = true;
  return 0;
}

/* The node: its machine, where this rank runs, its tables' device. */
static int node_flag(parser *p, const char *flag, const char *value) {
  kvsim_args *a = p->a;
  uint64_t u;
  int rc;
  if (strcmp(flag, "--local-rank") == 0 || strcmp(flag, "--node") == 0) {
    rc = count_arg(p, flag, value, 0, 65535, "a non-negative integer up to 65535", &u);
    if (rc == 0) *(flag[2] == 'l' ? &a->local_rank : &a->host_index) = (int)u;
    return rc;
  }
  if (strcmp(flag, "--host") == 0) {
    if (value == NULL || value[0] == '\0') return bad_arg(p, flag, value, "a host name");
    a->host = value;
    return 0;
  }
  if (strcmp(flag, "--device") == 0) {
    if (value != NULL && strcmp(value, "cpu") == 0) {
      a->device = KVS_NODE_DEVICE_CPU;
    } else if (value != NULL && strcmp(value, "cuda") == 0) {
      a->device = KVS_NODE_DEVICE_CUDA;
    } else {
      return bad_arg(p, flag, value, "cpu or cuda");
    }
    return 0;
  }
  if (strcmp(flag, "--cuda-device") == 0) {
    rc = count_arg(p, flag, value, 0, 1023, "a CUDA device ordinal in [0, 1023]", &u);
    if (rc == 0) a->cuda_device = (int)u;
    return rc;
  }
  return NOT_MINE;
}

/* The default budget: a MiB figure skewed per GPU (the table's --budget,
 * --budget-per-gpu, --mem-fraction and --reserve are the others). */
static int budget_flag(parser *p, const char *flag, const char *value) {
  kvsim_args *a = p->a;
  int rc = NOT_MINE;
  if (strcmp(flag, "--budget-mib") == 0) {
    /* 1048576 MiB is KVSIM_MAX_BUDGET: check_budget_cap's 1 TiB bound, here. */
    rc = number_arg(p, flag, value, 1e-9, (double)(KVSIM_MAX_BUDGET >> 20),
                    "a size in MiB in (0, 1048576]", &a->budget_mib);
    if (rc == 0) a->have_budget_mib = true;
  } else if (strcmp(flag, "--budget-skew") == 0) {
    rc = number_arg(p, flag, value, 0.0, 24.999999, "a percentage in [0, 25)", &a->budget_skew);
    if (rc == 0) a->have_budget_mib = true;
  }
  return rc;
}

/* One of the deployment flags (the table's), read as every tool reads it. */
static int deploy_flag(parser *p, const kvs_deploy_flag *f, const char *flag, const char *value) {
  kvs_error err;
  const char *said = f->alias != NULL && strcmp(flag, f->alias) == 0 ? f->alias : f->name;
  if (value == NULL || kvs_deploy_flag_apply(&p->a->deploy, f, said, value, &err) != KVS_OK) {
    return parse_error(p, flag, &err, value);
  }
  if (f->id == KVS_DEPLOY_HOST_CACHE || f->id == KVS_DEPLOY_DISK_CACHE) {
    p->a->have_trace_flags = true;
  }
  return 0;
}

/* The workload and its reporting. */
static int workload_flag(parser *p, const char *flag, const char *value) {
  kvsim_args *a = p->a;
  if (strcmp(flag, "--swa-ratio") == 0) {
    return number_arg(p, flag, value, 0.0, 1.0, "a ratio in [0, 1]", &a->swa_ratio);
  }
  if (strcmp(flag, "--arrival-rate") == 0) {
    p->have_arrival_rate = true;
    return number_arg(p, flag, value, 0.0, 1024.0, "a rate in [0, 1024]", &a->arrival_rate);
  }
  if (strcmp(flag, "--progress-s") == 0) {
    return number_arg(p, flag, value, 0.0, 86400.0, "seconds in [0, 86400]", &a->progress_s);
  }
  if (strcmp(flag, "--model") == 0) {
    if (value == NULL) return bad_arg(p, flag, value, "a model name or config.json path");
    a->model = value;
    return 0;
  }
  if (strcmp(flag, "--trace") == 0) {
    if (value == NULL || value[0] == '\0') return bad_arg(p, flag, value, "a trace file (JSONL)");
    a->trace = value;
    return 0;
  }
  if (strcmp(flag, "--trace-block") == 0) {
    a->have_trace_flags = true;
    return count_arg(p, flag, value, 1, UINT64_C(1) << 20, "a block size in tokens in [1, 1048576]",
                     &a->trace_block);
  }
  if (strcmp(flag, "--step-ms") == 0) {
    a->have_trace_flags = true;
    return number_arg(p, flag, value, 1e-6, 3600000.0, "milliseconds in (0, 3600000]", &a->step_ms);
  }
  if (strcmp(flag, "--disk-bandwidth") == 0) {
    a->have_trace_flags = true;
    a->have_disk_bandwidth = true;
    return number_arg(p, flag, value, 1e-3, 10000.0, "GB/s in (0, 10000]", &a->disk_bandwidth);
  }
  if (strcmp(flag, "--disk-path") == 0) {
    a->have_trace_flags = true;
    if (value == NULL || value[0] == '\0') return bad_arg(p, flag, value, "a folder");
    a->disk_path = value;
    return 0;
  }
  if (strcmp(flag, "--host-bandwidth") == 0) {
    a->have_trace_flags = true;
    a->have_host_bandwidth = true;
    return number_arg(p, flag, value, 1e-3, 10000.0, "GB/s in (0, 10000]", &a->host_bandwidth);
  }
  if (strcmp(flag, "--prefix-cache") == 0) {
    static const char *const names[] = {"none", "kvshard", "sglang", "vllm"};
    a->have_trace_flags = true;
    for (int k = 0; k < 4; k++) {
      if (value != NULL && strcmp(value, names[k]) == 0) {
        a->prefix_cache = k;
        return 0;
      }
    }
    return bad_arg(p, flag, value, "one of kvshard, sglang, vllm, none");
  }
  if (p->local && strcmp(flag, "--pd") == 0) {
    if (!parse_pd(value, a)) {
      return bad_arg(p, flag, value,
                     "PREFILL:DECODE layouts, each tpN or tpNxppM with N x M in [1, 128] "
                     "(e.g. tp1xpp4:tp4)");
    }
    a->pd = true;
    return 0;
  }
  if (p->local && strcmp(flag, "--link-bandwidth") == 0) {
    a->have_link_bandwidth = true;
    return number_arg(p, flag, value, 1e-3, 10000.0, "GB/s in (0, 10000]", &a->link_bandwidth);
  }
  if (strcmp(flag, "--kv-dtype") == 0) {
    if (value != NULL && strcmp(value, "bf16") == 0) {
      a->kv_dtype = KVS_KV_BF16;
    } else if (value != NULL && strcmp(value, "fp8") == 0) {
      a->kv_dtype = KVS_KV_FP8;
    } else {
      return bad_arg(p, flag, value, "bf16 or fp8");
    }
    return 0;
  }
  return NOT_MINE;
}

/* Every flag, with the front ends that take it, for suggestions. */
enum { KVSIM_ONLY = 1, LOCAL_ONLY = 2, BOTH = 3 };
static const struct {
  const char *name;
  int where;
} flag_table[] = {
    {"--backend", BOTH},
    {"--ranks", LOCAL_ONLY},
    {"--steps", BOTH},
    {"--seed", BOTH},
    {"--requests", BOTH},
    {"--max-running", BOTH},
    {"--json", BOTH},
    {"--inject-divergence", BOTH},
    {"--inject-slot-divergence", BOTH},
    {"--state-rings", BOTH},
    {"--check-every", BOTH},
    {"--kill-rank", BOTH},
    {"--stall-rank", KVSIM_ONLY},
    {"--timeout-ms", BOTH},
    {"--host", BOTH},
    {"--local-rank", BOTH},
    {"--node", BOTH},
    {"--budget-mib", BOTH},
    {"--budget-skew", BOTH},
    {"--device", BOTH},
    {"--cuda-device", BOTH},
    {"--no-verify", BOTH},
    {"--radix", BOTH},
    {"--no-radix", BOTH},
    {"--swa-ratio", BOTH},
    {"--arrival-rate", BOTH},
    {"--model", BOTH},
    {"--bare-broadcasts", BOTH},
    {"--progress-s", BOTH},
    {"--help", BOTH},
    {"--trace", BOTH},
    {"--trace-block", BOTH},
    {"--step-ms", BOTH},
    {"--prefix-cache", BOTH},
    {"--host-bandwidth", BOTH},
    {"--disk-path", BOTH},
    {"--disk-bandwidth", BOTH},
    {"--kv-dtype", BOTH},
    {"--inject-cache-divergence", BOTH},
    {"--pd", LOCAL_ONLY},
    {"--link-bandwidth", LOCAL_ONLY},
};
#define N_FLAGS (sizeof flag_table / sizeof flag_table[0])

/* A flag this front end does not take: one line naming the nearest one it
 * does. */
static int unknown_flag(const parser *p, const char *flag) {
  if (!p->speaker) return KVSIM_EXIT_USAGE;
  const char *names[N_FLAGS + 2 * KVS_DEPLOY_FLAG_COUNT];
  size_t n = kvs_deploy_flags_names(KVSIM_DEPLOY_FLAGS, names, 2 * KVS_DEPLOY_FLAG_COUNT);
  for (size_t k = 0; k < N_FLAGS; k++) {
    if (flag_table[k].where & (p->local ? LOCAL_ONLY : KVSIM_ONLY)) names[n++] = flag_table[k].name;
  }
  char help[32];
  snprintf(help, sizeof help, "%s --help", p->tool);
  kvs_report_unknown_flag(p->tool, flag, names, n, help);
  return KVSIM_EXIT_USAGE;
}

/* The flag at argv[*i], stepping *i over its value when it takes one: 0
 * taken, -1 after --help, else the exit status after the message. */
static int one_flag(parser *p, int argc, char **argv, int *i, kvs_flags_seen *seen) {
  static int (*const groups[])(parser *, const char *, const char *) = {
      run_flag, drill_flag, node_flag, budget_flag, workload_flag};
  const char *flag = argv[*i];
  const char *value = *i + 1 < argc ? argv[*i + 1] : NULL;
  kvs_error err;
  if (kvs_flag_once(seen, flag, &err) != KVS_OK) {
    if (p->speaker) fprintf(stderr, "%s: %s\n", p->tool, err.message);
    return KVSIM_EXIT_USAGE;
  }
  int rc = switch_flag(p, flag);
  if (rc != NOT_MINE) return rc;
  if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
    if (p->speaker) print_usage(stdout, p->local);
    return -1;
  }
  (*i)++; /* every other flag takes a value */
  const kvs_deploy_flag *deploy = kvs_deploy_flag_find(KVSIM_DEPLOY_FLAGS, flag);
  if (deploy != NULL) return deploy_flag(p, deploy, flag, value);
  for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
    rc = groups[g](p, flag, value);
    if (rc != NOT_MINE) return rc;
  }
  return unknown_flag(p, flag);
}

/* --steps and --seed have no default; kvsim_local must be told how many
 * ranks to start. */
static int check_required(const parser *p) {
  if (p->local && p->a->ranks == 0 && !p->a->deploy.given[KVS_DEPLOY_TP] && !p->a->pd) {
    return bad_arg(p, "--ranks", "", "a rank count (or --tp, and --pp, to count them)");
  }
  if (p->a->trace != NULL) {
    /* A trace ends the run when it is served; it needs no seed. */
    if (!p->have_steps) p->a->steps = UINT64_C(1) << 40;
    return 0;
  }
  if (!p->have_steps) return bad_arg(p, "--steps", "", "a step count in [1, 2^40]");
  if (!p->have_seed) return bad_arg(p, "--seed", "", "an unsigned integer");
  return 0;
}

/* The workload runs at most the requests the pool is sized for: --requests
 * above --max-running is refused; without --requests, the default is held
 * to --max-running. */
static int check_requests(const parser *p) {
  kvsim_args *a = p->a;
  if (!p->have_requests) {
    if (a->trace != NULL) a->requests = a->max_running;
    if (a->requests > a->max_running) a->requests = a->max_running;
    return 0;
  }
  if (a->requests <= a->max_running) return 0;
  if (p->speaker) {
    fprintf(stderr,
            "%s: --requests %llu is above --max-running %llu: the pool has a request slot for "
            "--max-running requests; raise --max-running or lower --requests\n",
            p->tool, (unsigned long long)a->requests, (unsigned long long)a->max_running);
  }
  return KVSIM_EXIT_USAGE;
}

/* What --pd cannot run with (NULL: nothing). Its layouts are its own; it
 * replays a trace on nodes with rows over loopback threads, one request
 * at a time, without the seeded workload's drills or tiers. */
static const char *pd_conflict(const parser *p) {
  const kvsim_args *a = p->a;
  const kvs_deploy_flags *d = &a->deploy;
  if (a->ranks != 0 || d->given[KVS_DEPLOY_TP] || d->given[KVS_DEPLOY_PP]) {
    return "--pd gives both nodes' layouts: leave out --ranks, --tp and --pp";
  }
  if (a->trace == NULL) return "--pd replays a trace: give --trace FILE";
  if (a->pd_tp[0] * a->pd_pp[0] + a->pd_tp[1] * a->pd_pp[1] > KVSIM_LOCAL_MAX_RANKS) {
    return "--pd's two layouts have more ranks than the 256 threads kvsim_local runs";
  }
  if (strcmp(a->backend, "loopback") != 0) return "--pd runs over the loopback backend only";
  if (a->inject || a->inject_slot || a->inject_cache || a->kill) {
    return "--pd takes no drills (--inject-*, --kill-rank)";
  }
  if (d->host_cache > 0 || d->disk_cache > 0 || d->nodes > 1) {
    return "--pd takes no --host-cache, --disk-cache or --nodes";
  }
  if (a->prefix_cache != KVS_PREFIX_POLICY_KVSHARD) {
    return "--pd's decode side keeps kvshard's prefix cache: leave out --prefix-cache";
  }
  if (a->device == KVS_NODE_DEVICE_CUDA) {
    return "--pd moves rows between host twins: the transfer refuses GPU tables for now";
  }
  if (d->given[KVS_DEPLOY_BUDGET_PER_GPU] || d->given[KVS_DEPLOY_MEM_FRACTION] ||
      d->given[KVS_DEPLOY_RESERVE]) {
    return "--pd takes --budget or --budget-mib (every rank of both nodes the same)";
  }
  if (a->kv_dtype != KVS_KV_BF16) return "--pd runs bf16 rows (the digest's host twin)";
  return NULL;
}

/* Flags that are each fine alone but contradict each other. */
static int check_conflicts(const parser *p) {
  const kvsim_args *a = p->a;
  kvs_error err;
  const char *conflict = NULL;
  uint64_t host_cache = a->deploy.host_cache;
  if (kvs_deploy_flags_check(&a->deploy, KVSIM_DEPLOY_FLAGS, "--budget-mib", a->have_budget_mib,
                             &err) != KVS_OK) {
    conflict = err.message;
  } else if ((a->inject && a->inject_step >= a->steps) || (a->kill && a->kill_step >= a->steps) ||
             (a->stall && a->stall_step >= a->steps) ||
             (a->inject_slot && a->inject_slot_step >= a->steps)) {
    conflict = "a RANK:STEP drill names a step the run never reaches (it must be below --steps)";
  } else if (a->inject_slot && a->state_rings == KVS_STATE_RINGS_PER_PAGE) {
    conflict = "--inject-slot-divergence moves a request slot; per-page rings have none";
  } else if (a->trace == NULL && (a->have_trace_flags || a->inject_cache)) {
    conflict =
        "--trace-block, --step-ms, --prefix-cache, --host-cache, --host-bandwidth, "
        "--disk-cache, --disk-path, --disk-bandwidth and --inject-cache-divergence need --trace "
        "FILE";
  } else if (a->trace != NULL && p->have_arrival_rate) {
    conflict =
        "--arrival-rate has no effect under --trace (the trace's timestamps are the arrivals): "
        "leave it out";
  } else if (a->trace != NULL && p->have_seed) {
    conflict =
        "--seed has no effect under --trace (a replay draws nothing at random: the trace gives "
        "every arrival and length): leave it out";
  } else if (a->trace != NULL && a->state_rings == KVS_STATE_RINGS_PER_PAGE) {
    conflict =
        "--trace needs rings per request (per-request or hca-per-request): the leader's "
        "admissions travel as request-slot binds";
  } else if (a->inject_cache && a->inject_cache_step >= a->steps) {
    conflict = "a RANK:STEP drill names a step the run never reaches (it must be below --steps)";
  } else if (a->inject_cache && a->prefix_cache == KVS_PREFIX_POLICY_NONE) {
    conflict = "--inject-cache-divergence changes a cached block; --prefix-cache none keeps none";
  } else if (host_cache > 0 && a->prefix_cache != KVS_PREFIX_POLICY_KVSHARD) {
    conflict = "--host-cache is kvshard's tier: it needs --prefix-cache kvshard";
  } else if (a->have_host_bandwidth && host_cache == 0) {
    conflict = "--host-bandwidth prices the host tier's copies: give --host-cache too";
  } else if (a->deploy.disk_cache > 0 && a->prefix_cache != KVS_PREFIX_POLICY_KVSHARD) {
    conflict = "--disk-cache is kvshard's tier: it needs --prefix-cache kvshard";
  } else if ((a->deploy.disk_cache > 0) != (a->disk_path != NULL)) {
    conflict = a->disk_path != NULL ? "--disk-path is the disk tier's folder: give --disk-cache too"
                                    : "--disk-cache needs its folder: give --disk-path DIR";
  } else if (a->have_disk_bandwidth && a->deploy.disk_cache == 0) {
    conflict = "--disk-bandwidth prices the disk tier's reads: give --disk-cache too";
  } else if (a->have_link_bandwidth && !a->pd) {
    conflict = "--link-bandwidth prices --pd's transfers: give --pd too";
  } else if (a->pd) {
    conflict = pd_conflict(p);
  }
  if (conflict == NULL) return check_requests(p);
  if (p->speaker) fprintf(stderr, "%s: %s\n", p->tool, conflict);
  return KVSIM_EXIT_USAGE;
}

/* kvsim keeps every rank's pool mirror and host tables in this machine's
 * memory: a budget past 1 TiB per GPU would ask for gigabytes of host
 * memory per rank, which no GPU's budget needs. */
static int check_budget_cap(const parser *p) {
  const kvs_deploy_flags *d = &p->a->deploy;
  uint64_t biggest = d->budget;
  for (size_t g = 0; g < d->n_budgets; g++) {
    if (d->budgets[g] > biggest) biggest = d->budgets[g];
  }
  if (biggest <= KVSIM_MAX_BUDGET) return 0;
  if (p->speaker) {
    fprintf(stderr,
            "%s: a budget above 1 TiB per GPU is refused (kvsim holds every rank's "
            "tables in host memory)\n",
            p->tool);
  }
  return KVSIM_EXIT_USAGE;
}

int kvsim_parse(int argc, char **argv, bool local, bool speaker, kvsim_args *a) {
  set_defaults(a, local);
  parser p = {a, local, speaker, tool_name(local), false, false, false, false, false};
  kvs_flags_seen seen = {.n = 0};
  for (int i = 1; i < argc; i++) {
    int rc = one_flag(&p, argc, argv, &i, &seen);
    if (rc != 0) return rc;
  }
  int rc = check_required(&p);
  if (rc != 0) return rc;
  /* kvsim_local: one thread a rank, as many as the layout has. */
  if (local && a->ranks == 0 && !a->pd) {
    uint64_t pp = a->deploy.given[KVS_DEPLOY_PP] ? a->deploy.pp : 1;
    int64_t ranks = (int64_t)(a->deploy.tp * pp);
    if (ranks > KVSIM_LOCAL_MAX_RANKS) {
      if (speaker) {
        fprintf(stderr,
                "kvsim_local: --tp %llu x --pp %llu = %lld ranks, above the %d threads it runs\n",
                (unsigned long long)a->deploy.tp, (unsigned long long)pp, (long long)ranks,
                KVSIM_LOCAL_MAX_RANKS);
      }
      return KVSIM_EXIT_USAGE;
    }
    a->ranks = (int)ranks;
  }
  if ((rc = check_conflicts(&p)) != 0 || (rc = check_budget_cap(&p)) != 0) return rc;
  if (a->bare_broadcasts == UINT64_MAX) a->bare_broadcasts = a->steps < 2000 ? a->steps : 2000;
  return 0;
}
