/* The node's state, shared by its parts: node.c (create, the plan and
 * what it carves), node_step.c (the step and the checks) and
 * node_requests.c (the engine's request calls). Private to shard/. */
#ifndef KVS_SHARD_NODE_INTERNAL_H
#define KVS_SHARD_NODE_INTERNAL_H

#include "plan/node_overhead.h"
#include "shard/node.h"

struct kvs_node {
  kvs_comm_t comm;      /* the engine's: create's collectives */
  kvs_comm_t step_comm; /* the steps' and checks' (comm, or the node's own NCCL one) */
  bool owns_step_comm;
  int rank, size;
  kvs_node_options options;
  kvs_budget_request budget; /* the options' budget terms, as node_setup takes them */
  kvs_status options_status; /* adopting the caller's options */
  kvs_error options_err;
  kvs_geometry geometry;
  kvs_row_widths widths;
  kvs_plan_request request;
  kvs_cluster_t cluster;   /* every node's GPUs; its own node's topology */
  bool owns_cluster;       /* false: lent by kvs_node_create_in_cluster */
  kvs_topology_t topology; /* this rank's node's (owned by the cluster) */
  char note[768];
  size_t n_gpus;
  kvs_memory_budget *budgets;
  kvs_deployment_t plan;
  kvs_gpu_info gpu;
  kvs_binding_report binding;
  kvs_device_layout *layout;
  kvs_table_t table;
  bool table_reads_device_entries; /* the tables read the broadcast's device buffer */
  kvs_shard_t shard;
  kvs_node_overhead buffers; /* what this rank puts on its GPU beside its carve (checked) */
  kvs_comm_buffer words;     /* collective scratch */
  size_t words_count;
  /* Host copies of the last step's ring contexts, for digests. */
  size_t max_batch;
  int64_t *h_own, *h_prev, *h_ring;
  int64_t *h_csa, *h_hca; /* the batch's ratio-4 and ratio-128 ring locations */
  int64_t *h_slots;       /* the batch's request slots, resolved after the apply */
  /* An engine's window rows, rebased for the tables (kvs_node_step). */
  int32_t *w_blocks;
  int64_t *w_positions;
  size_t host_rows; /* rows valid in the host copies; 0 when stale */
  /* The step's contract with the engine (node_contract.c): each step's
   * rows by step parity, as the result shows them; the engine's result
   * buffers; the last step released per parity (explicit_release); the
   * leader's staging of what a step carries. */
  uint64_t *rows_requests[2];
  int64_t *rows_positions[2], *rows_lengths[2];
  size_t rows_n[2];
  bool rows_ranged[2];
  kvs_node_result_buffers results;
  bool has_results;
  uint64_t released[2];
  size_t app_capacity;
  unsigned char *app;
  int64_t *last_positions; /* range rows' last positions, for the tables */
  int64_t *check_map;      /* the tables' mapping, downloaded by checks */
  kvs_node_stats stats;
  struct kvs_node_disk *disk;   /* the disk tier (node_disk.c); NULL: none */
  struct kvs_node_seals *seals; /* the host tier's seals (node_seal.c); NULL: none yet */
};

/* Collective (node.c): every rank says whether its local part of `stage`
 * succeeded; when any failed, every rank returns the lowest failing rank's
 * status and message. */
kvs_status kvs_node_agree(kvs_node_t node, const char *stage, kvs_status local,
                          const kvs_error *local_err, kvs_error *err);

/* ---- node_contract.c ---- */

/* Bytes a step message carries for the engine (0: none). */
size_t kvs_node_app_capacity(bool carry_batch, size_t max_batch, size_t max_payload_bytes);
/* The contract's buffers, before the shard (it sizes the message). */
kvs_status kvs_node_contract_create(kvs_node_t node, kvs_error *err);
void kvs_node_contract_destroy(kvs_node_t node);
/* The engine's result buffers (NULL: the node's own) given to the tables. */
kvs_status kvs_node_results_adopt(kvs_node_t node, const kvs_node_result_buffers *b,
                                  kvs_error *err);
/* With explicit_release: step `step` may overwrite the results it would. */
kvs_status kvs_node_release_check(const struct kvs_node *node, uint64_t step, kvs_error *err);
/* Range rows' bounds (a batch whose lengths are NULL passes). */
kvs_status kvs_node_check_ranges(const struct kvs_node *node, const kvs_node_batch *b,
                                 kvs_error *err);
/* The engine's rows of step `step`, kept for its result (n of b). */
void kvs_node_keep_rows(kvs_node_t node, uint64_t step, const kvs_node_batch *b, size_t n);
/* The leader's application bytes for a step (n rows of b, whose window
 * rows are in w_blocks and w_positions; b may be NULL), in node->app;
 * returns their length. */
size_t kvs_node_pack(kvs_node_t node, const kvs_node_batch *b, size_t n);
/* A follower's: the carried rows into w_blocks, w_positions and the
 * step's row copies (*n of them), and where the payload is. */
kvs_status kvs_node_unpack(kvs_node_t node, uint64_t step, const void *app, size_t bytes, size_t *n,
                           const void **payload, size_t *payload_bytes, kvs_error *err);

/* What a host slot costs the machine: one page's compressed and indexer
 * rows for every rank it runs (kvs_deployment_host_slot_bytes). */
uint64_t kvs_node_host_page_bytes(const struct kvs_node *node);

#endif /* KVS_SHARD_NODE_INTERNAL_H */
