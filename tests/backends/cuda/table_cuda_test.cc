// The device table (shard/table.h through the CUDA backend's tables entry
// point, linked into the test) on the CPU stand-in for CUDA, where a real
// node's sizes would break it: a check's download of a table larger than
// the download buffer is stream-ordered (no device-wide synchronisation,
// which would stall the engine's streams and the communicator's) and
// byte-identical to the pool's mapping; the host tier is allocated in
// chunks of whole slots (a 128 GiB tier is not one pinned allocation) and
// its spills and fetches across chunk edges move the bytes the host twin's
// one-chunk tier moves; a chunk that cannot be pinned leaves no tier and
// says which chunk and RLIMIT_MEMLOCK.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "plan/device_layout.h"
#include "pool/window_pool.h"
#include "shard/table.h"
#include "tests/backends/cuda/fixtures.h"
#include "tests/standin/harness.h"
#include "tests/standin/standin.h"

using namespace kvs_cuda_test;

namespace {

struct TableDeleter {
  void operator()(kvs_table *t) const { kvs_table_destroy(t); }
};
using Table = std::unique_ptr<kvs_table, TableDeleter>;

kvs_device_layout layout_for(const kvs_geometry &g, const kvs_pool_sizes &s) {
  kvs_device_layout l;
  kvs_error err;
  EXPECT_EQ(
      kvs_device_layout_build(&g, 0, kvs_geometry_layer_count(&g), nullptr, &s, nullptr, &l, &err),
      KVS_OK)
      << err.message;
  return l;
}

Table host_table(const kvs_device_layout &layout) {
  kvs_table_limits limits{8, 8};
  kvs_table_t t = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_table_create_host(&layout, &limits, &t, &err), KVS_OK) << err.message;
  return Table(t);
}

Table cuda_table(const kvs_device_layout &layout) {
  kvs_table_limits limits{8, 8};
  kvs_table_t t = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_table_create_cuda(0, &layout, &limits, nullptr, &t, &err), KVS_OK) << err.message;
  return Table(t);
}

}  // namespace

// 2,200 full pages of 128 tokens: a table of 281,601 rows (2.25 MB), four
// chunks of the 512 KiB download halves and a part.
TEST(TableCuda, a_checks_download_is_stream_ordered_chunked_and_byte_identical) {
  kvs_standin_harness::reset(1, 3);
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 2200, 600);
  kvs_device_layout layout = layout_for(g, s);
  Table table = cuda_table(layout);
  ASSERT_TRUE(table);
  Leader leader(s, 4096, 7);
  kvs_error err;
  for (int step = 0; step < 4; step++) {
    leader.bind(150);
    leader.release(40);
    std::vector<kvs_journal_entry> journal = leader.drain();
    ASSERT_EQ(kvs_table_apply(table.get(), journal.data(), nullptr, journal.size(), &err), KVS_OK)
        << err.message;
  }
  std::vector<int64_t> want = mapping_of(leader.pool());
  ASSERT_GT(want.size() * sizeof(int64_t), size_t(2) << 20) << "more than four halves";
  std::vector<int64_t> got(want.size(), int64_t(0x5a5a5a5a5a5a5a5a));
  uint64_t device_syncs = kvs_standin::stats().device_syncs;
  ASSERT_EQ(kvs_table_download(table.get(), got.data(), got.size(), &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_standin::stats().device_syncs - device_syncs, 0u)
      << "the download synchronised the whole device";
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(int64_t)), 0)
      << "the downloaded table differs from the pool's mapping";
  kvs_standin_harness::expect_no_violations();
}

namespace {

// A spill or fetch as the leader's journal carries it (pool/prefix_ops.c:
// the prefix tag, the operation at bit 56, the page; the slot as operand),
// checked against the pool's own decoder.
kvs_journal_entry move(bool fetch, uint64_t page, uint64_t slot) {
  kvs_journal_entry e{};
  e.full_page = int64_t(KVS_JOURNAL_PREFIX_TAG |
                        (uint64_t(fetch ? KVS_PREFIX_OP_FETCH : KVS_PREFIX_OP_SPILL) << 56) | page);
  e.window_page = int64_t(slot);
  kvs_host_move m{};
  EXPECT_TRUE(kvs_window_pool_host_move_of(&e, &m));
  EXPECT_EQ(m.fetch, fetch);
  EXPECT_EQ(m.full_page, page);
  EXPECT_EQ(m.slot, slot);
  return e;
}

std::vector<unsigned char> pattern(size_t bytes) {
  std::vector<unsigned char> p(bytes);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto &b : p) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  return p;
}

}  // namespace

