#include "kvplan/plan_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplan/args.h"
#include "kvplan/tool_io.h"

enum {
  OPT_MODEL = 1000,
  OPT_HEAD_DIM,
  OPT_INDEX_HEAD_DIM,
  OPT_LAYERS,
  OPT_RATIOS,
  OPT_SWA_RATIO,
  OPT_PAGE,
  OPT_SCRATCH,
  OPT_FLOOR_PAGES,
  OPT_MAX_SEQ_LEN,
  OPT_MAX_RUNNING,
  OPT_RADIX,
  OPT_NO_RADIX,
  OPT_KV_DTYPE,
  OPT_MTP,
  OPT_ENGINE,
  OPT_STATE_RINGS,
  OPT_WINDOW_CACHE,
  OPT_HELP,
};

const struct option kvs_plan_long_options[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
    {"index-head-dim", required_argument, NULL, OPT_INDEX_HEAD_DIM},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"ratios", required_argument, NULL, OPT_RATIOS},
    {"swa-ratio", required_argument, NULL, OPT_SWA_RATIO},
    {"page", required_argument, NULL, OPT_PAGE},
    {"scratch", required_argument, NULL, OPT_SCRATCH},
    {"floor-pages", required_argument, NULL, OPT_FLOOR_PAGES},
    {"max-seq-len", required_argument, NULL, OPT_MAX_SEQ_LEN},
    {"max-running", required_argument, NULL, OPT_MAX_RUNNING},
    {"radix", no_argument, NULL, OPT_RADIX},
    {"no-radix", no_argument, NULL, OPT_NO_RADIX},
    {"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
    {"mtp", required_argument, NULL, OPT_MTP},
    {"engine", required_argument, NULL, OPT_ENGINE},
    {"state-rings", required_argument, NULL, OPT_STATE_RINGS},
    {"window-cache", required_argument, NULL, OPT_WINDOW_CACHE},
};
const size_t kvs_plan_long_options_count =
    sizeof kvs_plan_long_options / sizeof kvs_plan_long_options[0];

const char kvs_plan_options_help[] =
    "  --model NAME|DIR|FILE   built-in model (dsv4-flash, dsv4-pro), a model folder\n"
    "                          (config.json + safetensors) or a config.json\n"
    "                          (default " KVS_DEFAULT_MODEL
    ")\n"
    "  --head-dim N --index-head-dim N --layers N --ratios a,b,..\n"
    "                          an explicit geometry instead of --model (all four)\n"
    "  --swa-ratio F           window share of the history (default 0.125)\n"
    "  --window-cache F        instead: the window floor plus F of the KV budget as\n"
    "                          window pages (the radix window cache), F in [0, 1)\n"
    "  --page N                window page P in tokens, 1 to 1048576 (default 128)\n"
    "  --scratch N             scratch rows per compressed/indexer pool (default 1)\n"
    "  --floor-pages N         window working-set floor in pages, or derive it from:\n"
    "  --max-seq-len N         longest request in tokens: 1048576, 1M, 128K (default 1M)\n"
    "  --max-running N         concurrent requests (default 64)\n"
    "  --radix | --no-radix    radix prefix cache on (default) or off\n"
    "  --kv-dtype bf16|fp8     KV row layout (default bf16; fp8: 584-byte KV rows and\n"
    "                          132-byte indexer rows for DSV4, rings stay fp32)\n"
    "  --mtp N                 N speculative (MTP) draft layers on the last stage\n"
    "                          (default 0)\n"
    "  --state-rings MODE      where the compress-state rings live: per-request\n"
    "                          (default: one slot per running request + a dummy),\n"
    "                          hca-per-request, or per-page (the seed's layout)\n"
    "  --engine sglang         SGLang's pools beside the plan (its defaults: swa ratio\n"
    "                          0.1, page 256, 256 running); in plan and fit its own\n"
    "                          memory rule and --mem-fraction-static too\n";

void kvs_plan_options_init(kvs_plan_options *options) {
  memset(options, 0, sizeof *options);
  options->swa_ratio = KVS_DEFAULT_SWA_RATIO;
  options->page = KVS_DEFAULT_WINDOW_PAGE;
  options->scratch = KVS_DEFAULT_N_SCRATCH;
  options->max_seq_len = KVS_DEFAULT_MAX_SEQ_LEN;
  options->max_running = KVS_DEFAULT_MAX_RUNNING;
  options->radix = KVS_DEFAULT_RADIX;
  options->state_rings = KVS_STATE_RINGS_PER_REQUEST;
}

