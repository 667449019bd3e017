/* The node's disk tier (node_disk.h): a rank's store of page blocks, the
 * agreement at creation, and the rank's part of each journaled store and
 * load. */
#include "shard/node_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blocks/atomic_file.h"
#include "blocks/block_store.h"
#include "blocks/page_codec.h"
#include "core/mix.h"
#include "pool/window_pool.h"
#include "shard/comm.h"
#include "shard/node_internal.h"
#include "shard/page_slot.h"
#include "shard/table.h"

#define MANIFEST_NAME "index-only.kvsdisk"
#define MANIFEST_MAGIC UINT64_C(0x6b7673696478310a) /* "kvsidx1\n" */
/* Chains agreed per collective round: 512 KiB of words. */
#define AGREE_CHUNK 65536u

struct kvs_node_disk {
  kvs_block_store_t store; /* NULL: index only */
  char dir[PATH_MAX];
  uint64_t slots;
  uint64_t *held;     /* disk slot -> the chain its file holds (rows only) */
  uint8_t *held_used; /* ... when it holds one */
  bool seeded;        /* the pool's tier holds the agreed list: a list to write at the end */
  kvs_node_disk_counts counts;
  /* The name every block is signed with, copied at open: the options'
   * string is the caller's and may go once the node is made (the flags'
   * copy does, kvs_node_create_flags frees it). */
  char model[KVS_BLOCK_MODEL_MAX + 1];
};

static kvs_window_pool_t pool_of(struct kvs_node *node) { return kvs_shard_pool(node->shard); }

static kvs_block_hash key_of(uint64_t chain) {
  kvs_block_hash k = {KVS_NODE_DISK_KEY_HIGH, chain};
  return k;
}

/* The model the blocks are signed with: the engine's name for its weights. */
static const char *model_of(const struct kvs_node *node) { return node->disk->model; }

/* What this rank requires of a block at `chain` and `depth`. */
static kvs_status expected_at(const struct kvs_node *node, uint64_t chain, uint64_t depth,
                              kvs_page_signature *out, kvs_error *err) {
  kvs_block_hash key = key_of(chain);
  kvs_page_identity id;
  kvs_status status = kvs_page_slot_identity(node->layout, node->options.kv_dtype, model_of(node),
                                             &key, depth, &id, err);
  if (status != KVS_OK) return status;
  kvs_page_section_shape shapes[KVS_PAGE_MAX_SECTIONS];
  size_t n = kvs_page_slot_shapes(node->layout, node->options.kv_dtype, shapes);
  return kvs_page_signature_expected(&id, shapes, n, out, err);
}

/* ---- this rank's blocks at creation ---- */

/* Whether the block file of `chain` is this rank's kind (the reason in
 * *err when not), by the rules a read of it applies
 * (kvs_block_store_get_page): decoded, filed under its own key, and
 * verified against what this rank reads at the block's own position (its
 * depth, recorded in it: the name gives the chain alone). */
static bool ours(const struct kvs_node *node, uint64_t chain, kvs_error *err) {
  kvs_block_hash key = key_of(chain);
  char name[KVS_BLOCK_STORE_NAME_MAX], path[PATH_MAX + KVS_BLOCK_STORE_NAME_MAX + 2];
  snprintf(path, sizeof path, "%s/%s", node->disk->dir, kvs_block_store_file_name(&key, name));
  uint8_t *bytes = NULL;
  size_t len = 0;
  if (kvs_block_store_read_file(path, &bytes, &len, err) != KVS_OK) return false;
  kvs_page_block_view view;
  memset(&view, 0, sizeof view);
  kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
  bool good =
      kvs_page_block_decode_view(bytes, len, &view, sections, KVS_PAGE_MAX_SECTIONS, err) == KVS_OK;
  if (good && view.readable && (!view.keyed || !kvs_block_hash_equal(&view.key, &key))) {
    kvs_error_set(err, KVS_ERR_CORRUPT, "%s holds another key's block", name);
    good = false;
  }
  /* Another version carries no page signature: verification refuses it
   * by what it has (unmarked, unreadable, or version 2's layers). */
  kvs_page_signature other, want;
  memset(&other, 0, sizeof other);
  other.format_version = view.format_version;
  const kvs_page_signature *recorded = !view.marked    ? NULL
                                       : view.readable ? &view.signature
                                                       : &other;
  uint64_t depth = recorded == &view.signature ? view.signature.id.depth : 0;
  kvs_signature_error why;
  good =
      good && expected_at(node, chain, depth, &want, err) == KVS_OK &&
      kvs_page_verify_parts(recorded, sections, view.n_sections, &want, NULL, &why, err) == KVS_OK;
  free(bytes);
  return good;
}

