// The seed's paged window allocator cases, ported by name and value. The
// seed's panics are error codes here, and each refused call is checked to
// have changed nothing.
#include <gtest/gtest.h>

#include <string>

#include "pool/window_pool.h"
#include "tests/core/fixtures.h"

using namespace kvs_test;

namespace {

FreeList make_free_list(uint64_t capacity, uint64_t unit) {
  kvs_free_list_t list = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_free_list_create(capacity, unit, &list, &err), KVS_OK) << err.message;
  return FreeList(list);
}

std::vector<uint64_t> take(kvs_free_list *list, size_t n) {
  std::vector<uint64_t> bases(n);
  kvs_error err;
  EXPECT_EQ(kvs_free_list_alloc(list, n, bases.data(), nullptr, &err), KVS_OK) << err.message;
  return bases;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

int64_t state_loc(int64_t slot, uint64_t ring) {
  int64_t out = -2;
  EXPECT_EQ(kvs_state_loc(slot, ring, P, &out, nullptr), KVS_OK);
  return out;
}

int64_t ring_position(int64_t pos, uint64_t j, uint64_t win) {
  int64_t out = -2;
  EXPECT_EQ(kvs_window_ring_position(pos, j, win, &out, nullptr), KVS_OK);
  return out;
}

}  // namespace

TEST(FreeList, every_unit_base_is_a_multiple_of_the_page_unit) {
  FreeList list = make_free_list(8 * P, P);
  EXPECT_EQ(kvs_free_list_available(list.get()), 8 * P);
  std::vector<uint64_t> taken = take(list.get(), 3);
  ASSERT_EQ(taken.size(), 3u);
  for (uint64_t base : taken) EXPECT_EQ(base % P, 0u);
  // LIFO from the tail, ascending inside the slice.
  EXPECT_EQ(taken, (std::vector<uint64_t>{5 * P, 6 * P, 7 * P}));
  EXPECT_EQ(kvs_free_list_available(list.get()), 5 * P);

  ASSERT_EQ(kvs_free_list_free(list.get(), taken.data(), taken.size(), nullptr), KVS_OK);
  EXPECT_EQ(kvs_free_list_available(list.get()), 8 * P);
  // The just-freed pages come straight back.
  EXPECT_EQ(take(list.get(), 1), (std::vector<uint64_t>{7 * P}));
}

