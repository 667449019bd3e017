// Launchers of the device-table kernels (backends/cuda/device_kernels.cuh): the
// launch sequences the .cuh defines, through nvcc's <<<>>> on the caller's
// stream.
#include <cuda_runtime.h>

#include "backends/cuda/device_kernels.cuh"
#include "backends/cuda/device_kernels.h"

using namespace kvs_kernels;

namespace {

// Keeps a parameter pack out of template argument deduction.
template <typename T>
struct Same {
  using type = T;
};

// launch(grid, threads, kernel, args...) on one stream through
// cudaLaunchKernel, whose return is this launch's own error (a <<<>>>
// launch can only be checked with cudaGetLastError, which also reports,
// and clears, an error the engine's own calls left); keeps the first.
struct StreamLaunch {
  cudaStream_t stream;
  cudaError_t error = cudaSuccess;

  template <typename... Params, typename... Args>
  bool operator()(unsigned grid, unsigned threads, void (*kernel)(Params...), Args... args) {
    // The parameters as the kernel declares them, one pointer to each.
    launch_as(grid, threads, kernel, static_cast<Params>(args)...);
    return error == cudaSuccess;
  }

  template <typename... Params>
  void launch_as(unsigned grid, unsigned threads, void (*kernel)(Params...),
                 typename Same<Params>::type... params) {
    void *pointers[] = {static_cast<void *>(&params)..., nullptr};
    error = cudaLaunchKernel(reinterpret_cast<const void *>(kernel), dim3(grid), dim3(threads),
                             pointers, 0, stream);
  }
};

// cudaFuncGetAttributes on one kernel: under lazy loading it loads the
// kernel (the documented way to load one before its launch).
struct LoadKernel {
  cudaError_t error = cudaSuccess;
  const char *failed = nullptr;

  template <typename... Params>
  bool operator()(void (*kernel)(Params...), const char *name) {
    cudaFuncAttributes attributes;
    error = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void *>(kernel));
    if (error != cudaSuccess) failed = name;
    return error == cudaSuccess;
  }
};

}  // namespace

extern "C" cudaError_t kvs_kernels_load(const char **failed) {
  LoadKernel load;
  for_each_kernel(load);
  if (failed != nullptr) *failed = load.failed;
  return load.error;
}

extern "C" cudaError_t kvs_launch_apply_journal(int64_t *map, kvs_table_dims dims,
                                                const kvs_journal_entry *entries, uint64_t n,
                                                const uint32_t *count, kvs_batch_fault *fault,
                                                uint32_t max_blocks, cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_apply_journal(launch, map, dims, entries, n, count, fault, max_blocks);
  return launch.error;
}

extern "C" cudaError_t kvs_launch_table_digest(const int64_t *map, kvs_table_dims dims,
                                               unsigned long long *out, uint32_t max_blocks,
                                               cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_table_digest(launch, map, dims, out, max_blocks);
  return launch.error;
}

extern "C" cudaError_t kvs_launch_rows_digest(const kvs_rows_unit *units, uint64_t n, uint64_t *out,
                                              uint32_t max_blocks, cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_rows_digest(launch, units, n, out, max_blocks);
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
                                                   const uint64_t *count, int64_t *out_csa,
                                                   int64_t *out_hca, kvs_batch_fault *fault,
                                                   uint32_t max_blocks, cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_batch_state_locs(launch, placement, own, slots, positions, n, count, out_csa, out_hca,
                          fault, max_blocks);
  return launch.error;
}

extern "C" cudaError_t kvs_launch_ring_ctx(const int64_t *map, kvs_table_dims dims,
                                           kvs_block_tables tables, const int64_t *positions,
                                           uint64_t n_req, const uint64_t *count, int64_t *own,
                                           int64_t *prev, int64_t *ring, kvs_batch_fault *fault,
                                           uint32_t max_blocks, cudaStream_t stream) {
  StreamLaunch launch{stream};
  launch_ring_ctx(launch, map, dims, tables, positions, n_req, count, own, prev, ring, fault,
                  max_blocks);
  return launch.error;
}
