// Ranks as threads over the "callbacks" backend (kvshard.h's
// kvs_comm_callbacks): each rank's callbacks forward to its loopback rank,
// as an engine's would to its own group (torch.distributed), so a node's
// steps travel through the public callback interface.
#ifndef KVS_TESTS_SHARD_CALLBACK_RANKS_H
#define KVS_TESTS_SHARD_CALLBACK_RANKS_H

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "kvshard.h"
#include "shard/comm.h"
#include "tests/shard/ranks.h"

namespace kvs_test {

// What the forwarding callbacks saw: the rank's loopback communicator they
// forward to, how often each ran, and whether destroy gave user back.
struct Forward {
  kvs_comm_t inner = nullptr;
  std::atomic<int> broadcasts{0}, allreduces{0}, barriers{0}, destroyed{0}, exchanges{0};
  // Every transfer the exchange callback was handed (its batches' sizes
  // and the smallest transfer seen), to check what the wrapper passes on.
  std::atomic<size_t> exchanged{0}, smallest{SIZE_MAX};
};

inline kvs_status forward_broadcast(void *user, void *bytes, size_t n, int root, int timeout_ms,
                                    kvs_error *err) {
  (void)timeout_ms;  // the loopback rank keeps its own deadline
  auto *f = static_cast<Forward *>(user);
  f->broadcasts++;
  kvs_comm_buffer b = {bytes, nullptr, n, nullptr};
  return kvs_comm_broadcast(f->inner, &b, n, root, err);
}

inline kvs_status forward_allreduce(void *user, uint64_t *w, size_t count, int op, int timeout_ms,
                                    kvs_error *err) {
  (void)timeout_ms;
  auto *f = static_cast<Forward *>(user);
  f->allreduces++;
  kvs_comm_buffer b = {w, nullptr, count * sizeof *w, nullptr};
  return kvs_comm_allreduce_u64(f->inner, &b, count, static_cast<kvs_comm_op>(op), err);
}

inline kvs_status forward_barrier(void *user, int timeout_ms, kvs_error *err) {
  (void)timeout_ms;
  auto *f = static_cast<Forward *>(user);
  f->barriers++;
  return kvs_comm_barrier(f->inner, err);
}

inline void forward_destroy(void *user) { static_cast<Forward *>(user)->destroyed++; }

inline kvs_status forward_exchange(void *user, const kvs_comm_transfer *t, size_t n, int timeout_ms,
                                   kvs_error *err) {
  (void)timeout_ms;
  auto *f = static_cast<Forward *>(user);
  f->exchanges++;
  f->exchanged += n;
  for (size_t i = 0; i < n; i++) {
    if (t[i].bytes < f->smallest) f->smallest = t[i].bytes;
  }
  return kvs_comm_exchange(f->inner, t, n, err);
}

inline kvs_comm_callbacks forwarding(Forward *f) {
  kvs_comm_callbacks cb = {
      sizeof cb,       f, forward_broadcast, forward_allreduce, forward_barrier, forward_destroy,
      forward_exchange};
  return cb;
}

// n ranks as threads, each body given its callbacks communicator.
inline void run_callback_ranks(int n, int timeout_ms,
                               const std::function<void(int, kvs_comm_t, Forward &)> &body) {
  run_ranks(n, timeout_ms, [&](int rank, kvs_comm_t loopback) {
    Forward f;
    f.inner = loopback;
    kvs_comm_callbacks cb = forwarding(&f);
    kvs_comm_t comm = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_comm_callbacks_create(&cb, rank, n, timeout_ms, &comm, &err), KVS_OK)
        << err.message;
    body(rank, comm, f);
    kvs_comm_destroy(comm);
    EXPECT_EQ(f.destroyed, 1);
  });
}

}  // namespace kvs_test

#endif  // KVS_TESTS_SHARD_CALLBACK_RANKS_H
