/* Deadlines and polite polling for the backends' waits (private).
 *
 * Ranks are often oversubscribed (8 processes on 2 cores in the CPU test
 * matrix): a waiter that spins hard steals the core from the peer it waits
 * for. So a wait polls a few times, then yields for up to 2 ms (longer for
 * a large transfer: kvs_wait_begin_bytes), then
 * sleeps in growing steps capped well below a scheduler step's latency. */
#ifndef KVS_SHARD_WAIT_H
#define KVS_SHARD_WAIT_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/clock.h"

static inline int64_t kvs_wait_now_ns(void) { return (int64_t)kvs_now_ns(); }

typedef struct kvs_wait {
  int64_t start_ns;
  int64_t deadline_ns;
  int64_t yield_ns; /* how long it yields before it sleeps */
  uint32_t polls;
} kvs_wait;

/* How long a wait yields before it starts to sleep: a collective that
 * completes within it costs no sleep quantum (a nanosleep rounds up to the
 * timer slack, about 50 us, and a sleeping root does not progress its own
 * send), and yielding still hands an oversubscribed core to the peer. */
#define KVS_WAIT_YIELD_NS 2000000

static inline kvs_wait kvs_wait_begin(int timeout_ms) {
  kvs_wait w;
  w.start_ns = kvs_wait_now_ns();
  w.deadline_ns = w.start_ns + (int64_t)timeout_ms * 1000000;
  w.yield_ns = KVS_WAIT_YIELD_NS;
  w.polls = 0;
  return w;
}

/* A wait for `bytes` of data that only moves while this rank polls (MPI's
 * progress runs inside its calls): it yields, never sleeps, for as long as
 * the bytes take at 1 GB/s (a floor any healthy shared-memory or network
 * path beats) on top of the usual window, so a large transfer is not
 * slowed by sleeps between its fragments; a peer that stalls past that
 * gets the usual backoff. */
static inline kvs_wait kvs_wait_begin_bytes(int timeout_ms, uint64_t bytes) {
  kvs_wait w = kvs_wait_begin(timeout_ms);
  w.yield_ns += (int64_t)(bytes > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : bytes);
  return w;
}

static inline int64_t kvs_wait_elapsed_ms(const kvs_wait *w) {
  return (kvs_wait_now_ns() - w->start_ns) / 1000000;
}

/* Called after each unsuccessful poll: backs off, and returns false once
 * the deadline has passed. */
static inline bool kvs_wait_again(kvs_wait *w) {
  uint32_t n = ++w->polls;
  if (n <= 8) return true; /* a few hot polls first */
  int64_t now = kvs_wait_now_ns();
  if (now >= w->deadline_ns) return false;
  if (now - w->start_ns < w->yield_ns) {
    sched_yield();
    return true;
  }
  /* A long wait (a stalled or slow peer): sleep in steps of 2..64 us. */
  uint32_t shift = (n & 0xffff) / 64;
  long ns = 2000L << (shift > 5 ? 5 : shift);
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
  return true;
}

#endif /* KVS_SHARD_WAIT_H */