/* A count where zero means nothing (no requests, no sequence, no floor):
 * refused rather than planned around. */
static kvs_status parse_positive(const char *flag, const char *value, uint64_t *out,
                                 kvs_error *err) {
  uint64_t v;
  kvs_status status = kvs_parse_u64(flag, value, &v, err);
  if (status != KVS_OK) return status;
  if (v == 0) return kvs_error_set(err, KVS_ERR_PARSE, "%s must be at least 1, got 0", flag);
  *out = v;
  return KVS_OK;
}

/* The flags that name the geometry: a model, or all four explicit parts
 * (kvs_plan_options_resolve checks they are given together). */
static kvs_status apply_geometry(kvs_plan_options *o, int id, const char *value, kvs_error *err) {
  switch (id) {
    case OPT_MODEL:
      o->model = value;
      return KVS_OK;
    case OPT_HEAD_DIM:
      o->have_head_dim = true;
      return kvs_parse_u64("--head-dim", value, &o->head_dim, err);
    case OPT_INDEX_HEAD_DIM:
      o->have_index_head_dim = true;
      return kvs_parse_u64("--index-head-dim", value, &o->index_head_dim, err);
    case OPT_LAYERS:
      o->have_layers = true;
      return kvs_parse_u64("--layers", value, &o->layers, err);
    case OPT_RATIOS:
      o->have_ratios = true;
      return kvs_parse_u32_list("--ratios", value, o->ratios, KVS_MAX_LAYERS, &o->n_ratios, err);
    default:
      return KVS_ERR_NOT_FOUND;
  }
}

/* The flags that shape the window tier and its pages: a share of the
 * history (--swa-ratio) or of the budget (--window-cache), the page and the
 * scratch rows. A share outside its range is refused with the flag and
 * the value given. */
static kvs_status apply_window(kvs_plan_options *o, int id, const char *value, kvs_error *err) {
  kvs_status status;
  switch (id) {
    case OPT_SWA_RATIO:
      o->have_swa_ratio = true;
      status = kvs_parse_double("--swa-ratio", value, &o->swa_ratio, err);
      if (status == KVS_OK && !(o->swa_ratio >= 0.0 && o->swa_ratio <= 1.0)) {
        return kvs_error_set(err, KVS_ERR_PARSE,
                             "--swa-ratio is the window's share of the history, in [0, 1]; got %s",
                             value);
      }
      return status;
    case OPT_WINDOW_CACHE:
      o->have_window_cache = true;
      status = kvs_parse_double("--window-cache", value, &o->window_cache, err);
      if (status == KVS_OK && !(o->window_cache >= 0.0 && o->window_cache < 1.0)) {
        return kvs_error_set(err, KVS_ERR_PARSE,
                             "--window-cache is a share of the KV budget, in [0, 1); got %s",
                             value);
      }
      return status;
    case OPT_PAGE:
      o->have_page = true;
      /* A page is also the sliding window and the radix key: one past the
       * longest default sequence holds no request better, and a page of
       * 2^40 tokens prices a pool past any byte count. */
      return kvs_parse_u64_in("--page", value, 1, KVS_MAX_PAGE_TOKENS,
                              "a page of 1 to 1048576 tokens", &o->page, err);
    case OPT_SCRATCH:
      return kvs_parse_u64("--scratch", value, &o->scratch, err);
    default:
      return KVS_ERR_NOT_FOUND;
  }
}

/* The window floor: given directly (--floor-pages) or derived from the
 * requests' shape (the rest, which mark have_floor_inputs so that
 * kvs_plan_options_resolve can refuse the two together). */
static kvs_status apply_floor(kvs_plan_options *o, int id, const char *value, kvs_error *err) {
  switch (id) {
    case OPT_FLOOR_PAGES:
      o->have_floor_pages = true;
      return parse_positive("--floor-pages", value, &o->floor_pages, err);
    case OPT_MAX_SEQ_LEN: {
      /* A token count: "1M" and "128K" as well as plain digits. */
      o->have_floor_inputs = true;
      o->have_max_seq_len = true;
      kvs_status status = kvs_parse_tokens("--max-seq-len", value, &o->max_seq_len, err);
      if (status == KVS_OK && o->max_seq_len == 0) {
        return kvs_error_set(err, KVS_ERR_PARSE, "--max-seq-len must be at least 1, got 0");
      }
      return status;
    }
    case OPT_MAX_RUNNING:
      o->have_floor_inputs = true;
      o->have_max_running = true;
      return parse_positive("--max-running", value, &o->max_running, err);
    case OPT_RADIX:
    case OPT_NO_RADIX: /* one choice in two spellings, made once */
      if (o->have_radix) {
        return kvs_error_set(err, KVS_ERR_PARSE, "give --radix or --no-radix, once");
      }
      o->have_radix = true;
      o->have_floor_inputs = true;
      o->radix = id == OPT_RADIX;
      return KVS_OK;
    default:
      return KVS_ERR_NOT_FOUND;
  }
}

