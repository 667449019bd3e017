// The deployment flags' one table (kvplan/deploy_flags.h), through the four
// parsers that read it: the node's flags (kvs_node_create_flags), kvplan
// plan and kvplan fit (kvs_plan_run, kvplan's own code in process) and
// kvsim (kvsim_parse). The same flag with the same bad value is refused
// with the same sentence by every one of them that takes the flag, as
// usage (KVS_ERR_PARSE; exit 2).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "kvplan/deploy_flags.h"
#include "kvshard.h"
#include "tools/kvsim_args.h"
#include "tools/kvsim_run.h"

namespace {

enum Tool { kNode, kPlan, kFit, kKvsim };
const char *const kToolNames[] = {"node flags", "kvplan plan", "kvplan fit", "kvsim"};

struct Refusal {
  bool refused = false;  // refused as usage: KVS_ERR_PARSE, exit 2
  std::string sentence;  // without the tool's "<tool>: " prefix
};

std::string without_prefix(std::string line, const std::string &prefix) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  size_t cut = line.rfind('\n');
  if (cut != std::string::npos) line = line.substr(cut + 1);
  return line.rfind(prefix, 0) == 0 ? line.substr(prefix.size()) : line;
}

Refusal node(const std::string &flag, const std::string &value) {
  kvs_comm_t comm = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  std::string word = flag + "=" + value;
  const char *flags[] = {word.c_str()};
  kvs_node_t made = nullptr;
  kvs_status status = kvs_node_create_flags(comm, flags, 1, &made, &err);
  kvs_node_destroy(made);
  kvs_comm_destroy(comm);
  return {status == KVS_ERR_PARSE, status == KVS_OK ? "" : err.message};
}

Refusal kvplan(Tool tool, const std::string &flag, const std::string &value) {
  std::vector<std::string> words;
  if (tool == kPlan) {
    words = {"plan"};
  } else {
    words = {"fit", "--context", "1M", "--concurrency", "1", "--progress-s", "0"};
  }
  if (flag != "--topology") words.insert(words.end(), {"--topology", "bundled"});
  words.insert(words.end(), {flag, value});
  std::vector<const char *> args;
  for (const auto &w : words) args.push_back(w.c_str());
  char *out = nullptr, *notes = nullptr;
  kvs_error err;
  kvs_status status = kvs_plan_run(args.data(), args.size(), &out, &notes, &err);
  kvs_free(out);
  kvs_free(notes);
  std::string prefix = std::string(kToolNames[tool]) + ": ";
  return {status == KVS_ERR_PARSE, status == KVS_OK ? "" : without_prefix(err.message, prefix)};
}

Refusal kvsim(const std::string &flag, const std::string &value) {
  std::vector<std::string> words = {"kvsim",  "--backend", "self", "--steps", "5",
                                    "--seed", "1",         flag,   value};
  std::vector<char *> argv;
  for (auto &w : words) argv.push_back(&w[0]);
  kvsim_args a;
  testing::internal::CaptureStderr();
  int rc = kvsim_parse(static_cast<int>(argv.size()), argv.data(), false, true, &a);
  std::string said = testing::internal::GetCapturedStderr();
  return {rc == KVSIM_EXIT_USAGE, rc == 0 ? "" : without_prefix(said, "kvsim: ")};
}

Refusal refusal(Tool tool, const std::string &flag, const std::string &value) {
  switch (tool) {
    case kNode:
      return node(flag, value);
    case kPlan:
    case kFit:
      return kvplan(tool, flag, value);
    default:
      return kvsim(flag, value);
  }
}

}  // namespace

// The issue's own example: one sentence, four parsers.
TEST(DeployFlags, mem_fraction_1_5_is_refused_in_one_sentence_by_all_four_parsers) {
  const std::string want = "--mem-fraction needs a share of memory in (0, 1], got '1.5'";
  for (Tool tool : {kNode, kPlan, kFit, kKvsim}) {
    Refusal r = refusal(tool, "--mem-fraction", "1.5");
    EXPECT_TRUE(r.refused) << kToolNames[tool] << ": " << r.sentence;
    EXPECT_EQ(r.sentence, want) << kToolNames[tool];
  }
}

