// Launchers of the device-table kernels (cuda/device_kernels.cuh): one
// kernel launch each, on the caller's stream.
#include <cuda_runtime.h>

#include "cuda/device_kernels.cuh"
#include "cuda/device_kernels.h"

using namespace kvs_kernels;

extern "C" cudaError_t kvs_launch_apply_journal(int64_t *map, kvs_table_dims dims,
                                                const kvs_journal_entry *entries, uint64_t n,
                                                kvs_batch_fault *fault, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  apply_journal_kernel<<<apply_grid(n), kApplyThreads, 0, stream>>>(
      map, dims.page, dims.full_token / dims.page, dims.n_win_slots / dims.page, entries, n, fault);
  return cudaGetLastError();
}

extern "C" cudaError_t kvs_launch_translate(const int64_t *map, kvs_table_dims dims,
                                            const int64_t *locs, uint64_t n, int64_t *out,
                                            kvs_batch_fault *fault, uint32_t max_blocks,
                                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  translate_kernel<<<flat_grid(n, max_blocks), kFlatThreads, 0, stream>>>(map, dims.full_token,
                                                                          locs, n, out, fault);
  return cudaGetLastError();
}

extern "C" cudaError_t kvs_launch_state_locs(kvs_table_dims dims, const int64_t *slots, uint64_t n,
                                             int64_t *out_csa, int64_t *out_hca,
                                             kvs_batch_fault *fault, uint32_t max_blocks,
                                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  state_locs_kernel<<<flat_grid(n, max_blocks), kFlatThreads, 0, stream>>>(
      kvs_tm_div_make(dims.page), dims.n_win_slots, slots, n, out_csa, out_hca, fault);
  return cudaGetLastError();
}

extern "C" cudaError_t kvs_launch_ring_ctx(const int64_t *map, kvs_table_dims dims,
                                           kvs_block_tables tables, const int64_t *positions,
                                           uint64_t n_req, int64_t *own, int64_t *prev,
                                           int64_t *ring, kvs_batch_fault *fault,
                                           uint32_t max_blocks, cudaStream_t stream) {
  if (n_req == 0) return cudaSuccess;
  ring_ctx_kernel<<<ring_grid(n_req, max_blocks), kRingThreads, 0, stream>>>(
      map, dims.full_token, dims.page, kvs_tm_div_make(dims.page), tables.pages, tables.stride,
      kvs_tm_div_make(tables.block_size), positions, n_req, own, prev, ring, fault);
  return cudaGetLastError();
}
