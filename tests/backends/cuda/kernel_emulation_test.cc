// The kernel source of backends/cuda/device_kernels.cuh, run on the CPU through
// kernel_emulation.h over the launchers' own grid shapes, against the CPU
// references bit for bit. Runs everywhere; the device test repeats the
// comparison with the nvcc-built kernels on a GPU.
#include "tests/backends/cuda/kernel_emulation.h"  // before the kernels: the CUDA built-ins

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/device_ref.h"
#include "backends/cuda/device_kernels.cuh"
#include "tests/backends/cuda/fixtures.h"

using namespace kvs_cuda_test;
using namespace kvs_kernels;

namespace {

constexpr int64_t kPoison = int64_t(0xabababababababab);

void expect_fault(const kvs_batch_fault &emulated, const kvs_batch_fault &ref) {
  EXPECT_EQ(emulated.count, ref.count);
  EXPECT_EQ(emulated.first_index, ref.first_index);
}

// The launch sequences of backends/cuda/device_kernels.cuh through the emulation.
struct EmulatedLaunch {
  template <typename... Params, typename... Args>
  bool operator()(unsigned grid, unsigned threads, void (*kernel)(Params...), Args... args) {
    kvs_emu::launch(grid, threads, kernel, args...);
    return true;
  }
};

void emulate_apply(std::vector<int64_t> &map, const kvs_table_dims &dims,
                   const std::vector<kvs_journal_entry> &journal, kvs_batch_fault *fault,
                   uint32_t max_blocks = 64) {
  launch_apply_journal(EmulatedLaunch{}, map.data(), dims, journal.data(), journal.size(), nullptr,
                       fault, max_blocks);
}

}  // namespace

// The step's apply (captured once, replayed every step) reads how many
// entries to apply from device memory, the step message's count field, over
// a grid sized for the message's capacity: only the counted entries apply,
// whatever the rest of the buffer holds (an earlier step's entries), and a
// count past the capacity is a fault at the capacity, the whole buffer
// applied.
TEST(KernelEmulation, the_counted_journal_kernel_applies_only_the_counted_entries) {
  kvs_geometry g = small_geometry();
  Pool fresh = make_pool(sizes_for(g, 64, 33), 0);
  kvs_table_dims dims = dims_of(fresh.get());
  std::vector<int64_t> ref = mapping_of(fresh.get());
  std::vector<int64_t> emulated = ref;
  std::mt19937_64 rng(7);
  uint64_t seed = 0;
  for (size_t capacity : {32u, 300u, 4096u}) {
    for (size_t count :
         {size_t(0), size_t(1), capacity / 3, capacity - 1, capacity, capacity + 5}) {
      SCOPED_TRACE(testing::Message()
                   << count << " counted of a " << capacity << "-entry buffer, schedule " << seed);
      kvs_emu::set_schedule_seed(seed++);
      // Every entry of the buffer is one that would bind or free a page.
      std::vector<kvs_journal_entry> buffer = random_journal(rng, dims, capacity, 40, 0);
      const size_t applied = std::min(count, capacity);
      kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT, fault = KVS_BATCH_FAULT_INIT;
      ASSERT_EQ(
          kvs_ref_apply_journal(ref.data(), &dims, buffer.data(), applied, &ref_fault, nullptr),
          KVS_OK);
      const uint32_t device_count = static_cast<uint32_t>(count);
      launch_apply_journal(EmulatedLaunch{}, emulated.data(), dims, buffer.data(), capacity,
                           &device_count, &fault, 64);
      ASSERT_EQ(emulated, ref) << "the apply did not stop at the count";
      if (count > capacity) {
        EXPECT_EQ(fault.count, ref_fault.count + 1);
        EXPECT_EQ(fault.first_index, std::min<uint64_t>(ref_fault.first_index, capacity));
      } else {
        expect_fault(fault, ref_fault);
      }
    }
  }
  kvs_emu::set_schedule_seed(0);
}

