// The host tier's rows on the host twin (the node's CPU tables): ranks as
// threads over loopback, each spilling its own page rows to its own slots
// and fetching them back into other pages (tests/shard/host_rows_flow.h),
// bf16 rows and fp8 pages (payloads then scales, each page padded: a page
// found at a wrong stride spills another page's bytes); a node that keeps
// the index only moves nothing; the table's tier calls refuse what they
// cannot do, changing nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shard/node.h"
#include "tests/shard/host_rows_flow.h"
#include "tests/shard/ranks.h"

namespace {

constexpr uint64_t MiB = 1ull << 20;

// The small model's node on the host twin with a 16 MiB host tier.
struct Small : kvs_test::SmallPrefixNode {
  explicit Small(int tp, kvs_kv_dtype dtype = KVS_KV_BF16)
      : SmallPrefixNode(tp, KVS_NODE_DEVICE_CPU, 16 * MiB, dtype) {}
};

// A one-rank node of the small model (index_only: its tier keeps the
// index alone), given to body, destroyed after.
void with_node(bool index_only, const std::function<void(kvs_node_t)> &body) {
  kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    Small s(1);
    s.o.index_only = index_only;
    kvs_node_t node = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
    body(node);
    kvs_node_destroy(node);
  });
}

kvs_test::NodeMemory host_memory() {
  kvs_test::NodeMemory m;
  m.write = [](void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); };
  m.read = [](void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); };
  m.sync = [] {};
  return m;
}

}  // namespace

TEST(NodeHostRows, each_rank_spills_its_own_rows_and_fetches_them_into_new_pages) {
  for (kvs_kv_dtype dtype : {KVS_KV_BF16, KVS_KV_FP8}) {
    for (int tp : {1, 2}) {
      SCOPED_TRACE(std::string(kvs_kv_dtype_name(dtype)) + " rows, tp " + std::to_string(tp));
      kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) {
        Small s(tp, dtype);
        kvs_node_t node = nullptr;
        kvs_error err;
        ASSERT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
        uint64_t slot_bytes = 0, slots = 0;
        ASSERT_NE(kvs_table_host_tier_slot(kvs_node_table(node), 0, &slot_bytes, &slots), nullptr);
        kvs_node_prefix_counts c{};
        c.size = sizeof c;
        ASSERT_EQ(kvs_node_prefix_stats(node, &c, &err), KVS_OK) << err.message;
        EXPECT_EQ(slots, c.host_slots) << "a slot of rows for every slot of the index";
        EXPECT_EQ(slot_bytes, kvs_table_host_slot_bytes(kvs_node_layout(node)));
        EXPECT_EQ(slot_bytes, kvs_deployment_rank_host_bytes(
                                  kvs_deployment(node), static_cast<size_t>(kvs_node_rank(node))))
            << "what the table holds is what the plan priced for the rank";
        // The machine runs 8 ranks of the plan (8 / tp replicas), each with
        // its own copy: a slot costs the machine 8 of this rank's.
        EXPECT_EQ(c.host_page_bytes, 8 * slot_bytes);
        EXPECT_EQ(c.host_slots, s.o.host_cache_bytes / c.host_page_bytes);
        // A slot is a page's rows as the views show them, padding excluded.
        size_t page_bytes = 0;
        for (const kvs_test::PageRows &r : kvs_test::page_rows(node, 0)) page_bytes += r.bytes;
        EXPECT_EQ(slot_bytes, page_bytes);
        kvs_test::host_rows_round_trip(node, host_memory());
        kvs_node_destroy(node);
      });
    }
  }
}

// The seal: rows changed in host memory between the spill and the fetch
// are refused on the rank that holds them, naming the slot and the page.
TEST(NodeHostRows, a_slot_changed_after_its_spill_is_refused_by_its_seal) {
  for (int tp : {1, 2}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) {
      Small s(tp, KVS_KV_FP8);
      kvs_node_t node = nullptr;
      kvs_error err;
      ASSERT_EQ(kvs_node_create(comm, &s.o, &node, &err), KVS_OK) << err.message;
      kvs_test::host_rows_round_trip(node, host_memory(), tp - 1);
      kvs_node_destroy(node);
    });
  }
}

TEST(NodeHostRows, an_index_only_tier_agrees_on_its_slots_and_moves_no_rows) {
  with_node(true, [](kvs_node_t node) {
    EXPECT_EQ(kvs_table_host_tier_slot(kvs_node_table(node), 0, nullptr, nullptr), nullptr);
    kvs_node_prefix_counts c{};
    c.size = sizeof c;
    kvs_error err;
    ASSERT_EQ(kvs_node_prefix_stats(node, &c, &err), KVS_OK) << err.message;
    EXPECT_GT(c.host_slots, 0u);
    kvs_table_row_stats t;
    kvs_table_row_stats_get(kvs_node_table(node), &t);
    EXPECT_EQ(t.bytes, 0u);
  });
}

TEST(NodeHostRows, the_table_refuses_a_second_tier_an_empty_one_and_a_foreign_layout) {
  with_node(false, [](kvs_node_t node) {
    kvs_table_t table = kvs_node_table(node);
    const kvs_device_layout *layout = kvs_node_layout(node);
    uint64_t slot_bytes = 0, slots = 0;
    const unsigned char *tier = kvs_table_host_tier_slot(table, 0, &slot_bytes, &slots);
    kvs_error err;
    EXPECT_EQ(kvs_table_host_tier(table, layout, 4, &err), KVS_ERR_CONFLICT);
    EXPECT_EQ(kvs_table_host_tier(nullptr, layout, 4, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(kvs_table_host_tier(table, nullptr, 4, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(kvs_table_host_tier_slot(table, 0, &slot_bytes, &slots), tier) << "unchanged";
  });
  with_node(true, [](kvs_node_t node) {
    kvs_table_t table = kvs_node_table(node);
    kvs_device_layout other = *kvs_node_layout(node);
    kvs_error err;
    EXPECT_EQ(kvs_table_host_tier(table, &other, 0, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.message).find("nothing to hold"), std::string::npos) << err.message;
    EXPECT_EQ(kvs_table_host_tier(table, &other, UINT64_MAX / 2, &err), KVS_ERR_INVALID_ARGUMENT);
    other.sizes.full_token += other.sizes.page;
    EXPECT_EQ(kvs_table_host_tier(table, &other, 4, &err), KVS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.message).find("is not the table's"), std::string::npos)
        << err.message;
    EXPECT_EQ(kvs_table_host_tier_slot(table, 0, nullptr, nullptr), nullptr) << "nothing taken";
    EXPECT_EQ(kvs_table_host_slot_bytes(nullptr), 0u);
  });
}
