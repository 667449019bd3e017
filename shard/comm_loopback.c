#include "shard/comm_loopback.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum call_kind { CALL_BROADCAST, CALL_ALLREDUCE, CALL_BARRIER } call_kind;

typedef struct call {
  uint64_t round; /* which collective this slot holds; UINT64_MAX none */
  call_kind kind;
  void *data;
  size_t bytes; /* broadcast bytes, or allreduce words */
  int root;
  kvs_comm_op op;
} call;

/* One rank's transfer of an exchange, posted to the group until its
 * counterpart (the same seq of the same src -> dst pair) is posted too. */
typedef struct post {
  struct member *owner;
  int src, dst;
  uint64_t seq; /* the k-th transfer from src to dst, over the group's life */
  bool send;
  void *data;
  size_t bytes;
} post;

struct kvs_comm_loopback_group {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int size;
  int refs;       /* the creator plus one per member */
  uint64_t round; /* the collective being assembled */
  int arrived;
  int departed;
  bool done;         /* round's data has moved */
  kvs_status result; /* round's outcome */
  bool failed;       /* sticky: timeout, mismatch or abort */
  kvs_status failure_status;
  char failure[KVS_ERROR_MESSAGE_MAX];
  call *slots;
  /* Point to point: the transfers posted and not yet matched, and per
   * ordered pair (src * size + dst) the sends src posted to dst and the
   * receives dst posted from src. */
  post **pending;
  size_t n_pending, pending_cap;
  uint64_t *sends_posted;
  uint64_t *receives_posted;
};

typedef struct member {
  struct kvs_comm_loopback_group *group;
  int rank;
  uint64_t rounds; /* collectives this rank has entered */
  /* Its exchange's posts (none pending between calls) and how many of
   * them are still unmatched. */
  post *posts;
  size_t posts_cap;
  size_t left;
} member;

static void group_release(struct kvs_comm_loopback_group *group) {
  pthread_mutex_lock(&group->mutex);
  bool last = --group->refs == 0;
  pthread_mutex_unlock(&group->mutex);
  if (!last) return;
  pthread_cond_destroy(&group->cond);
  pthread_mutex_destroy(&group->mutex);
  free(group->slots);
  free(group->pending);
  free(group->sends_posted);
  free(group->receives_posted);
  free(group);
}

kvs_status kvs_comm_loopback_group_create(int size, kvs_comm_loopback_group_t *out,
                                          kvs_error *err) {
  if (out == NULL || size < 1) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a loopback group needs an output and at least one rank (got %d)", size);
  }
  struct kvs_comm_loopback_group *group = calloc(1, sizeof *group);
  call *slots = calloc((size_t)size, sizeof *slots);
  uint64_t *sends = calloc((size_t)size * (size_t)size, sizeof *sends);
  uint64_t *receives = calloc((size_t)size * (size_t)size, sizeof *receives);
  pthread_condattr_t attr;
  bool attr_ok = pthread_condattr_init(&attr) == 0;
  if (group == NULL || slots == NULL || sends == NULL || receives == NULL || !attr_ok) {
    free(group);
    free(slots);
    free(sends);
    free(receives);
    if (attr_ok) pthread_condattr_destroy(&attr);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %d-rank loopback group", size);
  }
  /* Deadlines are monotonic: a wall-clock jump must not fire or stall them. */
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_mutex_init(&group->mutex, NULL);
  pthread_cond_init(&group->cond, &attr);
  pthread_condattr_destroy(&attr);
  for (int i = 0; i < size; i++) slots[i].round = UINT64_MAX;
  group->slots = slots;
  group->sends_posted = sends;
  group->receives_posted = receives;
  group->size = size;
  group->refs = 1;
  *out = group;
  return KVS_OK;
}

void kvs_comm_loopback_group_destroy(kvs_comm_loopback_group_t group) {
  if (group != NULL) group_release(group);
}

static const char *kind_name(call_kind kind) {
  return kind == CALL_BROADCAST ? "broadcast" : kind == CALL_ALLREDUCE ? "allreduce" : "barrier";
}

static void describe(const call *c, char *out, size_t cap) {
  switch (c->kind) {
    case CALL_BROADCAST:
      snprintf(out, cap, "broadcast(%zu bytes, root %d)", c->bytes, c->root);
      break;
    case CALL_ALLREDUCE:
      snprintf(out, cap, "allreduce(%s, %zu words)", kvs_comm_op_name(c->op), c->bytes);
      break;
    case CALL_BARRIER:
      snprintf(out, cap, "barrier");
      break;
  }
}