/* The index-only list's header: what its chains were cached under. */
typedef struct manifest_header {
  uint64_t magic;
  uint64_t geometry;
  uint64_t page;
  uint64_t layers; /* first << 32 | end */
  uint64_t model;  /* the model name's hash */
  uint64_t count;
} manifest_header;

static manifest_header header_of(const struct kvs_node *node, uint64_t count) {
  const char *model = model_of(node);
  uint64_t h = 0x6d6f64656c;
  for (const char *c = model; *c != '\0'; c++) h = kvs_mix64(h, (unsigned char)*c);
  manifest_header m = {MANIFEST_MAGIC,
                       kvs_page_slot_geometry(node->layout, node->options.kv_dtype),
                       node->layout->sizes.page,
                       ((uint64_t)node->layout->first_layer << 32) | node->layout->end_layer,
                       h,
                       count};
  return m;
}

/* The index-only list: *chains (malloc'ed) and *n; nothing when absent;
 * a list of another model or geometry is refused whole (counted). */
static kvs_status read_manifest(struct kvs_node *node, uint64_t **chains, size_t *n,
                                kvs_error *err) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/%s", node->disk->dir, MANIFEST_NAME);
  *chains = NULL;
  *n = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return KVS_OK;
    return kvs_error_set(err, KVS_ERR_IO, "%s: %s", path, strerror(errno));
  }
  struct stat st;
  manifest_header m, want = header_of(node, 0);
  kvs_status status = KVS_OK;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof m ||
      read(fd, &m, sizeof m) != (ssize_t)sizeof m || m.magic != MANIFEST_MAGIC ||
      m.count > ((uint64_t)st.st_size - sizeof m) / sizeof(uint64_t)) {
    /* Nothing of it is used; the run starts with an empty tier and
     * writes a whole list when it ends. */
    fprintf(stderr, "kvshard: rank %d: %s is not a disk tier's index-only list: ignored\n",
            node->rank, path);
  } else if (m.geometry != want.geometry || m.page != want.page || m.layers != want.layers ||
             m.model != want.model) {
    fprintf(stderr, "kvshard: rank %d: %s: %llu blocks refused: cached under another %s\n",
            node->rank, path, (unsigned long long)m.count,
            m.model != want.model     ? "model"
            : m.page != want.page     ? "page size"
            : m.layers != want.layers ? "layer range"
                                      : "geometry");
    node->disk->counts.refused += m.count;
  } else {
    *chains = malloc((m.count > 0 ? m.count : 1) * sizeof **chains);
    size_t want_bytes = (size_t)m.count * sizeof **chains;
    if (*chains == NULL) {
      status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %llu chains",
                             (unsigned long long)m.count);
    } else if (read(fd, *chains, want_bytes) != (ssize_t)want_bytes) {
      fprintf(stderr, "kvshard: rank %d: %s is truncated: ignored\n", node->rank, path);
      free(*chains);
      *chains = NULL;
    } else {
      *n = (size_t)m.count;
      node->disk->counts.found = m.count;
    }
  }
  close(fd);
  if (status != KVS_OK) {
    free(*chains);
    *chains = NULL;
    *n = 0;
  }
  return status;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* This rank's candidates, least recently used first. */
