/* The per-item arithmetic of the device-table kernels, shared verbatim by
 * the CPU references (core/device_ref.c, compiled as C11) and the CUDA
 * kernels (backends/cuda/device_kernels.cu, compiled by nvcc), so both read one
 * formula. Private to those two: callers use core/device_ref.h or the
 * cuda/ API.
 *
 * Everything here is branch-light integer arithmetic on int64 slots; the
 * CPU tests check each function against the window pool's own
 * single-request functions, which makes the shared code itself tested
 * rather than merely shared. */
#ifndef KVS_CORE_TABLE_MATH_H
#define KVS_CORE_TABLE_MATH_H

#include <stdint.h>

#include "core/cost_model.h"
#include "pool/journal.h"

#if defined(__CUDACC__)
#define KVS_HD static inline __host__ __device__
#else
#define KVS_HD static inline
#endif

/* Whether a journal entry is a request-slot entry (KVS_JOURNAL_SLOT_TAG
 * set in full_page): the host pool's, not a table row. Every table path
 * skips it without writing or faulting. */
KVS_HD int kvs_tm_entry_is_slot(uint64_t full_page) {
  return (full_page & KVS_JOURNAL_SLOT_TAG) != 0;
}

/* An entry fits a table when it names an allocatable full page (not the
 * dummy, the last one) and an allocatable window page (not the dummy
 * either) or -1 (freed). Compared without adding to full_page, which
 * would wrap at 2^64 - 1 and pass the largest page as page 0. */
KVS_HD int kvs_tm_entry_fits(uint64_t n_full_pages, uint64_t n_win_pages, uint64_t full_page,
                             int64_t window_page) {
  int full_ok = n_full_pages > 0 && full_page < n_full_pages - 1;
  int window_ok =
      window_page == -1 || (window_page >= 0 && (uint64_t)window_page + 1 < n_win_pages);
  return full_ok && window_ok;
}

/* The row an entry writes at `offset` of its full page. */
KVS_HD int64_t kvs_tm_entry_row(int64_t window_page, uint64_t page, uint64_t offset) {
  return window_page < 0 ? (int64_t)-1 : window_page * (int64_t)page + (int64_t)offset;
}

/* Which table row a full loc reads: a negative loc the sentinel row
 * (full_token), a loc past the sentinel none (returns 0 and sets *bad). */
KVS_HD int kvs_tm_row_of(int64_t loc, uint64_t full_token, uint64_t *row) {
  if (loc < 0) {
    *row = full_token;
    return 1;
  }
  if ((uint64_t)loc > full_token) return 0;
  *row = (uint64_t)loc;
  return 1;
}

/* A divisor with a shift for powers of two: P, the ring sizes and block
 * sizes nearly always are, and a 64-bit division costs a GPU dozens of
 * instructions per item where a shift costs one. */
typedef struct kvs_tm_div {
  uint64_t d;
  int32_t shift; /* log2(d) when d is a power of two, else -1 */
} kvs_tm_div;

KVS_HD kvs_tm_div kvs_tm_div_make(uint64_t d) {
  kvs_tm_div out;
  out.d = d;
  out.shift = -1;
  if (d != 0 && (d & (d - 1)) == 0) {
    int32_t s = 0;
    while (((uint64_t)1 << s) != d) s++;
    out.shift = s;
  }
  return out;
}

KVS_HD uint64_t kvs_tm_quot(uint64_t x, kvs_tm_div d) {
  return d.shift >= 0 ? x >> d.shift : x / d.d;
}

KVS_HD uint64_t kvs_tm_rem(uint64_t x, kvs_tm_div d) {
  return d.shift >= 0 ? x & (d.d - 1) : x % d.d;
}

/* (slot / P) * ring + slot % ring: the ring block of the slot's window
 * page, at the slot's offset modulo the ring. The caller has checked that
 * ring divides P and that slot is a slot (>= 0). */
KVS_HD int64_t kvs_tm_state_loc(int64_t slot, kvs_tm_div page, kvs_tm_div ring) {
  uint64_t s = (uint64_t)slot;
  return (int64_t)(kvs_tm_quot(s, page) * ring.d + kvs_tm_rem(s, ring));
}

/* slot * ring + pos % ring: the ring location of position pos in the ring
 * of request slot `slot` (kvs_request_state_loc). The caller has checked
 * that slot and pos are >= 0 and slot is below its placement's request
 * slots (at most 2^56, kvs_state_placement_check), so with a ring of at
 * most 128 the location fits int64. */
KVS_HD int64_t kvs_tm_request_state_loc(int64_t slot, int64_t pos, kvs_tm_div ring) {
  return (int64_t)((uint64_t)slot * ring.d + kvs_tm_rem((uint64_t)pos, ring));
}

/* Whether a kvs_state_rings placement puts the ratio-4 (attention and
 * indexer) / the ratio-128 rings per request slot: what
 * kvs_state_rings_csa_per_request / _hca_per_request say (a test holds
 * this), in a form device code can call. */
KVS_HD int kvs_tm_csa_per_request(int rings) { return rings == KVS_STATE_RINGS_PER_REQUEST; }
KVS_HD int kvs_tm_hca_per_request(int rings) {
  return rings == KVS_STATE_RINGS_PER_REQUEST || rings == KVS_STATE_RINGS_HCA_PER_REQUEST;
}

/* One ring kind's location for one batch row at position pos (>= 0): per
 * request from the request slot and the position, per window page from the
 * window slot `own`. A negative slot (unbound) gives -1; a slot at or past
 * its pool's count (n_req_slots or n_win_slots) gives -1 and sets *bad. */
KVS_HD int64_t kvs_tm_batch_ring_loc(int per_request, int64_t own, int64_t slot, int64_t pos,
                                     kvs_tm_div page, kvs_tm_div ring, uint64_t n_win_slots,
                                     uint64_t n_req_slots, int *bad) {
  const int64_t unit = per_request ? slot : own;
  if (unit < 0) return -1;
  if ((uint64_t)unit >= (per_request ? n_req_slots : n_win_slots)) {
    *bad = 1;
    return -1;
  }
  return per_request ? kvs_tm_request_state_loc(unit, pos, ring)
                     : kvs_tm_state_loc(unit, page, ring);
}

/* The position ring slot j holds at decode position pos (>= 0) of a
 * P-slot ring: pos - ((pos - j) mod P), or -1 before the sequence reaches
 * j. Equals kvs_window_ring_position. */
KVS_HD int64_t kvs_tm_ring_position(int64_t pos, uint64_t j, kvs_tm_div page) {
  /* Compared unsigned: a j past INT64_MAX would read as negative. */
  if (j > (uint64_t)pos) return -1;
  return pos - (int64_t)kvs_tm_rem((uint64_t)pos - j, page);
}

/* The full loc of position p (>= 0) in a block-table row; -1 where the
 * row assigns no block. Returns 0 when the block lies past the row. An
 * int32 block index times a block size below 2^32, plus an offset below
 * it, stays below 2^63 (kvs_block_tables_check bounds the block size). */
KVS_HD int kvs_tm_block_loc(const int32_t *row, uint64_t stride, kvs_tm_div block_size, int64_t p,
                            int64_t *loc) {
  uint64_t block = kvs_tm_quot((uint64_t)p, block_size);
  if (block >= stride) return 0;
  int32_t page = row[block];
  *loc = page < 0
             ? (int64_t)-1
             : (int64_t)page * (int64_t)block_size.d + (int64_t)kvs_tm_rem((uint64_t)p, block_size);
  return 1;
}

#endif /* KVS_CORE_TABLE_MATH_H */
