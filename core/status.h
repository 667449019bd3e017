/* kvshard status codes and error messages: the public part (kvs_status,
 * kvs_error, kvs_status_string, kvs_status_name, kvs_error_clear) is
 * kvshard.h's; this adds what the library's own code fills them with.
 *
 * Every fallible call returns a kvs_status and, when the caller passes a
 * non-NULL kvs_error, writes one message into it naming the field, layer
 * or page at fault with the expected and found values. A call that fails
 * leaves every object it was given unchanged. */
#ifndef KVS_CORE_STATUS_H
#define KVS_CORE_STATUS_H

#include <stddef.h>

#include "kvshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills err (when non-NULL) with status and a printf-formatted message and
 * returns status, so a failing path reads `return kvs_error_set(...)`. A
 * NULL fmt leaves an empty message. A NULL pointer argument is refused as
 * KVS_ERR_INVALID_ARGUMENT with "<function>: <argument> is NULL". */
kvs_status kvs_error_set(kvs_error *err, kvs_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The status of the last kvs_error_set with a failure on this thread, and
 * a reset: how a caller that runs a whole program's logic (kvplan in
 * process, kvs_plan_run) names the failure that stopped it when only the
 * program's exit status and words come back. Not for engines. */
kvs_status kvs_error_last_failure(void);
void kvs_error_last_failure_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_STATUS_H */