TEST(KernelEmulation, the_journal_kernel_keeps_the_last_fitting_entry_per_page_across_blocks) {
  kvs_geometry g = small_geometry();
  Pool fresh = make_pool(sizes_for(g, 64, 33), 0);
  kvs_table_dims dims = dims_of(fresh.get());
  std::vector<int64_t> ref = mapping_of(fresh.get());
  std::vector<int64_t> emulated = ref;
  std::mt19937_64 rng(1);
  uint64_t seed = 0;
  // 1,100 and 4,096 entries reach past one 1024-entry filter window.
  for (size_t n : {1u, 31u, 33u, 300u, 1100u, 4096u}) {
    for (uint64_t distinct : {2u, 20u, 63u}) {
      for (uint32_t max_blocks : {1u, 3u, 1000u}) {
        SCOPED_TRACE(testing::Message() << n << " entries over " << distinct << " pages, "
                                        << max_blocks << " blocks at most, schedule " << seed);
        kvs_emu::set_schedule_seed(seed++);
        std::vector<kvs_journal_entry> journal = random_journal(rng, dims, n, distinct, 10);
        kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT, fault = KVS_BATCH_FAULT_INIT;
        ASSERT_EQ(kvs_ref_apply_journal(ref.data(), &dims, journal.data(), n, &ref_fault, nullptr),
                  KVS_OK);
        emulate_apply(emulated, dims, journal, &fault, max_blocks);
        ASSERT_EQ(emulated, ref);
        expect_fault(fault, ref_fault);
      }
    }
  }
  kvs_emu::set_schedule_seed(0);
}

// Issue 17, defect 8: the apply read the rest of the journal once per 32
// entries (n^2 / 32 loads); it must read each entry a bounded number of
// times, so a batch as large as the API accepts costs O(n).
TEST(KernelEmulation, the_journal_kernel_loads_each_entry_a_bounded_number_of_times) {
  kvs_geometry g = small_geometry();
  Pool fresh = make_pool(sizes_for(g, 64, 33), 0);
  kvs_table_dims dims = dims_of(fresh.get());
  std::vector<int64_t> map = mapping_of(fresh.get());
  std::mt19937_64 rng(8);
  for (size_t n : {1100u, 4096u, 16384u}) {
    std::vector<kvs_journal_entry> journal = random_journal(rng, dims, n, 63, 0);
    kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
    kvs_emu::entry_loads = 0;
    emulate_apply(map, dims, journal, &fault);
    // One load per entry to find each page's last entry, one per lane of
    // the warp that writes it.
    EXPECT_LE(kvs_emu::entry_loads, uint64_t(n) * (1 + kWarp))
        << n << " entries: " << kvs_emu::entry_loads << " loads, "
        << double(kvs_emu::entry_loads) / double(n) << " per entry";
  }
}

TEST(KernelEmulation, a_leaders_journal_applied_by_the_kernel_reproduces_its_mapping) {
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 256, 129);
  Leader leader(s, 1024, 2);
  Pool fresh = make_pool(s, 0);
  kvs_table_dims dims = dims_of(fresh.get());
  std::vector<int64_t> table = mapping_of(fresh.get());
  for (int round = 0; round < 6; round++) {
    leader.bind(1 + leader.rng()() % 100);
    leader.release(leader.rng()() % 80);
    std::vector<kvs_journal_entry> journal = leader.drain();
    kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
    emulate_apply(table, dims, journal, &fault);
    ASSERT_EQ(table, mapping_of(leader.pool())) << "round " << round;
    EXPECT_EQ(fault.count, 0u);
  }
}

TEST(KernelEmulation, translate_and_state_locs_match_the_references_with_capped_grids) {
  std::mt19937_64 rng(3);
  kvs_geometry g = small_geometry();
  Pool pool = make_pool(sizes_for(g, 32, 17), 0);
  bind_most(pool.get(), rng);
  kvs_table_dims dims = dims_of(pool.get());
  std::vector<int64_t> map = mapping_of(pool.get());
  size_t n = 1500;
  std::vector<int64_t> locs(n);
  for (size_t i = 0; i < n; i++) {
    uint64_t kind = rng() % 50;
    locs[i] = kind == 0   ? -1
              : kind == 1 ? int64_t(dims.full_token + rng() % 3)
                          : int64_t(rng() % dims.full_token);
  }
  std::vector<int64_t> ref(n);
  kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_translate(map.data(), &dims, locs.data(), n, ref.data(), &ref_fault, nullptr),
            KVS_OK);
  std::vector<int64_t> ref_csa(n), ref_hca(n);
  kvs_batch_fault ref_state_fault = KVS_BATCH_FAULT_INIT;
  // The translated slots, and some past the window pool, as state-loc input.
  std::vector<int64_t> slots = ref;
  for (size_t i = 0; i < n; i += 97) slots[i] = int64_t(dims.n_win_slots + i);
  ASSERT_EQ(kvs_ref_state_locs(&dims, slots.data(), n, ref_csa.data(), ref_hca.data(),
                               &ref_state_fault, nullptr),
            KVS_OK);
  for (uint32_t max_blocks : {1u, 3u, 1000u}) {
    SCOPED_TRACE(testing::Message() << "max_blocks " << max_blocks);
    std::vector<int64_t> out(n, kPoison), csa(n, kPoison), hca(n, kPoison);
    kvs_batch_fault fault = KVS_BATCH_FAULT_INIT, state_fault = KVS_BATCH_FAULT_INIT;
    launch_translate(EmulatedLaunch{}, map.data(), dims, locs.data(), n, out.data(), &fault,
                     max_blocks);
    EXPECT_EQ(out, ref);
    expect_fault(fault, ref_fault);
    launch_state_locs(EmulatedLaunch{}, dims, slots.data(), n, csa.data(), hca.data(), &state_fault,
                      max_blocks);
    EXPECT_EQ(csa, ref_csa);
    EXPECT_EQ(hca, ref_hca);
    expect_fault(state_fault, ref_state_fault);
  }
  // One ring alone leaves the other output unwritten.
  std::vector<int64_t> csa(n, kPoison);
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  launch_state_locs(EmulatedLaunch{}, dims, slots.data(), n, csa.data(), nullptr, &fault, 1000);
  EXPECT_EQ(csa, ref_csa);
}

