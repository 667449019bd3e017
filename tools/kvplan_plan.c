/* kvplan plan: placeholder until the per-rank planner lands (issue 4). */
#include <stdio.h>

#include "tools/kvplan.h"

int kvs_kvplan_plan(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "kvplan plan: the per-rank planner is not built yet; use `kvplan solve`\n");
  return 2;
}