// The seed panics with "is not a unit base"; here nothing is returned.
TEST(FreeList, returning_a_base_that_is_not_a_unit_base_is_refused) {
  FreeList list = make_free_list(8 * P, P);
  std::vector<uint64_t> taken = take(list.get(), 2);
  uint64_t bad[] = {taken[0], P + 1};
  kvs_error err;
  EXPECT_EQ(kvs_free_list_free(list.get(), bad, 2, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(contains(err.message, "is not a unit base")) << err.message;
  EXPECT_EQ(kvs_free_list_available(list.get()), 6 * P) << "the good base was not returned";
  uint64_t outside[] = {8 * P};
  EXPECT_EQ(kvs_free_list_free(list.get(), outside, 1, &err), KVS_ERR_OUT_OF_RANGE);
}

TEST(FreeList, an_oversized_allocation_takes_nothing) {
  FreeList list = make_free_list(4 * P, P);
  std::vector<uint64_t> bases(5, 0);
  kvs_free_list_shortfall shortfall{};
  kvs_error err;
  EXPECT_EQ(kvs_free_list_alloc(list.get(), 5, bases.data(), &shortfall, &err), KVS_ERR_EXHAUSTED);
  EXPECT_EQ(shortfall.needed_units, 5u);
  EXPECT_EQ(shortfall.available_units, 4u);
  EXPECT_EQ(kvs_free_list_available(list.get()), 4 * P) << "nothing was taken";
  take(list.get(), 4);  // the free list is intact
}

// Beyond the seed: the free list itself refuses a double free, which the
// seed only catches later in check_integrity.
TEST(FreeList, a_double_free_is_refused_before_it_can_alias) {
  FreeList list = make_free_list(4 * P, P);
  std::vector<uint64_t> taken = take(list.get(), 1);
  uint64_t twice[] = {taken[0], taken[0]};
  kvs_error err;
  EXPECT_EQ(kvs_free_list_free(list.get(), twice, 2, &err), KVS_ERR_CONFLICT);
  EXPECT_TRUE(contains(err.message, "already free")) << err.message;
  EXPECT_EQ(kvs_free_list_free_units(list.get()), 3u);
  ASSERT_EQ(kvs_free_list_free(list.get(), taken.data(), 1, nullptr), KVS_OK);
  EXPECT_EQ(kvs_free_list_free(list.get(), taken.data(), 1, &err), KVS_ERR_CONFLICT);
  EXPECT_EQ(kvs_free_list_free_units(list.get()), 4u);
}

TEST(FreeList, a_ragged_capacity_is_refused) {
  kvs_free_list_t list = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_free_list_create(8 * P + 1, P, &list, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "multiple of page_unit")) << err.message;
  EXPECT_EQ(list, nullptr);
  EXPECT_EQ(kvs_free_list_create(8 * P, 0, &list, &err), KVS_ERR_INVALID_ARGUMENT);
}

TEST(WindowPool, an_exhausted_window_pool_binds_nothing) {
  Pool p = pool();
  std::vector<int64_t> locs;
  for (uint64_t full_page = 0; full_page < 5; full_page++) {
    std::vector<int64_t> page = page_locs(full_page);
    locs.insert(locs.end(), page.begin(), page.end());
  }
  kvs_free_list_shortfall shortfall{};
  kvs_error err;
  EXPECT_EQ(alloc(p.get(), locs, &err, &shortfall), KVS_ERR_EXHAUSTED);
  EXPECT_EQ(shortfall.needed_units, 5u);
  EXPECT_EQ(shortfall.available_units, 4u);
  EXPECT_EQ(translate(p.get(), 0), KVS_NO_WINDOW_SLOT);
  EXPECT_EQ(kvs_window_pool_journal_pending(p.get()), 0u);
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, alloc_swa_preserves_in_page_offsets) {
  Pool p = pool();
  ASSERT_EQ(alloc(p.get(), page_locs(0)), KVS_OK);
  int64_t base = translate(p.get(), 0);
  EXPECT_TRUE(base >= 0 && uint64_t(base) % P == 0);
  for (int64_t offset = 0; offset < int64_t(P); offset++) {
    EXPECT_EQ(translate(p.get(), offset), base + offset);
  }
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, alloc_swa_refuses_a_partial_page) {
  Pool p = pool();
  std::vector<int64_t> locs = page_locs(0);
  locs.pop_back();
  kvs_error err;
  EXPECT_EQ(alloc(p.get(), locs, &err), KVS_ERR_PARTIAL_PAGE);
  EXPECT_TRUE(contains(err.message, "whole pages")) << err.message;
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 4 * P);
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, alloc_swa_refuses_a_page_that_is_not_contiguous_ascending) {
  Pool p = pool();
  std::vector<int64_t> locs = page_locs(0);
  std::swap(locs[3], locs[9]);
  kvs_error err;
  EXPECT_EQ(alloc(p.get(), locs, &err), KVS_ERR_PARTIAL_PAGE);
  EXPECT_TRUE(contains(err.message, "contiguous ascending")) << err.message;
  EXPECT_TRUE(contains(err.message, "offset 3")) << err.message;
  EXPECT_EQ(translate(p.get(), 0), KVS_NO_WINDOW_SLOT);
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, free_swa_refuses_partial_pages) {
  Pool p = pool();
  ASSERT_EQ(alloc(p.get(), page_locs(0)), KVS_OK);
  std::vector<int64_t> locs = page_locs(0);
  locs.pop_back();
  kvs_error err;
  EXPECT_EQ(release(p.get(), locs, &err), KVS_ERR_PARTIAL_PAGE);
  EXPECT_TRUE(contains(err.message, "partial pages")) << err.message;
  EXPECT_TRUE(contains(err.message, "full page 0 (127 of its locations)")) << err.message;
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 3 * P) << "nothing was freed";
  EXPECT_GE(translate(p.get(), 0), 0);
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, freeing_the_same_page_twice_is_a_no_op) {
  Pool p = pool();
  ASSERT_EQ(alloc(p.get(), page_locs(1)), KVS_OK);
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 3 * P);
  ASSERT_EQ(release(p.get(), page_locs(1)), KVS_OK);
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 4 * P);
  EXPECT_EQ(translate(p.get(), int64_t(P)), KVS_NO_WINDOW_SLOT);
  // A slide, a tombstone and an eviction pass may all name it.
  ASSERT_EQ(release(p.get(), page_locs(1)), KVS_OK);
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 4 * P) << "the second free took nothing";
  ASSERT_EQ(release(p.get(), page_locs(2)), KVS_OK);
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 4 * P);
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, a_negative_or_unbound_loc_translates_to_the_sentinel) {
  Pool p = pool();
  EXPECT_EQ(translate(p.get(), -1), KVS_NO_WINDOW_SLOT);
  EXPECT_EQ(translate(p.get(), -99), KVS_NO_WINDOW_SLOT);
  EXPECT_EQ(translate(p.get(), 0), KVS_NO_WINDOW_SLOT);
  // The trailing sentinel row is addressable and permanently -1.
  EXPECT_EQ(translate(p.get(), int64_t(8 * P)), KVS_NO_WINDOW_SLOT);
  // Past it is an error, not a wild read.
  int64_t slot = 7;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_translate(p.get(), int64_t(8 * P + 1), &slot, &err),
            KVS_ERR_OUT_OF_RANGE);
  EXPECT_EQ(slot, 7);
}

