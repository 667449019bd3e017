#include "pool/journal.h"

#include <stdlib.h>

struct kvs_journal {
  kvs_journal_entry *ring;
  size_t capacity;
  size_t head; /* oldest pending entry */
  size_t pending;
  uint64_t sequence;
};

kvs_status kvs_journal_create(size_t capacity, kvs_journal_t *out, kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (capacity > SIZE_MAX / sizeof(kvs_journal_entry)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "journal capacity %zu is too large", capacity);
  }
  struct kvs_journal *journal = calloc(1, sizeof *journal);
  if (journal != NULL && capacity > 0) {
    journal->ring = malloc(capacity * sizeof *journal->ring);
  }
  if (journal == NULL || (capacity > 0 && journal->ring == NULL)) {
    kvs_journal_destroy(journal);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %zu-entry journal", capacity);
  }
  journal->capacity = capacity;
  *out = journal;
  return KVS_OK;
}

void kvs_journal_destroy(kvs_journal_t journal) {
  if (journal == NULL) return;
  free(journal->ring);
  free(journal);
}

size_t kvs_journal_capacity(const struct kvs_journal *journal) {
  return journal != NULL ? journal->capacity : 0;
}
size_t kvs_journal_pending(const struct kvs_journal *journal) {
  return journal != NULL ? journal->pending : 0;
}
size_t kvs_journal_room(const struct kvs_journal *journal) {
  return journal != NULL ? journal->capacity - journal->pending : 0;
}
uint64_t kvs_journal_sequence(const struct kvs_journal *journal) {
  return journal != NULL ? journal->sequence : 0;
}

kvs_status kvs_journal_push(kvs_journal_t journal, uint64_t full_page, int64_t window_page,
                            kvs_error *err) {
  if (journal == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: journal is NULL", __func__);
  }
  /* Past capacity the ring would be written beyond its end (and a 0-entry
   * journal has no ring at all): the entry is refused whole. */
  if (journal->pending == journal->capacity) {
    return kvs_error_set(err, KVS_ERR_JOURNAL_FULL,
                         "binding journal is full: %zu of %zu entries pending; drain it before "
                         "appending full page %llu -> %lld",
                         journal->pending, journal->capacity, (unsigned long long)full_page,
                         (long long)window_page);
  }
  size_t at = journal->head + journal->pending;
  if (at >= journal->capacity) at -= journal->capacity;
  journal->ring[at].full_page = full_page;
  journal->ring[at].window_page = window_page;
  journal->pending++;
  journal->sequence++;
  return KVS_OK;
}

void kvs_journal_drain(kvs_journal_t journal, kvs_journal_entry *out, size_t cap, size_t *n_out) {
  /* Nothing to drain from no journal, and nowhere to put it without out. */
  size_t n = journal == NULL || out == NULL ? 0 : journal->pending < cap ? journal->pending : cap;
  for (size_t i = 0; i < n; i++) {
    out[i] = journal->ring[journal->head];
    if (++journal->head == journal->capacity) journal->head = 0;
  }
  if (n > 0) {
    journal->pending -= n;
    if (journal->pending == 0) journal->head = 0;
  }
  if (n_out != NULL) *n_out = n;
}
