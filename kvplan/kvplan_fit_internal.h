/* kvplan fit's private parts: the flags, one run's state, and the steps
 * kvplan_fit.c (flags, weights, the run), kvplan_fit_layouts.c (every
 * layout of a cluster, searched) and kvplan_fit_report.c (the answer as a
 * table or JSON, and the exit status) hand each other. */
#ifndef KVS_KVPLAN_KVPLAN_FIT_INTERNAL_H
#define KVS_KVPLAN_KVPLAN_FIT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/model_weights.h"
#include "plan/cluster.h"
#include "plan/memory_budget.h"
#include "kvplan/fit_search.h"
#include "kvplan/plan_options.h"

#define FIT_MAX_LAYOUTS 256

typedef struct fit_args {
  kvs_plan_options options;
  kvs_deploy_flags deploy; /* the deployment flags (kvplan/deploy_flags.h) */
  bool have_context, have_concurrency, max_concurrency, json;
  uint64_t context, concurrency;
  double progress_s; /* --progress-s; 0: no progress lines */
} fit_args;

/* What one run holds: the named cluster, the rows found and the scratch
 * every evaluation shares. */
typedef struct fit_run {
  fit_args *a;
  kvs_plan_model *m;
  FILE *notes;
  kvs_cluster_t topo;
  kvs_memory_budget *memory;  /* the named cluster's terms (the report quotes them) */
  kvs_memory_budget *grown;   /* a grown cluster's, 4 nodes at most */
  uint64_t *budgets;          /* scratch for the largest cluster */
  uint64_t *layer;            /* weight bytes per planned layer */
  kvs_model_weights *weights; /* NULL: weights not counted */
  bool split;                 /* experts told apart: dp x ep layouts are tried */
  fit_row *rows;
  size_t n_rows;
  size_t hosts_needed; /* a grown cluster that serves the demand; 0: none */
} fit_run;

/* Allocation and release of a run's scratch (after r->topo is open). */
int fit_run_alloc(fit_run *r);
void fit_run_free(fit_run *r);

/* "split", "total", "folder" or "none". */
const char *fit_weights_source(const fit_args *a, const kvs_plan_model *m);

/* The whole model's weights, when counted, and r->split. 0, or 2. */
int fit_count_weights(fit_run *r);

/* The cluster of `nodes` machines (0: as --topology names it); notes (may
 * be NULL) gets a stand-in's reason. 0, 2 for a bad name, 1 otherwise. */
int fit_open_cluster(const fit_args *a, size_t nodes, FILE *notes, kvs_cluster_t *topo);

/* Every layout of the named cluster, then, where none of one machine
 * serves the demand and --nodes was not given, 2 and 4 such machines (to
 * name the nodes it needs). 0, or the exit status after a message. */
int fit_evaluate_all(fit_run *r);

/* The answer: rows sorted, the table or JSON, the headline; returns the
 * exit status (0 some one-node layout, or --nodes', serves the demand). */
int fit_report(fit_run *r);

#endif /* KVS_KVPLAN_KVPLAN_FIT_INTERNAL_H */