static void fail_group(struct kvs_comm_loopback_group *group, kvs_status status,
                       const char *message) {
  if (!group->failed) {
    group->failed = true;
    group->failure_status = status;
    snprintf(group->failure, sizeof group->failure, "%s", message);
  }
  pthread_cond_broadcast(&group->cond);
}

/* The last rank to arrive moves everyone's data: all the others are
 * blocked in the round, so their buffers are stable. */
static void complete_round(struct kvs_comm_loopback_group *group) {
  const call *first = &group->slots[0];
  for (int i = 1; i < group->size; i++) {
    const call *c = &group->slots[i];
    if (c->kind != first->kind || c->bytes != first->bytes ||
        (c->kind == CALL_BROADCAST && c->root != first->root) ||
        (c->kind == CALL_ALLREDUCE && c->op != first->op)) {
      char a[96], b[96], message[KVS_ERROR_MESSAGE_MAX];
      describe(first, a, sizeof a);
      describe(c, b, sizeof b);
      snprintf(message, sizeof message,
               "loopback collective %llu mismatched: rank 0 called %s, rank %d called %s",
               (unsigned long long)group->round, a, i, b);
      fail_group(group, KVS_ERR_COMM, message);
      return;
    }
  }
  if (first->kind == CALL_BROADCAST) {
    const void *src = group->slots[first->root].data;
    for (int i = 0; i < group->size; i++) {
      if (i != first->root) memcpy(group->slots[i].data, src, first->bytes);
    }
  } else if (first->kind == CALL_ALLREDUCE) {
    for (size_t w = 0; w < first->bytes; w++) {
      uint64_t v = ((const uint64_t *)group->slots[0].data)[w];
      for (int i = 1; i < group->size; i++) {
        uint64_t x = ((const uint64_t *)group->slots[i].data)[w];
        v = first->op == KVS_COMM_MIN   ? (x < v ? x : v)
            : first->op == KVS_COMM_MAX ? (x > v ? x : v)
                                        : v + x;
      }
      for (int i = 0; i < group->size; i++) ((uint64_t *)group->slots[i].data)[w] = v;
    }
  }
  group->done = true;
  group->result = KVS_OK;
  pthread_cond_broadcast(&group->cond);
}

