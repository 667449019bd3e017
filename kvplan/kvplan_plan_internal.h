/* kvplan plan's private parts, shared by kvplan_plan.c (the flags, the
 * node's setup steps and the kvshard plan) and kvplan_plan_engine.c (the
 * plan in SGLang's terms: its memory rule, its pools and launch flags). */
#ifndef KVS_KVPLAN_KVPLAN_PLAN_INTERNAL_H
#define KVS_KVPLAN_KVPLAN_PLAN_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/model_weights.h"
#include "plan/cluster.h"
#include "plan/memory_budget.h"
#include "plan/deployment.h"
#include "plan/node_setup.h"
#include "plan/parallel.h"
#include "kvplan/plan_engine.h"
#include "kvplan/plan_options.h"

typedef struct plan_args {
  kvs_plan_options options;
  kvs_deploy_flags deploy; /* the deployment flags (kvplan/deploy_flags.h) */
  bool json;
  const char *svg;
  bool have_dp, have_ep;
  uint64_t dp, ep;
  bool launch;
  bool prefix_cache; /* --prefix-cache (--host-cache implies it) */
} plan_args;

typedef struct plan_weights {
  const char *source; /* "none", "measured", "folder", "total", "split" */
  kvs_model_weights *folder;
  uint64_t *layer;
} plan_weights;

/* One plan being made: what run's steps hand each other. */
typedef struct plan_run {
  plan_args *a;
  kvs_plan_model *m;
  FILE *notes; /* stdout, or stderr under --json */
  kvs_cluster_t topo;
  const kvs_gpu_info *gpus;
  size_t n, n_hosts;        /* GPUs, machines */
  kvs_parallel layout;      /* tp x pp per DP group, dp, ep */
  uint64_t *budgets;        /* per GPU: the KV budget */
  kvs_memory_budget *terms; /* per GPU: the rule's terms behind it */
  char budget_what[256];    /* the budgets, for people */
  char note[1024];          /* a stand-in topology or nominal memory, said once */
  plan_weights weights;
  kvs_deployment_t plan;
  /* Per plan rank: what the node puts on its GPU beside its carve in the
   * deployment planned (shard/plan_overhead.h); NULL without a plan. */
  uint64_t *overheads;
  /* --engine sglang: SGLang's memory rule (engine_rule: budgets from it,
   * not --budget), its options for one DP group's worker, its pools (the
   * stage with the fewest tokens, and every stage) and the launch flags. */
  bool engine_rule;
  kvs_engine_memory engine;
  kvs_sglang_options sglang_options;
  uint64_t sglang_max_running; /* --max-running-requests over every group */
  kvs_engine_pools sglang;
  json_t *sglang_stages;
  json_t *launch;
  /* Under SGLang's rule kvshard's own pool may not fit its rest (kvshard's
   * window floor is sized for --max-running at --max-seq-len): the plan is
   * then NULL, SGLang's answer still stands, and this says why. */
  char kvshard_short[KVS_ERROR_MESSAGE_MAX];
  /* With the prefix cache (kvplan_prefix_price): the host tier's slots
   * and their cost per machine (--host-cache), and the window's room for
   * retained tails. */
  uint64_t host_slots, host_slot_bytes;
  uint64_t disk_slots; /* the disk tier's (--disk-cache), slots of host_slot_bytes */
  /* The DP groups (plan replicas) the busiest machine runs: each holds
   * host_slots slots of its own pages, sharing the machine's bytes. */
  size_t host_groups;
  kvs_retained_tails tails;
} plan_run;

/* The plan, in the node's own steps: the model, the topology, budgets,
 * the plan, the prefix cache's tiers and the node's buffers, into *p
 * (released by kvplan_plan_release, also after a refusal). notes gets
 * what was assumed (NULL: nothing said; kvplan transfer plans its prefill
 * side quietly beside the decode side it reports). Returns 0, or the exit
 * status after a message. */
int kvplan_plan_make(plan_run *p, plan_args *a, kvs_plan_model *m, FILE *notes);
void kvplan_plan_release(plan_run *p);

/* The request p's plan was made from: what kvs_node_rank_layout needs to
 * give a rank's device layout. */
kvs_plan_request kvplan_plan_request(const plan_run *p);

/* With --engine sglang and no explicit budget: P, A and SGLang's rule on
 * the layout; every GPU's budget is its rest, said in p->budget_what.
 * Returns 0, 1 when SGLang would have no KV memory (the JSON error object
 * and the message last, with the minimum viable fraction), 2 bad usage. */
int kvplan_engine_budgets(plan_run *p);

/* --engine sglang: SGLang's pools on the same bytes (its rest, or each
 * stage's tightest explicit budget) and, with --launch, the flags.
 * Returns 0 or 2 after a message. */
int kvplan_engine_pools(plan_run *p);

/* After the report: 1 with the refusal on the last line when SGLang's
 * pools hold no full-token page (it would not start), else 0. */
int kvplan_engine_verdict(const plan_run *p);

/* With --prefix-cache or --host-cache and a plan: the host tier's slots
 * (kvs_deployment_host_slots, refused as the node refuses it: exit 2 naming
 * --host-cache) and the retained tails (kvs_deployment_retained_tails).
 * Returns 0, 1 or 2 after a message. */
int kvplan_prefix_price(plan_run *p);

/* The `host_tier` and `retained_tails` objects of the plan's JSON. */
void kvplan_prefix_json(const plan_run *p, json_t *root);

/* The same for people, after the tokens line. */
void kvplan_prefix_text(const plan_run *p);

/* The `sglang` and `launch` objects of the plan's JSON. */
void kvplan_engine_json(plan_run *p, json_t *root);

/* The same for people, after the table. */
void kvplan_engine_text(const plan_run *p);

#endif /* KVS_KVPLAN_KVPLAN_PLAN_INTERNAL_H */
