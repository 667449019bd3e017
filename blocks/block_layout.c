#include "blocks/block_layout.h"

#include <stdio.h>

kvs_block_layout_problem kvs_block_layout_check(kvs_block_layout layout) {
  if (layout.block_size == 0) return KVS_BLOCK_LAYOUT_ZERO_BLOCK_SIZE;
  if (layout.sliding_window != KVS_BLOCK_NO_WINDOW &&
      layout.sliding_window % layout.block_size != 0) {
    return KVS_BLOCK_LAYOUT_MISALIGNED_WINDOW;
  }
  return KVS_BLOCK_LAYOUT_OK;
}

size_t kvs_block_layout_describe_problem(kvs_block_layout layout, char *buf, size_t cap) {
  int n = 0;
  if (buf == NULL) cap = 0; /* snprintf then only measures */
  switch (kvs_block_layout_check(layout)) {
    case KVS_BLOCK_LAYOUT_OK:
      n = snprintf(buf, cap, "block size %u with sliding window %u is usable",
                   (unsigned)layout.block_size, (unsigned)layout.sliding_window);
      break;
    case KVS_BLOCK_LAYOUT_ZERO_BLOCK_SIZE:
      n = snprintf(buf, cap, "block size is 0; a block must hold at least one token");
      break;
    case KVS_BLOCK_LAYOUT_MISALIGNED_WINDOW:
      n = snprintf(buf, cap,
                   "block size %u does not divide the %u-token sliding window "
                   "(%u %% %u = %u); some block would cross the window edge",
                   (unsigned)layout.block_size, (unsigned)layout.sliding_window,
                   (unsigned)layout.sliding_window, (unsigned)layout.block_size,
                   (unsigned)(layout.sliding_window % layout.block_size));
      break;
  }
  return n < 0 ? 0 : (size_t)n;
}

kvs_status kvs_block_layout_init(uint32_t block_size, uint32_t sliding_window,
                                 kvs_block_layout *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_block_layout layout = {block_size, sliding_window};
  if (kvs_block_layout_check(layout) != KVS_BLOCK_LAYOUT_OK) {
    char why[256];
    kvs_block_layout_describe_problem(layout, why, sizeof why);
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "unusable block layout: %s", why);
  }
  *out = layout;
  return KVS_OK;
}

const char *kvs_block_window_describe(uint32_t sliding_window, char *buf, size_t cap) {
  if (buf == NULL) return "";
  if (cap == 0) return buf;
  if (sliding_window == KVS_BLOCK_NO_WINDOW) {
    snprintf(buf, cap, "%s", KVS_BLOCK_NO_WINDOW_TEXT);
  } else {
    snprintf(buf, cap, "%u", (unsigned)sliding_window);
  }
  return buf;
}
