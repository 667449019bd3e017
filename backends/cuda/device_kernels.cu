// Launchers of the device-table kernels (backends/cuda/device_kernels.cuh): the
// launch sequences the .cuh defines, through nvcc's <<<>>> on the caller's
// stream.
#include <cuda_runtime.h>

#include "backends/cuda/device_kernels.cuh"
#include "backends/cuda/device_kernels.h"

using namespace kvs_kernels;

namespace {

// launch(grid, threads, kernel, args...) on one stream; keeps the first
// launch error.
struct StreamLaunch {
  cudaStream_t stream;
  cudaError_t error = cudaSuccess;

  template <typename... Params, typename... Args>
  bool operator()(unsigned grid, unsigned threads, void (*kernel)(Params...), Args... args) {
    kernel<<<grid, threads, 0, stream>>>(args...);
    error = cudaGetLastError();
    return error == cudaSuccess;
  }
};

}  // namespace

extern "C" cudaError_t kvs_launch_apply_journal(int64_t *map, kvs_table_dims dims,
                                                const kvs_journal_entry *entries, uint64_t n,
                                                kvs_batch_fault *fault, uint32_t max_blocks,
                                                cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_apply_journal(launch, map, dims, entries, n, fault, max_blocks);
  return launch.error;
}

extern "C" cudaError_t kvs_launch_translate(const int64_t *map, kvs_table_dims dims,
                                            const int64_t *locs, uint64_t n, int64_t *out,
                                            kvs_batch_fault *fault, uint32_t max_blocks,
                                            cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_translate(launch, map, dims, locs, n, out, fault, max_blocks);
  return launch.error;
}

extern "C" cudaError_t kvs_launch_state_locs(kvs_table_dims dims, const int64_t *slots, uint64_t n,
                                             int64_t *out_csa, int64_t *out_hca,
                                             kvs_batch_fault *fault, uint32_t max_blocks,
                                             cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_state_locs(launch, dims, slots, n, out_csa, out_hca, fault, max_blocks);
  return launch.error;
}

extern "C" cudaError_t kvs_launch_batch_state_locs(kvs_state_placement placement,
                                                   const int64_t *own, const int64_t *slots,
                                                   const int64_t *positions, uint64_t n,
                                                   int64_t *out_csa, int64_t *out_hca,
                                                   kvs_batch_fault *fault, uint32_t max_blocks,
                                                   cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_batch_state_locs(launch, placement, own, slots, positions, n, out_csa, out_hca, fault,
                          max_blocks);
  return launch.error;
}

extern "C" cudaError_t kvs_launch_ring_ctx(const int64_t *map, kvs_table_dims dims,
                                           kvs_block_tables tables, const int64_t *positions,
                                           uint64_t n_req, int64_t *own, int64_t *prev,
                                           int64_t *ring, kvs_batch_fault *fault,
                                           uint32_t max_blocks, cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_ring_ctx(launch, map, dims, tables, positions, n_req, own, prev, ring, fault, max_blocks);
  return launch.error;
}
