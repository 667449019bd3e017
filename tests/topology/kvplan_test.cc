// kvplan end to end: the binary run on the 8-GPU topologies for tp 8,
// tp 4 x pp 2 and pp 8 (JSON checked key by key and against the library),
// the table, the SVG, the no-argument default, and every error's message
// and exit status.
#include <gtest/gtest.h>
#include <jansson.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/geometry.h"
#include "plan/device_layout.h"
#include "plan/node_setup.h"
#include "tests/backends/cuda/gpu_gate.h"
#include "shard/plan_overhead.h"
#include "tests/topology/helpers.h"
#include "plan/deployment.h"

using namespace kvs_test;

namespace {

constexpr uint64_t GiB = 1ull << 30;

struct RunResult {
  int status = -1;
  std::string out, err;
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::stringstream s(out);
    for (std::string line; std::getline(s, line);) v.push_back(line);
    return v;
  }
};

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The environment words a child runs with. live: the run discovers the
// live machine. Under AddressSanitizer such a child exits through hwloc
// unloading its plugins, after which a libpciaccess allocation shows as a
// leak in an unnamed module (see hwloc_pin.cc); those children run with
// lsan.supp's third-party frames suppressed (which needs the slow
// unwinder), leak checks still on, and the suite's own options (.bazelrc)
// kept after them. ASan.live_children_keep_leak_detection holds that.
std::string child_env(bool live) {
  std::string env;
#if defined(__SANITIZE_ADDRESS__)
  if (live) {
    const char *inherited = getenv("LSAN_OPTIONS");
    env = "LSAN_OPTIONS='suppressions=tests/tools/lsan.supp:fast_unwind_on_malloc=0";
    if (inherited != nullptr && *inherited != '\0') env += std::string(":") + inherited;
    env += "' ";
  }
#else
  (void)live;
#endif
  return env;
}

// Runs a program from the runfiles with args; stdout and stderr kept.
RunResult run_child(const std::string &program, const std::string &args, bool live) {
  RunResult run;
  std::string err_path = testing::TempDir() + "/kvplan.stderr";
  std::string cmd = child_env(live) + program + " " + args + " 2>" + err_path;
  FILE *p = popen(cmd.c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) run.out.append(buf, n);
  int status = pclose(p);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.err = slurp(err_path);
  return run;
}

// Runs tools/kvplan with args (live: see child_env).
RunResult kvplan(const std::string &args, bool live = false) {
  return run_child("tools/kvplan", args, live);
}

std::string topo(const char *name) { return "--topology " + data_path(name); }

struct JsonDeleter {
  void operator()(json_t *j) const { json_decref(j); }
};
using Json = std::unique_ptr<json_t, JsonDeleter>;

Json last_line_json(const RunResult &run) {
  std::vector<std::string> lines = run.lines();
  if (lines.empty()) return Json();
  json_error_t error;
  json_t *j = json_loads(lines.back().c_str(), 0, &error);
  EXPECT_NE(j, nullptr) << error.text << " in: " << lines.back();
  return Json(j);
}

std::set<std::string> keys(json_t *object) {
  std::set<std::string> out;
  const char *key;
  json_t *value;
  json_object_foreach(object, key, value) out.insert(key);
  return out;
}

uint64_t u64(json_t *object, const char *key) {
  json_t *v = json_object_get(object, key);
  EXPECT_TRUE(json_is_integer(v)) << key;
  return static_cast<uint64_t>(json_integer_value(v));
}

std::string str(json_t *object, const char *key) {
  json_t *v = json_object_get(object, key);
  EXPECT_TRUE(json_is_string(v)) << key;
  return json_is_string(v) ? json_string_value(v) : "";
}

// The request the node makes for kvplan's defaults (dsv4-flash, window
// floor 331 pages, swa 0.125, P 128, one scratch row, bf16 rows, rings per
// request: 64 running + the dummy slot).
kvs_plan_request default_request(size_t tp, size_t pp) {
  static kvs_geometry g;
  static kvs_row_widths w;
  kvs_geometry_builtin("dsv4-flash", &g, nullptr);
  w = kvs_row_widths_default(&g);
  w.state_rings = KVS_STATE_RINGS_PER_REQUEST;
  w.n_req_slots = 65;
  return kvs_plan_request{&g, &w, 0.125, 128, 331, 1, tp, pp, nullptr, nullptr};
}

// The node's plan for the same inputs, to compare the binary with.
Plan library_plan(const char *topology, size_t tp, size_t pp, uint64_t budget) {
  Topology t = load_xml(topology);
  std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
  std::vector<uint64_t> budgets(gpus.size(), budget);
  kvs_plan_request req = default_request(tp, pp);
  kvs_deployment_t plan = nullptr;
  kvs_error err;
  EXPECT_EQ(
      kvs_deployment_make(&req, gpus.data(), gpus.size(), budgets.data(), &plan, nullptr, &err),
      KVS_OK)
      << err.message;
  return Plan(plan);
}

const std::vector<std::string> kHgxBusIds = {"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0",
                                             "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0",
                                             "0000:d1:00.0", "0000:df:00.0"};

