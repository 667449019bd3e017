// The device-table kernels themselves: one launch each per step, specified
// by their CPU references in core/device_ref.c and sharing its per-item
// arithmetic (core/table_math.h). Private to cuda/: compiled by nvcc in
// device_kernels.cu, and by the host compiler in the CPU emulation test
// (tests/cuda/kernel_emulation.h supplies the CUDA built-ins there), so
// the kernel source itself is exercised on machines without a GPU.
//
// All four are memory-bound gathers and scatters of int64 slots, so the
// design rule is the same throughout: consecutive lanes touch consecutive
// 8-byte rows (every warp access is whole 32-byte sectors), independent
// loads are issued together before their results are used (latency, not
// bandwidth, is what a one-wave kernel waits on), and no kernel needs a
// second launch or a host round trip.
#ifndef KVS_DEVICE_KERNELS_CUH
#define KVS_DEVICE_KERNELS_CUH

#include <stdint.h>

#include "core/device_ref.h"
#include "core/journal.h"
#include "core/table_math.h"

namespace kvs_kernels {

constexpr unsigned kWarp = 32;

// Items at fault: a count, and the lowest index. Faults are exceptional, so
// two atomics on one record per faulting item cost nothing in practice.
__device__ inline void note_fault(kvs_batch_fault *fault, uint64_t index) {
  atomicAdd(reinterpret_cast<unsigned long long *>(&fault->count), 1ull);
  atomicMin(reinterpret_cast<unsigned long long *>(&fault->first_index),
            static_cast<unsigned long long>(index));
}

// ---- apply a binding journal ----
//
// Entries are applied in parallel, so order must be recovered: where
// several entries name one full page, only the last fitting one may write
// (what a sequential replay leaves). Each block owns kApplyEntries entries
// and scans the entries after them for a later fitting entry on the same
// full page, then writes the survivors' rows, one warp per page, lanes
// striding the page's P rows (32 x 8 contiguous bytes per store).
//
// The scan reads the rest of the journal once per block, from L2 (16 B x n
// per block), four independent loads per thread at a time so a 4096-entry
// journal costs a few L2 round trips, not sixteen. A 1024-bit filter of the
// block's own full pages answers almost every later entry with one shared
// load; only a filter hit walks the block's 32 entries. A 4096-page step is
// 128 blocks in one wave writing 4 MiB.
constexpr unsigned kApplyEntries = 32;
constexpr unsigned kApplyThreads = 256;
constexpr unsigned kApplyScanUnroll = 4;
constexpr unsigned kApplyFilterWords = 32;  // 1024 bits

__device__ inline unsigned apply_filter_bit(uint64_t full_page) {
  // Knuth's multiplicative hash: the top 10 bits of a 32-bit product.
  return (static_cast<uint32_t>(full_page) * 2654435761u) >> 22;
}

__global__ void __launch_bounds__(kApplyThreads)
    apply_journal_kernel(int64_t *__restrict__ map, uint64_t page, uint64_t n_full_pages,
                         uint64_t n_win_pages, const kvs_journal_entry *__restrict__ entries,
                         uint64_t n, kvs_batch_fault *fault) {
  __shared__ uint64_t full_page[kApplyEntries];
  __shared__ int64_t window_page[kApplyEntries];
  __shared__ int live[kApplyEntries];
  __shared__ unsigned filter[kApplyFilterWords];
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kApplyEntries;
  const uint64_t left = n - first;
  const unsigned count = left < kApplyEntries ? static_cast<unsigned>(left) : kApplyEntries;

  if (threadIdx.x < kApplyFilterWords) filter[threadIdx.x] = 0;
  __syncthreads();
  if (threadIdx.x < count) {
    const kvs_journal_entry e = entries[first + threadIdx.x];
    const int fits = kvs_tm_entry_fits(n_full_pages, n_win_pages, e.full_page, e.window_page);
    full_page[threadIdx.x] = e.full_page;
    window_page[threadIdx.x] = e.window_page;
    live[threadIdx.x] = fits;
    if (fits) {
      const unsigned bit = apply_filter_bit(e.full_page);
      atomicOr(&filter[bit / 32], 1u << (bit % 32));
    } else {
      note_fault(fault, first + threadIdx.x);
    }
  }
  __syncthreads();

  // A later fitting entry on the same full page supersedes entry k.
  for (uint64_t base = first + 1 + threadIdx.x; base < n;
       base += static_cast<uint64_t>(kApplyScanUnroll) * blockDim.x) {
    kvs_journal_entry later[kApplyScanUnroll];
#pragma unroll
    for (unsigned u = 0; u < kApplyScanUnroll; u++) {
      const uint64_t j = base + static_cast<uint64_t>(u) * blockDim.x;
      if (j < n) {
        later[u] = entries[j];
      } else {
        later[u].full_page = 0;
        later[u].window_page = -2;  // fits nothing: skipped below
      }
    }
#pragma unroll
    for (unsigned u = 0; u < kApplyScanUnroll; u++) {
      const kvs_journal_entry e = later[u];
      if (!kvs_tm_entry_fits(n_full_pages, n_win_pages, e.full_page, e.window_page)) continue;
      const unsigned bit = apply_filter_bit(e.full_page);
      if (((filter[bit / 32] >> (bit % 32)) & 1u) == 0) continue;
      const uint64_t j = base + static_cast<uint64_t>(u) * blockDim.x;
      const uint64_t before = j - first;  // entries k < before precede j
      const unsigned k_end = before < count ? static_cast<unsigned>(before) : count;
      for (unsigned k = 0; k < k_end; k++) {
        if (full_page[k] == e.full_page) atomicAnd(&live[k], 0);
      }
    }
  }
  __syncthreads();

  const unsigned warp = threadIdx.x / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  for (unsigned k = warp; k < count; k += kApplyThreads / kWarp) {
    if (!live[k]) continue;
    int64_t *rows = map + full_page[k] * page;
    const int64_t w = window_page[k];
    for (uint64_t offset = lane; offset < page; offset += kWarp) {
      rows[offset] = kvs_tm_entry_row(w, page, offset);
    }
  }
}

// ---- translate ----
//
// One thread per loc: read the loc, gather its row, write the slot. The
// locs of a step are mostly whole pages, so the gathers coalesce too: 24
// bytes of traffic per loc.
constexpr unsigned kFlatThreads = 256;

__global__ void __launch_bounds__(kFlatThreads)
    translate_kernel(const int64_t *__restrict__ map, uint64_t full_token,
                     const int64_t *__restrict__ locs, uint64_t n, int64_t *__restrict__ out,
                     kvs_batch_fault *fault) {
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    uint64_t row;
    int64_t slot = -1;
    if (kvs_tm_row_of(locs[i], full_token, &row)) {
      slot = map[row];
    } else {
      note_fault(fault, i);
    }
    out[i] = slot;
  }
}

