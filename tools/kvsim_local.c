/* kvsim_local: kvsim with its ranks as threads of one process, so it runs
 * where there is no MPI (a GPU machine running tools/device-check.sh):
 *
 *   kvsim_local --ranks N --tp N [--pp M] [--backend loopback|nccl|self]
 *               --steps S --seed X [--device cpu|cuda] [--cuda-device D] ...
 *
 * loopback: the ranks' collectives are host memory exchanges (every rank's
 * tables may share one GPU); nccl: one NCCL rank per thread, bootstrapped
 * over loopback (each on its own GPU, --cuda-device for one rank); self:
 * one rank. The flags, the output and the exit status are kvsim's.
 *
 *   kvsim_local --pd PREFILL:DECODE --trace FILE ...
 *
 * replays a trace through two nodes with rows, prefill and decode, and
 * moves every request between them (tools/kvsim_pd.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/comm_loopback.h"
#include "shard/comm_self.h"
#include "plan/node_setup.h"
#include "kvplan/args.h"
#include "tools/kvsim_args.h"
#include "tools/kvsim_pd.h"
#include "tools/kvsim_run.h"

typedef struct rank_thread {
  pthread_t thread;
  int rank;
  const kvsim_args *a;
  kvs_comm_loopback_group_t group;
  int code;
  kvs_comm_t comm, loop; /* kept by a killed rank until the end */
} rank_thread;

/* One rank: its communicator (loopback, or NCCL bootstrapped over it),
 * then the simulation. */
static void *run_rank(void *arg) {
  rank_thread *t = arg;
  const kvsim_args *a = t->a;
  kvs_comm_t loop = NULL, comm = NULL;
  kvs_error err;
  kvs_error_clear(&err);
  kvs_status status = strcmp(a->backend, "self") == 0
                          ? kvs_comm_self_create(&loop, &err)
                          : kvs_comm_loopback_create(t->group, t->rank, a->timeout_ms, &loop, &err);
  /* nccl: the node makes its NCCL communicator over the loopback one. */
  if (status == KVS_OK && strcmp(a->backend, "nccl") == 0) status = kvsim_nccl_ready(&err);
  comm = loop;
  loop = NULL;
  if (status != KVS_OK) {
    if (t->rank == 0) {
      fprintf(stderr, "kvsim_local: %s backend unavailable: %s\n", a->backend, err.message);
    }
    t->code = status == KVS_ERR_UNSUPPORTED ? KVSIM_EXIT_UNAVAILABLE : KVSIM_EXIT_FAILED;
    kvs_comm_destroy(comm);
    comm = NULL;
  } else {
    t->code = kvsim_simulate(comm, a, true);
  }
  if (t->code == KVSIM_RANK_KILLED) {
    /* A dead rank does not leave its group: main frees its communicator
     * once every survivor is done. */
    t->comm = comm;
    t->loop = loop;
    return NULL;
  }
  kvs_comm_destroy(comm);
  kvs_comm_destroy(loop);
  return NULL;
}

int main(int argc, char **argv) {
  kvsim_args a;
  int code = kvsim_parse(argc, argv, true, true, &a);
  if (code != 0) {
    return code < 0 ? 0 : code;
  }
  if (a.pd) {
    /* Prefill on one node, decode on another (tools/kvsim_pd.h). */
    code = kvsim_pd_run(&a);
    int written = kvs_finish_stdout("kvsim_local", code == KVSIM_EXIT_NOT_WHOLE ? 0 : code,
                                    KVSIM_EXIT_FAILED);
    return written == 0 ? code : written;
  }
  if (strcmp(a.backend, "self") == 0 && a.ranks != 1) {
    fprintf(stderr, "kvsim_local: --backend self runs one rank, not %d\n", a.ranks);
    return KVSIM_EXIT_USAGE;
  }
  kvs_comm_loopback_group_t group = NULL;
  kvs_error err;
  /* One topology held while the rank threads run: hwloc unloads its
   * plugins (libxml2 under the XML one) with the last topology, and a
   * thread that parsed XML frees its libxml2 state at exit only while the
   * library is still loaded. Holding one here keeps them loaded until every
   * rank thread has exited. A topology that does not load is the ranks'
   * own error to report. */
  kvs_topology_t held = NULL;
  (void)kvs_host_topology_open(a.deploy.topology, &held, NULL, 0, NULL);
  if (kvs_comm_loopback_group_create(a.ranks, &group, &err) != KVS_OK) {
    fprintf(stderr, "kvsim_local: %s\n", err.message);
    kvs_topology_destroy(held);
    return KVSIM_EXIT_FAILED;
  }
  rank_thread *threads = calloc((size_t)a.ranks, sizeof *threads);
  if (threads == NULL) {
    kvs_topology_destroy(held);
    kvs_comm_loopback_group_destroy(group);
    return KVSIM_EXIT_FAILED;
  }
  int started = 0;
  for (int r = 0; r < a.ranks; r++) {
    threads[r] = (rank_thread){.rank = r, .a = &a, .group = group, .code = KVSIM_EXIT_FAILED};
    if (pthread_create(&threads[r].thread, NULL, run_rank, &threads[r]) != 0) break;
    started++;
  }
  /* The worst rank's status is the process's: a divergence or failure
   * anywhere is the run's. */
  code = started == a.ranks ? KVSIM_EXIT_AGREE : KVSIM_EXIT_FAILED;
  int survivors = 0;
  for (int r = 0; r < started; r++) {
    pthread_join(threads[r].thread, NULL);
    /* The survivors speak for the run; a killed rank says nothing. */
    if (threads[r].code == KVSIM_RANK_KILLED) continue;
    survivors++;
    if (threads[r].code > code) code = threads[r].code;
  }
  if (started > 0 && survivors == 0) {
    fprintf(stderr, "kvsim_local: no rank survived the drill\n");
    code = KVSIM_EXIT_FAILED;
  }
  for (int r = 0; r < started; r++) {
    kvs_comm_destroy(threads[r].comm);
    kvs_comm_destroy(threads[r].loop);
  }
  free(threads);
  kvs_comm_loopback_group_destroy(group);
  kvs_topology_destroy(held);
  /* Rank 0's report lost to a full disk is a failed run (exit 4). */
  /* A trace not served whole (exit 1) is no failure to write: a report
   * lost to a full disk is exit 4 all the same. */
  int written =
      kvs_finish_stdout("kvsim_local", code == KVSIM_EXIT_NOT_WHOLE ? 0 : code, KVSIM_EXIT_FAILED);
  return written == 0 ? code : written;
}
