/* kvshard with CUDA's types: for engines that hold a cudaStream_t. The
 * library itself loads CUDA only through its CUDA backend
 * (libkvshard-cuda.so.1); this header adds typed forms of kvshard.h's
 * opaque stream and event handles, nothing the library links.
 *
 *   cc engine.c $(pkg-config --cflags --libs kvshard) -I$CUDA_HOME/include */
#ifndef KVS_KVSHARD_CUDA_H
#define KVS_KVSHARD_CUDA_H

#include <cuda_runtime_api.h>

#include "kvshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The engine's stream: a step's device work is ordered against it (see
 * kvs_node_options.stream). */
static inline void kvs_node_options_set_stream(kvs_node_options *options, cudaStream_t stream) {
  options->stream = (void *)stream;
}

/* The event recorded after a step's device work (NULL on a host node). */
static inline cudaEvent_t kvs_node_step_event(const kvs_node_step_result *result) {
  return (cudaEvent_t)result->event;
}

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVSHARD_CUDA_H */
