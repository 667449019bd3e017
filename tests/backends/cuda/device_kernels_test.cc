// The device kernels against their CPU references, bit for bit: the same
// inputs go to core/device_ref.h and to backends/cuda/device_tables.h, and every
// output row and every fault record must be equal. Every test skips where
// CUDA says there is no device, naming why (e.g. "no CUDA device visible:
// cudaGetDeviceCount returned cudaErrorNoDevice (no CUDA-capable device is
// detected)"), and fails where asking CUDA fails any other way: a broken
// runtime on a GPU machine is a failure, not 13 skips (gpu_gate_runtime.h).
//
// Outputs are filled with a poison pattern before each launch, so a row
// the kernel forgot to write shows up as a mismatch.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/device_ref.h"
#include "backends/cuda/cuda_status.h"
#include "plan/device_budget.h"
#include "plan/device_layout.h"
#include "backends/cuda/device_tables.h"
#include "tests/backends/cuda/fixtures.h"
#include "tests/backends/cuda/gpu_gate_runtime.h"

using namespace kvs_cuda_test;

namespace {

constexpr int64_t kPoison = int64_t(0xabababababababab);

class Device : public ::testing::Test {
 protected:
  void SetUp() override { KVS_NEED_GPU(kvs_gpu_gate::runtime()); }
};

// A device array that frees itself, with host round trips.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (n_ > 0) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&ptr_), n_ * sizeof(T)), cudaSuccess);
    }
  }
  explicit DeviceArray(const std::vector<T> &host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;

  T *get() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T> &host) {
    ASSERT_EQ(host.size(), n_);
    if (n_ > 0) {
      ASSERT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  void poison() {
    if (n_ > 0) {
      ASSERT_EQ(cudaMemset(ptr_, 0xab, n_ * sizeof(T)), cudaSuccess);
    }
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return host;
  }

 private:
  T *ptr_ = nullptr;
  size_t n_ = 0;
};

struct TablesDeleter {
  void operator()(kvs_device_tables *t) const { kvs_device_tables_destroy(t); }
};
using Tables = std::unique_ptr<kvs_device_tables, TablesDeleter>;

Tables make_tables(const kvs_geometry &g, const kvs_pool_sizes &s, uint64_t journal_capacity = 4096,
                   uint64_t alignment = 256) {
  kvs_device_layout_options o = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
  o.alignment = alignment;
  o.journal_capacity = journal_capacity;
  kvs_device_layout layout;
  kvs_error err;
  EXPECT_EQ(
      kvs_device_layout_build(&g, 0, kvs_geometry_layer_count(&g), nullptr, &s, &o, &layout, &err),
      KVS_OK)
      << err.message;
  kvs_device_tables_t t = nullptr;
  EXPECT_EQ(kvs_device_tables_create(0, &layout, &t, &err), KVS_OK) << err.message;
  return Tables(t);
}

std::vector<int64_t> download_table(const kvs_device_tables *t) {
  kvs_table_dims dims = kvs_device_tables_dims(t);
  std::vector<int64_t> map(dims.full_token + 1, kPoison);
  kvs_error err;
  EXPECT_EQ(kvs_device_tables_download_mapping(t, map.data(), map.size(), &err), KVS_OK)
      << err.message;
  return map;
}

kvs_device_faults faults_of(const kvs_device_tables *t) {
  kvs_device_faults f{};
  kvs_error err;
  EXPECT_EQ(kvs_device_tables_faults(t, nullptr, &f, &err), KVS_OK) << err.message;
  return f;
}

void clear_faults(kvs_device_tables *t) {
  kvs_error err;
  ASSERT_EQ(kvs_device_tables_clear_faults(t, nullptr, &err), KVS_OK) << err.message;
}

void expect_fault(const kvs_batch_fault &device, const kvs_batch_fault &ref) {
  EXPECT_EQ(device.count, ref.count);
  EXPECT_EQ(device.first_index, ref.first_index);
}

// Index of the first difference, or -1: a readable failure for a vector of
// millions of rows.
template <typename T>
long long first_difference(const std::vector<T> &a, const std::vector<T> &b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i++) {
    if (a[i] != b[i]) return (long long)i;
  }
  return -1;
}

