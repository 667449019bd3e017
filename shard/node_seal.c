/* The host tier's seals (node_seal.h). */
#include "shard/node_seal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/xxh3.h"
#include "pool/window_pool.h"
#include "shard/node_internal.h"
#include "shard/table.h"

struct kvs_node_seals {
  uint64_t slots, slot_bytes;
  uint64_t *digest; /* per host slot */
  uint64_t *chain;  /* the block it was taken for */
  uint8_t *sealed;
  uint64_t *spilled_in; /* the step (+ 1) that last spilled into a slot */
  uint64_t step;        /* this step's number + 1 */
  int64_t *bad_pages;   /* this step's fetches refused by their seal */
  size_t n_bad, cap_bad;
  char first[KVS_ERROR_MESSAGE_MAX];
  kvs_node_seal_counts counts;
};

/* The node's seals, made at the first use (NULL: no host tier with rows,
 * or no memory, which err says). */
static struct kvs_node_seals *seals_of(struct kvs_node *node, kvs_error *err) {
  if (node->seals != NULL) return node->seals;
  uint64_t slots = 0, slot_bytes = 0;
  if (node->options.index_only ||
      kvs_table_host_tier_slot(node->table, 0, &slot_bytes, &slots) == NULL) {
    return NULL;
  }
  struct kvs_node_seals *s = calloc(1, sizeof *s);
  if (s != NULL) {
    s->digest = calloc((size_t)slots, sizeof *s->digest);
    s->chain = calloc((size_t)slots, sizeof *s->chain);
    s->sealed = calloc((size_t)slots, 1);
    s->spilled_in = calloc((size_t)slots, sizeof *s->spilled_in);
    /* A step fetches at most as many blocks as its journal has entries. */
    s->cap_bad = kvs_shard_step_capacity(node->shard);
    s->bad_pages = calloc(s->cap_bad > 0 ? s->cap_bad : 1, sizeof *s->bad_pages);
  }
  if (s == NULL || s->digest == NULL || s->chain == NULL || s->sealed == NULL ||
      s->spilled_in == NULL || s->bad_pages == NULL) {
    if (s != NULL) {
      free(s->spilled_in);
      free(s->digest);
      free(s->chain);
      free(s->sealed);
      free(s->bad_pages);
      free(s);
    }
    kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %llu host slots' seals",
                  (unsigned long long)slots);
    return NULL;
  }
  s->slots = slots;
  s->slot_bytes = slot_bytes;
  node->seals = s;
  return s;
}

static uint64_t seal_of(const struct kvs_node *node, uint64_t slot, uint64_t chain) {
  const unsigned char *memory = kvs_table_host_tier_slot(node->table, slot, NULL, NULL);
  return XXH3_64bits_withSeed(memory, (size_t)node->seals->slot_bytes, chain);
}

kvs_status kvs_node_seal_check(struct kvs_node *node, const kvs_journal_entry *entries, size_t n,
                               kvs_error *err) {
  /* On the host twin a spill's bytes are in host memory when its copy
   * returns; a device's copies finish on its stream, which the step must
   * not wait for (the engine's work is queued ahead of them): its seals
   * are left for a completion the step can read without waiting. */
  if (node->options.index_only || node->options.host_cache_bytes == 0 ||
      kvs_table_device(node->table) >= 0) {
    return KVS_OK;
  }
  struct kvs_node_seals *s = seals_of(node, err);
  if (s == NULL) return node->options.index_only ? KVS_OK : KVS_ERR_NO_MEMORY;
  s->n_bad = 0;
  s->step++;
  uint64_t start = kvs_now_ns();
  kvs_window_pool_t pool = kvs_shard_pool(node->shard);
  for (size_t i = 0; i < n; i++) {
    kvs_host_move m;
    if (!kvs_window_pool_host_move_of(&entries[i], &m) || m.slot >= s->slots) continue;
    if (!m.fetch) {
      s->spilled_in[m.slot] = s->step;
      continue;
    }
    /* Rows spilled earlier in this same step come back from the GPU's own
     * copy of this step: they never waited in host memory, and their seal
     * is taken after the step. */
    if (s->spilled_in[m.slot] == s->step) continue;
    /* The fetched block, as the replayed step left it (a fetched page is
     * held: nothing later in the step moves it). */
    uint64_t chain = 0;
    kvs_status known = kvs_window_pool_prefix_block(pool, m.full_page, &chain, NULL, NULL);
    const char *why = !s->sealed[m.slot] ? "it holds no sealed rows"
                      : known != KVS_OK || s->chain[m.slot] != chain
                          ? "it was sealed for another block"
                      : seal_of(node, m.slot, chain) != s->digest[m.slot]
                          ? "its rows changed since they were sealed"
                          : NULL;
    s->counts.bytes += s->slot_bytes;
    if (why == NULL) continue;
    if (s->n_bad == 0) {
      snprintf(s->first, sizeof s->first,
               "rank %d: host slot %llu fetched into full page %llu (chain %016llx): %s",
               node->rank, (unsigned long long)m.slot, (unsigned long long)m.full_page,
               (unsigned long long)chain, why);
    }
    if (s->n_bad < s->cap_bad) s->bad_pages[s->n_bad++] = (int64_t)m.full_page;
    s->sealed[m.slot] = 0;
    s->counts.failures++;
  }
  s->counts.ns += kvs_now_ns() - start;
  return KVS_OK;
}

kvs_status kvs_node_seal_take(struct kvs_node *node, const kvs_journal_entry *entries, size_t n,
                              kvs_error *err) {
  struct kvs_node_seals *s = node->seals;
  if (s == NULL) return KVS_OK;
  uint64_t start = kvs_now_ns();
  kvs_window_pool_t pool = kvs_shard_pool(node->shard);
  kvs_status status = KVS_OK;
  for (size_t i = 0; i < n && status == KVS_OK; i++) {
    kvs_host_move m;
    if (!kvs_window_pool_host_move_of(&entries[i], &m) || m.fetch || m.slot >= s->slots) continue;
    uint64_t chain = 0;
    if (kvs_window_pool_prefix_host_slot(pool, m.slot, &chain, NULL) != KVS_OK) continue;
    s->digest[m.slot] = seal_of(node, m.slot, chain);
    s->chain[m.slot] = chain;
    s->sealed[m.slot] = 1;
    s->counts.bytes += s->slot_bytes;
  }
  s->counts.ns += kvs_now_ns() - start;
  if (status != KVS_OK || s->n_bad == 0) return status;
  /* Rows that failed their seal are not used: the pages get zeros. */
  unsigned char *bounce = kvs_table_bounce(node->table, err);
  if (bounce == NULL) return KVS_ERR_NO_MEMORY;
  memset(bounce, 0, (size_t)s->slot_bytes);
  for (size_t i = 0; i < s->n_bad && status == KVS_OK; i++) {
    status = kvs_table_page_rows(node->table, (uint64_t)s->bad_pages[i], bounce, true, err);
  }
  s->n_bad = 0;
  if (status != KVS_OK) return status;
  return kvs_error_set(err, KVS_ERR_CORRUPT, "%s", s->first);
}

void kvs_node_seal_counts_get(const struct kvs_node *node, kvs_node_seal_counts *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  if (node != NULL && node->seals != NULL) *out = node->seals->counts;
}

void kvs_node_seal_free(struct kvs_node *node) {
  struct kvs_node_seals *s = node->seals;
  if (s == NULL) return;
  free(s->digest);
  free(s->chain);
  free(s->sealed);
  free(s->spilled_in);
  free(s->bad_pages);
  free(s);
  node->seals = NULL;
}