TEST(WindowPool, the_dummy_page_is_bound_outside_the_free_list) {
  Pool p = pool();
  EXPECT_EQ(translate(p.get(), int64_t(7 * P)), int64_t(4 * P));
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 4 * P);
  EXPECT_EQ(kvs_window_pool_swa_num_tokens(p.get()), 4 * P + 1);
  EXPECT_INTEGRITY(p.get());
  // It can be neither allocated nor freed.
  kvs_error err;
  EXPECT_EQ(alloc(p.get(), page_locs(7), &err), KVS_ERR_CONFLICT);
  EXPECT_TRUE(contains(err.message, "dummy")) << err.message;
  EXPECT_EQ(release(p.get(), page_locs(7), &err), KVS_ERR_CONFLICT);
  EXPECT_EQ(translate(p.get(), int64_t(7 * P)), int64_t(4 * P));
}

TEST(WindowPool, the_prefill_chunk_cap_halves_what_is_left_after_the_reserve) {
  kvs_geometry g = args();
  Pool big = make_pool(sizes(128, g, 0.5, 41), 2, true);
  uint64_t reserved = 0;
  ASSERT_EQ(kvs_cost_reserved_window_pages(2, true, &reserved, nullptr), KVS_OK);  // 13
  EXPECT_EQ(kvs_window_pool_prefill_chunk_budget(big.get()), (40 - reserved) / 2 * P);
  EXPECT_EQ(kvs_window_pool_prefill_chunk_budget(big.get()), 13 * P);
  // A pool that cannot cover its own reserve still admits one page.
  Pool tiny = make_pool(sizes(8, g, 0.5, 5), 2, true);
  EXPECT_EQ(kvs_window_pool_prefill_chunk_budget(tiny.get()), P);
}

