/* kvplan plan --svg: the node's memory map as an SVG picture. One bar
 * per GPU, as tall as its whole memory (all bars on one scale): from the
 * bottom the weights, the KV tiers, the budget's headroom (hatched), the
 * reserve and what the memory share leaves free; with explicit budgets
 * (no memory known) the bar is the budget alone;
 * GPUs boxed by NUMA node with the node's package and CPUs, and over a
 * cluster those boxes boxed by machine; the limiting device outlined in
 * red. Every segment carries a <title> tooltip with its exact bytes.
 * Nothing is clipped: the picture is as wide as its longest title line,
 * and a long CPU list wraps inside its box. */
#ifndef KVS_KVPLAN_PLAN_SVG_H
#define KVS_KVPLAN_PLAN_SVG_H

#include <stddef.h>

#include "core/status.h"
#include "topology/gpu.h"
#include "plan/memory_budget.h"
#include "plan/deployment.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_plan_svg {
  const char *title;    /* e.g. "dsv4-flash · tp 4 x pp 2 · 8 GPUs" */
  const char *subtitle; /* e.g. the page count and the tokens it buys */
  kvs_deployment_t plan;
  const kvs_gpu_info *gpus; /* the list the plan was made for */
  size_t n_gpus;
  /* Per GPU (gpus order): the budget rule's terms, which the whole-GPU
   * bars are drawn from; NULL draws the budgets alone. */
  const kvs_memory_budget *terms;
  /* Over a cluster: each node's label, one outer box per node (NULL or 1
   * node: none). */
  const char *const *host_labels;
  size_t n_hosts;
} kvs_plan_svg;

/* Writes the picture to path. A regular file (or a new one) is replaced
 * atomically, a temporary file renamed over it, so a failed write leaves
 * what was there; a pipe, terminal or device is written to. A path that
 * cannot be written (a full disk, a directory, a FIFO nobody reads) is
 * KVS_ERR_IO, "cannot write SVG: PATH: reason". */
kvs_status kvs_plan_svg_write(const char *path, const kvs_plan_svg *svg, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_PLAN_SVG_H */
