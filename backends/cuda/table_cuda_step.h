/* The node's step on a GPU (private to backends/cuda): the step's journal
 * and ring contexts queued on the table's own stream with no host round
 * trip, ordered by events against the communicator's stream (after the
 * broadcast that wrote the message; before the broadcast that rewrites
 * it) and the engine's (after its reads of the results two steps back;
 * before its next work), everything in two buffers by step parity, and
 * each parity's work captured once as a CUDA graph and replayed. */
#ifndef KVS_BACKENDS_CUDA_TABLE_CUDA_STEP_H
#define KVS_BACKENDS_CUDA_TABLE_CUDA_STEP_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/cuda/device_tables.h"
#include "shard/table.h"

typedef struct cuda_step cuda_step;

/* What the step needs of its table. */
typedef struct cuda_step_setup {
  kvs_device_tables_t tables;
  int device;
  cudaStream_t stream; /* the table's own */
  kvs_cuda_table_options options;
  size_t max_rows;
  kvs_table_dims dims;
  kvs_state_placement placement;
  bool csa_derivable, hca_derivable;
} cuda_step_setup;

/* Allocates both parities' buffers and events, with the device current.
 * *bytes is what it allocated on the device. Nothing stays allocated on
 * failure. */
kvs_status kvs_cuda_step_create(const cuda_step_setup *setup, cuda_step **out, uint64_t *bytes,
                                kvs_error *err);
/* With the device current; waits for nothing (the table's stream is
 * synchronised by its owner first). */
void kvs_cuda_step_destroy(cuda_step *step);

/* Queues the step (kvs_table_step). With a host communicator the message
 * is staged by the table, which first waits (on the host) for the same
 * parity's previous step, done long before; with a device communicator
 * nothing waits on the host. */
kvs_status kvs_cuda_step_run(cuda_step *step, const kvs_table_step_args *args, kvs_ring_result *out,
                             void **event, kvs_table_step_timing *timing, kvs_error *err);

/* Before the first step (kvs_table_set_results): results copied into the
 * engine's buffers, and releases said by the engine. */
kvs_status kvs_cuda_step_set_results(cuda_step *step, const kvs_table_results *into,
                                     bool explicit_release, kvs_error *err);
/* The engine's reads of step `step`'s results queued on `stream`
 * (kvs_table_release): an event there, which the step that next writes
 * those results waits for. */
kvs_status kvs_cuda_step_release(cuda_step *step, uint64_t step_number, cudaStream_t stream,
                                 kvs_error *err);
/* KVS_ERR_INVALID_ARGUMENT naming `what` when `stream` is capturing a
 * graph (or its capture was invalidated); KVS_OK for NULL. */
kvs_status kvs_cuda_stream_not_capturing(cudaStream_t stream, const char *what, kvs_error *err);

/* The table's binding digest, computed on the table's stream; waits for
 * its 8 bytes. */
kvs_status kvs_cuda_step_digest(cuda_step *step, uint64_t *out, kvs_error *err);

#endif /* KVS_BACKENDS_CUDA_TABLE_CUDA_STEP_H */
