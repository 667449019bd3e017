// A search over schedules of the prefix cache's leader calls, for one
// property: a hit is a promise about specific blocks. Matches are kept and
// used later, after any mix of evictions, steps, inserts (which reuse the
// pages evictions gave back, under other keys or the same ones), releases,
// acquires and fetches; every acquire or fetch that succeeds must hold the
// very blocks its match found (the keys on its path from the root are the
// match's, at the match's pages), every use of a hit whose block left
// the index since must be refused ("match again"), and so must every exact
// hit on a tail another held request is re-prefilling (its window is
// being written). The search runs against
// an Index adapter: the window pool with a follower replaying its journal
// (tests/pool) or a node's leader with its followers (tests/shard).
//
// An Index has: P(); match(keys, prompt, reprefill, hit, pages); admit,
// finish, release, abandon (request); acquire(request, hit, err);
// fetch(request, hit, keys, pages, err); bind(request, locs); unbind(locs);
// insert(request, keys, pages, tails, taken); evict(need, need_window,
// freed); node(page, key, parent) -> bool (the leader's index);
// window_free_pages(); engine_pages() (the full pages the engine uses).
#ifndef KVS_TESTS_POOL_HIT_SCHEDULE_SEARCH_H
#define KVS_TESTS_POOL_HIT_SCHEDULE_SEARCH_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kvshard.h"

namespace kvs_test {

// What the search did, summed over schedules.
struct HitSearchCounts {
  uint64_t schedules = 0, rounds = 0;
  uint64_t matches = 0, acquired = 0, fetched = 0;
  uint64_t stale_refused = 0;    // uses of a hit whose block left the index, refused
  uint64_t written_refused = 0;  // exact hits on a tail being re-prefilled, refused
  uint64_t reused_pages = 0;     // evicted pages cached again (as any block)
};

template <class Index>
class HitSearch {
 public:
  HitSearch(Index &ix, uint64_t seed, HitSearchCounts *counts)
      : ix_(ix), rng_(seed), counts_(counts) {
    for (int64_t p : ix_.engine_pages()) free_.insert(p);
  }

  // One round of leader calls between two steps.
  void round() {
    counts_->rounds++;
    const int ops = 1 + static_cast<int>(rng_() % 6);
    for (int i = 0; i < ops && !::testing::Test::HasFatalFailure(); i++) {
      switch (rng_() % 7) {
        case 0:
        case 1:
          match();
          break;
        case 2:
          evict();
          break;
        case 3:
          insert();
          break;
        case 4:
        case 5:
          use();
          break;
        default:
          let_go();
          break;
      }
    }
  }

  // Every held request lets go (at the end of a schedule).
  void finish_all() {
    while (!held_.empty()) let_go();
  }

 private:
  struct Kept {
    kvs_node_prefix_hit hit;
    std::vector<uint64_t> keys;
    std::vector<int64_t> pages;  // the match's pages (-1: a host-tier block)
    bool stale = false;          // a block of its GPU path left the index since
  };
  struct Held {
    uint64_t request;
    bool writes_tail;
    int64_t writes = -1;  // the block whose tail it re-prefills
  };

  // The GPU blocks a hit holds once taken: its node's depth.
  uint64_t held_depth(const kvs_node_prefix_hit &hit) const {
    return hit.hit_tokens / ix_.P() - hit.host_pages;
  }

  // A prompt of 1..5 pages over a small key tree, so that prompts share
  // prefixes and pages come back as blocks of other prompts.
  std::vector<uint64_t> prompt() {
    const size_t n = 1 + rng_() % 5;
    std::vector<uint64_t> keys(n);
    for (size_t i = 0; i < n; i++) keys[i] = 10 * (i + 1) + rng_() % 2;
    return keys;
  }

  std::vector<int64_t> take(size_t n) {
    std::vector<int64_t> out;
    while (out.size() < n && !free_.empty()) {
      auto it = free_.begin();
      std::advance(it, static_cast<long>(rng_() % free_.size()));
      out.push_back(*it);
      free_.erase(it);
    }
    return out;
  }

  std::vector<int64_t> locs_of(int64_t page) const {
    std::vector<int64_t> locs;
    const int64_t P = static_cast<int64_t>(ix_.P());
    for (int64_t t = 0; t < P; t++) locs.push_back(page * P + t);
    return locs;
  }

