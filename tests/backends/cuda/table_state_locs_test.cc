// The tables a node drives (shard/table.h), host twin and device table (the
// latter through the CUDA backend's tables entry point, linked into the
// test, on the CPU stand-in for CUDA): a ring context now carries the
// rows' ratio-4 and ratio-128 ring locations, which must equal the CPU
// references (kvs_ref_ring_ctx, then kvs_ref_batch_state_locs under the
// layout's placement) in every placement, faults included; a leader's
// journal with request-slot entries applies; a per-request batch without
// slots is refused before anything is queued.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/device_ref.h"
#include "core/table_math.h"
#include "plan/device_layout.h"
#include "shard/table.h"
#include "tests/backends/cuda/fixtures.h"
#include "tests/standin/harness.h"
#include "tests/standin/standin.h"

using namespace kvs_cuda_test;

namespace {

constexpr int64_t kPoison = int64_t(0xabababababababab);
constexpr size_t kMaxRequests = 48;
constexpr uint64_t kMaxBlocks = 12;

const kvs_state_rings kAllRings[] = {KVS_STATE_RINGS_PER_PAGE, KVS_STATE_RINGS_PER_REQUEST,
                                     KVS_STATE_RINGS_HCA_PER_REQUEST};

struct TableDeleter {
  void operator()(kvs_table *t) const { kvs_table_destroy(t); }
};
using Table = std::unique_ptr<kvs_table, TableDeleter>;

kvs_device_layout layout_for(const kvs_geometry &g, const kvs_pool_sizes &s,
                             const kvs_row_widths &w) {
  kvs_device_layout l;
  kvs_error err;
  EXPECT_EQ(kvs_device_layout_build(&g, 0, kvs_geometry_layer_count(&g), &w, &s, nullptr, &l, &err),
            KVS_OK)
      << err.message;
  return l;
}

Table make_table(bool cuda, const kvs_device_layout &layout) {
  kvs_table_limits limits{kMaxRequests, kMaxBlocks};
  kvs_table_t t = nullptr;
  kvs_error err;
  kvs_status status = cuda ? kvs_table_create_cuda(0, &layout, &limits, nullptr, &t, &err)
                           : kvs_table_create_host(&layout, &limits, &t, &err);
  EXPECT_EQ(status, KVS_OK) << err.message;
  return Table(t);
}

// Request slots per row: mostly bound ones, some -1, and with `faults`
// some past the slots.
std::vector<int64_t> random_slots(std::mt19937_64 &rng, size_t n, uint64_t n_req_slots,
                                  bool faults) {
  std::vector<int64_t> slots(n);
  uint64_t req = n_req_slots > 0 ? n_req_slots : 5;
  for (auto &s : slots) {
    uint64_t kind = rng() % 12;
    s = kind == 0 ? -1 : kind == 1 && faults ? int64_t(req + rng() % 4) : int64_t(rng() % req);
  }
  return slots;
}

// One placement on one kind of table: a leader's journal (page and slot
// entries) applied step by step, and after each a batch's ring context and
// ring locations checked against the references over the leader's mapping.
void expect_table(bool cuda, kvs_state_rings rings, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << (cuda ? "cuda" : "host") << " table, "
                                  << kvs_state_rings_name(rings) << ", seed " << seed);
  std::mt19937_64 rng(seed);
  kvs_geometry g = small_geometry();
  kvs_row_widths w = widths_with_rings(g, rings, 9);
  kvs_pool_sizes s = sizes_with_rings(g, 64, 33, rings, 9);
  kvs_device_layout layout = layout_for(g, s, w);
  kvs_state_placement placement = kvs_state_placement_of(&layout.sizes);
  Table table = make_table(cuda, layout);
  ASSERT_TRUE(table);
  kvs_table_dims dims = kvs_table_dims_of(table.get());
  Leader leader(s, 1024, seed);
  bool per_request = rings != KVS_STATE_RINGS_PER_PAGE;
  uint64_t next_request = 1, slot_entries = 0;
  kvs_batch_fault ref_faults = KVS_BATCH_FAULT_INIT;
  size_t rows_seen = 0;
  for (int step = 0; step < 6; step++) {
    leader.bind(1 + rng() % 10);
    leader.release(rng() % 6);
    if (per_request) {
      uint64_t slot = 0;
      for (int i = 0; i < 2; i++) {
        ASSERT_EQ(kvs_window_pool_slot_bind(leader.pool(), next_request++, &slot, nullptr), KVS_OK);
      }
      ASSERT_EQ(kvs_window_pool_slot_free(leader.pool(), next_request - 2, nullptr), KVS_OK);
    }
    std::vector<kvs_journal_entry> journal = leader.drain();
    for (const kvs_journal_entry &e : journal) slot_entries += kvs_tm_entry_is_slot(e.full_page);
    kvs_error err;
    ASSERT_EQ(kvs_table_apply(table.get(), journal.data(), nullptr, journal.size(), &err), KVS_OK)
        << err.message;
    std::vector<int64_t> map = mapping_of(leader.pool());

    size_t n = 1 + rng() % kMaxRequests;
    uint64_t stride = 1 + rng() % kMaxBlocks;
    Batch b = make_batch(rng, n, stride, dims.page, dims.full_token, dims.page);
    std::vector<int64_t> slots = random_slots(rng, n, placement.n_req_slots, step % 2 == 1);
    if (step % 2 == 1) {  // at least one row past the slots, at a position
      slots[n - 1] = int64_t(placement.n_req_slots + 1);
      if (b.positions[n - 1] < 0) b.positions[n - 1] = 0;
    }
    kvs_ring_batch batch{};
    batch.block_table = b.pages.data();
    batch.stride = stride;
    batch.positions = b.positions.data();
    batch.n_req = n;
    batch.slots = per_request ? slots.data() : nullptr;

    // The references.
    kvs_block_tables bt = b.tables();
    std::vector<int64_t> own(n), prev(n), ring(n * dims.page), csa(n), hca(n);
    ASSERT_EQ(kvs_ref_ring_ctx(map.data(), &dims, &bt, b.positions.data(), n, own.data(),
                               prev.data(), ring.data(), nullptr, &err),
              KVS_OK)
        << err.message;
    kvs_batch_fault f = KVS_BATCH_FAULT_INIT;
    ASSERT_EQ(kvs_ref_batch_state_locs(&placement, own.data(), batch.slots, b.positions.data(), n,
                                       csa.data(), hca.data(), &f, &err),
              KVS_OK)
        << err.message;
    // The table folds every batch's record into one, as the device's
    // atomics do.
    ref_faults.count += f.count;
    if (f.first_index < ref_faults.first_index) ref_faults.first_index = f.first_index;

    kvs_ring_result r;
    ASSERT_EQ(kvs_table_ring_ctx(table.get(), &batch, &r, &err), KVS_OK) << err.message;
    EXPECT_EQ(r.on_device, cuda);
    EXPECT_EQ(r.n_req, n);
    ASSERT_NE(r.csa_loc, nullptr);
    ASSERT_NE(r.hca_loc, nullptr);
    std::vector<int64_t> t_own(n, kPoison), t_prev(n, kPoison), t_ring(n * dims.page, kPoison),
        t_csa(n, kPoison), t_hca(n, kPoison);
    ASSERT_EQ(kvs_table_result_to_host(table.get(), &r, t_own.data(), t_prev.data(), t_ring.data(),
                                       t_csa.data(), t_hca.data(), &err),
              KVS_OK)
        << err.message;
    EXPECT_EQ(t_own, own);
    EXPECT_EQ(t_prev, prev);
    EXPECT_EQ(t_ring, ring);
    EXPECT_EQ(t_csa, csa);
    EXPECT_EQ(t_hca, hca);
    // Either location array may be left out.
    std::vector<int64_t> only(n, kPoison);
    ASSERT_EQ(kvs_table_result_to_host(table.get(), &r, t_own.data(), t_prev.data(), t_ring.data(),
                                       nullptr, only.data(), &err),
              KVS_OK)
        << err.message;
    EXPECT_EQ(only, hca);
    ASSERT_EQ(kvs_table_result_to_host(table.get(), &r, t_own.data(), t_prev.data(), t_ring.data(),
                                       nullptr, nullptr, &err),
              KVS_OK)
        << err.message;
    rows_seen += n;

    // A per-request placement refuses a batch without slots, before
    // anything is queued: the last result stays valid.
    if (per_request) {
      kvs_ring_batch no_slots = batch;
      no_slots.slots = nullptr;
      kvs_ring_result untouched = r;
      EXPECT_EQ(kvs_table_ring_ctx(table.get(), &no_slots, &untouched, &err),
                KVS_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(err.message).find("without request slots"), std::string::npos)
          << err.message;
      EXPECT_EQ(std::memcmp(&untouched, &r, sizeof r), 0) << "the output is not written";
      std::vector<int64_t> still(n, kPoison);
      ASSERT_EQ(kvs_table_result_to_host(table.get(), &r, t_own.data(), t_prev.data(),
                                         t_ring.data(), still.data(), nullptr, &err),
                KVS_OK);
      EXPECT_EQ(still, csa);
    }
  }
  if (per_request) {
    EXPECT_GT(slot_entries, 10u) << "the journals carried request-slot entries";
  }
  kvs_device_faults faults;
  kvs_error err;
  ASSERT_EQ(kvs_table_faults(table.get(), &faults, &err), KVS_OK) << err.message;
  EXPECT_EQ(faults.apply_journal.count, 0u) << "slot entries are skipped without a fault";
  EXPECT_EQ(faults.state_locs.count, ref_faults.count);
  EXPECT_EQ(faults.state_locs.first_index, ref_faults.first_index);
  if (per_request) {
    EXPECT_GT(faults.state_locs.count, 0u) << "slots past the pool reached the fault path";
  }
  std::vector<int64_t> downloaded(dims.full_token + 1);
  ASSERT_EQ(kvs_table_download(table.get(), downloaded.data(), downloaded.size(), &err), KVS_OK);
  EXPECT_EQ(downloaded, mapping_of(leader.pool()));
  EXPECT_GT(rows_seen, 20u);
}

}  // namespace

