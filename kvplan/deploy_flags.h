/* The flags every deployment question shares, in one table: where the
 * plan runs (--topology, --nodes, --allow-cross-node-tp), its layout
 * (--tp, --pp), the budgets (--budget, --budget-per-gpu), the memory share
 * (--mem-fraction, also named --memory-ratio), the reserve, the weights
 * (--weights, --weights-per-gpu, --weights-total, --expert-weights,
 * --shared-weights), the GPUs' memory (--gpu-memory, --free-before-load)
 * and the prefix cache's host tier (--host-cache).
 *
 * The node's flags (kvs_node_create_flags), kvplan plan, kvplan fit and
 * kvsim each take a subset of them (a kvs_deploy_set) beside flags of
 * their own, and read every one of them here: one entry per flag (its
 * names, kind, bounds, what a value means and its help line) and one
 * parser over the entries, so a value is taken, or refused in the same
 * sentence, by all four. A flag a tool's subset lacks is not found here
 * and stays that tool's to refuse. */
#ifndef KVS_KVPLAN_DEPLOY_FLAGS_H
#define KVS_KVPLAN_DEPLOY_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "plan/memory_inputs.h"
#include "topology/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest tensor-parallel group or pipeline kvplan plans (--tp and
 * --pp, the default layout, fit's layouts), and the longest per-GPU list. */
#define KVS_KVPLAN_MAX_GPUS 1024

typedef enum kvs_deploy_id {
  KVS_DEPLOY_TOPOLOGY,
  KVS_DEPLOY_NODES,
  KVS_DEPLOY_ALLOW_CROSS_NODE_TP,
  KVS_DEPLOY_TP,
  KVS_DEPLOY_PP,
  KVS_DEPLOY_BUDGET,
  KVS_DEPLOY_BUDGET_PER_GPU,
  KVS_DEPLOY_MEM_FRACTION,
  KVS_DEPLOY_RESERVE,
  KVS_DEPLOY_WEIGHTS,
  KVS_DEPLOY_WEIGHTS_PER_GPU,
  KVS_DEPLOY_WEIGHTS_TOTAL,
  KVS_DEPLOY_EXPERT_WEIGHTS,
  KVS_DEPLOY_SHARED_WEIGHTS,
  KVS_DEPLOY_GPU_MEMORY,
  KVS_DEPLOY_FREE_BEFORE_LOAD,
  KVS_DEPLOY_HOST_CACHE,
  KVS_DEPLOY_DISK_CACHE,
  KVS_DEPLOY_FLAG_COUNT
} kvs_deploy_id;

/* A subset of the table, one bit per kvs_deploy_id. */
typedef uint32_t kvs_deploy_set;
#define KVS_DEPLOY_BIT(id) ((kvs_deploy_set)1 << (id))
#define KVS_DEPLOY_ALL ((kvs_deploy_set)((1u << KVS_DEPLOY_FLAG_COUNT) - 1))

typedef enum kvs_deploy_kind {
  KVS_DEPLOY_TEXT,   /* a string, not empty, kept as given */
  KVS_DEPLOY_SWITCH, /* no value */
  KVS_DEPLOY_COUNT,  /* a whole number in [lo, hi] */
  KVS_DEPLOY_SHARE,  /* a number in (lo, hi] */
  KVS_DEPLOY_SIZE,   /* a byte count (kvs_parse_bytes) */
  KVS_DEPLOY_SIZES   /* a comma-separated list of byte counts, one per GPU */
} kvs_deploy_kind;

typedef struct kvs_deploy_flag {
  kvs_deploy_id id;
  const char *name;  /* "--mem-fraction" */
  const char *alias; /* the same flag by another name ("--memory-ratio"), or NULL */
  kvs_deploy_kind kind;
  double lo, hi; /* COUNT: [lo, hi]; SHARE: (lo, hi] */
  /* COUNT, SHARE and TEXT: what a value must be, as the refusal says it:
   * "<flag> needs <want>, got '<value>'". */
  const char *want;
  /* SIZE and SIZES: NULL where 0 is taken (what it means is in the help
   * line), else the refusal of 0 ("<flag> ... got '0'", a format taking
   * the flag and the value). Every size follows one rule besides: a bare
   * number from 1 to under 1 MiB is refused asking "did you mean
   * <n>GiB?" (kvs_deploy_size_parse). */
  const char *zero;
  size_t value_at; /* where the value goes in kvs_deploy_flags (offsetof) */
  size_t count_at; /* SIZES: where its entry count goes */
  /* The help line(s), "  --name ARG   ...\n"; NULL where the previous
   * entry's line names this flag too (--pp with --tp). */
  const char *help;
} kvs_deploy_flag;

/* The table, indexed by kvs_deploy_id. */
extern const kvs_deploy_flag kvs_deploy_flags_table[KVS_DEPLOY_FLAG_COUNT];

