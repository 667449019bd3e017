/* Where kvplan writes its words: standard output and standard error, or,
 * while the library runs kvplan in process (kvs_plan_run), the memory
 * streams that call gave, for the calling thread only. kvplan's code
 * writes through these two and never names stdout or stderr itself, so
 * one implementation serves the command line and the library. */
#ifndef KVS_KVPLAN_TOOL_IO_H
#define KVS_KVPLAN_TOOL_IO_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

FILE *kvs_tool_out(void);
FILE *kvs_tool_err(void);

/* This thread's streams from now on; NULL for either goes back to the
 * process's own. */
void kvs_tool_streams_set(FILE *out, FILE *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_TOOL_IO_H */
