// The batch ring locations (kvs_ref_batch_state_locs) against the pool's
// single-row functions, kvs_state_loc (per window page) and
// kvs_request_state_loc (per request), over random rows in all three
// placements: idle rows, unbound window slots, rows without a request slot,
// and slots past their pools, which fault with the lowest row. Also: request
// slot entries in a binding journal are the host pool's, so every table
// path skips them while a real bad entry in the same batch still faults.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/device_ref.h"
#include "pool/journal.h"
#include "core/table_math.h"
#include "pool/window_pool.h"
#include "tests/core/fixtures.h"

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

constexpr kvs_state_rings kAllRings[] = {KVS_STATE_RINGS_PER_PAGE, KVS_STATE_RINGS_PER_REQUEST,
                                         KVS_STATE_RINGS_HCA_PER_REQUEST};

// Pool sizes with rings placed as `rings` (65 request slots when some ring
// kind is per request), through the cost terms as a planner builds them.
kvs_pool_sizes sizes_with(kvs_state_rings rings, uint64_t num_pages, uint64_t win_pages,
                          uint64_t n_req_slots = 65) {
  kvs_geometry g = kvs_test::args();
  kvs_row_widths w = kvs_row_widths_default(&g);
  w.state_rings = rings;
  w.n_req_slots = rings == KVS_STATE_RINGS_PER_PAGE ? 0 : n_req_slots;
  kvs_cost_terms terms;
  kvs_pool_sizes s{};
  kvs_error err;
  EXPECT_EQ(kvs_cost_terms_make(&g, 0, kvs_geometry_layer_count(&g), &w, &terms, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(kvs_pool_sizes_compute_terms(num_pages, &terms, 0.5, kvs_test::P, win_pages, &s, &err),
            KVS_OK)
      << err.message;
  return s;
}

struct Rows {
  std::vector<int64_t> own, slots, positions;
};

// Mostly real rows; some idle, some unbound, some past their pools.
Rows random_rows(std::mt19937_64 &rng, const kvs_state_placement &p, size_t n) {
  Rows r;
  r.own.resize(n);
  r.slots.resize(n);
  r.positions.resize(n);
  uint64_t req = p.n_req_slots > 0 ? p.n_req_slots : 7;
  for (size_t i = 0; i < n; i++) {
    uint64_t kind = rng() % 20;
    r.positions[i] = kind == 0 ? -1 - int64_t(rng() % 4) : int64_t(rng() % 2000000);
    kind = rng() % 20;
    r.own[i] = kind == 0   ? -1
               : kind == 1 ? int64_t(p.n_win_slots + rng() % 50)
                           : int64_t(rng() % p.n_win_slots);
    kind = rng() % 20;
    r.slots[i] = kind == 0 ? -1 : kind == 1 ? int64_t(req + rng() % 5) : int64_t(rng() % req);
  }
  return r;
}

// The row's location of one ring kind by the single-row functions, and
// whether it reached past its pool.
int64_t expected(const kvs_state_placement &p, bool per_request, uint64_t ring, int64_t own,
                 int64_t slot, int64_t pos, bool *bad) {
  int64_t out = -2;
  if (pos < 0) return -1;
  if (per_request) {
    if (slot >= 0 && uint64_t(slot) >= p.n_req_slots) {
      *bad = true;
      return -1;
    }
    EXPECT_EQ(kvs_request_state_loc(slot, pos, ring, &out, nullptr), KVS_OK);
  } else {
    if (own >= 0 && uint64_t(own) >= p.n_win_slots) {
      *bad = true;
      return -1;
    }
    EXPECT_EQ(kvs_state_loc(own, ring, p.page, &out, nullptr), KVS_OK);
  }
  return out;
}

}  // namespace

TEST(BatchStateLocs, the_placement_is_the_pools) {
  for (kvs_state_rings rings : kAllRings) {
    kvs_pool_sizes s = sizes_with(rings, 40, 9);
    kvs_state_placement p = kvs_state_placement_of(&s);
    EXPECT_EQ(p.rings, rings);
    EXPECT_EQ(p.page, kvs_test::P);
    EXPECT_EQ(p.n_win_slots, 9 * kvs_test::P);
    EXPECT_EQ(p.n_req_slots, rings == KVS_STATE_RINGS_PER_PAGE ? 0u : 65u);
    EXPECT_EQ(kvs_state_placement_check(&p, nullptr), KVS_OK);
    // The device-side rule is core's.
    EXPECT_EQ(kvs_tm_csa_per_request(int(rings)) != 0, kvs_state_rings_csa_per_request(rings));
    EXPECT_EQ(kvs_tm_hca_per_request(int(rings)) != 0, kvs_state_rings_hca_per_request(rings));
  }
}

TEST(BatchStateLocs, equal_the_single_row_functions_in_every_placement) {
  std::mt19937_64 rng(20261130);
  for (kvs_state_rings rings : kAllRings) {
    SCOPED_TRACE(kvs_state_rings_name(rings));
    kvs_pool_sizes s = sizes_with(rings, 64, 17);
    kvs_state_placement p = kvs_state_placement_of(&s);
    bool csa_req = kvs_state_rings_csa_per_request(rings);
    bool hca_req = kvs_state_rings_hca_per_request(rings);
    size_t faults = 0, idle = 0, located = 0;
    for (int round = 0; round < 200; round++) {
      size_t n = 1 + rng() % 300;
      Rows r = random_rows(rng, p, n);
      std::vector<int64_t> want_csa(n), want_hca(n);
      uint64_t want_count = 0, want_first = UINT64_MAX;
      for (size_t i = 0; i < n; i++) {
        bool bad = false;
        want_csa[i] = expected(p, csa_req, 8, r.own[i], r.slots[i], r.positions[i], &bad);
        want_hca[i] = expected(p, hca_req, 128, r.own[i], r.slots[i], r.positions[i], &bad);
        if (bad) {
          want_count++;
          if (want_first == UINT64_MAX) want_first = i;
        }
        idle += r.positions[i] < 0;
        located += want_csa[i] >= 0;
      }
      // Both rings, then each alone: a ring not asked for is neither
      // written nor faulted through.
      for (int which = 0; which < 3; which++) {
        std::vector<int64_t> csa(n, 77), hca(n, 77);
        kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
        kvs_error err;
        ASSERT_EQ(kvs_ref_batch_state_locs(&p, r.own.data(), r.slots.data(), r.positions.data(), n,
                                           which != 2 ? csa.data() : nullptr,
                                           which != 1 ? hca.data() : nullptr, &f, &err),
                  KVS_OK)
            << err.message;
        uint64_t count = 0, first = UINT64_MAX;
        for (size_t i = 0; i < n; i++) {
          bool bad = false;
          if (which != 2) {
            ASSERT_EQ(csa[i], want_csa[i]) << "row " << i << " round " << round;
            expected(p, csa_req, 8, r.own[i], r.slots[i], r.positions[i], &bad);
          } else {
            ASSERT_EQ(csa[i], 77) << "not asked for";
          }
          if (which != 1) {
            ASSERT_EQ(hca[i], want_hca[i]) << "row " << i << " round " << round;
            expected(p, hca_req, 128, r.own[i], r.slots[i], r.positions[i], &bad);
          } else {
            ASSERT_EQ(hca[i], 77) << "not asked for";
          }
          if (bad && count++ == 0) first = i;
        }
        EXPECT_EQ(f.count, count);
        EXPECT_EQ(f.first_index, first);
        if (which == 0) {
          EXPECT_EQ(f.count, want_count);
          EXPECT_EQ(f.first_index, want_first);
          faults += f.count;
        }
      }
    }
    EXPECT_GT(faults, 100u) << "the rows reach the fault path";
    EXPECT_GT(idle, 100u);
    EXPECT_GT(located, 10000u);
  }
}

TEST(BatchStateLocs, per_request_locations_follow_the_slot_and_position_not_the_window) {
  kvs_pool_sizes s = sizes_with(KVS_STATE_RINGS_PER_REQUEST, 40, 9);
  kvs_state_placement p = kvs_state_placement_of(&s);
  // Slot 3 at positions 0, 7, 8, 127, 128, 1000: 3*8 + pos%8 and 3*128 + pos%128.
  std::vector<int64_t> pos{0, 7, 8, 127, 128, 1000, -1};
  std::vector<int64_t> slots(pos.size(), 3);
  std::vector<int64_t> csa(pos.size()), hca(pos.size());
  kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_batch_state_locs(&p, nullptr, slots.data(), pos.data(), pos.size(), csa.data(),
                                     hca.data(), &f, nullptr),
            KVS_OK)
      << "own is not read when every ring kind is per request";
  EXPECT_EQ(csa, (std::vector<int64_t>{24, 31, 24, 31, 24, 24, -1}));
  EXPECT_EQ(hca, (std::vector<int64_t>{384, 391, 392, 511, 384, 488, -1}));
  EXPECT_EQ(f.count, 0u);
  // The dummy slot (the last) is a slot like any other; one past it faults.
  std::vector<int64_t> edge{64, 65, -1, 65};
  std::vector<int64_t> at{5, 5, 5, -3};
  std::vector<int64_t> a(4), b(4);
  ASSERT_EQ(kvs_ref_batch_state_locs(&p, nullptr, edge.data(), at.data(), 4, a.data(), b.data(), &f,
                                     nullptr),
            KVS_OK);
  EXPECT_EQ(a, (std::vector<int64_t>{64 * 8 + 5, -1, -1, -1}));
  EXPECT_EQ(b, (std::vector<int64_t>{64 * 128 + 5, -1, -1, -1}));
  EXPECT_EQ(f.count, 1u) << "slot 65 faults at a position, not on an idle row";
  EXPECT_EQ(f.first_index, 1u);
}

