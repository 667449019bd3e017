// main for the stand-in tests: the gtest run, then, as the last line, what
// ran: "schedules N ranks R" (R: the most ranks any schedule had).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "tests/standin/harness.h"

namespace {

std::atomic<unsigned long long> g_schedules{0};
std::atomic<int> g_ranks{0};

}  // namespace

namespace kvs_standin_harness {

void count_schedule(int ranks) {
  g_schedules++;
  int seen = g_ranks.load();
  while (ranks > seen && !g_ranks.compare_exchange_weak(seen, ranks)) {
  }
}

}  // namespace kvs_standin_harness

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  std::fflush(stderr);
  std::printf("schedules %llu ranks %d\n", g_schedules.load(), g_ranks.load());
  std::fflush(stdout);
  return rc;
}
