/* SGLang's DeepSeek-V4 pool sizing (see sglang_pools.h for the model).
 *
 * The point of this file is to land on SGLang's numbers exactly, so every
 * step follows Python's arithmetic rather than what would be natural in C:
 *   - an int meeting a float becomes the nearest double first (C's
 *     uint64 -> double conversion rounds to nearest as well);
 *   - int / int is the correctly rounded quotient of the two exact
 *     integers, which C's double division only guarantees while both fit
 *     the 53-bit significand, hence exact_quotient() below;
 *   - int(x) truncates toward zero; C does the same, but converting a
 *     double at or above 2^64 is undefined, so every such conversion is
 *     checked and refused instead (Python would carry on with big ints);
 *   - a * b * c groups as (a * b) * c in both languages, and each term of
 *     the per-token sum keeps SGLang's operand order, because reordering
 *     the products moves the last bit and, at a page boundary, a page.
 * Integer sizes are exact in Python; here they are checked for 64-bit
 * overflow and refused with KVS_ERR_OVERFLOW naming the input at fault. */
#include "core/sglang_pools.h"

#include <float.h>
#include <math.h>

/* Excess precision (x87) would round the per-token sum differently from
 * CPython's doubles; every supported target evaluates in double. */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0 && FLT_EVAL_METHOD != -1
#error "sglang_pools.c needs FLT_EVAL_METHOD 0 to reproduce SGLang's doubles"
#endif
/* A fused multiply-add skips the rounding of the product that CPython
 * performs. GCC in ISO C mode (-std=c11) never contracts; clang contracts
 * within an expression unless told not to. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* SGLang's fixed constants for the default configuration. */
#define FP8_SCALE_BYTES 8u       /* per kv row: nope scales plus padding */
#define INDEXER_QUANT_BLOCK 128u /* indexer keys carry one fp32 scale per block */
#define INDEXER_SCALE_BYTES 4u
#define STATE_DTYPE_BYTES 4u /* SGLANG_DSV4_COMPRESS_STATE_DTYPE=fp32 */
#define C128_ROW_ALIGN 128u  /* the ratio-128 state rows are allocated in 128s */
#define MTP_DRAFT_LAYERS 1u  /* the draft worker SGLang prices per target layer */
/* The request-count estimate when --max-running-requests is absent. */
#define ESTIMATE_PER_CONTEXT 512.0
#define ESTIMATE_MIN 2048u
#define ESTIMATE_MAX 4096u

/* 2^64 as a double: the first value no uint64 holds. */
#define TWO_POW_64 18446744073709551616.0
#define TWO_POW_53 9007199254740992ull

static bool add_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

static bool mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static unsigned bit_length(unsigned __int128 x) {
  unsigned n = 0;
  while (x != 0) {
    x >>= 1;
    n++;
  }
  return n;
}

/* Python's a / b for two non-negative ints (b > 0): the exact rational
 * rounded once to the nearest double, ties to even. For operands up to
 * 2^53 both convert exactly and IEEE division already rounds once; past
 * that, converting first would round twice, so the quotient is formed in
 * integers: a 55- to 57-bit integer part plus a sticky remainder, rounded
 * to 53 bits by hand and scaled back. The result lies in [2^-64, 2^64], so
 * the final scaling is exact (no overflow, no subnormals). */
static double exact_quotient(uint64_t a, uint64_t b) {
  if (a <= TWO_POW_53 && b <= TWO_POW_53) return (double)a / (double)b;
  if (a == 0) return 0.0;
  int shift = 56 + (int)bit_length(b) - (int)bit_length(a); /* q * 2^shift >= 2^55 */
  unsigned __int128 num = a;
  unsigned __int128 den = b;
  if (shift >= 0) {
    num <<= shift; /* bit_length(a) + shift = 56 + bit_length(b) <= 120 */
  } else {
    den <<= -shift; /* bit_length(b) - shift = bit_length(a) - 56 <= 8 */
  }
  unsigned __int128 q = num / den;
  bool inexact = num % den != 0;
  unsigned drop = bit_length(q) - 53; /* q has 56 or 57 bits */
  unsigned __int128 mantissa = q >> drop;
  unsigned __int128 rest = q & (((unsigned __int128)1 << drop) - 1);
  unsigned __int128 half = (unsigned __int128)1 << (drop - 1);
  if (rest > half || (rest == half && (inexact || (mantissa & 1) != 0))) mantissa++;
  return ldexp((double)(uint64_t)mantissa, (int)drop - shift);
}

