/* The device implementation of shard/table.h: backends/cuda/device_tables on one
 * GPU, with device buffers and pinned staging for the largest batch. */
#ifndef KVS_SHARD_TABLE_CUDA_H
#define KVS_SHARD_TABLE_CUDA_H

#include <cuda_runtime_api.h>

#include "shard/table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Carves layout on CUDA device `device` (kvs_device_tables_create) and
 * allocates the batch buffers. Every call runs on `stream`: pass the NCCL
 * communicator's stream, so the journal apply reads the broadcast's
 * device buffer after the broadcast wrote it and before the next one
 * overwrites it (stream order does both); NULL creates a non-blocking
 * stream the table owns. The stream must belong to `device`. */
kvs_status kvs_table_create_cuda(int device, const kvs_device_layout *layout,
                                 const kvs_table_limits *limits, cudaStream_t stream,
                                 kvs_table_t *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_TABLE_CUDA_H */
