// The device tables (backends/cuda/device_tables.c, the product's C source) on the
// CPU stand-in for CUDA (tests/standin): upload, apply from host and from
// device memory, translate, state locations and ring contexts, against the
// core/device_ref references and the leader pool's own mapping, over
// seeded schedules in which the stand-in reorders everything CUDA leaves
// unordered. Every schedule runs on a fresh thread that never chose a
// device, with the tables on device 1: no call may leave the thread on a
// device or create a context on device 0.
//
// KVS_STANDIN_SCHEDULES=100000 runs longer.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/device_ref.h"
#include "plan/device_layout.h"
#include "backends/cuda/device_tables.h"
#include "tests/backends/cuda/fixtures.h"
#include "tests/standin/harness.h"
#include "tests/standin/standin.h"

using namespace kvs_cuda_test;
using kvs_standin_harness::DeviceArray;
using kvs_standin_harness::on_device;

namespace {

constexpr int kDevice = 1;

void reset(uint64_t seed) {
  kvs_standin::Config c;
  c.devices = 2;
  c.seed = seed;
  kvs_standin::reset(c);
}

// The violations the stand-in saw, and (where the test is about it) no
// context on GPU 0.
void finish_schedule(bool check_contexts) {
  for (const std::string &v : kvs_standin::violations()) ADD_FAILURE() << v;
  if (check_contexts) {
    EXPECT_EQ(kvs_standin::contexts_created(0), 0)
        << "a primary context was created on GPU 0, which no call was asked to use";
  }
}

int one_rank(uint64_t) { return 1; }

// Runs body on a thread that never chose a device.
template <typename Body>
void on_fresh_thread(Body body) {
  std::thread(body).join();
}

struct Tables {
  kvs_device_tables_t t = nullptr;
  kvs_table_dims dims{};
  explicit Tables(const kvs_geometry &g, const kvs_pool_sizes &s) {
    kvs_device_layout layout;
    kvs_error err;
    EXPECT_EQ(kvs_device_layout_build(&g, 0, g.n_layers, nullptr, &s, nullptr, &layout, &err),
              KVS_OK)
        << err.message;
    EXPECT_EQ(kvs_device_tables_create(kDevice, &layout, &t, &err), KVS_OK) << err.message;
    if (t != nullptr) dims = kvs_device_tables_dims(t);
  }
  ~Tables() { kvs_device_tables_destroy(t); }
  std::vector<int64_t> download() const {
    std::vector<int64_t> map(dims.full_token + 1);
    kvs_error err;
    EXPECT_EQ(kvs_device_tables_download_mapping(t, map.data(), map.size(), &err), KVS_OK)
        << err.message;
    return map;
  }
};

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  on_device(kDevice,
            [&] { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); });
  return s;
}

void destroy_stream(cudaStream_t s) {
  on_device(kDevice, [&] { EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess); });
}

// `reader` waits for what `writer` queued so far (the user's side of the
// ordering contract: kernels on another stream are not ordered otherwise).
void order_after(cudaStream_t reader, cudaStream_t writer) {
  if (reader == writer) return;
  on_device(kDevice, [&] {
    cudaEvent_t e;
    ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(e, writer), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(reader, e, 0), cudaSuccess);
    ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
  });
}

