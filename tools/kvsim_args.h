/* kvsim's flags, shared by its two front ends: kvsim (ranks are MPI
 * processes, or one with --backend self) and kvsim_local (ranks are
 * threads of one process over the loopback backend, for machines without
 * MPI, such as a GPU machine running tools/device-check.sh). */
#ifndef KVS_TOOLS_KVSIM_ARGS_H
#define KVS_TOOLS_KVSIM_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvplan/deploy_flags.h"
#include "shard/node.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KVSIM_EXIT_AGREE = 0,
  /* Every check agreed, but the trace was not served whole: requests
   * longer than the pool skipped, or the run stopped at --steps first.
   * Below every failure's status, so a process of rank threads (which
   * reports its worst rank's) never hides one behind it. */
  KVSIM_EXIT_NOT_WHOLE = 1,
  KVSIM_EXIT_USAGE = 2,
  KVSIM_EXIT_DIVERGED = 3,
  KVSIM_EXIT_FAILED = 4,
  KVSIM_EXIT_UNAVAILABLE = 5,
  /* kvsim_local: the rank a --kill-rank drill stopped (never an exit
   * status: the process reports its survivors'). */
  KVSIM_RANK_KILLED = 137
};

/* The budget per GPU without a budget flag (--budget-mib): one that holds
 * the minimal pool at the serving defaults (64 running requests, radix on:
 * 2.75 GiB on DSV4-Flash's 43 layers) with room for the workload. */
#define KVSIM_DEFAULT_BUDGET_MIB 4096

/* The workload's concurrent requests without --requests (at most
 * --max-running). */
#define KVSIM_DEFAULT_REQUESTS 16

/* The largest budget per GPU kvsim simulates: 1 TiB. */
#define KVSIM_MAX_BUDGET (UINT64_C(1) << 40)

/* kvsim_local's ranks (threads) at most. */
#define KVSIM_LOCAL_MAX_RANKS 256

/* The deployment flags kvsim takes (kvplan/deploy_flags.h): the machine,
 * the layout (tp x pp: its ranks; one alone takes the rest, neither the
 * largest group every node holds whole: kvsim_run), the budgets and the
 * host tier. */
#define KVSIM_DEPLOY_FLAGS                                                         \
  (KVS_DEPLOY_BIT(KVS_DEPLOY_TOPOLOGY) | KVS_DEPLOY_BIT(KVS_DEPLOY_NODES) |        \
   KVS_DEPLOY_BIT(KVS_DEPLOY_TP) | KVS_DEPLOY_BIT(KVS_DEPLOY_PP) |                 \
   KVS_DEPLOY_BIT(KVS_DEPLOY_BUDGET) | KVS_DEPLOY_BIT(KVS_DEPLOY_BUDGET_PER_GPU) | \
   KVS_DEPLOY_BIT(KVS_DEPLOY_MEM_FRACTION) | KVS_DEPLOY_BIT(KVS_DEPLOY_RESERVE) |  \
   KVS_DEPLOY_BIT(KVS_DEPLOY_HOST_CACHE) | KVS_DEPLOY_BIT(KVS_DEPLOY_DISK_CACHE))

typedef struct kvsim_args {
  kvs_deploy_flags deploy; /* --topology, --nodes, --tp, --pp, budgets, --host-cache */
  const char *backend;     /* mpi, nccl, self, loopback */
  int ranks;               /* loopback: threads; else 0 */
  uint64_t steps;
  uint64_t seed;
  uint64_t requests;    /* the workload's concurrent requests, at most max_running */
  uint64_t max_running; /* --max-running: what the pool is sized for, as kvplan's */
  bool json;
  bool inject;
  int inject_rank;
  uint64_t inject_step;
  bool inject_slot;
  int inject_slot_rank;
  uint64_t inject_slot_step;
  kvs_state_rings state_rings; /* --state-rings, per-request by default */
  bool kill;
  int kill_rank;
  uint64_t kill_step;
  bool stall;
  int stall_rank;
  uint64_t stall_step;
  uint64_t check_every;
  int timeout_ms;
  double swa_ratio;
  double arrival_rate;
  double progress_s;
  const char *model;
  bool radix;  /* --radix | --no-radix: the floor's radix reserve, as kvplan's */
  bool verify; /* every step's table ring contexts against the pool's */
  /* The node: where this rank runs, the default budget, the device. */
  int local_rank;   /* --local-rank; KVS_NODE_FROM_LAUNCHER when not given */
  int host_index;   /* --node; likewise */
  const char *host; /* --host: this rank's host name; NULL: gethostname */
  bool have_budget_mib;
  double budget_mib;
  double budget_skew;
  kvs_node_device device;
  int cuda_device; /* -1: the plan's */
  uint64_t bare_broadcasts;
  /* A serving trace (issue 26): NULL for the seeded workload. */
  const char *trace;
  uint64_t trace_block;  /* tokens per hash id (512) */
  double step_ms;        /* simulated time of one step (50) */
  int prefix_cache;      /* KVS_PREFIX_POLICY_* (kvshard with a trace) */
  double host_bandwidth; /* GB/s of the host link the tier's copies take (50) */
  bool have_host_bandwidth;
  const char *disk_path; /* --disk-path: the disk tier's folder */
  double disk_bandwidth; /* GB/s a machine's disk reads the tier at (5) */
  bool have_disk_bandwidth;
  bool have_trace_flags; /* --trace-block, --step-ms, --prefix-cache or a host flag given */
  kvs_kv_dtype kv_dtype; /* --kv-dtype (bf16) */
  bool inject_cache;     /* --inject-cache-divergence RANK:STEP */
  int inject_cache_rank;
  uint64_t inject_cache_step;
  /* kvsim_local --pd PREFILL:DECODE: prefill on one node, decode on
   * another (tools/kvsim_pd.h); each side tp x pp ranks. */
  bool pd;
  int pd_tp[2], pd_pp[2]; /* [0] prefill, [1] decode */
  double link_bandwidth;  /* --link-bandwidth: GB/s of each rank's link (50) */
  bool have_link_bandwidth;
} kvsim_args;

/* Parses argv. local: the kvsim_local front end (loopback, --ranks; no
 * mpi backend, no kill or stall drills). Returns 0 to run, -1 after
 * --help (exit 0), or KVSIM_EXIT_USAGE after printing the error. speaker:
 * whether this process prints argument errors (one rank of many). */
int kvsim_parse(int argc, char **argv, bool local, bool speaker, kvsim_args *a);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_KVSIM_ARGS_H */