TEST(WindowPool, state_loc_is_derived_so_two_pages_never_share_a_ring_block) {
  uint64_t ring = 8;
  // Page 0 covers ring block 0..8, page 1 covers 8..16.
  for (int64_t offset = 0; offset < int64_t(P); offset++) {
    EXPECT_EQ(state_loc(offset, ring), offset % 8);
    EXPECT_EQ(state_loc(int64_t(P) + offset, ring), 8 + offset % 8);
  }
  EXPECT_EQ(state_loc(KVS_NO_WINDOW_SLOT, ring), -1);

  Pool p = pool();
  ASSERT_EQ(alloc(p.get(), page_locs(0)), KVS_OK);
  ASSERT_EQ(alloc(p.get(), page_locs(1)), KVS_OK);
  // What a caller that STORED the location would keep holding.
  int64_t stored = state_loc(translate(p.get(), 0), ring);

  ASSERT_EQ(release(p.get(), page_locs(0)), KVS_OK);
  ASSERT_EQ(alloc(p.get(), page_locs(2)), KVS_OK);
  int64_t recycled = state_loc(translate(p.get(), int64_t(2 * P)), ring);
  EXPECT_EQ(stored, recycled)
      << "the recycled page inherits the ring block, so a stored state_loc reads its carry";
  // Derived from the live binding, page 0 now has no state at all.
  EXPECT_EQ(state_loc(translate(p.get(), 0), ring), KVS_NO_WINDOW_SLOT);
  EXPECT_INTEGRITY(p.get());
}

// The seed panics with "must divide"; here it is an error.
TEST(WindowPool, a_ring_that_does_not_divide_the_page_is_refused) {
  int64_t out = 5;
  kvs_error err;
  EXPECT_EQ(kvs_state_loc(0, 7, P, &out, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "must divide")) << err.message;
  EXPECT_EQ(out, 5);
  EXPECT_EQ(kvs_state_loc(0, 0, P, &out, &err), KVS_ERR_INVALID_ARGUMENT);
}

TEST(WindowPool, the_ring_names_the_latest_position_congruent_to_each_slot) {
  uint64_t win = 4;
  // Mid-sequence: every slot holds one of the last `win` positions.
  std::vector<int64_t> held;
  for (uint64_t j = 0; j < win; j++) held.push_back(ring_position(10, j, win));
  EXPECT_EQ(held, (std::vector<int64_t>{8, 9, 10, 7}));

  // Early decode: the slots the sequence has not reached are masked.
  EXPECT_EQ(ring_position(1, 0, win), 0);
  EXPECT_EQ(ring_position(1, 1, win), 1);
  EXPECT_EQ(ring_position(1, 2, win), -1);
  EXPECT_EQ(ring_position(1, 3, win), -1);
  // A truncated % would have said 1 - ((1 - 3) % 4) == 3 here.
  EXPECT_NE(ring_position(1, 3, win), 3);

  int64_t out = 0;
  EXPECT_EQ(kvs_window_ring_position(1, 0, 0, &out, nullptr), KVS_ERR_INVALID_ARGUMENT);
}

TEST(WindowPool, the_window_context_reads_the_ring_through_the_live_mapping) {
  Pool p = pool();
  ASSERT_EQ(alloc(p.get(), page_locs(0)), KVS_OK);
  std::vector<int64_t> full_locs = page_locs(0);
  std::vector<int64_t> ring(P, -7);
  int64_t own = 0, prev = 0;
  kvs_error err;

  ASSERT_EQ(kvs_window_pool_window_ctx(p.get(), 3, full_locs.data(), full_locs.size(), &own, &prev,
                                       ring.data(), &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(own, translate(p.get(), 3));
  EXPECT_EQ(prev, translate(p.get(), 2));
  // Only the first four slots have been reached.
  for (uint64_t j = 0; j < P; j++) {
    int64_t expected = j <= 3 ? translate(p.get(), int64_t(j)) : KVS_NO_WINDOW_SLOT;
    EXPECT_EQ(ring[j], expected) << "ring slot " << j;
  }

  // Position 0 has no predecessor: the clamp reads itself, never -1.
  ASSERT_EQ(kvs_window_pool_window_ctx(p.get(), 0, full_locs.data(), full_locs.size(), &own, &prev,
                                       ring.data(), &err),
            KVS_OK);
  EXPECT_EQ(prev, translate(p.get(), 0));

  // A position past the snapshot is an error.
  EXPECT_EQ(kvs_window_pool_window_ctx(p.get(), P, full_locs.data(), full_locs.size(), &own, &prev,
                                       ring.data(), &err),
            KVS_ERR_OUT_OF_RANGE);
}

TEST(WindowPool, the_window_pool_conserves_every_page) {
  kvs_geometry g = args();
  Pool p = make_pool(sizes(64, g, 0.5, 9), 1, true);
  uint64_t live_pages = 4;
  for (uint64_t full_page = 0; full_page < 48; full_page++) {
    kvs_error err;
    ASSERT_EQ(alloc(p.get(), page_locs(full_page % 60), &err), KVS_OK)
        << "page " << full_page << ": " << err.message;
    if (full_page >= live_pages) {
      ASSERT_EQ(release(p.get(), page_locs((full_page - live_pages) % 60)), KVS_OK);
    }
    EXPECT_INTEGRITY(p.get());
  }
  // Exactly the live window is held: 8 allocatable pages, 4 bound.
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), (8 - live_pages) * P);
}

