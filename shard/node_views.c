/* The node's memory as an engine's kernels read it (kvshard.h, "the
 * node's memory, viewed in place"): one view per span of the device
 * layout that has regions, typed by what its rows hold. */
#include <stdio.h>
#include <string.h>

#include "shard/node_internal.h"

size_t kvs_view_dtype_bytes(kvs_view_dtype dtype) {
  switch (dtype) {
    case KVS_VIEW_INT64:
      return 8;
    case KVS_VIEW_INT32:
      return 4;
    case KVS_VIEW_UINT8:
      return 1;
    case KVS_VIEW_BF16:
      return 2;
    case KVS_VIEW_FP32:
      return 4;
  }
  return 0;
}

/* A span's view name: the tier, with the ratio where one tier has a span
 * per ratio. */
static const char *view_name(const kvs_device_span *span) {
  switch (span->tier) {
    case KVS_DEVICE_TIER_MAPPING:
      return "mapping";
    case KVS_DEVICE_TIER_WINDOW:
      return "window";
    case KVS_DEVICE_TIER_COMPRESSED:
      return span->ratio == 4 ? "compressed_4" : "compressed_128";
    case KVS_DEVICE_TIER_INDEXER:
      return "indexer";
    case KVS_DEVICE_TIER_STATE:
      return span->ratio == 4 ? "state_4" : "state_128";
    case KVS_DEVICE_TIER_INDEX_STATE:
      return "index_state";
  }
  return "?";
}

/* What a row holds: bf16 KV and indexer rows as bf16 elements, fp8 ones
 * as their bytes (values, rope and scales interleave: 584 and 132 B
 * rows), rings as fp32, the mapping as int64. A row width that is not a
 * whole number of elements falls back to bytes. */
static kvs_view_dtype view_dtype(const struct kvs_node *node, const kvs_device_span *span) {
  kvs_view_dtype d;
  switch (span->tier) {
    case KVS_DEVICE_TIER_MAPPING:
      d = KVS_VIEW_INT64;
      break;
    case KVS_DEVICE_TIER_STATE:
    case KVS_DEVICE_TIER_INDEX_STATE:
      d = KVS_VIEW_FP32;
      break;
    default:
      d = node->options.kv_dtype == KVS_KV_FP8 ? KVS_VIEW_UINT8 : KVS_VIEW_BF16;
      break;
  }
  size_t e = kvs_view_dtype_bytes(d);
  if (span->row_bytes % e != 0 || (span->count > 1 && span->stride % e != 0)) d = KVS_VIEW_UINT8;
  return d;
}

/* The spans with regions, in carve order: the index'th of them. */
static const kvs_device_span *span_at(const struct kvs_node *node, size_t index) {
  if (node == NULL || node->layout == NULL) return NULL;
  for (size_t i = 0; i < KVS_DEVICE_SPAN_COUNT; i++) {
    const kvs_device_span *s = &node->layout->spans[i];
    if (s->count == 0 || s->row_bytes == 0) continue;
    if (index-- == 0) return s;
  }
  return NULL;
}

size_t kvs_node_view_count(const struct kvs_node *node) {
  size_t n = 0;
  while (span_at(node, n) != NULL) n++;
  return n;
}

kvs_status kvs_node_view_at(kvs_node_t node, size_t index, kvs_node_view *out, kvs_error *err) {
  if (node == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_node_view_at: %s is NULL",
                         node == NULL ? "node" : "out");
  }
  if (out->size != sizeof *out) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "view.size is %zu, this build's kvs_node_view is %zu: set it to "
                         "sizeof(kvs_node_view)",
                         out->size, sizeof *out);
  }
  const kvs_device_span *span = span_at(node, index);
  if (span == NULL) {
    return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE, "view %zu of a node with %zu views", index,
                         kvs_node_view_count(node));
  }
  void *base = NULL;
  int64_t *mapping = NULL;
  kvs_status status = kvs_table_memory(node->table, &base, &mapping, err);
  if (status != KVS_OK) return status;

  kvs_node_view v;
  memset(&v, 0, sizeof v);
  v.size = sizeof v;
  v.name = view_name(span);
  v.dtype = view_dtype(node, span);
  v.on_device = kvs_table_kind_of(node->table) == KVS_TABLE_CUDA;
  v.device = v.on_device ? kvs_table_device(node->table) : -1;
  v.offset = span->offset;
  uint64_t e = kvs_view_dtype_bytes(v.dtype);
  uint64_t rows = span->rows + span->scratch_rows;
  if (span->tier == KVS_DEVICE_TIER_MAPPING) {
    /* On the host twin the live mapping is the table's own array. */
    v.data = mapping;
    v.ndim = 1;
    v.shape[0] = (int64_t)rows;
    v.strides[0] = 1;
    v.bytes = span->bytes;
  } else if (span->page_rows != 0) {
    /* Rows split within a page (fp8: the page's payloads, then their
     * scales, the page rounded up to its quantum): the kernels address
     * pages, so the view is the pages' bytes. */
    v.data = (char *)base + span->offset;
    v.dtype = KVS_VIEW_UINT8;
    v.ndim = 3;
    v.shape[0] = (int64_t)span->count;
    v.shape[1] = (int64_t)(span->extent / span->page_bytes);
    v.shape[2] = (int64_t)span->page_bytes;
    v.strides[0] = (int64_t)span->stride;
    v.strides[1] = (int64_t)span->page_bytes;
    v.strides[2] = 1;
    v.bytes = (span->count - 1) * span->stride + span->extent;
  } else {
    v.data = (char *)base + span->offset;
    v.ndim = 3;
    v.shape[0] = (int64_t)span->count;
    v.shape[1] = (int64_t)rows;
    v.shape[2] = (int64_t)(span->row_bytes / e);
    v.strides[0] = (int64_t)(span->stride / e);
    v.strides[1] = (int64_t)(span->row_bytes / e);
    v.strides[2] = 1;
    v.bytes = (span->count - 1) * span->stride + span->bytes;
  }
  *out = v;
  return KVS_OK;
}
