/* The public API from C, as an engine sees it: kvshard.h compiles as pure
 * C11 with -pedantic (the tests are C++, so without this nothing would
 * notice a C++-only construct creeping in), one node runs on it, and every
 * function it declares is called with NULL and zero arguments: none may
 * crash, every status-returning one refuses with KVS_ERR_INVALID_ARGUMENT
 * (status.h's promise), accessors answer their documented neutral value.
 * Each function called is printed once ("called NAME"), so
 * //tests:api_coverage_test can hold the list against the shared object's
 * exports: a function exported without a case here fails the suite. */
#include "kvshard.h"

#include <stdio.h>
#include <string.h>

static int failures;

#define CALLED(name) printf("called %s\n", #name)

/* A status-returning call with NULL/zero arguments must refuse them. */
#define REFUSES(name, call)                                                                   \
  do {                                                                                        \
    CALLED(name);                                                                             \
    kvs_error e_;                                                                             \
    kvs_error_clear(&e_);                                                                     \
    kvs_status s_ = (call);                                                                   \
    if (s_ != KVS_ERR_INVALID_ARGUMENT) {                                                     \
      fprintf(stderr, "%s with NULL arguments returned %s: %s\n", #name, kvs_status_name(s_), \
              e_.message);                                                                    \
      failures++;                                                                             \
    }                                                                                         \
  } while (0)

