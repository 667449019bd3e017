// A node from kvplan's flags: the same pool as the options they name, and
// every refusal in kvplan's words before anything collective.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvshard.h"

namespace {

struct Made {
  kvs_status status;
  std::string message;
  uint64_t num_pages = 0, window_pages = 0, page = 0, max_running = 0;
  kvs_status prefix = KVS_ERR_UNSUPPORTED; /* kvs_node_prefix_stats on the node */
  uint64_t host_slots = 0, host_page_bytes = 0;
};

Made make(const std::vector<const char *> &flags) {
  kvs_comm_t comm = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_node_t node = nullptr;
  Made m;
  m.status = kvs_node_create_flags(comm, flags.data(), flags.size(), &node, &err);
  m.message = m.status == KVS_OK ? "" : err.message;
  if (node != nullptr) {
    m.num_pages = kvs_node_num_pages(node);
    m.window_pages = kvs_node_window_pages(node);
    m.page = kvs_node_page(node);
    m.max_running = kvs_node_max_running(node);
    kvs_node_prefix_counts counts = {sizeof counts, 0, 0, 0, 0, 0, 0, 0, 0};
    m.prefix = kvs_node_prefix_stats(node, &counts, nullptr);
    m.host_slots = counts.host_slots;
    m.host_page_bytes = counts.host_page_bytes;
  }
  kvs_node_destroy(node);
  kvs_comm_destroy(comm);
  return m;
}

}  // namespace

TEST(NodeFlags, the_flags_size_the_pool_their_options_size) {
  Made f = make({"--topology=bundled", "--device=cpu", "--budget=2GiB", "--max-running=4",
                 "--max-seq-len=65536", "--page=256", "--no-bind-numa", "--tp=1", "--pp=1"});
  ASSERT_EQ(f.status, KVS_OK) << f.message;

  kvs_geometry g;
  kvs_error err;
  ASSERT_EQ(kvs_geometry_builtin("dsv4-flash", &g, &err), KVS_OK);
  kvs_node_options o;
  kvs_node_options_init(&o);
  o.geometry = &g;
  o.topology = "bundled";
  o.device = KVS_NODE_DEVICE_CPU;
  o.budget_bytes = 2ull << 30;
  o.max_running = 4;
  o.max_seq_len = 65536;
  o.page = 256;
  o.bind_numa = false;
  o.tp = 1;
  o.pp = 1;
  kvs_comm_t comm = nullptr;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_node_t node = nullptr;
  ASSERT_EQ(kvs_node_create(comm, &o, &node, &err), KVS_OK) << err.message;
  EXPECT_EQ(f.num_pages, kvs_node_num_pages(node));
  EXPECT_EQ(f.window_pages, kvs_node_window_pages(node));
  EXPECT_EQ(f.page, 256u);
  EXPECT_EQ(f.max_running, 4u);
  EXPECT_GT(f.num_pages, 0u);
  kvs_node_destroy(node);
  kvs_comm_destroy(comm);

  // fp8 rows hold more pages in the same bytes.
  Made fp8 = make({"--topology=bundled", "--device=cpu", "--budget=2GiB", "--max-running=4",
                   "--max-seq-len=65536", "--page=256", "--no-bind-numa", "--tp=1", "--pp=1",
                   "--kv-dtype=fp8"});
  ASSERT_EQ(fp8.status, KVS_OK) << fp8.message;
  EXPECT_GT(fp8.num_pages, f.num_pages);
}