static kvs_status local_chains(struct kvs_node *node, uint64_t **out, size_t *n, kvs_error *err) {
  if (node->disk->store == NULL) return read_manifest(node, out, n, err);
  size_t count = (size_t)kvs_block_store_count(node->disk->store);
  kvs_block_hash *keys = malloc((count > 0 ? count : 1) * sizeof *keys);
  uint64_t *chains = malloc((count > 0 ? count : 1) * sizeof *chains);
  if (keys == NULL || chains == NULL) {
    free(keys);
    free(chains);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu block keys", count);
  }
  count = kvs_block_store_keys(node->disk->store, keys, count);
  size_t kept = 0;
  for (size_t i = 0; i < count; i++) {
    kvs_error why;
    kvs_error_clear(&why);
    if (keys[i].high != KVS_NODE_DISK_KEY_HIGH) {
      kvs_error_set(&why, KVS_ERR_SIGNATURE, "not a disk tier block's name");
    } else if (ours(node, keys[i].low, &why)) {
      chains[kept++] = keys[i].low;
      continue;
    }
    char hex[KVS_BLOCK_HASH_HEX_LEN + 1];
    fprintf(stderr, "kvshard: rank %d: disk block %s refused: %s\n", node->rank,
            kvs_block_hash_hex(&keys[i], hex), why.message);
    node->disk->counts.refused++;
  }
  free(keys);
  node->disk->counts.found = kept;
  *out = chains;
  *n = kept;
  return KVS_OK;
}

/* Collective: the leader's chains every rank holds, in the leader's order.
 * chains/n in: this rank's; out: the agreed list. */
static kvs_status agree_chains(struct kvs_node *node, uint64_t **chains, size_t *n,
                               kvs_error *err) {
  kvs_comm_t comm = node->step_comm;
  kvs_comm_buffer buf;
  kvs_status status = kvs_comm_buffer_alloc(comm, AGREE_CHUNK * sizeof(uint64_t), &buf, err);
  if (status != KVS_OK) return status;
  uint64_t *w = buf.host;
  bool leader = node->rank == KVS_SHARD_LEADER;
  w[0] = leader ? (uint64_t)*n : 0;
  status = kvs_comm_broadcast(comm, &buf, sizeof(uint64_t), KVS_SHARD_LEADER, err);
  uint64_t total = status == KVS_OK ? w[0] : 0;
  uint64_t *mine = *chains, *list = malloc((total > 0 ? total : 1) * sizeof *list);
  uint8_t *have = malloc(total > 0 ? total : 1);
  bool fed = list != NULL && have != NULL;
  if (fed && leader && total > 0) memcpy(list, mine, (size_t)total * sizeof *list);
  if (*n > 0) qsort(mine, *n, sizeof *mine, cmp_u64); /* searched below */
  /* Every rank joins every round, also one that could not allocate: it
   * says it holds nothing, and fails after. */
  for (uint64_t at = 0; at < total && status == KVS_OK; at += AGREE_CHUNK) {
    size_t m = (size_t)(total - at < AGREE_CHUNK ? total - at : AGREE_CHUNK);
    if (leader && fed) memcpy(w, list + at, m * sizeof *w);
    status = kvs_comm_broadcast(comm, &buf, m * sizeof(uint64_t), KVS_SHARD_LEADER, err);
    if (status != KVS_OK) break;
    if (fed && !leader) memcpy(list + at, w, m * sizeof *w);
    for (size_t i = 0; i < m; i++) {
      w[i] = fed && *n > 0 && bsearch(&list[at + i], mine, *n, sizeof *mine, cmp_u64) != NULL;
    }
    status = kvs_comm_allreduce_u64(comm, &buf, m, KVS_COMM_MIN, err);
    for (size_t i = 0; status == KVS_OK && fed && i < m; i++) have[at + i] = w[i] != 0;
  }
  kvs_comm_buffer_free(comm, &buf);
  if (status == KVS_OK && !fed) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to agree on %llu disk blocks",
                           (unsigned long long)total);
  }
  if (status == KVS_OK) {
    size_t kept = 0;
    for (uint64_t i = 0; i < total; i++) {
      if (have[i]) list[kept++] = list[i];
    }
    free(*chains);
    *chains = list;
    *n = kept;
    list = NULL;
  }
  free(list);
  free(have);
  return status;
}

/* Removes this rank's files the agreed list left out (the store then
 * mirrors the index), and records what each slot's file holds. */
