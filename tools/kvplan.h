/* kvplan's subcommands; each takes its own argv (argv[0] is the
 * subcommand name) and returns the process exit status:
 * 0 success, 1 the plan cannot be made (budget too small; for fit, no
 * layout fits), 2 bad usage. */
#ifndef KVS_TOOLS_KVPLAN_H
#define KVS_TOOLS_KVPLAN_H

#ifdef __cplusplus
extern "C" {
#endif

int kvs_kvplan_solve(int argc, char **argv);
int kvs_kvplan_plan(int argc, char **argv);
int kvs_kvplan_fit(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_KVPLAN_H */
