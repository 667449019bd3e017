/* A node from kvplan's flags (kvs_node_create_flags): the model and sizing
 * flags read by kvplan's own parsers (plan_options), the deployment flags
 * by the one table every tool reads them with (deploy_flags), so a value
 * kvplan refuses is refused here with the same words, and the same flags
 * plan the same pool; then the node's own flags. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplan/args.h"
#include "kvplan/deploy_flags.h"
#include "kvplan/plan_options.h"
#include "shard/node.h"

/* The deployment flags a node takes: where it runs, its layout, its
 * budget and its host tier (not the weights kvplan estimates, the GPUs'
 * memory or SGLang's rule: a node measures them). */
#define NODE_DEPLOY_FLAGS                                                                \
  (KVS_DEPLOY_BIT(KVS_DEPLOY_TOPOLOGY) | KVS_DEPLOY_BIT(KVS_DEPLOY_NODES) |              \
   KVS_DEPLOY_BIT(KVS_DEPLOY_ALLOW_CROSS_NODE_TP) | KVS_DEPLOY_BIT(KVS_DEPLOY_TP) |      \
   KVS_DEPLOY_BIT(KVS_DEPLOY_PP) | KVS_DEPLOY_BIT(KVS_DEPLOY_BUDGET) |                   \
   KVS_DEPLOY_BIT(KVS_DEPLOY_BUDGET_PER_GPU) | KVS_DEPLOY_BIT(KVS_DEPLOY_MEM_FRACTION) | \
   KVS_DEPLOY_BIT(KVS_DEPLOY_RESERVE) | KVS_DEPLOY_BIT(KVS_DEPLOY_WEIGHTS) |             \
   KVS_DEPLOY_BIT(KVS_DEPLOY_WEIGHTS_PER_GPU) | KVS_DEPLOY_BIT(KVS_DEPLOY_HOST_CACHE) |  \
   KVS_DEPLOY_BIT(KVS_DEPLOY_DISK_CACHE))

enum {
  F_DEVICE = 1,
  F_CUDA_DEVICE,
  F_STREAM,
  F_STEP_BACKEND,
  F_CUDA_GRAPHS,
  F_NO_CUDA_GRAPHS,
  F_CHECK_EVERY,
  F_CHECK_INTEGRITY,
  F_NO_CHECK_INTEGRITY,
  F_DIGEST_STEPS,
  F_PREFIX_CACHE,
  F_MAX_BATCH,
  F_STEP_CAPACITY,
  F_BIND_NUMA,
  F_NO_BIND_NUMA,
  F_LOCAL_RANK,
  F_HOST_INDEX,
  F_HOST,
  F_NO_STREAM,
  F_CARRY_BATCH,
  F_MAX_PAYLOAD_BYTES,
  F_EXPLICIT_RELEASE,
  F_DISK_PATH,
  F_DISK_MODEL
};

typedef struct node_flag {
  const char *name;
  bool takes_value;
  int id;
} node_flag;

static const node_flag kNodeFlags[] = {
    {"device", true, F_DEVICE},
    {"cuda-device", true, F_CUDA_DEVICE},
    {"stream", true, F_STREAM},
    {"no-stream", false, F_NO_STREAM},
    {"step-backend", true, F_STEP_BACKEND},
    {"cuda-graphs", false, F_CUDA_GRAPHS},
    {"no-cuda-graphs", false, F_NO_CUDA_GRAPHS},
    {"check-every", true, F_CHECK_EVERY},
    {"check-integrity", false, F_CHECK_INTEGRITY},
    {"no-check-integrity", false, F_NO_CHECK_INTEGRITY},
    {"digest-steps", false, F_DIGEST_STEPS},
    {"prefix-cache", false, F_PREFIX_CACHE},
    {"max-batch", true, F_MAX_BATCH},
    {"step-capacity", true, F_STEP_CAPACITY},
    {"bind-numa", false, F_BIND_NUMA},
    {"no-bind-numa", false, F_NO_BIND_NUMA},
    {"local-rank", true, F_LOCAL_RANK},
    {"host-index", true, F_HOST_INDEX},
    {"host", true, F_HOST},
    {"carry-batch", false, F_CARRY_BATCH},
    {"max-payload-bytes", true, F_MAX_PAYLOAD_BYTES},
    {"explicit-release", false, F_EXPLICIT_RELEASE},
    {"disk-path", true, F_DISK_PATH},
    {"disk-model", true, F_DISK_MODEL},
};
#define N_NODE_FLAGS (sizeof kNodeFlags / sizeof kNodeFlags[0])

