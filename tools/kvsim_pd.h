/* kvsim_local --pd PREFILL:DECODE: a trace's requests prefilled on one
 * node (the prefill layout's ranks), moved row by row to another (the
 * decode layout's) and decoded there, every rank a thread over loopback
 * communicators: one per node, and a link spanning both (prefill ranks
 * first). The nodes hold rows (the host twin, not index_only); the decode
 * node keeps the library's prefix cache under kvsim's keys
 * (kvs_workload_trace_keys), so a conversation returning to it moves only
 * the rows past its hit. Requests run one at a time, in trace order.
 * docs/simulation.md, "Prefill/decode", gives the flow and the report. */
#ifndef KVS_TOOLS_KVSIM_PD_H
#define KVS_TOOLS_KVSIM_PD_H

#include "tools/kvsim_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the whole replay; returns the exit status (KVSIM_EXIT_*). */
int kvsim_pd_run(const kvsim_args *args);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_KVSIM_PD_H */
