#include "tools/kvsim_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/layout.h"
#include "tools/args.h"

static const char usage_mpi[] =
    "usage: mpirun -np N kvsim --tp N [--pp M] [--backend mpi|nccl|self] --steps S --seed X\n"
    "                          [--requests R] [--json] [--inject-divergence RANK:STEP]\n";
static const char usage_local[] =
    "usage: kvsim_local --ranks N --tp N [--pp M] [--backend loopback|nccl|self] --steps S\n"
    "                   --seed X [--requests R] [--json] [--inject-divergence RANK:STEP]\n";
static const char usage_flags[] =
    "  --tp N, --pp M          rank layout; N * M must equal the number of ranks\n"
    "  --backend B             mpi (default; host buffers), nccl (GPUs), self (one rank);\n"
    "                          kvsim_local: loopback (default; ranks as threads), nccl, self\n"
    "  --ranks N               kvsim_local: ranks (threads) to run\n"
    "  --steps S               scheduler steps to run, 1..2^40\n"
    "  --seed X                workload seed (the same on every rank)\n"
    "  --requests R            concurrent requests (max running), 1..65536, default 16\n"
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
    "  --topology FILE|live|bundled  the node's machine (default: live when CUDA sees a\n"
    "                          GPU, else the bundled 8-GPU server); a comma-separated\n"
    "                          list of exports simulates a cluster, one node each\n"
    "  --nodes N               simulate N nodes of that topology (1..64): rank r runs\n"
    "                          on plan rank r's GPU, on its node\n"
    "  --host NAME             this rank's host name (default: the machine's): without\n"
    "                          --nodes or a list, ranks that share a host are one node,\n"
    "                          each node's GPUs read by its own ranks; naming hosts\n"
    "                          simulates several machines on one\n"
    "  --local-rank N, --node N  where another launcher placed this rank, checked against\n"
    "                          the plan (default: Open MPI's, Slurm's or MPICH's local rank\n"
    "                          from the environment; not checked when a cluster is\n"
    "                          simulated on one machine)\n"
    "  --budget BYTES          KV budget of every GPU (80GiB, 900MiB, ...)\n"
    "  --budget-per-gpu B0,..  one budget per GPU of the topology, in index order\n"
    "  --budget-mib B          every GPU g gets B x (1 - skew x (g %% 4) / 100) MiB\n"
    "                          (any budget flag: at most 1 TiB per GPU)\n"
    "                          (the default: 860, skew 1, when no budget flag is given)\n"
    "  --budget-skew P         that skew in percent, [0, 25) (default 1)\n"
    "  --memory-ratio F        budgets from measured (or nominal) memory x F - reserve\n"
    "  --reserve BYTES         with --memory-ratio: the reserve (default 512MiB)\n"
    "  --device cpu|cuda       where the tables live (default: cuda when a GPU is\n"
    "                          visible, else cpu: the host twin of the device tables)\n"
    "  --cuda-device N         the CUDA device of every rank's tables (default: the plan's)\n"
    "  --no-verify             skip comparing each step's ring contexts with the pool's\n"
    "  --radix                 size the pool for radix prefix sharing (default off: the\n"
    "                          workload shares no prefixes)\n"
    "  --swa-ratio F           window share of the history, [0, 1] (default 0.04)\n"
    "  --arrival-rate F        expected arrivals per step, [0, 1024] (default 0.25)\n"
    "  --model M               dsv4-flash (default), dsv4-pro, or a config.json path\n"
    "  --bare-broadcasts N     timed bare broadcasts of the step message at the end\n"
    "                          (default min(steps, 2000))\n"
    "  --progress-s T          seconds between progress lines on stderr (default 2)\n";

static void print_usage(FILE *out, bool local) {
  fputs(local ? usage_local : usage_mpi, out);
  fputs(usage_flags, out);
}

static const char *tool_name(bool local) { return local ? "kvsim_local" : "kvsim"; }

static int bad_arg(bool local, bool speaker, const char *flag, const char *value,
                   const char *want) {
  if (speaker) {
    fprintf(stderr, "%s: %s needs %s, got '%s'\n", tool_name(local), flag, want,
            value ? value : "");
    print_usage(stderr, local);
  }
  return KVSIM_EXIT_USAGE;
}

/* A value the shared parsers refused, with their message (which names the
 * flag, the value and, for sizes, the limit). */