/* Python's int(x) for a non-negative double, refused where no uint64 holds
 * the result (and for NaN, which Python refuses too). */
static bool truncate_to_u64(double x, uint64_t *out) {
  if (!(x >= 0.0) || x >= TWO_POW_64) return false;
  *out = (uint64_t)x;
  return true;
}

static kvs_status check_model(const kvs_sglang_model *m, kvs_error *err) {
  if (m->n_layers == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "model n_layers is 0; SGLang divides by the stage's layer count");
  }
  if (m->n_c4 > m->n_layers || m->n_c128 > m->n_layers - m->n_c4) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "model n_c4 %llu + n_c128 %llu exceed n_layers %llu",
                         (unsigned long long)m->n_c4, (unsigned long long)m->n_c128,
                         (unsigned long long)m->n_layers);
  }
  if (m->qk_nope_head_dim == 0 || m->qk_rope_head_dim == 0 || m->index_head_dim == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "model widths must be non-zero (qk_nope_head_dim %llu, "
                         "qk_rope_head_dim %llu, index_head_dim %llu)",
                         (unsigned long long)m->qk_nope_head_dim,
                         (unsigned long long)m->qk_rope_head_dim,
                         (unsigned long long)m->index_head_dim);
  }
  if (m->swa_page_size == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "model swa_page_size (the sliding window) is 0; the ratio-4 state "
                         "rings are charged per window token");
  }
  return KVS_OK;
}

static kvs_status check_options(const kvs_sglang_options *o, const kvs_sglang_model *m,
                                kvs_error *err) {
  if (o->page_size == 0 || o->page_size % 128 != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "page_size %llu must be a non-zero multiple of 128 (SGLang's "
                         "compressed attention requires it)",
                         (unsigned long long)o->page_size);
  }
  if (!isfinite(o->swa_ratio) || !(o->swa_ratio > 0.0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "swa_ratio %g must be finite and positive",
                         o->swa_ratio);
  }
  if (o->max_running == 0 && m->context_len == 0) {
    /* SGLang divides by the context length here even on stages without
     * ratio-128 layers, so an unknown one cannot be estimated around. */
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "context_len is 0 (unknown) and max_running is not given; the "
                         "running-request estimate divides by context_len");
  }
  return KVS_OK;
}

/* The per-row widths of the model, in bytes. */
typedef struct rows {
  uint64_t kv;
  uint64_t indexer;
  uint64_t attn_head_dim;
  uint64_t c4_state;         /* (kv, score) x 2 overlapping blocks, fp32 */
  uint64_t c4_indexer_state; /* the same for the indexer keys */
  uint64_t c128_state;       /* (kv, score), fp32 */
} rows;

static kvs_status row_widths(const kvs_sglang_model *m, rows *out, kvs_error *err) {
  rows r = {0};
  bool ok = mul_ok(m->qk_rope_head_dim, 2, &r.kv) && add_ok(r.kv, m->qk_nope_head_dim, &r.kv) &&
            add_ok(r.kv, FP8_SCALE_BYTES, &r.kv) &&
            add_ok(m->index_head_dim, m->index_head_dim / INDEXER_QUANT_BLOCK * INDEXER_SCALE_BYTES,
                   &r.indexer) &&
            add_ok(m->qk_nope_head_dim, m->qk_rope_head_dim, &r.attn_head_dim) &&
            mul_ok(r.attn_head_dim, 2 * 2 * STATE_DTYPE_BYTES, &r.c4_state) &&
            mul_ok(m->index_head_dim, 2 * 2 * STATE_DTYPE_BYTES, &r.c4_indexer_state) &&
            mul_ok(r.attn_head_dim, 2 * 1 * STATE_DTYPE_BYTES, &r.c128_state);
  if (!ok) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "row widths overflow 64 bits (qk_nope_head_dim %llu, qk_rope_head_dim "
                         "%llu, index_head_dim %llu)",
                         (unsigned long long)m->qk_nope_head_dim,
                         (unsigned long long)m->qk_rope_head_dim,
                         (unsigned long long)m->index_head_dim);
  }
  *out = r;
  return KVS_OK;
}

