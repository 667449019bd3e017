#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *kvs_status_string(kvs_status status) {
  switch (status) {
    case KVS_OK: return "ok";
    case KVS_ERR_INVALID_ARGUMENT: return "invalid argument";
    case KVS_ERR_UNKNOWN_RATIO: return "unknown compress ratio";
    case KVS_ERR_BUDGET_TOO_SMALL: return "budget too small";
    case KVS_ERR_EXHAUSTED: return "pool exhausted";
    case KVS_ERR_PARTIAL_PAGE: return "partial page";
    case KVS_ERR_OUT_OF_RANGE: return "out of range";
    case KVS_ERR_INTEGRITY: return "integrity violated";
    case KVS_ERR_JOURNAL_FULL: return "journal full";
    case KVS_ERR_NO_MEMORY: return "out of memory";
    case KVS_ERR_IO: return "i/o error";
    case KVS_ERR_PARSE: return "parse error";
    case KVS_ERR_OVERFLOW: return "arithmetic overflow";
    case KVS_ERR_CONFLICT: return "conflicting binding";
    case KVS_ERR_SIGNATURE: return "signature refused";
    case KVS_ERR_CORRUPT: return "corrupt data";
    case KVS_ERR_NOT_FOUND: return "not found";
    case KVS_ERR_CUDA: return "cuda error";
    case KVS_ERR_COMM: return "communication error";
    case KVS_ERR_TIMEOUT: return "timed out";
    case KVS_ERR_DIVERGENCE: return "ranks diverged";
    case KVS_ERR_UNSUPPORTED: return "unsupported";
    case KVS_ERR_EPOCH: return "out-of-order step";
  }
  return "unknown status";
}

kvs_status kvs_error_set(kvs_error *err, kvs_status status, const char *fmt, ...) {
  if (err != NULL) {
    va_list args;
    va_start(args, fmt);
    err->status = status;
    vsnprintf(err->message, sizeof err->message, fmt, args);
    va_end(args);
  }
  return status;
}

void kvs_error_clear(kvs_error *err) {
  if (err != NULL) {
    err->status = KVS_OK;
    err->message[0] = '\0';
  }
}
