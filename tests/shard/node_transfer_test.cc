// Prefill/decode: a request's rows from a prefill node to a decode node of
// another layout, as threads over loopback communicators with host twins
// (transfer_scenario.h; the MPI run is pd_mpi_test, device tables on the
// stand-in node_transfer_standin_test).
#include <gtest/gtest.h>

#include "tests/shard/transfer_scenario.h"

namespace {

using namespace kvs_pd_test;

TEST(NodeTransfer, prefill_tp1_pp4_to_decode_tp4_moves_every_pool_and_reuses_prefixes) {
  Scenario sc;
  sc.pd = {{1, 4}, {4, 1}};
  Totals tot;
  scenario(sc, &tot);
  EXPECT_EQ(tot.agreed.load(), 4u * sc.requests);
  EXPECT_GT(tot.reused.load(), 0u) << "some conversation turns reuse the decode side's prefix";
  std::printf("tp1xpp4 -> tp4: %d requests, %llu bytes moved, %llu reused, %llu units checked\n",
              sc.requests, (unsigned long long)tot.moved.load(),
              (unsigned long long)tot.reused.load(), (unsigned long long)tot.checked.load());
}

TEST(NodeTransfer, prefill_tp2_to_decode_tp2_and_rings_per_page) {
  Scenario sc;
  sc.pd = {{2, 1}, {2, 1}};
  sc.rings = KVS_STATE_RINGS_PER_PAGE;
  sc.requests = 12;
  Totals tot;
  scenario(sc, &tot);
  EXPECT_EQ(tot.agreed.load(), 2u * sc.requests);
}

TEST(NodeTransfer, the_decode_side_asks_for_the_windows_of_the_tail_it_will_keep) {
  Scenario sc;
  sc.pd = {{1, 2}, {2, 1}};
  sc.window_tokens = 3 * 128;
  sc.requests = 24;
  Totals tot;
  scenario(sc, &tot);
  EXPECT_EQ(tot.agreed.load(), 2u * sc.requests);
  EXPECT_GT(tot.reused.load(), 0u) << "hits end on pages three windows back";
}

TEST(NodeTransfer, fp8_pages_move_in_runs_of_consecutive_pages) {
  Scenario sc;
  sc.pd = {{1, 2}, {2, 1}};
  sc.fp8 = true;
  sc.ascending = true;
  sc.requests = 10;
  Totals tot;
  scenario(sc, &tot);
  EXPECT_EQ(tot.agreed.load(), 2u * sc.requests);
}

TEST(NodeTransfer, a_wrong_page_in_one_pool_on_one_rank_is_named_and_the_request_refused) {
  Scenario sc;
  sc.pd = {{1, 2}, {2, 1}};
  sc.requests = 6;
  sc.plant_request = 3;
  Totals tot;
  scenario(sc, &tot);
  EXPECT_EQ(tot.refused.load(), 2u);
  EXPECT_EQ(tot.agreed.load(), 2u * (sc.requests - 1));
  EXPECT_NE(tot.planted_message.find("compressed_4"), std::string::npos) << tot.planted_message;
  EXPECT_NE(tot.planted_message.find("positions"), std::string::npos) << tot.planted_message;
  EXPECT_NE(tot.planted_message.find("decode rank 1"), std::string::npos) << tot.planted_message;
}

TEST(NodeTransfer, a_silent_prefill_rank_is_refused_within_the_deadline) {
  Scenario sc;
  sc.pd = {{1, 2}, {2, 1}};
  sc.requests = 3;
  sc.silent_request = 1;
  Totals tot;
  scenario(sc, &tot);
  EXPECT_EQ(tot.refused.load(), 2u);
  EXPECT_NE(tot.planted_message.find("timed out"), std::string::npos) << tot.planted_message;
}

}  // namespace