// The seed panics with "leaked or double-freed"; here it is the error.
TEST(WindowPool, the_invariant_catches_a_leaked_window_page) {
  Pool p = pool();
  ASSERT_EQ(alloc(p.get(), page_locs(0)), KVS_OK);
  // A caller that dropped the binding without handing the page back.
  std::vector<int64_t> locs = page_locs(0);
  ASSERT_EQ(kvs_window_pool_unbind_raw(p.get(), locs.data(), locs.size(), nullptr), KVS_OK);
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_check_integrity(p.get(), &err), KVS_ERR_INTEGRITY);
  EXPECT_TRUE(contains(err.message, "leaked or double-freed")) << err.message;
  EXPECT_TRUE(contains(err.message, "3 free + 0 bound != 4")) << err.message;
}

// The seed panics with "bound to two full pages"; here it is the error.
TEST(WindowPool, the_invariant_catches_a_window_page_bound_twice) {
  Pool p = pool();
  ASSERT_EQ(alloc(p.get(), page_locs(0)), KVS_OK);
  uint64_t window_base = uint64_t(translate(p.get(), 0));
  ASSERT_EQ(kvs_window_pool_bind_raw(p.get(), P, window_base, nullptr), KVS_OK);
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_check_integrity(p.get(), &err), KVS_ERR_INTEGRITY);
  EXPECT_TRUE(contains(err.message, "bound to two full pages")) << err.message;
  // Freeing both would hand that window page out twice: refused.
  std::vector<int64_t> both = page_locs(0);
  std::vector<int64_t> second = page_locs(1);
  both.insert(both.end(), second.begin(), second.end());
  EXPECT_EQ(release(p.get(), both, &err), KVS_ERR_INTEGRITY);
  EXPECT_TRUE(contains(err.message, "alias")) << err.message;
}

// ---- beyond the seed: refusals change nothing, errors name the page ----

