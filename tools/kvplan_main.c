/* kvplan: size the DSV4 KV pool for one device (`solve`), for every rank
 * of a node (`plan`, the default when no subcommand is given), or find
 * the layouts and memory a demand needs (`fit`). */
#include <stdio.h>

#include "kvplan/args.h"
#include "kvplan/kvplan.h"

/* A plan written to a full disk is not a plan: exit 1 (the plan cannot be
 * made here) with the reason. */
int main(int argc, char **argv) {
  /* Line by line, so the notes on stdout and an error on stderr reach a
   * shared pipe in the order they were said, the error last. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = kvs_require_stdout("kvplan", 1);
  return rc != 0 ? rc : kvs_finish_stdout("kvplan", kvs_kvplan_run(argc, argv), 1);
}
