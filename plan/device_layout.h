/* The byte layout of one device's KV tiers, carved from one allocation.
 *
 * Pure arithmetic (no CUDA), so every offset, every padding byte and the
 * budget solve are tested on machines without a GPU. The regions follow
 * core/'s exact pricing row for row: each compressed and indexer pool
 * carries its n_scratch rows after its data rows, each ring one scratch
 * row, and the full -> window table its trailing -1 sentinel row. With
 * alignment 1 (arithmetic only: the pricing tests compare it with core;
 * tables refuse it, kvs_device_layout_check_tables) the tiers are
 * contiguous rows and their bytes equal kvs_pool_sizes_bytes_terms
 * exactly; with alignment A every region starts on a multiple of A, the KV
 * tiers are carved in the pages an engine's kernels read (below), and the
 * gaps are counted in padding_bytes, so the plan prices what is really
 * allocated.
 *
 * KV pages. An engine reads the window, compressed and indexer tiers page
 * by page through TMA (cuTensorMapEncodeTiled: a 16-byte aligned base,
 * strides multiples of 16 bytes), so each region is whole pages of
 * page_rows rows (P for the window, P / ratio compressed, P / 4 indexer),
 * page_bytes apart: the page's rows rounded up to the tier's quantum
 * (kvs_device_page_quantum), its scratch rows in a page of their own. Rows
 * of whole 16-byte units (bf16) are plain rows and carved as such. fp8 rows
 * are not: a page keeps its rows' payloads, then their scales, so every
 * row needs its whole page. The 132-byte indexer row (DeepGEMM's paged
 * indexer: 128 fp8 bytes per key, then 4-byte scales) fills pages of whole
 * 16-byte units at every P kvshard allows. The fp8 KV row of DSV4 (584 B)
 * is not stored as one: FlashMLA's MODEL1 fp8 sparse layout
 * (deepseek-ai/FlashMLA csrc/sm90/decode/sparse_fp8, csrc/sm100/decode/
 * head64, tests/quant.py) keeps a page as its tokens' 576-byte payloads
 * (448 fp8 no-rope + 64 bf16 rope, each 16-byte aligned) at a 576-byte
 * stride, then their 8-byte scales (7 e8m0 + 1 pad), and its TMA tensor
 * map walks the whole cache in 576-byte rows, asserting that the page
 * stride is a multiple of 576 ("k_cache.stride(0) must be a multiple of
 * 576. Padding might be necessary") and the base 16-byte aligned. SGLang
 * allocates DSV4's fp8 pools that way (mem_cache/deepseek_v4_memory_pool.py:
 * bytes_per_page_padded = ceil(page x 584 / 576) x 576). So the quantum of
 * a KV row that is not whole 16-byte units is its payload, 576 B: a
 * 128-row window page is 74,880 B (128 x 584 = 74,752 plus 128), a 32-row
 * ratio-4 page 19,008 B (+320), a 1-row ratio-128 page 1,152 B (+568).
 * The rows are not padded one by one: a page is one contiguous block, as
 * the kernel asserts (stride_kv_row == 584).
 *
 * The allocation, in order:
 *   control      fault records of the four kernels, then the staging area
 *                for journal entries uploaded from the host
 *   mapping      full_token + 1 int64 rows (the last is the sentinel)
 *   window       one region per layer: n_win_slots KV rows
 *   compressed   ratio-4 layers, then ratio-128 layers: cmp_blocks +
 *                n_scratch KV rows each
 *   indexer      ratio-4 layers: idx_blocks + n_scratch index rows
 *   state        ratio-4 layers, then ratio-128 layers: the fp32
 *                attention ring, state_slots + 1 rows (state_slots: ring
 *                x window pages, or ring x request slots for a ring kind
 *                placed per request; kvs_layer_sizes)
 *   index state  ratio-4 layers: the fp32 indexer ring, idx_state_slots
 *                + 1 rows
 * Regions of one kind have one size, so a region's offset is
 * first + rank * stride: found in O(1) for any layer.
 *
 * NULL: the kvs_status calls refuse a NULL geometry, terms, sizes, layout,
 * fault records or output with KVS_ERR_INVALID_ARGUMENT naming it (NULL
 * widths and options mean the defaults, as below). */
