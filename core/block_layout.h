/* How a token sequence is cut into stored KV blocks.
 *
 * A layout is the block size plus the sliding window (if any) that the
 * block size had to line up with. The window matters because a sliding
 * window attention layer drops whole blocks once they leave the window:
 * a block size that does not divide the window would leave one block
 * straddling the window edge, half needed and half dead, and eviction
 * by block would then either keep stale rows or drop live ones.
 *
 * The layout is carried inside every block signature (block_signature.h)
 * because a durable store outlives the configuration that filled it. */
#ifndef KVS_BLOCK_LAYOUT_H
#define KVS_BLOCK_LAYOUT_H

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
  /* The block size does not divide the sliding window. */
  KVS_BLOCK_LAYOUT_MISALIGNED_WINDOW = 2
} kvs_block_layout_problem;

/* The first problem of a layout, or KVS_BLOCK_LAYOUT_OK. */
kvs_block_layout_problem kvs_block_layout_check(kvs_block_layout layout);

/* Writes a sentence naming a layout's problem and its numbers into buf
 * (always NUL-terminated when cap > 0), e.g. "block size 48 does not
 * divide the sliding window of 128 tokens". Returns the length snprintf
 * would have written. */
size_t kvs_block_layout_describe_problem(kvs_block_layout layout, char *buf, size_t cap);

/* Builds a usable layout. A zero block size or one that does not divide
 * the window fails with KVS_ERR_INVALID_ARGUMENT naming both numbers;
 * *out is untouched then. */
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

#endif /* KVS_BLOCK_LAYOUT_H */