TEST(TableStateLocs, the_host_twin_derives_the_reference_ring_locations_in_every_placement) {
  for (kvs_state_rings rings : kAllRings) {
    for (uint64_t seed : {1u, 2u, 3u}) expect_table(false, rings, seed);
  }
}

TEST(TableStateLocs, the_device_table_derives_them_on_the_standin_over_seeded_schedules) {
  kvs_standin_harness::over_schedules(
      kvs_standin_harness::schedules(100), [](uint64_t) { return 1; },
      [](uint64_t seed) {
        kvs_standin_harness::reset(1, seed);
        for (kvs_state_rings rings : kAllRings) expect_table(true, rings, seed);
        kvs_standin_harness::expect_no_violations();
      });
}

TEST(TableStateLocs, a_ring_kind_the_placement_cannot_place_reads_minus_one) {
  // P = 64 with no ratio-128 layer: the per-page ratio-128 ring does not
  // divide P, so the table reads -1 for it; the ratio-4 ring is derived.
  kvs_geometry g = make_geometry(8, 4, {0, 4});
  for (bool cuda : {false, true}) {
    SCOPED_TRACE(cuda ? "cuda" : "host");
    if (cuda) kvs_standin_harness::reset(1, 5);
    kvs_row_widths w = widths_with_rings(g, KVS_STATE_RINGS_PER_PAGE, 0);
    kvs_pool_sizes s = sizes_with_rings(g, 16, 9, KVS_STATE_RINGS_PER_PAGE, 0, 64);
    kvs_device_layout layout = layout_for(g, s, w);
    Table table = make_table(cuda, layout);
    ASSERT_TRUE(table);
    // Bind full page 1 to window page 2 (window page 0 and 1 stay free).
    std::vector<kvs_journal_entry> journal{{1, 2}};
    kvs_error err;
    ASSERT_EQ(kvs_table_apply(table.get(), journal.data(), nullptr, 1, &err), KVS_OK)
        << err.message;
    std::vector<int32_t> blocks{1};
    std::vector<int64_t> positions{13};
    kvs_ring_batch batch{};
    batch.block_table = blocks.data();
    batch.stride = 1;
    batch.positions = positions.data();
    batch.n_req = 1;
    kvs_ring_result r;
    ASSERT_EQ(kvs_table_ring_ctx(table.get(), &batch, &r, &err), KVS_OK) << err.message;
    int64_t own = 0, prev = 0, csa = 0, hca = 0;
    std::vector<int64_t> ring(64);
    ASSERT_EQ(kvs_table_result_to_host(table.get(), &r, &own, &prev, ring.data(), &csa, &hca, &err),
              KVS_OK)
        << err.message;
    EXPECT_EQ(own, 2 * 64 + 13);
    EXPECT_EQ(csa, 2 * 8 + 13 % 8);
    EXPECT_EQ(hca, -1);
    if (cuda) kvs_standin_harness::expect_no_violations();
  }
}