// Every flag of the family, with a value it refuses, through every parser
// that takes it: one sentence each.
TEST(DeployFlags, each_refusal_is_one_sentence_in_every_parser_that_takes_the_flag) {
  const std::vector<Tool> all = {kNode, kPlan, kFit, kKvsim};
  const std::vector<Tool> no_fit = {kNode, kPlan, kKvsim};
  const std::vector<Tool> planners = {kPlan, kFit};
  struct Case {
    std::string flag, value;
    std::vector<Tool> tools;
  };
  const std::vector<Case> cases = {
      {"--mem-fraction", "0", all},
      {"--mem-fraction", "-0.5", all},
      {"--mem-fraction", "0x0.8", all},
      {"--memory-ratio", "2", all},
      {"--topology", "", all},
      {"--nodes", "65", all},
      {"--nodes", "-2", all},
      {"--reserve", "-1", all},
      {"--reserve", "16000000TB", all},
      {"--tp", "0", no_fit},
      {"--pp", "2000", no_fit},
      {"--budget", "0", no_fit},
      {"--budget", "80", no_fit},
      {"--budget", "17.35", no_fit},
      {"--budget-per-gpu", "80GiB,0", no_fit},
      {"--host-cache", "0", no_fit},
      {"--weights", "-5", {kNode, kPlan}},
      {"--weights-per-gpu", "1GiB,,2GiB", {kNode, kPlan}},
      {"--weights-total", "-1", planners},
      {"--expert-weights", "5EiB", planners},
      {"--gpu-memory", "80", planners},
      {"--free-before-load", "0", planners},
      // The unit rule: a bare byte count under 1 MiB, in every size flag.
      {"--reserve", "512", all},
      {"--budget-per-gpu", "80,80", no_fit},
      {"--host-cache", "64", no_fit},
      {"--weights", "17", {kNode, kPlan}},
      {"--weights-per-gpu", "17GiB,17", {kNode, kPlan}},
      {"--weights-total", "149", planners},
      {"--expert-weights", "142", planners},
      {"--shared-weights", "7", planners},
      {"--free-before-load", "137", planners},
  };
  size_t compared = 0;
  for (const Case &c : cases) {
    Refusal first = refusal(c.tools[0], c.flag, c.value);
    EXPECT_TRUE(first.refused) << kToolNames[c.tools[0]] << " " << c.flag << " '" << c.value
                               << "': " << first.sentence;
    EXPECT_NE(first.sentence.find(c.flag), std::string::npos) << first.sentence;
    for (size_t i = 1; i < c.tools.size(); i++) {
      Refusal r = refusal(c.tools[i], c.flag, c.value);
      EXPECT_TRUE(r.refused) << kToolNames[c.tools[i]] << " " << c.flag << " '" << c.value
                             << "': " << r.sentence;
      EXPECT_EQ(r.sentence, first.sentence)
          << c.flag << " '" << c.value << "': " << kToolNames[c.tools[i]] << " against "
          << kToolNames[c.tools[0]];
      compared++;
    }
  }
  EXPECT_GE(compared, 55u);
}