/* How the deployment stores and serves: the KV row type, draft layers, the
 * state rings' placement and the engine to compare with. */
static kvs_status apply_deployment(kvs_plan_options *o, int id, const char *value, kvs_error *err) {
  kvs_status status;
  switch (id) {
    case OPT_KV_DTYPE:
      status = kvs_kv_dtype_parse(value, &o->kv_dtype, err);
      if (status != KVS_OK) {
        return kvs_error_set(err, status, "--kv-dtype must be bf16 or fp8, got '%s'", value);
      }
      return KVS_OK;
    case OPT_MTP:
      status = kvs_parse_u64("--mtp", value, &o->mtp, err);
      if (status == KVS_OK && o->mtp > KVS_MAX_MTP_LAYERS) {
        return kvs_error_set(err, KVS_ERR_PARSE, "--mtp is at most %d draft layers, got %s",
                             KVS_MAX_MTP_LAYERS, value);
      }
      return status;
    case OPT_STATE_RINGS:
      return kvs_state_rings_parse(value, &o->state_rings, err) == KVS_OK
                 ? KVS_OK
                 : kvs_error_set(err, KVS_ERR_PARSE,
                                 "--state-rings must be per-request, hca-per-request or "
                                 "per-page, got '%s'",
                                 value);
    case OPT_ENGINE:
      if (strcmp(value, "sglang") != 0) {
        return kvs_error_set(err, KVS_ERR_PARSE,
                             "--engine names the engine to compare with: only 'sglang', got '%s'",
                             value);
      }
      o->engine_sglang = true;
      return KVS_OK;
    default:
      return KVS_ERR_NOT_FOUND;
  }
}

kvs_status kvs_plan_options_apply(kvs_plan_options *o, int id, const char *value, kvs_error *err) {
  switch (id) {
    case OPT_MODEL:
    case OPT_HEAD_DIM:
    case OPT_INDEX_HEAD_DIM:
    case OPT_LAYERS:
    case OPT_RATIOS:
      return apply_geometry(o, id, value, err);
    case OPT_SWA_RATIO:
    case OPT_WINDOW_CACHE:
    case OPT_PAGE:
    case OPT_SCRATCH:
      return apply_window(o, id, value, err);
    case OPT_FLOOR_PAGES:
    case OPT_MAX_SEQ_LEN:
    case OPT_MAX_RUNNING:
    case OPT_RADIX:
    case OPT_NO_RADIX:
      return apply_floor(o, id, value, err);
    case OPT_KV_DTYPE:
    case OPT_MTP:
    case OPT_STATE_RINGS:
    case OPT_ENGINE:
      return apply_deployment(o, id, value, err);
    default:
      return KVS_ERR_NOT_FOUND;
  }
}

kvs_solve_options kvs_plan_options_solve(const kvs_plan_options *o, const kvs_plan_model *m) {
  kvs_solve_options so = KVS_SOLVE_OPTIONS_INIT;
  so.swa_ratio = m->swa_ratio;
  so.page = o->page;
  so.n_scratch = o->scratch;
  so.max_seq_len = o->max_seq_len;
  so.max_running = o->max_running;
  so.radix = o->radix;
  so.floor_win_pages = m->floor_pages;
  so.kv_dtype = o->kv_dtype;
  so.qk_rope_head_dim = m->config.qk_rope_head_dim;
  so.state_rings = o->state_rings;
  return so;
}

kvs_sglang_options kvs_plan_options_sglang(const kvs_plan_options *o) {
  kvs_sglang_options s = KVS_SGLANG_OPTIONS_INIT;
  if (o->have_swa_ratio) s.swa_ratio = o->swa_ratio;
  if (o->have_page) s.page_size = o->page;
  s.speculative = o->mtp > 0;
  if (o->have_max_running) s.max_running = o->max_running;
  return s;
}