static void settle_files(struct kvs_node *node, const uint64_t *agreed, size_t n) {
  struct kvs_node_disk *d = node->disk;
  for (size_t i = 0; i < n; i++) {
    d->held[i] = agreed[i];
    d->held_used[i] = 1;
  }
  if (d->store == NULL) return;
  size_t count = (size_t)kvs_block_store_count(d->store);
  kvs_block_hash *keys = malloc((count > 0 ? count : 1) * sizeof *keys);
  uint64_t *sorted = malloc((n > 0 ? n : 1) * sizeof *sorted);
  if (keys != NULL && sorted != NULL) {
    if (n > 0) {
      memcpy(sorted, agreed, n * sizeof *sorted);
      qsort(sorted, n, sizeof *sorted, cmp_u64);
    }
    count = kvs_block_store_keys(d->store, keys, count);
    for (size_t i = 0; i < count; i++) {
      if (keys[i].high != KVS_NODE_DISK_KEY_HIGH) continue; /* not ours: left alone */
      if (n > 0 && bsearch(&keys[i].low, sorted, n, sizeof *sorted, cmp_u64) != NULL) continue;
      kvs_error ignored;
      uint64_t chain = keys[i].low;
      kvs_block_hash key = key_of(chain);
      if (ours(node, chain, &ignored)) kvs_block_store_remove(d->store, &key, &ignored);
    }
  }
  free(keys);
  free(sorted);
}