#ifndef KVS_PLAN_DEVICE_LAYOUT_H
#define KVS_PLAN_DEVICE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "core/device_ref.h"
#include "core/geometry.h"
#include "core/serving_defaults.h"
#include "core/status.h"
#include "pool/window_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_device_tier {
  KVS_DEVICE_TIER_MAPPING = 0,    /* full -> window table and its sentinel */
  KVS_DEVICE_TIER_WINDOW = 1,     /* window KV, every layer */
  KVS_DEVICE_TIER_COMPRESSED = 2, /* compressed KV, ratio-4 and ratio-128 layers */
  KVS_DEVICE_TIER_INDEXER = 3,    /* indexer keys, ratio-4 layers */
  KVS_DEVICE_TIER_STATE = 4,      /* attention compress-state ring (fp32) */
  KVS_DEVICE_TIER_INDEX_STATE = 5 /* indexer compress-state ring (fp32) */
} kvs_device_tier;

#define KVS_DEVICE_TIER_COUNT 6

/* "mapping", "window", "compressed", "indexer", "state", "index_state". */
const char *kvs_device_tier_name(kvs_device_tier tier);

/* The regions of one kind: `count` regions of `rows + scratch_rows` rows
 * of `row_bytes` each (`bytes`), spanning `extent` (their pages, for a KV
 * tier of a table's carve), the first at `offset`, each next one `stride`
 * (the extent rounded up to the alignment) further. */
typedef struct kvs_device_span {
  kvs_device_tier tier;
  uint32_t ratio; /* 4 or 128 for per-ratio spans, else 0 */
  uint64_t count;
  uint64_t rows;
  uint64_t scratch_rows;
  uint64_t row_bytes;
  uint64_t bytes; /* (rows + scratch_rows) x row_bytes */
  uint64_t stride;
  uint64_t offset;
  uint64_t page_rows;  /* rows per KV page; 0: not carved in pages */
  uint64_t page_bytes; /* one page, rounded up to the tier's quantum; 0: not paged */
  uint64_t extent;     /* what a region spans: whole pages, or bytes when not paged */
} kvs_device_span;

#define KVS_DEVICE_SPAN_COUNT 8

/* One region: where it starts, its rows and how wide they are. */
typedef struct kvs_device_region {
  kvs_device_tier tier;
  uint64_t offset;
  uint64_t bytes;        /* (rows + scratch_rows) * row_bytes, no padding */
  uint64_t rows;         /* data rows */
  uint64_t scratch_rows; /* scratch rows after them (the sentinel, for the mapping) */
  uint64_t row_bytes;
  uint64_t page_rows;  /* rows per page (0: not carved in pages) */
  uint64_t page_bytes; /* page k starts at offset + k x page_bytes */
  uint64_t extent;     /* bytes the region spans, its page padding included */
} kvs_device_region;

/* A versioned config: start from KVS_DEVICE_LAYOUT_OPTIONS_INIT. */
typedef struct kvs_device_layout_options {
  size_t size;               /* sizeof(kvs_device_layout_options) */
  uint64_t alignment;        /* a power of two; every region starts on it */
  uint64_t n_scratch;        /* scratch rows per compressed and indexer pool */
  uint64_t journal_capacity; /* entries one host-journal apply may upload */
} kvs_device_layout_options;

/* 256 B: what cudaMalloc guarantees for the base and what coalesced and
 * TMA accesses want for every region; the serving default's scratch rows;
 * as many journal entries as the window pool's default journal. */
#define KVS_DEVICE_DEFAULT_ALIGNMENT 256u
/* The least alignment real tables (device or host twin) are carved with:
 * below it a layout prices arithmetic only. */
