// Tail states (core/cost_model.h, kvs_row_widths.tail_states): with
// per-request ratio-4 rings and a prefix cache, every window page keeps
// the first halves of its last four positions' ratio-4 ring rows, and an
// exact hit seeds its request's ring from its tail's: one restore entry,
// journaled when the request holds both the hit and a ring slot (in
// either order), replayed by a follower to the same digest (the slot's
// seed is part of it), refused whole when it cannot hold.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cost_model.h"
#include "pool/window_pool.h"
#include "tests/core/fixtures.h"

using namespace kvs_test;

namespace {

constexpr uint64_t kRunning = 4;  // 5 request slots, the dummy last

kvs_cost_terms tail_terms(bool tails) {
  kvs_geometry g = args();
  kvs_row_widths w = kvs_row_widths_default(&g);
  kvs_row_widths_place(&w, KVS_STATE_RINGS_PER_REQUEST, kRunning, tails);
  kvs_cost_terms t;
  kvs_error err;
  EXPECT_EQ(kvs_cost_terms_make(&g, 0, 4, &w, &t, &err), KVS_OK) << err.message;
  return t;
}

kvs_pool_sizes tail_sizes(bool tails, uint64_t pages = 32, uint64_t win = 12) {
  kvs_cost_terms t = tail_terms(tails);
  kvs_pool_sizes s;
  kvs_error err;
  EXPECT_EQ(kvs_pool_sizes_compute_terms(pages, &t, 0.5, P, win, &s, &err), KVS_OK) << err.message;
  return s;
}

Pool tail_pool(size_t journal) {
  kvs_pool_sizes s = tail_sizes(true);
  kvs_window_pool_options o = KVS_WINDOW_POOL_OPTIONS_INIT;
  o.max_running = kRunning;
  o.journal_capacity = journal;
  o.prefix_cache = true;
  o.prefix_align = P;
  kvs_window_pool_t pool = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_create(&s, &o, &pool, &err), KVS_OK) << err.message;
  return Pool(pool);
}

struct Pair {
  Pool leader = tail_pool(4096), follower = tail_pool(0);
  std::vector<kvs_journal_entry> drain() {
    std::vector<kvs_journal_entry> e(4096);
    size_t n = 0;
    kvs_window_pool_journal_drain(leader.get(), e.data(), e.size(), &n);
    e.resize(n);
    return e;
  }
  // Ships entries to the follower; both must agree after.
  void apply(const std::vector<kvs_journal_entry> &e) {
    kvs_error err;
    ASSERT_EQ(kvs_window_pool_apply(follower.get(), e.data(), e.size(), &err), KVS_OK)
        << err.message;
    EXPECT_EQ(kvs_window_pool_digest(leader.get()), kvs_window_pool_digest(follower.get()));
    EXPECT_INTEGRITY(leader.get());
    EXPECT_INTEGRITY(follower.get());
  }
};

uint64_t slot_bind(kvs_window_pool *pool, uint64_t request) {
  uint64_t slot = 0;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_slot_bind(pool, request, &slot, &err), KVS_OK) << err.message;
  return slot;
}

// Request 1 wrote pages 3 and 4 (keys 10, 11), kept page 4's window as its
// tail and finished.
void cache_two_pages(Pair &pair) {
  kvs_window_pool *pool = pair.leader.get();
  slot_bind(pool, 1);
  kvs_error err;
  for (uint64_t page : {3, 4}) ASSERT_EQ(alloc(pool, page_locs(page), &err), KVS_OK);
  uint64_t keys[2] = {10, 11};
  int64_t pages[2] = {3, 4};
  uint8_t tails[2] = {0, 1}, taken[2];
  ASSERT_EQ(kvs_window_pool_prefix_insert(pool, 1, keys, pages, tails, 2, taken, &err), KVS_OK)
      << err.message;
  for (uint64_t page : {3, 4}) ASSERT_EQ(release(pool, page_locs(page), &err), KVS_OK);
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK);
  ASSERT_EQ(kvs_window_pool_slot_free(pool, 1, &err), KVS_OK);
  pair.apply(pair.drain());
}

kvs_prefix_hit exact_hit(kvs_window_pool *pool) {
  uint64_t keys[3] = {10, 11, 12};
  kvs_prefix_hit hit;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_match(pool, keys, 3, 3 * P, 0, &hit, nullptr, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(hit.hit_tokens, 2 * P);
  EXPECT_FALSE(hit.reprefill);
  return hit;
}

// The journal's restores.
std::vector<kvs_tail_restore> restores(const std::vector<kvs_journal_entry> &e) {
  std::vector<kvs_tail_restore> out;
  for (const kvs_journal_entry &x : e) {
    kvs_tail_restore r;
    if (kvs_window_pool_restore_of(&x, &r)) out.push_back(r);
  }
  return out;
}

}  // namespace

