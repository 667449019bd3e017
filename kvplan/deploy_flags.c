#include "kvplan/deploy_flags.h"

#include <stddef.h>
#include <string.h>

#include "core/serving_defaults.h"
#include "kvplan/args.h"
#include "plan/cluster.h"

#define AT(field) offsetof(kvs_deploy_flags, field)
#define MAX_GPUS_TEXT "1024"

/* The refusal of a 0 that would mean nothing (a budget or a memory of no
 * bytes holds no pool): a format of the flag and the value. */
#define ABOVE_ZERO "%s must be above 0 bytes, got '%s'"

/* One entry per flag: its names, kind and bounds, what a value must be
 * (the refusal's words), where it goes, and its help line. */
const kvs_deploy_flag kvs_deploy_flags_table[KVS_DEPLOY_FLAG_COUNT] = {
    [KVS_DEPLOY_TOPOLOGY] =
        {.id = KVS_DEPLOY_TOPOLOGY,
         .name = "--topology",
         .kind = KVS_DEPLOY_TEXT,
         .want = "a file, live or bundled",
         .value_at = AT(topology),
         .help =
             "  --topology FILE|live|bundled|auto  an hwloc XML export, the running machine or\n"
             "                          the built-in 8-GPU server (auto, the default: live when\n"
             "                          CUDA sees GPUs, else bundled); a comma-separated list\n"
             "                          of exports: one node each, in order\n"},
    [KVS_DEPLOY_NODES] =
        {.id = KVS_DEPLOY_NODES,
         .name = "--nodes",
         .kind = KVS_DEPLOY_COUNT,
         .lo = 1,
         .hi = KVS_MAX_HOSTS,
         .want = "a node count in [1, 64]",
         .value_at = AT(nodes),
         .help = "  --nodes N               N identical nodes of that topology (1..64)\n"},
    [KVS_DEPLOY_ALLOW_CROSS_NODE_TP] =
        {.id = KVS_DEPLOY_ALLOW_CROSS_NODE_TP,
         .name = "--allow-cross-node-tp",
         .kind = KVS_DEPLOY_SWITCH,
         .value_at = AT(allow_cross_host_tp),
         .help = "  --allow-cross-node-tp   let a tensor-parallel group span nodes (refused\n"
                 "                          otherwise)\n"},
    [KVS_DEPLOY_TP] =
        {.id = KVS_DEPLOY_TP,
         .name = "--tp",
         .kind = KVS_DEPLOY_COUNT,
         .lo = 1,
         .hi = KVS_KVPLAN_MAX_GPUS,
         .want = "a rank count in [1, " MAX_GPUS_TEXT "]",
         .value_at = AT(tp),
         .help =
             "  --tp N --pp N           ranks per tensor-parallel group x pipeline stages, each\n"
             "                          1.." MAX_GPUS_TEXT "\n"},
    [KVS_DEPLOY_PP] = {.id = KVS_DEPLOY_PP,
                       .name = "--pp",
                       .kind = KVS_DEPLOY_COUNT,
                       .lo = 1,
                       .hi = KVS_KVPLAN_MAX_GPUS,
                       .want = "a stage count in [1, " MAX_GPUS_TEXT "]",
                       .value_at = AT(pp)},
    [KVS_DEPLOY_BUDGET] =
        {.id = KVS_DEPLOY_BUDGET,
         .name = "--budget",
         .kind = KVS_DEPLOY_SIZE,
         .zero = ABOVE_ZERO,
         .value_at = AT(budget),
         .help = "  --budget BYTES          KV budget of every GPU (80GiB, 141GB, ...)\n"},
    [KVS_DEPLOY_BUDGET_PER_GPU] =
        {.id = KVS_DEPLOY_BUDGET_PER_GPU,
         .name = "--budget-per-gpu",
         .kind = KVS_DEPLOY_SIZES,
         .zero = ABOVE_ZERO,
         .value_at = AT(budgets),
         .count_at = AT(n_budgets),
         .help = "  --budget-per-gpu B0,B1,.. one budget per GPU, in GPU index order\n"},
    [KVS_DEPLOY_MEM_FRACTION] =
        {.id = KVS_DEPLOY_MEM_FRACTION,
         .name = "--mem-fraction",
         .alias = "--memory-ratio",
         .kind = KVS_DEPLOY_SHARE,
         .lo = 0,
         .hi = 1,
         .want = "a share of memory in (0, 1]",
         .value_at = AT(mem_fraction),
         .help =
             "  --mem-fraction F        share of each GPU's memory for weights, KV and the\n"
             "                          reserve, in (0, 1] (default 0.9; --memory-ratio is the\n"
             "                          same flag)\n"},
    [KVS_DEPLOY_RESERVE] =
        {.id = KVS_DEPLOY_RESERVE,
         .name = "--reserve",
         .kind = KVS_DEPLOY_SIZE,
         .value_at = AT(reserve),
         .help =
             "  --reserve BYTES         taken off that share for the node's buffers beside its\n"
             "                          carve and the CUDA runtime (default 512MiB; 0: none); it\n"
             "                          must hold the buffers (node_overhead_bytes)\n"},
    [KVS_DEPLOY_WEIGHTS] =
        {.id = KVS_DEPLOY_WEIGHTS,
         .name = "--weights",
         .kind = KVS_DEPLOY_SIZE,
         .value_at = AT(weights),
         .help =
             "  --weights BYTES         model weights on every GPU, as the engine measured them\n"
             "                          (0: none)\n"},
    [KVS_DEPLOY_WEIGHTS_PER_GPU] =
        {.id = KVS_DEPLOY_WEIGHTS_PER_GPU,
         .name = "--weights-per-gpu",
         .kind = KVS_DEPLOY_SIZES,
         .value_at = AT(weights_list),
         .count_at = AT(n_weights),
         .help = "  --weights-per-gpu B0,.. the same per GPU, in GPU index order (0: none)\n"},
    [KVS_DEPLOY_WEIGHTS_TOTAL] =
        {.id = KVS_DEPLOY_WEIGHTS_TOTAL,
         .name = "--weights-total",
         .kind = KVS_DEPLOY_SIZE,
         .value_at = AT(weights_total),
         .help = "  --weights-total BYTES   the whole model's weights, not yet measured: spread\n"
                 "                          evenly over its layers, each stage paying its own (0:\n"
                 "                          none)\n"},
    [KVS_DEPLOY_EXPERT_WEIGHTS] =
        {.id = KVS_DEPLOY_EXPERT_WEIGHTS,
         .name = "--expert-weights",
         .kind = KVS_DEPLOY_SIZE,
         .value_at = AT(expert_weights),
         .help =
             "  --expert-weights BYTES --shared-weights BYTES\n"
             "                          the same in two kinds: routed experts (divided over\n"
             "                          tp x dp GPUs) and the rest (divided over tp); 0: none\n"},
    [KVS_DEPLOY_SHARED_WEIGHTS] = {.id = KVS_DEPLOY_SHARED_WEIGHTS,
                                   .name = "--shared-weights",
                                   .kind = KVS_DEPLOY_SIZE,
                                   .value_at = AT(shared_weights)},
    [KVS_DEPLOY_GPU_MEMORY] =
        {.id = KVS_DEPLOY_GPU_MEMORY,
         .name = "--gpu-memory",
         .kind = KVS_DEPLOY_SIZE,
         .zero = ABOVE_ZERO,
         .value_at = AT(gpu_memory),
         .help =
             "  --gpu-memory BYTES      every GPU's memory, instead of what CUDA measures or the\n"
             "                          total its driver reports (H200: 143771MiB), never above\n"
             "                          them; decimals take a unit (140.4GiB)\n"},
    [KVS_DEPLOY_FREE_BEFORE_LOAD] =
        {.id = KVS_DEPLOY_FREE_BEFORE_LOAD,
         .name = "--free-before-load",
         .kind = KVS_DEPLOY_SIZE,
         .zero = ABOVE_ZERO,
         .value_at = AT(free_before_load),
         .help =
             "  --free-before-load BYTES  with --engine sglang: every GPU's free memory before\n"
             "                          the weights load, P of SGLang's rule (default: measured,\n"
             "                          else the GPU's memory less 2.5 GiB of context)\n"},
    [KVS_DEPLOY_HOST_CACHE] =
        {.id = KVS_DEPLOY_HOST_CACHE,
         .name = "--host-cache",
         .kind = KVS_DEPLOY_SIZE,
         .zero = "%s needs a size above 0, got '%s' (leave the flag out for no host tier)",
         .value_at = AT(host_cache),
         .help = "  --host-cache BYTES      the prefix cache's host tier: BYTES of each machine's\n"
                 "                          memory (at most all of it) for pages evicted from its\n"
                 "                          GPUs\n"},
    [KVS_DEPLOY_DISK_CACHE] =
        {.id = KVS_DEPLOY_DISK_CACHE,
         .name = "--disk-cache",
         .kind = KVS_DEPLOY_SIZE,
         .zero = "%s needs a size above 0, got '%s' (leave the flag out for no disk tier)",
         .value_at = AT(disk_cache),
         .help = "  --disk-cache BYTES      the prefix cache's disk tier: BYTES of each machine's\n"
                 "                          disk for cached pages, written through as they are\n"
                 "                          cached and found again after a restart\n"},
};