// ---- ring (state) locations ----
//
// Pure arithmetic per slot, both rings in the one pass: 8 bytes in, 16 out.
// P and the ring sizes are powers of two in practice, so the divisions are
// shifts and masks (kvs_tm_div).
__global__ void __launch_bounds__(kFlatThreads)
    state_locs_kernel(kvs_tm_div page, uint64_t n_win_slots, const int64_t *__restrict__ slots,
                      uint64_t n, int64_t *__restrict__ out_csa, int64_t *__restrict__ out_hca,
                      kvs_batch_fault *fault) {
  const kvs_tm_div csa = kvs_tm_div_make(KVS_RING_SLOTS_CSA);
  const kvs_tm_div hca = kvs_tm_div_make(KVS_RING_SLOTS_HCA);
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    const int64_t slot = slots[i];
    int64_t a = -1, b = -1;
    if (slot >= 0 && static_cast<uint64_t>(slot) >= n_win_slots) {
      note_fault(fault, i);
    } else if (slot >= 0) {
      a = kvs_tm_state_loc(slot, page, csa);
      b = kvs_tm_state_loc(slot, page, hca);
    }
    if (out_csa != nullptr) out_csa[i] = a;
    if (out_hca != nullptr) out_hca[i] = b;
  }
}

// ---- ring context ----
//
// One warp per request. Lane l takes ring slots j = l, l + 32, ...; the
// positions those slots hold are consecutive (one wrap at j0), so the
// block-table reads are warp broadcasts of one or two entries and the
// mapping reads are contiguous runs of 8-byte rows; the ring row is
// written as 32 x 8 contiguous bytes per instruction. Lanes 0 and 1 also
// take the own and previous slots in the same pass, so a request costs
// three dependent memory round trips (position, block table, mapping)
// whatever P is, and every load of a round is issued before any is used.
// Per request: 8 B position, P x 8 B mapping reads, (P + 2) x 8 B writes.
constexpr unsigned kRingThreads = 256;
constexpr unsigned kRingUnroll = 4;  // 4 x 32 lanes cover P = 128 in one round