/* What the flags said. Values of flags not given are 0 (NULL, false)
 * except mem_fraction and reserve, which hold the defaults every tool
 * starts from (KVS_DEFAULT_MEMORY_RATIO, KVS_DEFAULT_RESERVE_BYTES). */
typedef struct kvs_deploy_flags {
  bool given[KVS_DEPLOY_FLAG_COUNT];
  const char *said[KVS_DEPLOY_FLAG_COUNT]; /* the name it was given by, dashes included */
  const char *text[KVS_DEPLOY_FLAG_COUNT]; /* its value as written */
  const char *topology;
  uint64_t nodes, tp, pp;
  bool allow_cross_host_tp;
  uint64_t budget;
  uint64_t budgets[KVS_KVPLAN_MAX_GPUS];
  size_t n_budgets;
  double mem_fraction;
  uint64_t reserve;
  uint64_t weights;
  uint64_t weights_list[KVS_KVPLAN_MAX_GPUS];
  size_t n_weights;
  uint64_t weights_total, expert_weights, shared_weights;
  uint64_t gpu_memory, free_before_load;
  uint64_t host_cache;
  uint64_t disk_cache;
} kvs_deploy_flags;

void kvs_deploy_flags_init(kvs_deploy_flags *flags);

/* The entry of `set` that `name` names ("--memory-ratio", dashes
 * included; "name=value" reads as name), or NULL. */
const kvs_deploy_flag *kvs_deploy_flag_find(kvs_deploy_set set, const char *name);

/* One flag given by the name `said` (its name or its alias) with `value`
 * (NULL for a switch): the value read by the entry's kind into *flags.
 * Refused as KVS_ERR_PARSE, naming the flag as said: a flag given twice
 * (by one name: "<flag> is given twice; give it once"; by both: "<alias>
 * and <name> are one flag; give it once"), a value missing or not of its
 * kind, outside its bounds or 0 where 0 means nothing; the flag then
 * stays not given. */
kvs_status kvs_deploy_flag_apply(kvs_deploy_flags *flags, const kvs_deploy_flag *flag,
                                 const char *said, const char *value, kvs_error *err);

/* One byte count read as the SIZE entry `flag` reads its value: a byte
 * count (kvs_parse_bytes), 0 refused where the entry says so (else taken),
 * and a bare number of 1 to under 1 MiB refused as "<flag> <n> is <n>
 * bytes, under 1 MiB: did you mean <n>GiB? (write <n>B for bytes)", the one
 * rule of every size flag. Also for a tool that takes the same size under
 * its own flag table (kvplan solve's --budget, one device's). */
kvs_status kvs_deploy_size_parse(const kvs_deploy_flag *flag, const char *said, const char *text,
                                 uint64_t *out, kvs_error *err);

/* The combinations every tool that takes the flags refuses alike, in this
 * order: two explicit budgets (--budget, --budget-per-gpu and the tool's
 * own `own_budget` flag, when it has one: its name, given or not, and
 * whether it was given); --expert-weights without --shared-weights or the
 * reverse; two kinds of weights of those in `set`; a flag that applies to
 * measured memory (the share, the reserve, weights, --gpu-memory,
 * --free-before-load) beside an explicit budget; memory flags that cannot
 * be true together (kvs_deploy_flags_check_gpus with no GPUs). KVS_ERR_PARSE. */
kvs_status kvs_deploy_flags_check(const kvs_deploy_flags *flags, kvs_deploy_set set,
                                  const char *own_budget, bool own_budget_given, kvs_error *err);

/* The memory flags of `set` given in *flags (--gpu-memory,
 * --free-before-load, --budget or --budget-per-gpu, --reserve, --weights
 * or --weights-per-gpu) as memory_inputs.h's inputs, each named as it was
 * said; the rest not given. For a tool that adds its own (kvsim's
 * --budget-mib) before kvs_memory_inputs_check. */
void kvs_deploy_memory_inputs(const kvs_deploy_flags *flags, kvs_deploy_set set,
                              kvs_memory_input out[KVS_MEMORY_INPUT_COUNT]);

/* Memory flags that cannot be true (plan/memory_inputs.h): one above
 * another that holds it (kvs_deploy_flags_check asks this with no GPUs)
 * or, with gpus[0..n_gpus) loaded, above a GPU's own memory. KVS_ERR_PARSE
 * naming both sides, in the sentence the node uses. */
kvs_status kvs_deploy_flags_check_gpus(const kvs_deploy_flags *flags, kvs_deploy_set set,
                                       const kvs_gpu_info *gpus, size_t n_gpus, kvs_error *err);

/* The help lines of the flags in `set`, in table order. */
void kvs_deploy_flags_help(FILE *out, kvs_deploy_set set);

/* Every name the flags of `set` have (aliases included) into names[0..cap),
 * for a tool's nearest-flag hint; the count written. */
size_t kvs_deploy_flags_names(kvs_deploy_set set, const char **names, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_DEPLOY_FLAGS_H */
