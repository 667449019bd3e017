// Safety properties of the prefix cache, each with a planted bug in
// tests/mutants that breaks it:
//   - an exact hit is never taken through a tail another request is
//     re-prefilling (the tail's writer is checked: hit_no_writer);
//   - a refused insert or fetch changes nothing, also when one of its
//     pages is cached already under another key (the whole pool's state
//     compared before and after: insert_no_cached_check);
//   - a follower refuses every impossible prefix entry of a replayed step
//     (an EVICT of a held block, a FETCH from a host slot holding another
//     block, a SPILL of a chain another slot holds), changing nothing
//     (replay_evicts_held);
//   - the digest covers every field of a block it claims (key, parent,
//     refs, tail, writer): two pools that differ only in one of them
//     digest differently, in that block's unit alone (digest_no_writer).
// Built on the window pool alone (no //core fixtures), so that
// tests/mutants can link it against the planted variants of the pool.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/geometry.h"
#include "pool/window_pool.h"

namespace {

constexpr uint64_t P = KVS_DEFAULT_WINDOW_PAGE;
constexpr uint64_t kPages = 32;  // full pages, the dummy (31) included
constexpr uint64_t kDummy = kPages - 1;

struct PoolDeleter {
  void operator()(kvs_window_pool *pool) const { kvs_window_pool_destroy(pool); }
};
using Pool = std::unique_ptr<kvs_window_pool, PoolDeleter>;

// The tests' small geometry (window-only, CSA, HCA, CSA layers) with a
// prefix cache aligned to P, 32 full pages, 12 window pages, a journal of
// `journal` entries (0: a follower's) and `host` host slots.
Pool prefix_pool(size_t journal, uint64_t host) {
  const uint32_t ratios[] = {0, 4, 128, 4};
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_init(&g, 8, 4, 4, ratios, 4, &err), KVS_OK) << err.message;
  kvs_pool_sizes s;
  EXPECT_EQ(kvs_pool_sizes_compute(kPages, &g, 0.5, P, 12, &s, &err), KVS_OK) << err.message;
  kvs_window_pool_options options = KVS_WINDOW_POOL_OPTIONS_INIT;
  options.max_running = 4;
  options.journal_capacity = journal;
  options.prefix_cache = true;
  options.prefix_align = P;
  options.host_pages = host;
  kvs_window_pool_t pool = nullptr;
  EXPECT_EQ(kvs_window_pool_create(&s, &options, &pool, &err), KVS_OK) << err.message;
  return Pool(pool);
}

bool has(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

std::vector<int64_t> locs_of(int64_t page) {
  std::vector<int64_t> locs;
  for (uint64_t t = 0; t < P; t++) locs.push_back(page * int64_t(P) + int64_t(t));
  return locs;
}

void bind(kvs_window_pool *pool, std::vector<int64_t> pages) {
  for (int64_t page : pages) {
    kvs_error err;
    std::vector<int64_t> locs = locs_of(page);
    ASSERT_EQ(kvs_window_pool_alloc(pool, locs.data(), locs.size(), nullptr, &err), KVS_OK)
        << err.message;
  }
}

void unbind(kvs_window_pool *pool, std::vector<int64_t> pages) {
  for (int64_t page : pages) {
    kvs_error err;
    std::vector<int64_t> locs = locs_of(page);
    ASSERT_EQ(kvs_window_pool_free(pool, locs.data(), locs.size(), &err), KVS_OK) << err.message;
  }
}

kvs_status insert(kvs_window_pool *pool, uint64_t request, std::vector<uint64_t> keys,
                  std::vector<int64_t> pages, std::vector<uint8_t> tails, kvs_error *err) {
  std::vector<uint8_t> taken(keys.size(), 0);
  return kvs_window_pool_prefix_insert(pool, request, keys.data(), pages.data(), tails.data(),
                                       keys.size(), taken.data(), err);
}

kvs_prefix_hit match(const kvs_window_pool *pool, std::vector<uint64_t> keys, uint64_t reprefill) {
  kvs_prefix_hit hit;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_match(pool, keys.data(), keys.size(), keys.size() * P + 1,
                                         reprefill, &hit, nullptr, &err),
            KVS_OK)
      << err.message;
  return hit;
}

