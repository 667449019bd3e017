#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *kvs_status_string(kvs_status status) {
  switch (status) {
    case KVS_OK:
      return "ok";
    case KVS_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case KVS_ERR_UNKNOWN_RATIO:
      return "unknown compress ratio";
    case KVS_ERR_BUDGET_TOO_SMALL:
      return "budget too small";
    case KVS_ERR_EXHAUSTED:
      return "pool exhausted";
    case KVS_ERR_PARTIAL_PAGE:
      return "partial page";
    case KVS_ERR_OUT_OF_RANGE:
      return "out of range";
    case KVS_ERR_INTEGRITY:
      return "integrity violated";
    case KVS_ERR_JOURNAL_FULL:
      return "journal full";
    case KVS_ERR_NO_MEMORY:
      return "out of memory";
    case KVS_ERR_IO:
      return "i/o error";
    case KVS_ERR_PARSE:
      return "parse error";
    case KVS_ERR_OVERFLOW:
      return "arithmetic overflow";
    case KVS_ERR_CONFLICT:
      return "conflicting binding";
    case KVS_ERR_SIGNATURE:
      return "signature refused";
    case KVS_ERR_CORRUPT:
      return "corrupt data";
    case KVS_ERR_NOT_FOUND:
      return "not found";
    case KVS_ERR_CUDA:
      return "cuda error";
    case KVS_ERR_COMM:
      return "communication error";
    case KVS_ERR_TIMEOUT:
      return "timed out";
    case KVS_ERR_DIVERGENCE:
      return "ranks diverged";
    case KVS_ERR_UNSUPPORTED:
      return "unsupported";
    case KVS_ERR_EPOCH:
      return "out-of-order step";
    case KVS_ERR_LIBRARY:
      return "library not loadable";
    case KVS_ERR_PENDING:
      return "changes pending: step first";
  }
  return "unknown status";
}

const char *kvs_status_name(kvs_status status) {
  static const char *const names[] = {"KVS_OK",
                                      "KVS_ERR_INVALID_ARGUMENT",
                                      "KVS_ERR_UNKNOWN_RATIO",
                                      "KVS_ERR_BUDGET_TOO_SMALL",
                                      "KVS_ERR_EXHAUSTED",
                                      "KVS_ERR_PARTIAL_PAGE",
                                      "KVS_ERR_OUT_OF_RANGE",
                                      "KVS_ERR_INTEGRITY",
                                      "KVS_ERR_JOURNAL_FULL",
                                      "KVS_ERR_NO_MEMORY",
                                      "KVS_ERR_IO",
                                      "KVS_ERR_PARSE",
                                      "KVS_ERR_OVERFLOW",
                                      "KVS_ERR_CONFLICT",
                                      "KVS_ERR_SIGNATURE",
                                      "KVS_ERR_CORRUPT",
                                      "KVS_ERR_NOT_FOUND",
                                      "KVS_ERR_CUDA",
                                      "KVS_ERR_COMM",
                                      "KVS_ERR_TIMEOUT",
                                      "KVS_ERR_DIVERGENCE",
                                      "KVS_ERR_UNSUPPORTED",
                                      "KVS_ERR_EPOCH",
                                      "KVS_ERR_LIBRARY",
                                      "KVS_ERR_PENDING"};
  unsigned i = (unsigned)status;
  return i < sizeof names / sizeof names[0] ? names[i] : "KVS_ERR_UNKNOWN";
}

/* The last failure this thread met (kvs_error_last_failure). */
static _Thread_local kvs_status t_last_failure = KVS_OK;

kvs_status kvs_error_last_failure(void) { return t_last_failure; }
void kvs_error_last_failure_reset(void) { t_last_failure = KVS_OK; }

kvs_status kvs_error_set(kvs_error *err, kvs_status status, const char *fmt, ...) {
  if (status != KVS_OK) t_last_failure = status;
  if (err != NULL) {
    err->status = status;
    err->message[0] = '\0'; /* a NULL format leaves no message */
    if (fmt != NULL) {
      va_list args;
      va_start(args, fmt);
      vsnprintf(err->message, sizeof err->message, fmt, args);
      va_end(args);
    }
  }
  return status;
}

void kvs_error_clear(kvs_error *err) {
  if (err != NULL) {
    err->status = KVS_OK;
    err->message[0] = '\0';
  }
}
