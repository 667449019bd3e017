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
#include "plan/memory_budget.h"
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

/* blocks/ */
#include "blocks/atomic_file.h"
#include "blocks/bf16.h"
#include "blocks/block_codec.h"
#include "blocks/block_hash.h"
#include "blocks/block_layout.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "blocks/block_store.h"

/* topology/ */
#include "topology/binding.h"
#include "topology/cuda_probe.h"
#include "topology/gpu.h"
#include "plan/rank_layout.h"
#include "plan/node_plan.h"
#include "topology/source.h"
#include "plan/stage_split.h"
#include "topology/topology.h"

/* cuda/ */
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/device_budget.h"
#include "plan/device_layout.h"
#include "backends/cuda/device_tables.h"

/* shard/ */
#include "plan/cluster.h"
#include "shard/cluster_gather.h"
#include "shard/comm.h"
#include "shard/comm_loopback.h"
#include "backends/mpi/comm_mpi.h"
#include "backends/nccl/comm_nccl.h"
#include "shard/comm_self.h"
#include "shard/node.h"
#include "plan/node_setup.h"
#include "shard/shard.h"
#include "shard/step_message.h"
#include "shard/table.h"
#include "backends/cuda/table_cuda.h"

#endif /* KVS_KVSHARD_H */
