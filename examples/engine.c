/* A toy engine on kvshard's public API alone (kvshard.h), built against an
 * installed kvshard with
 *
 *   cc -std=c11 engine.c $(pkg-config --cflags --libs kvshard) -pthread
 *
 * Two ranks run as threads of this process over a loopback communicator
 * (an engine would pass an MPI or NCCL one), tensor-parallel over the
 * bundled 8-GPU server's first two GPUs, with host tables. The leader
 * admits a request, binds its prompt's pages and steps; every rank steps
 * with the same batch, translates the prompt and finds the leader's
 * window slots; a follower's bind is refused; the leader frees the pages
 * that leave the window and finishes the request; a check proves the
 * ranks agree. It prints one line per rank and exits 0 when every
 * promise held. */
#include <kvshard.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANKS 2
#define REQUEST 7u
#define PROMPT_PAGES 3

typedef struct rank_run {
  int rank;
  kvs_comm_t comm;
  int failed;
  char line[768];
} rank_run;

static kvs_geometry g_geometry;

static int fail(rank_run *r, const char *what, const kvs_error *err) {
  snprintf(r->line, sizeof r->line, "rank %d: %s: %s (%s)", r->rank, what, err->message,
           kvs_status_name(err->status));
  r->failed = 1;
  return 1;
}

/* The prompt's token locations in the full pool: pages 1..PROMPT_PAGES. */
static void prompt_locs(uint64_t page, int64_t *locs) {
  for (uint64_t i = 0; i < PROMPT_PAGES * page; i++) locs[i] = (int64_t)(page + i);
}

/* One decode row for the request at `pos`: its two window pages. */
static kvs_node_batch batch_at(const uint64_t *request, const int64_t *pos, int32_t *blocks,
                               uint64_t page) {
  int64_t block = *pos / (int64_t)page;
  blocks[0] = block > 0 ? (int32_t)block : -1; /* full page = block + 1 */
  blocks[1] = (int32_t)(block + 1);
  kvs_node_batch b = {.size = sizeof b,
                      .n = 1,
                      .requests = request,
                      .positions = pos,
                      .block_table = blocks,
                      .stride = 2,
                      .window_rows = true};
  return b;
}

static int leader_binds(rank_run *r, kvs_node_t node, const int64_t *locs, size_t n) {
  kvs_error err;
  int64_t slot = -1;
  if (kvs_node_admit(node, REQUEST, &slot, &err) != KVS_OK) return fail(r, "admit", &err);
  if (kvs_node_bind(node, REQUEST, locs, n, &err) != KVS_OK) return fail(r, "bind", &err);
  return 0;
}

static int follower_is_refused(rank_run *r, kvs_node_t node, const int64_t *locs, size_t n) {
  kvs_error err;
  if (kvs_node_bind(node, REQUEST, locs, n, &err) != KVS_ERR_INVALID_ARGUMENT) {
    snprintf(r->line, sizeof r->line, "rank %d: a follower's bind was not refused", r->rank);
    r->failed = 1;
    return 1;
  }
  return 0;
}