void kvs_deploy_flags_init(kvs_deploy_flags *f) {
  memset(f, 0, sizeof *f);
  f->mem_fraction = KVS_DEFAULT_MEMORY_RATIO;
  f->reserve = KVS_DEFAULT_RESERVE_BYTES;
}

/* "--name" of "--name=value": whether `word` names `name` whole. */
static bool is_named(const char *word, const char *name) {
  size_t len = strcspn(word, "=");
  return name != NULL && strlen(name) == len && strncmp(word, name, len) == 0;
}

const kvs_deploy_flag *kvs_deploy_flag_find(kvs_deploy_set set, const char *name) {
  for (size_t i = 0; name != NULL && i < KVS_DEPLOY_FLAG_COUNT; i++) {
    const kvs_deploy_flag *f = &kvs_deploy_flags_table[i];
    if ((set & KVS_DEPLOY_BIT(f->id)) && (is_named(name, f->name) || is_named(name, f->alias)))
      return f;
  }
  return NULL;
}

/* One byte count of a size flag, by the one rule every size flag follows:
 * the bytes (kvs_parse_bytes); 0 refused where it would mean nothing, else
 * taken for what it means (no reserve, no weights); and a bare number from
 * 1 byte to under 1 MiB refused asking what was meant ("--weights-total
 * 149" is far likelier 149 GiB than 149 bytes, which would count no
 * weights; "149B" says bytes). Bare counts of 1 MiB or more are bytes. */