/* --head-dim, --index-head-dim, --layers and --ratios, all four, as the
 * geometry (out->config.geometry and out->geometry). */
static kvs_status resolve_explicit(const kvs_plan_options *o, int explicit_parts,
                                   kvs_plan_model *out, kvs_error *err) {
  if (o->model != NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "--model and --head-dim/--index-head-dim/--layers/--ratios describe "
                         "the geometry twice; give one or the other");
  }
  if (explicit_parts != 4) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "an explicit geometry needs all of --head-dim, --index-head-dim, "
                         "--layers and --ratios");
  }
  const char *needs = o->kv_dtype == KVS_KV_FP8 ? "--kv-dtype fp8 (qk_rope_head_dim)"
                      : o->mtp > 0              ? "--mtp (the MTP layers' ratio)"
                      : o->engine_sglang        ? "--engine sglang (qk_rope_head_dim, "
                                                  "sliding_window)"
                                                : NULL;
  if (needs != NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "%s needs a model config; an explicit geometry does not give it: use "
                         "--model",
                         needs);
  }
  /* A config lists a ratio past its last layer for draft layers; flags
   * cannot ask for draft layers (above), so an extra ratio would be
   * dropped without a word. */
  if (o->n_ratios > o->layers) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "--ratios lists %zu but --layers is %llu: give one ratio per layer",
                         o->n_ratios, (unsigned long long)o->layers);
  }
  kvs_geometry *g = &out->config.geometry;
  kvs_status status;
  if ((status = kvs_geometry_init(g, o->head_dim, o->index_head_dim, o->layers, o->ratios,
                                  o->n_ratios, err)) ||
      (status = kvs_geometry_check_every_layer_has_a_ratio(g, "--layers", "--ratios", err)) ||
      (status = kvs_geometry_validate(g, err))) {
    return status;
  }
  out->geometry = *g;
  out->name = "(explicit geometry)";
  return KVS_OK;
}

kvs_status kvs_plan_options_resolve(const kvs_plan_options *o, kvs_plan_model *out,
                                    kvs_error *err) {
  int explicit_parts = o->have_head_dim + o->have_index_head_dim + o->have_layers + o->have_ratios;
  kvs_status status;
  memset(out, 0, sizeof *out);
  if (explicit_parts > 0) {
    if ((status = resolve_explicit(o, explicit_parts, out, err)) != KVS_OK) return status;
  } else {
    const char *model = o->model != NULL ? o->model : KVS_DEFAULT_MODEL;
    if ((status = kvs_model_config_resolve(model, &out->config, err)) ||
        (status = kvs_model_config_planned_geometry(&out->config, o->mtp, &out->geometry, err))) {
      return status;
    }
    out->have_config = true;
    out->name = model;
  }
  if ((status = kvs_row_widths_for(&out->geometry, o->kv_dtype, out->config.qk_rope_head_dim,
                                   &out->widths, err))) {
    return status;
  }
  kvs_plan_model_place_rings(out, o->state_rings, o->max_running);
  if (o->have_window_cache && o->have_swa_ratio) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "--window-cache sizes the window from the floor and a share of the "
                         "budget, --swa-ratio from a share of the history: give one");
  }
  out->swa_ratio = o->have_window_cache ? 0.0 : o->swa_ratio;
  if (o->have_floor_pages) {
    if (o->have_floor_inputs) {
      return kvs_error_set(err, KVS_ERR_PARSE,
                           "--floor-pages gives the floor directly; drop --max-seq-len, "
                           "--max-running and --radix/--no-radix, or drop --floor-pages");
    }
    out->floor_pages = o->floor_pages;
    return KVS_OK;
  }
  return kvs_cost_window_floor_pages(o->max_seq_len, o->max_running, o->radix, o->page,
                                     &out->floor_pages, err);
}

enum { MAX_FLAGS = 80, OPT_DEPLOY = 2000 };

/* The parser's table: the subcommand's own flags, its deployment flags
 * (each name and alias, ids OPT_DEPLOY + kvs_deploy_id), the shared ones,
 * --help and the terminator; names[] the same names, for suggestions.
 * Returns the number of flags, or 0 when they do not fit. */