TEST(TailStates, each_window_page_keeps_two_rows_of_every_ratio4_ring) {
  kvs_pool_sizes with = tail_sizes(true), without = tail_sizes(false);
  kvs_geometry g = args();  // layers 0, 4, 128, 4
  kvs_error err;
  bool present = false;
  kvs_layer_sizes csa, hca;
  ASSERT_EQ(kvs_pool_sizes_layer(&with, &g, 1, &present, &csa, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_pool_sizes_layer(&with, &g, 2, &present, &hca, &err), KVS_OK) << err.message;
  EXPECT_EQ(csa.ring_rows, (kRunning + 1) * 8);
  EXPECT_EQ(csa.tail_state_rows, with.n_win_pages * KVS_TAIL_STATE_ROWS);
  EXPECT_EQ(csa.state_slots, csa.ring_rows + csa.tail_state_rows);
  EXPECT_EQ(csa.idx_state_slots, csa.ring_rows + csa.tail_state_rows);
  EXPECT_EQ(hca.tail_state_rows, 0u) << "a ratio-128 block starts its ring afresh";
  // The bytes: two ratio-4 layers, two tail rows of 128 B (attention) and
  // 64 B (indexer) per window page each.
  kvs_cost_terms tw = tail_terms(true), tn = tail_terms(false);
  kvs_pool_breakdown a, b;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&with, &tw, 1, &a, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_pool_sizes_bytes_terms(&without, &tn, 1, &b, &err), KVS_OK) << err.message;
  EXPECT_EQ(a.state - b.state, 2 * with.n_win_pages * 2 * 128);
  EXPECT_EQ(a.index_state - b.index_state, 2 * with.n_win_pages * 2 * 64);
  // A window page costs its tail state too.
  uint64_t page_with = 0, page_without = 0;
  ASSERT_EQ(kvs_pool_sizes_window_page_bytes(&with, &tw, &page_with, &err), KVS_OK);
  ASSERT_EQ(kvs_pool_sizes_window_page_bytes(&without, &tn, &page_without, &err), KVS_OK);
  EXPECT_EQ(page_with - page_without, 2 * 2 * (128 + 64));
  // Sizes and terms that disagree are refused; per-page rings keep none.
  EXPECT_EQ(kvs_pool_sizes_check_terms(&with, &tn, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("tail states"), std::string::npos) << err.message;
  kvs_row_widths w = kvs_row_widths_default(&g);
  w.tail_states = true;
  kvs_cost_terms t;
  EXPECT_EQ(kvs_cost_terms_make(&g, 0, 4, &w, &t, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("per-request rings only"), std::string::npos)
      << err.message;
  kvs_row_widths_place(&w, KVS_STATE_RINGS_HCA_PER_REQUEST, kRunning, true);
  EXPECT_FALSE(w.tail_states) << "ratio-4 rings per page keep their own state";
}

TEST(TailStates, an_exact_hit_seeds_its_slot_when_it_holds_both_in_either_order) {
  Pair pair;
  cache_two_pages(pair);
  kvs_window_pool *pool = pair.leader.get();
  const int64_t tail_window = translate(pool, int64_t(4 * P)) / int64_t(P);
  kvs_error err;
  // Request 2 takes the hit first, then its slot: the restore follows the
  // slot's binding.
  kvs_prefix_hit hit = exact_hit(pool);
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 2, &hit, &err), KVS_OK) << err.message;
  std::vector<kvs_journal_entry> all = pair.drain();
  EXPECT_TRUE(restores(all).empty()) << "no slot yet: nothing to seed";
  uint64_t slot2 = slot_bind(pool, 2);
  std::vector<kvs_journal_entry> e = pair.drain();
  ASSERT_EQ(e.size(), 2u) << "the slot's binding, then the restore";
  uint64_t bound = 99;
  EXPECT_TRUE(kvs_window_pool_slot_bind_of(&e[0], &bound));
  EXPECT_EQ(bound, slot2);
  std::vector<kvs_tail_restore> r = restores(e);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].full_page, 4u);
  EXPECT_EQ(r[0].window_page, uint64_t(tail_window));
  EXPECT_EQ(r[0].slot, slot2);
  // H = 2P: positions H - 4 .. H - 1 fill ring rows 4..7 of the slot.
  EXPECT_EQ(r[0].ring_row, slot2 * 8 + 4);
  // Request 3 has its slot first: the restore follows the acquire.
  uint64_t slot3 = slot_bind(pool, 3);
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 3, &hit, &err), KVS_OK) << err.message;
  std::vector<kvs_journal_entry> e3 = pair.drain();
  r = restores(e3);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].slot, slot3);
  EXPECT_EQ(r[0].window_page, uint64_t(tail_window));
  // The follower replays all of it as one step to the same digest.
  all.insert(all.end(), e.begin(), e.end());
  all.insert(all.end(), e3.begin(), e3.end());
  pair.apply(all);
}