kvs_status kvs_deploy_size_parse(const kvs_deploy_flag *f, const char *said, const char *text,
                                 uint64_t *out, kvs_error *err) {
  uint64_t value;
  kvs_status status = kvs_parse_bytes(said, text, &value, err);
  if (status != KVS_OK) return status;
  if (value == 0 && f->zero != NULL) return kvs_error_set(err, KVS_ERR_PARSE, f->zero, said, text);
  if (value > 0 && value < KVS_MIN_UNITLESS_MEMORY && strspn(text, "0123456789") == strlen(text)) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "%s %s is %s bytes, under 1 MiB: did you mean %sGiB? (write %sB for "
                         "bytes)",
                         said, text, text, text, text);
  }
  *out = value;
  return KVS_OK;
}

/* kvs_parse_list's item: one entry of a SIZES flag. */
typedef struct size_item {
  const kvs_deploy_flag *flag;
  uint64_t *values;
} size_item;

static kvs_status one_size(const char *said, const char *item, size_t index, void *ctx,
                           kvs_error *err) {
  const size_item *s = ctx;
  return kvs_deploy_size_parse(s->flag, said, item, &s->values[index], err);
}

/* A number of a COUNT or SHARE flag within its bounds, or the one
 * refusal "<flag> needs <want>, got '<value>'". */