/* Bytes charged per token of full history, term for term in SGLang's
 * order. Each product reads left to right exactly as the Python does; the
 * ratio-128 state term is the int 0 there (that state is a fixed
 * reservation instead), and adding an int 0 leaves a positive double
 * unchanged, so it is left out. */
static double per_full_token(const kvs_sglang_model *m, const rows *r, double swa_ratio,
                             uint64_t c4_ring) {
  const double c4_frac = 1.0 / 4.0; /* 1 / (4 x c4_shrink_factor 1): exact */
  const double c128_frac = 1.0 / 128.0;
  const double c4_state_ratio = exact_quotient(c4_ring, m->swa_page_size);
  const double layers = (double)m->n_layers;
  const double n_c4 = (double)m->n_c4;
  const double n_c128 = (double)m->n_c128;
  double window_rows = swa_ratio * (double)r->kv * layers;
  double c4_rows = c4_frac * (double)r->kv * n_c4;
  double c128_rows = c128_frac * (double)r->kv * n_c128;
  double indexer_rows = 1.0 / 4.0 * (double)r->indexer * n_c4;
  double c4_state = swa_ratio * c4_state_ratio * (double)r->c4_state * n_c4;
  double c4_indexer_state = swa_ratio * c4_state_ratio * (double)r->c4_indexer_state * n_c4;
  return window_rows + c4_rows + c128_rows + indexer_rows + c4_state + c4_indexer_state;
}

/* The ratio-128 state SGLang reserves up front for max_running requests
 * (plus one padding slot): a ring per slot, one more ring and one more row,
 * allocated in whole 128-row blocks, on every ratio-128 layer. */
static kvs_status c128_reservation(const kvs_sglang_model *m, const rows *r, uint64_t c128_ring,
                                   uint64_t max_running, uint64_t *out, kvs_error *err) {
  if (m->n_c128 == 0) {
    *out = 0;
    return KVS_OK;
  }
  uint64_t slots, state_rows, bytes;
  bool ok = add_ok(max_running, 1, &slots) && mul_ok(slots, c128_ring, &state_rows) &&
            add_ok(state_rows, c128_ring + 1, &state_rows) &&
            add_ok(state_rows, C128_ROW_ALIGN - 1, &state_rows);
  if (ok) {
    state_rows = state_rows / C128_ROW_ALIGN * C128_ROW_ALIGN;
    ok = mul_ok(state_rows, r->c128_state, &bytes) && mul_ok(bytes, m->n_c128, &bytes);
  }
  if (!ok) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "max_running %llu: the ratio-128 state reservation over %llu layers "
                         "does not fit in 64 bits",
                         (unsigned long long)max_running, (unsigned long long)m->n_c128);
  }
  *out = bytes;
  return KVS_OK;
}

/* Python's int(bytes / bytes_per_full_token). */
static kvs_status tokens_for(uint64_t bytes, double bytes_per_full_token, uint64_t *out,
                             kvs_error *err) {
  double tokens = (double)bytes / bytes_per_full_token;
  if (!truncate_to_u64(tokens, out)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "%llu bytes / %g bytes per full token = %g tokens does not fit in 64 "
                         "bits; swa_ratio is too small for this model",
                         (unsigned long long)bytes, bytes_per_full_token, tokens);
  }
  return KVS_OK;
}

/* SGLang's guess at the running requests when none is given: 512 per
 * context length of capacity, clamped to [2048, 4096], and never more than
 * half the tokens. */
