/* kvplan: size the DSV4 KV pool for one device (`solve`), for every rank
 * of a node (`plan`, the default when no subcommand is given), or find
 * the layouts and memory a demand needs (`fit`). */
#include <stdio.h>
#include <string.h>

#include "tools/args.h"
#include "tools/kvplan.h"

static void usage(FILE *out) {
  fputs(
      "usage: kvplan [plan] [flags]     per-rank plan for this node (the default)\n"
      "       kvplan solve [flags]      byte-exact pool for one device\n"
      "       kvplan fit --context L --concurrency C [flags]\n"
      "                                 which tp x pp layouts serve C requests of L tokens,\n"
      "                                 and with how much memory\n"
      "       kvplan <subcommand> --help for the flags of each\n",
      out);
}

static int run(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "solve") == 0) return kvs_kvplan_solve(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "plan") == 0) return kvs_kvplan_plan(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "fit") == 0) return kvs_kvplan_fit(argc - 1, argv + 1);
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc >= 2 && argv[1][0] != '-') {
    static const char *const subcommands[] = {"plan", "solve", "fit"};
    const char *near = kvs_nearest_flag(argv[1], subcommands, 3);
    fprintf(stderr, "kvplan: unknown subcommand '%s'%s%s%s (kvplan --help lists them)\n", argv[1],
            near != NULL ? "; did you mean " : "", near != NULL ? near : "",
            near != NULL ? "?" : "");
    return 2;
  }
  /* No subcommand: flags belong to `plan`. */
  argv[0] = "plan";
  return kvs_kvplan_plan(argc, argv);
}

/* A plan written to a full disk is not a plan: exit 1 (the plan cannot be
 * made here) with the reason. */
int main(int argc, char **argv) {
  /* Line by line, so the notes on stdout and an error on stderr reach a
   * shared pipe in the order they were said, the error last. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = kvs_require_stdout("kvplan", 1);
  return rc != 0 ? rc : kvs_finish_stdout("kvplan", run(argc, argv), 1);
}