static kvs_status parse_number(const kvs_deploy_flag *f, const char *said, const char *text,
                               void *out, kvs_error *err) {
  if (f->kind == KVS_DEPLOY_COUNT) {
    return kvs_parse_u64_in(said, text, (uint64_t)f->lo, (uint64_t)f->hi, f->want, out, err);
  }
  double value;
  if (kvs_parse_double(said, text, &value, NULL) != KVS_OK || !(value > f->lo && value <= f->hi)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs %s, got '%s'", said, f->want, text);
  }
  *(double *)out = value;
  return KVS_OK;
}

/* The value by the entry's kind into *out (count_out for a list). */
static kvs_status parse_value(const kvs_deploy_flag *f, const char *said, const char *text,
                              char *out, size_t *count_out, kvs_error *err) {
  switch (f->kind) {
    case KVS_DEPLOY_SWITCH:
      *(bool *)out = true;
      return KVS_OK;
    case KVS_DEPLOY_TEXT:
      if (text[0] == '\0') {
        return kvs_error_set(err, KVS_ERR_PARSE, "%s needs %s, got ''", said, f->want);
      }
      *(const char **)out = text;
      return KVS_OK;
    case KVS_DEPLOY_COUNT:
    case KVS_DEPLOY_SHARE:
      return parse_number(f, said, text, out, err);
    case KVS_DEPLOY_SIZE:
      return kvs_deploy_size_parse(f, said, text, (uint64_t *)out, err);
    case KVS_DEPLOY_SIZES: {
      size_item item = {f, (uint64_t *)out};
      return kvs_parse_list(said, text, KVS_KVPLAN_MAX_GPUS, count_out, err, one_size, &item);
    }
  }
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: no such kind of flag", said);
}

kvs_status kvs_deploy_flag_apply(kvs_deploy_flags *flags, const kvs_deploy_flag *f,
                                 const char *said, const char *value, kvs_error *err) {
  if (flags == NULL || f == NULL || said == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_deploy_flag_apply: %s is NULL",
                         flags == NULL ? "flags"
                         : f == NULL   ? "flag"
                                       : "said");
  }
  if (flags->given[f->id]) {
    if (strcmp(flags->said[f->id], said) == 0) {
      return kvs_error_set(err, KVS_ERR_PARSE, "%s is given twice; give it once", said);
    }
    return kvs_error_set(err, KVS_ERR_PARSE, "%s and %s are one flag; give it once", f->alias,
                         f->name);
  }
  if (value == NULL && f->kind != KVS_DEPLOY_SWITCH) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs a value", said);
  }
  size_t count = 0;
  kvs_status status = parse_value(f, said, value, (char *)flags + f->value_at, &count, err);
  if (status != KVS_OK) return status;
  if (f->kind == KVS_DEPLOY_SIZES) *(size_t *)((char *)flags + f->count_at) = count;
  flags->given[f->id] = true;
  flags->said[f->id] = said;
  flags->text[f->id] = value;
  return KVS_OK;
}

/* names[0..n) joined for a sentence: "A", "A and B", "A, B and C". */
static size_t join(const char *const *names, size_t n, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && used < cap; i++) {
    const char *sep = i == 0 ? "" : i + 1 == n ? " and " : ", ";
    used += (size_t)snprintf(out + used, cap - used, "%s%s", sep, names[i]);
  }
  return used;
}

