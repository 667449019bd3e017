/* The wire format of one scheduler step's bindings: a fixed header and up
 * to `capacity` journal entries, in one buffer the size of the capacity.
 *
 * The header carries the step number (the epoch: followers apply steps in
 * order, once each), the entry count, the leader's binding digest after
 * the step (a follower that differs after applying knows at once), and the
 * leader's application digest of an earlier step (the ring contexts), so
 * followers compare those every step without another collective. A step
 * the leader cannot ship is sent as an ABORT header carrying the leader's
 * status and a short reason in the entry area, so followers stop with the
 * leader's reason rather than waiting out a deadline.
 *
 * After the entries' room a message may have an application area of a
 * fixed capacity, which the shard carries and does not read (the node's
 * carried batch and the engine's payload): a length word, then that many
 * bytes. Without one (capacity 0) the message is the header and the
 * entries' room only.
 *
 * Ranks of one group run one build on one architecture: fields are in
 * host byte order. The payload is 48 bytes plus 16 per bound or freed
 * page, plus the application area's length word and bytes when it has
 * one. */
#ifndef KVS_SHARD_STEP_MESSAGE_H
#define KVS_SHARD_STEP_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#include "pool/journal.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_STEP_MAGIC 0x4a53564bu /* "KVSJ" */
#define KVS_STEP_VERSION 1u
#define KVS_STEP_FLAG_ABORT 1u
#define KVS_STEP_NO_AUX UINT64_MAX

typedef struct kvs_step_header {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint32_t count;      /* journal entries after the header */
  uint32_t status;     /* the leader's kvs_status when flags has ABORT */
  uint64_t step;       /* the epoch */
  uint64_t digest;     /* the leader's binding digest after this step */
  uint64_t aux_step;   /* step of aux_digest; KVS_STEP_NO_AUX when none */
  uint64_t aux_digest; /* the leader's application digest of aux_step */
} kvs_step_header;

#define KVS_STEP_HEADER_BYTES 48u
#define KVS_STEP_ENTRY_BYTES 16u

/* Bytes of a message buffer for `capacity` entries. */
size_t kvs_step_message_bytes(size_t capacity);
/* Bytes of an application area of app_capacity bytes: 0 for none, else
 * its length word and the capacity rounded up to 8 bytes. */
size_t kvs_step_app_area_bytes(size_t app_capacity);
/* The application area of a message buffer for `capacity` entries: its
 * length word (bytes used), then the bytes. */
uint64_t *kvs_step_message_app_length(void *buf, size_t capacity);
/* Reads a received message's application area: *bytes and *app point at
 * what the leader wrote; a length past app_capacity is KVS_ERR_CORRUPT. */
kvs_status kvs_step_message_read_app(const void *buf, size_t capacity, size_t app_capacity,
                                     const void **app, size_t *bytes, kvs_error *err);
/* Payload of a step with n entries: header + 16 * n. */
size_t kvs_step_payload_bytes(size_t n);

/* Writes the header at the start of buf (at least KVS_STEP_HEADER_BYTES). */
void kvs_step_message_put_header(void *buf, const kvs_step_header *header);
/* Where the entries start in a message buffer. */
kvs_journal_entry *kvs_step_message_entries(void *buf);

/* The message's own offsets, for readers of a device copy (the tables'
 * apply kernel reads the count there, with no host round trip): where the
 * count field and the entries are in a message at `buf`. */
const uint32_t *kvs_step_message_count_field(const void *buf);
const kvs_journal_entry *kvs_step_message_entries_of(const void *buf);

/* Reads and checks a received message: magic, version, and a count that
 * fits both the capacity and the bytes received (KVS_ERR_CORRUPT naming
 * the field otherwise). *entries points into buf. */
kvs_status kvs_step_message_read(const void *buf, size_t bytes, size_t capacity,
                                 kvs_step_header *header, const kvs_journal_entry **entries,
                                 kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_SHARD_STEP_MESSAGE_H */