TEST(BatchStateLocs, hca_per_request_mixes_window_and_request_slots) {
  kvs_pool_sizes s = sizes_with(KVS_STATE_RINGS_HCA_PER_REQUEST, 40, 9);
  kvs_state_placement p = kvs_state_placement_of(&s);
  // Window slot 2*128 + 13 (page 2), request slot 4, position 300.
  int64_t own = 2 * 128 + 13, slot = 4, pos = 300, csa = 0, hca = 0;
  kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_batch_state_locs(&p, &own, &slot, &pos, 1, &csa, &hca, &f, nullptr), KVS_OK);
  EXPECT_EQ(csa, 2 * 8 + 13 % 8);
  EXPECT_EQ(hca, 4 * 128 + 300 % 128);
  // A window slot past the pool faults the ratio-4 ring only; the other
  // ring still reads its slot.
  own = int64_t(p.n_win_slots);
  ASSERT_EQ(kvs_ref_batch_state_locs(&p, &own, &slot, &pos, 1, &csa, &hca, &f, nullptr), KVS_OK);
  EXPECT_EQ(csa, -1);
  EXPECT_EQ(hca, 4 * 128 + 300 % 128);
  EXPECT_EQ(f.count, 1u);
  // Asked for the ratio-128 ring alone, own is not read: no fault, and
  // own may be NULL.
  ASSERT_EQ(kvs_ref_batch_state_locs(&p, nullptr, &slot, &pos, 1, nullptr, &hca, &f, nullptr),
            KVS_OK);
  EXPECT_EQ(f.count, 0u);
}