static size_t build_table(const kvs_plan_parser *parser, struct option *longs, const char **names) {
  const char *deploy[2 * KVS_DEPLOY_FLAG_COUNT];
  size_t n_deploy = kvs_deploy_flags_names(parser->deploy_set, deploy, 2 * KVS_DEPLOY_FLAG_COUNT);
  if (parser->n_own + n_deploy + kvs_plan_long_options_count + 2 > MAX_FLAGS) return 0;
  size_t n = 0;
  memcpy(longs, parser->own, parser->n_own * sizeof longs[0]);
  n += parser->n_own;
  for (size_t i = 0; i < n_deploy; i++) {
    const kvs_deploy_flag *f = kvs_deploy_flag_find(parser->deploy_set, deploy[i]);
    longs[n++] = (struct option){deploy[i] + 2,
                                 f->kind == KVS_DEPLOY_SWITCH ? no_argument : required_argument,
                                 NULL, OPT_DEPLOY + (int)f->id};
  }
  memcpy(longs + n, kvs_plan_long_options, kvs_plan_long_options_count * sizeof longs[0]);
  n += kvs_plan_long_options_count;
  longs[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
  longs[n] = (struct option){0, 0, 0, 0};
  for (size_t i = 0; i < n; i++) names[i] = longs[i].name;
  return n;
}

/* The argv word that named the flag getopt_long just returned: the one
 * before its value when the value was a word of its own. */
static const char *flag_word(char **argv) {
  return optarg != NULL && optind >= 2 && optarg == argv[optind - 1] ? argv[optind - 2]
                                                                     : argv[optind - 1];
}

/* getopt_long takes any unambiguous start of a name ("--weights-t" for
 * --weights-total); no kvshard tool guesses a flag, so only the whole
 * name counts. */
static bool whole_name(const char *word, const char *name) {
  size_t len = strcspn(word + 2, "=");
  return strncmp(word, "--", 2) == 0 && strlen(name) == len && strncmp(word + 2, name, len) == 0;
}

/* An argument left over after the flags. GNU getopt stops at the first
 * word that is not a flag ("+" in the option string), so a subcommand
 * written after flags ("kvplan --topology bundled fit ...") is caught
 * here rather than as an unknown flag of the wrong subcommand. */
static void report_stray(const char *tool, const char *word) {
  static const char *const subcommands[] = {"plan", "solve", "fit", "transfer"};
  for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++) {
    if (strcmp(word, subcommands[i]) == 0) {
      fprintf(kvs_tool_err(),
              "%s: '%s' is a subcommand, and the subcommand comes first: kvplan %s [flags]\n", tool,
              word, word);
      return;
    }
  }
  fprintf(kvs_tool_err(), "%s: unexpected argument '%s' (%s --help lists every flag)\n", tool, word,
          tool);
}

/* One run of the parser: the table and what the flags go into. */
typedef struct parse_run {
  const kvs_plan_parser *parser;
  const char *tool;
  struct option longs[MAX_FLAGS];
  const char *names[MAX_FLAGS];
  size_t n;
  bool seen[MAX_FLAGS];
} parse_run;

/* A flag the table does not hold, or holds only by a longer name: one
 * line, with the nearest flag. */
static int unknown_flag(const parse_run *p, int id, const char *word) {
  char help[64], dash[3] = {'-', (char)optopt, '\0'};
  snprintf(help, sizeof help, "%s --help", p->tool);
  bool long_word = strncmp(word, "--", 2) == 0;
  for (size_t i = 0; long_word && strchr(word, '=') != NULL && i < p->n; i++) {
    if (p->longs[i].has_arg == no_argument && whole_name(word, p->longs[i].name)) {
      fprintf(kvs_tool_err(), "%s: --%s takes no value, got '%s'\n", p->tool, p->longs[i].name,
              word);
      return 2;
    }
  }
  /* An unknown single-letter flag ("-x") is optopt; optind may still be
   * on its word. */
  kvs_report_unknown_flag(p->tool, id == '?' && !long_word && optopt != 0 ? dash : word, p->names,
                          p->n, help);
  return 2;
}

/* One flag getopt_long returned: refusals, --help, then its value applied.
 * Returns 0 to go on, -1 after --help, 2 after a message. */