namespace {

void expect_ring_ctx(uint64_t page, uint64_t block_size, uint64_t stride, size_t n_req,
                     uint32_t max_blocks, bool with_faults, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "P " << page << " block_size " << block_size << " stride "
                                  << stride << " requests " << n_req << " max_blocks " << max_blocks
                                  << (with_faults ? " with faults" : ""));
  std::mt19937_64 rng(seed);
  kvs_geometry g = page % 128 == 0 ? small_geometry() : make_geometry(8, 4, {0, 4});
  Pool pool = make_pool(sizes_for(g, 64, 40, page), 0);
  bind_most(pool.get(), rng);
  kvs_table_dims dims = dims_of(pool.get());
  std::vector<int64_t> map = mapping_of(pool.get());
  Batch b = make_batch(rng, n_req, stride, block_size, dims.full_token, page);
  if (with_faults) {
    for (size_t i = 0; i < b.pages.size(); i += 1 + rng() % 30) {
      b.pages[i] = int32_t(dims.full_token / block_size + rng() % 100);
    }
    for (size_t r = 0; r < n_req; r += 1 + rng() % 10) {
      b.positions[r] = int64_t(stride * block_size + rng() % 200);
    }
  }
  kvs_block_tables tables = b.tables();
  std::vector<int64_t> own(n_req), prev(n_req), ring(n_req * page);
  kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_ring_ctx(map.data(), &dims, &tables, b.positions.data(), n_req, own.data(),
                             prev.data(), ring.data(), &ref_fault, nullptr),
            KVS_OK);
  if (with_faults) {
    EXPECT_GT(ref_fault.count, 0u);
  }
  std::vector<int64_t> e_own(n_req, kPoison), e_prev(n_req, kPoison), e_ring(n_req * page, kPoison);
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  kvs_emu::set_schedule_seed(seed);
  launch_ring_ctx(EmulatedLaunch{}, map.data(), dims, tables, b.positions.data(), n_req, nullptr,
                  e_own.data(), e_prev.data(), e_ring.data(), &fault, max_blocks);
  kvs_emu::set_schedule_seed(0);
  EXPECT_EQ(e_own, own);
  EXPECT_EQ(e_prev, prev);
  EXPECT_EQ(e_ring, ring);
  expect_fault(fault, ref_fault);
}

}  // namespace

TEST(KernelEmulation, the_ring_context_kernel_matches_the_reference) {
  expect_ring_ctx(128, 128, 8, 1, 1000, false, 1);
  expect_ring_ctx(128, 128, 8, 40, 1000, false, 2);
  expect_ring_ctx(128, 128, 8, 40, 2, false, 3);  // warps loop over requests
  expect_ring_ctx(128, 64, 16, 30, 1000, false, 4);
  expect_ring_ctx(128, 256, 4, 30, 1000, false, 5);
  expect_ring_ctx(128, 3, 300, 20, 1000, false, 6);
  expect_ring_ctx(64, 64, 8, 30, 1000, false, 7);
  expect_ring_ctx(96, 32, 12, 30, 1000, false, 8);
  expect_ring_ctx(256, 128, 8, 30, 1, false, 9);  // two rounds of 128 slots per request
  expect_ring_ctx(32, 16, 16, 30, 1000, false, 10);
  expect_ring_ctx(128, 128, 8, 60, 3, true, 11);
  expect_ring_ctx(96, 5, 100, 30, 1000, true, 12);
}