#define EXPECT_SAME_ROWS(device, ref)                                                     \
  do {                                                                                    \
    long long at_ = first_difference((device), (ref));                                    \
    EXPECT_EQ(at_, -1) << "first differing row " << at_ << ": device "                    \
                       << (at_ >= 0 && size_t(at_) < (device).size() ? (device)[at_] : 0) \
                       << ", reference "                                                  \
                       << (at_ >= 0 && size_t(at_) < (ref).size() ? (ref)[at_] : 0);      \
  } while (0)

}  // namespace

TEST_F(Device, the_tables_start_as_a_fresh_pools_mapping_inside_one_aligned_allocation) {
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 64, 33);
  Tables t = make_tables(g, s);
  ASSERT_TRUE(t);
  Pool fresh = make_pool(s, 0);
  EXPECT_EQ(download_table(t.get()), mapping_of(fresh.get()));
  kvs_error err;
  kvs_device_faults f = faults_of(t.get());
  EXPECT_EQ(kvs_device_faults_check(&f, &err), KVS_OK) << err.message;

  // Every tier region lies inside the allocation, on the alignment, and
  // can be written whole without touching the table.
  const kvs_device_layout *l = kvs_device_tables_layout(t.get());
  auto base = static_cast<unsigned char *>(kvs_device_tables_base(t.get()));
  const kvs_device_tier tiers[] = {KVS_DEVICE_TIER_WINDOW, KVS_DEVICE_TIER_COMPRESSED,
                                   KVS_DEVICE_TIER_INDEXER, KVS_DEVICE_TIER_STATE,
                                   KVS_DEVICE_TIER_INDEX_STATE};
  size_t written = 0;
  for (kvs_device_tier tier : tiers) {
    for (size_t layer = 0; layer < 4; layer++) {
      void *ptr = nullptr;
      kvs_device_region r;
      if (kvs_device_tables_region(t.get(), tier, layer, &ptr, &r, nullptr) != KVS_OK) continue;
      auto p = static_cast<unsigned char *>(ptr);
      EXPECT_GE(p, base);
      EXPECT_LE(p + r.bytes, base + l->total_bytes);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
      ASSERT_EQ(cudaMemset(p, 0x5a, r.bytes), cudaSuccess);
      written++;
    }
  }
  EXPECT_EQ(written, 4u + 3 + 2 + 3 + 2);
  EXPECT_EQ(download_table(t.get()), mapping_of(fresh.get()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(kvs_device_tables_mapping(t.get())) % 256, 0u);
}

