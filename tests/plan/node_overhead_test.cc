// What a node allocates on its GPU beside its carve, and NCCL's buffers,
// priced as plan/node_overhead.h says: the figures of a DSV4 node, the
// estimate's terms, and the budget a plan then gets on the bundled H200.
#include "plan/node_overhead.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "plan/node_setup.h"
#include "shard/step_message.h"
#include "tests/topology/helpers.h"

namespace {

constexpr uint64_t MiB = 1ull << 20;

// A DSV4 node at kvsim's and the serving defaults: 64 rows a step, 1 Mi
// tokens of history, P = 128, the step message of the capacity the shard
// sizes for an 80 GiB fp8 pool's window (14,388 entries), 65 agreement
// words (the node's error message), over NCCL.
kvs_node_overhead_request dsv4_node() {
  kvs_node_overhead_request r{};
  r.max_batch = 64;
  r.max_seq_len = 1ull << 20;
  r.page = 128;
  r.cuda_tables = true;
  r.device_comm = true;
  r.message_bytes = kvs_step_message_bytes(14388);
  r.agree_words = 65;
  r.nccl = nullptr;
  return r;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(NcclEstimate, kvshards_two_channels_on_an_nvswitch_node) {
  const kvs_nccl_estimate e = KVS_NCCL_ESTIMATE_INIT;
  EXPECT_EQ(e.channels, 2u);
  EXPECT_EQ(e.ll_bytes, 8u * 512 * 8 * 16) << "NCCL's DEFAULT_LL_BUFFSIZE";
  EXPECT_EQ(e.ll128_bytes, 120u * 640 * 8 * 8) << "DEFAULT_LL128_BUFFSIZE";
  EXPECT_EQ(e.simple_bytes, 4u * MiB) << "NCCL_BUFFSIZE's documented default";
  uint64_t bytes = 0;
  kvs_error err;
  ASSERT_EQ(kvs_nccl_buffer_estimate(&e, &bytes, &err), KVS_OK) << err.message;
  // Two channels of one connection (9,633,792 B of LL, LL128 and Simple),
  // and NVLS on two channels: 2 buffers x 8 heads x 8 steps x 128 KiB.
  EXPECT_EQ(bytes, 2u * 9633792 + 2u * 2 * 8 * 8 * 131072);
  EXPECT_EQ(bytes, 52822016u);
}

TEST(NcclEstimate, every_channel_and_peer_adds_its_buffers) {
  kvs_nccl_estimate e = KVS_NCCL_ESTIMATE_INIT;
  uint64_t bytes = 0;
  // What NCCL connects without kvshard's cap: 32 ring channels, say, no NVLS.
  e.channels = 32;
  e.nvls_channels = 0;
  ASSERT_EQ(kvs_nccl_buffer_estimate(&e, &bytes, nullptr), KVS_OK);
  EXPECT_EQ(bytes, 308281344u) << "294 MiB: why kvshard caps its communicator";
  // Across nodes the allreduce's tree adds up to three peers a channel.
  e.channels = 2;
  e.tree_peers = 3;
  ASSERT_EQ(kvs_nccl_buffer_estimate(&e, &bytes, nullptr), KVS_OK);
  EXPECT_EQ(bytes, 2u * 4 * 9633792);
  // NCCL_BUFFSIZE=1 MiB shrinks the Simple buffers.
  e.tree_peers = 0;
  e.simple_bytes = MiB;
  ASSERT_EQ(kvs_nccl_buffer_estimate(&e, &bytes, nullptr), KVS_OK);
  EXPECT_EQ(bytes, 2u * (524288 + 4915200 + MiB));
  e.ll_bytes = ~0ull;
  uint64_t untouched = 7;
  kvs_error err;
  EXPECT_EQ(kvs_nccl_buffer_estimate(&e, &untouched, &err), KVS_ERR_OVERFLOW);
  EXPECT_EQ(untouched, 7u);
}

TEST(NodeOverhead, a_dsv4_node_over_nccl) {
  kvs_node_overhead_request r = dsv4_node();
  kvs_node_overhead o{};
  kvs_error err;
  ASSERT_EQ(kvs_node_overhead_compute(&r, &o, &err), KVS_OK) << err.message;
  // Table: 64 rows x 8,192 int32 blocks, 64 x 6 words, a 128-slot ring
  // context per row, and a transfer's batch of 256 rows digests (a
  // 24-byte unit and an 8-byte digest each).
  EXPECT_EQ(o.table_bytes, 64u * 8192 * 4 + 64u * 6 * 8 + 64u * 128 * 8 + 256u * 32);
  EXPECT_EQ(o.table_bytes, 2173952u);
  // Step, two parities: the batch (8 + 64 x 24) and the results (64 x 132
  // words); no message copy on a device communicator; the digest word.
  EXPECT_EQ(o.step_bytes, 2u * (8 + 64 * 24 + 64 * 132 * 8) + 8);
  EXPECT_EQ(o.step_bytes, 138264u);
  // Communicator: two 230,256-byte messages, 10 check words, the barrier
  // word, 65 agreement words.
  EXPECT_EQ(r.message_bytes, 48u + 16 * 14388);
  EXPECT_EQ(o.comm_bytes, 2u * 230256 + (10 + 1 + 65) * 8);
  EXPECT_EQ(o.comm_bytes, 461120u);
  EXPECT_EQ(o.device_bytes, 2773336u) << "2.6 MiB beside the carve";
  EXPECT_EQ(o.nccl_bytes, 52822016u);
  EXPECT_EQ(o.total_bytes, 55595352u) << "53.0 MiB off each GPU";
  // Pinned: the block-table and word staging, both parities' batches and
  // the digest word, the communicator's twins, and the tables' check
  // download buffer (two 512 KiB halves) and journal staging (4,096
  // entries of 16 bytes).
  EXPECT_EQ(o.pinned_bytes, (64u * 8192 * 4 + 64u * 16) + 256u * 32 + (2u * (8 + 64 * 24) + 8) +
                                461120u + (1u << 20) + 4096u * 16);
}

TEST(NodeOverhead, a_host_communicator_copies_its_message_and_nccl_is_not_there) {
  kvs_node_overhead_request r = dsv4_node();
  r.device_comm = false;
  kvs_node_overhead o{};
  ASSERT_EQ(kvs_node_overhead_compute(&r, &o, nullptr), KVS_OK);
  EXPECT_EQ(o.step_bytes, 138264u + 2 * 230256) << "each parity stages the message on the device";
  EXPECT_EQ(o.comm_bytes, 0u);
  EXPECT_EQ(o.nccl_bytes, 0u);
  EXPECT_EQ(o.total_bytes, 2173952u + 138264u + 2 * 230256);
  // Host tables over a host communicator: nothing on a GPU.
  r.cuda_tables = false;
  ASSERT_EQ(kvs_node_overhead_compute(&r, &o, nullptr), KVS_OK);
  EXPECT_EQ(o.total_bytes, 0u);
  EXPECT_EQ(o.pinned_bytes, 0u);
  // A caller's estimate replaces the default.
  kvs_nccl_estimate none = KVS_NCCL_ESTIMATE_INIT;
  none.channels = 0;
  none.nvls_channels = 0;
  r = dsv4_node();
  r.nccl = &none;
  ASSERT_EQ(kvs_node_overhead_compute(&r, &o, nullptr), KVS_OK);
  EXPECT_EQ(o.nccl_bytes, 0u);
  EXPECT_EQ(o.total_bytes, o.device_bytes);
}

TEST(NodeOverhead, a_zero_size_is_refused_naming_the_field) {
  kvs_node_overhead out{};
  out.total_bytes = 99;
  kvs_error err;
  for (const char *field : {"max_batch", "max_seq_len", "page"}) {
    kvs_node_overhead_request r = dsv4_node();
    if (std::string(field) == "max_batch") r.max_batch = 0;
    if (std::string(field) == "max_seq_len") r.max_seq_len = 0;
    if (std::string(field) == "page") r.page = 0;
    EXPECT_EQ(kvs_node_overhead_compute(&r, &out, &err), KVS_ERR_INVALID_ARGUMENT) << field;
    EXPECT_TRUE(contains(err.message, std::string("request.") + field + " is 0")) << err.message;
    EXPECT_EQ(out.total_bytes, 99u) << "written only on success";
  }
  kvs_node_overhead_request huge = dsv4_node();
  huge.max_batch = SIZE_MAX;
  EXPECT_EQ(kvs_node_overhead_compute(&huge, &out, &err), KVS_ERR_OVERFLOW);
  EXPECT_EQ(out.total_bytes, 99u);
}

// kvs_node_overhead_reserve, for a caller that adds the buffers on top of
// its own reserve (kvplan and the node check that the reserve holds them
// instead, below): the bundled H200's nominal memory (the 143,771 MiB its
// driver reports) x 0.9, less the 512 MiB reserve and the DSV4 node's
// 55,587,160 bytes.
TEST(NodeOverhead, the_reserve_carries_it_into_every_gpus_budget) {
  kvs_node_overhead_request r = dsv4_node();
  kvs_node_overhead o{};
  ASSERT_EQ(kvs_node_overhead_compute(&r, &o, nullptr), KVS_OK);
  kvs_budget_request plain = KVS_BUDGET_REQUEST_INIT;
  kvs_budget_request priced = KVS_BUDGET_REQUEST_INIT;
  kvs_error err;
  ASSERT_EQ(kvs_node_overhead_reserve(plain.reserve_bytes, &o, &priced.reserve_bytes, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(priced.reserve_bytes, 512 * MiB + 55595352u);
  kvs_topology_t t = nullptr;
  ASSERT_EQ(kvs_host_topology_open("bundled", &t, nullptr, 0, &err), KVS_OK) << err.message;
  kvs_test::Topology topology(t);
  const std::vector<kvs_gpu_info> gpus = kvs_test::gpus_of(t);
  kvs_memory_budget a{}, b{};
  ASSERT_EQ(kvs_node_gpu_budget(&plain, gpus.data(), gpus.size(), 0, &a, &err), KVS_OK)
      << err.message;
  ASSERT_EQ(kvs_node_gpu_budget(&priced, gpus.data(), gpus.size(), 0, &b, &err), KVS_OK)
      << err.message;
  const uint64_t share = 143771 * MiB * 9 / 10;  // floor(150754820096 x 0.9)
  EXPECT_EQ(share, 135679338086u);
  EXPECT_EQ(a.budget_bytes, share - 512 * MiB);
  EXPECT_EQ(b.budget_bytes, share - 512 * MiB - 55595352u);
  EXPECT_EQ(b.reserve_bytes, 512 * MiB + 55595352u) << "the plan's reserve says so";
  uint64_t sum = 0;
  kvs_node_overhead big{};
  big.total_bytes = ~0ull;
  EXPECT_EQ(kvs_node_overhead_reserve(1, &big, &sum, &err), KVS_ERR_OVERFLOW);
}

// The check the node and kvplan make: a budget from GPU memory must hold
// the buffers in its reserve; the refusal names both numbers and the
// flag; exactly them passes; an explicit budget is exempt.
TEST(NodeOverhead, the_reserve_must_hold_it) {
  kvs_node_overhead_request r = dsv4_node();
  kvs_node_overhead o{};
  ASSERT_EQ(kvs_node_overhead_compute(&r, &o, nullptr), KVS_OK);
  kvs_memory_budget b{};
  b.source = KVS_BUDGET_NOMINAL;
  b.reserve_bytes = 512 * MiB;
  kvs_error err;
  EXPECT_EQ(kvs_node_overhead_check(&b, &o, "--reserve", &err), KVS_OK) << "the default holds it";
  b.reserve_bytes = o.total_bytes;
  EXPECT_EQ(kvs_node_overhead_check(&b, &o, "--reserve", &err), KVS_OK) << "exactly them";
  for (kvs_budget_source source : {KVS_BUDGET_NOMINAL, KVS_BUDGET_MEASURED}) {
    b.source = source;
    b.reserve_bytes = o.total_bytes - 1;
    EXPECT_EQ(kvs_node_overhead_check(&b, &o, "--reserve", &err), KVS_ERR_BUDGET_TOO_SMALL);
    EXPECT_TRUE(contains(err.message,
                         "the node's buffers need 55595352 bytes beside its carve but --reserve "
                         "is 55595351; give --reserve of at least 55595352 (53.0 MiB: the "
                         "tables' batch buffers 2173952, the step buffers 138264, the "
                         "communicator's 461120, NCCL's estimated 52822016)"))
        << err.message;
  }
  b.reserve_bytes = 0;
  EXPECT_EQ(kvs_node_overhead_check(&b, &o, nullptr, &err), KVS_ERR_BUDGET_TOO_SMALL);
  EXPECT_TRUE(contains(err.message, "but the reserve is 0; give the reserve of at least"))
      << err.message;
  // An explicit budget is the carve's own bytes: nothing taken off memory,
  // nothing asked of it.
  b.source = KVS_BUDGET_EXPLICIT;
  EXPECT_EQ(kvs_node_overhead_check(&b, &o, "--reserve", &err), KVS_OK);
  // Nothing on a GPU: nothing to hold.
  kvs_node_overhead none{};
  b.source = KVS_BUDGET_MEASURED;
  EXPECT_EQ(kvs_node_overhead_check(&b, &none, "--reserve", &err), KVS_OK);
}
