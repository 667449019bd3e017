/* Asks the backend registry for one backend's table, as a consumer does,
 * and prints what it answered: the status's name, whether the load
 * stopped at a broken file (1 or 0), then the message, one a line. Exit 0
 * whatever the answer (a crash is the signal the caller looks for), 2 on
 * bad usage. backend_registry_test runs it in the environments it sets
 * up, one load per process.
 * With KVS_PROBE_PRELOAD set, that file is loaded first (RTLD_GLOBAL), as an
 * engine's own libraries are before it asks.
 *   backend_probe cuda|nccl|mpi */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"

int main(int argc, char **argv) {
  static const char *const kinds[] = {"cuda", "nccl", "mpi"};
  int kind = -1;
  for (int i = 0; argc == 2 && i < 3; i++) {
    if (strcmp(argv[1], kinds[i]) == 0) kind = i;
  }
  if (kind < 0) {
    fprintf(stderr, "usage: backend_probe cuda|nccl|mpi\n");
    return 2;
  }
  const char *preload = getenv("KVS_PROBE_PRELOAD");
  if (preload != NULL && dlopen(preload, RTLD_NOW | RTLD_GLOBAL) == NULL) {
    fprintf(stderr, "backend_probe: %s\n", dlerror());
    return 2;
  }
  const void *table = NULL;
  kvs_error err;
  kvs_error_clear(&err);
  kvs_status status = kvs_backend_table((kvs_backend_kind)kind, "kvs_backend_probe_entry", NULL,
                                        sizeof(kvs_backend_header), &table, &err);
  printf("%s\n%d\n%s\n", kvs_status_name(status),
         kvs_backend_broken((kvs_backend_kind)kind) ? 1 : 0, err.message);
  return 0;
}