// Issue 30, section 5: every size flag follows one rule. A bare byte
// count from 1 to under 1 MiB is refused asking whether GiB was meant; a
// bare 0 keeps its meaning where it has one (no reserve, no weights) and is
// refused where it would mean nothing; a bare count of 1 MiB or more, and
// any count with a unit ("149B" included), is bytes.
TEST(DeployFlags, every_size_flag_follows_the_unit_rule) {
  size_t sizes = 0;
  for (const kvs_deploy_flag &f : kvs_deploy_flags_table) {
    if (f.kind != KVS_DEPLOY_SIZE && f.kind != KVS_DEPLOY_SIZES) continue;
    sizes++;
    uint64_t v = 7;
    kvs_error err;
    EXPECT_EQ(kvs_deploy_size_parse(&f, f.name, "149", &v, &err), KVS_ERR_PARSE) << f.name;
    EXPECT_EQ(std::string(err.message), std::string(f.name) +
                                            " 149 is 149 bytes, under 1 MiB: did you mean 149GiB? "
                                            "(write 149B for bytes)");
    EXPECT_EQ(kvs_deploy_size_parse(&f, f.name, "1048575", &v, &err), KVS_ERR_PARSE) << f.name;
    EXPECT_EQ(v, 7u) << f.name << ": a refusal writes nothing";
    ASSERT_EQ(kvs_deploy_size_parse(&f, f.name, "1048576", &v, &err), KVS_OK) << err.message;
    EXPECT_EQ(v, 1048576u) << f.name;
    ASSERT_EQ(kvs_deploy_size_parse(&f, f.name, "149B", &v, &err), KVS_OK) << err.message;
    EXPECT_EQ(v, 149u) << f.name;
    ASSERT_EQ(kvs_deploy_size_parse(&f, f.name, "149GB", &v, &err), KVS_OK) << err.message;
    EXPECT_EQ(v, 149000000000u) << f.name;
    kvs_status zero = kvs_deploy_size_parse(&f, f.name, "0", &v, &err);
    if (f.zero == nullptr) {
      EXPECT_EQ(zero, KVS_OK) << f.name << ": " << err.message;
      EXPECT_EQ(v, 0u) << f.name;
    } else {
      EXPECT_EQ(zero, KVS_ERR_PARSE) << f.name;
      EXPECT_NE(std::string(err.message).find("above 0"), std::string::npos) << err.message;
    }
  }
  EXPECT_EQ(sizes, 12u);  // budget(s), reserve, weights (5), gpu memory, free before load, host
                          // and disk tiers
}

// The planner example: a bare --weights-total 149 counted 149 bytes
// of weights and planned as if none were loaded; now kvplan refuses it, and
// --weights-total 0 still plans (no weights, as before).
TEST(DeployFlags, kvplan_refuses_a_unitless_weights_total_and_keeps_a_bare_zero) {
  Refusal small = kvplan(kPlan, "--weights-total", "149");
  EXPECT_TRUE(small.refused) << small.sentence;
  EXPECT_EQ(small.sentence,
            "--weights-total 149 is 149 bytes, under 1 MiB: did you mean 149GiB? (write 149B for "
            "bytes)");
  for (const char *zero : {"--weights-total", "--reserve", "--weights"}) {
    Refusal r = kvplan(kPlan, zero, "0");
    EXPECT_FALSE(r.refused) << zero << " 0: " << r.sentence;
  }
}