// Translate, state locs and ring contexts of a random batch on `stream`,
// against the references over `map` (what the table must hold).
void expect_reads(Tables &tables, const std::vector<int64_t> &map, cudaStream_t stream,
                  std::mt19937_64 &rng, const char *when) {
  SCOPED_TRACE(when);
  const kvs_table_dims &dims = tables.dims;
  kvs_error err;
  size_t n = 1 + rng() % 300;
  std::vector<int64_t> locs(n);
  for (auto &l : locs) {
    uint64_t kind = rng() % 40;
    l = kind == 0 ? -1 : int64_t(rng() % dims.full_token);
  }
  std::vector<int64_t> ref(n), csa(n), hca(n);
  ASSERT_EQ(kvs_ref_translate(map.data(), &dims, locs.data(), n, ref.data(), nullptr, &err),
            KVS_OK);
  ASSERT_EQ(kvs_ref_state_locs(&dims, ref.data(), n, csa.data(), hca.data(), nullptr, &err),
            KVS_OK);
  DeviceArray<int64_t> d_locs(kDevice, n), d_out(kDevice, n), d_csa(kDevice, n), d_hca(kDevice, n);
  d_locs.upload(locs, stream);
  ASSERT_EQ(kvs_device_tables_translate(tables.t, d_locs.get(), n, d_out.get(), stream, &err),
            KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_device_tables_state_locs(tables.t, d_out.get(), n, d_csa.get(), d_hca.get(), stream,
                                         &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(d_out.download(stream), ref) << "translate";
  EXPECT_EQ(d_csa.download(stream), csa) << "state locs, ratio 4";
  EXPECT_EQ(d_hca.download(stream), hca) << "state locs, ratio 128";

  size_t n_req = 1 + rng() % 12;
  Batch b = make_batch(rng, n_req, 4, dims.page, dims.full_token, dims.page);
  kvs_block_tables host_tables = b.tables();
  std::vector<int64_t> own(n_req), prev(n_req), ring(n_req * dims.page);
  ASSERT_EQ(kvs_ref_ring_ctx(map.data(), &dims, &host_tables, b.positions.data(), n_req, own.data(),
                             prev.data(), ring.data(), nullptr, &err),
            KVS_OK)
      << err.message;
  DeviceArray<int32_t> d_pages(kDevice, b.pages.size());
  DeviceArray<int64_t> d_pos(kDevice, n_req), d_own(kDevice, n_req), d_prev(kDevice, n_req),
      d_ring(kDevice, n_req * dims.page);
  d_pages.upload(b.pages, stream);
  d_pos.upload(b.positions, stream);
  kvs_block_tables device_tables{d_pages.get(), b.stride, b.block_size};
  ASSERT_EQ(kvs_device_tables_ring_ctx(tables.t, &device_tables, d_pos.get(), n_req, d_own.get(),
                                       d_prev.get(), d_ring.get(), stream, &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(d_own.download(stream), own) << "ring context: own slots";
  EXPECT_EQ(d_prev.download(stream), prev) << "ring context: previous slots";
  EXPECT_EQ(d_ring.download(stream), ring) << "ring context: rings";
}

enum class Source { kPageable, kPinned, kDevice };

// Applies a journal from one of the three sources on `stream`. Host
// entries are overwritten as soon as the call returns: the next step's
// drain does that to the shard's pinned message buffer.
void apply(Tables &tables, const std::vector<kvs_journal_entry> &journal, Source source,
           cudaStream_t stream) {
  kvs_error err;
  size_t n = journal.size();
  if (source == Source::kDevice) {
    DeviceArray<kvs_journal_entry> d(kDevice, n);
    d.upload(journal, stream);
    ASSERT_EQ(kvs_device_tables_apply_journal_device(tables.t, d.get(), n, stream, &err), KVS_OK)
        << err.message;
    // d is freed here: cudaFree waits for the device, as the runtime's does.
    return;
  }
  kvs_journal_entry *host = nullptr;
  std::vector<kvs_journal_entry> pageable(journal);
  if (source == Source::kPinned) {
    on_device(kDevice, [&] {
      ASSERT_EQ(cudaMallocHost(reinterpret_cast<void **>(&host), n * sizeof *host + 1),
                cudaSuccess);
    });
    if (n > 0) std::memcpy(host, journal.data(), n * sizeof *host);
  } else {
    host = pageable.data();
  }
  ASSERT_EQ(kvs_device_tables_apply_journal(tables.t, host, n, stream, &err), KVS_OK)
      << err.message;
  for (size_t i = 0; i < n; i++) host[i] = kvs_journal_entry{0, KVS_JOURNAL_FREED};
  if (source == Source::kPinned) {
    on_device(kDevice, [&] { EXPECT_EQ(cudaFreeHost(host), cudaSuccess); });
  }
}

// One schedule of the full walk.
void walk(uint64_t seed) {
  std::mt19937_64 rng(seed);
  kvs_geometry g = small_geometry();
  kvs_pool_sizes s = sizes_for(g, 48, 25);
  Leader leader(s, 1024, seed);
  Tables tables(g, s);
  ASSERT_NE(tables.t, nullptr);
  EXPECT_EQ(kvs_standin::thread_device(), -1) << "creating the tables chose a device";
  cudaStream_t streams[2] = {new_stream(), new_stream()};
  kvs_error err;

  // Upload: synchronous, so a kernel on a non-blocking stream sees it.
  leader.bind(10 + rng() % 20);
  leader.drain();  // the upload carries these
  std::vector<int64_t> map = mapping_of(leader.pool());
  ASSERT_EQ(kvs_device_tables_upload_mapping(tables.t, map.data(), map.size(), &err), KVS_OK)
      << err.message;
  expect_reads(tables, map, streams[rng() % 2], rng, "after the upload");

  cudaStream_t last = streams[0];
  for (int round = 0; round < 4; round++) {
    leader.bind(rng() % 12);
    leader.release(rng() % 8);
    std::vector<kvs_journal_entry> journal = leader.drain();
    Source source = static_cast<Source>(rng() % 3);
    cudaStream_t stream = streams[rng() % 2];
    order_after(stream, last);  // applies go in step order
    apply(tables, journal, source, stream);
    last = stream;
    map = mapping_of(leader.pool());
    cudaStream_t reader = streams[rng() % 2];
    order_after(reader, stream);
    expect_reads(tables, map, reader, rng, "after an apply");
    last = reader;
    EXPECT_EQ(tables.download(), map) << "round " << round;
    EXPECT_EQ(kvs_standin::thread_device(), -1) << "a table call left the thread on a device";
  }

  // A device journal with an entry past the history: skipped and faulted.
  std::vector<kvs_journal_entry> bad = {{0, 0}, {tables.dims.full_token / tables.dims.page + 3, 1}};
  std::vector<int64_t> expected = tables.download();
  kvs_batch_fault ref_fault = KVS_BATCH_FAULT_INIT;
  ASSERT_EQ(kvs_ref_apply_journal(expected.data(), &tables.dims, bad.data(), bad.size(), &ref_fault,
                                  &err),
            KVS_OK);
  apply(tables, bad, Source::kDevice, streams[0]);
  kvs_device_faults faults;
  ASSERT_EQ(kvs_device_tables_faults(tables.t, streams[0], &faults, &err), KVS_OK) << err.message;
  EXPECT_EQ(faults.apply_journal.count, 1u);
  EXPECT_EQ(faults.apply_journal.first_index, 1u);
  EXPECT_EQ(kvs_device_faults_check(&faults, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_EQ(tables.download(), expected);
  ASSERT_EQ(kvs_device_tables_clear_faults(tables.t, streams[0], &err), KVS_OK);
  ASSERT_EQ(kvs_device_tables_faults(tables.t, streams[0], &faults, &err), KVS_OK);
  EXPECT_EQ(kvs_device_faults_check(&faults, &err), KVS_OK) << err.message;
  for (cudaStream_t st : streams) destroy_stream(st);
}

}  // namespace

TEST(StreamOrder, device_tables_over_seeded_schedules) {
  kvs_standin_harness::over_schedules(kvs_standin_harness::schedules(1000), one_rank,
                                      [](uint64_t seed) {
                                        reset(seed);
                                        on_fresh_thread([&] { walk(seed); });
                                        finish_schedule(true);
                                      });
}

// Issue 17, defect 3: cudaMemcpy from pageable memory may return before the
// data lands, and kernels on non-blocking streams are not ordered after
// it; kvs_device_tables_upload_mapping promises a synchronous upload.
TEST(StreamOrder, an_upload_is_complete_when_it_returns) {
  kvs_standin_harness::over_schedules(200, one_rank, [](uint64_t seed) {
    reset(seed);
    on_fresh_thread([&] {
      std::mt19937_64 rng(seed);
      kvs_geometry g = small_geometry();
      kvs_pool_sizes s = sizes_for(g, 48, 25);
      Leader leader(s, 1024, seed);
      Tables tables(g, s);
      leader.bind(30);
      std::vector<int64_t> map = mapping_of(leader.pool());
      kvs_error err;
      ASSERT_EQ(kvs_device_tables_upload_mapping(tables.t, map.data(), map.size(), &err), KVS_OK);
      cudaStream_t stream = new_stream();
      expect_reads(tables, map, stream, rng, "right after the upload");
      destroy_stream(stream);
    });
    finish_schedule(false);
  });
}

// Issue 17, defect 2 (host side): the entries are copied asynchronously
// from pinned memory, which the shard's next drain rewrites; the apply
// must have taken them when it returns.
TEST(StreamOrder, host_entries_may_be_reused_once_the_apply_returns) {
  kvs_standin_harness::over_schedules(200, one_rank, [](uint64_t seed) {
    reset(seed);
    on_fresh_thread([&] {
      kvs_geometry g = small_geometry();
      kvs_pool_sizes s = sizes_for(g, 48, 25);
      Leader leader(s, 1024, seed);
      Tables tables(g, s);
      cudaStream_t stream = new_stream();
      for (int step = 0; step < 3; step++) {
        leader.bind(8);
        leader.release(3);
        apply(tables, leader.drain(), Source::kPinned, stream);
      }
      EXPECT_EQ(tables.download(), mapping_of(leader.pool()));
      destroy_stream(stream);
    });
    finish_schedule(false);
  });
}

// Issue 17, defect 6: "restoring the caller's device" on a thread that
// never chose one made device 0 current, creating its primary context
// (about 0.5 GB) in every rank.
TEST(StreamOrder, a_thread_without_a_device_is_left_without_one) {
  kvs_standin_harness::over_schedules(20, one_rank, [](uint64_t seed) {
    reset(seed);
    on_fresh_thread([&] {
      kvs_geometry g = small_geometry();
      kvs_pool_sizes s = sizes_for(g, 48, 25);
      Tables tables(g, s);
      EXPECT_EQ(kvs_standin::thread_device(), -1);
      std::vector<int64_t> map = tables.download();
      EXPECT_EQ(kvs_standin::thread_device(), -1);
      EXPECT_EQ(kvs_standin::thread_runtime_device(), 0)
          << "the thread's next call would bind the tables' GPU, not the 0 it had";
    });
    EXPECT_EQ(kvs_standin::contexts_created(0), 0);
    EXPECT_EQ(kvs_standin::contexts_created(1), 1);
    finish_schedule(true);
  });
}

// An arithmetic carve (alignment below 256) is not a table's: refused
// naming the field and its value, before the device is touched.
TEST(StreamOrder, tables_refuse_a_layout_aligned_below_256) {
  reset(1);
  on_fresh_thread([] {
    kvs_geometry g = small_geometry();
    kvs_pool_sizes s = sizes_for(g, 8, 5);
    kvs_device_layout_options o = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
    o.alignment = 1;
    kvs_device_layout layout;
    kvs_error err;
    ASSERT_EQ(kvs_device_layout_build(&g, 0, g.n_layers, nullptr, &s, &o, &layout, &err), KVS_OK)
        << err.message;
    kvs_device_tables_t t = nullptr;
    EXPECT_EQ(kvs_device_tables_create(kDevice, &layout, &t, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.message).find("options.alignment 1:"), std::string::npos)
        << err.message;
    EXPECT_EQ(t, nullptr);
  });
  EXPECT_EQ(kvs_standin::contexts_created(kDevice), 0) << "refused before any allocation";
  finish_schedule(true);
}