static uint64_t estimate_max_running(uint64_t token_capacity, uint64_t context_len) {
  double scaled = exact_quotient(token_capacity, context_len) * ESTIMATE_PER_CONTEXT;
  /* int() then min(., 4096): clamping first keeps the conversion defined. */
  uint64_t estimate = scaled >= (double)ESTIMATE_MAX ? ESTIMATE_MAX : (uint64_t)scaled;
  if (estimate < ESTIMATE_MIN) estimate = ESTIMATE_MIN;
  uint64_t half = token_capacity / 2;
  return estimate < half ? estimate : half;
}

kvs_status kvs_sglang_pools_compute(const kvs_sglang_model *model,
                                    const kvs_sglang_options *options, uint64_t available_bytes,
                                    kvs_sglang_pools *out, kvs_error *err) {
  if (model == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: model is NULL", __func__);
  }
  if (options == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: options is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status = check_model(model, err);
  if (status != KVS_OK) return status;
  status = check_options(options, model, err);
  if (status != KVS_OK) return status;
  rows r = {0};
  status = row_widths(model, &r, err);
  if (status != KVS_OK) return status;

  kvs_sglang_pools p = {0};
  p.kv_row_bytes = r.kv;
  p.indexer_row_bytes = r.indexer;
  /* get_compress_state_ring_size: a verify batch writes its draft tokens
   * into the ring too, so speculation doubles both rings. */
  p.c4_ring_size = options->speculative ? 16 : 8;
  p.c128_ring_size = options->speculative ? 256 : 128;

  double bpft = per_full_token(model, &r, options->swa_ratio, p.c4_ring_size);
  if (options->speculative) {
    /* The MTP draft worker's cache is priced as one more layer per stage:
     * the factor is Python's int / int, rounded once, then multiplied. */
    uint64_t with_draft;
    if (!add_ok(model->n_layers, MTP_DRAFT_LAYERS, &with_draft)) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW, "model n_layers %llu + 1 overflows",
                           (unsigned long long)model->n_layers);
    }
    bpft *= exact_quotient(with_draft, model->n_layers);
  }
  /* A huge swa_ratio can make a product infinite, and inf x 0 layers NaN;
   * Python would then fail in int(), so refuse here naming the cause. */
  if (!isfinite(bpft) || !(bpft > 0.0)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "bytes_per_full_token is %g (swa_ratio %g); not a finite positive size",
                         bpft, options->swa_ratio);
  }
  p.bytes_per_full_token = bpft;

  uint64_t max_running = options->max_running;
  if (max_running == 0) {
    /* SGLang sizes the reservation from the capacity before it, then
     * sizes the pools from what the reservation leaves. The scheduler may
     * later settle on its own request count; the reservation (and so the
     * pools) stays the one made here. */
    uint64_t capacity = 0;
    status = tokens_for(available_bytes, bpft, &capacity, err);
    if (status != KVS_OK) return status;
    max_running = estimate_max_running(capacity, model->context_len);
    p.max_running_estimated = true;
  }
  p.max_running = max_running;
  status =
      c128_reservation(model, &r, p.c128_ring_size, max_running, &p.c128_state_fixed_bytes, err);
  if (status != KVS_OK) return status;

  uint64_t bytes_for_tokens =
      available_bytes > p.c128_state_fixed_bytes ? available_bytes - p.c128_state_fixed_bytes : 0;
  uint64_t full_token = 0;
  status = tokens_for(bytes_for_tokens, bpft, &full_token, err);
  if (status != KVS_OK) return status;

  const uint64_t page = options->page_size;
  p.full = full_token / page * page;
  uint64_t swa_token;
  double swa_exact = (double)p.full * options->swa_ratio;
  if (!truncate_to_u64(swa_exact, &swa_token)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "swa pool: %llu full tokens x swa_ratio %g = %g tokens does not fit in "
                         "64 bits",
                         (unsigned long long)p.full, options->swa_ratio, swa_exact);
  }
  p.swa = swa_token / page * page;
  p.c4 = p.full / 4; /* c4_shrink_factor 1: no HiSparse host tier */
  p.c128 = p.full / 128;
  if (!mul_ok(p.swa / model->swa_page_size, p.c4_ring_size, &p.c4_state)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "c4_state: %llu swa tokens / window %llu x ring %llu overflows",
                         (unsigned long long)p.swa, (unsigned long long)model->swa_page_size,
                         (unsigned long long)p.c4_ring_size);
  }
  /* finalize_with_max_running_requests: one ring per request slot. */
  uint64_t slots;
  if (!add_ok(max_running, 1, &slots) || !mul_ok(slots, p.c128_ring_size, &p.c128_state)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW,
                         "c128_state: max_running %llu + 1 slots x ring %llu overflows",
                         (unsigned long long)max_running, (unsigned long long)p.c128_ring_size);
  }
  /* MemoryPoolConfig refuses max_total_num_tokens <= 0 ("Not enough
   * memory"). */
  p.no_pool = p.full == 0;
  /* SGLang's HybridSWA configurator refuses a window pool that cannot hold
   * one sliding window plus a page (its prefill admission floor); the DSV4
   * configurator does not check it, so it is flagged, not refused. */
  uint64_t floor_tokens;
  p.swa_below_window_plus_page =
      !add_ok(model->swa_page_size, page, &floor_tokens) || p.swa <= floor_tokens;
  *out = p;
  return KVS_OK;
}