static struct timespec deadline_after(int timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

static kvs_status run(member *m, call c, int timeout_ms, kvs_error *err) {
  struct kvs_comm_loopback_group *group = m->group;
  uint64_t round = m->rounds++;
  struct timespec deadline = deadline_after(timeout_ms);
  kvs_status status = KVS_OK;
  pthread_mutex_lock(&group->mutex);
  /* Wait for the previous round to empty, then for every peer. */
  bool timed_out = false;
  while (!group->failed && group->round != round && !timed_out) {
    timed_out = pthread_cond_timedwait(&group->cond, &group->mutex, &deadline) == ETIMEDOUT;
  }
  if (!group->failed && !timed_out) {
    c.round = round;
    group->slots[m->rank] = c;
    if (++group->arrived == group->size) complete_round(group);
    while (!group->failed && !group->done && !timed_out) {
      timed_out = pthread_cond_timedwait(&group->cond, &group->mutex, &deadline) == ETIMEDOUT;
    }
  }
  if (!group->failed && timed_out && !group->done) {
    char missing[160];
    int used = 0;
    missing[0] = '\0';
    if (group->round != round) {
      snprintf(missing, sizeof missing, "that left collective %llu unfinished",
               (unsigned long long)group->round);
    }
    for (int i = 0; group->round == round && i < group->size && used < (int)sizeof missing - 8;
         i++) {
      if (group->slots[i].round != round) {
        used += snprintf(missing + used, sizeof missing - (size_t)used, "%s%d",
                         used > 0 ? ", " : "", i);
      }
    }
    char message[KVS_ERROR_MESSAGE_MAX];
    snprintf(message, sizeof message,
             "loopback %s (collective %llu) on rank %d of %d timed out after %d ms waiting "
             "for rank(s) %s: a peer failed or stalled",
             kind_name(c.kind), (unsigned long long)round, m->rank, group->size, timeout_ms,
             missing);
    fail_group(group, KVS_ERR_TIMEOUT, message);
  }
  if (group->failed) {
    status = kvs_error_set(err, group->failure_status, "%s", group->failure);
  } else {
    status = group->result;
    if (++group->departed == group->size) {
      group->arrived = 0;
      group->departed = 0;
      group->done = false;
      group->round++;
      pthread_cond_broadcast(&group->cond);
    }
  }
  pthread_mutex_unlock(&group->mutex);
  return status;
}

static kvs_status lb_broadcast(void *ctx, kvs_comm_buffer *buffer, size_t bytes, int root,
                               int timeout_ms, kvs_error *err) {
  call c = {0, CALL_BROADCAST, buffer->host, bytes, root, KVS_COMM_MIN};
  return run(ctx, c, timeout_ms, err);
}

static kvs_status lb_allreduce(void *ctx, kvs_comm_buffer *buffer, size_t count, kvs_comm_op op,
                               int timeout_ms, kvs_error *err) {
  call c = {0, CALL_ALLREDUCE, buffer->host, count, 0, op};
  return run(ctx, c, timeout_ms, err);
}

static kvs_status lb_barrier(void *ctx, int timeout_ms, kvs_error *err) {
  call c = {0, CALL_BARRIER, NULL, 0, 0, KVS_COMM_MIN};
  return run(ctx, c, timeout_ms, err);
}

/* ---- point to point ---- */

/* Drops m's posts from the group's unmatched ones: after a failure no
 * peer may copy into (or out of) memory whose owner has returned. */
static void withdraw(struct kvs_comm_loopback_group *group, const member *m) {
  for (size_t i = 0; i < group->n_pending;) {
    if (group->pending[i]->owner == m) {
      group->pending[i] = group->pending[--group->n_pending];
    } else {
      i++;
    }
  }
}

/* Posts p: completes it against its counterpart when that is already
 * posted (the copy runs here, under the group's lock, while both owners
 * are inside their exchange), else leaves it pending. False when the
 * pair's sizes differ, which fails the group. */
static bool post_one(struct kvs_comm_loopback_group *group, post *p) {
  for (size_t i = 0; i < group->n_pending; i++) {
    post *q = group->pending[i];
    if (q->send == p->send || q->src != p->src || q->dst != p->dst || q->seq != p->seq) continue;
    const post *send = p->send ? p : q;
    const post *receive = p->send ? q : p;
    if (send->bytes != receive->bytes) {
      char message[KVS_ERROR_MESSAGE_MAX];
      snprintf(message, sizeof message,
               "loopback exchange mismatched: rank %d's send %llu to rank %d is %zu bytes, rank "
               "%d's receive %llu from rank %d is %zu bytes (matched transfers must be the same "
               "size)",
               send->src, (unsigned long long)send->seq, send->dst, send->bytes, receive->dst,
               (unsigned long long)receive->seq, receive->src, receive->bytes);
      fail_group(group, KVS_ERR_COMM, message);
      return false;
    }
    memcpy(receive->data, send->data, send->bytes);
    q->owner->left--;
    p->owner->left--;
    group->pending[i] = group->pending[--group->n_pending];
    return true;
  }
  if (group->n_pending == group->pending_cap) {
    size_t cap = group->pending_cap > 0 ? 2 * group->pending_cap : 16;
    post **grown = realloc(group->pending, cap * sizeof *grown);
    if (grown == NULL) {
      fail_group(group, KVS_ERR_NO_MEMORY, "loopback exchange: no memory to post a transfer");
      return false;
    }
    group->pending = grown;
    group->pending_cap = cap;
  }
  group->pending[group->n_pending++] = p;
  return true;
}

/* Names this rank's transfers still unmatched, after a timeout. */
static void describe_left(const member *m, size_t n, char *out, size_t cap) {
  kvs_comm_transfer left[8];
  size_t k = 0, more = 0;
  const struct kvs_comm_loopback_group *group = m->group;
  for (size_t i = 0; i < group->n_pending; i++) {
    const post *p = group->pending[i];
    if (p->owner != m) continue;
    if (k < sizeof left / sizeof *left) {
      left[k++] = (kvs_comm_transfer){p->send ? p->dst : p->src, p->send, p->data, p->bytes};
    } else {
      more++;
    }
  }
  char list[KVS_ERROR_MESSAGE_MAX / 2];
  kvs_comm_transfers_describe(left, k, list, sizeof list);
  snprintf(out, cap, "%zu of %zu transfers unmatched: %s%s", m->left, n, list,
           more > 0 ? ", and more" : "");
}

static kvs_status lb_exchange(void *ctx, const kvs_comm_transfer *t, size_t n, int timeout_ms,
                              kvs_error *err) {
  member *m = ctx;
  struct kvs_comm_loopback_group *group = m->group;
  /* None of m's posts is pending between calls, so growing them is safe. */
  if (n > m->posts_cap) {
    post *grown = realloc(m->posts, n * sizeof *grown);
    if (grown == NULL) {
      return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a loopback exchange of %zu", n);
    }
    m->posts = grown;
    m->posts_cap = n;
  }
  struct timespec deadline = deadline_after(timeout_ms);
  pthread_mutex_lock(&group->mutex);
  m->left = n;
  /* Every transfer is posted before this rank waits for any: no order of
   * sends and receives between two ranks can deadlock. */
  for (size_t i = 0; i < n && !group->failed; i++) {
    post *p = &m->posts[i];
    int src = t[i].send ? m->rank : t[i].peer, dst = t[i].send ? t[i].peer : m->rank;
    uint64_t *counter = t[i].send
                            ? &group->sends_posted[(size_t)src * (size_t)group->size + dst]
                            : &group->receives_posted[(size_t)src * (size_t)group->size + dst];
    *p = (post){m, src, dst, (*counter)++, t[i].send, t[i].data, t[i].bytes};
    if (!post_one(group, p)) break;
  }
  pthread_cond_broadcast(&group->cond);
  bool timed_out = false;
  while (!group->failed && m->left > 0 && !timed_out) {
    timed_out = pthread_cond_timedwait(&group->cond, &group->mutex, &deadline) == ETIMEDOUT;
  }
  if (!group->failed && m->left > 0) {
    char left[KVS_ERROR_MESSAGE_MAX / 2 + 64], message[KVS_ERROR_MESSAGE_MAX];
    describe_left(m, n, left, sizeof left);
    snprintf(message, sizeof message,
             "loopback exchange on rank %d of %d timed out after %d ms with %s: a peer failed "
             "or stalled",
             m->rank, group->size, timeout_ms, left);
    fail_group(group, KVS_ERR_TIMEOUT, message);
  }
  kvs_status status = KVS_OK;
  if (group->failed) {
    withdraw(group, m);
    status = kvs_error_set(err, group->failure_status, "%s", group->failure);
  }
  pthread_mutex_unlock(&group->mutex);
  return status;
}

static void lb_abort(void *ctx, int code) {
  member *m = ctx;
  char message[KVS_ERROR_MESSAGE_MAX];
  snprintf(message, sizeof message, "rank %d aborted the loopback group (code %d)", m->rank, code);
  pthread_mutex_lock(&m->group->mutex);
  fail_group(m->group, KVS_ERR_COMM, message);
  pthread_mutex_unlock(&m->group->mutex);
}

static void lb_destroy(void *ctx) {
  member *m = ctx;
  if (m == NULL) return;
  group_release(m->group);
  free(m->posts);
  free(m);
}

static const kvs_comm_vtable loopback_vtable = {
    .name = "loopback",
    .buffer_alloc = kvs_comm_host_buffer_alloc,
    .buffer_free = kvs_comm_host_buffer_free,
    .broadcast = lb_broadcast,
    .allreduce_u64 = lb_allreduce,
    .barrier = lb_barrier,
    .abort = lb_abort,
    .destroy = lb_destroy,
    .exchange = lb_exchange,
};

kvs_status kvs_comm_loopback_create(kvs_comm_loopback_group_t group, int rank, int timeout_ms,
                                    kvs_comm_t *out, kvs_error *err) {
  if (group == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "group or output handle is NULL");
  }
  if (rank < 0 || rank >= group->size) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "rank %d is outside a loopback group of %d ranks", rank, group->size);
  }
  member *m = calloc(1, sizeof *m);
  if (m == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a loopback rank");
  pthread_mutex_lock(&group->mutex);
  group->refs++;
  pthread_mutex_unlock(&group->mutex);
  m->group = group;
  m->rank = rank;
  return kvs_comm_create(&loopback_vtable, m, rank, group->size, timeout_ms, out, err);
}
