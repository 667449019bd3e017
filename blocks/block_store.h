/* A durable, crash-safe store of signed KV blocks in one directory.
 *
 * Each block lives in its own file named by its chain hash
 * ("<32 hex digits>.kvb") and records that key inside its checksummed
 * bytes, so a file copied or renamed under another key is caught.
 *
 * put   encodes the block, writes it to a temporary file, fsyncs it,
 *       renames it into place and fsyncs the directory (the steps of
 *       atomic_file.h). A crash at any instant leaves either the old
 *       state or the new one, never a torn file under a block's name;
 *       once put returns, the block survives a crash.
 * get   reads the file, decodes it (checksum, every length bounded),
 *       checks the recorded key, then verifies the signature against the
 *       reader (block_signature.h): corrupt, truncated, foreign or stale
 *       files each give a clear error, and only a verified block is
 *       returned.
 * open  scans the directory: temporary files left by a crashed put are
 *       removed (writers only), corrupt entries are reported and left in
 *       place (never indexed, never deleted, so nothing good is lost by a
 *       mistaken verdict), good entries are indexed by modification time
 *       for least-recently-used eviction.
 *
 * A capacity in bytes (of encoded files) is kept by evicting the least
 * recently used blocks after each put. One process at a time may open a
 * directory for writing (an advisory lock on ".lock"); any number may
 * open it read-only. All calls on a handle are thread-safe: readers may
 * get while another thread puts, and always see whole blocks.
 *
 * NULL: the kvs_status calls refuse a NULL store, directory, path, key,
 * block, expected signature or output with KVS_ERR_INVALID_ARGUMENT
 * naming it; kvs_block_store_contains is false and the counts read 0 for
 * a NULL store; kvs_block_store_file_name writes "" for a NULL key and
 * returns NULL for a NULL buf; destroy accepts NULL. */
#ifndef KVS_BLOCKS_BLOCK_STORE_H
#define KVS_BLOCKS_BLOCK_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blocks/block_hash.h"
#include "blocks/block_signature.h"
#include "blocks/block_signed.h"
#include "blocks/page_block.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_block_store *kvs_block_store_t;

/* Largest file the store will read; anything bigger is refused as
 * corrupt before a byte of it is allocated. */
#define KVS_BLOCK_STORE_MAX_FILE_BYTES ((uint64_t)1 << 31)

/* A versioned config: start from KVS_BLOCK_STORE_OPTIONS_INIT. */
typedef struct kvs_block_store_options {
  size_t size;             /* sizeof(kvs_block_store_options) */
  uint64_t capacity_bytes; /* 0: unbounded */
  bool read_only;          /* no put, no removal of temp files, no eviction */
  bool verify_on_open;     /* checksum every entry during the scan (reads it
                              all); off: envelope, length and key only */
  /* Called once per corrupt entry found by the scan (may be NULL). */
  void (*on_corrupt)(void *ctx, const char *file_name, const kvs_error *why);
  void *on_corrupt_ctx;
} kvs_block_store_options;

#define KVS_BLOCK_STORE_OPTIONS_INIT \
  { sizeof(kvs_block_store_options), 0, false, true, NULL, NULL }

/* What the scan at open found. */
typedef struct kvs_block_store_scan {
  uint64_t blocks;       /* entries indexed */
  uint64_t bytes;        /* their encoded bytes */
  uint64_t temp_removed; /* temporary files of crashed puts, removed */
  uint64_t corrupt;      /* reported, left in place, not indexed */
  uint64_t unreadable;   /* intact but of an unreadable format version
                            (indexed, so eviction reclaims them) */
  uint64_t evicted;      /* to bring the store within its capacity */
  uint64_t ignored;      /* other names (and, read-only, pending temp files) */
} kvs_block_store_scan;

/* Opens (a writer creates the directory if missing) and scans a store.
 * options NULL means the INIT values; *scan (when non-NULL) receives the
 * report. KVS_ERR_CONFLICT when another process holds it for writing. */
kvs_status kvs_block_store_create(const char *dir, const kvs_block_store_options *options,
                                  kvs_block_store_t *out, kvs_block_store_scan *scan,
                                  kvs_error *err);