/* kvplan's flags a node does not take, and why. */
static const struct {
  const char *name;
  const char *why;
} kPlanOnly[] = {
    {"window-cache", "sizes the window from the budget kvplan prices; a node takes --swa-ratio"},
    {"engine", "compares with an engine's pools in kvplan's report; a node sizes by its own rule"},
    {"weights-total",
     "estimates weights not yet loaded; a node takes the weights the engine "
     "measured (--weights or --weights-per-gpu)"},
    {"json", "is how kvplan prints; a node prints nothing"},
    {"svg", "is how kvplan draws; a node draws nothing"},
};

static const char kNodeFlagsHead[] =
    "kvshard node flags (kvs_node_create_flags), each one string: --name=value, or\n"
    "--name for a switch. The model and sizing flags are kvplan's:\n";

static const char kNodeFlagsOwn[] =
    "  (tp x pp is the communicator's ranks, 1 x 1 by default; on a live GPU --weights\n"
    "  is what the engine loaded, measured before create)\n"
    "The node's own:\n"
    "  --device cpu|cuda|auto  where the tables live (default auto)\n"
    "  --cuda-device N         the CUDA device (default: the plan's GPU)\n"
    "  --stream ADDRESS        the engine's cudaStream_t, as an integer (default 0: the\n"
    "                          legacy default stream, torch's default stream)\n"
    "  --no-stream             no engine stream: the engine orders itself by the\n"
    "                          step's event\n"
    "  --step-backend nccl     the node's own NCCL communicator for its steps\n"
    "  --cuda-graphs | --no-cuda-graphs  capture each step parity once (default on)\n"
    "  --check-every N         steps between digest checks (default 64; 0: on demand)\n"
    "  --check-integrity | --no-check-integrity  checks also check the pool (default on)\n"
    "  --digest-steps          each step hashes its ring contexts\n"
    "  --prefix-cache          keep a prefix cache (kvs_node_prefix_*; default off); a\n"
    "                          --host-cache tier needs it\n"
    "  --max-batch N           rows a step's batch may have (default: max running)\n"
    "  --step-capacity N       journal entries per step (default: from the chunk budget)\n"
    "  --carry-batch           steps carry the leader's batch: followers pass none\n"
    "  --max-payload-bytes N   engine bytes a step carries from the leader (default 0,\n"
    "                          at most 16777216)\n"
    "  --explicit-release      the engine releases each step's results (kvs_node_release)\n"
    "  --disk-path DIR         the --disk-cache tier's folder (rank r: DIR/rank-r)\n"
    "  --disk-model NAME       the name the disk tier's blocks are signed with (default:\n"
    "                          --model's value); a block of another name is refused\n"
    "  --bind-numa | --no-bind-numa  bind the calling thread to its GPU's CPUs\n"
    "  --local-rank N --host-index N --host NAME  this rank's place among the hosts\n";

static char help_text[16384];
static pthread_once_t help_once = PTHREAD_ONCE_INIT;

static void make_help(void) {
  FILE *out = fmemopen(help_text, sizeof help_text, "w");
  if (out == NULL) return; /* an empty help rather than none */
  fputs(kNodeFlagsHead, out);
  fputs(kvs_plan_options_help, out);
  kvs_deploy_flags_help(out, NODE_DEPLOY_FLAGS);
  fputs(kNodeFlagsOwn, out);
  fclose(out);
}

const char *kvs_node_flags_help(void) {
  pthread_once(&help_once, make_help);
  return help_text;
}

/* What the flags said, and the storage the options point into while the
 * node is created. */
typedef struct parsed {
  kvs_plan_options plan;
  kvs_deploy_flags deploy;
  kvs_node_options node;
  kvs_flags_seen seen;
  char seen_names[KVS_FLAGS_SEEN_MAX][72]; /* what seen points at */
  char host[256];
  char step_backend[16];
  char disk_path[4096];
  char disk_model[256];
  kvs_plan_model model;
} parsed;

static kvs_status copy_text(const char *flag, const char *value, char *out, size_t cap,
                            kvs_error *err) {
  if (strlen(value) >= cap) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s is %zu characters, at most %zu", flag,
                         strlen(value), cap - 1);
  }
  memcpy(out, value, strlen(value) + 1);
  return KVS_OK;
}

static kvs_status parse_int(const char *flag, const char *value, uint64_t hi, int *out,
                            kvs_error *err) {
  uint64_t v;
  kvs_status status = kvs_parse_u64(flag, value, &v, err);
  if (status != KVS_OK) return status;
  if (v > hi) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s is at most %llu, got %s", flag,
                         (unsigned long long)hi, value);
  }
  *out = (int)v;
  return KVS_OK;
}