/* What to give instead of several of names[0..n) (and `extra`, a choice
 * in words, when not NULL): "--a or --b, not both" for two choices, else
 * "one of --a, --b and --c (or <extra>)". */
static kvs_status give_one(const char *const *names, size_t n, const char *extra, kvs_error *err) {
  if (n + (extra != NULL) == 2) {
    return kvs_error_set(err, KVS_ERR_PARSE, "give %s or %s, not both", names[0],
                         n == 2 ? names[1] : extra);
  }
  char list[160];
  join(names, n, list, sizeof list);
  return kvs_error_set(err, KVS_ERR_PARSE, "give one of %s%s%s%s", list,
                       extra != NULL ? " (or " : "", extra != NULL ? extra : "",
                       extra != NULL ? ")" : "");
}

/* One kind of weights: measured (--weights, per GPU), a total, or split
 * by kind (--expert-weights with --shared-weights, which come together). */
static kvs_status check_weights(const kvs_deploy_flags *f, kvs_deploy_set set, kvs_error *err) {
  bool expert = f->given[KVS_DEPLOY_EXPERT_WEIGHTS], shared = f->given[KVS_DEPLOY_SHARED_WEIGHTS];
  if (expert != shared) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs %s: the two kinds come together",
                         expert ? "--expert-weights" : "--shared-weights",
                         expert ? "--shared-weights" : "--expert-weights");
  }
  static const kvs_deploy_id kinds[] = {KVS_DEPLOY_WEIGHTS, KVS_DEPLOY_WEIGHTS_PER_GPU,
                                        KVS_DEPLOY_WEIGHTS_TOTAL};
  const char *names[3];
  size_t n = 0;
  int given = expert;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    if (set & KVS_DEPLOY_BIT(kinds[i])) names[n++] = kvs_deploy_flags_table[kinds[i]].name;
    given += f->given[kinds[i]];
  }
  if (given <= 1) return KVS_OK;
  bool split = set & KVS_DEPLOY_BIT(KVS_DEPLOY_EXPERT_WEIGHTS);
  return give_one(names, n, split ? "--expert-weights with --shared-weights" : NULL, err);
}

/* The flags that make a budget from measured memory, in the order the
 * refusal names the first given. */
static const kvs_deploy_id kMeasured[] = {KVS_DEPLOY_MEM_FRACTION,   KVS_DEPLOY_RESERVE,
                                          KVS_DEPLOY_WEIGHTS,        KVS_DEPLOY_WEIGHTS_PER_GPU,
                                          KVS_DEPLOY_GPU_MEMORY,     KVS_DEPLOY_WEIGHTS_TOTAL,
                                          KVS_DEPLOY_EXPERT_WEIGHTS, KVS_DEPLOY_FREE_BEFORE_LOAD};

kvs_status kvs_deploy_flags_check(const kvs_deploy_flags *f, kvs_deploy_set set,
                                  const char *own_budget, bool own_budget_given, kvs_error *err) {
  const char *budgets[3] = {"--budget", "--budget-per-gpu", own_budget};
  size_t n_budgets = own_budget != NULL ? 3 : 2;
  int explicit_budgets =
      f->given[KVS_DEPLOY_BUDGET] + f->given[KVS_DEPLOY_BUDGET_PER_GPU] + own_budget_given;
  if (explicit_budgets > 1) return give_one(budgets, n_budgets, NULL, err);
  kvs_status status = check_weights(f, set, err);
  if (status != KVS_OK) return status;
  for (size_t i = 0; explicit_budgets > 0 && i < sizeof kMeasured / sizeof kMeasured[0]; i++) {
    if (!f->given[kMeasured[i]]) continue;
    char list[128];
    join(budgets, n_budgets, list, sizeof list);
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "%s applies to measured memory; %s give the bytes themselves",
                         f->said[kMeasured[i]], list);
  }
  /* The memory flags against each other, before any machine is loaded. */
  return kvs_deploy_flags_check_gpus(f, set, NULL, 0, err);
}