kvs_status kvs_sglang_model_make(const kvs_geometry *geometry, size_t first, size_t end,
                                 uint64_t qk_rope_head_dim, uint64_t sliding_window,
                                 uint64_t context_len, kvs_sglang_model *out, kvs_error *err) {
  if (geometry == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: geometry is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_status status = kvs_geometry_validate(geometry, err);
  if (status != KVS_OK) return status;
  size_t n = kvs_geometry_layer_count(geometry);
  if (first >= end || end > n) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "layer range first %zu, end %zu is empty or outside the %zu used layers",
                         first, end, n);
  }
  if (qk_rope_head_dim == 0 || qk_rope_head_dim >= geometry->head_dim) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "qk_rope_head_dim %llu must be in [1, head_dim %llu): the rest of the "
                         "head is the no-rope part",
                         (unsigned long long)qk_rope_head_dim,
                         (unsigned long long)geometry->head_dim);
  }
  if (sliding_window == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "sliding_window is 0; SGLang charges the state rings per window token");
  }
  kvs_sglang_model m = {0};
  m.qk_nope_head_dim = geometry->head_dim - qk_rope_head_dim;
  m.qk_rope_head_dim = qk_rope_head_dim;
  m.index_head_dim = geometry->index_head_dim;
  m.swa_page_size = sliding_window;
  m.context_len = context_len;
  m.n_layers = end - first;
  /* SGLang slices compress_ratios by the stage's layer range and counts
   * the ratios; ratio-0 layers count toward n_layers only. */
  for (size_t layer = first; layer < end; layer++) {
    m.n_c4 += geometry->compress_ratios[layer] == KVS_CSA_RATIO;
    m.n_c128 += geometry->compress_ratios[layer] == KVS_HCA_RATIO;
  }
  *out = m;
  return KVS_OK;
}

kvs_status kvs_sglang_pp_range(size_t n_layers, size_t pp, size_t stage, size_t *first, size_t *end,
                               kvs_error *err) {
  if (first == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: first is NULL", __func__);
  }
  if (end == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: end is NULL", __func__);
  }
  if (pp == 0 || pp > n_layers) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "pp %zu must be in [1, n_layers %zu]: every stage holds a layer", pp,
                         n_layers);
  }
  if (stage >= pp) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "stage %zu must be below pp %zu", stage,
                         pp);
  }
  /* Every stage gets n_layers / pp layers and the last (n_layers % pp)
   * stages one more each. Written as stage x base + (extra stages before
   * this one), which cannot overflow: both parts stay below n_layers. */
  size_t base = n_layers / pp;
  size_t remainder = n_layers % pp;
  size_t plain_stages = pp - remainder;
  size_t start = stage * base + (stage > plain_stages ? stage - plain_stages : 0);
  *first = start;
  *end = start + base + (stage >= plain_stages ? 1 : 0);
  return KVS_OK;
}
