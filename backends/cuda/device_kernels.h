/* Launchers of the device-table kernels (private to backends/cuda; callers
 * use backends/cuda/device_tables.h). Each launches its kernels on `stream`
 * (one; two for the journal apply) and returns the first launch error;
 * arguments were checked by the caller.
 * Pointers are device pointers. Each kernel computes what its CPU
 * reference in core/device_ref.h computes, bit for bit, faults included.
 *
 * max_blocks caps the grid (a few waves of the device's multiprocessors);
 * the kernels loop over whatever a capped grid does not cover.
 *
 * `count`, where a launcher takes one, is NULL (n items) or a device
 * word holding the item count (at most n: the grid is sized for n), so a
 * step's launches need no host round trip and can be captured in a CUDA
 * graph (the apply reads the step message's own count field). Launch
 * errors are cudaLaunchKernel's own return: no launcher reads the
 * thread's last error, which may be the engine's. */
#ifndef KVS_BACKENDS_CUDA_DEVICE_KERNELS_H
#define KVS_BACKENDS_CUDA_DEVICE_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "core/device_ref.h"
#include "pool/journal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Entries are read from `entries` (n of them, n < 2^62); the last fitting
 * entry per full page wins; entries that do not fit are skipped and
 * faulted; request-slot entries (KVS_JOURNAL_SLOT_TAG) are skipped without
 * a fault. O(n): every entry is read twice (device_kernels.cuh). */
cudaError_t kvs_launch_apply_journal(int64_t *map, kvs_table_dims dims,
                                     const kvs_journal_entry *entries, uint64_t n,
                                     const uint32_t *count, kvs_batch_fault *fault,
                                     uint32_t max_blocks, cudaStream_t stream);

cudaError_t kvs_launch_translate(const int64_t *map, kvs_table_dims dims, const int64_t *locs,
                                 uint64_t n, int64_t *out, kvs_batch_fault *fault,
                                 uint32_t max_blocks, cudaStream_t stream);

/* out_csa or out_hca may be NULL (not both). */
cudaError_t kvs_launch_state_locs(kvs_table_dims dims, const int64_t *slots, uint64_t n,
                                  int64_t *out_csa, int64_t *out_hca, kvs_batch_fault *fault,
                                  uint32_t max_blocks, cudaStream_t stream);

/* The batch's ring locations (kvs_ref_batch_state_locs): own, slots and
 * positions are read where the requested outputs need them (own for a
 * ring kind per window page, slots for one per request); out_csa or
 * out_hca may be NULL (not both). */
cudaError_t kvs_launch_batch_state_locs(kvs_state_placement placement, const int64_t *own,
                                        const int64_t *slots, const int64_t *positions, uint64_t n,
                                        const uint64_t *count, int64_t *out_csa, int64_t *out_hca,
                                        kvs_batch_fault *fault, uint32_t max_blocks,
                                        cudaStream_t stream);

/* tables.pages is a device pointer. */
cudaError_t kvs_launch_ring_ctx(const int64_t *map, kvs_table_dims dims, kvs_block_tables tables,
                                const int64_t *positions, uint64_t n_req, const uint64_t *count,
                                int64_t *own, int64_t *prev, int64_t *ring, kvs_batch_fault *fault,
                                uint32_t max_blocks, cudaStream_t stream);

/* *out += the table's binding digest (the pool's page digest, from the
 * table): the caller zeroes *out first, on the same stream. */
cudaError_t kvs_launch_table_digest(const int64_t *map, kvs_table_dims dims,
                                    unsigned long long *out, uint32_t max_blocks,
                                    cudaStream_t stream);

/* out[u] = the digest of units[u] (kvs_ref_rows_digest) for u < n: units
 * and out are device memory, and so is every unit's rows. */
cudaError_t kvs_launch_rows_digest(const kvs_rows_unit *units, uint64_t n, uint64_t *out,
                                   uint32_t max_blocks, cudaStream_t stream);

/* Loads every kernel of the library into the current context now
 * (cudaFuncGetAttributes on each), so that no launch loads a module under
 * CUDA's lazy loading: a load at the first step can wait on the whole
 * context while the engine's NCCL kernels wait on a peer. On failure
 * *failed names the kernel (the caller's device current). */
cudaError_t kvs_kernels_load(const char **failed);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_CUDA_DEVICE_KERNELS_H */