TEST(NodeFlags, refusals_name_the_flag_in_kvplans_words) {
  const std::vector<std::pair<std::vector<const char *>, std::string>> cases = {
      {{"--page=0"}, "--page needs a page of 1 to 1048576 tokens, got '0'"},
      {{"--max-running=0"}, "--max-running must be at least 1, got 0"},
      {{"--budget=0"}, "--budget"},
      {{"--budget=12XB"}, "--budget"},
      {{"--kv-dtype=fp4"}, "--kv-dtype must be bf16 or fp8, got 'fp4'"},
      {{"--page=256", "--page=256"}, "--page is given twice; give it once"},
      {{"--cuda-graphs", "--no-cuda-graphs"}, "--cuda-graphs is given twice; give it once"},
      {{"--budgte=1GiB"}, "unknown flag '--budgte=1GiB'; did you mean --budget?"},
      {{"--engine=sglang"}, "--engine is kvplan's, not a node's"},
      {{"--weights-total=1TB"}, "--weights-total is kvplan's, not a node's"},
      {{"--budget"}, "--budget needs a value: --budget=VALUE"},
      {{"--radix=1"}, "--radix is a switch and takes no value, got '1'"},
      {{"page=64"}, "'page=64' is not a flag: flags read --name=value"},
      {{"--"}, "'--' is not a flag"},
      {{"--budget=1GiB", "--budget-per-gpu=1GiB,1GiB"},
       "give --budget or --budget-per-gpu, not both"},
      {{"--budget=1GiB", "--mem-fraction=0.5"}, "--mem-fraction applies to measured memory"},
      {{"--mem-fraction=1.5"}, "--mem-fraction needs a share of memory in (0, 1], got '1.5'"},
      {{"--device=tpu"}, "--device must be cpu, cuda or auto, got 'tpu'"},
      {{"--step-backend=gloo"}, "--step-backend names the node's own communicator"},
      {{"--model=dsv4-flash", "--layers=4"}, "describe the geometry twice"},
      {{"--stream=-1"}, "--stream"},
  };
  for (const auto &c : cases) {
    Made m = make(c.first);
    EXPECT_NE(m.status, KVS_OK) << c.second;
    EXPECT_NE(m.message.find(c.second), std::string::npos)
        << "got: " << m.message << "\nwant: " << c.second;
  }
  kvs_comm_t comm = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  kvs_node_t node = nullptr;
  EXPECT_EQ(kvs_node_create_flags(comm, nullptr, 1, &node, &err), KVS_ERR_INVALID_ARGUMENT);
  const char *null_flag[] = {nullptr};
  EXPECT_EQ(kvs_node_create_flags(comm, null_flag, 1, &node, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(node, nullptr);
  kvs_comm_destroy(comm);
}

TEST(NodeFlags, the_help_lists_every_flag_the_parser_takes) {
  std::string help = kvs_node_flags_help();
  for (const char *name :
       {"--model", "--page", "--kv-dtype", "--topology", "--budget-per-gpu", "--mem-fraction",
        "--device", "--stream", "--check-every", "--no-cuda-graphs", "--step-capacity", "--host",
        "--prefix-cache", "--host-cache"}) {
    EXPECT_NE(help.find(name), std::string::npos) << name;
  }
}

TEST(NodeFlags, prefix_cache_turns_the_nodes_prefix_cache_on) {
  Made off = make({"--topology=bundled", "--device=cpu", "--budget=2GiB", "--max-running=4",
                   "--no-bind-numa", "--tp=1", "--pp=1"});
  ASSERT_EQ(off.status, KVS_OK) << off.message;
  EXPECT_EQ(off.prefix, KVS_ERR_UNSUPPORTED);
  Made on = make({"--topology=bundled", "--device=cpu", "--budget=2GiB", "--max-running=4",
                  "--no-bind-numa", "--tp=1", "--pp=1", "--prefix-cache"});
  ASSERT_EQ(on.status, KVS_OK) << on.message;
  EXPECT_EQ(on.prefix, KVS_OK);
  // Its window pages also keep tail states (the ratio-4 ring rows of their
  // last four positions): the same budget holds fewer pages.
  EXPECT_LT(on.num_pages, off.num_pages);
  Made twice = make({"--topology=bundled", "--prefix-cache", "--prefix-cache"});
  EXPECT_EQ(twice.status, KVS_ERR_PARSE);
  EXPECT_NE(twice.message.find("--prefix-cache is given twice"), std::string::npos)
      << twice.message;
}

TEST(NodeFlags, host_cache_gives_the_prefix_cache_a_host_tier_of_whole_pages) {
  std::vector<const char *> base = {
      "--topology=bundled", "--device=cpu", "--budget=2GiB", "--max-running=4",
      "--no-bind-numa",     "--tp=1",       "--pp=1"};
  auto with = [&](std::vector<const char *> more) {
    std::vector<const char *> flags = base;
    flags.insert(flags.end(), more.begin(), more.end());
    return make(flags);
  };
  Made off = with({"--prefix-cache"});
  ASSERT_EQ(off.status, KVS_OK) << off.message;
  EXPECT_EQ(off.host_slots, 0u);
  EXPECT_EQ(off.host_page_bytes, 0u);
  Made on = with({"--prefix-cache", "--host-cache=1GiB"});
  ASSERT_EQ(on.status, KVS_OK) << on.message;
  ASSERT_GT(on.host_page_bytes, 0u);
  EXPECT_EQ(on.host_slots, (uint64_t(1) << 30) / on.host_page_bytes);
  EXPECT_EQ(on.num_pages, off.num_pages);  // the tier is host memory: the GPU plan is the same
  Made zero = with({"--prefix-cache", "--host-cache=0"});
  EXPECT_EQ(zero.status, KVS_ERR_PARSE);
  EXPECT_NE(zero.message.find("--host-cache needs a size above 0, got '0'"), std::string::npos)
      << zero.message;
  Made alone = with({"--host-cache=1GiB"});
  EXPECT_EQ(alone.status, KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(alone.message.find("needs the prefix cache"), std::string::npos) << alone.message;
  Made tiny = with({"--prefix-cache", "--host-cache=1B"});
  EXPECT_EQ(tiny.status, KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(tiny.message.find("not one page"), std::string::npos) << tiny.message;
  Made twice = with({"--prefix-cache", "--host-cache=1GiB", "--host-cache=2GiB"});
  EXPECT_EQ(twice.status, KVS_ERR_PARSE);
}
