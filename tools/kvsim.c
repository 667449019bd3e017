/* kvsim: drives a serving workload through the shard runtime on every rank
 * and proves the ranks keep identical window bindings.
 *
 *   mpirun -np N kvsim --tp N [--pp M] [--backend mpi|nccl|self] --steps S
 *                      --seed X [--requests R] [--json]
 *                      [--inject-divergence RANK:STEP]
 *
 * Rank 0 prints one JSON object as the last line of stdout. Exit status:
 * 0 when every check agreed, 2 bad arguments, 3 divergence detected, 4 a
 * communication or runtime failure, 5 the backend is unavailable here. */
#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/geometry.h"
#include "core/status.h"
#include "core/window_pool.h"
#include "shard/budget.h"
#include "shard/comm.h"
#include "shard/comm_mpi.h"
#include "shard/comm_nccl.h"
#include "shard/comm_self.h"
#include "shard/layout.h"
#include "shard/shard.h"
#include "shard/workload.h"

enum { EXIT_AGREE = 0, EXIT_USAGE = 2, EXIT_DIVERGED = 3, EXIT_FAILED = 4, EXIT_UNAVAILABLE = 5 };

typedef struct args {
  int tp;
  int pp;
  const char *backend;
  uint64_t steps;
  uint64_t seed;
  uint64_t requests;
  bool json;
  bool inject;
  int inject_rank;
  uint64_t inject_step;
  bool kill;
  int kill_rank;
  uint64_t kill_step;
  bool stall;
  int stall_rank;
  uint64_t stall_step;
  uint64_t check_every;
  int timeout_ms;
  double budget_mib;
  double budget_skew;
  double swa_ratio;
  double arrival_rate;
  double progress_s;
  const char *model;
} args;

static const char usage[] =
    "usage: mpirun -np N kvsim --tp N [--pp M] [--backend mpi|nccl|self] --steps S --seed X\n"
    "                          [--requests R] [--json] [--inject-divergence RANK:STEP]\n"
    "  --tp N, --pp M          rank layout; N * M must equal the number of ranks\n"
    "  --backend B             mpi (default; host buffers), nccl (GPUs), self (one rank)\n"
    "  --steps S               scheduler steps to run\n"
    "  --seed X                workload seed (the same on every rank)\n"
    "  --requests R            concurrent requests (max running), default 16\n"
    "  --json                  stdout holds only the JSON object\n"
    "  --inject-divergence R:S flip one binding on rank R after step S; the next check\n"
    "                          must name the page\n"
    "  --check-every N         steps between digest checks (default 16)\n"
    "  --kill-rank R:S         rank R kills itself (SIGKILL) at step S: a failure drill\n"
    "  --stall-rank R:S        rank R stops itself (SIGSTOP) at step S: its peers must\n"
    "                          give up after --timeout-ms and abort the job\n"
    "  --timeout-ms T          deadline of every collective wait (default 10000)\n"
    "  --budget-mib B          KV budget per rank in MiB (default 860); rank r gets\n"
    "                          (1 - skew * (r % 4) / 100) of it\n"
    "  --budget-skew P         per-rank budget skew in percent (default 1)\n"
    "  --swa-ratio F           window share of the history (default 0.04)\n"
    "  --arrival-rate F        expected arrivals per step (default 0.25)\n"
    "  --model M               dsv4-flash (default), dsv4-pro, or a config.json path\n"
    "  --progress-s T          seconds between progress lines on stderr (default 2)\n";

/* Only one rank should speak for argument errors; the launcher's rank
 * variable tells which before MPI is up. */
static bool first_rank_by_env(void) {
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (rank == NULL) rank = getenv("PMI_RANK");
  return rank == NULL || strcmp(rank, "0") == 0;
}

static int bad_arg(const char *flag, const char *value, const char *want) {
  if (first_rank_by_env()) {
    fprintf(stderr, "kvsim: %s needs %s, got '%s'\n%s", flag, want, value ? value : "", usage);
  }
  return EXIT_USAGE;
}

static bool parse_u64(const char *s, uint64_t *out) {
  if (s == NULL || *s == '\0' || *s == '-') return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

static bool parse_double(const char *s, double *out) {
  if (s == NULL || *s == '\0') return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || *end != '\0' || !(v >= 0.0)) return false;
  *out = v;
  return true;
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
  if (!parse_u64(head, &r) || r > KVS_SHARD_MAX_RANKS || !parse_u64(colon + 1, step)) {
    return false;
  }
  *rank = (int)r;
  return true;
}