void kvs_deploy_memory_inputs(const kvs_deploy_flags *f, kvs_deploy_set set,
                              kvs_memory_input out[KVS_MEMORY_INPUT_COUNT]) {
  /* Each input and the flags that give it, a one-value flag first: at
   * most one of each pair is given (kvs_deploy_flags_check). */
  static const struct {
    kvs_memory_input_id input;
    kvs_deploy_id one, list;
  } kFrom[] = {
      {KVS_MEMORY_GPU_MEMORY, KVS_DEPLOY_GPU_MEMORY, KVS_DEPLOY_FLAG_COUNT},
      {KVS_MEMORY_FREE_BEFORE_LOAD, KVS_DEPLOY_FREE_BEFORE_LOAD, KVS_DEPLOY_FLAG_COUNT},
      {KVS_MEMORY_BUDGET, KVS_DEPLOY_BUDGET, KVS_DEPLOY_BUDGET_PER_GPU},
      {KVS_MEMORY_RESERVE, KVS_DEPLOY_RESERVE, KVS_DEPLOY_FLAG_COUNT},
      {KVS_MEMORY_WEIGHTS, KVS_DEPLOY_WEIGHTS, KVS_DEPLOY_WEIGHTS_PER_GPU},
  };
  memset(out, 0, KVS_MEMORY_INPUT_COUNT * sizeof *out);
  for (size_t i = 0; i < sizeof kFrom / sizeof kFrom[0]; i++) {
    kvs_memory_input *in = &out[kFrom[i].input];
    kvs_deploy_id one = kFrom[i].one, list = kFrom[i].list;
    if ((set & KVS_DEPLOY_BIT(one)) && f->given[one]) {
      in->name = f->said[one];
      in->bytes = *(const uint64_t *)((const char *)f + kvs_deploy_flags_table[one].value_at);
    } else if (list != KVS_DEPLOY_FLAG_COUNT && (set & KVS_DEPLOY_BIT(list)) && f->given[list]) {
      const kvs_deploy_flag *t = &kvs_deploy_flags_table[list];
      in->name = f->said[list];
      in->per_gpu = (const uint64_t *)((const char *)f + t->value_at);
      in->n_per_gpu = *(const size_t *)((const char *)f + t->count_at);
    }
  }
}

kvs_status kvs_deploy_flags_check_gpus(const kvs_deploy_flags *f, kvs_deploy_set set,
                                       const kvs_gpu_info *gpus, size_t n_gpus, kvs_error *err) {
  kvs_memory_input in[KVS_MEMORY_INPUT_COUNT];
  kvs_deploy_memory_inputs(f, set, in);
  kvs_error inner;
  kvs_error_clear(&inner);
  if (kvs_memory_inputs_check(in, gpus, n_gpus, &inner) == KVS_OK) return KVS_OK;
  /* Bad usage, as every other combination of flags refused here. */
  return kvs_error_set(err, KVS_ERR_PARSE, "%s", inner.message);
}

void kvs_deploy_flags_help(FILE *out, kvs_deploy_set set) {
  for (size_t i = 0; i < KVS_DEPLOY_FLAG_COUNT; i++) {
    const kvs_deploy_flag *f = &kvs_deploy_flags_table[i];
    if ((set & KVS_DEPLOY_BIT(f->id)) && f->help != NULL) fputs(f->help, out);
  }
}

size_t kvs_deploy_flags_names(kvs_deploy_set set, const char **out, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; i < KVS_DEPLOY_FLAG_COUNT; i++) {
    const kvs_deploy_flag *f = &kvs_deploy_flags_table[i];
    if (!(set & KVS_DEPLOY_BIT(f->id))) continue;
    if (n < cap) out[n++] = f->name;
    if (f->alias != NULL && n < cap) out[n++] = f->alias;
  }
  return n;
}
