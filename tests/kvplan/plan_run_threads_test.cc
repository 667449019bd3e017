// kvs_plan_run (kvshard.h) called from many threads at once: every
// thread's answers (status, output, notes, message) are the answers the
// same runs gave one at a time. Plans of different layouts, dtypes,
// budgets and weights, solves, and refusals (bad usage and a plan that
// cannot be made) are mixed, each thread taking them in its own order;
// and runs that are mostly parsing (kvplan's parser is getopt, whose state
// is the process's), many of them.
// KVS_PLAN_THREADS, KVS_PLAN_ROUNDS and KVS_PLAN_PARSE_ROUNDS shorten or
// lengthen it.
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kvshard.h"

namespace {

struct Answer {
  kvs_status status = KVS_OK;
  std::string out, notes, message;
  bool operator==(const Answer &o) const {
    return status == o.status && out == o.out && notes == o.notes && message == o.message;
  }
};

// The runs, each of the same number of words (so that a run that reads
// another's words, were the parser shared, could not read past its own).
const std::vector<std::vector<const char *>> kRuns = {
    {"plan", "--topology", "bundled", "--tp", "8", "--pp", "1", "--json"},
    {"plan", "--topology", "bundled", "--tp", "4", "--pp", "2", "--json"},
    {"solve", "--budget", "40GiB", "--kv-dtype", "fp8", "--max-running", "16"},
    {"solve", "--budget", "80GiB", "--max-seq-len", "128K", "--max-running", "32"},
    {"solve", "--budget", "20GiB", "--kv-dtype", "fp8", "--state-rings", "per-page"},
    {"solve", "--budget", "141GB", "--model", "dsv4-pro", "--mtp", "1", "--json"},
    {"solve", "--budget", "60GiB", "--page", "256", "--swa-ratio", "0.25", "--json"},
    {"solve", "--budget", "30GiB", "--max-seq-len", "64K", "--no-radix", "--json"},
    // Refused: a flag that does not exist (bad usage), and a budget that
    // holds nothing.
    {"solve", "--budget", "80GiB", "--no-such-flag", "1", "--max-running", "8"},
    {"solve", "--budget", "1MiB", "--max-seq-len", "1M", "--max-running", "64"},
};

Answer run(const std::vector<const char *> &args) {
  char *out = nullptr, *notes = nullptr;
  kvs_error err;
  kvs_error_clear(&err);
  Answer a;
  a.status = kvs_plan_run(args.data(), args.size(), &out, &notes, &err);
  a.out = out != nullptr ? out : "";
  a.notes = notes != nullptr ? notes : "";
  if (a.status != KVS_OK) a.message = err.message;
  kvs_free(out);
  kvs_free(notes);
  return a;
}

// The run as a command line, a long word cut short.
std::string words(const std::vector<const char *> &args) {
  std::string s = "kvplan";
  for (const char *w : args) {
    const std::string word = w;
    s += " " + (word.size() <= 40
                    ? word
                    : word.substr(0, 24) + "... (" + std::to_string(word.size()) + " characters)");
  }
  return s;
}

size_t env_count(const char *name, size_t fallback) {
  const char *v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? static_cast<size_t>(std::atoi(v)) : fallback;
}

using Runs = std::vector<std::vector<const char *>>;

struct Thread {
  pthread_t id;
  size_t index = 0, rounds = 0;
  const Runs *runs_of = nullptr;
  const std::vector<Answer> *serial = nullptr;
  size_t runs = 0, differed = 0;
  std::string first;  // the first run that differed, in words
};

void *work(void *arg) {
  Thread *t = static_cast<Thread *>(arg);
  const Runs &runs = *t->runs_of;
  for (size_t round = 0; round < t->rounds; round++) {
    for (size_t k = 0; k < runs.size(); k++) {
      // Each thread its own order: threads meet on different runs.
      const size_t which =
          (t->index * 3 + round + k * (t->index % 2 == 0 ? 1 : runs.size() - 1)) % runs.size();
      const Answer got = run(runs[which]);
      t->runs++;
      if (got == (*t->serial)[which]) continue;
      if (t->differed++ == 0) {
        t->first = words(runs[which]) + " (status " + kvs_status_name(got.status) + ", message '" +
                   got.message + "')";
        // Said at once, in case what made it differ also brings the
        // process down.
        std::fprintf(stderr, "thread %zu: %s answered otherwise than the same run alone\n",
                     t->index, t->first.c_str());
      }
    }
  }
  return nullptr;
}

// A crash while runs are under way is the property failing too: said, in
// words a log keeps (async-signal-safe), before the process goes.
void on_crash(int sig) {
  static const char text[] = "kvs_plan_run called from many threads at once crashed the process\n";
  (void)!write(2, text, sizeof text - 1);
  signal(sig, SIG_DFL);
  raise(sig);
}

// The runs one at a time, then `rounds` of each from n_threads threads at
// once: every answer the serial one. Returns the serial answers.
std::vector<Answer> stress(const Runs &runs, const char *what, size_t rounds) {
  std::vector<Answer> serial;
  for (const auto &args : runs) serial.push_back(run(args));
  // Serial again: the answers do not depend on what ran before.
  for (size_t i = 0; i < runs.size(); i++) {
    EXPECT_TRUE(run(runs[i]) == serial[i]) << words(runs[i]) << " answered otherwise twice";
  }
  const size_t n_threads = env_count("KVS_PLAN_THREADS", 8);
  std::vector<Thread> threads(n_threads);
  signal(SIGSEGV, on_crash);
  signal(SIGABRT, on_crash);
  for (size_t i = 0; i < n_threads; i++) {
    threads[i].index = i;
    threads[i].rounds = rounds;
    threads[i].runs_of = &runs;
    threads[i].serial = &serial;
    EXPECT_EQ(pthread_create(&threads[i].id, nullptr, work, &threads[i]), 0);
  }
  size_t total = 0, differed = 0;
  for (Thread &t : threads) {
    EXPECT_EQ(pthread_join(t.id, nullptr), 0);
    total += t.runs;
    differed += t.differed;
    EXPECT_EQ(t.differed, 0u) << "thread " << t.index << ": " << t.differed << " of its " << t.runs
                              << " runs answered otherwise than the same run alone, first "
                              << t.first;
  }
  signal(SIGSEGV, SIG_DFL);
  signal(SIGABRT, SIG_DFL);
  EXPECT_EQ(total, n_threads * rounds * runs.size());
  // tools/reliability-report.sh sums these.
  std::printf("reliability: concurrent plan runs %zu (%s) on %zu threads, %zu answered otherwise\n",
              total, what, n_threads, differed);
  return serial;
}

// Refusals the parser makes as it reads the words, each its own, after a
// flag whose value takes it a while (1,024 budgets): runs that are mostly
// parsing, so that the threads' parsers overlap often.
const std::string kBudgets = [] {
  std::string s = "80GiB";
  for (int i = 1; i < 1024; i++) s += ",80GiB";
  return s;
}();
const Runs kParsed = {
    {"plan", "--budget-per-gpu", kBudgets.c_str(), "--max-running", "0"},
    {"plan", "--budget-per-gpu", kBudgets.c_str(), "--kv-dtype", "fp16"},
    {"plan", "--budget-per-gpu", kBudgets.c_str(), "--swa-ratio", "2"},
    {"plan", "--budget-per-gpu", kBudgets.c_str(), "--state-rings", "sideways"},
    {"plan", "--budget-per-gpu", kBudgets.c_str(), "--mtp", "x"},
    {"plan", "--budget-per-gpu", kBudgets.c_str(), "--max-seq-len", "0"},
    {"plan", "--budget-per-gpu", kBudgets.c_str(), "--tp", "0"},
    {"plan", "--budget-per-gpu", kBudgets.c_str(), "--page", "zero"},
};

}  // namespace

