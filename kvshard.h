/* kvshard: the whole public API in one header.
 *
 * An engine outside Bazel includes this and links libkvshard.so:
 *   cc engine.c $(pkg-config --cflags --libs kvshard)
 * (tools/install.sh PREFIX installs the library, the headers and
 * kvshard.pc). The headers below are the reference; ARCHITECTURE.md says
 * what each folder owns. Private helpers (the window pool's internals,
 * checked arithmetic, the clock and file-kind helpers (which need POSIX
 * feature macros), the kernels' shared math and launchers, the
 * backends' waits) are not part of the API and are left out. */
#ifndef KVS_KVSHARD_H
#define KVS_KVSHARD_H

/* core/ */
#include "core/cost_model.h"
#include "core/device_ref.h"
#include "core/free_list.h"
#include "core/geometry.h"
#include "core/journal.h"
#include "core/memory_budget.h"
#include "core/mix.h"
#include "core/model_config.h"
#include "core/model_weights.h"
#include "core/options.h"
#include "core/regular_file.h"
#include "core/safetensors.h"
#include "core/serving_defaults.h"
#include "core/sglang_pools.h"
#include "core/status.h"
#include "core/version.h"
#include "core/window_pool.h"

/* core/blocks/ */
#include "core/blocks/atomic_file.h"
#include "core/blocks/bf16.h"
#include "core/blocks/block_codec.h"
#include "core/blocks/block_hash.h"
#include "core/blocks/block_layout.h"
#include "core/blocks/block_signature.h"
#include "core/blocks/block_signed.h"
#include "core/blocks/block_store.h"

/* topology/ */
#include "topology/binding.h"
#include "topology/cuda_probe.h"
#include "topology/gpu.h"
#include "topology/layout.h"
#include "topology/node_plan.h"
#include "topology/source.h"
#include "topology/stage_split.h"
#include "topology/topology.h"

/* cuda/ */
#include "cuda/cuda_device.h"
#include "cuda/cuda_status.h"
#include "cuda/device_budget.h"
#include "cuda/device_layout.h"
#include "cuda/device_tables.h"

/* shard/ */
#include "shard/budget.h"
#include "shard/cluster.h"
#include "shard/cluster_gather.h"
#include "shard/comm.h"
#include "shard/comm_loopback.h"
#include "shard/comm_mpi.h"
#include "shard/comm_nccl.h"
#include "shard/comm_self.h"
#include "shard/layout.h"
#include "shard/node.h"
#include "shard/node_setup.h"
#include "shard/shard.h"
#include "shard/step_message.h"
#include "shard/table.h"
#include "shard/table_cuda.h"
#include "shard/workload.h"

#endif /* KVS_KVSHARD_H */