TEST_F(Device, a_dsv4_flash_pool_planned_from_the_measured_budget_allocates) {
  kvs_device_budget budget{};
  kvs_error err;
  ASSERT_EQ(kvs_device_budget_query(0, 0.9, 512ull << 20, &budget, &err), KVS_OK) << err.message;
  EXPECT_LE(budget.free_bytes, budget.total_bytes);
  EXPECT_LE(budget.budget_bytes, budget.free_bytes);
  // A slice of it is enough to prove the carve; the whole card would take
  // seconds to zero.
  uint64_t slice = std::min<uint64_t>(budget.budget_bytes, 4ull << 30);
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_device_layout layout;
  ASSERT_EQ(kvs_device_plan_solve(slice, &flash, 0, 43, nullptr, 0.25, 40, P, nullptr, &layout,
                                  nullptr, &err),
            KVS_OK)
      << err.message;
  EXPECT_LE(layout.total_bytes, slice);
  kvs_device_tables_t t = nullptr;
  ASSERT_EQ(kvs_device_tables_create(0, &layout, &t, &err), KVS_OK) << err.message;
  Tables owned(t);
  kvs_device_region r;
  void *ptr = nullptr;
  ASSERT_EQ(kvs_device_tables_region(t, KVS_DEVICE_TIER_INDEX_STATE, 42, &ptr, &r, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(static_cast<unsigned char *>(ptr) + r.bytes,
            static_cast<unsigned char *>(kvs_device_tables_base(t)) + layout.total_bytes)
      << "layer 42's indexer ring is the last region";
  ASSERT_EQ(cudaMemset(ptr, 0, r.bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(Device, a_leaders_journals_of_1_64_and_4096_pages_apply_bit_for_bit) {
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 16384, 8193);
  Leader leader(s, 16384, 21);
  Tables t = make_tables(g, s, 16384);
  ASSERT_TRUE(t);
  kvs_table_dims dims = kvs_device_tables_dims(t.get());
  std::vector<int64_t> ref = download_table(t.get());
  struct Round {
    size_t bind, release;
    bool from_device;
  } rounds[] = {{1, 0, false},     {64, 0, false},     {4096, 0, false}, {0, 1, true},
                {0, 64, false},    {2000, 1500, true}, {4096, 0, true},  {0, 4096, false},
                {300, 300, false}, {1, 1, true}};
  for (const Round &round : rounds) {
    SCOPED_TRACE(testing::Message() << "bind " << round.bind << " release " << round.release
                                    << (round.from_device ? " from device" : " from host"));
    leader.bind(round.bind);
    leader.release(round.release);
    std::vector<kvs_journal_entry> journal = leader.drain();
    kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
    ASSERT_EQ(kvs_ref_apply_journal(ref.data(), &dims, journal.data(), journal.size(), &ref_fault,
                                    nullptr),
              KVS_OK);
    kvs_error err;
    if (round.from_device) {
      DeviceArray<kvs_journal_entry> d(journal);
      ASSERT_EQ(
          kvs_device_tables_apply_journal_device(t.get(), d.get(), journal.size(), nullptr, &err),
          KVS_OK)
          << err.message;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    } else {
      ASSERT_EQ(
          kvs_device_tables_apply_journal(t.get(), journal.data(), journal.size(), nullptr, &err),
          KVS_OK)
          << err.message;
    }
    std::vector<int64_t> device = download_table(t.get());
    EXPECT_SAME_ROWS(device, ref);
    EXPECT_SAME_ROWS(device, mapping_of(leader.pool()));
    expect_fault(faults_of(t.get()).apply_journal, ref_fault);
  }
}

TEST_F(Device, superseded_and_misfit_entries_across_blocks_match_the_reference) {
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 512, 257);
  Tables t = make_tables(g, s, 8192);
  ASSERT_TRUE(t);
  kvs_table_dims dims = kvs_device_tables_dims(t.get());
  std::vector<int64_t> ref = download_table(t.get());
  std::mt19937_64 rng(5);
  for (size_t n : {1u, 31u, 32u, 33u, 64u, 100u, 1000u, 4096u, 8192u}) {
    for (uint64_t distinct : {3u, 40u, 511u}) {
      SCOPED_TRACE(testing::Message() << n << " entries over " << distinct << " pages");
      clear_faults(t.get());
      std::vector<kvs_journal_entry> journal = random_journal(rng, dims, n, distinct, 10);
      kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
      ASSERT_EQ(kvs_ref_apply_journal(ref.data(), &dims, journal.data(), n, &ref_fault, nullptr),
                KVS_OK);
      DeviceArray<kvs_journal_entry> d(journal);
      kvs_error err;
      ASSERT_EQ(kvs_device_tables_apply_journal_device(t.get(), d.get(), n, nullptr, &err), KVS_OK)
          << err.message;
      EXPECT_SAME_ROWS(download_table(t.get()), ref);
      expect_fault(faults_of(t.get()).apply_journal, ref_fault);
    }
  }
  // From the host, the same journals without misfits; applied in order on
  // two streams, the staging area is not overwritten under a running kernel.
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  for (int step = 0; step < 20; step++) {
    std::vector<kvs_journal_entry> first = random_journal(rng, dims, 4096, 50, 0);
    std::vector<kvs_journal_entry> second = random_journal(rng, dims, 4096, 50, 0);
    kvs_error err;
    ASSERT_EQ(kvs_device_tables_apply_journal(t.get(), first.data(), first.size(), a, &err), KVS_OK)
        << err.message;
    ASSERT_EQ(kvs_device_tables_apply_journal(t.get(), second.data(), second.size(), b, &err),
              KVS_OK)
        << err.message;
    ASSERT_EQ(
        kvs_ref_apply_journal(ref.data(), &dims, first.data(), first.size(), nullptr, nullptr),
        KVS_OK);
    ASSERT_EQ(
        kvs_ref_apply_journal(ref.data(), &dims, second.data(), second.size(), nullptr, nullptr),
        KVS_OK);
    ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
    std::vector<int64_t> device = download_table(t.get());
    EXPECT_SAME_ROWS(device, ref);
    if (first_difference(device, ref) >= 0) break;
  }
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST_F(Device, a_host_journal_that_does_not_fit_is_refused_whole_and_launches_nothing) {
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 64, 33);
  Tables t = make_tables(g, s, 100);
  ASSERT_TRUE(t);
  const std::vector<int64_t> before = download_table(t.get());
  std::vector<kvs_journal_entry> journal = {{1, 0}, {2, 1}, {63, 2}, {3, 3}};
  kvs_error err;
  EXPECT_EQ(kvs_device_tables_apply_journal(t.get(), journal.data(), journal.size(), nullptr, &err),
            KVS_ERR_OUT_OF_RANGE);
  EXPECT_STREQ(err.message,
               "journal entry 2 names full page 63, the reserved dummy page (the table has 64 "
               "full pages, the last the dummy)");
  EXPECT_EQ(download_table(t.get()), before);
  std::vector<kvs_journal_entry> many(101, kvs_journal_entry{1, 0});
  EXPECT_EQ(kvs_device_tables_apply_journal(t.get(), many.data(), many.size(), nullptr, &err),
            KVS_ERR_JOURNAL_FULL);
  EXPECT_EQ(download_table(t.get()), before);
  expect_fault(faults_of(t.get()).apply_journal, KVS_BATCH_FAULT_INIT);
}

TEST_F(Device, translate_matches_the_reference_bit_for_bit) {
  std::mt19937_64 rng(8);
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 2048, 1025);
  Pool pool = make_pool(s, 0);
  bind_most(pool.get(), rng);
  Tables t = make_tables(g, s);
  ASSERT_TRUE(t);
  kvs_error err;
  std::vector<int64_t> map = mapping_of(pool.get());
  ASSERT_EQ(kvs_device_tables_upload_mapping(t.get(), map.data(), map.size(), &err), KVS_OK)
      << err.message;
  kvs_table_dims dims = kvs_device_tables_dims(t.get());
  for (size_t n : {1u, 1000u, 1u << 20, 3u << 20}) {
    SCOPED_TRACE(testing::Message() << n << " locs");
    std::vector<int64_t> locs(n);
    for (size_t i = 0; i < n; i++) {
      uint64_t kind = rng() % 100;
      locs[i] = kind == 0   ? -1 - int64_t(rng() % 5)
                : kind == 1 ? int64_t(dims.full_token + rng() % 3)  // sentinel, or past it
                : kind < 50 ? int64_t(i % dims.full_token)          // runs, as a step has them
                            : int64_t(rng() % dims.full_token);
    }
    std::vector<int64_t> ref(n);
    kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
    ASSERT_EQ(kvs_ref_translate(map.data(), &dims, locs.data(), n, ref.data(), &ref_fault, nullptr),
              KVS_OK);
    clear_faults(t.get());
    DeviceArray<int64_t> d_locs(locs), d_out(n);
    d_out.poison();
    ASSERT_EQ(kvs_device_tables_translate(t.get(), d_locs.get(), n, d_out.get(), nullptr, &err),
              KVS_OK)
        << err.message;
    EXPECT_SAME_ROWS(d_out.download(), ref);
    expect_fault(faults_of(t.get()).translate, ref_fault);
  }
}

TEST_F(Device, state_locs_match_the_reference_for_both_rings_and_either_alone) {
  std::mt19937_64 rng(9);
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 64, 33);
  Tables t = make_tables(g, s);
  ASSERT_TRUE(t);
  kvs_table_dims dims = kvs_device_tables_dims(t.get());
  size_t n = 2u << 20;
  std::vector<int64_t> slots(n);
  for (size_t i = 0; i < n; i++) {
    uint64_t kind = rng() % 100;
    slots[i] = kind == 0   ? -1
               : kind == 1 ? int64_t(dims.n_win_slots + rng() % 1000)  // past the pool
                           : int64_t(rng() % dims.n_win_slots);
  }
  std::vector<int64_t> ref_csa(n), ref_hca(n);
  kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_state_locs(&dims, slots.data(), n, ref_csa.data(), ref_hca.data(), &ref_fault,
                               nullptr),
            KVS_OK);
  DeviceArray<int64_t> d_slots(slots), d_csa(n), d_hca(n);
  kvs_error err;
  for (int which = 0; which < 3; which++) {
    SCOPED_TRACE(which == 0 ? "both rings" : which == 1 ? "ratio-4 ring" : "ratio-128 ring");
    clear_faults(t.get());
    d_csa.poison();
    d_hca.poison();
    ASSERT_EQ(
        kvs_device_tables_state_locs(t.get(), d_slots.get(), n, which != 2 ? d_csa.get() : nullptr,
                                     which != 1 ? d_hca.get() : nullptr, nullptr, &err),
        KVS_OK)
        << err.message;
    if (which != 2) {
      EXPECT_SAME_ROWS(d_csa.download(), ref_csa);
    }
    if (which != 1) {
      EXPECT_SAME_ROWS(d_hca.download(), ref_hca);
    }
    if (which == 1) {
      EXPECT_EQ(d_hca.download()[0], kPoison) << "an output not asked for is not written";
    }
    expect_fault(faults_of(t.get()).state_locs, ref_fault);
  }
}

