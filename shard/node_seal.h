/* The host tier's seals: a position digest of each host slot's rows,
 * taken when they leave the GPU (a spill) and checked before they go back
 * (a fetch), so rows that changed in host memory, or that a slot holds for
 * another block, never reach a page unannounced. The digest is XXH3-64 of
 * the slot's bytes seeded by the block's chain (its position: every key
 * from the root), the same rule the disk tier's stored blocks follow.
 *
 * A fetch whose slot fails its check gets zeroed rows instead, the slot's
 * seal is dropped, and the step returns KVS_ERR_CORRUPT naming the block,
 * its slot and its page. Seals are taken on the host twin, whose copies
 * are done when they return; a device's copies finish on its stream, which
 * a step must not wait for (the engine's work is queued ahead of them), so
 * a device node takes none yet. An index-only node has no rows and takes
 * none. */
#ifndef KVS_SHARD_NODE_SEAL_H
#define KVS_SHARD_NODE_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "pool/journal.h"

struct kvs_node;

/* The step's fetches, before its row moves: each slot checked against its
 * seal; a failing one is remembered for after. */
kvs_status kvs_node_seal_check(struct kvs_node *node, const kvs_journal_entry *entries, size_t n,
                               kvs_error *err);
/* After the row moves: the failing fetches' pages zeroed (their error
 * returned), the spilled slots sealed. */
kvs_status kvs_node_seal_take(struct kvs_node *node, const kvs_journal_entry *entries, size_t n,
                              kvs_error *err);
/* Fetches refused by their seal so far; bytes sealed and checked, and the
 * time it took. */
typedef struct kvs_node_seal_counts {
  uint64_t failures;
  uint64_t bytes;
  uint64_t ns;
} kvs_node_seal_counts;
void kvs_node_seal_counts_get(const struct kvs_node *node, kvs_node_seal_counts *out);
void kvs_node_seal_free(struct kvs_node *node);

#endif /* KVS_SHARD_NODE_SEAL_H */