TEST(TailStates, a_restore_that_cannot_hold_is_refused_whole) {
  Pair pair;
  cache_two_pages(pair);
  kvs_window_pool *pool = pair.leader.get();
  kvs_error err;
  kvs_prefix_hit hit = exact_hit(pool);
  uint64_t slot = slot_bind(pool, 2);
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 2, &hit, &err), KVS_OK) << err.message;
  const std::vector<kvs_journal_entry> good = pair.drain();
  ASSERT_EQ(restores(good).size(), 1u);
  const uint64_t before = kvs_window_pool_digest(pair.follower.get());
  auto refused = [&](std::vector<kvs_journal_entry> e, const char *why) {
    EXPECT_NE(kvs_window_pool_apply(pair.follower.get(), e.data(), e.size(), &err), KVS_OK) << why;
    EXPECT_EQ(kvs_window_pool_digest(pair.follower.get()), before) << why << ": nothing changed";
    EXPECT_INTEGRITY(pair.follower.get());
  };
  size_t at = 0;
  while (!kvs_window_pool_restore_of(&good[at], nullptr)) at++;
  // Into a slot that holds no request here: the slot's binding dropped.
  std::vector<kvs_journal_entry> no_slot;
  for (size_t i = 0; i < good.size(); i++) {
    if (!kvs_window_pool_slot_bind_of(&good[i], nullptr)) no_slot.push_back(good[i]);
  }
  refused(no_slot, "a restore into a free slot");
  EXPECT_NE(std::string(err.message).find("holds no request here"), std::string::npos)
      << err.message;
  // The other half of the ring: not where the hit's positions go.
  std::vector<kvs_journal_entry> half = good;
  half[at].window_page ^= int64_t(1) << 32;
  refused(half, "the wrong half");
  // A block without a tail: page 3.
  std::vector<kvs_journal_entry> untailed = good;
  untailed[at].full_page = (untailed[at].full_page & ~((uint64_t(1) << 56) - 1)) | 3;
  refused(untailed, "a block without a tail");
  EXPECT_NE(std::string(err.message).find("no readable tail"), std::string::npos) << err.message;
  // The seed is part of the digest: the same entries without the restore
  // leave another digest than the leader's.
  std::vector<kvs_journal_entry> unseeded;
  for (const kvs_journal_entry &x : good) {
    if (!kvs_window_pool_restore_of(&x, nullptr)) unseeded.push_back(x);
  }
  ASSERT_EQ(kvs_window_pool_apply(pair.follower.get(), unseeded.data(), unseeded.size(), &err),
            KVS_OK)
      << err.message;
  EXPECT_NE(kvs_window_pool_digest(pair.follower.get()), kvs_window_pool_digest(pool))
      << "a slot seeded from a tail digests differently from an unseeded one";
  (void)slot;
}

TEST(TailStates, a_reprefill_hit_seeds_nothing_and_writes_the_tail_itself) {
  Pair pair;
  kvs_window_pool *pool = pair.leader.get();
  // Request 1 caches pages 3, 4 without a tail: a later hit re-prefills.
  slot_bind(pool, 1);
  kvs_error err;
  for (uint64_t page : {3, 4}) ASSERT_EQ(alloc(pool, page_locs(page), &err), KVS_OK);
  uint64_t keys[3] = {10, 11, 12};
  int64_t pages[2] = {3, 4};
  uint8_t tails[2] = {0, 0}, taken[2];
  ASSERT_EQ(kvs_window_pool_prefix_insert(pool, 1, keys, pages, tails, 2, taken, &err), KVS_OK);
  for (uint64_t page : {3, 4}) ASSERT_EQ(release(pool, page_locs(page), &err), KVS_OK);
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK);
  ASSERT_EQ(kvs_window_pool_slot_free(pool, 1, &err), KVS_OK);
  pair.apply(pair.drain());
  slot_bind(pool, 2);
  kvs_prefix_hit hit;
  ASSERT_EQ(kvs_window_pool_prefix_match(pool, keys, 3, 3 * P, P, &hit, nullptr, &err), KVS_OK);
  ASSERT_TRUE(hit.reprefill);
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 2, &hit, &err), KVS_OK) << err.message;
  std::vector<kvs_journal_entry> e = pair.drain();
  EXPECT_TRUE(restores(e).empty()) << "the request computes the positions before the hit";
  pair.apply(e);
}
