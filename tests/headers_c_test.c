/* Every public header compiles as pure C11 (the tests are C++, so without
 * this nothing would notice a C++-only construct creeping into a header),
 * and the basic lifecycle links from C. */
#include <stdio.h>

#include "core/cost_model.h"
#include "core/free_list.h"
#include "core/geometry.h"
#include "core/journal.h"
#include "core/status.h"
#include "core/window_pool.h"

int main(void) {
  kvs_geometry geometry;
  kvs_error err;
  if (kvs_geometry_builtin("dsv4-flash", &geometry, &err) != KVS_OK) {
    fprintf(stderr, "builtin geometry: %s\n", err.message);
    return 1;
  }
  kvs_pool_sizes sizes;
  if (kvs_solve_num_pages(8ull << 30, &geometry, 0.125, 21, KVS_DEFAULT_WINDOW_PAGE, 1, &sizes,
                          NULL, &err) != KVS_OK) {
    fprintf(stderr, "solve: %s\n", err.message);
    return 1;
  }
  kvs_window_pool_t pool = NULL;
  if (kvs_window_pool_create(&sizes, NULL, &pool, &err) != KVS_OK) {
    fprintf(stderr, "pool: %s\n", err.message);
    return 1;
  }
  int ok = kvs_window_pool_check_integrity(pool, &err) == KVS_OK;
  kvs_window_pool_destroy(pool);
  kvs_window_pool_destroy(NULL);
  kvs_free_list_destroy(NULL);
  kvs_journal_destroy(NULL);
  if (!ok) fprintf(stderr, "integrity: %s\n", err.message);
  return ok ? 0 : 1;
}