// The JSON of a plan: the keys exactly, each rank's fields, the sums, and
// equality with the library's plan.
void check_plan_json(const RunResult &run, size_t tp, size_t pp) {
  ASSERT_EQ(run.status, 0) << run.err;
  Json root = last_line_json(run);
  ASSERT_TRUE(root);
  EXPECT_EQ(keys(root.get()), (std::set<std::string>{"num_pages",
                                                     "full_token",
                                                     "n_win_pages",
                                                     "tp",
                                                     "pp",
                                                     "dp",
                                                     "ep",
                                                     "replicas",
                                                     "tokens_per_group",
                                                     "cluster_tokens",
                                                     "nodes",
                                                     "cross_node_tp",
                                                     "kv_dtype",
                                                     "state_rings",
                                                     "request_slots",
                                                     "mtp_layers",
                                                     "weights_source",
                                                     "running_per_group",
                                                     "max_seq_len",
                                                     "limiting_rank",
                                                     "ranks"}));
  json_t *nodes = json_object_get(root.get(), "nodes");
  ASSERT_EQ(json_array_size(nodes), 1u) << "one machine is one node";
  EXPECT_EQ(u64(json_array_get(nodes, 0), "gpus"), 8u);
  EXPECT_TRUE(json_is_false(json_object_get(root.get(), "cross_node_tp")));
  EXPECT_EQ(str(root.get(), "state_rings"), "per-request");
  EXPECT_EQ(u64(root.get(), "request_slots"), 65u);
  EXPECT_EQ(str(root.get(), "kv_dtype"), "bf16");
  EXPECT_EQ(u64(root.get(), "mtp_layers"), 0u);
  EXPECT_EQ(str(root.get(), "weights_source"), "none");
  EXPECT_EQ(u64(root.get(), "tp"), tp);
  EXPECT_EQ(u64(root.get(), "pp"), pp);
  EXPECT_EQ(u64(root.get(), "full_token"), u64(root.get(), "num_pages") * 128);
  Plan lib = library_plan(kHgx, tp, pp, 80 * GiB);
  ASSERT_TRUE(lib);
  const kvs_split *split = kvs_deployment_split(lib.get());
  EXPECT_EQ(u64(root.get(), "num_pages"), split->num_pages);
  EXPECT_EQ(u64(root.get(), "n_win_pages"), split->n_win_pages);
  EXPECT_EQ(u64(root.get(), "limiting_rank"), kvs_deployment_limiting_rank(lib.get()));
  json_t *ranks = json_object_get(root.get(), "ranks");
  ASSERT_TRUE(json_is_array(ranks));
  ASSERT_EQ(json_array_size(ranks), 8u);
  uint64_t next_layer = 0;
  for (size_t r = 0; r < 8; r++) {
    SCOPED_TRACE("rank " + std::to_string(r));
    json_t *rank = json_array_get(ranks, r);
    EXPECT_EQ(keys(rank),
              (std::set<std::string>{"rank", "node", "tp_rank", "pp_stage", "gpu", "layers",
                                     "budget_bytes", "budget_source", "memory_bytes",
                                     "memory_ratio", "weights_bytes", "reserve_bytes", "pool_bytes",
                                     "exact_bytes", "control_bytes", "padding_bytes",
                                     "headroom_bytes", "tiers", "node_overhead_bytes"}));
    EXPECT_EQ(u64(rank, "weights_bytes"), 0u) << "an explicit budget counts no weights";
    EXPECT_EQ(u64(rank, "rank"), r);
    EXPECT_EQ(u64(rank, "tp_rank"), r % tp);
    EXPECT_EQ(u64(rank, "pp_stage"), r / tp);
    json_t *gpu = json_object_get(rank, "gpu");
    EXPECT_EQ(keys(gpu), (std::set<std::string>{"index", "pci_busid", "numa_node", "cpuset"}));
    EXPECT_EQ(u64(gpu, "index"), r);
    EXPECT_EQ(json_string_value(json_object_get(gpu, "pci_busid")), kHgxBusIds[r]);
    EXPECT_EQ(u64(gpu, "numa_node"), r / 4);
    EXPECT_STREQ(json_string_value(json_object_get(gpu, "cpuset")),
                 r < 4 ? "0-55,112-167" : "56-111,168-223");
    json_t *layers = json_object_get(rank, "layers");
    ASSERT_EQ(json_array_size(layers), 2u);
    uint64_t first = json_integer_value(json_array_get(layers, 0));
    uint64_t last = json_integer_value(json_array_get(layers, 1));
    if (r % tp == 0) {
      EXPECT_EQ(first, next_layer);
      next_layer = last + 1;
    }
    const kvs_rank_plan *lr = kvs_deployment_rank(lib.get(), r);
    EXPECT_EQ(first, lr->first);
    EXPECT_EQ(last, lr->end - 1);
    EXPECT_EQ(u64(rank, "budget_bytes"), 80 * GiB);
    EXPECT_STREQ(json_string_value(json_object_get(rank, "budget_source")), "explicit");
    EXPECT_EQ(u64(rank, "reserve_bytes"), 0u) << "explicit bytes are taken as they are";
    json_t *tiers = json_object_get(rank, "tiers");
    EXPECT_EQ(keys(tiers), (std::set<std::string>{"window", "compressed", "indexer", "state",
                                                  "index_state", "mapping", "scratch"}));
    uint64_t sum = 0;
    const char *key;
    json_t *value;
    json_object_foreach(tiers, key, value) sum += json_integer_value(value);
    EXPECT_EQ(sum, u64(rank, "exact_bytes"));
    EXPECT_EQ(u64(rank, "exact_bytes"), lr->bytes.total);
    EXPECT_EQ(u64(rank, "pool_bytes"),
              sum + u64(rank, "control_bytes") + u64(rank, "padding_bytes"));
    EXPECT_EQ(u64(rank, "pool_bytes"), lr->device.total_bytes);
    EXPECT_EQ(u64(rank, "headroom_bytes"), 80 * GiB - u64(rank, "pool_bytes"));
    // What the node carves on this rank's GPU, byte for byte.
    kvs_plan_request req = default_request(tp, pp);
    kvs_device_layout layout;
    kvs_error err;
    ASSERT_EQ(kvs_node_rank_layout(&req, lib.get(), r, &layout, &err), KVS_OK) << err.message;
    EXPECT_EQ(u64(rank, "pool_bytes"), layout.total_bytes);
    EXPECT_EQ(u64(rank, "padding_bytes"), layout.padding_bytes);
    EXPECT_EQ(u64(rank, "control_bytes"), layout.control_bytes);
    EXPECT_GT(u64(rank, "padding_bytes"), 0u) << "256-byte alignment leaves gaps";
    EXPECT_EQ(u64(tiers, "window"), lr->bytes.window);
    EXPECT_EQ(u64(tiers, "compressed"), lr->bytes.compressed);
    EXPECT_EQ(u64(tiers, "indexer"), lr->bytes.indexer);
    EXPECT_EQ(u64(tiers, "mapping"), lr->bytes.mapping);
    EXPECT_LE(u64(rank, "pool_bytes"), u64(rank, "budget_bytes"));
    // What the node puts beside the carve in the deployment planned:
    // device tables, NCCL between the group's ranks (one rank: none),
    // --max-running 64 rows of 1 Mi tokens, the shard's step message.
    Topology t = load_xml(kHgx);
    std::vector<kvs_gpu_info> gpus = gpus_of(t.get());
    kvs_node_deployment d = kvs_node_deployment_planned(lib.get(), gpus.size(), 64, true, 1 << 20);
    EXPECT_EQ(d.device_comm, tp * pp > 1);
    kvs_node_overhead o;
    ASSERT_EQ(kvs_deployment_overhead(lib.get(), gpus.data(), r, &d, &o, &err), KVS_OK)
        << err.message;
    EXPECT_EQ(u64(rank, "node_overhead_bytes"), o.total_bytes);
    EXPECT_EQ(o.table_bytes, 2173952u)
        << "64 rows of 8,192 blocks, six words, 128 ring slots, 256 rows digests";
    EXPECT_EQ(o.nccl_bytes > 0, tp * pp > 1);
  }
  EXPECT_EQ(next_layer, 43u);
}

}  // namespace

