/* kvshard status codes and error messages.
 *
 * Every fallible call returns a kvs_status and, when the caller passes a
 * non-NULL kvs_error, writes one message into it naming the field, layer
 * or page at fault with the expected and found values. A call that fails
 * leaves every object it was given unchanged. */
#ifndef KVS_CORE_STATUS_H
#define KVS_CORE_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_status {
  KVS_OK = 0,
  /* A parameter is out of its domain (zero page, negative ratio, NULL). */
  KVS_ERR_INVALID_ARGUMENT = 1,
  /* A compress ratio that is none of 0, 4, 128. */
  KVS_ERR_UNKNOWN_RATIO = 2,
  /* The budget cannot hold the minimal pool. */
  KVS_ERR_BUDGET_TOO_SMALL = 3,
  /* The free list has fewer pages than requested; nothing was taken. */
  KVS_ERR_EXHAUSTED = 4,
  /* A page-atomic call was given part of a page, or a ragged page. */
  KVS_ERR_PARTIAL_PAGE = 5,
  /* A base that is not page-aligned, or a location outside the pool. */
  KVS_ERR_OUT_OF_RANGE = 6,
  /* The pool's conservation equality or binding invariants are broken. */
  KVS_ERR_INTEGRITY = 7,
  /* The binding journal has no room for this operation's entries. */
  KVS_ERR_JOURNAL_FULL = 8,
  /* malloc failed. */
  KVS_ERR_NO_MEMORY = 9,
  /* A file could not be opened, read, written or synced. */
  KVS_ERR_IO = 10,
  /* Malformed input text (JSON, flags). */
  KVS_ERR_PARSE = 11,
  /* A size computation does not fit in 64 bits. */
  KVS_ERR_OVERFLOW = 12,
  /* A binding that conflicts with the pool's state (bound twice, ...). */
  KVS_ERR_CONFLICT = 13,
  /* A stored block was refused by its signature checks. */
  KVS_ERR_SIGNATURE = 14,
  /* Encoded bytes are truncated, foreign or fail their checksum. */
  KVS_ERR_CORRUPT = 15,
  /* Nothing stored under the key asked for. */
  KVS_ERR_NOT_FOUND = 16,
  /* The CUDA runtime reported an error. */
  KVS_ERR_CUDA = 17,
  /* A communication backend failed, or a peer did. */
  KVS_ERR_COMM = 18,
  /* A wait ran past its deadline. */
  KVS_ERR_TIMEOUT = 19,
  /* Ranks disagree on state that must be identical. */
  KVS_ERR_DIVERGENCE = 20,
  /* The feature is not available in this build or on this machine. */
  KVS_ERR_UNSUPPORTED = 21,
  /* A step applied out of order or twice. */
  KVS_ERR_EPOCH = 22,
  /* A shared library the call needs (a kvshard backend, libcudart,
   * libnccl, libmpi) is not installed or cannot be loaded. */
  KVS_ERR_LIBRARY = 23
} kvs_status;

#define KVS_ERROR_MESSAGE_MAX 512

/* One message per failed call. Callers that do not want it pass NULL. */
typedef struct kvs_error {
  kvs_status status;
  char message[KVS_ERROR_MESSAGE_MAX];
} kvs_error;

/* A short, static name for a status ("out of range"); never NULL. */
const char *kvs_status_string(kvs_status status);

/* The status's enumerator as written in this header
 * ("KVS_ERR_OUT_OF_RANGE"), for bindings; "KVS_ERR_UNKNOWN" for a value
 * that is none. */
const char *kvs_status_name(kvs_status status);

/* Fills err (when non-NULL) with status and a printf-formatted message and
 * returns status, so a failing path reads `return kvs_error_set(...)`. */
kvs_status kvs_error_set(kvs_error *err, kvs_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Resets err to KVS_OK with an empty message; NULL is accepted. */
void kvs_error_clear(kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_STATUS_H */
