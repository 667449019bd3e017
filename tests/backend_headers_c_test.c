/* kvshard_cuda.h, kvshard_nccl.h and kvshard_mpi.h compile as strict C11
 * with their vendors' headers, each usable on its own, and their helpers
 * keep the typed handles' sizes: the CUDA stream and event round-trip
 * through kvshard.h's opaque pointers, an ncclUniqueId is the id kvshard
 * shares. Nothing here calls CUDA, NCCL or MPI. */
#include "kvshard_cuda.h"
#include "kvshard_mpi.h"
#include "kvshard_nccl.h"

int main(void) {
  kvs_node_options o;
  kvs_node_options_init(&o);
  cudaStream_t stream = (cudaStream_t)(void *)&o;
  kvs_node_options_set_stream(&o, stream);
  kvs_node_step_result r = {.size = sizeof r};
  r.event = (void *)&r;
  return o.stream == (void *)stream && kvs_node_step_event(&r) == (cudaEvent_t)(void *)&r &&
                 sizeof(ncclUniqueId) == KVS_NCCL_UNIQUE_ID_BYTES
             ? 0
             : 1;
}
