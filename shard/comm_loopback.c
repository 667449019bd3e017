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
};

typedef struct member {
  struct kvs_comm_loopback_group *group;
  int rank;
  uint64_t rounds; /* collectives this rank has entered */
} member;

static void group_release(struct kvs_comm_loopback_group *group) {
  pthread_mutex_lock(&group->mutex);
  bool last = --group->refs == 0;
  pthread_mutex_unlock(&group->mutex);
  if (!last) return;
  pthread_cond_destroy(&group->cond);
  pthread_mutex_destroy(&group->mutex);
  free(group->slots);
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
  pthread_condattr_t attr;
  bool attr_ok = pthread_condattr_init(&attr) == 0;
  if (group == NULL || slots == NULL || !attr_ok) {
    free(group);
    free(slots);
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