/* Where the tables live and how the steps run. */
static kvs_status apply_device(parsed *p, int id, const char *value, kvs_error *err) {
  kvs_node_options *o = &p->node;
  uint64_t v = 0;
  kvs_status status;
  switch (id) {
    case F_DEVICE:
      if (strcmp(value, "cpu") == 0)
        o->device = KVS_NODE_DEVICE_CPU;
      else if (strcmp(value, "cuda") == 0)
        o->device = KVS_NODE_DEVICE_CUDA;
      else if (strcmp(value, "auto") == 0)
        o->device = KVS_NODE_DEVICE_AUTO;
      else {
        return kvs_error_set(err, KVS_ERR_PARSE, "--device must be cpu, cuda or auto, got '%s'",
                             value);
      }
      return KVS_OK;
    case F_CUDA_DEVICE:
      return parse_int("--cuda-device", value, 1023, &o->cuda_device, err);
    case F_STREAM:
      /* An address: decimal, as Python's int() of a stream handle gives it. */
      status = kvs_parse_u64("--stream", value, &v, err);
      if (status == KVS_OK) o->stream = (void *)(uintptr_t)v;
      return status;
    case F_NO_STREAM:
      o->no_stream = true;
      return KVS_OK;
    case F_STEP_BACKEND:
      if (strcmp(value, "nccl") != 0) {
        return kvs_error_set(err, KVS_ERR_PARSE,
                             "--step-backend names the node's own communicator: only 'nccl', "
                             "got '%s'",
                             value);
      }
      o->step_backend = p->step_backend;
      return copy_text("--step-backend", value, p->step_backend, sizeof p->step_backend, err);
    case F_CUDA_GRAPHS:
    case F_NO_CUDA_GRAPHS:
      o->cuda_graphs = id == F_CUDA_GRAPHS;
      return KVS_OK;
    default:
      return KVS_ERR_NOT_FOUND;
  }
}

/* Checks, steps, binding and the rank's place. */
static kvs_status apply_runtime(parsed *p, int id, const char *value, kvs_error *err) {
  kvs_node_options *o = &p->node;
  uint64_t v = 0;
  kvs_status status = KVS_OK;
  switch (id) {
    case F_CHECK_EVERY:
      return kvs_parse_u64("--check-every", value, &o->check_every, err);
    case F_CHECK_INTEGRITY:
    case F_NO_CHECK_INTEGRITY:
      o->check_integrity = id == F_CHECK_INTEGRITY;
      return KVS_OK;
    case F_DIGEST_STEPS:
      o->digest_steps = true;
      return KVS_OK;
    case F_PREFIX_CACHE:
      o->prefix_cache = true;
      return KVS_OK;
    case F_MAX_BATCH:
    case F_STEP_CAPACITY:
      status = kvs_parse_u64_in(id == F_MAX_BATCH ? "--max-batch" : "--step-capacity", value, 1,
                                UINT64_C(1) << 32, "a count in [1, 2^32]", &v, err);
      if (status == KVS_OK) *(id == F_MAX_BATCH ? &o->max_batch : &o->step_capacity) = (size_t)v;
      return status;
    case F_BIND_NUMA:
    case F_NO_BIND_NUMA:
      o->bind_numa = id == F_BIND_NUMA;
      return KVS_OK;
    case F_CARRY_BATCH:
      o->carry_batch = true;
      return KVS_OK;
    case F_EXPLICIT_RELEASE:
      o->explicit_release = true;
      return KVS_OK;
    case F_MAX_PAYLOAD_BYTES:
      status = kvs_parse_u64_in("--max-payload-bytes", value, 0, KVS_NODE_MAX_PAYLOAD_BYTES,
                                "a count of bytes in [0, 16777216]", &v, err);
      if (status == KVS_OK) o->max_payload_bytes = (size_t)v;
      return status;
    case F_LOCAL_RANK:
      return parse_int("--local-rank", value, 65535, &o->local_rank, err);
    case F_HOST_INDEX:
      return parse_int("--host-index", value, 65535, &o->host_index, err);
    case F_HOST:
      o->host = p->host;
      return copy_text("--host", value, p->host, sizeof p->host, err);
    case F_DISK_PATH:
      o->disk_path = p->disk_path;
      return copy_text("--disk-path", value, p->disk_path, sizeof p->disk_path, err);
    case F_DISK_MODEL:
      o->model_name = p->disk_model;
      return copy_text("--disk-model", value, p->disk_model, sizeof p->disk_model, err);
    default:
      return KVS_ERR_NOT_FOUND;
  }
}