static int one_flag(parse_run *p, int id, int index, char **argv) {
  const char *word = flag_word(argv);
  if (id == 'h') id = OPT_HELP, index = (int)p->n - 1; /* -h: --help's short form */
  if (id == '?' || (id != OPT_HELP && index >= 0 && !whole_name(word, p->longs[index].name))) {
    return unknown_flag(p, id, word);
  }
  if (id == ':') {
    fprintf(kvs_tool_err(), "%s: %s needs a value\n", p->tool, word);
    return 2;
  }
  /* One rule for every tool: a flag given twice is refused, never the
   * last one silently taken. */
  if (p->seen[index]) {
    fprintf(kvs_tool_err(), "%s: --%s is given twice; give it once\n", p->tool,
            p->longs[index].name);
    return 2;
  }
  p->seen[index] = true;
  if (id == OPT_HELP) {
    p->parser->usage(kvs_tool_out());
    return -1;
  }
  kvs_error err;
  kvs_status status;
  if (id >= OPT_DEPLOY) {
    /* The name as given: the flag's own or its alias (word is
     * "--name" or "--name=value"). */
    const kvs_deploy_flag *f = &kvs_deploy_flags_table[id - OPT_DEPLOY];
    const char *said = f->alias != NULL && whole_name(word, f->alias + 2) ? f->alias : f->name;
    status = kvs_deploy_flag_apply(p->parser->deploy, f, said, optarg, &err);
  } else if (id >= OPT_MODEL) {
    status = kvs_plan_options_apply(p->parser->options, id, optarg, &err);
  } else {
    status = p->parser->own_flag(p->parser->ctx, id, optarg, &err);
  }
  if (status != KVS_OK) {
    fprintf(kvs_tool_err(), "%s: %s\n", p->tool, err.message);
    return 2;
  }
  return 0;
}

int kvs_plan_options_parse(const kvs_plan_parser *parser, int argc, char **argv) {
  const char *tool = parser->tool;
  parse_run *p = calloc(1, sizeof *p);
  if (p == NULL) {
    fprintf(kvs_tool_err(), "%s: out of memory\n", tool);
    return 1;
  }
  p->parser = parser;
  p->tool = tool;
  p->n = build_table(parser, p->longs, p->names);
  int rc = p->n == 0
               ? (fprintf(kvs_tool_err(), "%s: too many flags for the parser's table\n", tool), 2)
               : 0;
  optind = 0; /* GNU getopt: full reinitialisation, so the parser can run again */
  opterr = 0;
  int id, index = -1;
  /* "+": stop at the first word that is not a flag; ":": a missing value
   * is reported as such; "h": -h is --help. */
  while (rc == 0 && (id = getopt_long(argc, argv, "+:h", p->longs, &index)) != -1) {
    rc = one_flag(p, id, index >= 0 && (size_t)index < p->n ? index : -1, argv);
    index = -1;
  }
  if (rc == 0 && optind < argc) {
    report_stray(tool, argv[optind]);
    rc = 2;
  }
  free(p);
  return rc;
}

void kvs_plan_model_print(FILE *out, const kvs_plan_model *m, const kvs_plan_options *o) {
  const kvs_geometry *g = &m->geometry;
  kvs_cost_terms t;
  kvs_cost_terms_make(g, 0, kvs_geometry_layer_count(g), &m->widths, &t, NULL);
  char mtp[48] = "";
  if (o->mtp > 0) {
    snprintf(mtp, sizeof mtp, ", the last %llu MTP", (unsigned long long)o->mtp);
  }
  fprintf(out,
          "model       %s: %llu layers (%llu window-only, %llu CSA, %llu HCA%s), head_dim %llu, "
          "index_head_dim %llu, %s rows (KV %llu B, indexer %llu B), rings %s\n",
          m->name, (unsigned long long)t.n_layers,
          (unsigned long long)(t.n_layers - t.n_csa - t.n_hca), (unsigned long long)t.n_csa,
          (unsigned long long)t.n_hca, mtp, (unsigned long long)g->head_dim,
          (unsigned long long)g->index_head_dim, kvs_kv_dtype_name(o->kv_dtype),
          (unsigned long long)m->widths.kv, (unsigned long long)m->widths.index,
          kvs_state_rings_name(m->widths.state_rings));
}

void kvs_plan_model_place_rings(kvs_plan_model *model, kvs_state_rings rings,
                                uint64_t max_running) {
  kvs_row_widths_place(&model->widths, rings, max_running, model->prefix_cache);
}

uint64_t kvs_plan_model_window_cache(kvs_plan_model *m, const kvs_plan_options *o,
                                     uint64_t budget) {
  if (!o->have_window_cache) return 0;
  uint64_t per_page = kvs_geometry_layer_count(&m->geometry) * o->page * m->widths.kv;
  if (per_page == 0) return 0;
  uint64_t extra = (uint64_t)((double)budget * o->window_cache) / per_page;
  m->floor_pages += extra;
  return extra;
}
