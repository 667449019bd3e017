// The host tier's rows on a real GPU (tools/device-check.sh runs it there;
// it skips where CUDA sees none): one rank's node with device tables and an
// engine stream spills two cached pages' compressed and indexer rows to
// pinned slots with cudaMemcpy2DAsync and fetches them back into two other
// pages, the engine writing and reading its rows asynchronously on its
// stream (tests/shard/host_rows_flow.h). The same flow runs on the CPU
// stand-in in node_standin_test.
#include <gtest/gtest.h>

#include "tests/backends/cuda/gpu_gate_runtime.h"
#include "tests/shard/engine_memory.h"
#include "tests/shard/ranks.h"

TEST(NodeHostRowsGpu, rows_go_to_pinned_slots_and_back_on_the_engine_stream) {
  KVS_NEED_GPU(kvs_gpu_gate::runtime());
  kvs_test::run_ranks(1, 60000,
                      [](int, kvs_comm_t comm) { kvs_test::host_rows_on_engine_stream(comm, 1); });
}
