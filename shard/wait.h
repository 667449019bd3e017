/* Deadlines and polite polling for the backends' waits (private).
 *
 * Ranks are often oversubscribed (8 processes on 2 cores in the CPU test
 * matrix): a waiter that spins hard steals the core from the peer it waits
 * for. So a wait polls a few times, then yields, then sleeps in growing
 * steps capped well below a scheduler step's latency. */
#ifndef KVS_SHARD_WAIT_H
#define KVS_SHARD_WAIT_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

static inline int64_t kvs_wait_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct kvs_wait {
  int64_t start_ns;
  int64_t deadline_ns;
  uint32_t polls;
} kvs_wait;

static inline kvs_wait kvs_wait_begin(int timeout_ms) {
  kvs_wait w;
  w.start_ns = kvs_wait_now_ns();
  w.deadline_ns = w.start_ns + (int64_t)timeout_ms * 1000000;
  w.polls = 0;
  return w;
}

static inline int64_t kvs_wait_elapsed_ms(const kvs_wait *w) {
  return (kvs_wait_now_ns() - w->start_ns) / 1000000;
}

/* Called after each unsuccessful poll: backs off, and returns false once
 * the deadline has passed. */
static inline bool kvs_wait_again(kvs_wait *w) {
  uint32_t n = ++w->polls;
  if (n > 64) {
    int64_t now = kvs_wait_now_ns();
    if (now >= w->deadline_ns) return false;
    /* Sleep in steps of 2..64 us: short enough to keep a step's latency,
     * long enough to hand an oversubscribed core to the peer. */
    uint32_t shift = (n - 64) / 64;
    long ns = 2000L << (shift > 5 ? 5 : shift);
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
  } else if (n > 8) {
    sched_yield();
  }
  return true;
}

#endif /* KVS_SHARD_WAIT_H */
