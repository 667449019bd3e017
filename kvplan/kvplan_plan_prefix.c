/* kvplan plan with a prefix cache: what its host and disk tiers hold
 * (--host-cache, --disk-cache) and how many retained window tails the plan's window has room for.
 * Both come from the plan's own functions (plan/deployment.h), the ones the node and the window
 * pool size themselves with. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan/deployment.h"
#include "kvplan/args.h"
#include "kvplan/kvplan_plan_internal.h"
#include "kvplan/plan_json.h"
#include "kvplan/tool_io.h"

/* The most DP groups (the plan's replicas: DP groups and whole replicas
 * alike) that run a rank on one machine. A host slot costs a machine one
 * page's rows for every rank it runs, so with several groups there one
 * slot holds a page of each: the slots count per group, and the groups
 * share the machine's bytes. */
static size_t groups_per_machine(const plan_run *p) {
  size_t replicas = kvs_deployment_replicas(p->plan), n_ranks = kvs_deployment_rank_count(p->plan);
  /* seen[machine x replicas + replica]: a replica's ranks on a machine
   * need not be consecutive (its stages may leave and come back). */
  unsigned char *seen = calloc(p->n_hosts * replicas + 1, 1);
  size_t *groups = calloc(p->n_hosts + 1, sizeof *groups);
  size_t most = 1; /* out of memory: at least the one */
  for (size_t r = 0; seen != NULL && groups != NULL && r < n_ranks; r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(p->plan, r);
    size_t machine = p->gpus[rp->gpu].host;
    if (machine >= p->n_hosts || rp->replica >= replicas) continue;
    unsigned char *mark = &seen[machine * replicas + rp->replica];
    if (*mark) continue;
    *mark = 1;
    if (++groups[machine] > most) most = groups[machine];
  }
  free(seen);
  free(groups);
  return most;
}

/* A lower tier's slots for `bytes` per machine, refused as the node
 * refuses it (shard/node.c), before anything is printed: 0, or the exit. */
static int price_tier(plan_run *p, const char *flag, kvs_deploy_id id, uint64_t bytes,
                      uint64_t *slots) {
  const plan_args *a = p->a;
  kvs_error err;
  if (kvs_deployment_host_slots(p->plan, p->gpus, p->n, bytes, slots, &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s %s is %llu bytes per machine: %s\n", flag,
            a->deploy.text[id], (unsigned long long)bytes, err.message);
    return 2;
  }
  p->host_slot_bytes = kvs_deployment_host_slot_bytes(p->plan, p->gpus, p->n);
  p->host_groups = groups_per_machine(p);
  return 0;
}

int kvplan_prefix_price(plan_run *p) {
  const plan_args *a = p->a;
  if (p->plan == NULL || !(a->prefix_cache || a->deploy.host_cache > 0 || a->deploy.disk_cache > 0))
    return 0;
  kvs_error err;
  int rc = 0;
  if (a->deploy.host_cache > 0) {
    rc = price_tier(p, "--host-cache", KVS_DEPLOY_HOST_CACHE, a->deploy.host_cache, &p->host_slots);
    if (rc != 0) return rc;
    /* More than a machine has cannot be true (the node refuses the same). */
    if (kvs_cluster_host_tier_check(p->topo, "--host-cache", a->deploy.host_cache, &err) !=
        KVS_OK) {
      fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
      return 2;
    }
  }
  if (a->deploy.disk_cache > 0) {
    rc = price_tier(p, "--disk-cache", KVS_DEPLOY_DISK_CACHE, a->deploy.disk_cache, &p->disk_slots);
    if (rc != 0) return rc;
  }
  if (kvs_deployment_retained_tails(p->plan, a->options.max_running, a->options.radix, &p->tails,
                                    &err) != KVS_OK) {
    fprintf(kvs_tool_err(), "kvplan plan: %s\n", err.message);
    return 1;
  }
  return 0;
}

static uint64_t page_tokens(const plan_run *p) {
  return kvs_deployment_split(p->plan)->stages[0].sizes.page;
}