TEST(Kvplan, tp8_json) {
  check_plan_json(kvplan(topo(kHgx) + " --tp 8 --budget 80GiB --json"), 8, 1);
}

TEST(Kvplan, tp4_pp2_json) {
  check_plan_json(kvplan(topo(kHgx) + " --tp 4 --pp 2 --budget 80GiB --json"), 4, 2);
}

TEST(Kvplan, pp8_json) {
  check_plan_json(kvplan(topo(kHgx) + " --pp 8 --budget 80GiB --json"), 1, 8);
}

// `plan` is optional: `kvplan plan ...` and `kvplan ...` are one command.
TEST(Kvplan, plan_subcommand_is_the_default) {
  RunResult a = kvplan("plan " + topo(kHgx) + " --tp 4 --pp 2 --budget 80GiB --json");
  RunResult b = kvplan(topo(kHgx) + " --tp 4 --pp 2 --budget 80GiB --json");
  EXPECT_EQ(a.status, 0);
  EXPECT_EQ(a.out, b.out);
}

TEST(Kvplan, table_names_every_rank_and_the_limit) {
  RunResult run = kvplan(topo(kHgx) + " --tp 4 --pp 2 --budget 80GiB");
  ASSERT_EQ(run.status, 0) << run.err;
  std::vector<std::string> lines = run.lines();
  ASSERT_GE(lines.size(), 16u);
  EXPECT_EQ(lines[0].rfind("model       dsv4-flash: 43 layers", 0), 0u) << lines[0];
  EXPECT_NE(run.out.find("layout      tp 4 x pp 2 x dp 1 = 8 GPUs per replica (ep 1), 1 replica"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("rank  tp  pp  gpu pci_busid    numa layers      window compressed"
                         "    indexer      state  idx_state    mapping    scratch    ctl+pad"
                         "       pool    weights     budget   headroom"),
            std::string::npos)
      << run.out;
  for (const std::string &id : kHgxBusIds) EXPECT_NE(run.out.find(id), std::string::npos) << id;
  EXPECT_NE(run.out.find("tokens of history"), std::string::npos);
  EXPECT_NE(run.out.find("limited by  rank "), std::string::npos);
  EXPECT_NE(run.out.find("<- limit"), std::string::npos);
}

// With no GPU visible to CUDA, the no-argument run plans the bundled
// 8-GPU server and says so, right after the first line's note that weights
// are not counted. Whether CUDA sees a GPU is asked of CUDA (the backend
// kvplan loads, gpu_gate.h), never read off kvplan's output: this case runs
// where CUDA says there is none, skips where it sees some, and fails where
// asking fails.
TEST(Kvplan, no_arguments_plan_the_bundled_server_without_a_gpu) {
  const kvs_gpu_gate::Answer cuda = kvs_gpu_gate::probe();
  KVS_NEED_NO_GPU(cuda);
  RunResult run = kvplan("", true);
  ASSERT_EQ(run.status, 0) << run.err;
  std::vector<std::string> lines = run.lines();
  ASSERT_GE(lines.size(), 2u) << run.out;
  // The weights note comes first (the built-in model carries none), then
  // the no-GPU note, naming the reason CUDA gave this test.
  EXPECT_EQ(
      lines[0].rfind("kvplan: weights are not counted (dsv4-flash carries no weight size)", 0), 0u)
      << lines[0];
  EXPECT_EQ(lines[1].rfind("kvplan: no GPU visible to CUDA (" + cuda.why +
                               "); planning the bundled 8-GPU server",
                           0),
            0u)
      << lines[1];
  EXPECT_NE(lines[1].find("as its driver reports it (an H200: 143,771 MiB, 140.40 GiB)"),
            std::string::npos)
      << lines[1];
  EXPECT_NE(run.out.find("layout      tp 8 x pp 1"), std::string::npos);
  // The node's one budget rule on the memory an H200's driver reports,
  // 143,771 MiB: floor(150754820096 x 0.9) less the 512 MiB reserve, i.e.
  // 125.86 GiB.
  EXPECT_NE(run.out.find("budget      nominal 140.40 GiB x 0.90 - 512.00 MiB = 125.86 GiB per GPU"),
            std::string::npos)
      << run.out;
  const uint64_t budget = 135679338086ull - (512ull << 20);
  Plan lib = library_plan(kHgx, 8, 1, budget);  // the bundled server's XML
  ASSERT_TRUE(lib);
  const uint64_t pages = kvs_deployment_split(lib.get())->num_pages;
  EXPECT_NE(run.out.find("num_pages   " + std::to_string(pages) + " pages"), std::string::npos)
      << run.out;
  // JSON keeps stdout to the one object; the note goes to stderr.
  RunResult json = kvplan("--json", true);
  ASSERT_EQ(json.status, 0);
  EXPECT_EQ(json.lines().size(), 1u);
  EXPECT_NE(json.err.find("kvplan: no GPU visible to CUDA (" + cuda.why +
                          "); planning the bundled "
                          "8-GPU server"),
            std::string::npos)
      << json.err;
  Json root = last_line_json(json);
  EXPECT_EQ(u64(root.get(), "num_pages"), pages);
  json_t *rank0 = json_array_get(json_object_get(root.get(), "ranks"), 0);
  EXPECT_STREQ(json_string_value(json_object_get(rank0, "budget_source")), "nominal");
  EXPECT_EQ(u64(rank0, "memory_bytes"), 143771ull << 20);
  EXPECT_EQ(u64(rank0, "reserve_bytes"), 512ull << 20);
  EXPECT_EQ(u64(rank0, "budget_bytes"), budget);
}

#if defined(__SANITIZE_ADDRESS__)
// The options kvplan's live children run with keep LeakSanitizer on: a
// program that loses a 4 KiB block, run exactly as they are run, is
// reported naming the allocation and fails. (Only the ASan build has a
// leak checker to keep on.)
TEST(KvplanASan, live_children_keep_leak_detection) {
  RunResult run = run_child("tests/tools/planted_leak", "", true);
  EXPECT_NE(run.status, 0) << "LeakSanitizer did not fail the process: " << run.err;
  EXPECT_NE(run.out.find("planted"), std::string::npos) << "the program did not run to its end";
  EXPECT_NE(run.err.find("ERROR: LeakSanitizer: detected memory leaks"), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("planted_leak_allocation"), std::string::npos) << run.err;
}
#endif

TEST(Kvplan, epyc_tp2_pp4_pairs_share_a_numa_node) {
  RunResult run = kvplan(topo(kEpyc) + " --tp 2 --pp 4 --budget 94GB --json");
  ASSERT_EQ(run.status, 0) << run.err;
  Json root = last_line_json(run);
  json_t *ranks = json_object_get(root.get(), "ranks");
  ASSERT_EQ(json_array_size(ranks), 8u);
  for (size_t s = 0; s < 4; s++) {
    json_t *a = json_object_get(json_array_get(ranks, 2 * s), "gpu");
    json_t *b = json_object_get(json_array_get(ranks, 2 * s + 1), "gpu");
    EXPECT_EQ(u64(a, "numa_node"), u64(b, "numa_node")) << "stage " << s;
  }
}

TEST(Kvplan, svg_draws_one_bar_per_gpu_grouped_by_numa_node) {
  std::string path = testing::TempDir() + "/plan.svg";
  RunResult run = kvplan(topo(kEpyc) + " --tp 2 --pp 4 --budget 94GB --svg " + path);
  ASSERT_EQ(run.status, 0) << run.err;
  std::string svg = slurp(path);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  size_t bars = 0;
  for (size_t at = 0; (at = svg.find("class=\"gpu\">GPU ", at)) != std::string::npos; at++) bars++;
  EXPECT_EQ(bars, 8u);
  for (const char *box : {"NUMA node 0 · package 0", "NUMA node 1 · package 0",
                          "NUMA node 2 · package 1", "NUMA node 3 · package 1"}) {
    EXPECT_NE(svg.find(box), std::string::npos) << box;
  }
  for (const char *tier : {"window", "compressed", "indexer", "state", "index_state", "mapping",
                           "scratch", "headroom", "LIMITING"}) {
    EXPECT_NE(svg.find(tier), std::string::npos) << tier;
  }
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

// Errors: one clear line on stderr, exit 1 (cannot plan here) or 2 (bad
// usage), never a crash.
TEST(Kvplan, errors_have_clear_messages_and_exit_codes) {
  struct Case {
    std::string args;
    int status;
    std::string message;
  };
  const std::string hgx = topo(kHgx);
  const std::vector<Case> cases = {
      {hgx + " --tp 16", 1,
       "kvplan plan: tp 16 x pp 1 = 16 ranks, more ranks than the 8 GPUs; --tp can be 1, 2, 4 "
       "or 8 (--pp then takes the rest)\n"},
      {hgx + " --tp 4 --pp 4", 1,
       "kvplan plan: tp 4 x pp 4 = 16 ranks, more ranks than the 8 GPUs; --tp can be 1 or 2 "
       "with this --pp\n"},
      {hgx + " --tp 3", 1,
       "kvplan plan: tp 3 x pp 1 = 3 ranks, which does not divide the 8 GPUs; --tp can be 1, 2, "
       "4 or 8 (--pp then takes the rest)\n"},
      {hgx + " --tp 3 --pp 2", 1,
       "kvplan plan: tp 3 x pp 2 = 6 ranks, which does not divide the 8 GPUs; --tp can be 1, 2 "
       "or 4 with this --pp\n"},
      {"--topology tests/data/missing.xml", 1,
       "kvplan plan: topology file 'tests/data/missing.xml' cannot be read: No such file or "
       "directory\n"},
      {"--topology tests/data/COPYING.hwloc", 1,
       "kvplan plan: topology file 'tests/data/COPYING.hwloc' is not XML (it does not start with "
       "'<')\n"},
      {"--topology tests/data", 1,
       "kvplan plan: topology file 'tests/data' is a directory, not an hwloc XML export\n"},
      {hgx + " --tp 4 --pp 2 --budget-per-gpu 80GiB,80GiB,80GiB,80GiB,80GiB,16MiB,80GiB,80GiB", 1,
       "kvplan plan: GPU 5 (0000:c3:00.0, rank 5, stage 1, layers "},
      {hgx + " --budget 1GiB", 1,
       "kvplan plan: GPU 0 (0000:1b:00.0, rank 0, stage 0, layers 0-42) "
       "has a budget of 1073741824 bytes but needs "},
      {hgx + " --pp 44 --tp 1 --budget 80GiB", 1,
       "kvplan plan: tp 1 x pp 44 = 44 ranks, more ranks than the 8 GPUs; --pp can be 1, 2, 4 "
       "or 8\n"},
      {hgx + " --budget-per-gpu 80GiB,80GiB", 2,
       "kvplan plan: --budget-per-gpu lists 2 budgets but topology 'topology/data/"
       "hgx-h200-2socket-8gpu.xml' has 8 GPUs\n"},
      {hgx + " --budget 80GiB --budget-per-gpu 1GiB,2GiB", 2,
       "kvplan plan: give --budget or --budget-per-gpu, not both\n"},
      {hgx + " --budget 80GiB --memory-ratio 0.8", 2,
       "kvplan plan: --memory-ratio applies to measured memory; --budget and --budget-per-gpu "
       "give the bytes themselves\n"},
      {hgx + " --budget 80GiB --reserve 1GiB", 2,
       "kvplan plan: --reserve applies to measured memory; --budget and --budget-per-gpu "
       "give the bytes themselves\n"},
      {hgx + " --memory-ratio 0.001", 1,
       "kvplan plan: GPU 0 (0000:1b:00.0): device budget is empty: 150754820096 nominal bytes x "
       "memory ratio 0.001 = 150754820, not above the 536870912-byte reserve\n"},
      {hgx + " --reserve 1x", 2, "kvplan plan: --reserve "},
      {hgx + " --memory-ratio 1.5", 2,
       "kvplan plan: --memory-ratio needs a share of memory in (0, 1], got '1.5'\n"},
      {hgx + " --tp 0", 2, "kvplan plan: --tp needs a rank count in [1, 1024], got '0'\n"},
      {hgx + " --pp 2000", 2, "kvplan plan: --pp needs a stage count in [1, 1024], got '2000'\n"},
      {hgx + " --tp 2 --tp 4", 2, "kvplan plan: --tp is given twice; give it once\n"},
      {hgx + " --radix --no-radix", 2, "kvplan plan: give --radix or --no-radix, once\n"},
      {hgx + " --max-running 0", 2, "kvplan plan: --max-running must be at least 1, got 0\n"},
      {hgx + " --max-seq-len 0", 2, "kvplan plan: --max-seq-len must be at least 1, got 0\n"},
      {hgx + " --floor-pages 0", 2, "kvplan plan: --floor-pages must be at least 1, got 0\n"},
      {hgx + " --swa-ratio 1.5", 2,
       "kvplan plan: --swa-ratio is the window's share of the history, in [0, 1]; got 1.5\n"},
      {hgx + " --tp x", 2, "kvplan plan: --tp needs a rank count in [1, 1024], got 'x'\n"},
      {hgx + " --budget 80 GiB", 2,
       "kvplan plan: --budget 80 is 80 bytes, under 1 MiB: did you mean 80GiB? (write 80B for "
       "bytes)\n"},
      {hgx + " --bogus", 2,
       "kvplan plan: unknown flag '--bogus' (kvplan plan --help lists every flag)\n"},
      {hgx + " --budgte 80GiB", 2,
       "kvplan plan: unknown flag '--budgte'; did you mean --budget? (kvplan plan --help lists "
       "every flag)\n"},
      {hgx + " --weights-t 1GB", 2,
       "kvplan plan: unknown flag '--weights-t'; did you mean --weights-total? (kvplan plan "
       "--help lists every flag)\n"},
      {hgx + " fit --context 1 --concurrency 1", 2,
       "kvplan plan: 'fit' is a subcommand, and the subcommand comes first: kvplan fit "
       "[flags]\n"},
      {hgx + " --svg", 2, "kvplan plan: --svg needs a value\n"},
      {hgx + " --model nope", 2, "kvplan plan: "},
      {hgx + " --page 100", 2,
       "kvplan plan: P=100 must be a multiple of 8 on a model with ratio-4 layers"},
      {hgx + " --page 104", 2, "kvplan plan: P=104 must be divisible by ratio 128 of layer 3"},
      {hgx + " --budget 80GiB --svg /nonexistent/dir/x.svg", 1,
       "kvplan plan: cannot write SVG: /nonexistent/dir/x.svg: cannot write: No such file or "
       "directory\n"},
  };
  for (const Case &c : cases) {
    RunResult run = kvplan(c.args);
    EXPECT_EQ(run.status, c.status) << c.args << "\n" << run.err;
    EXPECT_EQ(run.err.rfind(c.message, 0), 0u) << c.args << "\ngot: " << run.err;
  }
}

TEST(Kvplan, budget_too_small_json_names_the_gpu) {
  RunResult run = kvplan(topo(kHgx) +
                         " --tp 4 --pp 2 --json --budget-per-gpu "
                         "80GiB,80GiB,80GiB,80GiB,80GiB,16MiB,80GiB,80GiB");
  EXPECT_EQ(run.status, 1);
  Json root = last_line_json(run);
  ASSERT_TRUE(root);
  EXPECT_STREQ(json_string_value(json_object_get(root.get(), "error")), "budget_too_small");
  EXPECT_EQ(u64(root.get(), "rank"), 5u);
  EXPECT_STREQ(json_string_value(json_object_get(json_object_get(root.get(), "gpu"), "pci_busid")),
               "0000:c3:00.0");
  EXPECT_EQ(u64(root.get(), "available_bytes"), 16ull << 20);
  EXPECT_GT(u64(root.get(), "needed_bytes"), 16ull << 20);
}

// The node's buffers beside its carve are priced in the reserve: a budget
// from GPU memory must hold them in --reserve (exit 1 naming both numbers
// and the flag), exactly them passes; an explicit budget is exempt, and
// SGLang's rule reserves nothing by design. The default plan: 55,475,736
// bytes (52.9 MiB) a GPU within the 512 MiB reserve, its figures as
// before.
TEST(Kvplan, the_reserve_must_hold_the_nodes_buffers) {
  RunResult plan = kvplan("--topology bundled --json");
  ASSERT_EQ(plan.status, 0) << plan.err;
  Json root = last_line_json(plan);
  json_t *rank0 = json_array_get(json_object_get(root.get(), "ranks"), 0);
  const uint64_t need = u64(rank0, "node_overhead_bytes");
  EXPECT_EQ(need, 55475736u) << "tp 8 over NCCL: 2.6 MiB of the node's, 50.4 MiB of NCCL's";
  EXPECT_EQ(u64(rank0, "reserve_bytes"), 512ull << 20);
  EXPECT_EQ(u64(rank0, "budget_bytes"), 135679338086ull - (512ull << 20)) << "unchanged";
  RunResult text = kvplan("--topology bundled");
  EXPECT_NE(text.out.find("buffers     52.91 MiB per GPU beside the carve"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("held by the 512.00 MiB reserve"), std::string::npos) << text.out;

  // Below them: refused, the sentence last, the JSON error object first.
  // A smaller reserve is a larger budget, a larger window and step
  // message: the need is the plan's at that reserve.
  RunResult zero = kvplan("--topology bundled --reserve 0 --json");
  EXPECT_EQ(zero.status, 1) << zero.err;
  Json error = last_line_json(zero);
  ASSERT_TRUE(error);
  EXPECT_EQ(str(error.get(), "error"), "reserve_too_small");
  EXPECT_EQ(u64(error.get(), "reserve_bytes"), 0u);
  const uint64_t need0 = u64(error.get(), "node_overhead_bytes");
  EXPECT_GT(need0, 50ull << 20);
  const std::string sentence = "the node's buffers need " + std::to_string(need0) +
                               " bytes beside its carve but --reserve is 0; give --reserve of at "
                               "least " +
                               std::to_string(need0);
  EXPECT_NE(zero.err.find("kvplan plan: rank 0 (GPU 0 0000:1b:00.0): " + sentence),
            std::string::npos)
      << zero.err;
  RunResult small = kvplan("--topology bundled --reserve 1MiB");
  EXPECT_EQ(small.status, 1);
  EXPECT_NE(small.err.find("but --reserve is 1048576; give --reserve of at least"),
            std::string::npos)
      << small.err;
  EXPECT_EQ(small.out.find("num_pages"), std::string::npos) << "no plan printed";
  // The need at reserve 0 passes (its budget is smaller, so its window
  // and step message are no larger); a byte below that plan's own need
  // does not.
  RunResult exact = kvplan("--topology bundled --json --reserve " + std::to_string(need0));
  ASSERT_EQ(exact.status, 0) << exact.err;
  Json fits = last_line_json(exact);
  const uint64_t at =
      u64(json_array_get(json_object_get(fits.get(), "ranks"), 0), "node_overhead_bytes");
  EXPECT_LE(at, need0);
  RunResult under = kvplan("--topology bundled --reserve " + std::to_string(at - 1));
  EXPECT_EQ(under.status, 1) << under.err;
  // One rank: no NCCL, the tables' buffers alone.
  RunResult one = kvplan("--topology bundled --tp 1 --pp 1 --reserve 3MiB --json");
  ASSERT_EQ(one.status, 0) << one.err;
  Json one_root = last_line_json(one);
  EXPECT_LT(u64(json_array_get(json_object_get(one_root.get(), "ranks"), 0), "node_overhead_bytes"),
            3ull << 20);
  // An explicit budget is the carve's own bytes: nothing asked of it.
  RunResult explicit_budget = kvplan("--topology bundled --budget 80GiB --json");
  ASSERT_EQ(explicit_budget.status, 0) << explicit_budget.err;
  Json e = last_line_json(explicit_budget);
  json_t *e0 = json_array_get(json_object_get(e.get(), "ranks"), 0);
  EXPECT_EQ(u64(e0, "reserve_bytes"), 0u);
  EXPECT_GT(u64(e0, "node_overhead_bytes"), 50ull << 20) << "reported, not asked of the budget";
  // SGLang's rule reserves nothing: its graphs and activations live in
  // P x (1 - f); the buffers are reported, not checked.
  RunResult sglang = kvplan("--topology bundled --engine sglang --json");
  ASSERT_EQ(sglang.status, 0) << sglang.err;
  // fit: every answer's buffers in the reserve its share was found with.
  RunResult fit = kvplan("fit --context 1M --concurrency 8 --topology bundled --reserve 0");
  EXPECT_EQ(fit.status, 1) << fit.err;
  EXPECT_NE(fit.err.find("the node's buffers need "), std::string::npos) << fit.err;
  EXPECT_NE(fit.err.find(" bytes beside its carve but --reserve is 0; give --reserve of at least"),
            std::string::npos)
      << fit.err;
  EXPECT_EQ(kvplan("fit --context 1M --concurrency 8 --topology bundled").status, 0);
}

TEST(Kvplan, help_exits_zero) {
  RunResult run = kvplan("plan --help");
  EXPECT_EQ(run.status, 0);
  EXPECT_NE(run.out.find("--budget-per-gpu"), std::string::npos);
  EXPECT_NE(run.out.find("--topology FILE|live"), std::string::npos);
}

// Without measured memory, a GPU's budget comes from the total its model's
// driver reports (H100 NVL: 95,830 MiB; V100 32GB: 32,480 MiB), never from
// another model's;
// a model kvshard does not know is refused until a budget is given.
TEST(Kvplan, unmeasured_gpus_are_budgeted_by_their_own_model_or_refused) {
  for (const auto &c :
       {std::make_pair(kEpyc, 95830ull << 20), std::make_pair("nvidiaDGX2.xml", 32480ull << 20)}) {
    RunResult run = kvplan(topo(c.first) + " --json");
    ASSERT_EQ(run.status, 0) << run.err;
    Json root = last_line_json(run);
    json_t *rank0 = json_array_get(json_object_get(root.get(), "ranks"), 0);
    EXPECT_STREQ(json_string_value(json_object_get(rank0, "budget_source")), "nominal");
    EXPECT_EQ(u64(rank0, "memory_bytes"), c.second) << c.first;
  }
  std::string xml = slurp(data_path(kHgx));
  for (size_t at; (at = xml.find("[10de:2335]")) != std::string::npos;) {
    xml.replace(at, 11, "[10de:9999]");
  }
  std::string path = testing::TempDir() + "/unknown-model.xml";
  std::ofstream(path) << xml;
  RunResult run = kvplan("--topology " + path);
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err.rfind("kvplan plan: GPU 0 (0000:1b:00.0, GH100 [H200 SXM 141GB], PCI "
                          "10de:9999) has no measured memory and is not a model whose memory "
                          "kvshard knows: give its budget",
                          0),
            0u)
      << run.err;
  EXPECT_EQ(kvplan("--topology " + path + " --budget 80GiB --json").status, 0)
      << "an explicit budget plans it";
}

// kvs_deployment_overhead_most, the one pass kvplan fit prices a layout's
// buffers with, names the rank kvs_deployment_overhead prices highest (the
// lowest of equals) with the same buffers, over three HGX nodes in every
// layout, tensor-parallel groups across nodes (NCCL's tree peers) and one
// rank per group (no NCCL) included, with NCCL's default and a given
// estimate.
TEST(Kvplan, the_most_buffers_in_one_pass_are_the_rank_by_rank_ones) {
  Topology t = load_xml(kHgx);
  std::vector<kvs_gpu_info> one = gpus_of(t.get()), gpus;
  for (size_t node = 0; node < 3; node++) {
    for (kvs_gpu_info g : one) {
      g.host = node;
      g.index = gpus.size();
      gpus.push_back(g);
    }
  }
  std::vector<uint64_t> budgets(gpus.size(), 80 * GiB);
  kvs_nccl_estimate given = KVS_NCCL_ESTIMATE_INIT;
  given.tree_peers = 2;
  size_t spanning = 0;
  for (auto [tp, pp] : {std::pair<size_t, size_t>{1, 1},
                        {8, 1},
                        {4, 2},
                        {2, 4},
                        {1, 8},
                        {12, 2},
                        {6, 4},
                        {24, 1},
                        {3, 8}}) {
    kvs_plan_request req = default_request(tp, pp);
    req.allow_cross_host_tp = true;
    kvs_deployment_t raw = nullptr;
    kvs_error err;
    ASSERT_EQ(
        kvs_deployment_make(&req, gpus.data(), gpus.size(), budgets.data(), &raw, nullptr, &err),
        KVS_OK)
        << tp << " x " << pp << ": " << err.message;
    Plan plan(raw);
    spanning += kvs_deployment_cross_host_tp(raw);
    const kvs_nccl_estimate *given_ptr = &given;
    for (const kvs_nccl_estimate *nccl : {(const kvs_nccl_estimate *)nullptr, given_ptr}) {
      kvs_node_deployment d = kvs_node_deployment_planned(raw, gpus.size(), 64, true, 1 << 20);
      d.nccl = nccl;
      size_t want_rank = 0;
      kvs_node_overhead want{};
      for (size_t r = 0; r < gpus.size(); r++) {
        kvs_node_overhead o;
        ASSERT_EQ(kvs_deployment_overhead(raw, gpus.data(), r, &d, &o, &err), KVS_OK);
        if (r == 0 || o.total_bytes > want.total_bytes) want = o, want_rank = r;
      }
      size_t rank = SIZE_MAX;
      kvs_node_overhead got;
      ASSERT_EQ(kvs_deployment_overhead_most(raw, gpus.data(), &d, &rank, &got, &err), KVS_OK)
          << err.message;
      SCOPED_TRACE("tp " + std::to_string(tp) + " x pp " + std::to_string(pp));
      EXPECT_EQ(rank, want_rank);
      EXPECT_EQ(got.total_bytes, want.total_bytes);
      EXPECT_EQ(got.table_bytes, want.table_bytes);
      EXPECT_EQ(got.nccl_bytes, want.nccl_bytes);
    }
  }
  EXPECT_GE(spanning, 3u) << "some groups span nodes";
  size_t rank = 0;
  kvs_node_overhead o;
  kvs_node_deployment d = kvs_node_deployment_planned(nullptr, 8, 64, true, 1 << 20);
  kvs_error err;
  EXPECT_EQ(kvs_deployment_overhead_most(nullptr, gpus.data(), &d, &rank, &o, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "kvs_deployment_overhead_most: plan is NULL");
}