#define KVS_DEVICE_MIN_TABLE_ALIGNMENT 256u
/* TMA's unit: a tensor map's base and strides are multiples of 16 bytes. */
#define KVS_DEVICE_TMA_BYTES 16u
#define KVS_DEVICE_LAYOUT_OPTIONS_INIT                                                      \
  {                                                                                         \
    sizeof(kvs_device_layout_options), KVS_DEVICE_DEFAULT_ALIGNMENT, KVS_DEFAULT_N_SCRATCH, \
        KVS_WINDOW_POOL_DEFAULT_JOURNAL                                                     \
  }

/* Pinned host memory the device tables keep beside the carve
 * (backends/cuda/device_tables.c), counted in the node's pinned bytes
 * (plan/node_overhead.h): a check's download buffer, two halves of 512
 * KiB (an 80 MB table is 160 copies, each long enough, tens of
 * microseconds, to hide the event wait of the one before), and the
 * journal staging of options.journal_capacity entries. */
#define KVS_DEVICE_READ_HALF_BYTES ((uint64_t)512 << 10)

/* The fault records at the head of the control area, one per kernel. */
typedef struct kvs_device_faults {
  kvs_batch_fault apply_journal;
  kvs_batch_fault translate;
  kvs_batch_fault state_locs;
  kvs_batch_fault ring_ctx;
} kvs_device_faults;

/* KVS_OK when no record holds a fault, else KVS_ERR_OUT_OF_RANGE naming the
 * first kernel that faulted, how many items and the lowest index. */
kvs_status kvs_device_faults_check(const kvs_device_faults *faults, kvs_error *err);

/* A plain value (about 8 KiB: per-layer tables for KVS_MAX_LAYERS). */
typedef struct kvs_device_layout {
  kvs_device_layout_options options;
  kvs_pool_sizes sizes;
  kvs_cost_terms terms;
  size_t first_layer; /* the layers [first_layer, end_layer) of the geometry */
  size_t end_layer;
  uint32_t layer_ratio[KVS_MAX_LAYERS]; /* ratio of layer first_layer + i */
  uint32_t layer_rank[KVS_MAX_LAYERS];  /* its index among the range's layers of that ratio */
  kvs_device_span spans[KVS_DEVICE_SPAN_COUNT];
  kvs_pool_breakdown exact; /* bytes per tier, as core/ prices them */
  uint64_t control_offset;  /* 0 */
  uint64_t faults_offset;   /* kvs_device_faults */
  uint64_t journal_offset;  /* journal_capacity kvs_journal_entry */
  uint64_t control_bytes;
  uint64_t tiers_offset;  /* the mapping: control rounded up to the alignment */
  uint64_t tiers_end;     /* end of the last tier region */
  uint64_t padding_bytes; /* alignment gaps and page padding: total - exact.total - control */
  uint64_t total_bytes;   /* what one cudaMalloc takes */
} kvs_device_layout;

/* Lays out the tiers of layers [first, end) of the geometry for these
 * sizes (built for that range: sizes->n_layers == end - first). widths
 * NULL means core's defaults (bf16 rows, fp32 rings); options NULL means
 * the INIT values. Cross-checks every tier's bytes against
 * kvs_pool_sizes_bytes_terms. *out is written only on success. */
kvs_status kvs_device_layout_build(const kvs_geometry *geometry, size_t first, size_t end,
                                   const kvs_row_widths *widths, const kvs_pool_sizes *sizes,
                                   const kvs_device_layout_options *options, kvs_device_layout *out,
                                   kvs_error *err);

/* The footprint (core/cost_model.h: exact + control + padding = the one
 * cudaMalloc) of a pool of this layer mix at these sizes, without the
 * per-layer tables: what kvs_device_layout_build gives in total_bytes,
 * control_bytes and padding_bytes for any layer range with these terms,
 * in O(1). Planners price every candidate layer range with it. options
 * NULL means the INIT values. */