// Issue 30, section 5: memory inputs that cannot be true. Words are given
// to every tool that takes all of them (the node as --name=value, beside a
// CPU device), on the bundled server (8 x H200, 140.40 GiB each as their
// driver reports). A pair of flags is refused as usage at the flags
// (KVS_ERR_PARSE; exit 2); one above a GPU's own memory when the machine
// is loaded: usage for kvplan and kvsim (exit 2), KVS_ERR_INVALID_ARGUMENT
// from the node, which meets the machine in kvs_node_create (after the
// rank its setup names). One sentence.
namespace {

struct Said {
  int status = 0;  // the node's kvs_status, or the tool's exit status
  std::string sentence;
};

Said node_words(const std::vector<std::pair<std::string, std::string>> &words) {
  kvs_comm_t comm = nullptr;
  kvs_error err;
  kvs_error_clear(&err);
  EXPECT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
  std::vector<std::string> flags = {"--topology=bundled", "--device=cpu"};
  for (const auto &w : words)
    flags.push_back(w.second.empty() ? w.first : w.first + "=" + w.second);
  std::vector<const char *> argv;
  for (const auto &f : flags) argv.push_back(f.c_str());
  kvs_node_t made = nullptr;
  kvs_status status = kvs_node_create_flags(comm, argv.data(), argv.size(), &made, &err);
  kvs_node_destroy(made);
  kvs_comm_destroy(comm);
  return {status, status == KVS_OK ? "" : err.message};
}

Said kvplan_words(Tool tool, const std::vector<std::pair<std::string, std::string>> &words) {
  std::vector<std::string> argv = {"plan", "--topology", "bundled"};
  if (tool == kFit) {
    argv = {"fit",           "--topology", "bundled",      "--context", "1M",
            "--concurrency", "1",          "--progress-s", "0"};
  }
  for (const auto &w : words) argv.insert(argv.end(), {w.first, w.second});
  std::vector<const char *> args;
  for (const auto &w : argv) args.push_back(w.c_str());
  char *out = nullptr, *notes = nullptr;
  kvs_error err;
  kvs_status status = kvs_plan_run(args.data(), args.size(), &out, &notes, &err);
  kvs_free(out);
  kvs_free(notes);
  std::string prefix = std::string(kToolNames[tool]) + ": ";
  return {status, status == KVS_OK ? "" : without_prefix(err.message, prefix)};
}

// kvsim's whole setup on one rank in this process: the flags, then the
// cluster it loads, where a machine's memory is first known.
Said kvsim_words(const std::vector<std::pair<std::string, std::string>> &words) {
  std::vector<std::string> argv = {"kvsim", "--tp",   "1", "--backend",  "self",   "--steps",
                                   "5",     "--seed", "1", "--topology", "bundled"};
  for (const auto &w : words) argv.insert(argv.end(), {w.first, w.second});
  std::vector<char *> args;
  for (auto &w : argv) args.push_back(&w[0]);
  kvsim_args a;
  testing::internal::CaptureStderr();
  int rc = kvsim_parse(static_cast<int>(args.size()), args.data(), false, true, &a);
  if (rc == 0) {
    kvs_comm_t comm = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_comm_self_create(&comm, &err), KVS_OK);
    rc = kvsim_simulate(comm, &a, true);
    kvs_comm_destroy(comm);
  }
  std::string said = testing::internal::GetCapturedStderr();
  return {rc, rc == 0 ? "" : without_prefix(said, "kvsim: ")};
}

}  // namespace

TEST(DeployFlags, memory_flags_that_contradict_each_other_are_one_sentence_in_plan_and_fit) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> words;
    std::string sentence;
  };
  const std::vector<Case> cases = {
      {{{"--engine", "sglang"}, {"--gpu-memory", "80GiB"}, {"--free-before-load", "100GiB"}},
       "--free-before-load 100.00 GiB is more than --gpu-memory 80.00 GiB: memory free before "
       "the weights load is part of the GPU's memory"},
      {{{"--gpu-memory", "80GiB"}, {"--reserve", "100GiB"}},
       "--reserve 100.00 GiB is more than --gpu-memory 80.00 GiB: the reserve is taken off the "
       "GPU's memory"},
  };
  for (const Case &c : cases) {
    for (Tool tool : {kPlan, kFit}) {
      Said s = kvplan_words(tool, c.words);
      EXPECT_EQ(s.status, KVS_ERR_PARSE) << kToolNames[tool] << ": " << s.sentence;
      EXPECT_EQ(s.sentence, c.sentence) << kToolNames[tool];
    }
  }
  Said w = kvplan_words(kPlan, {{"--gpu-memory", "80GiB"}, {"--weights", "100GiB"}});
  EXPECT_EQ(w.status, KVS_ERR_PARSE);
  EXPECT_EQ(w.sentence,
            "--weights 100.00 GiB is more than --gpu-memory 80.00 GiB: the weights load into the "
            "GPU's memory");
  w = kvplan_words(
      kPlan, {{"--engine", "sglang"}, {"--free-before-load", "100GiB"}, {"--weights", "120GiB"}});
  EXPECT_EQ(w.status, KVS_ERR_PARSE);
  EXPECT_EQ(w.sentence,
            "--weights 120.00 GiB is more than --free-before-load 100.00 GiB: the weights load "
            "into the memory free before load");
}

