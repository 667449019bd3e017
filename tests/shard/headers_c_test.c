/* Every public shard/ header compiles as pure C11 under the project's
 * warnings (the C++ tests include them through their extern "C" guards). */
#include "shard/budget.h"
#include "shard/comm.h"
#include "shard/comm_loopback.h"
#include "shard/comm_mpi.h"
#include "shard/comm_nccl.h"
#include "shard/comm_self.h"
#include "shard/layout.h"
#include "shard/shard.h"
#include "shard/step_message.h"
#include "shard/workload.h"

int main(void) {
  kvs_shard_options shard = KVS_SHARD_OPTIONS_INIT;
  kvs_budget_options budget = KVS_BUDGET_OPTIONS_INIT;
  kvs_workload_options workload = KVS_WORKLOAD_OPTIONS_INIT;
  kvs_comm_mpi_options mpi = KVS_COMM_MPI_OPTIONS_INIT;
  kvs_comm_nccl_options nccl = KVS_COMM_NCCL_OPTIONS_INIT;
  return shard.size == sizeof shard && budget.size == sizeof budget &&
                 workload.size == sizeof workload && mpi.size == sizeof mpi &&
                 nccl.size == sizeof nccl
             ? 0
             : 1;
}