void kvplan_prefix_json(const plan_run *p, json_t *root) {
  const plan_args *a = p->a;
  if (p->plan == NULL || !(a->prefix_cache || a->deploy.host_cache > 0 || a->deploy.disk_cache > 0))
    return;
  const char *names[2] = {"host_tier", "disk_tier"};
  uint64_t bytes[2] = {a->deploy.host_cache, a->deploy.disk_cache};
  uint64_t slots[2] = {p->host_slots, p->disk_slots};
  for (int k = 0; k < 2; k++) {
    if (bytes[k] == 0) continue;
    json_t *h = json_object();
    json_object_set_new(h, "bytes", kvs_json_u64(bytes[k]));
    json_object_set_new(h, "slot_bytes", kvs_json_u64(p->host_slot_bytes));
    json_object_set_new(h, "slots", kvs_json_u64(slots[k]));
    json_object_set_new(h, "tokens", kvs_json_u64(slots[k] * page_tokens(p)));
    /* slots and tokens are one DP group's (with dp 1 and one group a
     * machine, the machine's too); bytes is the machine's. */
    json_object_set_new(h, "capacity_per", json_string("dp_group"));
    json_object_set_new(h, "dp_groups_per_machine", kvs_json_u64(p->host_groups));
    json_object_set_new(root, names[k], h);
  }
  const kvs_retained_tails *t = &p->tails;
  json_t *r = json_object();
  json_object_set_new(r, "pages", kvs_json_u64(t->pages));
  json_object_set_new(r, "bytes_per_tail", kvs_json_u64(t->bytes_per_tail));
  json_object_set_new(r, "tails", kvs_json_u64(t->tails));
  json_object_set_new(r, "window_pages", kvs_json_u64(t->window_pages));
  json_object_set_new(r, "reserve_pages", kvs_json_u64(t->reserve_pages));
  json_object_set_new(r, "left_pages", kvs_json_u64(t->left_pages));
  json_object_set_new(r, "running_pages", kvs_json_u64(t->running_pages));
  json_object_set_new(r, "max_running", kvs_json_u64(a->options.max_running));
  json_object_set_new(root, "retained_tails", r);
}

void kvplan_prefix_text(const plan_run *p) {
  const plan_args *a = p->a;
  if (p->plan == NULL || !(a->prefix_cache || a->deploy.host_cache > 0 || a->deploy.disk_cache > 0))
    return;
  char buf[32], slot[32], tail[32];
  static const char *const labels[2] = {"host tier", "disk tier"};
  static const char *const flags[2] = {"--host-cache", "--disk-cache"};
  static const char *const where[2] = {"",
                                       "; written through once as each block is cached, a "
                                       "block file per rank"};
  uint64_t bytes[2] = {a->deploy.host_cache, a->deploy.disk_cache};
  uint64_t slots[2] = {p->host_slots, p->disk_slots};
  for (int k = 0; k < 2; k++) {
    if (bytes[k] == 0) continue;
    kvs_format_bytes(bytes[k], buf, sizeof buf);
    char scope[224];
    if (p->host_groups > 1) {
      snprintf(scope, sizeof scope,
               "per DP group: each of the %zu DP groups (of every replica) a machine runs "
               "holds that many of its own pages, the groups sharing the machine's %s",
               p->host_groups, buf);
    } else {
      snprintf(scope, sizeof scope, "per DP group (a machine runs one, so the machine's too)");
    }
    fprintf(kvs_tool_out(),
            "%s   %s per machine (%s): %llu slots of %s (%llu bytes: one page's "
            "compressed and indexer rows for every rank the machine runs, each rank keeping its "
            "own copy) = %llu tokens of cached prefix %s%s\n",
            labels[k], buf, flags[k], (unsigned long long)slots[k],
            kvs_format_bytes(p->host_slot_bytes, slot, sizeof slot),
            (unsigned long long)p->host_slot_bytes, (unsigned long long)(slots[k] * page_tokens(p)),
            scope, where[k]);
  }
  const kvs_retained_tails *t = &p->tails;
  fprintf(kvs_tool_out(),
          "retained    %llu window pages past the running requests' working set (the window's "
          "%llu pages less the dummy and the reserve of %llu leave %llu; %llu running requests "
          "hold %u each): %llu retained tails fit at once, each %s (%llu bytes) per rank: one "
          "window page's rows over its layers\n",
          (unsigned long long)t->pages, (unsigned long long)t->window_pages,
          (unsigned long long)t->reserve_pages, (unsigned long long)t->left_pages,
          (unsigned long long)a->options.max_running, KVS_WINDOW_PAGES_PER_REQUEST,
          (unsigned long long)t->tails, kvs_format_bytes(t->bytes_per_tail, tail, sizeof tail),
          (unsigned long long)t->bytes_per_tail);
}