kvs_status kvs_node_disk_open(struct kvs_node *node, kvs_error *err) {
  kvs_prefix_stats s;
  kvs_status status = kvs_window_pool_prefix_stats(pool_of(node), &s, err);
  if (status != KVS_OK || s.disk_slots == 0) return KVS_OK;
  kvs_error local_err;
  kvs_error_clear(&local_err);
  kvs_status local = KVS_OK;
  struct kvs_node_disk *d = calloc(1, sizeof *d);
  node->disk = d;
  if (d == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the disk tier");
  d->slots = s.disk_slots;
  d->held = calloc((size_t)d->slots, sizeof *d->held);
  d->held_used = calloc((size_t)d->slots, 1);
  int made = snprintf(d->dir, sizeof d->dir, "%s/rank-%d", node->options.disk_path, node->rank);
  const char *model = node->options.model_name != NULL ? node->options.model_name : "";
  kvs_block_hash probe = key_of(0);
  kvs_page_identity id;
  kvs_error why;
  kvs_error_clear(&why);
  if (d->held == NULL || d->held_used == NULL) {
    local = kvs_error_set(&local_err, KVS_ERR_NO_MEMORY, "no memory for %llu disk slots",
                          (unsigned long long)d->slots);
  } else if (strlen(model) >= sizeof d->model ||
             kvs_page_slot_identity(node->layout, node->options.kv_dtype, model, &probe, 0, &id,
                                    &why) != KVS_OK) {
    /* Refused now rather than by every write. */
    local = kvs_error_set(
        &local_err, KVS_ERR_INVALID_ARGUMENT,
        "options.model_name (--disk-model) cannot sign the disk tier's blocks: %s",
        strlen(model) >= sizeof d->model ? "it is longer than 255 bytes" : why.message);
  } else if (made < 0 || (size_t)made >= sizeof d->dir) {
    local = kvs_error_set(&local_err, KVS_ERR_INVALID_ARGUMENT,
                          "options.disk_path (--disk-path) is too long");
  } else if (mkdir(node->options.disk_path, 0777) != 0 && errno != EEXIST) {
    local = kvs_error_set(&local_err, KVS_ERR_IO, "options.disk_path (--disk-path) '%s': %s",
                          node->options.disk_path, strerror(errno));
  } else if (node->options.index_only) {
    if (mkdir(d->dir, 0777) != 0 && errno != EEXIST) {
      local = kvs_error_set(&local_err, KVS_ERR_IO, "%s: %s", d->dir, strerror(errno));
    }
  } else {
    kvs_block_store_options so = KVS_BLOCK_STORE_OPTIONS_INIT;
    if (kvs_block_store_create(d->dir, &so, &d->store, NULL, &why) != KVS_OK) {
      local =
          kvs_error_set(&local_err, why.status, "options.disk_path (--disk-path): %s", why.message);
    }
  }
  if (local == KVS_OK) memcpy(d->model, model, strlen(model) + 1);
  uint64_t *chains = NULL;
  size_t n = 0;
  if (local == KVS_OK) local = local_chains(node, &chains, &n, &local_err);
  if ((status = kvs_node_agree(node, "the disk tier", local, &local_err, err)) != KVS_OK) {
    free(chains);
    return status;
  }
  status = agree_chains(node, &chains, &n, err);
  if (status == KVS_OK) {
    /* The most recently used the tier has room for. */
    size_t skip = n > d->slots ? n - (size_t)d->slots : 0;
    const uint64_t *kept = n > 0 ? chains + skip : NULL;
    status = kvs_window_pool_prefix_disk_seed(pool_of(node), kept, n - skip, err);
    if (status == KVS_OK) {
      d->counts.agreed = n - skip;
      d->seeded = true;
      settle_files(node, kept, n - skip);
    }
  }
  free(chains);
  return status;
}

/* ---- the step's loads and stores ---- */

/* Reads the block of the just-linked page io->full_page from this rank's
 * store, verified at its position, into the page. On a refusal the page
 * gets zeroed rows and the block's file goes (it would be refused again),
 * and the error names the block. */
static kvs_status load_one(struct kvs_node *node, const kvs_disk_io *io, unsigned char *bounce,
                           kvs_error *err) {
  uint64_t chain = 0, depth = 0;
  kvs_error local;
  kvs_error_clear(&local);
  kvs_status status =
      kvs_window_pool_prefix_block(pool_of(node), io->full_page, &chain, &depth, &local);
  kvs_page_signature want;
  kvs_page_block_t block = NULL;
  kvs_signature_error why;
  kvs_block_hash key = key_of(chain);
  if (status == KVS_OK) status = expected_at(node, chain, depth, &want, &local);
  if (status == KVS_OK) {
    status = kvs_block_store_get_page(node->disk->store, &key, &want, &block, &why, &local);
  }
  if (status == KVS_OK) {
    status = kvs_page_slot_fill(node->layout, node->options.kv_dtype, block, bounce, &local);
  }
  kvs_page_block_destroy(block);
  if (status == KVS_OK) {
    node->disk->counts.read++;
    return kvs_table_page_rows(node->table, io->full_page, bounce, true, err);
  }
  memset(bounce, 0, (size_t)kvs_table_host_slot_bytes(node->layout));
  kvs_error ignored;
  kvs_table_page_rows(node->table, io->full_page, bounce, true, &ignored);
  /* A block read and refused (damaged, or foreign: another's file put
   * there since the agreement) would be refused again: it goes. One that
   * could not be read (an I/O error, no memory) may read next time. */
  bool refused = status == KVS_ERR_CORRUPT || status == KVS_ERR_SIGNATURE;
  if (refused) kvs_block_store_remove(node->disk->store, &key, &ignored);
  node->disk->counts.read_failures++;
  return kvs_error_set(err, refused || status == KVS_ERR_NOT_FOUND ? KVS_ERR_CORRUPT : status,
                       "rank %d: disk block of chain %016llx (depth %llu, into full page %llu) "
                       "not used: %s",
                       node->rank, (unsigned long long)chain, (unsigned long long)depth,
                       (unsigned long long)io->full_page, local.message);
}

/* Writes the cached block of io->full_page to disk slot io->disk_slot's
 * file, after removing the block that slot held. A failure is counted and
 * said on stderr: the tier then lacks the block on this rank, which a read
 * of it would report. */
static void store_one(struct kvs_node *node, const kvs_disk_io *io, unsigned char *bounce) {
  struct kvs_node_disk *d = node->disk;
  kvs_error why;
  kvs_error_clear(&why);
  if (io->disk_slot < d->slots && d->held_used[io->disk_slot]) {
    kvs_block_hash old = key_of(d->held[io->disk_slot]);
    kvs_block_store_remove(d->store, &old, &why);
    d->held_used[io->disk_slot] = 0;
  }
  uint64_t chain = 0, depth = 0;
  kvs_page_section sections[KVS_PAGE_MAX_SECTIONS];
  size_t n = 0;
  kvs_page_identity id;
  kvs_page_block_t block = NULL;
  kvs_signature_error sig_why;
  kvs_status status =
      kvs_window_pool_prefix_block(pool_of(node), io->full_page, &chain, &depth, &why);
  kvs_block_hash key = key_of(chain);
  if (status == KVS_OK)
    status = kvs_table_page_rows(node->table, io->full_page, bounce, false, &why);
  if (status == KVS_OK) {
    status =
        kvs_page_slot_sections(node->layout, node->options.kv_dtype, bounce, sections, &n, &why);
  }
  if (status == KVS_OK) {
    status = kvs_page_slot_identity(node->layout, node->options.kv_dtype, model_of(node), &key,
                                    depth, &id, &why);
  }
  /* The position digests are computed here, from the rows that left the
   * GPU; every read checks them. */
  if (status == KVS_OK) status = kvs_page_block_stamp(&id, sections, n, &block, &sig_why, &why);
  if (status == KVS_OK) status = kvs_block_store_put_page(d->store, &key, block, &why);
  kvs_page_block_destroy(block);
  if (status != KVS_OK) {
    d->counts.write_failures++;
    fprintf(stderr, "kvshard: rank %d: disk block of chain %016llx not written: %s\n", node->rank,
            (unsigned long long)chain, why.message);
    return;
  }
  d->counts.written++;
  if (io->disk_slot < d->slots) {
    d->held[io->disk_slot] = chain;
    d->held_used[io->disk_slot] = 1;
  }
}

kvs_status kvs_node_disk_io(struct kvs_node *node, const kvs_journal_entry *entries, size_t n,
                            kvs_error *err) {
  if (node->disk == NULL || node->disk->store == NULL) return KVS_OK;
  unsigned char *bounce = NULL;
  kvs_status first = KVS_OK;
  for (size_t i = 0; i < n; i++) {
    kvs_disk_io io;
    if (!kvs_window_pool_disk_io_of(&entries[i], &io)) continue;
    if (bounce == NULL && (bounce = kvs_table_bounce(node->table, err)) == NULL) {
      return err != NULL && err->status != KVS_OK ? err->status : KVS_ERR_NO_MEMORY;
    }
    if (!io.load) {
      store_one(node, &io, bounce);
      continue;
    }
    kvs_error local;
    kvs_error_clear(&local);
    kvs_status status = load_one(node, &io, bounce, &local);
    if (status != KVS_OK && first == KVS_OK) {
      first = status;
      if (err != NULL) *err = local;
    }
  }
  return first;
}

void kvs_node_disk_counts_get(const struct kvs_node *node, kvs_node_disk_counts *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  if (node != NULL && node->disk != NULL) *out = node->disk->counts;
}

/* The index-only list, written whole or not at all. */
static void write_manifest(struct kvs_node *node) {
  kvs_window_pool_t pool = pool_of(node);
  kvs_prefix_stats s;
  if (kvs_window_pool_prefix_stats(pool, &s, NULL) != KVS_OK) return;
  size_t bytes = sizeof(manifest_header) + (size_t)s.disk_blocks * sizeof(uint64_t);
  unsigned char *buf = malloc(bytes);
  if (buf == NULL) return;
  size_t n = kvs_window_pool_prefix_disk_chains(pool, (uint64_t *)(buf + sizeof(manifest_header)),
                                                (size_t)s.disk_blocks);
  manifest_header m = header_of(node, n);
  memcpy(buf, &m, sizeof m);
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/%s", node->disk->dir, MANIFEST_NAME);
  kvs_error why;
  kvs_error_clear(&why);
  if (kvs_write_file_atomic(path, buf, sizeof m + n * sizeof(uint64_t), &why) != KVS_OK) {
    fprintf(stderr, "kvshard: rank %d: the disk tier's list not written: %s\n", node->rank,
            why.message);
  }
  free(buf);
}

void kvs_node_disk_close(struct kvs_node *node) {
  struct kvs_node_disk *d = node->disk;
  if (d == NULL) return;
  if (node->options.index_only && d->seeded) write_manifest(node);
  kvs_block_store_destroy(d->store);
  free(d->held);
  free(d->held_used);
  free(d);
  node->disk = NULL;
}