namespace {

// Rows of a decode batch for the state-location kernel: mostly real, some
// idle, unbound, or past their pools.
struct StateRows {
  std::vector<int64_t> own, slots, positions;
};

StateRows random_state_rows(std::mt19937_64 &rng, const kvs_state_placement &p, size_t n) {
  StateRows r;
  r.own.resize(n);
  r.slots.resize(n);
  r.positions.resize(n);
  uint64_t req = p.n_req_slots > 0 ? p.n_req_slots : 9;
  for (size_t i = 0; i < n; i++) {
    uint64_t kind = rng() % 16;
    r.positions[i] = kind == 0 ? -1 : int64_t(rng() % 100000);
    kind = rng() % 16;
    r.own[i] = kind == 0   ? -1
               : kind == 1 ? int64_t(p.n_win_slots + rng() % 9)
                           : int64_t(rng() % p.n_win_slots);
    kind = rng() % 16;
    r.slots[i] = kind == 0 ? -1 : kind == 1 ? int64_t(req + rng() % 3) : int64_t(rng() % req);
  }
  return r;
}

}  // namespace

TEST(KernelEmulation, the_batch_state_locs_kernel_matches_the_reference_in_every_placement) {
  std::mt19937_64 rng(41);
  kvs_geometry g = small_geometry();
  uint64_t seed = 100;
  for (kvs_state_rings rings :
       {KVS_STATE_RINGS_PER_PAGE, KVS_STATE_RINGS_PER_REQUEST, KVS_STATE_RINGS_HCA_PER_REQUEST}) {
    kvs_pool_sizes s = sizes_with_rings(g, 32, 17, rings, 65);
    kvs_state_placement p = kvs_state_placement_of(&s);
    bool per_request = rings != KVS_STATE_RINGS_PER_PAGE;
    for (size_t n : {1u, 300u, 1500u}) {
      StateRows r = random_state_rows(rng, p, n);
      const int64_t *slots = per_request ? r.slots.data() : nullptr;
      for (int which = 0; which < 3; which++) {
        bool csa_out = which != 2, hca_out = which != 1;
        std::vector<int64_t> ref_csa(n, kPoison), ref_hca(n, kPoison);
        kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
        ASSERT_EQ(kvs_ref_batch_state_locs(&p, r.own.data(), slots, r.positions.data(), n,
                                           csa_out ? ref_csa.data() : nullptr,
                                           hca_out ? ref_hca.data() : nullptr, &ref_fault, nullptr),
                  KVS_OK);
        if (n >= 300 && which == 0) {
          EXPECT_GT(ref_fault.count, 0u) << "the rows reach the fault path";
        }
        for (uint32_t max_blocks : {1u, 3u, 1000u}) {
          SCOPED_TRACE(testing::Message()
                       << kvs_state_rings_name(rings) << ", " << n << " rows, outputs " << which
                       << ", max_blocks " << max_blocks);
          std::vector<int64_t> csa(n, kPoison), hca(n, kPoison);
          kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
          kvs_emu::set_schedule_seed(seed++);
          launch_batch_state_locs(EmulatedLaunch{}, p, r.own.data(), slots, r.positions.data(), n,
                                  nullptr, csa_out ? csa.data() : nullptr,
                                  hca_out ? hca.data() : nullptr, &fault, max_blocks);
          EXPECT_EQ(csa, ref_csa);
          EXPECT_EQ(hca, ref_hca);
          expect_fault(fault, ref_fault);
        }
      }
    }
  }
  kvs_emu::set_schedule_seed(0);
}

