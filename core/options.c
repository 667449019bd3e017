#include "core/options.h"

#include <string.h>

kvs_status kvs_options_adopt(const void *given, const void *defaults, size_t size, const char *init,
                             void *out, kvs_error *err) {
  if (defaults == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: defaults is NULL", __func__);
  }
  if (init == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: init is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (size < sizeof(size_t)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%s: size %zu cannot hold an options struct's size field (%zu bytes)",
                         __func__, size, sizeof(size_t));
  }
  size_t given_size = size;
  if (given != NULL) memcpy(&given_size, given, sizeof given_size);
  if (given_size < sizeof(size_t) || given_size > size) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "options.size is %zu, but this build's struct is %zu bytes (an older "
                         "caller's may be shorter, down to the size field): start from %s",
                         given_size, size, init);
  }
  memcpy(out, defaults, size);
  if (given != NULL) memcpy(out, given, given_size);
  memcpy(out, &size, sizeof size);
  return KVS_OK;
}