TEST(WindowPool, binding_over_a_bound_page_is_refused_rather_than_leaked) {
  Pool p = pool();
  ASSERT_EQ(alloc(p.get(), page_locs(2)), KVS_OK);
  int64_t before = translate(p.get(), int64_t(2 * P));
  std::vector<int64_t> locs = page_locs(1);
  std::vector<int64_t> again = page_locs(2);
  locs.insert(locs.end(), again.begin(), again.end());
  kvs_error err;
  EXPECT_EQ(alloc(p.get(), locs, &err), KVS_ERR_CONFLICT);
  // Named by its page (2) and, where the caller gave it, the location.
  EXPECT_TRUE(contains(err.message, "full page 2 (from location 256) already holds window page"))
      << err.message;
  EXPECT_EQ(translate(p.get(), int64_t(P)), KVS_NO_WINDOW_SLOT) << "all or nothing";
  EXPECT_EQ(translate(p.get(), int64_t(2 * P)), before);
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 3 * P);
  // The same page twice in one call is refused too.
  std::vector<int64_t> twice = page_locs(3);
  twice.insert(twice.end(), twice.begin(), twice.end());
  EXPECT_EQ(alloc(p.get(), twice, &err), KVS_ERR_CONFLICT);
  EXPECT_TRUE(contains(err.message, "twice")) << err.message;
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, locations_outside_the_history_are_refused) {
  Pool p = pool();
  std::vector<int64_t> outside = page_locs(8);  // the sentinel row and past it
  kvs_error err;
  EXPECT_EQ(alloc(p.get(), outside, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_EQ(release(p.get(), outside, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(contains(err.message,
                       "location 1024 at index 0, outside the history's 1024 "
                       "locations (full pages 0..7)"))
      << err.message;
  std::vector<int64_t> unaligned = page_locs(0);
  for (int64_t &loc : unaligned) loc += 1;
  EXPECT_EQ(alloc(p.get(), unaligned, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(contains(err.message, "page base")) << err.message;
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, free_accepts_pages_in_any_order_with_negatives_mixed_in) {
  Pool p = pool();
  std::vector<int64_t> locs;
  for (uint64_t fp : {0, 1, 2}) {
    std::vector<int64_t> page = page_locs(fp);
    locs.insert(locs.end(), page.begin(), page.end());
  }
  ASSERT_EQ(alloc(p.get(), locs), KVS_OK);
  // Reverse every location and sprinkle -1s: still whole pages.
  std::vector<int64_t> scrambled(locs.rbegin(), locs.rend());
  scrambled.insert(scrambled.begin() + 50, -1);
  scrambled.push_back(-5);
  kvs_error err;
  ASSERT_EQ(release(p.get(), scrambled, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_window_pool_swa_available(p.get()), 4 * P);
  EXPECT_INTEGRITY(p.get());
}

TEST(WindowPool, a_full_journal_refuses_the_operation_and_changes_nothing) {
  kvs_geometry g = args();
  Pool p = make_pool(sizes(8, g, 0.5, 5), 2, true, 2);
  ASSERT_EQ(alloc(p.get(), page_locs(0)), KVS_OK);
  ASSERT_EQ(alloc(p.get(), page_locs(1)), KVS_OK);
  kvs_error err;
  EXPECT_EQ(alloc(p.get(), page_locs(2), &err), KVS_ERR_JOURNAL_FULL);
  EXPECT_TRUE(contains(err.message, "drain")) << err.message;
  EXPECT_EQ(translate(p.get(), int64_t(2 * P)), KVS_NO_WINDOW_SLOT);
  EXPECT_EQ(release(p.get(), page_locs(0), &err), KVS_ERR_JOURNAL_FULL);
  EXPECT_GE(translate(p.get(), 0), 0);
  EXPECT_INTEGRITY(p.get());
  kvs_journal_entry entries[4];
  size_t n = 0;
  kvs_window_pool_journal_drain(p.get(), entries, 4, &n);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(kvs_window_pool_journal_sequence(p.get()), 2u);
  ASSERT_EQ(alloc(p.get(), page_locs(2)), KVS_OK);
}

// Pages are the other unit of the same calls: binding full pages 3 and 1
// by number leaves the mapping, digest and journal a location-form bind
// of the same pages in the same order leaves.
TEST(WindowPool, binding_by_page_number_is_binding_by_location) {
  Pool by_loc = pool();
  Pool by_page = pool();
  std::vector<int64_t> locs = page_locs(3);
  std::vector<int64_t> one = page_locs(1);
  locs.insert(locs.end(), one.begin(), one.end());
  ASSERT_EQ(alloc(by_loc.get(), locs), KVS_OK);
  int64_t pages[] = {3, 1};
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_alloc_pages(by_page.get(), pages, 2, nullptr, &err), KVS_OK)
      << err.message;
  for (int64_t loc = 0; loc < int64_t(8 * P); loc += int64_t(P) / 2) {
    EXPECT_EQ(translate(by_page.get(), loc), translate(by_loc.get(), loc)) << "location " << loc;
  }
  EXPECT_EQ(kvs_window_pool_digest(by_page.get()), kvs_window_pool_digest(by_loc.get()));
  EXPECT_EQ(kvs_window_pool_journal_pending(by_page.get()),
            kvs_window_pool_journal_pending(by_loc.get()));
  // Freed by page with a block table's -1 mixed in: both free again.
  int64_t row[] = {-1, 1, 3, -1};
  ASSERT_EQ(kvs_window_pool_free_pages(by_page.get(), row, 4, &err), KVS_OK) << err.message;
  ASSERT_EQ(release(by_loc.get(), locs), KVS_OK);
  EXPECT_EQ(kvs_window_pool_swa_available(by_page.get()), 4 * P);
  EXPECT_EQ(kvs_window_pool_digest(by_page.get()), kvs_window_pool_digest(by_loc.get()));
  EXPECT_INTEGRITY(by_page.get());
}

TEST(WindowPool, a_bad_page_number_is_refused_by_name_and_changes_nothing) {
  Pool p = pool();
  int64_t two = 2;
  ASSERT_EQ(kvs_window_pool_alloc_pages(p.get(), &two, 1, nullptr, nullptr), KVS_OK);
  uint64_t digest = kvs_window_pool_digest(p.get());
  size_t pending = kvs_window_pool_journal_pending(p.get());
  struct Case {
    std::vector<int64_t> pages;
    kvs_status status;
    const char *says;
  };
  const Case cases[] = {
      {{0, -1}, KVS_ERR_OUT_OF_RANGE, "pages[1] = -1 is not a full page (they are 0..7"},
      {{8}, KVS_ERR_OUT_OF_RANGE, "pages[0] = 8 is not a full page"},
      {{7}, KVS_ERR_CONFLICT, "full page 7 (locations 896..1023) is the reserved dummy page"},
      {{0, 0}, KVS_ERR_CONFLICT, "alloc names full page 0 twice"},
      {{0, 2}, KVS_ERR_CONFLICT, "full page 2 already holds window page"},
      {{0, 1, 3, 4, 5}, KVS_ERR_EXHAUSTED, "out of"},
      {{0, 1, 2, 3, 4, 5, 6, 0, 1}, KVS_ERR_CONFLICT, "so one is named twice"},
  };
  for (const Case &c : cases) {
    kvs_error err;
    EXPECT_EQ(kvs_window_pool_alloc_pages(p.get(), c.pages.data(), c.pages.size(), nullptr, &err),
              c.status)
        << c.says;
    EXPECT_TRUE(contains(err.message, c.says)) << err.message;
    EXPECT_EQ(kvs_window_pool_digest(p.get()), digest) << c.says;
    EXPECT_EQ(kvs_window_pool_journal_pending(p.get()), pending) << c.says;
  }
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_alloc_pages(p.get(), nullptr, 1, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  int64_t twice[] = {2, 2};
  EXPECT_EQ(kvs_window_pool_free_pages(p.get(), twice, 2, &err), KVS_ERR_CONFLICT);
  EXPECT_TRUE(contains(err.message, "free names full page 2 twice (pages[1])")) << err.message;
  int64_t past[] = {9};
  EXPECT_EQ(kvs_window_pool_free_pages(p.get(), past, 1, &err), KVS_ERR_OUT_OF_RANGE);
  int64_t dummy[] = {7};
  EXPECT_EQ(kvs_window_pool_free_pages(p.get(), dummy, 1, &err), KVS_ERR_CONFLICT);
  EXPECT_TRUE(contains(err.message, "reserved dummy page; it is never freed")) << err.message;
  EXPECT_EQ(kvs_window_pool_digest(p.get()), digest);
  EXPECT_EQ(translate(p.get(), int64_t(2 * P)) >= 0, true) << "page 2 still bound";
  EXPECT_INTEGRITY(p.get());
}
