// The device-table kernels themselves: one launch per step each (two for
// the journal apply), specified
// by their CPU references in core/device_ref.c and sharing its per-item
// arithmetic (core/table_math.h). Private to cuda/: compiled by nvcc in
// device_kernels.cu, and by the host compiler in the CPU emulation test
// (tests/backends/cuda/kernel_emulation.h supplies the CUDA built-ins there), so
// the kernel source itself is exercised on machines without a GPU.
//
// All five are memory-bound gathers and scatters of int64 slots, so the
// design rule is the same throughout: consecutive lanes touch consecutive
// 8-byte rows (every warp access is whole 32-byte sectors), independent
// loads are issued together before their results are used (latency, not
// bandwidth, is what a one-wave kernel waits on), and no kernel needs a
// host round trip.
#ifndef KVS_BACKENDS_CUDA_DEVICE_KERNELS_CUH
#define KVS_BACKENDS_CUDA_DEVICE_KERNELS_CUH

#include <stdint.h>

#include "core/device_ref.h"
#include "pool/journal.h"
#include "core/mix.h"
#include "core/table_math.h"

// Counts journal entries loaded from global memory, for the CPU emulation
// (tests/backends/cuda/kernel_emulation.h), where a test bounds the apply's work;
// nothing on the device.
#ifndef KVS_KERNEL_COUNT_ENTRY_LOADS
#define KVS_KERNEL_COUNT_ENTRY_LOADS(n) ((void)0)
#endif

namespace kvs_kernels {

constexpr unsigned kWarp = 32;

// Items at fault: a count, and the lowest index. Faults are exceptional, so
// two atomics on one record per faulting item cost nothing in practice.
__device__ inline void note_fault(kvs_batch_fault *fault, uint64_t index) {
  atomicAdd(reinterpret_cast<unsigned long long *>(&fault->count), 1ull);
  atomicMin(reinterpret_cast<unsigned long long *>(&fault->first_index),
            static_cast<unsigned long long>(index));
}

// How many items a launch covers: `n` (the grid's capacity), or, with a
// count in device memory (a step message's header, a step batch's first
// word), that count capped at n. A count past the capacity is itself a
// fault of item n (a message the host would have refused). Kernels that
// take their count from device memory run over a grid sized for capacity
// with no host round trip, so one launch can be captured in a CUDA graph
// and replayed every step.
template <typename Count>
__device__ inline uint64_t item_count(const Count *count, uint64_t n, kvs_batch_fault *fault) {
  if (count == nullptr) return n;
  const uint64_t c = static_cast<uint64_t>(*count);
  if (c > n && fault != nullptr && blockIdx.x == 0 && threadIdx.x == 0) note_fault(fault, n);
  return c < n ? c : n;
}

// ---- apply a binding journal ----
//
// Entries are applied in parallel, so order must be recovered: where
// several entries name one full page, only the last fitting one may write
// (what a sequential replay leaves). Two passes, each reading every entry
// once, so a batch costs O(n) whatever its size:
//
//   mark   one thread per entry: a fitting entry raises its full page's
//          first row to kApplyMark + its index (atomicMax). The mark
//          exceeds every slot a row can hold (slots < 2^62), so after the
//          pass that row holds the mark of the page's last fitting entry.
//          Entries that do not fit are faulted.
//   write  one warp per entry: the entry whose mark its page's first row
//          holds is the page's last fitting entry; its warp writes the
//          page's P rows, lanes striding them (32 x 8 contiguous bytes per
//          store), the mark included. Every lane reads the mark before any
//          lane overwrites it (__syncwarp), and a superseded entry reads
//          either the winner's mark or the winner's row, never its own.
//
// Between the passes touched pages hold a mark in their first row: the
// table is not readable until the write pass is done, which the stream
// order gives every reader on the same stream (as it must anyway: a reader
// racing an apply sees a page half old, half new). A 4096-page step is
// 4096 atomics then 4096 warps writing 4 MiB.
constexpr unsigned kApplyThreads = 256;
constexpr int64_t kApplyMark = int64_t(1) << 62;

__global__ void __launch_bounds__(kApplyThreads)
    apply_mark_kernel(int64_t *__restrict__ map, uint64_t page, uint64_t n_full_pages,
                      uint64_t n_win_pages, const kvs_journal_entry *__restrict__ entries,
                      uint64_t capacity, const uint32_t *count, kvs_batch_fault *fault) {
#ifdef KVS_MUTANT_APPLY_IGNORES_COUNT /* planted bug, test builds only (tests/mutants) */
  const uint64_t n = capacity;        // every entry of the buffer, whatever the count says
  (void)count;
#else
  const uint64_t n = item_count(count, capacity, fault);
#endif
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    KVS_KERNEL_COUNT_ENTRY_LOADS(1);
    const kvs_journal_entry e = entries[i];
    if (kvs_tm_entry_is_slot(e.full_page)) {
      // A request-slot entry: the host pool's, never the table's.
    } else if (kvs_tm_entry_fits(n_full_pages, n_win_pages, e.full_page, e.window_page)) {
      atomicMax(reinterpret_cast<long long *>(map + e.full_page * page),
                static_cast<long long>(kApplyMark + static_cast<int64_t>(i)));
    } else {
      note_fault(fault, i);
    }
  }
}

