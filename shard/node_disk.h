/* The node's disk tier: the prefix cache's blocks written through to a
 * store of stored page blocks (blocks/, format version 3) in one folder
 * per rank, `<disk_path>/rank-<r>`, and found again by every rank alike
 * after a restart.
 *
 * The pool decides (pool/window_pool.h: a store is journaled when a
 * cached block's turn comes, a load when a hit reaches a block only the
 * disk tier has); every rank replays the same entries, and this file does
 * the rank's part of each in journal order, after the step's row moves:
 * a load reads its block from the rank's store, verifies it against the
 * reader (model, geometry, layer range, the page's position: chain and
 * depth) and copies it into its page; a store copies the page out and
 * writes it as a block (its position digests computed from the rows that
 * left the GPU), removing the block its disk slot held before. Only blocks the
 * tier lacks are written, so a block is written once however often it is
 * cached again.
 *
 * At creation each rank lists what its folder holds, refuses every block
 * of another model, geometry or layer range by its signature's reason
 * (left in place, not indexed), and the ranks agree on one list: the
 * leader's blocks that every rank holds, least recently used first, cut to
 * the tier's slots. Every rank seeds its pool's disk tier with that list,
 * so the first check already covers it.
 *
 * index_only (a simulator: kvsim) keeps the index without rows: the
 * list lives in `<disk_path>/rank-<r>/index-only.kvsdisk`, written
 * atomically when the node is destroyed and read at creation (refused
 * whole when its model or geometry is another's). */
#ifndef KVS_SHARD_NODE_DISK_H
#define KVS_SHARD_NODE_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "kvshard.h"
#include "pool/journal.h"

struct kvs_node;

/* Blocks one step writes at most: the rest wait for the next steps, so a
 * long prefill's blocks do not make one step long. */
#define KVS_NODE_DISK_STORES_PER_STEP 32u

/* The store key of a pool chain (the pool names blocks by 64 bits). */
#define KVS_NODE_DISK_KEY_HIGH UINT64_C(0x6b76736469736b31)

/* What the disk tier did on this rank. */
typedef struct kvs_node_disk_counts {
  uint64_t found;          /* blocks of this rank's folder at creation, ours */
  uint64_t refused;        /* ... another's, by their signature (or the list's header) */
  uint64_t agreed;         /* the list every rank seeded */
  uint64_t written;        /* blocks this rank wrote */
  uint64_t read;           /* blocks it read back, verified */
  uint64_t write_failures; /* writes that failed (a later read of it fails too) */
  uint64_t read_failures;  /* reads refused: missing, corrupt, foreign */
} kvs_node_disk_counts;

/* Collective (every rank, after the shard and tables): opens this rank's
 * folder and seeds the pool's disk tier with the agreed list. Nothing when
 * the pool has no disk tier. */
kvs_status kvs_node_disk_open(struct kvs_node *node, kvs_error *err);
/* The step's disk reads and writes, in journal order, after its row moves
 * (each through the tables' bounce buffer, waited for). A read that fails
 * leaves zeroed rows in its page and is returned after every entry ran,
 * naming the block: KVS_ERR_CORRUPT for a block missing, damaged or
 * foreign (its file then goes: it would be refused again), the status
 * itself when it could not be read (an I/O error: the file stays); a
 * failed write is counted (write_failures), not returned: the block is
 * then missing on this rank, which its read would report. */
kvs_status kvs_node_disk_io(struct kvs_node *node, const kvs_journal_entry *entries, size_t n,
                            kvs_error *err);
/* The counts (zero without a disk tier). */
void kvs_node_disk_counts_get(const struct kvs_node *node, kvs_node_disk_counts *out);
/* Writes the index-only list (index_only) and frees the tier. */
void kvs_node_disk_close(struct kvs_node *node);

#endif /* KVS_SHARD_NODE_DISK_H */
