/* kvbench: fixed workloads timed in-process; prints a table, or with
 * --json one object on the last line of stdout. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplan/args.h"
#include "tools/bench_block.h"
#include "tools/bench_core.h"
#include "tools/bench_tier.h"

static void usage(FILE *out) {
  fputs(
      "usage: kvbench [--json] [--quick]\n"
      "  --json    one JSON object on the last line of stdout\n"
      "  --quick   1/100 of the iterations (a smoke run, not a measurement)\n",
      out);
}

/* The flags into *json and *quick: 0 to run, -1 after --help, 2 after a
 * one-line message (a flag given twice is refused, as by every tool). */
static int parse(int argc, char **argv, bool *json, bool *quick) {
  static const char *const names[] = {"--json", "--quick", "--help"};
  bool seen[3] = {false, false, false};
  for (int i = 1; i < argc; i++) {
    size_t k = 0;
    while (k < 3 && strcmp(argv[i], names[k]) != 0) k++;
    if (k == 3 && strcmp(argv[i], "-h") == 0) k = 2;
    if (k == 3) {
      kvs_report_unknown_flag("kvbench", argv[i], names, 3, "kvbench --help");
      return 2;
    }
    if (seen[k]) {
      fprintf(stderr, "kvbench: %s is given twice; give it once\n", names[k]);
      return 2;
    }
    seen[k] = true;
    if (k == 2) {
      usage(stdout);
      return -1;
    }
  }
  *json = seen[0];
  *quick = seen[1];
  return 0;
}

/* The results for people: one line per workload. */
static void print_table(json_t *results) {
  const char *key;
  json_t *value;
  printf("%-28s %14s\n", "workload", "result");
  json_object_foreach(results, key, value) {
    printf("%-28s %14.3f\n", key, json_number_value(value));
  }
  printf(
      "(ns: mean per operation; gbps: GB/s of encoded block, or of the host tier's slots "
      "moved; tier_spill_vs_memcpy: the spill's GB/s over memcpy's of the same spans)\n");
}

/* Exit status: 0 measured and printed, 1 a workload failed or the results
 * could not be written (a full disk, a closed stdout), 2 bad usage. */
static int run(int argc, char **argv) {
  bool json = false, quick = false;
  int rc = parse(argc, argv, &json, &quick);
  if (rc != 0) return rc < 0 ? 0 : rc;
  json_t *results = json_object();
  int failed = kvs_bench_core(results, quick);
  failed |= kvs_bench_tier(results, quick);
  kvs_bench_block(results, quick);
  json_t *block_error = json_object_get(results, "block_error");
  if (block_error != NULL) {
    fprintf(stderr, "kvbench: block codec: %s\n", json_string_value(block_error));
    failed = 1;
  }
  if (!failed && json) {
    char *text = json_dumps(results, JSON_COMPACT | JSON_REAL_PRECISION(6));
    printf("%s\n", text);
    free(text);
  } else if (!failed) {
    print_table(results);
  }
  json_decref(results);
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  int rc = kvs_require_stdout("kvbench", 1);
  if (rc != 0) return rc;
  /* Results lost to a full disk are no results: exit 1, said on stderr. */
  return kvs_finish_stdout("kvbench", run(argc, argv), 1);
}