static int parse_args(int argc, char **argv, args *a) {
  args d = {0};
  d.tp = 0;
  d.pp = 1;
  d.backend = "mpi";
  d.requests = 16;
  d.check_every = 16;
  d.timeout_ms = 10000;
  d.budget_mib = 860;
  d.budget_skew = 1.0;
  d.swa_ratio = 0.04;
  d.arrival_rate = 0.25;
  d.progress_s = 2.0;
  d.model = "dsv4-flash";
  bool have_steps = false, have_seed = false;
  *a = d;
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t u;
    if (strcmp(flag, "--json") == 0) {
      a->json = true;
      continue;
    }
    if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
      if (first_rank_by_env()) fputs(usage, stdout);
      return -1;
    }
    i++; /* every other flag takes a value */
    if (strcmp(flag, "--tp") == 0 || strcmp(flag, "--pp") == 0) {
      if (!parse_u64(value, &u) || u == 0 || u > KVS_SHARD_MAX_RANKS) {
        return bad_arg(flag, value, "a positive rank count");
      }
      *(flag[2] == 't' ? &a->tp : &a->pp) = (int)u;
    } else if (strcmp(flag, "--backend") == 0) {
      if (value == NULL ||
          (strcmp(value, "mpi") && strcmp(value, "nccl") && strcmp(value, "self"))) {
        return bad_arg(flag, value, "one of mpi, nccl, self");
      }
      a->backend = value;
    } else if (strcmp(flag, "--steps") == 0) {
      if (!parse_u64(value, &a->steps)) return bad_arg(flag, value, "a step count");
      have_steps = true;
    } else if (strcmp(flag, "--seed") == 0) {
      if (!parse_u64(value, &a->seed)) return bad_arg(flag, value, "an unsigned integer");
      have_seed = true;
    } else if (strcmp(flag, "--requests") == 0) {
      if (!parse_u64(value, &a->requests) || a->requests == 0 || a->requests > 65536) {
        return bad_arg(flag, value, "a request count in [1, 65536]");
      }
    } else if (strcmp(flag, "--inject-divergence") == 0) {
      if (!parse_rank_step(value, &a->inject_rank, &a->inject_step)) {
        return bad_arg(flag, value, "RANK:STEP");
      }
      a->inject = true;
    } else if (strcmp(flag, "--kill-rank") == 0) {
      if (!parse_rank_step(value, &a->kill_rank, &a->kill_step)) {
        return bad_arg(flag, value, "RANK:STEP");
      }
      a->kill = true;
    } else if (strcmp(flag, "--stall-rank") == 0) {
      if (!parse_rank_step(value, &a->stall_rank, &a->stall_step)) {
        return bad_arg(flag, value, "RANK:STEP");
      }
      a->stall = true;
    } else if (strcmp(flag, "--check-every") == 0) {
      if (!parse_u64(value, &a->check_every) || a->check_every == 0) {
        return bad_arg(flag, value, "a positive step count");
      }
    } else if (strcmp(flag, "--timeout-ms") == 0) {
      if (!parse_u64(value, &u) || u == 0 || u > INT32_MAX) {
        return bad_arg(flag, value, "a positive number of milliseconds");
      }
      a->timeout_ms = (int)u;
    } else if (strcmp(flag, "--budget-mib") == 0) {
      if (!parse_double(value, &a->budget_mib) || a->budget_mib <= 0) {
        return bad_arg(flag, value, "a positive size in MiB");
      }
    } else if (strcmp(flag, "--budget-skew") == 0) {
      if (!parse_double(value, &a->budget_skew) || a->budget_skew >= 25) {
        return bad_arg(flag, value, "a percentage in [0, 25)");
      }
    } else if (strcmp(flag, "--swa-ratio") == 0) {
      if (!parse_double(value, &a->swa_ratio)) return bad_arg(flag, value, "a ratio >= 0");
    } else if (strcmp(flag, "--arrival-rate") == 0) {
      if (!parse_double(value, &a->arrival_rate)) return bad_arg(flag, value, "a rate >= 0");
    } else if (strcmp(flag, "--progress-s") == 0) {
      if (!parse_double(value, &a->progress_s)) return bad_arg(flag, value, "seconds >= 0");
    } else if (strcmp(flag, "--model") == 0) {
      if (value == NULL) return bad_arg(flag, value, "a model name or config.json path");
      a->model = value;
    } else {
      if (first_rank_by_env()) fprintf(stderr, "kvsim: unknown flag '%s'\n%s", flag, usage);
      return EXIT_USAGE;
    }
  }
  if (a->tp == 0) return bad_arg("--tp", "", "a positive rank count");
  if (!have_steps) return bad_arg("--steps", "", "a step count");
  if (!have_seed) return bad_arg("--seed", "", "an unsigned integer");
  return 0;
}

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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the device-table stand-in ----
 * On GPUs the on_apply hook would launch the apply kernel on the step's
 * device buffer. Here it replays the entries onto a plain full-page ->
 * window-page table, and the run ends by comparing that table with the
 * pool: the hook saw every change, in order. */
