/* kvplan's dispatch, shared by the program (kvplan_main.c) and the
 * library's in-process entry (kvs_plan_run, plan_api.c). */
#include <string.h>

#include "kvplan/args.h"
#include "kvplan/kvplan.h"
#include "kvplan/tool_io.h"

static void usage(FILE *out) {
  fputs(
      "usage: kvplan [plan] [flags]     per-rank plan for this node (the default)\n"
      "       kvplan solve [flags]      byte-exact pool for one device\n"
      "       kvplan fit --context L --concurrency C [flags]\n"
      "                                 which tp x pp layouts serve C requests of L tokens,\n"
      "                                 and with how much memory\n"
      "       kvplan transfer --context L --prefill-tp N --decode-tp N [flags]\n"
      "                                 what one request's prefill/decode transfer moves\n"
      "                                 per pool and per link, and what decode holds\n"
      "       kvplan <subcommand> --help for the flags of each\n",
      out);
}

int kvs_kvplan_run(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "solve") == 0) return kvs_kvplan_solve(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "plan") == 0) return kvs_kvplan_plan(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "fit") == 0) return kvs_kvplan_fit(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "transfer") == 0) {
    return kvs_kvplan_transfer(argc - 1, argv + 1);
  }
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(kvs_tool_out());
    return 0;
  }
  if (argc >= 2 && argv[1][0] != '-') {
    static const char *const subcommands[] = {"plan", "solve", "fit", "transfer"};
    const char *near = kvs_nearest_flag(argv[1], subcommands, 4);
    fprintf(kvs_tool_err(), "kvplan: unknown subcommand '%s'%s%s%s (kvplan --help lists them)\n",
            argv[1], near != NULL ? "; did you mean " : "", near != NULL ? near : "",
            near != NULL ? "?" : "");
    return 2;
  }
  /* No subcommand: flags belong to `plan`. */
  argv[0] = "plan";
  return kvs_kvplan_plan(argc, argv);
}