// Evicts until `pages` full pages and `window` window pages came back.
std::vector<int64_t> evict(kvs_window_pool *pool, uint64_t pages, uint64_t window) {
  std::vector<int64_t> freed(kPages, -1);
  size_t n = 0;
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_prefix_evict(pool, pages, window, freed.data(), freed.size(), &n,
                                         nullptr, &err),
            KVS_OK)
      << err.message;
  freed.resize(n);
  return freed;
}

// A prefix entry as a leader journals it (the format
// kvs_window_pool_prefix_entry decodes, checked where it is used).
kvs_journal_entry prefix_entry(kvs_prefix_op op, uint64_t page, int64_t operand) {
  kvs_journal_entry e = {KVS_JOURNAL_PREFIX_TAG | (uint64_t(op) << 56) | page, operand};
  uint64_t got_page = 0;
  int64_t got_operand = 0;
  EXPECT_EQ(kvs_window_pool_prefix_entry(&e, &got_page, &got_operand), op);
  EXPECT_EQ(got_page, page);
  EXPECT_EQ(got_operand, operand);
  return e;
}

// Everything a pool shows: its digests (whole and per unit), mapping,
// counts, journal, every cached block and every host slot.
struct State {
  uint64_t digest = 0, page_digest = 0, available = 0, bound = 0, sequence = 0;
  size_t pending = 0;
  std::vector<uint64_t> units;  // the digest of each unit of its index space
  std::vector<int64_t> mapping;
  std::vector<uint64_t> stats;          // kvs_prefix_stats, field by field
  std::vector<std::string> blocks;      // per full page: its node, or ""
  std::vector<uint64_t> host;           // per host slot: its chain, or 0
  static const char *const kStats[13];  // the stats' names, in order
};
const char *const State::kStats[13] = {
    "nodes",  "tails",      "holds",       "refs",   "evictable", "evictions", "tail_drops",
    "digest", "host_slots", "host_blocks", "spills", "fetches",   "host_drops"};

State state_of(const kvs_window_pool *pool) {
  State s;
  s.digest = kvs_window_pool_digest(pool);
  s.page_digest = kvs_window_pool_page_digest(pool);
  s.available = kvs_window_pool_swa_available(pool);
  s.bound = kvs_window_pool_bound_pages(pool);
  s.sequence = kvs_window_pool_journal_sequence(pool);
  s.pending = kvs_window_pool_journal_pending(pool);
  const uint64_t units = kvs_window_pool_digest_units(pool);
  for (uint64_t u = 0; u < units; u++)
    s.units.push_back(kvs_window_pool_digest_range(pool, u, u + 1));
  const int64_t *map = kvs_window_pool_mapping(pool);
  s.mapping.assign(map, map + kPages * P + 1);
  kvs_prefix_stats st;
  EXPECT_EQ(kvs_window_pool_prefix_stats(pool, &st, nullptr), KVS_OK);
  s.stats = {st.nodes,     st.tails,      st.holds,     st.refs,       st.evictable,
             st.evictions, st.tail_drops, st.digest,    st.host_slots, st.host_blocks,
             st.spills,    st.fetches,    st.host_drops};
  for (uint64_t page = 0; page < kPages; page++) {
    uint64_t key = 0;
    int64_t parent = 0;
    uint32_t refs = 0;
    bool tail = false;
    std::ostringstream b;
    if (kvs_window_pool_prefix_node(pool, page, &key, &parent, &refs, &tail, nullptr) == KVS_OK) {
      b << "key " << key << ", parent " << parent << ", refs " << refs << (tail ? ", a tail" : "");
    }
    s.blocks.push_back(b.str());
  }
  for (uint64_t slot = 0; slot < st.host_slots; slot++) {
    uint64_t chain = 0;
    kvs_window_pool_prefix_host_slot(pool, slot, &chain, nullptr);
    s.host.push_back(chain);
  }
  return s;
}