static int parse_error(const char *tool, bool speaker, const kvs_error *err, const char *value) {
  if (speaker) {
    fprintf(stderr, "%s: %s\n", tool, value != NULL ? err->message : "a flag needs a value");
  }
  return KVSIM_EXIT_USAGE;
}

static bool parse_u64(const char *s, uint64_t *out) {
  return s != NULL && kvs_parse_u64("", s, out, NULL) == KVS_OK;
}

static bool parse_double(const char *s, double lo, double hi, double *out) {
  double v;
  if (s == NULL || kvs_parse_double("", s, &v, NULL) != KVS_OK || !(v >= lo && v <= hi)) {
    return false;
  }
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

void kvsim_args_free(kvsim_args *a) {
  free(a->budget_per_gpu);
  a->budget_per_gpu = NULL;
}

int kvsim_parse(int argc, char **argv, bool local, bool speaker, kvsim_args *a) {
  memset(a, 0, sizeof *a);
  a->pp = 1;
  a->backend = local ? "loopback" : "mpi";
  a->requests = 16;
  a->check_every = 16;
  a->timeout_ms = 10000;
  a->budget_mib = 860;
  a->budget_skew = 1.0;
  a->swa_ratio = 0.04;
  a->arrival_rate = 0.25;
  a->progress_s = 2.0;
  a->model = "dsv4-flash";
  a->verify = true;
  a->memory_ratio = KVS_DEFAULT_MEMORY_RATIO;
  a->reserve = KVS_DEFAULT_RESERVE_BYTES;
  a->device = KVS_NODE_DEVICE_AUTO;
  a->cuda_device = -1;
  a->state_rings = KVS_STATE_RINGS_PER_REQUEST;
  a->local_rank = KVS_NODE_FROM_LAUNCHER;
  a->node_index = KVS_NODE_FROM_LAUNCHER;
  a->bare_broadcasts = UINT64_MAX;
  a->budget_per_gpu = calloc(KVSIM_MAX_GPUS, sizeof *a->budget_per_gpu);
  if (a->budget_per_gpu == NULL) {
    fprintf(stderr, "kvsim: out of memory\n");
    return KVSIM_EXIT_FAILED;
  }
  const char *tool = tool_name(local);
  bool have_steps = false, have_seed = false;
  /* One rule for every tool: a flag given twice is refused, never the last
   * one silently taken. */
  enum { MAX_SEEN = 64 };
  const char *seen[MAX_SEEN];
  int n_seen = 0;
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t u;
    for (int k = 0; k < n_seen; k++) {
      if (strcmp(seen[k], flag) == 0) {
        if (speaker) {
          fprintf(stderr, "%s: %s is given twice; give it once\n", tool, flag);
        }
        return KVSIM_EXIT_USAGE;
      }
    }
    if (n_seen < MAX_SEEN) seen[n_seen++] = flag;
#define BAD(want) return bad_arg(local, speaker, flag, value, want)
    if (strcmp(flag, "--json") == 0) {
      a->json = true;
      continue;
    }
    if (strcmp(flag, "--no-verify") == 0) {
      a->verify = false;
      continue;
    }
    if (strcmp(flag, "--radix") == 0) {
      a->radix = true;
      continue;
    }
    if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
      if (speaker) print_usage(stdout, local);
      return -1;
    }
    i++; /* every other flag takes a value */
    if (strcmp(flag, "--tp") == 0 || strcmp(flag, "--pp") == 0) {
      if (!parse_u64(value, &u) || u == 0 || u > KVS_SHARD_MAX_RANKS)
        BAD("a rank count in [1, 65535]");
      *(flag[2] == 't' ? &a->tp : &a->pp) = (int)u;
    } else if (local && strcmp(flag, "--ranks") == 0) {
      if (!parse_u64(value, &u) || u == 0 || u > 256) BAD("a rank count in [1, 256]");
      a->ranks = (int)u;
    } else if (strcmp(flag, "--backend") == 0) {
      bool ok =
          value != NULL && (local ? (strcmp(value, "loopback") == 0 || strcmp(value, "nccl") == 0 ||
                                     strcmp(value, "self") == 0)
                                  : (strcmp(value, "mpi") == 0 || strcmp(value, "nccl") == 0 ||
                                     strcmp(value, "self") == 0));
      if (!ok) BAD(local ? "one of loopback, nccl, self" : "one of mpi, nccl, self");
      a->backend = value;
    } else if (strcmp(flag, "--steps") == 0) {
      if (!parse_u64(value, &a->steps) || a->steps == 0 || a->steps > (1ull << 40)) {
        BAD("a step count in [1, 2^40]");
      }
      have_steps = true;
    } else if (strcmp(flag, "--seed") == 0) {
      if (!parse_u64(value, &a->seed)) BAD("an unsigned integer");
      have_seed = true;
    } else if (strcmp(flag, "--requests") == 0) {
      if (!parse_u64(value, &a->requests) || a->requests == 0 || a->requests > 65536) {
        BAD("a request count in [1, 65536]");
      }
    } else if (strcmp(flag, "--inject-divergence") == 0) {
      if (!parse_rank_step(value, &a->inject_rank, &a->inject_step)) BAD("RANK:STEP");
      a->inject = true;
    } else if (strcmp(flag, "--inject-slot-divergence") == 0) {
      if (!parse_rank_step(value, &a->inject_slot_rank, &a->inject_slot_step)) BAD("RANK:STEP");
      a->inject_slot = true;
    } else if (strcmp(flag, "--state-rings") == 0) {
      if (value == NULL || kvs_state_rings_parse(value, &a->state_rings, NULL) != KVS_OK) {
        BAD("one of per-request, hca-per-request, per-page");
      }
    } else if (strcmp(flag, "--kill-rank") == 0) {
      if (!parse_rank_step(value, &a->kill_rank, &a->kill_step)) BAD("RANK:STEP");
      a->kill = true;
    } else if (!local && strcmp(flag, "--stall-rank") == 0) {
      if (!parse_rank_step(value, &a->stall_rank, &a->stall_step)) BAD("RANK:STEP");
      a->stall = true;
    } else if (strcmp(flag, "--check-every") == 0) {
      if (!parse_u64(value, &a->check_every) || a->check_every == 0) BAD("a positive step count");
    } else if (strcmp(flag, "--timeout-ms") == 0) {
      if (!parse_u64(value, &u) || u == 0 || u > INT32_MAX)
        BAD("a positive number of milliseconds");
      a->timeout_ms = (int)u;
    } else if (strcmp(flag, "--nodes") == 0) {
      if (!parse_u64(value, &u) || u == 0 || u > KVS_MAX_NODES) BAD("a node count in [1, 64]");
      a->nodes = (size_t)u;
    } else if (strcmp(flag, "--local-rank") == 0 || strcmp(flag, "--node") == 0) {
      if (!parse_u64(value, &u) || u > 65535) BAD("a non-negative integer up to 65535");
      *(flag[2] == 'l' ? &a->local_rank : &a->node_index) = (int)u;
    } else if (strcmp(flag, "--host") == 0) {
      if (value == NULL || value[0] == '\0') BAD("a host name");
      a->host = value;
    } else if (strcmp(flag, "--topology") == 0) {
      if (value == NULL || value[0] == '\0') BAD("a file, live or bundled");
      a->topology = value;
    } else if (strcmp(flag, "--budget") == 0) {
      kvs_error err;
      if (value == NULL || kvs_parse_budget("--budget", value, &a->budget, &err) != KVS_OK) {
        return parse_error(tool, speaker, &err, value);
      }
    } else if (strcmp(flag, "--budget-per-gpu") == 0) {
      kvs_error err;
      if (value == NULL ||
          kvs_parse_budget_list("--budget-per-gpu", value, a->budget_per_gpu, KVSIM_MAX_GPUS,
                                &a->n_budget_per_gpu, &err) != KVS_OK) {
        return parse_error(tool, speaker, &err, value);
      }
    } else if (strcmp(flag, "--budget-mib") == 0) {
      /* 1048576 MiB is KVSIM_MAX_BUDGET: the 1 TiB bound below, here. */
      if (!parse_double(value, 1e-9, (double)(KVSIM_MAX_BUDGET >> 20), &a->budget_mib))
        BAD("a size in MiB in (0, 1048576]");
      a->have_budget_mib = true;
    } else if (strcmp(flag, "--budget-skew") == 0) {
      if (!parse_double(value, 0.0, 24.999999, &a->budget_skew)) BAD("a percentage in [0, 25)");
      a->have_budget_mib = true;
    } else if (strcmp(flag, "--memory-ratio") == 0) {
      if (!parse_double(value, 1e-9, 1.0, &a->memory_ratio)) BAD("a ratio in (0, 1]");
      a->have_ratio = true;
    } else if (strcmp(flag, "--reserve") == 0) {
      kvs_error err;
      if (value == NULL || kvs_parse_bytes("--reserve", value, &a->reserve, &err) != KVS_OK) {
        return parse_error(tool, speaker, &err, value);
      }
      a->have_reserve = true;
    } else if (strcmp(flag, "--device") == 0) {
      if (value != NULL && strcmp(value, "cpu") == 0) {
        a->device = KVS_NODE_DEVICE_CPU;
      } else if (value != NULL && strcmp(value, "cuda") == 0) {
        a->device = KVS_NODE_DEVICE_CUDA;
      } else {
        BAD("cpu or cuda");
      }
    } else if (strcmp(flag, "--cuda-device") == 0) {
      if (!parse_u64(value, &u) || u > 1023) BAD("a CUDA device ordinal in [0, 1023]");
      a->cuda_device = (int)u;
    } else if (strcmp(flag, "--swa-ratio") == 0) {
      if (!parse_double(value, 0.0, 1.0, &a->swa_ratio)) BAD("a ratio in [0, 1]");
    } else if (strcmp(flag, "--arrival-rate") == 0) {
      if (!parse_double(value, 0.0, 1024.0, &a->arrival_rate)) BAD("a rate in [0, 1024]");
    } else if (strcmp(flag, "--progress-s") == 0) {
      if (!parse_double(value, 0.0, 86400.0, &a->progress_s)) BAD("seconds in [0, 86400]");
    } else if (strcmp(flag, "--model") == 0) {
      if (value == NULL) BAD("a model name or config.json path");
      a->model = value;
    } else if (strcmp(flag, "--bare-broadcasts") == 0) {
      if (!parse_u64(value, &a->bare_broadcasts) || a->bare_broadcasts > 1000000) {
        BAD("a count in [0, 1000000]");
      }
    } else {
      if (speaker) {
        fprintf(stderr, "%s: unknown flag '%s'\n", tool, flag);
        print_usage(stderr, local);
      }
      return KVSIM_EXIT_USAGE;
    }
#undef BAD
  }
  if (a->tp == 0) return bad_arg(local, speaker, "--tp", "", "a rank count in [1, 65535]");
  if (!have_steps) return bad_arg(local, speaker, "--steps", "", "a step count in [1, 2^40]");
  if (!have_seed) return bad_arg(local, speaker, "--seed", "", "an unsigned integer");
  if (local && a->ranks == 0) a->ranks = a->tp * a->pp;
  int explicit_kinds = (a->budget != 0) + (a->n_budget_per_gpu > 0) + a->have_budget_mib;
  const char *conflict = NULL;
  if (explicit_kinds > 1) {
    conflict = "give one of --budget, --budget-per-gpu and --budget-mib";
  } else if ((a->have_ratio || a->have_reserve) && explicit_kinds > 0) {
    conflict =
        "--memory-ratio and --reserve apply to measured memory; the budget flags give the "
        "bytes themselves";
  } else if ((a->inject && a->inject_step >= a->steps) || (a->kill && a->kill_step >= a->steps) ||
             (a->stall && a->stall_step >= a->steps) ||
             (a->inject_slot && a->inject_slot_step >= a->steps)) {
    conflict = "a RANK:STEP drill names a step the run never reaches (it must be below --steps)";
  } else if (a->inject_slot && a->state_rings == KVS_STATE_RINGS_PER_PAGE) {
    conflict = "--inject-slot-divergence moves a request slot; per-page rings have none";
  } else if (false) {
    conflict = "a RANK:STEP drill names a step the run never reaches (it must be below --steps)";
  }
  if (conflict != NULL) {
    if (speaker) fprintf(stderr, "%s: %s\n", tool, conflict);
    return KVSIM_EXIT_USAGE;
  }
  /* kvsim keeps every rank's pool mirror and host tables in this machine's
   * memory: a budget past 1 TiB per GPU would ask for gigabytes of host
   * memory per rank, which no GPU's budget needs. */
  uint64_t biggest = a->budget;
  for (size_t g = 0; g < a->n_budget_per_gpu; g++) {
    if (a->budget_per_gpu[g] > biggest) biggest = a->budget_per_gpu[g];
  }
  if (biggest > KVSIM_MAX_BUDGET) {
    if (speaker) {
      fprintf(stderr,
              "%s: a budget above 1 TiB per GPU is refused (kvsim holds every rank's "
              "tables in host memory)\n",
              tool);
    }
    return KVSIM_EXIT_USAGE;
  }
  if (a->bare_broadcasts == UINT64_MAX) a->bare_broadcasts = a->steps < 2000 ? a->steps : 2000;
  return 0;
}
