// Issue 33's engine cases on a real GPU (tools/device-check.sh runs them;
// they skip where CUDA sees none), the flows of tests/shard/engine_flows.h
// that node_capture_standin_test and node_standin_test run on the stand-in:
// a forward captured as a CUDA graph on the engine's stream reading the
// engine's fixed result buffers across replays; an engine on stream 0 (the
// legacy default stream, torch's default); the host tier's spill and fetch
// at a 100 GiB carve, whose ratio-4 layer stride is past the device's
// largest 2D pitch (skipped, saying what the device has, below 102 GiB free).
#include <gtest/gtest.h>

#include "tests/backends/cuda/gpu_gate_runtime.h"
#include "tests/shard/engine_flows.h"
#include "tests/shard/ranks.h"

TEST(NodeEngineGpu, an_engine_graph_replayed_after_each_step_reads_that_steps_results) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
  kvs_test::run_ranks(1, 60000,
                      [](int, kvs_comm_t comm) { kvs_test::results_in_an_engine_graph(comm, 64); });
}

TEST(NodeEngineGpu, an_engine_on_the_legacy_stream_reads_each_steps_results) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
  kvs_test::run_ranks(
      1, 60000, [](int, kvs_comm_t comm) { kvs_test::results_on_the_legacy_stream(comm, 64); });
}

TEST(NodeEngineGpu, host_rows_go_to_the_host_tier_and_back_on_the_legacy_stream) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
  kvs_test::run_ranks(1, 60000, [](int, kvs_comm_t comm) {
    kvs_test::host_rows_on_engine_stream(comm, 1, /*legacy=*/true);
  });
}

TEST(NodeEngineGpu, host_rows_round_trip_at_a_100_gib_carve_past_the_largest_pitch) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
  kvs_test::run_ranks(
      1, 120000, [](int, kvs_comm_t comm) { kvs_test::host_rows_at_carve(comm, 100ull << 30); });
}