__global__ void __launch_bounds__(kRingThreads)
    ring_ctx_kernel(const int64_t *__restrict__ map, uint64_t full_token, uint64_t page,
                    kvs_tm_div page_div, const int32_t *__restrict__ pages, uint64_t stride,
                    kvs_tm_div block_div, const int64_t *__restrict__ positions, uint64_t n_req,
                    int64_t *__restrict__ own, int64_t *__restrict__ prev,
                    int64_t *__restrict__ ring, kvs_batch_fault *fault) {
  const unsigned lane = threadIdx.x % kWarp;
  const uint64_t warps_per_block = blockDim.x / kWarp;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * warps_per_block;
  for (uint64_t r = static_cast<uint64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp;
       r < n_req; r += step) {
    const int64_t pos = positions[r];
    int64_t *ring_row = ring + r * page;
    if (pos < 0) {  // an idle (padding) row
      for (uint64_t j = lane; j < page; j += kWarp) ring_row[j] = -1;
      if (lane == 0) own[r] = -1;
      if (lane == 1) prev[r] = -1;
      continue;
    }
    const int32_t *row = pages + r * stride;
    int bad = 0;
    // The own and previous slots ride along with the first round.
    const int64_t extra_pos = lane == 0 ? pos : lane == 1 ? (pos > 0 ? pos - 1 : 0) : -1;
    for (uint64_t base = 0; base < page; base += kWarp * kRingUnroll) {
      uint64_t index[kRingUnroll + 1];
      bool read[kRingUnroll + 1];
#pragma unroll
      for (unsigned u = 0; u <= kRingUnroll; u++) {
        int64_t p;
        if (u < kRingUnroll) {
          const uint64_t j = base + u * kWarp + lane;
          p = j < page ? kvs_tm_ring_position(pos, j, page_div) : -1;
        } else {
          p = base == 0 ? extra_pos : -1;
        }
        int64_t loc = -1;
        index[u] = 0;
        read[u] = false;
        if (p >= 0) {
          if (kvs_tm_block_loc(row, stride, block_div, p, &loc) &&
              kvs_tm_row_of(loc, full_token, &index[u])) {
            read[u] = true;
          } else {
            bad = 1;
          }
        }
      }
      int64_t slot[kRingUnroll + 1];
#pragma unroll
      for (unsigned u = 0; u <= kRingUnroll; u++) slot[u] = read[u] ? map[index[u]] : -1;
#pragma unroll
      for (unsigned u = 0; u < kRingUnroll; u++) {
        const uint64_t j = base + u * kWarp + lane;
        if (j < page) ring_row[j] = slot[u];
      }
      if (base == 0) {
        if (lane == 0) own[r] = slot[kRingUnroll];
        if (lane == 1) prev[r] = slot[kRingUnroll];
      }
    }
    if (__any_sync(0xffffffffu, bad) && lane == 0) note_fault(fault, r);
  }
}

// Launch shapes, shared by the launchers and the CPU emulation test so both
// run the kernels over the same grids.
inline unsigned capped_grid(uint64_t items, unsigned per_block, uint32_t max_blocks) {
  uint64_t blocks = (items + per_block - 1) / per_block;
  if (max_blocks == 0) max_blocks = 1;
  return static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks);
}

// Every apply block owns its entries outright, so that grid is never capped.
inline unsigned apply_grid(uint64_t n) {
  return static_cast<unsigned>((n + kApplyEntries - 1) / kApplyEntries);
}

inline unsigned flat_grid(uint64_t n, uint32_t max_blocks) {
  return capped_grid(n, kFlatThreads, max_blocks);
}

inline unsigned ring_grid(uint64_t n_req, uint32_t max_blocks) {
  return capped_grid(n_req, kRingThreads / kWarp, max_blocks);
}

}  // namespace kvs_kernels

#endif  // KVS_DEVICE_KERNELS_CUH