#define EXPECT(name, cond)                                     \
  do {                                                         \
    CALLED(name);                                              \
    if (!(cond)) {                                             \
      fprintf(stderr, "%s: %s does not hold\n", #name, #cond); \
      failures++;                                              \
    }                                                          \
  } while (0)

static void nulls_of_status_and_model(void) {
  EXPECT(kvs_version, strcmp(kvs_version(), KVS_VERSION_STRING) == 0);
  EXPECT(kvs_status_string, strlen(kvs_status_string((kvs_status)999)) > 0);
  EXPECT(kvs_status_name, strcmp(kvs_status_name(KVS_ERR_LIBRARY), "KVS_ERR_LIBRARY") == 0 &&
                              strcmp(kvs_status_name(KVS_ERR_PENDING), "KVS_ERR_PENDING") == 0 &&
                              strcmp(kvs_status_name((kvs_status)-1), "KVS_ERR_UNKNOWN") == 0);
  kvs_error_clear(NULL);
  CALLED(kvs_error_clear);
  kvs_geometry g;
  REFUSES(kvs_geometry_builtin, kvs_geometry_builtin(NULL, &g, &e_));
  REFUSES(kvs_geometry_builtin, kvs_geometry_builtin("dsv4-flash", NULL, &e_));
  REFUSES(kvs_geometry_resolve, kvs_geometry_resolve(NULL, &g, &e_));
  EXPECT(kvs_geometry_layer_count, kvs_geometry_layer_count(NULL) == 0);
}

/* kvplan in process: NULLs and no words refused; one answer and one
 * refusal in kvplan's words, their texts freed with kvs_free. */
static void plans_in_process(void) {
  char *out = NULL, *notes = NULL;
  const char *words[] = {"solve", "--budget", "80GiB", "--json"};
  REFUSES(kvs_plan_run, kvs_plan_run(NULL, 4, &out, &notes, &e_));
  REFUSES(kvs_plan_run, kvs_plan_run(words, 4, NULL, &notes, &e_));
  REFUSES(kvs_plan_run, kvs_plan_run(words, 0, &out, &notes, &e_));
  const char *holes[] = {"solve", NULL};
  REFUSES(kvs_plan_run, kvs_plan_run(holes, 2, &out, &notes, &e_));
  kvs_free(NULL);
  CALLED(kvs_free);
  kvs_error err;
  kvs_status s = kvs_plan_run(words, 4, &out, NULL, &err);
  if (s != KVS_OK || out == NULL || strstr(out, "\"num_pages\":") == NULL) {
    fprintf(stderr, "kvs_plan_run solve: %s: %s\n", kvs_status_name(s), out ? out : err.message);
    failures++;
  }
  kvs_free(out);
  const char *bad[] = {"solve", "--budget", "80GiB", "--page", "192"};
  s = kvs_plan_run(bad, 5, &out, &notes, &err);
  if (s != KVS_ERR_PARSE || strstr(err.message, "P=192") == NULL || notes == NULL ||
      strstr(notes, err.message) == NULL) {
    fprintf(stderr, "kvs_plan_run --page 192: %s: %s (notes: %s)\n", kvs_status_name(s),
            err.message, notes != NULL ? notes : "none");
    failures++;
  }
  kvs_free(out);
  kvs_free(notes);
}

static void nulls_of_comms(void) {
  REFUSES(kvs_comm_self_create, kvs_comm_self_create(NULL, &e_));
  REFUSES(kvs_comm_loopback_group_create, kvs_comm_loopback_group_create(2, NULL, &e_));
  kvs_comm_loopback_group_t group = NULL;
  REFUSES(kvs_comm_loopback_group_create, kvs_comm_loopback_group_create(0, &group, &e_));
  kvs_comm_loopback_group_destroy(NULL);
  CALLED(kvs_comm_loopback_group_destroy);
  kvs_comm_t comm = NULL;
  REFUSES(kvs_comm_loopback_create, kvs_comm_loopback_create(NULL, 0, 1000, &comm, &e_));
  int rank = 0, size = 0;
  REFUSES(kvs_mpi_init, kvs_mpi_init(NULL, &size, &e_));
  REFUSES(kvs_mpi_init, kvs_mpi_init(&rank, NULL, &e_));
  /* Ends MPI only if kvs_mpi_init started it: nothing here. */
  EXPECT(kvs_mpi_finalize, 1);
  REFUSES(kvs_comm_mpi_create, kvs_comm_mpi_create(NULL, 0, 1000, NULL, &e_));
  REFUSES(kvs_comm_mpi_create, kvs_comm_mpi_create(NULL, 0, 0, &comm, &e_));
  kvs_comm_nccl_options_init(NULL);
  CALLED(kvs_comm_nccl_options_init);
  REFUSES(kvs_comm_nccl_unique_id, kvs_comm_nccl_unique_id(NULL, &e_));
  REFUSES(kvs_comm_nccl_create, kvs_comm_nccl_create(NULL, &comm, &e_));
  REFUSES(kvs_comm_callbacks_create, kvs_comm_callbacks_create(NULL, 0, 1, 1000, &comm, &e_));
  kvs_comm_callbacks none = {sizeof none, NULL, NULL, NULL, NULL, NULL, NULL};
  REFUSES(kvs_comm_callbacks_create, kvs_comm_callbacks_create(&none, 0, 1, 1000, &comm, &e_));
  REFUSES(kvs_comm_callbacks_create, kvs_comm_callbacks_create(&none, 0, 0, 0, NULL, &e_));
  kvs_comm_destroy(NULL);
  CALLED(kvs_comm_destroy);
  EXPECT(kvs_comm_rank, kvs_comm_rank(NULL) == -1);
  EXPECT(kvs_comm_size, kvs_comm_size(NULL) == 0);
  EXPECT(kvs_comm_backend, strcmp(kvs_comm_backend(NULL), "") == 0);
  REFUSES(kvs_comm_set_timeout_ms, kvs_comm_set_timeout_ms(NULL, 1000, &e_));
  REFUSES(kvs_comm_exchange, kvs_comm_exchange(NULL, NULL, 0, &e_));
  /* On one rank: a batch without its array, and a send to itself with its
   * receive moving the bytes. */
  kvs_comm_t self = NULL;
  if (kvs_comm_self_create(&self, NULL) == KVS_OK) {
    REFUSES(kvs_comm_exchange, kvs_comm_exchange(self, NULL, 1, &e_));
    char from[4] = "abc", to[4] = "";
    kvs_comm_transfer both[2] = {{0, true, from, sizeof from}, {0, false, to, sizeof to}};
    EXPECT(kvs_comm_exchange,
           kvs_comm_exchange(self, both, 2, NULL) == KVS_OK && strcmp(to, "abc") == 0);
    kvs_comm_destroy(self);
  }
}

static void nulls_of_nodes(void) {
  kvs_node_options_init(NULL);
  CALLED(kvs_node_options_init);
  kvs_node_options o;
  kvs_node_options_init(&o);
  kvs_node_t node = NULL;
  REFUSES(kvs_node_create, kvs_node_create(NULL, &o, &node, &e_));
  REFUSES(kvs_node_create_flags, kvs_node_create_flags(NULL, NULL, 0, &node, &e_));
  EXPECT(kvs_node_flags_help, strstr(kvs_node_flags_help(), "--page") != NULL);
  kvs_node_destroy(NULL);
  CALLED(kvs_node_destroy);
  int64_t slot = 0, loc = 0;
  REFUSES(kvs_node_admit, kvs_node_admit(NULL, 1, &slot, &e_));
  REFUSES(kvs_node_bind, kvs_node_bind(NULL, 1, &loc, 1, &e_));
  REFUSES(kvs_node_free, kvs_node_free(NULL, &loc, 1, &e_));
  REFUSES(kvs_node_bind_pages, kvs_node_bind_pages(NULL, 1, &loc, 1, &e_));
  REFUSES(kvs_node_free_pages, kvs_node_free_pages(NULL, &loc, 1, &e_));
  REFUSES(kvs_node_finish, kvs_node_finish(NULL, 1, &e_));
  REFUSES(kvs_node_step, kvs_node_step(NULL, NULL, NULL, &e_));
  REFUSES(kvs_node_translate, kvs_node_translate(NULL, &loc, 1, &slot, &e_));
  REFUSES(kvs_node_check, kvs_node_check(NULL, NULL, &e_));
  EXPECT(kvs_divergence_name,
         strcmp(kvs_divergence_name((kvs_divergence)99), "unknown") == 0 &&
             strcmp(kvs_divergence_name(KVS_DIVERGENCE_PREFIX_BLOCK), "prefix block") == 0);
  {
    kvs_node_prefix_hit hit = {.size = sizeof hit};
    kvs_node_prefix_counts counts = {.size = sizeof counts};
    uint64_t key = 1;
    int64_t page = 1, freed = 0;
    uint8_t taken = 0;
    size_t n_freed = 0;
    REFUSES(kvs_node_prefix_match, kvs_node_prefix_match(NULL, &key, 1, 1000, 0, &hit, NULL, &e_));
    REFUSES(kvs_node_prefix_acquire, kvs_node_prefix_acquire(NULL, 1, &hit, &e_));
    REFUSES(kvs_node_prefix_fetch, kvs_node_prefix_fetch(NULL, 1, &hit, &key, 1, &page, &e_));
    REFUSES(kvs_node_prefix_insert,
            kvs_node_prefix_insert(NULL, 1, &key, &page, NULL, 1, &taken, &e_));
    REFUSES(kvs_node_prefix_release, kvs_node_prefix_release(NULL, 1, &e_));
    REFUSES(kvs_node_prefix_abandon, kvs_node_prefix_abandon(NULL, 1, &e_));
    REFUSES(kvs_node_prefix_evict, kvs_node_prefix_evict(NULL, 1, 0, &freed, 1, &n_freed, &e_));
    REFUSES(kvs_node_prefix_evict_for_fetch,
            kvs_node_prefix_evict_for_fetch(NULL, &hit, &key, 1, 1, &freed, 1, &n_freed, &e_));
    REFUSES(kvs_node_prefix_stats, kvs_node_prefix_stats(NULL, &counts, &e_));
  }
  {
    int64_t page = 0, slot = 0;
    size_t n_rows = 0;
    kvs_node_rows rows;
    int peer = 1;
    kvs_node_transfer t = {sizeof t, 1, &page, 1, 1, 0, &peer, 1, 0};
    kvs_node_transfer_report r = {.size = sizeof r};
    REFUSES(kvs_node_request_rows, kvs_node_request_rows(NULL, &t, &rows, 1, &n_rows, &e_));
    REFUSES(kvs_node_import_admit, kvs_node_import_admit(NULL, &t, &slot, &e_));
    REFUSES(kvs_node_send_request, kvs_node_send_request(NULL, NULL, &t, &r, &e_));
    REFUSES(kvs_node_receive_request, kvs_node_receive_request(NULL, NULL, &t, &r, &e_));
  }
  EXPECT(kvs_node_rank, kvs_node_rank(NULL) == -1);
  EXPECT(kvs_node_size, kvs_node_size(NULL) == 0);
  EXPECT(kvs_node_is_leader, !kvs_node_is_leader(NULL));
  EXPECT(kvs_node_page, kvs_node_page(NULL) == 0);
  EXPECT(kvs_node_num_pages, kvs_node_num_pages(NULL) == 0);
  EXPECT(kvs_node_window_pages, kvs_node_window_pages(NULL) == 0);
  EXPECT(kvs_node_max_running, kvs_node_max_running(NULL) == 0);
  EXPECT(kvs_node_usable_pages, kvs_node_usable_pages(NULL) == 0);
  REFUSES(kvs_node_release, kvs_node_release(NULL, 0, NULL, &e_));
  REFUSES(kvs_node_set_result_buffers, kvs_node_set_result_buffers(NULL, NULL, &e_));
  {
    kvs_node_capacity capacity = {.size = sizeof capacity};
    REFUSES(kvs_node_capacity_of, kvs_node_capacity_of(NULL, &capacity, &e_));
  }
  {
    uint64_t droppable = 7;
    EXPECT(kvs_node_free_window_pages, kvs_node_free_window_pages(NULL, NULL) == 0 &&
                                           kvs_node_free_window_pages(NULL, &droppable) == 0 &&
                                           droppable == 0);
  }
  EXPECT(kvs_node_device_of, kvs_node_device_of(NULL) == KVS_NODE_DEVICE_AUTO);
  EXPECT(kvs_node_cuda_device, kvs_node_cuda_device(NULL) == -1);
  EXPECT(kvs_node_view_count, kvs_node_view_count(NULL) == 0);
  kvs_node_view view = {.size = sizeof view};
  REFUSES(kvs_node_view_at, kvs_node_view_at(NULL, 0, &view, &e_));
  EXPECT(kvs_view_dtype_bytes, kvs_view_dtype_bytes((kvs_view_dtype)99) == 0);
}

/* One rank on the host twin: the calls an engine makes, in order. A step
 * carries the request's slot with its pages (2 pages + 1 slot bound, then
 * freed). */
static int one_node(void) {
  kvs_error err;
  kvs_geometry geometry;
  kvs_comm_t comm = NULL;
  kvs_node_t node = NULL;
  if (kvs_geometry_builtin("dsv4-flash", &geometry, &err) != KVS_OK ||
      kvs_comm_self_create(&comm, &err) != KVS_OK) {
    fprintf(stderr, "setup: %s\n", err.message);
    return 1;
  }
  kvs_node_options o;
  kvs_node_options_init(&o);
  o.geometry = &geometry;
  o.topology = "bundled";
  o.device = KVS_NODE_DEVICE_CPU;
  o.max_running = 2;
  o.max_seq_len = 4096;
  o.budget_bytes = 1ull << 30;
  o.bind_numa = false;
  o.prefix_cache = true;
  if (kvs_node_create(comm, &o, &node, &err) != KVS_OK) {
    fprintf(stderr, "node: %s\n", err.message);
    kvs_comm_destroy(comm);
    return 1;
  }
  uint64_t page = kvs_node_page(node);
  int64_t locs[256], slots[256], slot = -1;
  for (uint64_t i = 0; i < 2 * page && i < 256; i++) locs[i] = (int64_t)i;
  kvs_node_step_result r = {.size = sizeof r};
  kvs_node_report report = {.size = sizeof report};
  kvs_error_clear(&err);
  uint64_t free_window = kvs_node_free_window_pages(node, NULL), droppable = 1;
  int ok = kvs_node_usable_pages(node) == kvs_node_num_pages(node) - 1 &&
           free_window == kvs_node_window_pages(node) - 1 &&
           kvs_node_admit(node, 3, &slot, &err) == KVS_OK && slot >= 0 &&
           kvs_node_bind(node, 3, locs, (size_t)(2 * page), &err) == KVS_OK &&
           kvs_node_free_window_pages(node, &droppable) == free_window - 2 && droppable == 0 &&
           /* Before the step that carries them the ranks cannot agree. */
           kvs_node_check(node, &report, &err) == KVS_ERR_PENDING &&
           strstr(err.message, "3 entries pending") != NULL &&
           kvs_node_step(node, NULL, &r, &err) == KVS_OK && r.binds == 3 &&
           kvs_node_translate(node, locs, (size_t)(2 * page), slots, &err) == KVS_OK &&
           slots[0] >= 0 && kvs_node_free(node, locs, (size_t)(2 * page), &err) == KVS_OK &&
           kvs_node_finish(node, 3, &err) == KVS_OK &&
           kvs_node_step(node, NULL, &r, &err) == KVS_OK && r.frees == 3 &&
           kvs_node_check(node, &report, &err) == KVS_OK && report.kind == KVS_DIVERGENCE_NONE;
  /* The prefix cache: request 4 writes pages 2 and 3 (keys 7, 8) keeping
   * page 3's window as the tail, then request 5 hits both pages. */
  {
    int64_t w[256];
    uint64_t keys[3] = {7, 8, 9};
    int64_t pages[2] = {2, 3}, hit_pages[3] = {-1, -1, -1};
    uint8_t tails[2] = {0, 1}, taken[2] = {0, 0};
    kvs_node_prefix_hit hit = {.size = sizeof hit};
    kvs_node_prefix_counts counts = {.size = sizeof counts};
    for (uint64_t i = 0; i < 2 * page && i < 256; i++) w[i] = (int64_t)(2 * page + i);
    ok = ok && kvs_node_admit(node, 4, &slot, &err) == KVS_OK &&
         kvs_node_bind(node, 4, w, (size_t)(2 * page), &err) == KVS_OK &&
         kvs_node_prefix_insert(node, 4, keys, pages, tails, 2, taken, &err) == KVS_OK &&
         taken[0] == 1 && taken[1] == 1 &&
         kvs_node_free(node, w, (size_t)(2 * page), &err) == KVS_OK &&
         kvs_node_prefix_release(node, 4, &err) == KVS_OK &&
         kvs_node_finish(node, 4, &err) == KVS_OK &&
         kvs_node_step(node, NULL, &r, &err) == KVS_OK &&
         /* Page 3's tail: retained, unreferenced, droppable. */
         kvs_node_free_window_pages(node, &droppable) == free_window - 1 && droppable == 1 &&
         kvs_node_prefix_match(node, keys, 3, 3 * page + 1, 0, &hit, hit_pages, &err) == KVS_OK &&
         hit.hit_tokens == 2 * page && hit.block == 3 && hit_pages[1] == 3 &&
         kvs_node_prefix_acquire(node, 5, &hit, &err) == KVS_OK &&
         kvs_node_admit(node, 5, &slot, &err) == KVS_OK &&
         kvs_node_bind(node, 5, w + page, (size_t)page, &err) == KVS_ERR_CONFLICT &&
         kvs_node_step(node, NULL, &r, &err) == KVS_OK &&
         kvs_node_prefix_stats(node, &counts, &err) == KVS_OK && counts.blocks == 2 &&
         counts.tails == 1 && counts.refs == 2 && counts.holds == 1 &&
         kvs_node_check(node, &report, &err) == KVS_OK && report.kind == KVS_DIVERGENCE_NONE &&
         /* Request 5 stops before any prefill: its exact hit wrote no
          * tail, so abandoning it releases it and the tail stays. */
         kvs_node_prefix_abandon(node, 5, &err) == KVS_OK &&
         kvs_node_step(node, NULL, &r, &err) == KVS_OK &&
         kvs_node_prefix_stats(node, &counts, &err) == KVS_OK && counts.holds == 0 &&
         counts.refs == 0 && counts.tails == 1;
    if (!ok)
      fprintf(stderr, "prefix: hit %llu node %lld: %s\n", (unsigned long long)hit.hit_tokens,
              (long long)hit.block, err.message);
  }
  /* The mapping seen in place: the pages just freed read -1 there. */
  kvs_node_view view = {.size = sizeof view};
  ok = ok && kvs_node_view_count(node) >= 2 && kvs_node_view_at(node, 0, &view, &err) == KVS_OK &&
       strcmp(view.name, "mapping") == 0 && view.dtype == KVS_VIEW_INT64 && !view.on_device &&
       ((const int64_t *)view.data)[0] == -1;
  if (!ok) {
    fprintf(stderr, "the node's calls: slot %lld, binds %zu, frees %zu, check %d: %s\n",
            (long long)slot, r.binds, r.frees, report.kind, err.message);
  }
  kvs_node_destroy(node);
  kvs_comm_destroy(comm);
  return ok ? 0 : 1;
}

int main(void) {
  nulls_of_status_and_model();
  plans_in_process();
  nulls_of_comms();
  nulls_of_nodes();
  int node_failed = one_node();
  if (failures != 0 || node_failed != 0) {
    fprintf(stderr, "%d NULL-argument refusals missing; the node's calls %s\n", failures,
            node_failed ? "failed" : "ran");
    return 1;
  }
  return 0;
}
