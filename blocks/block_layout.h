/* How a token sequence is cut into stored KV blocks.
 *
 * A layout pairs the block size with the sliding window, if the model
 * has one. Sliding-window layers release history a whole block at a
 * time, so the window must be a multiple of the block size; otherwise
 * some block sits across the window boundary, partly live and partly
 * expired, and per-block eviction either retains dead rows or frees
 * live ones.
 *
 * Every block signature (block_signature.h) records its layout, since
 * files on disk persist across configuration changes.
 *
 * NULL: kvs_block_layout_init refuses a NULL out (KVS_ERR_INVALID_ARGUMENT);
 * kvs_block_layout_describe_problem with a NULL buf only measures, and
 * kvs_block_window_describe returns "" for a NULL buf. */
#ifndef KVS_BLOCKS_BLOCK_LAYOUT_H
#define KVS_BLOCKS_BLOCK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sliding_window value meaning "no sliding window: full causal". A real
 * window of zero tokens means nothing, so zero is free to mean "none". */
#define KVS_BLOCK_NO_WINDOW 0u

/* A plain value. Build one with kvs_block_layout_init so it is known
 * usable; a layout read from a file is checked again when verified. */
typedef struct kvs_block_layout {
  uint32_t block_size;     /* tokens per block, > 0 */
  uint32_t sliding_window; /* tokens, or KVS_BLOCK_NO_WINDOW */
} kvs_block_layout;

/* Why a layout is unusable. */
typedef enum kvs_block_layout_problem {
  KVS_BLOCK_LAYOUT_OK = 0,
  /* A block of zero tokens cannot hold or name anything. */
  KVS_BLOCK_LAYOUT_ZERO_BLOCK_SIZE = 1,
  /* The sliding window is not a multiple of the block size. */
  KVS_BLOCK_LAYOUT_MISALIGNED_WINDOW = 2
} kvs_block_layout_problem;

/* The first problem of a layout, or KVS_BLOCK_LAYOUT_OK. */
kvs_block_layout_problem kvs_block_layout_check(kvs_block_layout layout);

/* Writes a sentence naming a layout's problem and its numbers into buf
 * (always NUL-terminated when cap > 0), e.g. "block size 48 does not
 * divide the 128-token sliding window ...". Returns the length snprintf
 * would have written. */
size_t kvs_block_layout_describe_problem(kvs_block_layout layout, char *buf, size_t cap);

/* Builds a usable layout. A zero block size, or a window that is not a
 * multiple of the block size, fails with KVS_ERR_INVALID_ARGUMENT naming
 * both numbers; *out is untouched then. */
kvs_status kvs_block_layout_init(uint32_t block_size, uint32_t sliding_window,
                                 kvs_block_layout *out, kvs_error *err);

/* Renders a window for messages: the token count, or "none (full
 * causal)" for no window, so that "no window" and "not said" never look
 * alike in a log. Returns buf. */
const char *kvs_block_window_describe(uint32_t sliding_window, char *buf, size_t cap);

/* Text for a window of KVS_BLOCK_NO_WINDOW. */
#define KVS_BLOCK_NO_WINDOW_TEXT "none (full causal)"

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_BLOCK_LAYOUT_H */
