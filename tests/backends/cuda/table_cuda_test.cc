// The device table (shard/table.h through the CUDA backend's tables entry
// point, linked into the test) on the CPU stand-in for CUDA, where a real
// node's sizes would break it: a check's download of a table larger than
// the download buffer is stream-ordered (no device-wide synchronisation,
// which would stall the engine's streams and the communicator's) and
// byte-identical to the pool's mapping.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "plan/device_layout.h"
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
