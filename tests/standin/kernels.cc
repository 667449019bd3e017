// The kernels' launchers (backends/cuda/device_kernels.h) on the simulated machine:
// each kernel of a launch sequence (backends/cuda/device_kernels.cuh) becomes one
// operation of the stream, which runs the real kernel source through the
// CPU emulation (tests/backends/cuda/kernel_emulation.h) with a seeded order of
// threads and blocks. Before it runs, every array it touches must be live
// memory of the stream's device; otherwise it is a violation and the
// kernel does not run (on a GPU: an illegal address, or another device's
// memory read over the interconnect without a word).
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/device_kernels.h"
#include "tests/standin/engine.h"
// After the CUDA headers, whose host definitions it replaces, and before
// the kernels, which need its built-ins.
// clang-format off
#include "tests/backends/cuda/kernel_emulation.h"
#include "backends/cuda/device_kernels.cuh"
// clang-format on

using kvs_standin::Engine;
using kvs_standin::engine;
using kvs_standin::Op;
using kvs_standin::Range;

namespace {

using Lock = std::unique_lock<std::mutex>;

// launch(grid, threads, kernel, args...) as one queued operation.
struct QueuedLaunch {
  Engine *e;
  CUstream_st *s;
  std::vector<Range> ranges;
  const char *name;

  template <typename... Params, typename... Args>
  bool operator()(unsigned grid, unsigned threads, void (*kernel)(Params...), Args... args) {
    // Loaded at the call, in the launching context, as CUDA's lazy loading does.
    e->load_kernel(s->device, reinterpret_cast<const void *>(kernel), true);
    Op op;
    op.what = name;
    uint64_t seed = e->rng() | 1;
    Engine *engine_ = e;
    std::vector<Range> touched = ranges;
    int device = s->device;
    const char *kernel_name = name;
    op.run = [=] {
      for (const Range &r : touched) {
        if (!engine_->check_device(r, device, std::string("kernel ") + kernel_name)) return;
      }
      kvs_emu::set_schedule_seed(seed);
      kvs_emu::launch(grid, threads, kernel, args...);
      engine_->stats.kernels++;
    };
    e->enqueue(s, std::move(op));
    return true;
  }
};

// The launch checks a GPU makes at the call; the kernels' own work is
// queued by `body`.
template <typename Body>
cudaError_t launch(cudaStream_t stream, const char *name, std::vector<Range> ranges, Body body) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (e.config.devices <= 0) return kvs_standin::fail(cudaErrorNoDevice);
  e.background();
  int current = e.need_context();
  CUstream_st *s = e.resolve(stream, name);
  if (s == nullptr) return kvs_standin::fail(cudaErrorInvalidResourceHandle);
  if (s->device != current) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "launch of %s on a stream of device %d while device %d is current", name,
                  e.ordinal(s->device), e.ordinal(current));
    e.violation(text);
    return kvs_standin::fail(cudaErrorInvalidResourceHandle);
  }
  if (cudaError_t f = e.injected(name)) return kvs_standin::fail(f);
  body(QueuedLaunch{&e, s, std::move(ranges), name});
  return cudaSuccess;
}

const size_t kRow = sizeof(int64_t);

// cudaFuncGetAttributes on one kernel, as device_kernels.cu's loader.
struct LoadKernel {
  cudaError_t error = cudaSuccess;
  const char *failed = nullptr;

  template <typename... Params>
  bool operator()(void (*kernel)(Params...), const char *name) {
    cudaFuncAttributes attributes;
    error = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void *>(kernel));
    if (error != cudaSuccess) failed = name;
    return error == cudaSuccess;
  }
};

}  // namespace

cudaError_t kvs_kernels_load(const char **failed) {
  LoadKernel load;
  kvs_kernels::for_each_kernel(load);
  if (failed != nullptr) *failed = load.failed;
  return load.error;
}

// A launch that reads its count from device memory touches that word too.
void add_count(std::vector<Range> &ranges, const void *count, size_t bytes) {
  if (count != nullptr) ranges.push_back({count, bytes, "the count"});
}

cudaError_t kvs_launch_apply_journal(int64_t *map, kvs_table_dims dims,
                                     const kvs_journal_entry *entries, uint64_t n,
                                     const uint32_t *count, kvs_batch_fault *fault,
                                     uint32_t max_blocks, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  std::vector<Range> ranges = {{map, (dims.full_token + 1) * kRow, "the table"},
                               {entries, n * sizeof *entries, "the journal entries"},
                               {fault, sizeof *fault, "the fault record"}};
  add_count(ranges, count, sizeof *count);
  return launch(stream, "apply_journal", ranges, [&](QueuedLaunch q) {
    kvs_kernels::launch_apply_journal(q, map, dims, entries, n, count, fault, max_blocks);
  });
}

cudaError_t kvs_launch_table_digest(const int64_t *map, kvs_table_dims dims,
                                    unsigned long long *out, uint32_t max_blocks,
                                    cudaStream_t stream) {
  return launch(
      stream, "table_digest",
      {{map, (dims.full_token + 1) * kRow, "the table"}, {out, sizeof *out, "the digest word"}},
      [&](QueuedLaunch q) { kvs_kernels::launch_table_digest(q, map, dims, out, max_blocks); });
}

