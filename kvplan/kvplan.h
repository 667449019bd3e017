/* kvplan's subcommands; each takes its own argv (argv[0] is the
 * subcommand name), writes through kvplan/tool_io.h and returns the
 * process exit status:
 * 0 success, 1 the plan cannot be made (budget too small; for fit, no
 * layout fits), 2 bad usage. */
#ifndef KVS_KVPLAN_KVPLAN_H
#define KVS_KVPLAN_KVPLAN_H

#ifdef __cplusplus
extern "C" {
#endif

/* The largest tensor-parallel group or pipeline kvplan plans (--tp and
 * --pp, the default layout, fit's layouts), and the longest per-GPU list. */
#define KVS_KVPLAN_MAX_GPUS 1024

/* argv[1] the subcommand (none: plan's flags), as the program takes it. */
int kvs_kvplan_run(int argc, char **argv);
int kvs_kvplan_solve(int argc, char **argv);
int kvs_kvplan_plan(int argc, char **argv);
int kvs_kvplan_fit(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_KVPLAN_H */
