#include "shard/step_message.h"

#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(kvs_step_header) == KVS_STEP_HEADER_BYTES,
               "the step header is a fixed 48-byte wire record");
_Static_assert(sizeof(kvs_journal_entry) == KVS_STEP_ENTRY_BYTES,
               "journal entries are 16-byte wire records");

size_t kvs_step_message_bytes(size_t capacity) {
  return KVS_STEP_HEADER_BYTES + capacity * KVS_STEP_ENTRY_BYTES;
}

size_t kvs_step_payload_bytes(size_t n) { return KVS_STEP_HEADER_BYTES + n * KVS_STEP_ENTRY_BYTES; }

void kvs_step_message_put_header(void *buf, const kvs_step_header *header) {
  memcpy(buf, header, sizeof *header);
}

kvs_journal_entry *kvs_step_message_entries(void *buf) {
  return (kvs_journal_entry *)((char *)buf + KVS_STEP_HEADER_BYTES);
}

const uint32_t *kvs_step_message_count_field(const void *buf) {
  return (const uint32_t *)((const char *)buf + offsetof(kvs_step_header, count));
}

const kvs_journal_entry *kvs_step_message_entries_of(const void *buf) {
  return (const kvs_journal_entry *)((const char *)buf + KVS_STEP_HEADER_BYTES);
}

kvs_status kvs_step_message_read(const void *buf, size_t bytes, size_t capacity,
                                 kvs_step_header *header, const kvs_journal_entry **entries,
                                 kvs_error *err) {
  if (buf == NULL || header == NULL || entries == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "step message, header or entries NULL");
  }
  if (bytes < KVS_STEP_HEADER_BYTES) {
    return kvs_error_set(err, KVS_ERR_CORRUPT,
                         "step message of %zu bytes is shorter than its %u-byte header", bytes,
                         KVS_STEP_HEADER_BYTES);
  }
  kvs_step_header h;
  memcpy(&h, buf, sizeof h);
  if (h.magic != KVS_STEP_MAGIC) {
    return kvs_error_set(err, KVS_ERR_CORRUPT,
                         "step message magic is 0x%08x, expected 0x%08x: not a binding journal",
                         (unsigned)h.magic, (unsigned)KVS_STEP_MAGIC);
  }
  if (h.version != KVS_STEP_VERSION) {
    return kvs_error_set(err, KVS_ERR_CORRUPT,
                         "step message version is %u, this build reads version %u",
                         (unsigned)h.version, (unsigned)KVS_STEP_VERSION);
  }
  size_t fits = (bytes - KVS_STEP_HEADER_BYTES) / KVS_STEP_ENTRY_BYTES;
  if ((h.flags & KVS_STEP_FLAG_ABORT) == 0 && (h.count > capacity || h.count > fits)) {
    return kvs_error_set(err, KVS_ERR_CORRUPT,
                         "step %llu message count is %u entries, but the step capacity is %zu "
                         "and the message holds %zu",
                         (unsigned long long)h.step, (unsigned)h.count, capacity, fits);
  }
  *header = h;
  *entries = (const kvs_journal_entry *)((const char *)buf + KVS_STEP_HEADER_BYTES);
  return KVS_OK;
}
