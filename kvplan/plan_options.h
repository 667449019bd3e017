/* The model and sizing flags `kvplan solve` and `kvplan plan` share:
 * which geometry, the window ratio and page, and the working-set floor
 * (given in pages, or derived from max_seq_len / max_running / radix). */
#ifndef KVS_KVPLAN_PLAN_OPTIONS_H
#define KVS_KVPLAN_PLAN_OPTIONS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "core/model_config.h"
#include "core/serving_defaults.h"
#include "core/sglang_pools.h"
#include "kvplan/deploy_flags.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_DEFAULT_MODEL "dsv4-flash"
/* --page at most: 2^20 tokens, the default longest sequence. */
#define KVS_MAX_PAGE_TOKENS (UINT64_C(1) << 20)
/* --mtp at most: speculative decoding drafts a few tokens, not a stack. */
#define KVS_MAX_MTP_LAYERS 16

typedef struct kvs_plan_options {
  const char *model; /* built-in name, model folder or config.json path */
  /* An explicit geometry instead of --model (all four or none). */
  bool explicit_geometry;
  uint64_t head_dim, index_head_dim, layers;
  uint32_t ratios[KVS_MAX_LAYERS];
  size_t n_ratios;
  bool have_head_dim, have_index_head_dim, have_layers, have_ratios;

  double swa_ratio;
  bool have_swa_ratio;
  double window_cache; /* --window-cache: share of the KV budget for window pages */
  bool have_window_cache;
  uint64_t page;
  bool have_page;
  uint64_t scratch;
  kvs_kv_dtype kv_dtype;       /* --kv-dtype, bf16 by default */
  kvs_state_rings state_rings; /* --state-rings, per-request by default */
  uint64_t mtp;                /* --mtp: speculative draft layers, 0 by default */
  bool engine_sglang;          /* --engine sglang: SGLang's pools beside the plan */
  bool have_floor_pages;
  uint64_t floor_pages;
  bool have_floor_inputs; /* any of --max-seq-len/--max-running/--radix given */
  uint64_t max_seq_len;
  bool have_max_seq_len;
  uint64_t max_running;
  bool have_max_running;
  bool radix;
  bool have_radix; /* --radix or --no-radix given */
} kvs_plan_options;

void kvs_plan_options_init(kvs_plan_options *options);

/* getopt_long entries for the shared flags; ids are >= 1000. */
extern const struct option kvs_plan_long_options[];
extern const size_t kvs_plan_long_options_count;
/* One-line-per-flag help text for the shared flags. */
extern const char kvs_plan_options_help[];

/* Applies one parsed shared flag (id from kvs_plan_long_options). Returns
 * KVS_ERR_NOT_FOUND when id is not a shared flag. */
kvs_status kvs_plan_options_apply(kvs_plan_options *options, int id, const char *value,
                                  kvs_error *err);

/* A subcommand's own flag handler: applies flag `id` (from its own table)
 * with `value`, or fills err and returns its status. */
typedef kvs_status (*kvs_own_flag_fn)(void *ctx, int id, const char *value, kvs_error *err);

/* One subcommand's flags: its own (ids below 1000), the deployment flags
 * it takes from the one table (kvplan/deploy_flags.h) and the shared model
 * and sizing flags above. */
typedef struct kvs_plan_parser {
  const char *tool; /* "kvplan plan", for its messages */
  const struct option *own;
  size_t n_own;
  kvs_own_flag_fn own_flag;
  void *ctx;
  kvs_deploy_set deploy_set; /* the deployment flags it takes */
  kvs_deploy_flags *deploy;  /* where they go */
  kvs_plan_options *options; /* where the shared ones go */
  void (*usage)(FILE *out);
} kvs_plan_parser;

/* The one parse loop of kvplan's subcommands: getopt_long over argv with
 * the parser's flags and --help. Each own flag goes to own_flag, each
 * deployment flag into *deploy (kvs_deploy_flag_apply), each shared one
 * into *options. Missing values, unknown flags, bad values and stray
 * arguments are reported on stderr as "<tool>: ..." (with usage for an
 * unknown flag). Returns 0 when parsed, -1 when --help printed the usage
 * on stdout, 2 on bad usage. Re-entrant across calls (getopt is reset). */
int kvs_plan_options_parse(const kvs_plan_parser *parser, int argc, char **argv);

/* What the options describe, resolved. */
typedef struct kvs_plan_model {
  const char *name;        /* a printable label */
  bool have_config;        /* false for an explicit geometry (no config fields) */
  kvs_model_config config; /* the model as loaded: its main layers */
  kvs_geometry geometry;   /* what is planned: the main layers, then --mtp draft layers */
  kvs_row_widths widths;   /* for --kv-dtype and --state-rings (max_running + 1 slots) */
  uint64_t floor_pages;    /* the window working-set floor (+ --window-cache's pages) */
  double swa_ratio;        /* the window ratio sized with: --swa-ratio, 0 with --window-cache */
  bool prefix_cache;       /* planned for a node with a prefix cache: tail states priced */
} kvs_plan_model;

/* Resolves the options into *out. Flags that contradict each other (a
 * model and an explicit geometry, a floor and its inputs) are refused, as
 * are --kv-dtype fp8, --mtp and --engine sglang on an explicit geometry
 * (they need config fields it does not give). */
kvs_status kvs_plan_options_resolve(const kvs_plan_options *options, kvs_plan_model *out,
                                    kvs_error *err);

/* --window-cache F: the window tier sized from the working-set floor plus
 * a stated share of the KV budget rather than a share of the history:
 * floor + floor(F x budget / bytes of one window page of the whole stack)
 * pages, and swa ratio 0. budget is the device's (the smallest where
 * several); without --window-cache nothing changes. Returns the extra
 * pages (0 without). */
uint64_t kvs_plan_model_window_cache(kvs_plan_model *model, const kvs_plan_options *options,
                                     uint64_t budget);

/* Places the model's rings: per page, or per request with one slot per
 * running request plus the dummy. */
void kvs_plan_model_place_rings(kvs_plan_model *model, kvs_state_rings rings, uint64_t max_running);

/* The "model ..." line every kvplan table starts with: layers by kind,
 * MTP layers, widths and the row layout. */
void kvs_plan_model_print(FILE *out, const kvs_plan_model *model, const kvs_plan_options *options);

/* kvs_cost_solve's options for the resolved model: the window ratio and
 * the floor as resolved (--swa-ratio or --window-cache, --floor-pages or
 * derived), the page, scratch rows, request shape, row layout and ring
 * placement as given. */
kvs_solve_options kvs_plan_options_solve(const kvs_plan_options *options,
                                         const kvs_plan_model *model);

/* SGLang's server flags from the options: --swa-ratio (else SGLang's 0.1),
 * --page (else its 256), --mtp > 0 as speculative decoding, --max-running
 * (else the 256 its DSV4 launch sets). */
kvs_sglang_options kvs_plan_options_sglang(const kvs_plan_options *options);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_PLAN_OPTIONS_H */