kvs_status kvs_device_layout_footprint(const kvs_cost_terms *terms, const kvs_pool_sizes *sizes,
                                       const kvs_device_layout_options *options,
                                       kvs_device_footprint *out, kvs_error *err);

/* The region of a tier for a layer (absolute index in the geometry; ignored
 * for the mapping). A layer outside the range is KVS_ERR_OUT_OF_RANGE; a
 * tier the layer does not have (compressed on a ratio-0 layer, indexer or
 * index state off ratio 4) is KVS_ERR_NOT_FOUND naming both. */
kvs_status kvs_device_layout_region(const kvs_device_layout *layout, kvs_device_tier tier,
                                    size_t layer, kvs_device_region *out, kvs_error *err);

/* KVS_OK when tables may be carved from this layout: its alignment is at
 * least KVS_DEVICE_MIN_TABLE_ALIGNMENT. Below it (alignment 1 is core's
 * exact arithmetic, contiguous rows with no page padding) the regions
 * would not start where TMA and coalesced loads need them: refused
 * KVS_ERR_INVALID_ARGUMENT naming options.alignment and its value. Called
 * where device tables are created (kvs_device_tables_create) and where
 * the host twin is (kvs_table_create_host). */
kvs_status kvs_device_layout_check_tables(const kvs_device_layout *layout, kvs_error *err);

/* The quantum a page of this tier is rounded up to in a table's carve,
 * for rows stored split (a page's payloads, then their scales: the fp8
 * rows, which are not whole 16-byte units): the payload for the window and
 * compressed tiers (576 for DSV4's 584-byte row: FlashMLA's TMA row
 * stride), 16 (KVS_DEVICE_TMA_BYTES) for the indexer (DeepGEMM's paged
 * indexer). 0 for rows of whole 16-byte units (bf16: stored as plain rows,
 * not carved in pages) and for the mapping and the rings. */
uint64_t kvs_device_page_quantum(kvs_device_tier tier, uint64_t row_bytes);

/* The table dims the kernels see (page, full_token, n_win_slots); zero
 * dims (which kvs_table_dims_check refuses) for a NULL layout. */
kvs_table_dims kvs_device_layout_dims(const kvs_device_layout *layout);

/* fp8 rows as one public engine stores DSV4 (its published row layout): KV rows
 * of 448 B fp8 no-rope + 128 B bf16 rope + 8 B scales and padding = 584 B,
 * indexer rows of 128 B fp8 + 4 B scale = 132 B; rings stay fp32 (core's
 * defaults for this geometry). A table carves the KV rows in pages whose
 * stride is a multiple of the 576-byte payload (see "KV pages" above).
 * Zero widths for a NULL geometry. */
#define KVS_FP8_KV_ROW_BYTES 584u
#define KVS_FP8_INDEX_ROW_BYTES 132u
kvs_row_widths kvs_row_widths_fp8(const kvs_geometry *geometry);

/* The largest pool of layers [first, end) whose padded layout, control
 * area included, fits budget_bytes: the same window rule as
 * kvs_cost_solve_num_pages (max(floor, ceil(swa_ratio * pages)) pages, capped
 * at the history). With alignment 1 this is core's solve of the budget
 * less the control area; with more it is never more, and never short of
 * a pool that fits. A budget below the minimal padded pool is
 * KVS_ERR_BUDGET_TOO_SMALL with *shortfall (when non-NULL) holding the
 * padded minimal bytes; *out is written only on success. */
kvs_status kvs_device_plan_solve(uint64_t budget_bytes, const kvs_geometry *geometry, size_t first,
                                 size_t end, const kvs_row_widths *widths, double swa_ratio,
                                 uint64_t floor_win_pages, uint64_t page,
                                 const kvs_device_layout_options *options, kvs_device_layout *out,
                                 kvs_budget_shortfall *shortfall, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_PLAN_DEVICE_LAYOUT_H */