typedef struct table {
  int64_t *window_page; /* per full page */
  uint64_t n;
  uint64_t entries;
} table;

static kvs_status table_apply(void *ctx, const kvs_shard_apply_batch *batch, kvs_error *err) {
  table *t = ctx;
  for (size_t i = 0; i < batch->n; i++) {
    uint64_t fp = batch->entries[i].full_page;
    if (fp >= t->n) {
      return kvs_error_set(
          err, KVS_ERR_OUT_OF_RANGE,
          "entry %zu names full page %" PRIu64 " outside the %" PRIu64 "-page table", i, fp, t->n);
    }
    t->window_page[fp] = batch->entries[i].window_page;
  }
  t->entries += batch->n;
  return KVS_OK;
}

static bool table_matches(const table *t, const struct kvs_window_pool *pool, uint64_t *bad) {
  const int64_t *map = kvs_window_pool_mapping(pool);
  uint64_t page = kvs_window_pool_page_size(pool);
  for (uint64_t fp = 0; fp < t->n; fp++) {
    int64_t slot = map[fp * page];
    int64_t expected = slot < 0 ? -1 : slot / (int64_t)page;
    if (t->window_page[fp] != expected) {
      *bad = fp;
      return false;
    }
  }
  return true;
}

/* ---- the run ---- */

typedef struct run {
  args a;
  kvs_comm_t comm;
  kvs_comm_t bootstrap; /* the mpi comm under nccl */
  bool mpi;
  int rank;
  int world;
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
  if (r->comm != NULL && !(peers_know && kvs_comm_health(r->comm) == KVS_OK)) {
    kvs_comm_abort(r->comm, EXIT_FAILED); /* MPI_Abort under mpi: does not return */
  }
  return EXIT_FAILED;
}

static int open_comm(run *r, kvs_error *err) {
  const char *b = r->a.backend;
  if (strcmp(b, "self") == 0) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (size != NULL && strcmp(size, "1") != 0) {
      kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                    "--backend self runs one rank, but mpirun started %s", size);
      return EXIT_USAGE;
    }
    return kvs_comm_self_create(&r->comm, err) == KVS_OK ? 0 : EXIT_FAILED;
  }
  int provided;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_SINGLE, &provided);
  r->mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
  kvs_comm_mpi_options mo = KVS_COMM_MPI_OPTIONS_INIT;
  mo.timeout_ms = r->a.timeout_ms;
  if (strcmp(b, "mpi") == 0) {
    return kvs_comm_mpi_create(&mo, &r->comm, err) == KVS_OK ? 0 : EXIT_FAILED;
  }
  if (kvs_comm_mpi_create(&mo, &r->bootstrap, err) != KVS_OK) return EXIT_FAILED;
  kvs_comm_nccl_options no = KVS_COMM_NCCL_OPTIONS_INIT;
  no.timeout_ms = r->a.timeout_ms;
  kvs_status status = kvs_comm_nccl_create(&no, r->bootstrap, &r->comm, err);
  if (status == KVS_OK) return 0;
  return status == KVS_ERR_UNSUPPORTED ? EXIT_UNAVAILABLE : EXIT_FAILED;
}