  void match() {
    Kept k;
    k.keys = prompt();
    k.pages.assign(k.keys.size(), -1);
    const uint64_t P = ix_.P();
    const uint64_t reprefill = rng_() % 2 ? P : 0;
    kvs_error err;
    ASSERT_EQ(ix_.match(k.keys, k.keys.size() * P + 1, reprefill, &k.hit, k.pages.data(), &err),
              KVS_OK)
        << err.message;
    counts_->matches++;
    if (k.hit.block < 0 && k.hit.host_pages == 0) return;
    kept_.push_back(k);
    if (kept_.size() > 12) kept_.erase(kept_.begin());
  }

  // The engine needs pages: the cache gives back unreferenced blocks.
  void evict() {
    std::vector<int64_t> freed;
    kvs_error err;
    ASSERT_EQ(ix_.evict(1 + rng_() % 3, rng_() % 2, &freed, &err), KVS_OK) << err.message;
    gave_back(freed);
  }

  // Pages an eviction gave back are the engine's; kept hits through them
  // are stale from now on.
  void gave_back(const std::vector<int64_t> &freed) {
    for (int64_t page : freed) {
      ASSERT_EQ(cached_.count(page), 1u) << "evicted page " << page << " was cached";
      cached_.erase(page);
      evicted_.insert(page);
      free_.insert(page);
      for (Kept &k : kept_) {
        // The pages the hit names: its GPU path, down to its node.
        const auto end = k.pages.begin() + long(held_depth(k.hit));
        if (std::find(k.pages.begin(), end, page) != end) k.stale = true;
      }
    }
  }

  // A new request computes a whole prompt in fresh pages and caches them
  // (some keys may be cached already: those pages stay the engine's).
  void insert() {
    std::vector<uint64_t> keys = prompt();
    std::vector<int64_t> freed;
    kvs_error err;
    if (ix_.window_free_pages() < keys.size() + 1) {
      ASSERT_EQ(ix_.evict(0, keys.size() + 1, &freed, &err), KVS_OK) << err.message;
      gave_back(freed);
      if (ix_.window_free_pages() < keys.size() + 1) return;
    }
    std::vector<int64_t> pages = take(keys.size());
    if (pages.size() < keys.size()) {
      for (int64_t p : pages) free_.insert(p);
      return;
    }
    const uint64_t request = next_request_++;
    if (ix_.admit(request, &err) != KVS_OK) {
      for (int64_t p : pages) free_.insert(p);
      return;
    }
    for (int64_t p : pages) ASSERT_EQ(ix_.bind(request, locs_of(p), &err), KVS_OK) << err.message;
    // The prompt's last page keeps its window as a tail, when the window has room.
    std::vector<uint8_t> tails(keys.size(), 0);
    tails.back() = rng_() % 3 != 0;
    std::vector<uint8_t> taken(keys.size(), 0);
    ASSERT_EQ(ix_.insert(request, keys, pages, tails, &taken, &err), KVS_OK) << err.message;
    for (size_t i = 0; i < pages.size(); i++) {
      ASSERT_EQ(ix_.unbind(locs_of(pages[i]), &err), KVS_OK) << err.message;
      if (taken[i]) {
        cached_[pages[i]] = std::vector<uint64_t>(keys.begin(), keys.begin() + long(i) + 1);
        if (evicted_.count(pages[i]) != 0) counts_->reused_pages++;
      } else {
        free_.insert(pages[i]);
      }
    }
    ASSERT_EQ(ix_.release(request, &err), KVS_OK) << err.message;
    ASSERT_EQ(ix_.finish(request, &err), KVS_OK) << err.message;
  }

  // The path of cached node `page` from the root: its pages and keys.
  void path_of(int64_t page, std::vector<int64_t> *pages, std::vector<uint64_t> *keys) {
    pages->clear();
    keys->clear();
    for (int64_t at = page; at >= 0;) {
      uint64_t key = 0;
      int64_t parent = -1;
      ASSERT_TRUE(ix_.node(at, &key, &parent)) << "page " << at << " on a held path is cached";
      pages->insert(pages->begin(), at);
      keys->insert(keys->begin(), key);
      at = parent;
    }
  }