TEST(BatchStateLocs, bad_arguments_are_refused_before_anything_is_written) {
  kvs_pool_sizes s = sizes_with(KVS_STATE_RINGS_PER_REQUEST, 40, 9);
  kvs_state_placement p = kvs_state_placement_of(&s);
  int64_t own = 5, slot = 1, pos = 9, csa = 77, hca = 77;
  kvs_error err;
  EXPECT_EQ(kvs_ref_batch_state_locs(&p, &own, nullptr, &pos, 1, &csa, &hca, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "slots (request slots) is NULL")) << err.message;
  EXPECT_EQ(kvs_ref_batch_state_locs(&p, &own, &slot, nullptr, 1, &csa, &hca, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_ref_batch_state_locs(&p, &own, &slot, &pos, 1, nullptr, nullptr, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "need an output")) << err.message;
  EXPECT_EQ(kvs_ref_batch_state_locs(nullptr, &own, &slot, &pos, 1, &csa, &hca, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  kvs_state_placement no_slots = p;
  no_slots.n_req_slots = 0;
  EXPECT_EQ(kvs_ref_batch_state_locs(&no_slots, &own, &slot, &pos, 1, &csa, &hca, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "per-request state rings with 0 request slots")) << err.message;
  kvs_state_placement page_with_slots = kvs_state_placement_of(&s);
  page_with_slots.rings = KVS_STATE_RINGS_PER_PAGE;
  EXPECT_EQ(
      kvs_ref_batch_state_locs(&page_with_slots, &own, &slot, &pos, 1, &csa, &hca, nullptr, &err),
      KVS_ERR_INVALID_ARGUMENT);
  kvs_state_placement unknown = p;
  unknown.rings = kvs_state_rings(7);
  EXPECT_EQ(kvs_ref_batch_state_locs(&unknown, &own, &slot, &pos, 1, &csa, &hca, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  // A per-page ring that does not divide P, asked for.
  kvs_state_placement small_page{KVS_STATE_RINGS_PER_PAGE, 64, 640, 0};
  EXPECT_EQ(
      kvs_ref_batch_state_locs(&small_page, &own, nullptr, &pos, 1, nullptr, &hca, nullptr, &err),
      KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "ring_size 128 must divide P=64")) << err.message;
  EXPECT_EQ(csa, 77);
  EXPECT_EQ(hca, 77);
  // The ratio-4 ring alone divides it; per-page rings need no slots.
  ASSERT_EQ(
      kvs_ref_batch_state_locs(&small_page, &own, nullptr, &pos, 1, &csa, nullptr, nullptr, &err),
      KVS_OK)
      << err.message;
  EXPECT_EQ(csa, 5);
  // With a per-request ring but only zero rows, nothing is read.
  EXPECT_EQ(kvs_ref_batch_state_locs(&p, nullptr, nullptr, nullptr, 0, &csa, &hca, nullptr, &err),
            KVS_OK);
}

// ---- request-slot journal entries ----

TEST(SlotJournalEntries, every_table_path_skips_them_and_a_real_bad_entry_still_faults) {
  kvs_table_dims dims{kvs_test::P, 8 * kvs_test::P, 5 * kvs_test::P};
  std::vector<int64_t> map(dims.full_token + 1, -1);
  // A bind of slot 3 to request 17, then its free: the host pool's entries.
  kvs_journal_entry bind_slot{KVS_JOURNAL_SLOT_TAG | 3u, 17};
  kvs_journal_entry free_slot{KVS_JOURNAL_SLOT_TAG | 3u, KVS_JOURNAL_FREED};
  kvs_journal_entry huge_slot{KVS_JOURNAL_SLOT_TAG | (KVS_JOURNAL_SLOT_TAG - 1), 5};
  EXPECT_TRUE(kvs_tm_entry_is_slot(bind_slot.full_page));
  EXPECT_FALSE(kvs_tm_entry_is_slot(3));
  EXPECT_TRUE(kvs_journal_entry_fits(&dims, &bind_slot)) << "not a table entry";
  EXPECT_TRUE(kvs_journal_entry_fits(&dims, &huge_slot));

  std::vector<kvs_journal_entry> ok{bind_slot, {2, 1}, free_slot, huge_slot};
  kvs_error err;
  EXPECT_EQ(kvs_table_check_journal(&dims, ok.data(), ok.size(), &err), KVS_OK) << err.message;
  kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_apply_journal(map.data(), &dims, ok.data(), ok.size(), &f, &err), KVS_OK);
  EXPECT_EQ(f.count, 0u);
  std::vector<int64_t> want(dims.full_token + 1, -1);
  for (uint64_t o = 0; o < dims.page; o++) want[2 * dims.page + o] = int64_t(dims.page + o);
  EXPECT_EQ(map, want) << "only the page entry wrote";

  // A real entry past the history among slot entries: refused by the
  // check naming it, skipped and faulted by the apply at its own index.
  std::vector<kvs_journal_entry> bad{bind_slot, {3, 2}, free_slot, {100, 1}, huge_slot};
  EXPECT_EQ(kvs_table_check_journal(&dims, bad.data(), bad.size(), &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(contains(err.message, "journal entry 3 names full page 100")) << err.message;
  ASSERT_EQ(kvs_ref_apply_journal(map.data(), &dims, bad.data(), bad.size(), &f, &err), KVS_OK);
  EXPECT_EQ(f.count, 1u);
  EXPECT_EQ(f.first_index, 3u);
  for (uint64_t o = 0; o < dims.page; o++) want[3 * dims.page + o] = int64_t(2 * dims.page + o);
  EXPECT_EQ(map, want);
}

TEST(SlotJournalEntries, a_leaders_journal_with_slots_replays_onto_the_table) {
  // A per-request pool's allocator journals page binds and slot binds in
  // one stream; the table keeps the pages and ignores the slots.
  kvs_pool_sizes s = sizes_with(KVS_STATE_RINGS_PER_REQUEST, 16, 9, 4);
  kvs_test::Pool leader = kvs_test::make_pool(s, 3, false);
  kvs_table_dims dims{s.page, s.full_token, s.n_win_slots};
  std::vector<int64_t> table(kvs_window_pool_mapping(leader.get()),
                             kvs_window_pool_mapping(leader.get()) + s.full_token + 1);
  uint64_t slot = 0;
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_slot_bind(leader.get(), 11, &slot, &err), KVS_OK) << err.message;
  std::vector<int64_t> locs(s.page);
  for (uint64_t o = 0; o < s.page; o++) locs[o] = int64_t(4 * s.page + o);
  ASSERT_EQ(kvs_window_pool_alloc(leader.get(), locs.data(), locs.size(), nullptr, &err), KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_window_pool_slot_bind(leader.get(), 12, &slot, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_window_pool_slot_free(leader.get(), 11, &err), KVS_OK) << err.message;
  std::vector<kvs_journal_entry> journal(kvs_window_pool_journal_pending(leader.get()));
  size_t n = 0;
  kvs_window_pool_journal_drain(leader.get(), journal.data(), journal.size(), &n);
  ASSERT_EQ(n, 4u);
  size_t slot_entries = 0;
  for (const kvs_journal_entry &e : journal) slot_entries += kvs_tm_entry_is_slot(e.full_page);
  EXPECT_EQ(slot_entries, 3u);
  ASSERT_EQ(kvs_table_check_journal(&dims, journal.data(), n, &err), KVS_OK) << err.message;
  kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_apply_journal(table.data(), &dims, journal.data(), n, &f, &err), KVS_OK);
  EXPECT_EQ(f.count, 0u);
  const int64_t *mapping = kvs_window_pool_mapping(leader.get());
  EXPECT_EQ(table, std::vector<int64_t>(mapping, mapping + s.full_token + 1));
}