namespace {

struct RingCase {
  uint64_t page;
  uint64_t block_size;
  uint64_t stride;
  size_t n_req;
  bool with_faults;
};

void expect_ring_ctx_bit_for_bit(const RingCase &c, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "P " << c.page << " block_size " << c.block_size << " stride "
                                  << c.stride << " requests " << c.n_req
                                  << (c.with_faults ? " with faults" : ""));
  std::mt19937_64 rng(seed);
  // Ratio 128 needs P % 128 == 0; the smaller windows use CSA layers only.
  kvs_geometry g = c.page % 128 == 0 ? small_geometry() : make_geometry(8, 4, {0, 4});
  kvs_pool_sizes s = sizes_for(g, 512, 300, c.page);
  Pool pool = make_pool(s, 0);
  bind_most(pool.get(), rng);
  Tables t = make_tables(g, s);
  ASSERT_TRUE(t);
  kvs_error err;
  std::vector<int64_t> map = mapping_of(pool.get());
  ASSERT_EQ(kvs_device_tables_upload_mapping(t.get(), map.data(), map.size(), &err), KVS_OK)
      << err.message;
  kvs_table_dims dims = kvs_device_tables_dims(t.get());
  Batch b = make_batch(rng, c.n_req, c.stride, c.block_size, dims.full_token, c.page);
  if (c.with_faults) {
    // Blocks past the history, and positions past the row.
    for (size_t i = 0; i < b.pages.size(); i += 1 + rng() % 50) {
      b.pages[i] = int32_t(dims.full_token / c.block_size + rng() % 100);
    }
    for (size_t r = 0; r < c.n_req; r += 1 + rng() % 20) {
      b.positions[r] = int64_t(c.stride * c.block_size + rng() % 200);
    }
  }
  std::vector<int64_t> own(c.n_req), prev(c.n_req), ring(c.n_req * c.page);
  kvs_block_tables host_tables = b.tables();
  kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_ring_ctx(map.data(), &dims, &host_tables, b.positions.data(), c.n_req,
                             own.data(), prev.data(), ring.data(), &ref_fault, &err),
            KVS_OK)
      << err.message;
  if (c.with_faults) {
    EXPECT_GT(ref_fault.count, 0u);
  }

  DeviceArray<int32_t> d_pages(b.pages);
  DeviceArray<int64_t> d_positions(b.positions), d_own(c.n_req), d_prev(c.n_req),
      d_ring(c.n_req * c.page);
  d_own.poison();
  d_prev.poison();
  d_ring.poison();
  clear_faults(t.get());
  kvs_block_tables device_tables{d_pages.get(), c.stride, c.block_size};
  ASSERT_EQ(kvs_device_tables_ring_ctx(t.get(), &device_tables, d_positions.get(), c.n_req,
                                       d_own.get(), d_prev.get(), d_ring.get(), nullptr, &err),
            KVS_OK)
      << err.message;
  EXPECT_SAME_ROWS(d_own.download(), own);
  EXPECT_SAME_ROWS(d_prev.download(), prev);
  EXPECT_SAME_ROWS(d_ring.download(), ring);
  expect_fault(faults_of(t.get()).ring_ctx, ref_fault);
}

}  // namespace