// What differs between two states, in words ("" when nothing does).
// ignore_digests leaves out the digests (whole, per unit and the stats'
// share), for two pools meant to differ only in what the digest covers;
// ignore_journal the journal's counts, for a leader and its follower
// (which journals nothing).
std::string changes(const State &a, const State &b, bool ignore_digests = false,
                    bool ignore_journal = false) {
  std::ostringstream out;
  auto num = [&](const char *what, uint64_t x, uint64_t y) {
    if (x != y) out << what << " " << x << " -> " << y << "; ";
  };
  if (!ignore_digests) {
    num("digest", a.digest, b.digest);
    num("page digest", a.page_digest, b.page_digest);
    for (size_t u = 0; u < a.units.size() && u < b.units.size(); u++) {
      if (a.units[u] != b.units[u]) out << "digest unit " << u << "; ";
    }
  }
  num("free window slots", a.available, b.available);
  num("bound pages", a.bound, b.bound);
  if (!ignore_journal) {
    num("journal sequence", a.sequence, b.sequence);
    num("journal entries pending", a.pending, b.pending);
  }
  for (size_t i = 0; i < a.stats.size(); i++) {
    if (ignore_digests && std::string(State::kStats[i]) == "digest") continue;
    num(State::kStats[i], a.stats[i], b.stats[i]);
  }
  for (uint64_t page = 0; page < kPages; page++) {
    if (a.blocks[page] != b.blocks[page]) {
      out << "full page " << page << ": [" << a.blocks[page] << "] -> [" << b.blocks[page] << "]; ";
    }
    for (uint64_t t = 0; t < P; t++) {
      if (a.mapping[page * P + t] != b.mapping[page * P + t]) {
        out << "full page " << page << " maps to window slot " << a.mapping[page * P + t] << " -> "
            << b.mapping[page * P + t] << "; ";
        break;
      }
    }
  }
  for (size_t s = 0; s < a.host.size() && s < b.host.size(); s++) {
    if (a.host[s] != b.host[s]) out << "host slot " << s << "'s chain; ";
  }
  return out.str();
}

void expect_integrity(const kvs_window_pool *pool) {
  kvs_error err;
  EXPECT_EQ(kvs_window_pool_check_integrity(pool, &err), KVS_OK) << err.message;
}

// A leader that journals and a follower that replays.
struct PrefixPair {
  Pool leader, follower;
  explicit PrefixPair(uint64_t host = 0)
      : leader(prefix_pool(4096, host)), follower(prefix_pool(0, host)) {}
  kvs_window_pool *pool() { return leader.get(); }
  std::vector<kvs_journal_entry> drain() {
    std::vector<kvs_journal_entry> entries(4096);
    size_t n = 0;
    kvs_window_pool_journal_drain(leader.get(), entries.data(), entries.size(), &n);
    entries.resize(n);
    return entries;
  }
  void apply(const std::vector<kvs_journal_entry> &entries) {
    kvs_error err;
    ASSERT_EQ(kvs_window_pool_apply(follower.get(), entries.data(), entries.size(), &err), KVS_OK)
        << err.message;
    EXPECT_EQ(changes(state_of(leader.get()), state_of(follower.get()), false, true), "")
        << "the follower replayed the leader's step to another state";
    expect_integrity(leader.get());
    expect_integrity(follower.get());
  }
  void step() { apply(drain()); }
};

// Request 1 computed pages 3 and 4 (keys 10, 11), keeps page 4's window
// as its tail (tail4) and finished: both blocks cached, unreferenced.
void two_blocks(PrefixPair &pair, bool tail4) {
  kvs_window_pool *pool = pair.pool();
  kvs_error err;
  bind(pool, {3, 4});
  ASSERT_EQ(insert(pool, 1, {10, 11}, {3, 4}, {0, uint8_t(tail4)}, &err), KVS_OK) << err.message;
  unbind(pool, tail4 ? std::vector<int64_t>{3} : std::vector<int64_t>{3, 4});
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK) << err.message;
  pair.step();
}

}  // namespace