static void print_json(const run *r, uint64_t steps, const kvs_shard_stats *s, uint64_t digest,
                       bool agree, double elapsed) {
  double per = steps > 0 ? (double)steps : 1.0;
  printf("{\"ranks\": %d, \"steps\": %" PRIu64 ", \"binds\": %" PRIu64 ", \"frees\": %" PRIu64
         ", \"collectives_per_step\": %.4f, \"bytes_per_step\": %.2f, \"digest\": \"%016" PRIx64
         "\", \"digests_agree\": %s, \"steps_per_s\": %.1f}\n",
         r->world, steps, s->binds, s->frees,
         (double)(s->step_collectives + s->check_collectives) / per, (double)s->payload_bytes / per,
         digest, agree ? "true" : "false", elapsed > 0 ? (double)steps / elapsed : 0.0);
  fflush(stdout);
}

static int simulate(run *r) {
  const args *a = &r->a;
  kvs_error err;
  kvs_error_clear(&err);
  r->rank = kvs_comm_rank(r->comm);
  r->world = kvs_comm_size(r->comm);
  signal_rank = r->rank;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  bool speaker = r->rank == 0;

  kvs_geometry geometry;
  kvs_shard_layout layout;
  if (kvs_geometry_resolve(a->model, &geometry, &err) != KVS_OK ||
      kvs_shard_layout_make(r->world, r->rank, a->tp, a->pp, kvs_geometry_layer_count(&geometry),
                            &layout, &err) != KVS_OK) {
    if (speaker) fprintf(stderr, "kvsim: %s\n", err.message);
    return EXIT_USAGE; /* every rank sees the same arguments and fails alike */
  }
  if ((a->inject && a->inject_rank >= r->world) || (a->kill && a->kill_rank >= r->world) ||
      (a->stall && a->stall_rank >= r->world)) {
    if (speaker)
      fprintf(stderr, "kvsim: a RANK:STEP names a rank outside the %d ranks\n", r->world);
    return EXIT_USAGE;
  }

  kvs_workload_options wo = KVS_WORKLOAD_OPTIONS_INIT;
  wo.seed = a->seed;
  wo.max_running = a->requests;
  wo.max_waiting = 4 * a->requests;
  wo.arrival_rate = a->arrival_rate;
  wo.prompt_max = 1536; /* long prompts: the full-history pool, not the
                         * request cap, is what refuses admission */

  /* Ranks' budgets differ a little, so the agreement has work to do. */
  double share = 1.0 - a->budget_skew * (double)(r->rank % 4) / 100.0;
  uint64_t budget = (uint64_t)(a->budget_mib * share * 1048576.0);
  kvs_budget_options bo = KVS_BUDGET_OPTIONS_INIT;
  bo.swa_ratio = a->swa_ratio;
  bo.max_seq_len = kvs_workload_max_seq_len(&wo);
  bo.max_running = a->requests;
  kvs_shard_budget agreed;
  if (kvs_shard_agree_budget(r->comm, &geometry, &layout, budget, &bo, &agreed, &err) != KVS_OK) {
    return fail(r, "budget agreement", &err, true);
  }
  fprintf(stderr,
          "kvsim: rank %d (tp %d, stage %d, layers [%zu, %zu)): budget %" PRIu64 " B holds %" PRIu64
          " pages alone; agreed %" PRIu64 " (rank %d tightest); slack %" PRIu64 " pages, %" PRIu64
          " B\n",
          r->rank, layout.tp_rank, layout.pp_stage, layout.layer_first, layout.layer_end, budget,
          agreed.own_pages, agreed.agreed_pages, agreed.tightest_rank, agreed.slack_pages,
          agreed.slack_bytes);

  uint64_t n_full = agreed.sizes.full_token / agreed.sizes.page;
  table tab = {calloc((size_t)n_full, sizeof(int64_t)), n_full, 0};
  if (tab.window_page == NULL) {
    kvs_error_set(&err, KVS_ERR_NO_MEMORY, "no memory for the device-table stand-in");
    return fail(r, "setup", &err, false);
  }
  kvs_shard_options so = KVS_SHARD_OPTIONS_INIT;
  so.max_running = a->requests;
  so.check_every = a->check_every;
  so.check_integrity = true;
  so.on_apply = table_apply;
  so.on_apply_ctx = &tab;
  kvs_shard_t shard = NULL;
  kvs_workload_t workload = NULL;
  if (kvs_shard_create(r->comm, &agreed.sizes, &so, &shard, &err) != KVS_OK) {
    free(tab.window_page);
    return fail(r, "shard setup", &err, true);
  }
  {
    const int64_t *map = kvs_window_pool_mapping(kvs_shard_pool(shard));
    for (uint64_t fp = 0; fp < n_full; fp++) {
      int64_t slot = map[fp * agreed.sizes.page];
      tab.window_page[fp] = slot < 0 ? -1 : slot / (int64_t)agreed.sizes.page;
    }
  }
  if (kvs_workload_create(shard, &wo, &workload, &err) != KVS_OK) {
    kvs_shard_destroy(shard);
    free(tab.window_page);
    if (speaker) fprintf(stderr, "kvsim: %s\n", err.message);
    return EXIT_USAGE;
  }
  if (speaker) {
    fprintf(stderr,
            "kvsim: %d ranks (tp %d x pp %d, backend %s): %" PRIu64 " full pages, %" PRIu64
            " window pages, step capacity %zu entries (%zu-byte message), check every %" PRIu64
            " steps\n",
            r->world, a->tp, a->pp, kvs_comm_backend(r->comm), n_full, agreed.sizes.n_win_pages,
            kvs_shard_step_capacity(shard), (size_t)(48 + 16 * kvs_shard_step_capacity(shard)),
            a->check_every);
  }

  int code = EXIT_AGREE;
  bool diverged = false, logged = false;
  uint64_t steps = 0;
  kvs_shard_report report;
  double start = now_s(), last_progress = start;
  for (uint64_t s = 0; s < a->steps && !diverged; s++) {
    if (a->kill && r->rank == a->kill_rank && s == a->kill_step) {
      fprintf(stderr, "kvsim: rank %d kills itself at step %" PRIu64 " (--kill-rank)\n", r->rank,
              s);
      fflush(stderr);
      raise(SIGKILL);
    }
    if (a->stall && r->rank == a->stall_rank && s == a->stall_step) {
      fprintf(stderr, "kvsim: rank %d stops itself at step %" PRIu64 " (--stall-rank)\n", r->rank,
              s);
      fflush(stderr);
      raise(SIGSTOP);
    }
    current_step = (sig_atomic_t)s;
    kvs_status status = kvs_workload_step(workload, s, &err);
    if (status == KVS_ERR_DIVERGENCE) {
      if (!logged)
        fprintf(stderr, "kvsim: rank %d: step %" PRIu64 ": %s\n", r->rank, s, err.message);
      logged = true;
    } else if (status != KVS_OK) {
      code = fail(r, "step failed", &err, kvs_shard_health(shard) == KVS_ERR_COMM);
      goto out;
    }
    steps = s + 1;
    if (a->inject && r->rank == a->inject_rank && s == a->inject_step) {
      uint64_t fp;
      int64_t from, to;
      if (kvs_workload_live_page(workload, &fp, &err) == KVS_OK &&
          kvs_shard_inject_flip(shard, fp, &from, &to, &err) == KVS_OK) {
        fprintf(stderr,
                "kvsim: rank %d injected a divergence after step %" PRIu64 ": full page %" PRIu64
                " moved from window page %" PRId64 " to %" PRId64 "\n",
                r->rank, s, fp, from, to);
      } else {
        fprintf(stderr, "kvsim: rank %d could not inject a divergence at step %" PRIu64 ": %s\n",
                r->rank, s, err.message);
      }
    }
    if (kvs_shard_check_due(shard, s)) {
      status = kvs_shard_check(shard, &report, &err);
      if (status == KVS_ERR_DIVERGENCE) {
        diverged = true;
        if (speaker) {
          fprintf(stderr, "kvsim: divergence detected at step %" PRIu64 ": %s\n", s, err.message);
        }
      } else if (status != KVS_OK) {
        code = fail(r, "digest check failed", &err, false);
        goto out;
      }
    }
    if (speaker && a->progress_s > 0) {
      double now = now_s();
      if (now - last_progress >= a->progress_s) {
        kvs_workload_counters c;
        kvs_workload_counters_get(workload, &c);
        fprintf(stderr,
                "kvsim: step %" PRIu64 "/%" PRIu64 " (%.0f%%), %.0f steps/s, %" PRIu64
                " running, %" PRIu64 " waiting, %" PRIu64 " completed, %" PRIu64 " refusals\n",
                steps, a->steps, 100.0 * (double)steps / (double)a->steps,
                (double)steps / (now - start), c.running, c.waiting, c.completed, c.refused);
        last_progress = now;
      }
    }
  }
  double elapsed = now_s() - start;
  kvs_shard_stats stats;
  kvs_shard_stats_get(shard, &stats);

  /* The closing check: every rank's integrity, digests, and the hook's
   * table against the pool, in two collectives. */
  if (!diverged) {
    kvs_status status = kvs_shard_check(shard, &report, &err);
    if (status == KVS_ERR_DIVERGENCE) {
      diverged = true;
      if (speaker) fprintf(stderr, "kvsim: divergence detected at the end: %s\n", err.message);
    } else if (status != KVS_OK) {
      code = fail(r, "final check failed", &err, false);
      goto out;
    }
  }
  uint64_t bad = 0;
  bool table_ok = diverged || table_matches(&tab, kvs_shard_pool(shard), &bad);
  if (!table_ok) {
    fprintf(stderr,
            "kvsim: rank %d: the on_apply table differs from the pool at full page %" PRIu64 "\n",
            r->rank, bad);
  }
  {
    kvs_comm_buffer word = {NULL, NULL, 0, NULL};
    if (kvs_comm_buffer_alloc(r->comm, sizeof(uint64_t), &word, &err) != KVS_OK) {
      code = fail(r, "final check failed", &err, false);
      goto out;
    }
    ((uint64_t *)word.host)[0] = table_ok ? 1 : 0;
    kvs_status status = kvs_comm_allreduce_u64(r->comm, &word, 1, KVS_COMM_MIN, &err);
    table_ok = ((uint64_t *)word.host)[0] == 1;
    kvs_comm_buffer_free(r->comm, &word);
    if (status != KVS_OK) {
      code = fail(r, "final check failed", &err, false);
      goto out;
    }
  }
  bool agree = !diverged && table_ok;
  code = agree ? EXIT_AGREE : EXIT_DIVERGED;
  uint64_t digest = kvs_window_pool_digest(kvs_shard_pool(shard));
  fprintf(stderr, "kvsim: rank %d: %s after %" PRIu64 " steps, digest %016" PRIx64 "\n", r->rank,
          agree ? "integrity ok" : "DIVERGED", steps, digest);
  if (speaker) {
    kvs_workload_counters c;
    kvs_workload_counters_get(workload, &c);
    FILE *human = a->json ? stderr : stdout;
    fprintf(human,
            "kvsim: %" PRIu64 " steps in %.3f s (%.1f us/step): %" PRIu64 " arrivals, %" PRIu64
            " admitted, %" PRIu64 " completed, %" PRIu64 " refusals (pool full), %" PRIu64
            " dropped; %" PRIu64 " prefill + %" PRIu64 " decode tokens; %" PRIu64
            " ring contexts\n",
            steps, elapsed, steps ? 1e6 * elapsed / (double)steps : 0.0, c.arrivals, c.admitted,
            c.completed, c.refused, c.dropped, c.prefill_tokens, c.decode_tokens, c.contexts);
    fprintf(human,
            "kvsim: %" PRIu64 " binds + %" PRIu64 " frees; fullest step %" PRIu64
            " entries; payload %.1f B/step, wire %.1f B/step (fixed capacity); %" PRIu64
            " checks\n",
            stats.binds, stats.frees, stats.max_entries,
            steps ? (double)stats.payload_bytes / (double)steps : 0.0,
            steps ? (double)stats.wire_bytes / (double)steps : 0.0, stats.checks);
    if (diverged) {
      fprintf(human,
              "kvsim: divergence: %s at full page %" PRIu64 ", leader window page %" PRId64
              ", rank %d window page %" PRId64 "\n",
              kvs_shard_divergence_name(report.kind), report.full_page, report.leader_window_page,
              report.rank, report.rank_window_page);
    }
    fflush(human);
    print_json(r, steps, &stats, digest, agree, elapsed);
  }
out:
  kvs_workload_destroy(workload);
  kvs_shard_destroy(shard);
  free(tab.window_page);
  return code;
}

int main(int argc, char **argv) {
  run r;
  memset(&r, 0, sizeof r);
  int code = parse_args(argc, argv, &r.a);
  if (code != 0) return code < 0 ? 0 : code;
  kvs_error err;
  kvs_error_clear(&err);
  code = open_comm(&r, &err);
  if (code != 0) {
    if (r.rank == 0)
      fprintf(stderr, "kvsim: %s backend unavailable: %s\n", r.a.backend, err.message);
  } else {
    code = simulate(&r);
  }
  kvs_comm_destroy(r.comm);
  kvs_comm_destroy(r.bootstrap);
  if (r.mpi) MPI_Finalize();
  return code;
}
