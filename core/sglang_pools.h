/* SGLang's DeepSeek-V4 pool sizing, reproduced to the token so kvplan can
 * put it beside kvshard's own exact plan on the same bytes.
 *
 * The model followed is SGLang's DSV4PoolConfigurator
 * (python/sglang/srt/model_executor/pool_configurator.py) and the ring
 * sizes of python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py at
 * revision 003fca8027387a3d6565b2c08e497e3020ac6211, in its default
 * configuration: fp8 KV rows, fp32 compress state, no HiSparse, no online
 * c128 compression, no disaggregation, attention data parallel 1.
 *
 * SGLang prices a linear cost per full-history token and a fixed bias:
 *   - per full token, in double precision and in SGLang's order of terms:
 *     the window (swa_ratio of the history) on every layer, the compressed
 *     rows (1/4 of the history on ratio-4 layers, 1/128 on ratio-128), the
 *     indexer rows (1/4 on ratio-4 layers), and the ratio-4 attention and
 *     indexer state rings charged per window token (ring / window);
 *     with speculative decoding (MTP) the sum grows by (L + 1) / L;
 *   - the ratio-128 state as a fixed reservation for the running requests:
 *     count + 1 slots of the ratio-128 ring (128 entries, 256 with MTP),
 *     plus one more ring and one row, rounded up to whole 128-row blocks;
 * then floors every pool to the page (full, swa) or divides it down
 * (c4, c128, c4_state). Nothing here is kvshard's own sizing. */
#ifndef KVS_CORE_SGLANG_POOLS_H
#define KVS_CORE_SGLANG_POOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/geometry.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SGLang's defaults: swa_full_tokens_ratio, the DSV4 page on GPUs (128 on
 * NPUs) and the quantisation block of the fp8 rows. */
#define KVS_SGLANG_DEFAULT_SWA_RATIO 0.1
#define KVS_SGLANG_DEFAULT_PAGE 256u
/* What SGLang's DSV4 launch hook sets --max-running-requests to when the
 * flag is absent. */
#define KVS_SGLANG_DEFAULT_MAX_RUNNING 256u
#define KVS_SGLANG_NPU_PAGE 128u
/* The SGLang revision these sizes follow, for reports. */
#define KVS_SGLANG_REVISION "003fca8027387a3d6565b2c08e497e3020ac6211"

/* What SGLang reads of the model for one pipeline stage. */
typedef struct kvs_sglang_model {
  uint64_t qk_nope_head_dim; /* head_dim - qk_rope_head_dim */
  uint64_t qk_rope_head_dim;
  uint64_t index_head_dim;
  uint64_t swa_page_size; /* the model's sliding window (SGLang's window_size) */
  uint64_t context_len;   /* max_position_embeddings; 0 when unknown */
  uint64_t n_layers;      /* the stage's layers */
  uint64_t n_c4;          /* of them, ratio 4 */
  uint64_t n_c128;        /* of them, ratio 128 */
} kvs_sglang_model;

/* The server flags that change the sizing. */
typedef struct kvs_sglang_options {
  double swa_ratio;   /* --swa-full-tokens-ratio: finite, > 0 */
  uint64_t page_size; /* --page-size: a non-zero multiple of 128 */
  bool speculative;   /* a speculative algorithm (MTP) is on */
  /* --max-running-requests; 0: not given, estimated by the configurator.
   * SGLang's DSV4 launch hook (apply_deepseek_v4_defaults) fills 256 when
   * the flag is absent, so 256 mirrors a default launch and 0 mirrors the
   * configurator called without that hook. */
  uint64_t max_running;
} kvs_sglang_options;

/* A default DSV4 launch: ratio 0.1, page 256, no MTP, 256 running. */
#define KVS_SGLANG_OPTIONS_INIT \
  { KVS_SGLANG_DEFAULT_SWA_RATIO, KVS_SGLANG_DEFAULT_PAGE, false, KVS_SGLANG_DEFAULT_MAX_RUNNING }

typedef struct kvs_sglang_pools {
  /* The linear model. */
  uint64_t kv_row_bytes;      /* qk_nope + 2 x qk_rope + 8: fp8 no-rope, bf16 rope, scales */
  uint64_t indexer_row_bytes; /* index_head_dim + index_head_dim / 128 x 4 */
  uint64_t c4_ring_size;      /* 8, 16 speculative */
  uint64_t c128_ring_size;    /* 128, 256 speculative */
  double bytes_per_full_token;
  uint64_t c128_state_fixed_bytes;
  /* The running requests the reservation holds. When estimated, SGLang's
   * scheduler may later settle on its own count; the pools stay as here. */
  uint64_t max_running;
  bool max_running_estimated; /* SGLang estimated it from the capacity */
  /* The pools, as SGLang logs them ("DSV4 pool sizes: ..."), with
   * c128_state as finalised for max_running. */
  uint64_t full; /* tokens of history: max_total_num_tokens */
  uint64_t swa;
  uint64_t c4;
  uint64_t c128;
  uint64_t c4_state;
  uint64_t c128_state;
  /* SGLang would not start: no full-token pool ("Not enough memory"). */
  bool no_pool;
  /* The window pool cannot hold one request's sliding window plus a page
   * (swa <= swa_page_size + page_size): admission stalls. SGLang's
   * HybridSWA configurator refuses this floor; its DSV4 path does not check
   * it, so here it is only flagged. */
  bool swa_below_window_plus_page;
} kvs_sglang_pools;

/* The model of layers [first, end) of a geometry, with the widths and the
 * window the geometry does not carry. qk_rope_head_dim must be below
 * head_dim, every width and the window non-zero, the range inside the used
 * layers. *out is written only on success. A NULL pointer argument is
 * KVS_ERR_INVALID_ARGUMENT naming it, here and in the two below. */
kvs_status kvs_sglang_model_make(const kvs_geometry *geometry, size_t first, size_t end,
                                 uint64_t qk_rope_head_dim, uint64_t sliding_window,
                                 uint64_t context_len, kvs_sglang_model *out, kvs_error *err);

/* SGLang's pools for available_bytes (what its profiler leaves for the KV
 * cache on one device). Refuses a page that is not a multiple of 128, a
 * swa_ratio that is not finite and positive, and an estimate that needs
 * context_len when it is 0 (max_running not given), each naming the
 * field. A budget too small for any pool is not an error: the result says
 * no_pool, as SGLang would refuse to start. *out is written only on
 * success. */
kvs_status kvs_sglang_pools_compute(const kvs_sglang_model *model,
                                    const kvs_sglang_options *options, uint64_t available_bytes,
                                    kvs_sglang_pools *out, kvs_error *err);

/* The layers SGLang gives pipeline stage `stage` of `pp` over n_layers
 * (its get_pp_indices without SGLANG_PP_LAYER_PARTITION): every stage
 * n_layers / pp layers, the last n_layers % pp stages one more each (61
 * over 8: 7, 7, 7, 8, 8, 8, 8, 8). [*first, *end). pp must be
 * 1..n_layers, stage below pp. */
kvs_status kvs_sglang_pp_range(size_t n_layers, size_t pp, size_t stage, size_t *first, size_t *end,
                               kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_SGLANG_POOLS_H */