TEST(DeployFlags, memory_flags_above_the_gpus_memory_are_one_sentence_in_all_four) {
  const std::string gpu0 =
      " is more than the memory of GPU 0 (0000:1b:00.0), 140.40 GiB (the total its driver "
      "reports): ";
  struct Case {
    std::string flag, value, sentence;
    std::vector<Tool> tools;
  };
  const std::vector<Case> cases = {
      {"--budget",
       "200GiB",
       "--budget 200.00 GiB" + gpu0 + "a KV budget is carved from the GPU's memory",
       {kNode, kPlan, kKvsim}},
      {"--reserve",
       "150GiB",
       "--reserve 150.00 GiB" + gpu0 + "the reserve is taken off the GPU's memory",
       {kNode, kPlan, kFit, kKvsim}},
      {"--weights",
       "150GiB",
       "--weights 150.00 GiB" + gpu0 + "the weights load into the GPU's memory",
       {kNode, kPlan}},
      {"--gpu-memory",
       "1379GiB",
       "--gpu-memory 1379.00 GiB" + gpu0 + "the GPU has no more memory than that",
       {kPlan, kFit}},
  };
  for (const Case &c : cases) {
    for (Tool tool : c.tools) {
      Said s = tool == kNode    ? node_words({{c.flag, c.value}})
               : tool == kKvsim ? kvsim_words({{c.flag, c.value}})
                                : kvplan_words(tool, {{c.flag, c.value}});
      const int usage = tool == kNode    ? static_cast<int>(KVS_ERR_INVALID_ARGUMENT)
                        : tool == kKvsim ? static_cast<int>(KVSIM_EXIT_USAGE)
                                         : static_cast<int>(KVS_ERR_PARSE);
      EXPECT_EQ(s.status, usage) << kToolNames[tool] << " " << c.flag << ": " << s.sentence;
      // The node says which rank failed its collective setup first
      // ("node creation failed at topology, GPU and budget on rank 0: "),
      // as for every setup failure; the sentence is the rest.
      std::string said = s.sentence;
      const std::string rank = "on rank 0: ";
      if (tool == kNode && said.find(rank) != std::string::npos) {
        said = said.substr(said.find(rank) + rank.size());
      }
      EXPECT_EQ(said, c.sentence) << kToolNames[tool] << " " << c.flag;
    }
  }
  // The typo, under SGLang's rule: plan and fit alike.
  for (Tool tool : {kPlan, kFit}) {
    Said s = kvplan_words(tool, {{"--engine", "sglang"}, {"--free-before-load", "1379GiB"}});
    EXPECT_EQ(s.status, KVS_ERR_PARSE) << kToolNames[tool];
    EXPECT_EQ(s.sentence, "--free-before-load 1379.00 GiB" + gpu0 +
                              "memory free before the weights load is part of the GPU's memory")
        << kToolNames[tool];
  }
}

// A host tier above the machine's own memory (the bundled server's 2 TiB,
// as its export's NUMA nodes give it): the node and kvplan in one sentence.
TEST(DeployFlags, a_host_tier_above_the_machines_memory_is_one_sentence) {
  const std::string want =
      "--host-cache 3072.00 GiB is more than the memory of host 0 (bundled 8-GPU server (2 "
      "sockets x 4 H200, 4 NVSwitch)), 2048.00 GiB (as hwloc reports it): the host tier is "
      "pinned in the host's memory";
  Said plan = kvplan_words(kPlan, {{"--host-cache", "3TiB"}});
  EXPECT_EQ(plan.status, KVS_ERR_PARSE) << plan.sentence;
  EXPECT_EQ(plan.sentence, want);
  Said node = node_words({{"--prefix-cache", ""}, {"--host-cache", "3TiB"}});
  EXPECT_EQ(node.status, KVS_ERR_INVALID_ARGUMENT) << node.sentence;
  const std::string rank = "on rank 0: ";
  size_t at = node.sentence.find(rank);
  EXPECT_EQ(at == std::string::npos ? node.sentence : node.sentence.substr(at + rank.size()), want);
  // The whole of it is possible.
  EXPECT_EQ(kvplan_words(kPlan, {{"--host-cache", "2TiB"}}).status, KVS_OK);
}