void kvs_block_store_destroy(kvs_block_store_t store);

/* Stores a signed block under key (replacing what was there) and then
 * evicts least recently used blocks beyond the capacity; the new block
 * is never evicted by its own put. A block larger than the capacity is
 * refused (KVS_ERR_INVALID_ARGUMENT). On failure before the rename,
 * nothing changed; a failure to fsync the directory after the rename is
 * reported as KVS_ERR_IO although the block is then visible. */
kvs_status kvs_block_store_put(kvs_block_store_t store, const kvs_block_hash *key,
                               const struct kvs_block *block, kvs_error *err);

/* Reads, decodes and verifies the block under key against expected.
 * KVS_ERR_NOT_FOUND when absent, KVS_ERR_CORRUPT for a damaged, foreign
 * or misfiled file, KVS_ERR_SIGNATURE (with *why) for a block this reader
 * must not use, KVS_ERR_IO when reading fails. *out only on success;
 * a hit makes the block most recently used. */
kvs_status kvs_block_store_get(kvs_block_store_t store, const kvs_block_hash *key,
                               const kvs_block_signature *expected, kvs_block_t *out,
                               kvs_signature_error *why, kvs_error *err);

/* The same for DSV4 page blocks (format version 3, page_block.h): put
 * writes exactly as kvs_block_store_put does (one file per chain hash,
 * the same atomic steps, the same index and eviction, and the scan at
 * open reads both versions alike); get reads, checks the recorded key,
 * decodes and verifies against expected (page_block.h's order: a version
 * 2 file is refused by its version, a block of another model, geometry,
 * layer range, section shape or position by the first differing field,
 * swapped or altered rows by their digest). Statuses as their version 2
 * counterparts. */
kvs_status kvs_block_store_put_page(kvs_block_store_t store, const kvs_block_hash *key,
                                    const struct kvs_page_block *block, kvs_error *err);
kvs_status kvs_block_store_get_page(kvs_block_store_t store, const kvs_block_hash *key,
                                    const kvs_page_signature *expected, kvs_page_block_t *out,
                                    kvs_signature_error *why, kvs_error *err);

/* Deletes the block under key (also a corrupt one). KVS_ERR_NOT_FOUND
 * when there is none. */
kvs_status kvs_block_store_remove(kvs_block_store_t store, const kvs_block_hash *key,
                                  kvs_error *err);

/* Whether a file exists under key (not whether it would verify). */
bool kvs_block_store_contains(kvs_block_store_t store, const kvs_block_hash *key);

uint64_t kvs_block_store_count(kvs_block_store_t store); /* indexed blocks */
/* The indexed blocks' keys, least recently used first (at most cap);
 * returns how many (0 for a NULL store or out). */
size_t kvs_block_store_keys(kvs_block_store_t store, kvs_block_hash *out, size_t cap);
uint64_t kvs_block_store_bytes(kvs_block_store_t store); /* their encoded bytes */
uint64_t kvs_block_store_capacity(kvs_block_store_t store);

/* Reads one block file by path, outside any store, under the rules get
 * applies to a store's files: only a regular file is opened for reading
 * (a FIFO, device, socket or directory is refused by its type, without
 * blocking), and the size is checked against the maximum, and against the
 * body length the envelope records when the file starts with the block
 * magic, before anything is read whole. *bytes (malloc'ed, the caller
 * frees it) and *len only on success. KVS_ERR_NOT_FOUND when absent,
 * KVS_ERR_CORRUPT for a file that is not a regular file or whose size
 * cannot be a block's, KVS_ERR_IO when opening or reading fails,
 * KVS_ERR_NO_MEMORY. */
kvs_status kvs_block_store_read_file(const char *path, uint8_t **bytes, size_t *len,
                                     kvs_error *err);

/* The file name of a key inside the directory: 32 hex digits + ".kvb"
 * (buf needs KVS_BLOCK_STORE_NAME_MAX bytes). Returns buf. */
#define KVS_BLOCK_STORE_NAME_MAX 40
char *kvs_block_store_file_name(const kvs_block_hash *key, char *buf);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_BLOCK_STORE_H */
