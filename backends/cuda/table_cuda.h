/* The device implementation of shard/table.h: backends/cuda/device_tables
 * on one GPU, with device buffers and pinned staging for the largest
 * batch. The CUDA backend hands it to the core through its tables entry
 * point (backends/cuda/entry.h: kvs_cuda_tables_table); the core wraps it. */
#ifndef KVS_BACKENDS_CUDA_TABLE_CUDA_H
#define KVS_BACKENDS_CUDA_TABLE_CUDA_H

#include "shard/table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Carves layout on CUDA device `device` (kvs_device_tables_create) and
 * allocates the batch buffers. Every call runs on `stream` (a
 * cudaStream_t of `device`): pass the NCCL communicator's stream, so the
 * journal apply reads the broadcast's device buffer after the broadcast
 * wrote it and before the next one overwrites it (stream order does both);
 * NULL creates a non-blocking stream the table owns. With step options
 * (the node's step, table_cuda_step.h) the table runs on a stream of its
 * own whatever `stream` says, and allocates both parities' step buffers.
 * On success *ops and
 * *impl are the table for kvs_table_wrap and *bytes what it allocated on
 * the device; nothing stays allocated on failure. */
kvs_status kvs_cuda_table_open(int device, const kvs_device_layout *layout,
                               const kvs_table_limits *limits, void *stream,
                               const kvs_cuda_table_options *options, const kvs_table_ops **ops,
                               void **impl, uint64_t *bytes, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_CUDA_TABLE_CUDA_H */