// Property: a tail another request is re-prefilling is read by nobody.
// A hit matched while block 4's tail was readable is kept; the cache then
// drops that tail, and request 2 re-prefills it (it writes block 4's
// window page from scratch). The kept exact hit still names block 4, born
// when it was (the stamp holds): only the tail's writer tells that its
// window is being written now.
TEST(PrefixSafety, an_exact_hit_is_refused_on_a_tail_another_request_re_prefills) {
  PrefixPair pair;
  kvs_window_pool *pool = pair.pool();
  two_blocks(pair, true);
  const kvs_prefix_hit exact = match(pool, {10, 11, 12}, 0);
  ASSERT_EQ(exact.block, 4);
  ASSERT_FALSE(exact.reprefill);
  ASSERT_EQ(exact.hit_tokens, 2 * P);
  // The window needs a page: block 4's tail goes.
  uint64_t window_before = kvs_window_pool_swa_available(pool);
  EXPECT_TRUE(evict(pool, 0, 1).empty());
  ASSERT_EQ(kvs_window_pool_swa_available(pool), window_before + P) << "the tail was dropped";
  pair.step();
  // Request 2 re-prefills it.
  const kvs_prefix_hit reprefill = match(pool, {10, 11, 12}, P);
  ASSERT_TRUE(reprefill.reprefill);
  ASSERT_EQ(reprefill.block, 4);
  kvs_error err;
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 2, &reprefill, &err), KVS_OK) << err.message;
  pair.step();
  bool tail = false;
  ASSERT_EQ(kvs_window_pool_prefix_node(pool, 4, nullptr, nullptr, nullptr, &tail, nullptr),
            KVS_OK);
  ASSERT_TRUE(tail) << "block 4 has a tail again: the one request 2 writes";
  // Request 5 takes the exact hit it kept: refused, nothing changed.
  const State before = state_of(pool);
  const kvs_status status = kvs_window_pool_prefix_acquire(pool, 5, &exact, &err);
  EXPECT_EQ(status, KVS_ERR_CONFLICT)
      << "an exact hit was taken through block 4's tail, which request 2 is re-prefilling";
  if (status != KVS_OK) {
    EXPECT_TRUE(has(err.message, "another request writes it")) << err.message;
  }
  EXPECT_EQ(changes(before, state_of(pool)), "") << "the refused acquire changed the pool";
  if (status == KVS_OK) return;
  // Once request 2 has written the tail and let go, the same hit is taken.
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 2, &err), KVS_OK) << err.message;
  pair.step();
  ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, 5, &exact, &err), KVS_OK) << err.message;
  pair.step();
}

