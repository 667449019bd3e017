// The prefill/decode scenario of node_transfer_test (host twins over
// loopback) and node_transfer_standin_test (device tables on the CPU
// stand-in over an NCCL link): prompts with shared prefixes move from a
// prefill node to a decode node of another layout; every rank writes each
// unit's rows with bytes keyed by content (the page's chained key, or the
// request for its rings), so a decode side's cached prefix equals what the
// prefill side would send; a decode rank then reads every unit of the
// request back through its own descriptors and checks the bytes, whatever
// the digests said. Where the rows live is the Scenario's: host memory by
// default, a hook for device memory.
#ifndef KVS_TESTS_SHARD_TRANSFER_SCENARIO_H
#define KVS_TESTS_SHARD_TRANSFER_SCENARIO_H

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "shard/comm_loopback.h"
#include "shard/node.h"
#include "shard/node_transfer.h"
#include "shard/transfer_rows.h"
#include "tests/shard/small_model.h"

namespace kvs_pd_test {

using kvs_test::small_model;

struct Side {
  int tp, pp;
};

inline kvs_node_options options_for(const kvs_geometry *g, std::vector<uint64_t> *budgets, Side s,
                                    bool prefix, kvs_state_rings rings) {
  kvs_node_options o;
  kvs_node_options_init(&o);
  o.geometry = g;
  o.swa_ratio = 0.04;
  o.max_seq_len = 4096;
  o.max_running = 4;
  o.radix = false;
  o.tp = s.tp;
  o.pp = s.pp;
  o.topology = "bundled";
  o.device = KVS_NODE_DEVICE_CPU;
  o.bind_numa = false;
  o.budget_per_gpu = budgets->data();
  o.n_budget_per_gpu = budgets->size();
  o.prefix_cache = prefix;
  o.state_rings = rings;
  return o;
}

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

// A prompt: one content word per page (the last page partial), its pages'
// chained keys (full pages only: the prefix cache's).
struct Prompt {
  uint64_t id, tokens;
  bool shares;  // a conversation's turn: the decode side caches it
  std::vector<uint64_t> content;
  std::vector<uint64_t> chain;  // chain[b]: the key of page b (every page)
};

inline Prompt make_prompt(uint64_t id, uint64_t tokens, const std::vector<uint64_t> &content,
                          uint64_t P) {
  Prompt p{id, tokens, false, content, {}};
  uint64_t h = 0;
  for (uint64_t b = 0; b < (tokens + P - 1) / P; b++) {
    h = mix(h, content[b]);
    // A partial page's rows depend on how many positions it holds.
    p.chain.push_back((b + 1) * P > tokens ? mix(h, tokens) : h);
  }
  return p;
}

// Where the rows live: copies into and out of them (host memory unless a
// test of device tables says otherwise).
struct RowsMemory {
  std::function<void(void *rows, const void *from, size_t bytes)> write =
      [](void *rows, const void *from, size_t bytes) { std::memcpy(rows, from, bytes); };
  std::function<void(void *to, const void *rows, size_t bytes)> read =
      [](void *to, const void *rows, size_t bytes) { std::memcpy(to, rows, bytes); };
};

inline RowsMemory &rows_memory() {
  static RowsMemory m;
  return m;
}

// The bytes of one unit: keyed by what it holds.
inline std::vector<unsigned char> content(const kvs_node_rows &r, uint64_t key) {
  std::vector<unsigned char> bytes(r.bytes);
  uint64_t seed = mix(mix(mix(key, std::hash<std::string>{}(r.view)), r.layer), r.tail_state);
  for (uint64_t i = 0; i < r.bytes; i += 8) {
    uint64_t x = mix(seed, i);
    std::memcpy(bytes.data() + i, &x, r.bytes - i < 8 ? r.bytes - i : 8);
  }
  return bytes;
}

inline void fill(const kvs_node_rows &r, uint64_t key) {
  std::vector<unsigned char> bytes = content(r, key);
  rows_memory().write(r.address, bytes.data(), bytes.size());
}

inline bool holds(const kvs_node_rows &r, uint64_t key) {
  std::vector<unsigned char> have(r.bytes);
  rows_memory().read(have.data(), r.address, r.bytes);
  return have == content(r, key);
}

inline uint64_t key_of(const kvs_node_rows &r, const Prompt &p, uint64_t P, kvs_state_rings rings) {
  std::string v = r.view;
  bool csa = v == "state_4" || v == "index_state";
  bool per_request = csa ? rings == KVS_STATE_RINGS_PER_REQUEST
                         : v == "state_128" && rings != KVS_STATE_RINGS_PER_PAGE;
  if ((csa || v == "state_128") && per_request && !r.tail_state) return mix(0x72696e67, p.id);
  return p.chain[r.first_token / P];
}

inline std::vector<kvs_node_rows> rows_of(kvs_node_t node, const Prompt &p,
                                          const std::vector<int64_t> &pages, uint64_t reuse,
                                          uint64_t window_tokens = 0) {
  size_t n = 0;
  kvs_error err;
  kvs_node_transfer t{sizeof t, p.id, pages.data(), pages.size(), p.tokens, reuse,
                      nullptr,  0,    window_tokens};
  EXPECT_EQ(kvs_node_request_rows(node, &t, nullptr, 0, &n, &err), KVS_OK) << err.message;
  std::vector<kvs_node_rows> rows(n);
  EXPECT_EQ(kvs_node_request_rows(node, &t, rows.data(), n, &n, &err), KVS_OK) << err.message;
  return rows;
}

// The first page whose window rows move: that of the last max(window_tokens,
// P - 1) positions (the rule, restated).
inline uint64_t first_window_page(uint64_t L, uint64_t P, uint64_t window_tokens) {
  uint64_t w = window_tokens > P - 1 ? window_tokens : P - 1;
  return L > w ? (L - w) / P : 0;
}

// Every thread's comms: its node's group and the link (prefill ranks
// first, then decode ranks).
struct Pd {
  Side p, d;
  int np() const { return p.tp * p.pp; }
  int nd() const { return d.tp * d.pp; }
};

// Device tables: the link rank's NCCL communicator, bootstrapped over the
// loopback link (NULL: the loopback link itself).
using LinkMaker = std::function<kvs_comm_t(kvs_comm_t loopback, int link_rank)>;

inline void run_pd(const Pd &pd, int timeout_ms,
                   const std::function<void(bool prefill, int rank, int link_rank, kvs_comm_t node,
                                            kvs_comm_t link)> &body,
                   const LinkMaker &device_link = nullptr) {
  kvs_comm_loopback_group_t gp = nullptr, gd = nullptr, gl = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_loopback_group_create(pd.np(), &gp, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_comm_loopback_group_create(pd.nd(), &gd, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_comm_loopback_group_create(pd.np() + pd.nd(), &gl, &err), KVS_OK) << err.message;
  std::vector<std::thread> threads;
  for (int l = 0; l < pd.np() + pd.nd(); l++) {
    threads.emplace_back([&, l] {
      bool prefill = l < pd.np();
      int rank = prefill ? l : l - pd.np();
      kvs_comm_t node = nullptr, link = nullptr;
      kvs_error e;
      EXPECT_EQ(kvs_comm_loopback_create(prefill ? gp : gd, rank, timeout_ms, &node, &e), KVS_OK)
          << e.message;
      EXPECT_EQ(kvs_comm_loopback_create(gl, l, timeout_ms, &link, &e), KVS_OK) << e.message;
      kvs_comm_t moving = link;
      if (link != nullptr && device_link) moving = device_link(link, l);
      if (node != nullptr && moving != nullptr) body(prefill, rank, l, node, moving);
      if (moving != link) kvs_comm_destroy(moving);
      kvs_comm_destroy(link);
      kvs_comm_destroy(node);
    });
  }
  for (auto &t : threads) t.join();
  kvs_comm_loopback_group_destroy(gl);
  kvs_comm_loopback_group_destroy(gd);
  kvs_comm_loopback_group_destroy(gp);
}

// What a decode rank of `layers` layers (all of the small model's) must
// receive for L tokens past `reuse`, from the geometry alone.
inline uint64_t expected_bytes(kvs_node_t node, uint64_t L, uint64_t reuse, bool tail_states,
                               kvs_state_rings rings, bool fp8, uint64_t window_tokens) {
  const uint64_t P = kvs_node_page(node);
  const kvs_geometry g = fp8 ? kvs_test::small_model_fp8() : small_model();
  const uint64_t hd = g.head_dim, ihd = g.index_head_dim;
  // fp8: the no-rope part in fp8, 64 rope dims in bf16, 8 scale bytes; the
  // indexer's keys in fp8 and one fp32 scale per 128.
  const uint64_t kv_row = fp8 ? hd - 64 + 64 * 2 + 8 : hd * 2;
  const uint64_t idx_row = fp8 ? ihd + 4 * ihd / 128 : ihd * 2;
  uint64_t pages = (L + P - 1) / P - reuse / P;
  uint64_t lo = first_window_page(L, P, window_tokens);
  if (lo < reuse / P) lo = reuse / P;
  uint64_t tails = (L - 1) / P + 1 - lo;
  uint64_t sum = 0;
  for (int l = 0; l < 4; l++) {
    uint32_t r = g.compress_ratios[l];
    sum += tails * P * kv_row;  // window rows
    if (r == 0) continue;
    sum += pages * (P / r) * kv_row;  // compressed
    bool per_request =
        r == 4 ? rings == KVS_STATE_RINGS_PER_REQUEST : rings != KVS_STATE_RINGS_PER_PAGE;
    uint64_t ring = r == 4 ? 8 : 128, state = r == 4 ? 4 * hd * 4 : 2 * hd * 4;
    sum += (per_request ? ring : tails * ring) * state;
    if (r == 4) {
      sum += pages * (P / 4) * idx_row;                          // indexer
      sum += (per_request ? ring : tails * ring) * 4 * ihd * 4;  // index_state
      if (per_request && tail_states) sum += tails * 2 * (state + 4 * ihd * 4);
    }
  }
  return sum;
}

struct Scenario {
  Pd pd;
  kvs_state_rings rings = KVS_STATE_RINGS_PER_REQUEST;
  int requests = 24;
  bool fp8 = false;
  uint64_t window_tokens = 0;  // > P - 1: the decode side keeps an earlier page's window
  bool ascending = false;      // every side's pages in order: one message per pool and layer
  // A planted fault on one decode rank for one request (-1: none).
  int plant_request = -1, plant_rank = 1;
  kvs_transfer_plant plant{KVS_XFER_COMPRESSED_4, 1, 1};  // layer 3's first page
  // A prefill rank that never sends request `silent_request` (-1: none).
  int silent_request = -1, silent_rank = 1;
  // Device tables: each link rank's on CUDA device link_rank, moving over
  // the link device_link makes.
  LinkMaker device_link;
  // The engine's stream of the calling rank (o.stream; none: the legacy
  // default stream).
  std::function<void *()> engine_stream;
  int link_timeout_ms = 4000;
};

// The decode leader's decisions, which the engine's scheduler hands its
// other ranks (here: memory the step orders: written before the leader's
// step, read after a follower's).
struct Decided {
  std::mutex m;
  std::map<int, std::pair<std::vector<int64_t>, uint64_t>> pages;  // request -> pages, reuse
};

struct Totals {
  std::atomic<uint64_t> moved{0}, reused{0}, refused{0}, agreed{0}, checked{0};
  std::string planted_message;
};

inline void scenario(const Scenario &sc, Totals *tot) {
  const kvs_geometry g = sc.fp8 ? kvs_test::small_model_fp8() : small_model();
  std::mt19937_64 rng(7);
  const uint64_t P = 128;
  std::vector<Prompt> prompts;
  std::vector<uint64_t> base = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22};
  for (int i = 0; i < sc.requests; i++) {
    uint64_t tokens = 1 + rng() % 1400;
    std::vector<uint64_t> content;
    bool shares = i > 0 && rng() % 2 == 0;  // a conversation's next turn
    for (uint64_t b = 0; b < (tokens + P - 1) / P; b++) {
      content.push_back(shares ? base[b % base.size()] : rng());
    }
    prompts.push_back(make_prompt(100 + i, tokens, content, P));
    prompts.back().shares = shares;
  }
  const Pd &pd = sc.pd;
  Decided shared;
  Decided *decided = &shared;
  run_pd(
      pd, sc.link_timeout_ms,
      [&](bool prefill, int rank, int link_rank, kvs_comm_t comm, kvs_comm_t link) {
        kvs_geometry geom = g;
        std::vector<uint64_t> budgets(8, 12ull << 20);
        kvs_node_options o = options_for(&geom, &budgets, prefill ? pd.p : pd.d, true, sc.rings);
        if (sc.fp8) {
          o.kv_dtype = KVS_KV_FP8;
          o.qk_rope_head_dim = 64;
        }
        if (sc.device_link) {
          o.device = KVS_NODE_DEVICE_CUDA;
          o.cuda_device = link_rank;
        }
        if (sc.engine_stream) o.stream = sc.engine_stream();
        kvs_node_t node = nullptr;
        kvs_error err;
        ASSERT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_OK) << err.message;
        const bool leader = kvs_node_is_leader(node);
        std::vector<int> peers;
        for (int i = 0; i < (prefill ? pd.nd() : pd.np()); i++)
          peers.push_back(prefill ? pd.np() + i : i);
        std::vector<int64_t> free_pages;
        for (int64_t p = kvs_node_usable_pages(node) - 1; p >= 0; p--) free_pages.push_back(p);
        if (sc.ascending) std::reverse(free_pages.begin(), free_pages.end());
        kvs_node_step_result res{};
        res.size = sizeof res;
        std::map<int64_t, uint64_t> cached;  // decode leader: page -> chain key, the cache's
        for (const Prompt &q : prompts) {
          const int index = static_cast<int>(q.id - 100);
          const uint64_t n_pages = (q.tokens + P - 1) / P;
          std::vector<int64_t> pages;
          uint64_t reuse = 0;
          kvs_node_prefix_hit hit{};
          hit.size = sizeof hit;
          if (prefill) {
            for (uint64_t b = 0; b < n_pages; b++) pages.push_back(free_pages[b]);
            uint64_t lo = first_window_page(q.tokens, P, sc.window_tokens);
            if (leader) {
              int64_t slot;
              ASSERT_EQ(kvs_node_admit(node, q.id, &slot, &err), KVS_OK) << err.message;
              ASSERT_EQ(kvs_node_bind_pages(node, q.id, pages.data() + lo, n_pages - lo, &err),
                        KVS_OK)
                  << err.message;
            }
            ASSERT_EQ(kvs_node_step(node, nullptr, &res, &err), KVS_OK) << err.message;
            for (const kvs_node_rows &r : rows_of(node, q, pages, 0, sc.window_tokens))
              fill(r, key_of(r, q, P, sc.rings));
            kvs_node_transfer t{sizeof t, q.id, pages.data(), pages.size(),
                                q.tokens, 0,    peers.data(), peers.size()};
            kvs_node_transfer_report rep{};
            rep.size = sizeof rep;
            if (index == sc.silent_request) {
              // One rank died before sending: it never does; the others'
              // sends then miss the decode ranks' answer. Both stop here.
              if (rank != sc.silent_rank) kvs_node_send_request(node, link, &t, &rep, &err);
              kvs_node_destroy(node);
              return;
            }
            kvs_status s = kvs_node_send_request(node, link, &t, &rep, &err);
            if (index == sc.plant_request) {
              // The decode side's verdict reaches every prefill rank.
              EXPECT_EQ(s, KVS_ERR_CORRUPT) << "request " << q.id;
              EXPECT_NE(std::string(err.message).find("the decode side refused it"),
                        std::string::npos)
                  << err.message;
            } else {
              EXPECT_EQ(s, KVS_OK) << "request " << q.id << ": " << err.message;
            }
            if (leader) {
              ASSERT_EQ(kvs_node_free_pages(node, pages.data(), pages.size(), &err), KVS_OK);
              ASSERT_EQ(kvs_node_finish(node, q.id, &err), KVS_OK) << err.message;
            }
            ASSERT_EQ(kvs_node_step(node, nullptr, &res, &err), KVS_OK) << err.message;
            continue;
          }
          // Decode: the leader takes a hit on the conversation's prefix.
          std::vector<uint64_t> keys(q.chain.begin(), q.chain.begin() + q.tokens / P);
          kvs_node_capacity before{};
          before.size = sizeof before;
          ASSERT_EQ(kvs_node_capacity_of(node, &before, &err), KVS_OK);
          if (leader) {
            std::vector<int64_t> hit_pages(keys.size(), -1);
            ASSERT_EQ(kvs_node_prefix_match(node, keys.data(), keys.size(), q.tokens, 0, &hit,
                                            hit_pages.data(), &err),
                      KVS_OK)
                << err.message;
            if (hit.block >= 0 && !hit.reprefill && hit.host_pages == 0) reuse = hit.hit_tokens;
            for (uint64_t b = 0; b < reuse / P; b++) pages.push_back(hit_pages[b]);
            for (size_t next = 0; pages.size() < n_pages; next++) {
              if (!cached.count(free_pages[next])) pages.push_back(free_pages[next]);
            }
            if (reuse > 0) {
              ASSERT_EQ(kvs_node_prefix_acquire(node, q.id, &hit, &err), KVS_OK) << err.message;
            }
            int64_t slot;
            kvs_node_transfer t{sizeof t, q.id, pages.data(),    pages.size(), q.tokens, reuse,
                                nullptr,  0,    sc.window_tokens};
            ASSERT_EQ(kvs_node_import_admit(node, &t, &slot, &err), KVS_OK) << err.message;
            std::lock_guard<std::mutex> hold(decided->m);
            decided->pages[index] = {pages, reuse};
          }
          ASSERT_EQ(kvs_node_step(node, nullptr, &res, &err), KVS_OK) << err.message;
          if (!leader) {
            std::lock_guard<std::mutex> hold(decided->m);
            pages = decided->pages[index].first;
            reuse = decided->pages[index].second;
          }
          kvs_node_transfer t{sizeof t, q.id,         pages.data(), pages.size(),    q.tokens,
                              reuse,    peers.data(), peers.size(), sc.window_tokens};
          kvs_node_transfer_report rep{};
          rep.size = sizeof rep;
          bool planted = index == sc.plant_request && rank == sc.plant_rank;
          kvs_status s =
              kvs_node_receive_planted(node, link, &t, planted ? &sc.plant : nullptr, &rep, &err);
          if (index == sc.plant_request || index == sc.silent_request) {
            EXPECT_NE(s, KVS_OK) << "request " << q.id << " must be refused on every decode rank";
            if (rank == 0) {
              tot->planted_message = err.message;
              std::printf("refused: %s\n", err.message);
            }
            tot->refused++;
            ASSERT_EQ(kvs_node_step(node, nullptr, &res, &err), KVS_OK) << err.message;
            kvs_node_capacity after{};
            after.size = sizeof after;
            ASSERT_EQ(kvs_node_capacity_of(node, &after, &err), KVS_OK);
            EXPECT_EQ(after.running, before.running) << "the refused request's slot came back";
            EXPECT_EQ(after.free_window_pages, before.free_window_pages)
                << "the refused request's window pages came back";
            kvs_node_report report{};
            report.size = sizeof report;
            EXPECT_EQ(kvs_node_check(node, &report, &err), KVS_OK) << err.message;
            if (index == sc.silent_request) break;  // the link is poisoned now
            continue;
          }
          ASSERT_EQ(s, KVS_OK) << "request " << q.id << " on decode rank " << rank << ": "
                               << err.message;
          tot->agreed++;
          const uint64_t w = sc.window_tokens;
          EXPECT_EQ(rep.bytes, expected_bytes(node, q.tokens, reuse, true, sc.rings, sc.fp8, w))
              << "request " << q.id << " reuse " << reuse;
          EXPECT_EQ(rep.reused_bytes,
                    expected_bytes(node, q.tokens, 0, true, sc.rings, sc.fp8, w) -
                        expected_bytes(node, q.tokens, reuse, true, sc.rings, sc.fp8, w));
          // What moved arrived: every unit past the hit, the extra windows too.
          for (const kvs_node_rows &r : rows_of(node, q, pages, reuse, w)) {
            EXPECT_TRUE(holds(r, key_of(r, q, P, sc.rings)))
                << "request " << q.id << ": " << r.view << " layer " << r.layer << " positions "
                << r.first_token << ".." << r.end_token << (r.tail_state ? " (tail state)" : "");
          }
          EXPECT_GE(rep.wire_bytes, rep.bytes);
          if (sc.ascending && index == 0) {
            // Fresh nodes, consecutive pages and window pages on both sides:
            // one message per pool, layer and kind of rows.
            std::set<std::tuple<std::string, uint32_t, bool>> runs;
            for (const kvs_node_rows &r : rows_of(node, q, pages, 0))
              runs.insert({r.view, r.layer, r.tail_state});
            EXPECT_EQ(rep.messages, runs.size()) << "request " << q.id;
          }
          tot->moved += rep.bytes;
          tot->reused += rep.reused_bytes;
          for (const kvs_node_rows &r : rows_of(node, q, pages, 0)) {
            EXPECT_TRUE(holds(r, key_of(r, q, P, sc.rings)))
                << "request " << q.id << ": " << r.view << " layer " << r.layer << " positions "
                << r.first_token << ".." << r.end_token << (r.tail_state ? " (tail state)" : "");
            tot->checked++;
          }
          if (leader) {
            // Cache its full pages (the last one keeps its window as the
            // tail; with window_tokens, up to the first page whose window
            // came), then it finishes.
            size_t full = q.tokens / P < pages.size() ? q.tokens / P : pages.size();
            if (w > P - 1) {
              size_t kept = first_window_page(q.tokens, P, w) + 1;
              if (kept < full) full = kept;
            }
            size_t first = reuse / P;
            if (q.shares && full > first) {
              std::vector<uint8_t> tails(full - first, 0), taken(full - first, 0);
              tails.back() = 1;
              ASSERT_EQ(
                  kvs_node_prefix_insert(node, q.id, keys.data() + first, pages.data() + first,
                                         tails.data(), full - first, taken.data(), &err),
                  KVS_OK)
                  << err.message;
              for (size_t i = 0; i < taken.size(); i++) {
                if (taken[i]) cached[pages[first + i]] = keys[first + i];
              }
            }
            ASSERT_EQ(kvs_node_free_pages(node, pages.data(), pages.size(), &err), KVS_OK)
                << err.message;
            ASSERT_EQ(kvs_node_prefix_release(node, q.id, &err), KVS_OK) << err.message;
            ASSERT_EQ(kvs_node_finish(node, q.id, &err), KVS_OK) << err.message;
          }
          ASSERT_EQ(kvs_node_step(node, nullptr, &res, &err), KVS_OK) << err.message;
        }
        kvs_node_report report{};
        report.size = sizeof report;
        if (sc.silent_request < 0) {
          EXPECT_EQ(kvs_node_check(node, &report, &err), KVS_OK) << err.message;
        }
        kvs_node_destroy(node);
      },
      sc.device_link);
}

}  // namespace kvs_pd_test

#endif  // KVS_TESTS_SHARD_TRANSFER_SCENARIO_H