TEST(KernelEmulation, the_journal_kernel_skips_request_slot_entries_without_a_fault) {
  kvs_geometry g = small_geometry();
  Pool fresh = make_pool(sizes_for(g, 64, 33), 0);
  kvs_table_dims dims = dims_of(fresh.get());
  std::vector<int64_t> ref = mapping_of(fresh.get());
  std::vector<int64_t> emulated = ref;
  std::mt19937_64 rng(17);
  uint64_t seed = 500;
  for (size_t n : {40u, 1100u}) {
    // Page entries with a few bad ones, and slot entries between them whose
    // low bits name pages that exist: they must still write nothing.
    std::vector<kvs_journal_entry> journal = random_journal(rng, dims, n, 20, 5);
    for (size_t i = 0; i < n; i += 1 + rng() % 4) {
      journal[i].full_page = KVS_JOURNAL_SLOT_TAG | (rng() % 20);
      journal[i].window_page = rng() % 3 == 0 ? KVS_JOURNAL_FREED : int64_t(rng() % 100);
    }
    for (uint32_t max_blocks : {1u, 1000u}) {
      SCOPED_TRACE(testing::Message() << n << " entries, max_blocks " << max_blocks);
      kvs_emu::set_schedule_seed(seed++);
      kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT, fault = KVS_BATCH_FAULT_INIT;
      ASSERT_EQ(kvs_ref_apply_journal(ref.data(), &dims, journal.data(), n, &ref_fault, nullptr),
                KVS_OK);
      emulate_apply(emulated, dims, journal, &fault, max_blocks);
      ASSERT_EQ(emulated, ref);
      expect_fault(fault, ref_fault);
      // Without the slot entries, the same table.
      std::vector<kvs_journal_entry> pages;
      for (const kvs_journal_entry &e : journal) {
        if (!kvs_tm_entry_is_slot(e.full_page)) pages.push_back(e);
      }
      std::vector<int64_t> without = mapping_of(fresh.get());
      std::vector<int64_t> again = without;
      ASSERT_EQ(kvs_ref_apply_journal(again.data(), &dims, journal.data(), n, nullptr, nullptr),
                KVS_OK);
      ASSERT_EQ(kvs_ref_apply_journal(without.data(), &dims, pages.data(), pages.size(), nullptr,
                                      nullptr),
                KVS_OK);
      EXPECT_EQ(again, without);
    }
  }
  kvs_emu::set_schedule_seed(0);
}

// A transfer's rows digests: the kernel over units of every length around
// a word (0..17 bytes and pages of thousands), at aligned and unaligned
// addresses, with capped grids (blocks loop over units) and a seeded
// thread order, equals the reference for every unit; and the digest is the
// bytes' and the place's: one flipped bit, two swapped words, or another
// seed (another pool, layer or positions) changes it.
TEST(KernelEmulation, the_rows_digest_kernel_matches_the_reference_and_sees_every_byte) {
  std::mt19937_64 rng(5);
  std::vector<unsigned char> memory(1 << 16);
  for (auto &b : memory) b = static_cast<unsigned char>(rng());
  std::vector<kvs_rows_unit> units;
  for (uint64_t len = 1; len <= 17; len++) {
    units.push_back({memory.data() + 8 * len, len, rng()});      // aligned
    units.push_back({memory.data() + 8 * len + 3, len, rng()});  // not
  }
  for (int i = 0; i < 12; i++) {
    uint64_t len = 1 + rng() % 9000, at = rng() % (memory.size() - len);
    units.push_back({memory.data() + at, len, rng()});
  }
  for (uint32_t max_blocks : {1u, 3u, 64u}) {
    for (uint64_t seed : {0ull, 11ull}) {
      kvs_emu::set_schedule_seed(seed);
      std::vector<uint64_t> out(units.size(), 0);
      ASSERT_TRUE(
          launch_rows_digest(EmulatedLaunch{}, units.data(), units.size(), out.data(), max_blocks));
      for (size_t u = 0; u < units.size(); u++) {
        EXPECT_EQ(out[u], kvs_ref_rows_digest(units[u].rows, units[u].bytes, units[u].seed))
            << "unit " << u << " of " << units[u].bytes << " bytes, grid cap " << max_blocks;
      }
    }
  }
  const kvs_rows_unit &big = units.back();
  const uint64_t d = kvs_ref_rows_digest(big.rows, big.bytes, big.seed);
  std::vector<unsigned char> copy(static_cast<const unsigned char *>(big.rows),
                                  static_cast<const unsigned char *>(big.rows) + big.bytes);
  EXPECT_EQ(kvs_ref_rows_digest(copy.data(), copy.size(), big.seed), d) << "the place is the seed";
  EXPECT_NE(kvs_ref_rows_digest(copy.data(), copy.size(), big.seed + 1), d);
  copy[copy.size() / 2] ^= 0x10;
  EXPECT_NE(kvs_ref_rows_digest(copy.data(), copy.size(), big.seed), d);
  copy[copy.size() / 2] ^= 0x10;
  ASSERT_GE(copy.size(), 16u);
  std::swap_ranges(copy.begin(), copy.begin() + 8, copy.begin() + 8);
  EXPECT_NE(kvs_ref_rows_digest(copy.data(), copy.size(), big.seed), d) << "swapped words";
  // The length is the digest's too: trailing zero bytes are not nothing.
  std::vector<unsigned char> zeros(24, 0);
  EXPECT_NE(kvs_ref_rows_digest(zeros.data(), 16, 1), kvs_ref_rows_digest(zeros.data(), 24, 1));
}