// Seven slots in chunks of two (the last holds one): every slot lies in one
// pinned allocation; spills of seven pages and fetches of them into seven
// others leave the device carve equal to the host twin's, whose tier is
// one chunk.
TEST(TableCuda, the_host_tier_in_chunks_moves_the_bytes_one_allocation_moves) {
  kvs_standin_harness::reset(1, 5);
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 64, 33);
  kvs_device_layout layout = layout_for(g, s);
  Table device = cuda_table(layout), twin = host_table(layout);
  ASSERT_TRUE(device && twin);
  const uint64_t slot_bytes = kvs_table_host_slot_bytes(&layout);
  ASSERT_GT(slot_bytes, 0u);
  kvs_error err;
  ASSERT_EQ(
      kvs_table_host_tier_chunked(device.get(), &layout, 7, 2 * slot_bytes + slot_bytes / 2, &err),
      KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_table_host_tier(twin.get(), &layout, 7, &err), KVS_OK) << err.message;
  for (uint64_t slot = 0; slot < 7; slot++) {
    uint64_t bytes = 0, slots = 0;
    const unsigned char *p = kvs_table_host_tier_slot(device.get(), slot, &bytes, &slots);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(slots, 7u);
    EXPECT_TRUE(kvs_standin::is_pinned(p, bytes)) << "slot " << slot << " straddles two chunks";
  }
  EXPECT_EQ(kvs_table_host_tier_slot(device.get(), 7, nullptr, nullptr), nullptr);

  // The same bytes in both carves.
  void *device_base = nullptr, *twin_base = nullptr;
  int64_t *mapping = nullptr;
  ASSERT_EQ(kvs_table_memory(device.get(), &device_base, &mapping, &err), KVS_OK) << err.message;
  ASSERT_EQ(kvs_table_memory(twin.get(), &twin_base, &mapping, &err), KVS_OK) << err.message;
  const size_t total = layout.total_bytes;
  std::vector<unsigned char> bytes = pattern(total);
  std::memcpy(twin_base, bytes.data(), total);
  kvs_standin_harness::on_device(0, [&] {
    ASSERT_EQ(cudaMemcpy(device_base, bytes.data(), total, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  });

  std::vector<kvs_journal_entry> spills, fetches;
  for (uint64_t slot = 0; slot < 7; slot++) spills.push_back(move(false, 3 + 2 * slot, slot));
  for (uint64_t slot = 0; slot < 7; slot++) fetches.push_back(move(true, 40 + slot, 6 - slot));
  for (kvs_table *t : {device.get(), twin.get()}) {
    ASSERT_EQ(kvs_table_apply(t, spills.data(), nullptr, spills.size(), &err), KVS_OK)
        << err.message;
    ASSERT_EQ(kvs_table_apply(t, fetches.data(), nullptr, fetches.size(), &err), KVS_OK)
        << err.message;
    ASSERT_EQ(kvs_table_sync(t, &err), KVS_OK) << err.message;
  }
  for (uint64_t slot = 0; slot < 7; slot++) {
    EXPECT_EQ(std::memcmp(kvs_table_host_tier_slot(device.get(), slot, nullptr, nullptr),
                          kvs_table_host_tier_slot(twin.get(), slot, nullptr, nullptr), slot_bytes),
              0)
        << "slot " << slot << " holds other rows than the twin's";
  }
  std::vector<unsigned char> after(total);
  kvs_standin_harness::on_device(0, [&] {
    ASSERT_EQ(cudaMemcpy(after.data(), device_base, total, cudaMemcpyDeviceToHost), cudaSuccess);
  });
  // The tiers after the table (the control area before it holds the
  // device's journal staging; the twin keeps its table apart).
  const size_t tiers = layout.spans[0].offset + layout.spans[0].bytes;
  const unsigned char *twin_bytes = static_cast<unsigned char *>(twin_base);
  EXPECT_NE(std::memcmp(twin_bytes + tiers, bytes.data() + tiers, total - tiers), 0)
      << "the fetches moved rows";
  EXPECT_EQ(std::memcmp(after.data() + tiers, twin_bytes + tiers, total - tiers), 0)
      << "the device tiers differ from the host twin's after the fetches";
  kvs_standin_harness::expect_no_violations();
}

// The third chunk cannot be pinned: no tier, the error names the chunk, the
// tier's bytes and the memlock limit, and the table takes a tier after.
TEST(TableCuda, a_chunk_that_cannot_be_pinned_leaves_no_tier_and_says_why) {
  kvs_standin_harness::reset(1, 9);
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 64, 33);
  kvs_device_layout layout = layout_for(g, s);
  Table device = cuda_table(layout);
  ASSERT_TRUE(device);
  const uint64_t slot_bytes = kvs_table_host_slot_bytes(&layout);
  kvs_standin::inject_cuda_error("cudaMallocHost", -1, 3, cudaErrorMemoryAllocation);
  kvs_error err;
  ASSERT_EQ(kvs_table_host_tier_chunked(device.get(), &layout, 7, 2 * slot_bytes, &err),
            KVS_ERR_CUDA);
  const std::string message = err.message;
  EXPECT_NE(message.find("chunk 3 of 4"), std::string::npos) << message;
  EXPECT_NE(message.find("of a host tier of " + std::to_string(7 * slot_bytes) + " bytes"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("RLIMIT_MEMLOCK"), std::string::npos) << message;
  EXPECT_EQ(kvs_table_host_tier_slot(device.get(), 0, nullptr, nullptr), nullptr)
      << "a failed tier leaves none";
  ASSERT_EQ(kvs_table_host_tier_chunked(device.get(), &layout, 7, 2 * slot_bytes, &err), KVS_OK)
      << err.message;
  kvs_standin_harness::expect_no_violations();
}