namespace {

// Every refusal names what is wrong and changes nothing.
TEST(NodeTransfer, bad_requests_and_arguments_are_refused_by_name) {
  kvs_geometry g = small_model();
  std::vector<uint64_t> budgets(8, 12ull << 20);
  kvs_node_options o = options_for(&g, &budgets, {1, 1}, true, KVS_STATE_RINGS_PER_REQUEST);
  kvs_comm_t self = nullptr, link = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&self, &err), KVS_OK);
  kvs_comm_loopback_group_t group = nullptr;  // a link of two; rank 1 never joins
  ASSERT_EQ(kvs_comm_loopback_group_create(2, &group, &err), KVS_OK);
  ASSERT_EQ(kvs_comm_loopback_create(group, 0, 1000, &link, &err), KVS_OK);
  kvs_node_t node = nullptr;
  ASSERT_EQ(kvs_node_create(self, &o, &node, &err), KVS_OK) << err.message;
  const int64_t pages[3] = {4, 5, 6};
  size_t n = 0;
  auto rows_refused = [&](const int64_t *p, size_t np, uint64_t tokens, uint64_t reuse,
                          const char *words) {
    kvs_error e;
    kvs_node_transfer rt{sizeof rt, 1, p, np, tokens, reuse, nullptr, 0, 0};
    EXPECT_NE(kvs_node_request_rows(node, &rt, nullptr, 0, &n, &e), KVS_OK);
    EXPECT_NE(std::string(e.message).find(words), std::string::npos) << e.message;
  };
  rows_refused(pages, 3, 0, 0, "tokens is 0");
  rows_refused(pages, 3, 300, 100, "multiple of the page");
  rows_refused(pages, 3, 300, 300, "below its 300 tokens");
  rows_refused(pages, 2, 300, 0, "its block table has 2");
  rows_refused(nullptr, 0, 300, 0, "its block table has 0");
  const int64_t twice[3] = {4, 4, 6};
  rows_refused(twice, 3, 300, 0, "full page 4 is both block 0 and block 1");
  const int64_t past[3] = {4, 5, 1 << 30};
  rows_refused(past, 3, 300, 0, "not one of the engine's");
  rows_refused(pages, 3, 300, 0, "not bound to a window page");
  int64_t slot = -1;
  ASSERT_EQ(kvs_node_admit(node, 1, &slot, &err), KVS_OK);
  ASSERT_EQ(kvs_node_bind_pages(node, 1, pages + 1, 2, &err), KVS_OK) << err.message;
  rows_refused(pages, 3, 128, 0, "not bound to a window page");  // its one page, 4
  kvs_node_transfer ok{sizeof ok, 1, pages, 3, 300, 0, nullptr, 0, 0};
  EXPECT_EQ(kvs_node_request_rows(node, &ok, nullptr, 0, &n, &err), KVS_OK) << err.message;
  EXPECT_GT(n, 0u);

  int peers[2] = {0, 0};
  kvs_node_transfer t{sizeof t, 1, pages, 3, 300, 0, peers, 1};
  kvs_node_transfer_report rep{};
  rep.size = sizeof rep;
  auto send_refused = [&](const kvs_node_transfer &tt, kvs_node_transfer_report *r,
                          const char *words) {
    kvs_error e;
    EXPECT_NE(kvs_node_send_request(node, link, &tt, r, &e), KVS_OK);
    EXPECT_NE(std::string(e.message).find(words), std::string::npos) << e.message;
    EXPECT_NE(kvs_node_receive_request(node, link, &tt, r, &e), KVS_OK);
    EXPECT_NE(std::string(e.message).find(words), std::string::npos) << e.message;
  };
  send_refused(t, &rep, "this rank is 0");  // a peer of the link that is this rank
  peers[0] = 3;
  send_refused(t, &rep, "the link's ranks are 0..1");
  kvs_node_transfer none = t;
  none.peers = nullptr;
  send_refused(none, &rep, "no peers");
  kvs_node_transfer small = t;
  small.size = 8;
  send_refused(small, &rep, "transfer.size is 8");
  kvs_node_transfer_report bad_report{};
  bad_report.size = 3;
  peers[0] = 1;
  send_refused(t, &bad_report, "report.size is 3");
  peers[1] = 1;
  kvs_node_transfer dup = t;
  dup.n_peers = 2;
  send_refused(dup, &rep, "link rank 1 is peer 0 and 1");
  kvs_error e;
  EXPECT_NE(kvs_node_send_request(node, nullptr, &t, &rep, &e), KVS_OK);
  EXPECT_NE(std::string(e.message).find("link is NULL"), std::string::npos) << e.message;

  // The leader's admission: all or nothing.
  kvs_node_capacity c{};
  c.size = sizeof c;
  ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK);
  const uint64_t running = c.running;
  for (uint64_t r = 2; c.running < c.max_running; r++) {
    ASSERT_EQ(kvs_node_admit(node, r, &slot, &err), KVS_OK);
    ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK);
  }
  const int64_t more[1] = {9};
  kvs_node_capacity before = c;
  kvs_node_transfer other{sizeof other, 77, more, 1, 100, 0, nullptr, 0, 0};
  EXPECT_EQ(kvs_node_import_admit(node, &other, &slot, &e), KVS_ERR_EXHAUSTED);
  EXPECT_NE(std::string(e.message).find("needs a slot"), std::string::npos) << e.message;
  ASSERT_EQ(kvs_node_capacity_of(node, &c, &err), KVS_OK);
  EXPECT_EQ(c.free_window_pages, before.free_window_pages) << "nothing bound";
  EXPECT_GT(c.running, running);
  kvs_node_destroy(node);
  kvs_comm_destroy(link);
  kvs_comm_loopback_group_destroy(group);
  kvs_comm_destroy(self);
}

}  // namespace