static int run_node(rank_run *r, kvs_node_t node) {
  kvs_error err;
  uint64_t page = kvs_node_page(node);
  size_t n = PROMPT_PAGES * page;
  int64_t *locs = malloc(n * sizeof *locs), *slots = malloc(n * sizeof *slots);
  if (locs == NULL || slots == NULL) return fail(r, "memory", &err);
  prompt_locs(page, locs);
  int rc = kvs_node_is_leader(node) ? leader_binds(r, node, locs, n)
                                    : follower_is_refused(r, node, locs, n);
  /* Decode the prompt's last token: every rank steps with the same batch. */
  uint64_t request = REQUEST;
  int64_t pos = (int64_t)n - 1;
  int32_t blocks[2];
  kvs_node_batch batch = batch_at(&request, &pos, blocks, page);
  kvs_node_step_result result = {.size = sizeof result};
  if (rc == 0 && kvs_node_step(node, &batch, &result, &err) != KVS_OK) rc = fail(r, "step", &err);
  if (rc == 0 && kvs_node_translate(node, locs, n, slots, &err) != KVS_OK) {
    rc = fail(r, "translate", &err);
  }
  /* The row's own slot is the last prompt token's window slot. */
  if (rc == 0 && (result.n != 1 || result.own[0] != slots[n - 1] || slots[n - 1] < 0)) {
    snprintf(r->line, sizeof r->line, "rank %d: own slot %lld, translate says %lld", r->rank,
             (long long)(result.n ? result.own[0] : -2), (long long)slots[n - 1]);
    r->failed = rc = 1;
  }
  int64_t first_slot = slots[0];
  /* The first page leaves the window: the leader frees it and finishes. */
  if (rc == 0 && kvs_node_is_leader(node) &&
      (kvs_node_free(node, locs, page, &err) != KVS_OK ||
       kvs_node_finish(node, REQUEST, &err) != KVS_OK)) {
    rc = fail(r, "free/finish", &err);
  }
  if (rc == 0 && kvs_node_step(node, NULL, NULL, &err) != KVS_OK) rc = fail(r, "step", &err);
  kvs_node_report report = {.size = sizeof report};
  if (rc == 0 && kvs_node_check(node, &report, &err) != KVS_OK) rc = fail(r, "check", &err);
  if (rc == 0 && kvs_node_translate(node, locs, 1, slots, &err) != KVS_OK) {
    rc = fail(r, "translate", &err);
  }
  if (rc == 0) {
    snprintf(r->line, sizeof r->line,
             "rank %d: %llu pages of %llu tokens, token %lld in window slot %lld then %lld, "
             "digest %016llx",
             r->rank, (unsigned long long)kvs_node_num_pages(node), (unsigned long long)page,
             (long long)locs[0], (long long)first_slot, (long long)slots[0],
             (unsigned long long)report.digest);
  }
  free(locs);
  free(slots);
  return rc;
}

static void *rank_main(void *arg) {
  rank_run *r = arg;
  kvs_error err;
  kvs_node_options options;
  kvs_node_options_init(&options);
  options.geometry = &g_geometry;
  options.topology = "bundled";
  options.device = KVS_NODE_DEVICE_CPU;
  options.tp = RANKS;
  options.max_running = 4;
  options.max_seq_len = 8192;
  options.budget_bytes = 2ull << 30;
  options.bind_numa = false;
  options.local_rank = KVS_NODE_UNCHECKED;
  kvs_node_t node = NULL;
  if (kvs_node_create(r->comm, &options, &node, &err) != KVS_OK) {
    fail(r, "node", &err);
    return NULL;
  }
  run_node(r, node);
  kvs_node_destroy(node);
  return NULL;
}

int main(void) {
  kvs_error err;
  if (strcmp(kvs_version(), KVS_VERSION_STRING) != 0) {
    fprintf(stderr, "engine: headers %s, library %s\n", KVS_VERSION_STRING, kvs_version());
    return 1;
  }
  if (kvs_geometry_builtin("dsv4-flash", &g_geometry, &err) != KVS_OK) {
    fprintf(stderr, "engine: %s\n", err.message);
    return 1;
  }
  kvs_comm_loopback_group_t group = NULL;
  if (kvs_comm_loopback_group_create(RANKS, &group, &err) != KVS_OK) {
    fprintf(stderr, "engine: %s\n", err.message);
    return 1;
  }
  rank_run runs[RANKS];
  pthread_t threads[RANKS];
  memset(runs, 0, sizeof runs);
  int failed = 0;
  for (int i = 0; i < RANKS; i++) {
    runs[i].rank = i;
    if (kvs_comm_loopback_create(group, i, 10000, &runs[i].comm, &err) != KVS_OK) {
      fprintf(stderr, "engine: %s\n", err.message);
      return 1;
    }
  }
  kvs_comm_loopback_group_destroy(group);
  for (int i = 0; i < RANKS; i++) pthread_create(&threads[i], NULL, rank_main, &runs[i]);
  for (int i = 0; i < RANKS; i++) {
    pthread_join(threads[i], NULL);
    printf("engine: %s\n", runs[i].line);
    failed |= runs[i].failed;
    kvs_comm_destroy(runs[i].comm);
  }
  return failed;
}