  // A kept hit is taken by a new request: refused if its block left the
  // index since; otherwise, if taken, its path is the match's.
  void use() {
    if (kept_.empty() || held_.size() >= 2) return;
    const size_t which = rng_() % kept_.size();
    Kept k = kept_[which];
    const uint64_t request = next_request_++;
    kvs_error err;
    if (ix_.admit(request, &err) != KVS_OK) return;
    std::vector<int64_t> into;
    kvs_status status;
    if (k.hit.host_pages > 0) {
      into = take(k.hit.host_pages);
      if (into.size() < k.hit.host_pages) {
        for (int64_t p : into) free_.insert(p);
        ASSERT_EQ(ix_.finish(request, &err), KVS_OK) << err.message;
        return;
      }
      status = ix_.fetch(request, k.hit, k.keys, into, &err);
    } else {
      status = ix_.acquire(request, k.hit, &err);
    }
    const std::string what = k.hit.host_pages > 0 ? "fetch" : "acquire";
    // An exact hit on a tail a held request is re-prefilling now.
    const Held *writer = nullptr;
    if (!k.stale && k.hit.host_pages == 0 && !k.hit.reprefill) {
      for (const Held &h : held_) {
        if (h.writes >= 0 && h.writes == k.hit.block) writer = &h;
      }
    }
    if (writer != nullptr) {
      EXPECT_NE(status, KVS_OK) << "an exact hit was taken through block " << k.hit.block
                                << "'s tail, which request " << writer->request
                                << " is re-prefilling";
      if (status != KVS_OK) counts_->written_refused++;
    }
    if (k.stale) {
      EXPECT_NE(status, KVS_OK) << what << " of a hit whose block " << k.hit.block
                                << " left the index since its match succeeded";
      if (status != KVS_OK) {
        EXPECT_NE(std::string(err.message).find("match again"), std::string::npos) << err.message;
        counts_->stale_refused++;
      }
    }
    if (status != KVS_OK) {
      for (int64_t p : into) free_.insert(p);
      ASSERT_EQ(ix_.finish(request, &err), KVS_OK) << err.message;
      kept_.erase(kept_.begin() + long(which));
      return;
    }
    kept_.erase(kept_.begin() + long(which));
    // What the request now holds: the deepest block, the match's keys.
    const uint64_t depth = k.hit.hit_tokens / ix_.P();
    const int64_t deepest = k.hit.host_pages > 0 ? into.back() : k.hit.block;
    std::vector<int64_t> pages;
    std::vector<uint64_t> keys;
    path_of(deepest, &pages, &keys);
    ASSERT_EQ(keys, std::vector<uint64_t>(k.keys.begin(), k.keys.begin() + long(depth)))
        << what << " succeeded on block " << deepest
        << " whose keys from the root differ from the match's";
    ASSERT_EQ(pages.size(), depth);
    const size_t host_first = depth - into.size();
    for (size_t i = 0; i < depth; i++) {
      const int64_t want = i < host_first ? k.pages[i] : into[i - host_first];
      EXPECT_EQ(pages[i], want) << what << ": block " << i << " is not at the page named for it";
    }
    if (k.hit.host_pages > 0) {
      counts_->fetched++;
      for (size_t i = 0; i < into.size(); i++) {
        cached_[into[i]] = std::vector<uint64_t>(
            k.keys.begin(), k.keys.begin() + long(depth - into.size() + i + 1));
      }
    } else {
      counts_->acquired++;
    }
    held_.push_back({request, k.hit.reprefill, k.hit.reprefill ? deepest : -1});
  }

  // A held request finishes: a re-prefilling one writes its tail (release)
  // or stops before (abandon).
  void let_go() {
    if (held_.empty()) return;
    const size_t which = rng_() % held_.size();
    Held h = held_[which];
    held_.erase(held_.begin() + long(which));
    kvs_error err;
    if (h.writes_tail && rng_() % 2) {
      ASSERT_EQ(ix_.abandon(h.request, &err), KVS_OK) << err.message;
    } else {
      ASSERT_EQ(ix_.release(h.request, &err), KVS_OK) << err.message;
    }
    ASSERT_EQ(ix_.finish(h.request, &err), KVS_OK) << err.message;
  }

  Index &ix_;
  std::mt19937_64 rng_;
  HitSearchCounts *counts_;
  std::set<int64_t> free_;                           // the engine's free full pages
  std::map<int64_t, std::vector<uint64_t>> cached_;  // page -> its block's keys from the root
  std::set<int64_t> evicted_;                        // pages evicted at least once
  std::vector<Kept> kept_;
  std::vector<Held> held_;
  uint64_t next_request_ = 1;
};

}  // namespace kvs_test

#endif  // KVS_TESTS_POOL_HIT_SCHEDULE_SEARCH_H