/* Every name a flag may have, for the nearest-name hint. */
static size_t all_names(const char **names, size_t cap) {
  size_t n = kvs_deploy_flags_names(NODE_DEPLOY_FLAGS, names, cap);
  for (size_t i = 0; i < n; i++) names[i] += 2; /* the table's "--name": the bare name */
  for (size_t i = 0; i < kvs_plan_long_options_count && n < cap; i++) {
    names[n++] = kvs_plan_long_options[i].name;
  }
  for (size_t i = 0; i < N_NODE_FLAGS && n < cap; i++) names[n++] = kNodeFlags[i].name;
  return n;
}

/* kvplan's report-only flags, refused naming why (some are shared flags
 * kvplan's parser would take). */
static kvs_status plan_only(const char *name, kvs_error *err) {
  for (size_t i = 0; i < sizeof kPlanOnly / sizeof kPlanOnly[0]; i++) {
    if (strcmp(name, kPlanOnly[i].name) == 0) {
      return kvs_error_set(err, KVS_ERR_PARSE, "--%s is kvplan's, not a node's: it %s",
                           kPlanOnly[i].name, kPlanOnly[i].why);
    }
  }
  return KVS_OK;
}

static kvs_status unknown_flag(const char *given, kvs_error *err) {
  const char *names[96];
  size_t n = all_names(names, sizeof names / sizeof names[0]);
  const char *near = kvs_nearest_flag(given, names, n);
  return kvs_error_set(
      err, KVS_ERR_PARSE, "unknown flag '%s'%s%s%s (kvs_node_flags_help lists them)", given,
      near != NULL ? "; did you mean --" : "", near != NULL ? near : "", near != NULL ? "?" : "");
}

/* One flag string: "--name=value" or "--name". */
static kvs_status apply_one(parsed *p, const char *flag, kvs_error *err) {
  if (flag == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "a flag is NULL");
  if (strncmp(flag, "--", 2) != 0 || flag[2] == '\0' || flag[2] == '=') {
    return kvs_error_set(err, KVS_ERR_PARSE, "'%s' is not a flag: flags read --name=value", flag);
  }
  const char *eq = strchr(flag, '=');
  size_t len = eq != NULL ? (size_t)(eq - flag - 2) : strlen(flag + 2);
  const char *value = eq != NULL ? eq + 1 : NULL;
  char name[64];
  if (len >= sizeof name) return unknown_flag(flag, err);
  memcpy(name, flag + 2, len);
  name[len] = '\0';
  kvs_status status = plan_only(name, err);
  if (status != KVS_OK) return status;
  int shared_id = -1, own_id = -1;
  bool takes_value = false;
  for (size_t i = 0; i < kvs_plan_long_options_count; i++) {
    if (strcmp(kvs_plan_long_options[i].name, name) == 0) {
      shared_id = kvs_plan_long_options[i].val;
      takes_value = kvs_plan_long_options[i].has_arg == required_argument;
    }
  }
  for (size_t i = 0; i < N_NODE_FLAGS; i++) {
    if (strcmp(kNodeFlags[i].name, name) == 0) {
      own_id = kNodeFlags[i].id;
      takes_value = kNodeFlags[i].takes_value;
    }
  }
  const kvs_deploy_flag *deploy = kvs_deploy_flag_find(NODE_DEPLOY_FLAGS, flag);
  if (deploy != NULL) takes_value = deploy->kind != KVS_DEPLOY_SWITCH;
  if (shared_id < 0 && own_id < 0 && deploy == NULL) return unknown_flag(flag, err);
  /* Once each; a switch and its --no- form are one choice. */
  char *once = p->seen_names[p->seen.n < KVS_FLAGS_SEEN_MAX ? p->seen.n : 0];
  bool negated = own_id >= 0 && strncmp(name, "no-", 3) == 0;
  snprintf(once, sizeof p->seen_names[0], "--%s", negated ? name + 3 : name);
  status = kvs_flag_once(&p->seen, once, err);
  if (status != KVS_OK) return status;
  if (takes_value && value == NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE, "--%s needs a value: --%s=VALUE", name, name);
  }
  if (!takes_value && value != NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE, "--%s is a switch and takes no value, got '%s'", name,
                         value);
  }
  if (shared_id >= 0) return kvs_plan_options_apply(&p->plan, shared_id, value, err);
  if (deploy != NULL) {
    bool alias = deploy->alias != NULL && strcmp(name, deploy->alias + 2) == 0;
    return kvs_deploy_flag_apply(&p->deploy, deploy, alias ? deploy->alias : deploy->name, value,
                                 err);
  }
  if ((status = apply_device(p, own_id, value, err)) != KVS_ERR_NOT_FOUND) return status;
  return apply_runtime(p, own_id, value, err);
}