__global__ void __launch_bounds__(kApplyThreads)
    apply_write_kernel(int64_t *__restrict__ map, uint64_t page, uint64_t n_full_pages,
                       uint64_t n_win_pages, const kvs_journal_entry *__restrict__ entries,
                       uint64_t capacity, const uint32_t *count) {
  const uint64_t n = item_count(count, capacity, static_cast<kvs_batch_fault *>(nullptr));
  const unsigned lane = threadIdx.x % kWarp;
  const uint64_t warps_per_block = blockDim.x / kWarp;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * warps_per_block;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp;
       i < n; i += step) {
    KVS_KERNEL_COUNT_ENTRY_LOADS(1);
    const kvs_journal_entry e = entries[i];
    // A request-slot entry never writes (the mark pass skipped it without
    // a fault); rows is formed only for an entry inside the table.
    const bool fits = !kvs_tm_entry_is_slot(e.full_page) &&
                      kvs_tm_entry_fits(n_full_pages, n_win_pages, e.full_page, e.window_page);
    int64_t *rows = fits ? map + e.full_page * page : map;
    const bool last = fits && rows[0] == kApplyMark + static_cast<int64_t>(i);
    __syncwarp();
    if (!last) continue;
    for (uint64_t offset = lane; offset < page; offset += kWarp) {
      rows[offset] = kvs_tm_entry_row(e.window_page, page, offset);
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

// ---- ring locations of a decode batch ----
//
// One thread per row, pure arithmetic after the loads: the position, then
// the window slot and/or request slot the requested outputs read, all
// issued before use; 8 + 16 bytes in and 16 out per row. A ring kind per
// window page derives its location from the window slot
// (kvs_tm_state_loc), one per request from the request slot and the
// position (kvs_tm_request_state_loc); kvs_tm_batch_ring_loc picks.
// A row faults once, whichever of its rings reached past its pool.
__global__ void __launch_bounds__(kFlatThreads)
    batch_state_locs_kernel(kvs_tm_div page, int csa_req, int hca_req, uint64_t n_win_slots,
                            uint64_t n_req_slots, const int64_t *__restrict__ own,
                            const int64_t *__restrict__ slots,
                            const int64_t *__restrict__ positions, uint64_t capacity,
                            const uint64_t *count, int64_t *__restrict__ out_csa,
                            int64_t *__restrict__ out_hca, kvs_batch_fault *fault) {
  const uint64_t n = item_count(count, capacity, static_cast<kvs_batch_fault *>(nullptr));
  const kvs_tm_div csa = kvs_tm_div_make(KVS_RING_SLOTS_CSA);
  const kvs_tm_div hca = kvs_tm_div_make(KVS_RING_SLOTS_HCA);
  const bool need_own = (out_csa != nullptr && !csa_req) || (out_hca != nullptr && !hca_req);
  const bool need_slots = (out_csa != nullptr && csa_req) || (out_hca != nullptr && hca_req);
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step) {
    const int64_t pos = positions[i];
    const int64_t w = need_own ? own[i] : -1;
    const int64_t s = need_slots ? slots[i] : -1;
    int64_t a = -1, b = -1;
    int bad = 0;
    if (pos >= 0) {
      if (out_csa != nullptr) {
        a = kvs_tm_batch_ring_loc(csa_req, w, s, pos, page, csa, n_win_slots, n_req_slots, &bad);
      }
      if (out_hca != nullptr) {
        b = kvs_tm_batch_ring_loc(hca_req, w, s, pos, page, hca, n_win_slots, n_req_slots, &bad);
      }
    }
    if (out_csa != nullptr) out_csa[i] = a;
    if (out_hca != nullptr) out_hca[i] = b;
    if (bad) note_fault(fault, i);
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
                    kvs_tm_div block_div, const int64_t *__restrict__ positions, uint64_t capacity,
                    const uint64_t *count, int64_t *__restrict__ own, int64_t *__restrict__ prev,
                    int64_t *__restrict__ ring, kvs_batch_fault *fault) {
  const uint64_t n_req = item_count(count, capacity, fault);
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

// ---- the table's binding digest ----
//
// The sum over full pages of kvs_binding_pair_term(page, window page) for
// every bound page (the dummy included), the pool's own page digest
// (pool/window_pool.c) computed from the table itself: a check brings 8
// bytes back instead of the mapping. One thread per page reads the page's
// first row; a block sums in shared memory and adds its sum to *out
// (which the caller zeroes first: the sum wraps modulo 2^64, as the pool's
// does, so the order of the additions does not matter).
constexpr unsigned kDigestThreads = 256;

__global__ void __launch_bounds__(kDigestThreads)
    table_digest_kernel(const int64_t *__restrict__ map, uint64_t page, uint64_t n_full_pages,
                        unsigned long long *out) {
  __shared__ unsigned long long partial[kDigestThreads];
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long sum = 0;
  for (uint64_t p = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n_full_pages;
       p += step) {
    const int64_t slot = map[p * page];
    if (slot >= 0) sum += kvs_binding_pair_term(p, static_cast<uint64_t>(slot) / page);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, partial[0]);
}

// ---- a transfer's rows digests ----
//
// One block per unit (grid-stride over the units), its threads over the
// unit's 8-byte words; each thread sums its words' terms and the block
// adds the partial sums in shared memory (kvs_ref_rows_digest is the
// specification). A word wholly inside the unit at an 8-byte aligned
// address is one load; the last, short word and a unit that is not
// aligned (an fp8 page's odd widths) are read byte by byte.
constexpr unsigned kRowsThreads = 256;

__device__ inline uint64_t rows_word(const unsigned char *p, uint64_t i, uint64_t bytes) {
  const uint64_t at = i * 8;
  if (at + 8 <= bytes && (reinterpret_cast<uintptr_t>(p) & 7u) == 0) {
    return *reinterpret_cast<const uint64_t *>(p + at);
  }
  uint64_t word = 0;
  for (unsigned b = 0; b < 8 && at + b < bytes; b++) {
    word |= static_cast<uint64_t>(p[at + b]) << (8 * b);
  }
  return word;
}

__global__ void __launch_bounds__(kRowsThreads)
    rows_digest_kernel(const kvs_rows_unit *__restrict__ units, uint64_t n, uint64_t *out) {
  __shared__ unsigned long long partial[kRowsThreads];
  for (uint64_t u = blockIdx.x; u < n; u += gridDim.x) {
    const kvs_rows_unit unit = units[u];
    const unsigned char *p = static_cast<const unsigned char *>(unit.rows);
#ifdef KVS_MUTANT_ROWS_DIGEST_DROPS_TAIL /* planted bug, test builds only (tests/mutants) */
    const uint64_t words = unit.bytes / 8;
#else
    const uint64_t words = (unit.bytes + 7) / 8;
#endif
    unsigned long long sum = 0;
    for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) {
      sum += kvs_rows_word_term(unit.seed, i, rows_word(p, i, unit.bytes));
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[u] = kvs_rows_digest_finish(partial[0], unit.bytes, unit.seed);
    // Every thread has read partial[0]'s round before the next unit writes it.
    __syncthreads();
  }
}

// Launch shapes, shared by the launchers and the CPU emulation test so both
// run the kernels over the same grids.
inline unsigned capped_grid(uint64_t items, unsigned per_block, uint32_t max_blocks) {
  uint64_t blocks = (items + per_block - 1) / per_block;
  if (max_blocks == 0) max_blocks = 1;
  return static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks);
}

inline unsigned apply_mark_grid(uint64_t n, uint32_t max_blocks) {
  return capped_grid(n, kApplyThreads, max_blocks);
}

inline unsigned apply_write_grid(uint64_t n, uint32_t max_blocks) {
  return capped_grid(n, kApplyThreads / kWarp, max_blocks);
}

inline unsigned flat_grid(uint64_t n, uint32_t max_blocks) {
  return capped_grid(n, kFlatThreads, max_blocks);
}

inline unsigned ring_grid(uint64_t n_req, uint32_t max_blocks) {
  return capped_grid(n_req, kRingThreads / kWarp, max_blocks);
}

// ---- launches ----
//
// Each launcher of device_kernels.h as the kernel launches it makes,
// through `launch(grid, threads, kernel, args...)`, which returns true when
// the launch was accepted: nvcc's <<<>>> in device_kernels.cu, the CPU
// emulation in the tests and the stand-in, so all run the same kernels over
// the same grids.
// count NULL: n entries; else *count entries (device memory), at most n
// (the grids are sized for n either way).
template <typename Launch>
bool launch_apply_journal(Launch &&launch, int64_t *map, kvs_table_dims dims,
                          const kvs_journal_entry *entries, uint64_t n, const uint32_t *count,
                          kvs_batch_fault *fault, uint32_t max_blocks) {
  if (n == 0) return true;
  const uint64_t full_pages = dims.full_token / dims.page, win_pages = dims.n_win_slots / dims.page;
  return launch(apply_mark_grid(n, max_blocks), kApplyThreads, apply_mark_kernel, map, dims.page,
                full_pages, win_pages, entries, n, count, fault) &&
         launch(apply_write_grid(n, max_blocks), kApplyThreads, apply_write_kernel, map, dims.page,
                full_pages, win_pages, entries, n, count);
}

template <typename Launch>
bool launch_table_digest(Launch &&launch, const int64_t *map, kvs_table_dims dims,
                         unsigned long long *out, uint32_t max_blocks) {
  const uint64_t full_pages = dims.full_token / dims.page;
  return launch(capped_grid(full_pages > 0 ? full_pages : 1, kDigestThreads, max_blocks),
                kDigestThreads, table_digest_kernel, map, dims.page, full_pages, out);
}

template <typename Launch>
bool launch_rows_digest(Launch &&launch, const kvs_rows_unit *units, uint64_t n, uint64_t *out,
                        uint32_t max_blocks) {
  if (n == 0) return true;
  return launch(capped_grid(n, 1, max_blocks), kRowsThreads, rows_digest_kernel, units, n, out);
}

template <typename Launch>
bool launch_translate(Launch &&launch, const int64_t *map, kvs_table_dims dims, const int64_t *locs,
                      uint64_t n, int64_t *out, kvs_batch_fault *fault, uint32_t max_blocks) {
  if (n == 0) return true;
  return launch(flat_grid(n, max_blocks), kFlatThreads, translate_kernel, map, dims.full_token,
                locs, n, out, fault);
}

template <typename Launch>
bool launch_state_locs(Launch &&launch, kvs_table_dims dims, const int64_t *slots, uint64_t n,
                       int64_t *out_csa, int64_t *out_hca, kvs_batch_fault *fault,
                       uint32_t max_blocks) {
  if (n == 0) return true;
  return launch(flat_grid(n, max_blocks), kFlatThreads, state_locs_kernel,
                kvs_tm_div_make(dims.page), dims.n_win_slots, slots, n, out_csa, out_hca, fault);
}

// Which inputs a batch state-location launch reads: own when a requested
// ring kind is per window page, slots when one is per request.
inline bool batch_state_reads_own(kvs_state_placement placement, bool csa_out, bool hca_out) {
  return (csa_out && !kvs_tm_csa_per_request(static_cast<int>(placement.rings))) ||
         (hca_out && !kvs_tm_hca_per_request(static_cast<int>(placement.rings)));
}

inline bool batch_state_reads_slots(kvs_state_placement placement, bool csa_out, bool hca_out) {
  return (csa_out && kvs_tm_csa_per_request(static_cast<int>(placement.rings))) ||
         (hca_out && kvs_tm_hca_per_request(static_cast<int>(placement.rings)));
}

template <typename Launch>
bool launch_batch_state_locs(Launch &&launch, kvs_state_placement placement, const int64_t *own,
                             const int64_t *slots, const int64_t *positions, uint64_t n,
                             const uint64_t *count, int64_t *out_csa, int64_t *out_hca,
                             kvs_batch_fault *fault, uint32_t max_blocks) {
  if (n == 0) return true;
  const int rings = static_cast<int>(placement.rings);
  return launch(flat_grid(n, max_blocks), kFlatThreads, batch_state_locs_kernel,
                kvs_tm_div_make(placement.page), kvs_tm_csa_per_request(rings),
                kvs_tm_hca_per_request(rings), placement.n_win_slots, placement.n_req_slots, own,
                slots, positions, n, count, out_csa, out_hca, fault);
}

template <typename Launch>
bool launch_ring_ctx(Launch &&launch, const int64_t *map, kvs_table_dims dims,
                     kvs_block_tables tables, const int64_t *positions, uint64_t n_req,
                     const uint64_t *count, int64_t *own, int64_t *prev, int64_t *ring,
                     kvs_batch_fault *fault, uint32_t max_blocks) {
  if (n_req == 0) return true;
  return launch(ring_grid(n_req, max_blocks), kRingThreads, ring_ctx_kernel, map, dims.full_token,
                dims.page, kvs_tm_div_make(dims.page), tables.pages, tables.stride,
                kvs_tm_div_make(tables.block_size), positions, n_req, count, own, prev, ring,
                fault);
}

// Every kernel above, with its name: `visit(kernel, name)` for each until
// one returns false. A table loads them all at create (kvs_kernels_load):
// under CUDA's lazy loading (the default since CUDA 12.2) a kernel's module
// is otherwise loaded at its first launch, the first step, and a load can
// wait for the whole context, NCCL kernels blocked on a peer included. A
// kernel added above and not here is loaded at a step, which the stand-in
// counts (tests/standin: lazy_loads).
template <typename Visit>
bool for_each_kernel(Visit &&visit) {
  return visit(apply_mark_kernel, "apply_mark") && visit(apply_write_kernel, "apply_write") &&
         visit(translate_kernel, "translate") && visit(state_locs_kernel, "state_locs") &&
         visit(batch_state_locs_kernel, "batch_state_locs") && visit(ring_ctx_kernel, "ring_ctx") &&
         visit(table_digest_kernel, "table_digest") && visit(rows_digest_kernel, "rows_digest");
}

}  // namespace kvs_kernels

#endif  // KVS_BACKENDS_CUDA_DEVICE_KERNELS_CUH
