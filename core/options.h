/* Versioned options structs, in the manner of NCCL's ncclConfig_t.
 *
 * Every options struct of kvshard starts with `size_t size`, which the
 * caller sets to its own sizeof (the KVS_*_OPTIONS_INIT macros do), and
 * new fields are only ever appended, after the previous version's last byte
 * (never into its tail padding, which an older caller leaves unset). So a
 * caller compiled against an older kvshard passes a shorter struct: the
 * fields it knows are taken as given, and the fields it does not know take
 * this build's defaults. A struct longer than this build's comes from a
 * newer caller whose fields this build would silently ignore, so it is
 * refused, as is a size too small to hold the size field itself. */
#ifndef KVS_CORE_OPTIONS_H
#define KVS_CORE_OPTIONS_H

#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills out (this build's struct, `size` bytes) from given: defaults
 * first, then the caller's first given->size bytes over them, and out's
 * size field set to `size`. given NULL: the defaults. init names the
 * struct's initialiser macro for the message. On failure out is
 * untouched. defaults, init or out NULL, or a size below the size field's,
 * is KVS_ERR_INVALID_ARGUMENT naming it. */
kvs_status kvs_options_adopt(const void *given, const void *defaults, size_t size, const char *init,
                             void *out, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_OPTIONS_H */
