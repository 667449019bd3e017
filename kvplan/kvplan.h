/* kvplan's subcommands; each takes its own argv (argv[0] is the
 * subcommand name), writes through kvplan/tool_io.h and returns the
 * process exit status:
 * 0 success, 1 the plan cannot be made (budget too small; for fit, no
 * layout fits; for transfer, the decode side holds no request), 2 bad
 * usage. */
#ifndef KVS_KVPLAN_KVPLAN_H
#define KVS_KVPLAN_KVPLAN_H

#include "kvplan/deploy_flags.h" /* KVS_KVPLAN_MAX_GPUS */

#ifdef __cplusplus
extern "C" {
#endif

/* argv[1] the subcommand (none: plan's flags), as the program takes it. */
int kvs_kvplan_run(int argc, char **argv);
int kvs_kvplan_solve(int argc, char **argv);
int kvs_kvplan_plan(int argc, char **argv);
int kvs_kvplan_fit(int argc, char **argv);
int kvs_kvplan_transfer(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_KVPLAN_H */