TEST(PlanRunThreads, concurrent_runs_answer_as_the_same_runs_one_at_a_time) {
  const std::vector<Answer> serial =
      stress(kRuns, "plans and solves", env_count("KVS_PLAN_ROUNDS", 4));
  // The mix is what it says: answers, refusals of both kinds, all distinct.
  size_t refused = 0;
  for (size_t i = 0; i < serial.size(); i++) {
    EXPECT_FALSE(serial[i].out.empty() && serial[i].notes.empty()) << words(kRuns[i]);
    refused += serial[i].status != KVS_OK;
    for (size_t j = 0; j < i; j++) {
      EXPECT_FALSE(serial[i] == serial[j]) << words(kRuns[i]) << " and " << words(kRuns[j]);
    }
  }
  EXPECT_EQ(serial[8].status, KVS_ERR_PARSE) << serial[8].message;
  EXPECT_EQ(serial[9].status, KVS_ERR_BUDGET_TOO_SMALL) << serial[9].message;
  EXPECT_EQ(refused, 2u);
}

TEST(PlanRunThreads, concurrent_refusals_say_their_own_words) {
  const std::vector<Answer> serial =
      stress(kParsed, "refused while parsed", env_count("KVS_PLAN_PARSE_ROUNDS", 20));
  for (size_t i = 0; i < serial.size(); i++) {
    EXPECT_EQ(serial[i].status, KVS_ERR_PARSE) << words(kParsed[i]) << ": " << serial[i].message;
    for (size_t j = 0; j < i; j++) EXPECT_NE(serial[i].message, serial[j].message);
  }
}
