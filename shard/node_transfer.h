/* A request's rows from prefill ranks to decode ranks (kvshard.h's
 * kvs_node_send_request / kvs_node_receive_request), with what a test
 * needs beside them: a fault planted in one unit's destination on one
 * decode rank, as a transfer that applied one pool's wrong page would
 * write. Private to shard/ and its tests. */
#ifndef KVS_SHARD_NODE_TRANSFER_H
#define KVS_SHARD_NODE_TRANSFER_H

#include <stdint.h>

#include "kvshard.h"
#include "shard/transfer_rows.h"

#ifdef __cplusplus
extern "C" {
#endif

/* On the decode side: the `unit`-th unit (travel order, among this rank's)
 * of pool `pool` lands `shift` units' steps away from where it belongs. */
typedef struct kvs_transfer_plant {
  kvs_xfer_pool pool;
  uint64_t unit;
  int64_t shift;
} kvs_transfer_plant;

kvs_status kvs_node_receive_planted(kvs_node_t node, kvs_comm_t link,
                                    const kvs_node_transfer *transfer,
                                    const kvs_transfer_plant *plant,
                                    kvs_node_transfer_report *report, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_NODE_TRANSFER_H */