TEST_F(Device, the_ring_context_matches_the_reference_bit_for_bit) {
  const RingCase cases[] = {
      {128, 128, 8, 1, false},    {128, 128, 8, 256, false},   {128, 128, 8, 4096, false},
      {128, 64, 16, 1000, false}, {128, 256, 4, 1000, false},  {128, 16, 64, 1000, false},
      {128, 3, 300, 500, false},  {64, 64, 8, 1000, false},    {96, 32, 12, 1000, false},
      {256, 128, 8, 1000, false}, {128, 128, 8, 70000, false},  // more warps than one wave
      {128, 128, 8, 4096, true},  {128, 3, 300, 500, true},
  };
  uint64_t seed = 100;
  for (const RingCase &c : cases) expect_ring_ctx_bit_for_bit(c, seed++);
}

TEST_F(Device, argument_errors_launch_nothing) {
  kvs_geometry g = make_geometry(8, 4, {0, 4});
  kvs_pool_sizes s = sizes_for(g, 64, 33, 64);  // P = 64: no ratio-128 ring
  Tables t = make_tables(g, s);
  ASSERT_TRUE(t);
  DeviceArray<int64_t> d(64);
  kvs_error err;
  EXPECT_EQ(kvs_device_tables_state_locs(t.get(), d.get(), 64, nullptr, d.get(), nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "ring_size 128 must divide P=64, or two pages share a ring block");
  EXPECT_EQ(kvs_device_tables_translate(t.get(), d.get(), 64, nullptr, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "translate of 64 locs: the output is NULL");
  kvs_block_tables bad{nullptr, 4, 64};
  EXPECT_EQ(kvs_device_tables_ring_ctx(t.get(), &bad, d.get(), 4, d.get(), d.get(), d.get(),
                                       nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_device_tables_apply_journal_device(t.get(), nullptr, 3, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
  std::vector<int64_t> wrong(10, -1);
  EXPECT_EQ(kvs_device_tables_upload_mapping(t.get(), wrong.data(), wrong.size(), &err),
            KVS_ERR_INVALID_ARGUMENT);
  std::vector<int64_t> written(64 * 64 + 1, -1);
  written.back() = 5;
  EXPECT_EQ(kvs_device_tables_upload_mapping(t.get(), written.data(), written.size(), &err),
            KVS_ERR_INTEGRITY);
  EXPECT_STREQ(err.message,
               "the mapping's sentinel row holds 5, not -1; a gather at -1 would read a slot");
  kvs_device_faults f = faults_of(t.get());
  EXPECT_EQ(kvs_device_faults_check(&f, &err), KVS_OK) << err.message;
  // Empty batches are fine and launch nothing.
  EXPECT_EQ(kvs_device_tables_translate(t.get(), nullptr, 0, nullptr, nullptr, &err), KVS_OK);
  EXPECT_EQ(kvs_device_tables_apply_journal(t.get(), nullptr, 0, nullptr, &err), KVS_OK);
}

TEST_F(Device, an_impossible_allocation_is_a_cuda_error_naming_the_bytes) {
  kvs_geometry flash = builtin("dsv4-flash");
  kvs_pool_sizes s = sizes_for(flash, 1ull << 26, 1ull << 20);  // petabytes
  kvs_device_layout layout;
  kvs_error err;
  ASSERT_EQ(kvs_device_layout_build(&flash, 0, 43, nullptr, &s, nullptr, &layout, &err), KVS_OK)
      << err.message;
  kvs_device_tables_t t = nullptr;
  EXPECT_EQ(kvs_device_tables_create(0, &layout, &t, &err), KVS_ERR_CUDA);
  EXPECT_EQ(t, nullptr);
  std::string message = err.message;
  EXPECT_NE(message.find("cudaMalloc of " + std::to_string(layout.total_bytes) +
                         " bytes on device 0: cudaErrorMemoryAllocation (out of memory)"),
            std::string::npos)
      << message;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the error was cleared, not left for others";
}

// The batch state-location kernel against kvs_ref_batch_state_locs in all
// three placements, each output alone and both, over a million rows with
// idle, unbound and out-of-range ones.
TEST_F(Device, batch_state_locs_match_the_reference_in_every_placement) {
  std::mt19937_64 rng(23);
  kvs_geometry g = small_geometry();
  for (kvs_state_rings rings :
       {KVS_STATE_RINGS_PER_PAGE, KVS_STATE_RINGS_PER_REQUEST, KVS_STATE_RINGS_HCA_PER_REQUEST}) {
    SCOPED_TRACE(kvs_state_rings_name(rings));
    kvs_row_widths w = widths_with_rings(g, rings, 65);
    kvs_pool_sizes s = sizes_with_rings(g, 64, 33, rings, 65);
    kvs_device_layout layout;
    kvs_error err;
    ASSERT_EQ(kvs_device_layout_build(&g, 0, kvs_geometry_layer_count(&g), &w, &s, nullptr, &layout,
                                      &err),
              KVS_OK)
        << err.message;
    kvs_device_tables_t raw = nullptr;
    ASSERT_EQ(kvs_device_tables_create(0, &layout, &raw, &err), KVS_OK) << err.message;
    Tables t(raw);
    kvs_state_placement p = kvs_state_placement_of(&s);
    size_t n = 1u << 20;
    std::vector<int64_t> own(n), slots(n), positions(n);
    for (size_t i = 0; i < n; i++) {
      uint64_t kind = rng() % 64;
      positions[i] = kind == 0 ? -1 : int64_t(rng() % 1000000);
      own[i] = kind == 1   ? -1
               : kind == 2 ? int64_t(p.n_win_slots + rng() % 100)
                           : int64_t(rng() % p.n_win_slots);
      slots[i] = kind == 3 ? -1 : kind == 4 ? int64_t(65 + rng() % 3) : int64_t(rng() % 65);
    }
    bool per_request = rings != KVS_STATE_RINGS_PER_PAGE;
    DeviceArray<int64_t> d_own(own), d_slots(slots), d_pos(positions), d_csa(n), d_hca(n);
    for (int which = 0; which < 3; which++) {
      SCOPED_TRACE(which == 0 ? "both rings" : which == 1 ? "ratio-4 ring" : "ratio-128 ring");
      bool csa_out = which != 2, hca_out = which != 1;
      std::vector<int64_t> ref_csa(n, kPoison), ref_hca(n, kPoison);
      kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
      ASSERT_EQ(kvs_ref_batch_state_locs(&p, own.data(), per_request ? slots.data() : nullptr,
                                         positions.data(), n, csa_out ? ref_csa.data() : nullptr,
                                         hca_out ? ref_hca.data() : nullptr, &ref_fault, nullptr),
                KVS_OK);
      clear_faults(t.get());
      d_csa.poison();
      d_hca.poison();
      ASSERT_EQ(kvs_device_tables_batch_state_locs(t.get(), d_own.get(),
                                                   per_request ? d_slots.get() : nullptr,
                                                   d_pos.get(), n, csa_out ? d_csa.get() : nullptr,
                                                   hca_out ? d_hca.get() : nullptr, nullptr, &err),
                KVS_OK)
          << err.message;
      EXPECT_SAME_ROWS(d_csa.download(), ref_csa);
      EXPECT_SAME_ROWS(d_hca.download(), ref_hca);
      expect_fault(faults_of(t.get()).state_locs, ref_fault);
    }
    if (per_request) {
      EXPECT_EQ(kvs_device_tables_batch_state_locs(t.get(), d_own.get(), nullptr, d_pos.get(), n,
                                                   d_csa.get(), d_hca.get(), nullptr, &err),
                KVS_ERR_INVALID_ARGUMENT);
    }
  }
}

// A journal mixing request-slot entries with page entries (a few bad):
// the device apply writes what the reference writes and faults only the
// bad page entries.
TEST_F(Device, the_journal_apply_skips_request_slot_entries) {
  std::mt19937_64 rng(29);
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 64, 33);
  Tables t = make_tables(g, s);
  ASSERT_TRUE(t);
  kvs_table_dims dims = kvs_device_tables_dims(t.get());
  std::vector<int64_t> ref = download_table(t.get());
  std::vector<kvs_journal_entry> journal = random_journal(rng, dims, 3000, 40, 3);
  for (size_t i = 0; i < journal.size(); i += 1 + rng() % 3) {
    journal[i].full_page = KVS_JOURNAL_SLOT_TAG | (rng() % 40);
    journal[i].window_page = int64_t(rng() % 100);
  }
  kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(
      kvs_ref_apply_journal(ref.data(), &dims, journal.data(), journal.size(), &ref_fault, nullptr),
      KVS_OK);
  clear_faults(t.get());
  DeviceArray<kvs_journal_entry> d_journal(journal);
  kvs_error err;
  ASSERT_EQ(kvs_device_tables_apply_journal_device(t.get(), d_journal.get(), journal.size(),
                                                   nullptr, &err),
            KVS_OK)
      << err.message;
  EXPECT_SAME_ROWS(download_table(t.get()), ref);
  expect_fault(faults_of(t.get()).apply_journal, ref_fault);
}

// A transfer's rows digests on the GPU equal the reference for units of 1
// to 17 bytes at aligned and unaligned addresses, pages of thousands and a
// unit of 1 MiB, more units than the grid has blocks.
TEST_F(Device, the_rows_digests_match_the_reference_bit_for_bit) {
  std::mt19937_64 rng(9);
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 2048, 1025);
  Tables t = make_tables(g, s);
  ASSERT_TRUE(t);
  std::vector<unsigned char> bytes(4u << 20);
  for (auto &b : bytes) b = static_cast<unsigned char>(rng());
  DeviceArray<unsigned char> memory(bytes);
  std::vector<kvs_rows_unit> units, host_units;
  auto add = [&](uint64_t at, uint64_t len) {
    units.push_back({memory.get() + at, len, rng()});
    host_units.push_back({bytes.data() + at, len, units.back().seed});
  };
  for (uint64_t len = 1; len <= 17; len++) {
    add(64 * len, len);
    add(64 * len + 5, len);
  }
  add(0, 1u << 20);
  for (int i = 0; i < 20000; i++) {
    uint64_t len = 1 + rng() % 20000;
    add(rng() % (bytes.size() - len), len);
  }
  DeviceArray<kvs_rows_unit> d_units(units);
  DeviceArray<uint64_t> d_out(units.size());
  d_out.poison();
  kvs_error err;
  ASSERT_EQ(kvs_device_tables_rows_digest(t.get(), d_units.get(), units.size(), d_out.get(),
                                          nullptr, &err),
            KVS_OK)
      << err.message;
  std::vector<uint64_t> ref(units.size());
  for (size_t u = 0; u < units.size(); u++) {
    ref[u] = kvs_ref_rows_digest(host_units[u].rows, host_units[u].bytes, host_units[u].seed);
  }
  EXPECT_SAME_ROWS(d_out.download(), ref);
}
