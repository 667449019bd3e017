/* kvbench: fixed workloads timed in-process; prints a table, or with
 * --json one object on the last line of stdout. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "tools/bench_block.h"
#include "tools/bench_core.h"

static void usage(FILE *out) {
  fputs("usage: kvbench [--json] [--quick]\n"
        "  --json    one JSON object on the last line of stdout\n"
        "  --quick   1/100 of the iterations (a smoke run, not a measurement)\n",
        out);
}

int main(int argc, char **argv) {
  int json = 0, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "kvbench: unknown flag '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  json_t *results = json_object();
  int failed = kvs_bench_core(results, quick);
  kvs_bench_block(results, quick);
  json_t *block_error = json_object_get(results, "block_error");
  if (block_error != NULL) {
    fprintf(stderr, "kvbench: block codec: %s\n", json_string_value(block_error));
    failed = 1;
  }
  if (failed) {
    json_decref(results);
    return 1;
  }
  if (json) {
    char *text = json_dumps(results, JSON_COMPACT | JSON_REAL_PRECISION(6));
    printf("%s\n", text);
    free(text);
  } else {
    const char *key;
    json_t *value;
    printf("%-28s %14s\n", "workload", "result");
    json_object_foreach(results, key, value) {
      printf("%-28s %14.3f\n", key, json_number_value(value));
    }
    printf("(ns: mean per operation; gbps: GB/s of encoded block)\n");
  }
  json_decref(results);
  return 0;
}