// Property: a refused insert changes nothing, also when the page it
// refuses is already cached under another key (then every page before it
// in the call would otherwise be cached already: pages the engine still
// thinks are its own, and frees).
TEST(PrefixSafety, a_refused_insert_changes_nothing_even_over_a_page_cached_under_another_key) {
  PrefixPair pair;
  kvs_window_pool *pool = pair.pool();
  two_blocks(pair, false);  // page 3: key 10, page 4: key 11 under it
  bind(pool, {5, 6});       // request 2's fresh pages
  pair.step();
  uint64_t refused = 0;
  auto expect_refused = [&](std::vector<uint64_t> keys, std::vector<int64_t> pages,
                            std::vector<uint8_t> tails, kvs_status want, const char *words) {
    SCOPED_TRACE(words);
    const State before = state_of(pool);
    kvs_error err;
    EXPECT_EQ(insert(pool, 2, keys, pages, tails, &err), want);
    EXPECT_TRUE(has(err.message, words)) << err.message;
    EXPECT_EQ(changes(before, state_of(pool)), "") << "a refused insert changed the pool";
    expect_integrity(pool);
    refused++;
  };
  // Page 4 holds key 11 (under key 10): a new block cannot start there.
  expect_refused({20, 21}, {5, 4}, {0, 0}, KVS_ERR_CONFLICT, "cached already");
  expect_refused({20, 21, 22}, {5, 6, 3}, {0, 0, 0}, KVS_ERR_CONFLICT, "cached already");
  // Key 10 is followed (page 3), then page 3 again for key 21.
  expect_refused({10, 21}, {5, 3}, {0, 0}, KVS_ERR_CONFLICT, "cached already");
  expect_refused({20, 21}, {5, 5}, {0, 0}, KVS_ERR_CONFLICT, "twice in this call");
  expect_refused({20, 21}, {5, int64_t(kDummy)}, {0, 0}, KVS_ERR_OUT_OF_RANGE, "dummy");
  expect_refused({20, 21}, {5, 7}, {0, 1}, KVS_ERR_INVALID_ARGUMENT, "it has none bound");
  // The engine's own pages are still its own: the insert it meant goes in.
  kvs_error err;
  std::vector<uint8_t> taken(2, 9);
  const uint64_t keys[2] = {20, 21};
  const int64_t pages[2] = {5, 6};
  ASSERT_EQ(kvs_window_pool_prefix_insert(pool, 2, keys, pages, nullptr, 2, taken.data(), &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(taken, (std::vector<uint8_t>{1, 1}));
  pair.step();
  std::printf("reliability: refused prefix calls compared whole %llu, unchanged\n",
              (unsigned long long)refused);
}

// The same for a fetch: one of its pages is a block cached under another
// key, given twice, bound, or the dummy.
TEST(PrefixSafety, a_refused_fetch_changes_nothing_even_over_a_page_cached_under_another_key) {
  PrefixPair pair(8);
  kvs_window_pool *pool = pair.pool();
  two_blocks(pair, true);
  ASSERT_EQ(evict(pool, 2, 0).size(), 2u);  // both blocks to the host tier
  pair.step();
  // Request 3 caches page 5 as key 20, a block of another prompt.
  kvs_error err;
  bind(pool, {5});
  ASSERT_EQ(insert(pool, 3, {20}, {5}, {0}, &err), KVS_OK) << err.message;
  unbind(pool, {5});
  ASSERT_EQ(kvs_window_pool_prefix_release(pool, 3, &err), KVS_OK) << err.message;
  bind(pool, {7});  // page 7 is being written by some request
  pair.step();
  const std::vector<uint64_t> keys = {10, 11, 12};
  const kvs_prefix_hit hit = match(pool, keys, P);
  ASSERT_EQ(hit.host_pages, 2u);
  uint64_t refused = 0;
  auto expect_refused = [&](std::vector<int64_t> into, kvs_status want, const char *words) {
    SCOPED_TRACE(words);
    const State before = state_of(pool);
    EXPECT_EQ(
        kvs_window_pool_prefix_fetch(pool, 4, &hit, keys.data(), keys.size(), into.data(), &err),
        want);
    EXPECT_TRUE(has(err.message, words)) << err.message;
    EXPECT_EQ(changes(before, state_of(pool)), "") << "a refused fetch changed the pool";
    expect_integrity(pool);
    refused++;
  };
  expect_refused({6, 5}, KVS_ERR_CONFLICT, "a cached block");
  expect_refused({5, 6}, KVS_ERR_CONFLICT, "a cached block");
  expect_refused({6, 6}, KVS_ERR_CONFLICT, "given twice");
  expect_refused({6, 7}, KVS_ERR_CONFLICT, "bound to a window page");
  expect_refused({6, int64_t(kDummy)}, KVS_ERR_OUT_OF_RANGE, "dummy");
  std::vector<int64_t> into = {6, 8};
  ASSERT_EQ(
      kvs_window_pool_prefix_fetch(pool, 4, &hit, keys.data(), keys.size(), into.data(), &err),
      KVS_OK)
      << err.message;
  pair.step();
  std::printf("reliability: refused prefix calls compared whole %llu, unchanged\n",
              (unsigned long long)refused);
}

// Property: a follower replays only what a leader could have journaled.
// Each step below is the leader's with one entry forged or changed; the
// follower refuses it and is exactly as before, then takes the leader's.
TEST(PrefixSafety, a_follower_refuses_impossible_prefix_entries_and_changes_nothing) {
  uint64_t refused = 0;
  // Refused whole, the follower unchanged; then the leader's step applies.
  auto expect_refused = [&](PrefixPair &pair, const std::vector<kvs_journal_entry> &forged,
                            const std::vector<kvs_journal_entry> &real, const char *what,
                            const char *words) {
    SCOPED_TRACE(what);
    kvs_window_pool *follower = pair.follower.get();
    const State before = state_of(follower);
    kvs_error err;
    const kvs_status status = kvs_window_pool_apply(follower, forged.data(), forged.size(), &err);
    EXPECT_NE(status, KVS_OK) << "the follower replayed " << what;
    if (status != KVS_OK) {
      EXPECT_TRUE(has(err.message, words)) << err.message;
    }
    EXPECT_EQ(changes(before, state_of(follower)), "") << "a refused step changed the follower";
    expect_integrity(follower);
    refused++;
    pair.apply(real);
  };

  // An EVICT of a block a request holds (request 1 holds blocks 3 and 4).
  {
    PrefixPair pair;
    kvs_window_pool *pool = pair.pool();
    kvs_error err;
    bind(pool, {3, 4});
    ASSERT_EQ(insert(pool, 1, {10, 11}, {3, 4}, {0, 0}, &err), KVS_OK) << err.message;
    unbind(pool, {3, 4});
    pair.step();
    expect_refused(pair, {prefix_entry(KVS_PREFIX_OP_EVICT, 4, 11)}, {},
                   "an eviction of block 4, which request 1 holds", "referenced");
    expect_refused(pair, {prefix_entry(KVS_PREFIX_OP_EVICT, 3, 10)}, {},
                   "an eviction of block 3, which request 1 holds and block 4 hangs under",
                   "referenced");
    // Once request 1 lets go, the leader evicts both and the follower agrees.
    ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK) << err.message;
    pair.step();
    EXPECT_EQ(evict(pool, 2, 0), (std::vector<int64_t>{4, 3}));
    pair.step();
  }

  // A FETCH from a host slot that holds another block, and a SPILL of a
  // block whose chain another slot holds.
  {
    PrefixPair pair(8);
    kvs_window_pool *pool = pair.pool();
    two_blocks(pair, true);
    ASSERT_EQ(evict(pool, 2, 0).size(), 2u);  // block 11 to slot 0, block 10 to slot 1
    pair.step();
    const std::vector<uint64_t> keys = {10, 11, 12};
    const kvs_prefix_hit hit = match(pool, keys, P);
    ASSERT_EQ(hit.host_pages, 2u);
    kvs_error err;
    const std::vector<int64_t> into = {6, 7};
    ASSERT_EQ(
        kvs_window_pool_prefix_fetch(pool, 2, &hit, keys.data(), keys.size(), into.data(), &err),
        KVS_OK)
        << err.message;
    const std::vector<kvs_journal_entry> fetch = pair.drain();
    std::vector<kvs_journal_entry> swapped = fetch;
    size_t fetches = 0;
    for (kvs_journal_entry &e : swapped) {
      kvs_host_move m;
      if (kvs_window_pool_host_move_of(&e, &m) && m.fetch) {
        e.window_page = int64_t(1 - m.slot);  // the other block's slot
        fetches++;
      }
    }
    ASSERT_EQ(fetches, 2u);
    expect_refused(pair, swapped, fetch, "fetches from host slots that hold the other block",
                   "holds another block");
    // Request 2 writes block 7's tail and lets go; the leader evicts both
    // blocks again, each spilled into the slot of its own copy (issue 34:
    // the tier kept them since the fetch; the slot becomes the most recent).
    ASSERT_EQ(kvs_window_pool_prefix_release(pool, 2, &err), KVS_OK) << err.message;
    pair.step();
    ASSERT_EQ(evict(pool, 2, 0), (std::vector<int64_t>{7, 6}));
    const std::vector<kvs_journal_entry> again = pair.drain();
    std::vector<kvs_journal_entry> spilled;
    size_t evictions = 0;
    for (const kvs_journal_entry &e : again) {
      uint64_t page = 0;
      int64_t operand = 0;
      const kvs_prefix_op op = kvs_window_pool_prefix_entry(&e, &page, &operand);
      if (op == KVS_PREFIX_OP_SPILL) {
        uint64_t chain = 0;
        EXPECT_LT(operand, 2) << "a block the tier holds goes back into its own slot";
        EXPECT_EQ(kvs_window_pool_prefix_host_slot(pool, (uint64_t)operand, &chain, nullptr),
                  KVS_OK);
      }
      // Block 7 copied into the tier's next free slot (2) before it leaves.
      if (op == KVS_PREFIX_OP_EVICT && evictions++ == 0) {
        spilled.push_back(prefix_entry(KVS_PREFIX_OP_SPILL, page, 2));
      }
      spilled.push_back(e);
    }
    expect_refused(pair, spilled, again, "a spill of block 7, whose chain host slot 0 holds",
                   "holds it already");
  }
  // A step that loses an entry a leader journals together with another:
  // a block started and never linked, a tail kept on a page whose bind was
  // lost, a tail's window page freed while the tail stays (each found by
  // tests/fuzz:journal_apply_fuzz, which followers took before).
  {
    PrefixPair pair;
    kvs_window_pool *pool = pair.pool();
    kvs_error err;
    bind(pool, {3});
    ASSERT_EQ(insert(pool, 1, {10}, {3}, {1}, &err), KVS_OK) << err.message;
    const std::vector<kvs_journal_entry> step = pair.drain();
    // The step without its bind of page 3 (which the leader journaled
    // before the tail that keeps it).
    std::vector<kvs_journal_entry> lost;
    for (const kvs_journal_entry &e : step) {
      const bool bind_entry =
          kvs_window_pool_prefix_entry(&e, nullptr, nullptr) == KVS_PREFIX_OP_NONE &&
          e.window_page >= 0;
      if (!bind_entry) lost.push_back(e);
    }
    ASSERT_EQ(lost.size() + 1, step.size());
    expect_refused(pair, lost, step,
                   "a step that keeps page 3's window as block 3's tail but lost its bind",
                   "no window page");
    expect_refused(pair, {prefix_entry(KVS_PREFIX_OP_NEW_KEY, 5, 20)}, {},
                   "a step that starts block 5 and never links it", "never links it");
    expect_refused(pair, {{3, KVS_JOURNAL_FREED}}, {},
                   "a free of block 3's tail's window page, the tail kept", "no window page");
  }
  std::printf("reliability: impossible prefix entries refused %llu, the follower unchanged\n",
              (unsigned long long)refused);
}

// Property: the digest covers every field of a block it claims. Each pair
// of pools below is built by the same calls but for one thing, and
// differs in one field of one block: their digests differ, and so does
// that block's unit of the digest's index space, alone.
TEST(PrefixSafety, two_pools_that_differ_only_in_one_field_of_a_block_digest_differently) {
  using Build = void (*)(kvs_window_pool *, bool);
  struct Case {
    const char *field;
    uint64_t block;
    Build build;
  };
  const Case cases[] = {
      // Page 3 caches key 10, or key 12.
      {"key", 3,
       [](kvs_window_pool *pool, bool other) {
         kvs_error err;
         bind(pool, {3});
         ASSERT_EQ(insert(pool, 1, {other ? 12u : 10u}, {3}, {0}, &err), KVS_OK) << err.message;
         unbind(pool, {3});
         ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK) << err.message;
       }},
      // Page 4 caches key 11 under block 3 (key 10), or under block 5
      // (key 20).
      {"parent", 4,
       [](kvs_window_pool *pool, bool other) {
         kvs_error err;
         bind(pool, {3, 4, 5});
         if (!other) {
           ASSERT_EQ(insert(pool, 1, {10, 11}, {3, 4}, {0, 0}, &err), KVS_OK) << err.message;
           ASSERT_EQ(insert(pool, 2, {20}, {5}, {0}, &err), KVS_OK) << err.message;
         } else {
           ASSERT_EQ(insert(pool, 1, {10}, {3}, {0}, &err), KVS_OK) << err.message;
           ASSERT_EQ(insert(pool, 2, {20, 11}, {5, 4}, {0, 0}, &err), KVS_OK) << err.message;
         }
         unbind(pool, {3, 4, 5});
         ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK) << err.message;
         ASSERT_EQ(kvs_window_pool_prefix_release(pool, 2, &err), KVS_OK) << err.message;
       }},
      // Request 1 still holds block 3, or let go.
      {"refs", 3,
       [](kvs_window_pool *pool, bool other) {
         kvs_error err;
         bind(pool, {3});
         ASSERT_EQ(insert(pool, 1, {10}, {3}, {0}, &err), KVS_OK) << err.message;
         unbind(pool, {3});
         if (other) {
           ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK) << err.message;
         }
       }},
      // Page 3's window is kept as block 3's tail, or stays the request's
      // (bound either way).
      {"tail", 3,
       [](kvs_window_pool *pool, bool other) {
         kvs_error err;
         bind(pool, {3});
         ASSERT_EQ(insert(pool, 1, {10}, {3}, {uint8_t(other)}, &err), KVS_OK) << err.message;
         ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK) << err.message;
       }},
      // Block 4's dropped tail is re-prefilled by request 2, or by 3.
      {"writer", 4,
       [](kvs_window_pool *pool, bool other) {
         kvs_error err;
         bind(pool, {3, 4});
         ASSERT_EQ(insert(pool, 1, {10, 11}, {3, 4}, {0, 1}, &err), KVS_OK) << err.message;
         unbind(pool, {3});
         ASSERT_EQ(kvs_window_pool_prefix_release(pool, 1, &err), KVS_OK) << err.message;
         EXPECT_TRUE(evict(pool, 0, 1).empty());
         const kvs_prefix_hit hit = match(pool, {10, 11, 12}, P);
         ASSERT_TRUE(hit.reprefill);
         ASSERT_EQ(kvs_window_pool_prefix_acquire(pool, other ? 3 : 2, &hit, &err), KVS_OK)
             << err.message;
       }},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string("block ") + std::to_string(c.block) + "'s " + c.field);
    Pool a = prefix_pool(4096, 0), b = prefix_pool(4096, 0), again = prefix_pool(4096, 0);
    c.build(a.get(), false);
    c.build(b.get(), true);
    c.build(again.get(), false);
    if (::testing::Test::HasFatalFailure()) return;
    expect_integrity(a.get());
    expect_integrity(b.get());
    const State sa = state_of(a.get()), sb = state_of(b.get());
    EXPECT_EQ(kvs_window_pool_digest(a.get()), kvs_window_pool_digest(again.get()))
        << "the same calls digest alike";
    EXPECT_NE(sa.digest, sb.digest)
        << "two pools that differ only in block " << c.block << "'s " << c.field << " digest alike";
    // Where they differ: that block's unit, after the full pages and the
    // request slots.
    const uint64_t unit = kPages + kvs_window_pool_request_slots(a.get()) + c.block;
    ASSERT_EQ(sa.units.size(), sb.units.size());
    for (size_t u = 0; u < sa.units.size(); u++) {
      if (u == unit) {
        EXPECT_NE(sa.units[u], sb.units[u]) << "block " << c.block << "'s unit digests alike";
      } else {
        EXPECT_EQ(sa.units[u], sb.units[u]) << "unit " << u << " differs too";
      }
    }
    if (std::string(c.field) == "writer") {
      // Nothing else a caller sees differs (the holds name other
      // requests, which only the writer records).
      EXPECT_EQ(changes(sa, sb, true), "");
    }
  }
}