// The units' rows are known only when the kernel runs (the unit array is
// device memory, copied in on the stream): the operation checks the array,
// then every unit's rows, before the kernel reads them.
cudaError_t kvs_launch_rows_digest(const kvs_rows_unit *units, uint64_t n, uint64_t *out,
                                   uint32_t max_blocks, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return launch(stream, "rows_digest", {}, [&](QueuedLaunch q) {
    Engine *e = q.e;
    const int device = q.s->device;
    auto checked = [e, device, units, n, out](unsigned grid, unsigned threads, auto kernel,
                                              auto... args) {
      if (!e->check_device({units, n * sizeof *units, "the rows units"}, device,
                           "kernel rows_digest") ||
          !e->check_device({out, n * sizeof *out, "the digests"}, device, "kernel rows_digest")) {
        return;
      }
      for (uint64_t u = 0; u < n; u++) {
        if (units[u].bytes > 0 && !e->check_device({units[u].rows, units[u].bytes, "a unit's rows"},
                                                   device, "kernel rows_digest")) {
          return;
        }
      }
      kvs_emu::launch(grid, threads, kernel, args...);
      e->stats.kernels++;
    };
    e->load_kernel(device, reinterpret_cast<const void *>(kvs_kernels::rows_digest_kernel), true);
    Op op;
    op.what = "rows_digest";
    uint64_t seed = e->rng() | 1;
    op.run = [=] {
      kvs_kernels::launch_rows_digest(
          [&](unsigned grid, unsigned threads, auto kernel, auto... args) {
            kvs_emu::set_schedule_seed(seed);
            checked(grid, threads, kernel, args...);
            return true;
          },
          units, n, out, max_blocks);
    };
    e->enqueue(q.s, std::move(op));
  });
}

cudaError_t kvs_launch_translate(const int64_t *map, kvs_table_dims dims, const int64_t *locs,
                                 uint64_t n, int64_t *out, kvs_batch_fault *fault,
                                 uint32_t max_blocks, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return launch(stream, "translate",
                {{map, (dims.full_token + 1) * kRow, "the table"},
                 {locs, n * kRow, "the locs"},
                 {out, n * kRow, "the output"},
                 {fault, sizeof *fault, "the fault record"}},
                [&](QueuedLaunch q) {
                  kvs_kernels::launch_translate(q, map, dims, locs, n, out, fault, max_blocks);
                });
}

cudaError_t kvs_launch_state_locs(kvs_table_dims dims, const int64_t *slots, uint64_t n,
                                  int64_t *out_csa, int64_t *out_hca, kvs_batch_fault *fault,
                                  uint32_t max_blocks, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  std::vector<Range> ranges = {{slots, n * kRow, "the slots"},
                               {fault, sizeof *fault, "the fault record"}};
  if (out_csa != nullptr) ranges.push_back({out_csa, n * kRow, "the ratio-4 output"});
  if (out_hca != nullptr) ranges.push_back({out_hca, n * kRow, "the ratio-128 output"});
  return launch(stream, "state_locs", ranges, [&](QueuedLaunch q) {
    kvs_kernels::launch_state_locs(q, dims, slots, n, out_csa, out_hca, fault, max_blocks);
  });
}

cudaError_t kvs_launch_ring_ctx(const int64_t *map, kvs_table_dims dims, kvs_block_tables tables,
                                const int64_t *positions, uint64_t n_req, const uint64_t *count,
                                int64_t *own, int64_t *prev, int64_t *ring, kvs_batch_fault *fault,
                                uint32_t max_blocks, cudaStream_t stream) {
  if (n_req == 0) return cudaSuccess;
  std::vector<Range> ranges = {
      {map, (dims.full_token + 1) * kRow, "the table"},
      {tables.pages, n_req * tables.stride * sizeof(int32_t), "the block tables"},
      {positions, n_req * kRow, "the positions"},
      {own, n_req * kRow, "the own slots"},
      {prev, n_req * kRow, "the previous slots"},
      {ring, n_req * dims.page * kRow, "the ring rows"},
      {fault, sizeof *fault, "the fault record"}};
  add_count(ranges, count, sizeof *count);
  return launch(stream, "ring_ctx", ranges, [&](QueuedLaunch q) {
    kvs_kernels::launch_ring_ctx(q, map, dims, tables, positions, n_req, count, own, prev, ring,
                                 fault, max_blocks);
  });
}

cudaError_t kvs_launch_batch_state_locs(kvs_state_placement placement, const int64_t *own,
                                        const int64_t *slots, const int64_t *positions, uint64_t n,
                                        const uint64_t *count, int64_t *out_csa, int64_t *out_hca,
                                        kvs_batch_fault *fault, uint32_t max_blocks,
                                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool csa = out_csa != nullptr, hca = out_hca != nullptr;
  std::vector<Range> ranges = {{positions, n * kRow, "the positions"},
                               {fault, sizeof *fault, "the fault record"}};
  if (kvs_kernels::batch_state_reads_own(placement, csa, hca)) {
    ranges.push_back({own, n * kRow, "the window slots"});
  }
  if (kvs_kernels::batch_state_reads_slots(placement, csa, hca)) {
    ranges.push_back({slots, n * kRow, "the request slots"});
  }
  if (csa) ranges.push_back({out_csa, n * kRow, "the ratio-4 output"});
  if (hca) ranges.push_back({out_hca, n * kRow, "the ratio-128 output"});
  add_count(ranges, count, sizeof *count);
  return launch(stream, "batch_state_locs", ranges, [&](QueuedLaunch q) {
    kvs_kernels::launch_batch_state_locs(q, placement, own, slots, positions, n, count, out_csa,
                                         out_hca, fault, max_blocks);
  });
}
