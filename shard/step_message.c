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

size_t kvs_step_app_area_bytes(size_t app_capacity) {
  return app_capacity == 0 ? 0 : sizeof(uint64_t) + (app_capacity + 7) / 8 * 8;
}

uint64_t *kvs_step_message_app_length(void *buf, size_t capacity) {
  return (uint64_t *)((char *)buf + kvs_step_message_bytes(capacity));
}

kvs_status kvs_step_message_read_app(const void *buf, size_t capacity, size_t app_capacity,
                                     const void **app, size_t *bytes, kvs_error *err) {
  *app = NULL;
  *bytes = 0;
  if (app_capacity == 0) return KVS_OK;
  const char *area = (const char *)buf + kvs_step_message_bytes(capacity);
  uint64_t length;
  memcpy(&length, area, sizeof length);
  if (length > app_capacity) {
    return kvs_error_set(err, KVS_ERR_CORRUPT,
                         "step message's application area says %llu bytes, its capacity is %zu",
                         (unsigned long long)length, app_capacity);
  }
  *app = area + sizeof length;
  *bytes = (size_t)length;
  return KVS_OK;
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
