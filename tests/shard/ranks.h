// Runs one body per rank on its own thread over an in-process loopback
// group, so the runtime's multi-rank paths are tested without processes.
#ifndef KVS_TESTS_SHARD_RANKS_H
#define KVS_TESTS_SHARD_RANKS_H

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "shard/comm.h"
#include "shard/comm_loopback.h"

namespace kvs_test {

inline void run_ranks(int n, int timeout_ms, const std::function<void(int, kvs_comm_t)> &body) {
  kvs_comm_loopback_group_t group = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_comm_loopback_group_create(n, &group, &err), KVS_OK) << err.message;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      kvs_comm_t comm = nullptr;
      kvs_error e;
      EXPECT_EQ(kvs_comm_loopback_create(group, r, timeout_ms, &comm, &e), KVS_OK) << e.message;
      if (comm != nullptr) body(r, comm);
      kvs_comm_destroy(comm);
    });
  }
  for (auto &t : threads) t.join();
  kvs_comm_loopback_group_destroy(group);
}

inline uint64_t *words(kvs_comm_buffer &b) { return static_cast<uint64_t *>(b.host); }

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_RANKS_H