/* The deployment flags given, into the node's options (the rest keep
 * kvs_node_options_init's defaults). */
static void apply_deploy(parsed *p) {
  const kvs_deploy_flags *d = &p->deploy;
  kvs_node_options *o = &p->node;
  if (d->given[KVS_DEPLOY_TOPOLOGY]) o->topology = d->topology;
  if (d->given[KVS_DEPLOY_NODES]) o->hosts = (size_t)d->nodes;
  if (d->given[KVS_DEPLOY_ALLOW_CROSS_NODE_TP]) o->allow_cross_host_tp = true;
  if (d->given[KVS_DEPLOY_TP]) o->tp = (int)d->tp;
  if (d->given[KVS_DEPLOY_PP]) o->pp = (int)d->pp;
  if (d->given[KVS_DEPLOY_BUDGET]) o->budget_bytes = d->budget;
  if (d->given[KVS_DEPLOY_BUDGET_PER_GPU]) {
    o->budget_per_gpu = d->budgets;
    o->n_budget_per_gpu = d->n_budgets;
  }
  if (d->given[KVS_DEPLOY_MEM_FRACTION]) o->memory_ratio = d->mem_fraction;
  if (d->given[KVS_DEPLOY_RESERVE]) o->reserve_bytes = d->reserve;
  if (d->given[KVS_DEPLOY_WEIGHTS]) o->weights_bytes = d->weights;
  if (d->given[KVS_DEPLOY_WEIGHTS_PER_GPU]) {
    o->weights_per_gpu = d->weights_list;
    o->n_weights_per_gpu = d->n_weights;
  }
  if (d->given[KVS_DEPLOY_HOST_CACHE]) o->host_cache_bytes = d->host_cache;
  if (d->given[KVS_DEPLOY_DISK_CACHE]) o->disk_cache_bytes = d->disk_cache;
}

/* kvplan's combinations refused as kvplan refuses them, then the model
 * resolved as kvplan resolves it. */
static kvs_status resolve(parsed *p, kvs_error *err) {
  kvs_node_options *o = &p->node;
  if (kvs_deploy_flags_check(&p->deploy, NODE_DEPLOY_FLAGS, NULL, false, err) != KVS_OK) {
    return KVS_ERR_PARSE;
  }
  apply_deploy(p);
  /* The disk tier's own flags without the tier would do nothing: kvsim's
   * words for them. */
  if (o->disk_cache_bytes == 0 && (o->disk_path != NULL || o->model_name != NULL)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s: give --disk-cache too",
                         o->disk_path != NULL
                             ? "--disk-path is the disk tier's folder"
                             : "--disk-model names what the disk tier's blocks are signed with");
  }
  kvs_status status = kvs_plan_options_resolve(&p->plan, &p->model, err);
  if (status != KVS_OK) return status;
  const kvs_plan_options *po = &p->plan;
  o->geometry = &p->model.geometry;
  o->kv_dtype = po->kv_dtype;
  if (p->model.have_config) o->qk_rope_head_dim = p->model.config.qk_rope_head_dim;
  o->state_rings = po->state_rings;
  o->swa_ratio = p->model.swa_ratio;
  o->page = po->page;
  o->max_seq_len = po->max_seq_len;
  o->max_running = po->max_running;
  o->radix = po->radix;
  o->floor_win_pages = p->model.floor_pages;
  o->n_scratch = po->scratch;
  /* The disk tier's blocks are signed with the model's name unless the
   * engine names its weights itself. */
  if (o->model_name == NULL) o->model_name = po->model != NULL ? po->model : "dsv4-flash";
  return KVS_OK;
}

kvs_status kvs_node_create_flags(kvs_comm_t comm, const char *const *flags, size_t n,
                                 kvs_node_t *out, kvs_error *err) {
  if (comm == NULL || out == NULL || (flags == NULL && n > 0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_node_create_flags: %s is NULL",
                         comm == NULL  ? "comm"
                         : out == NULL ? "out"
                                       : "flags");
  }
  parsed *p = calloc(1, sizeof *p);
  if (p == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to read the flags");
  kvs_plan_options_init(&p->plan);
  kvs_deploy_flags_init(&p->deploy);
  kvs_node_options_init(&p->node);
  kvs_status status = KVS_OK;
  for (size_t i = 0; i < n && status == KVS_OK; i++) status = apply_one(p, flags[i], err);
  if (status == KVS_OK) status = resolve(p, err);
  if (status == KVS_OK) status = kvs_node_create(comm, &p->node, out, err);
  /* The node keeps nothing the options point at (node.h). */
  free(p);
  return status;
}
