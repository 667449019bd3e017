/* Opening a file kvshard reads whole or in part (model configs, indexes,
 * safetensors headers): only a regular file, and without waiting on it. */
#ifndef KVS_CORE_REGULAR_FILE_H
#define KVS_CORE_REGULAR_FILE_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens path read-only. O_NONBLOCK keeps the open of a FIFO from waiting
 * for a writer forever; fstat then refuses anything but a regular file by
 * its kind (KVS_ERR_IO, "<what> <path> is a FIFO, not a regular file"). A
 * file larger than max_bytes (UINT64_MAX: no limit) is KVS_ERR_PARSE
 * before a byte is read. An open that fails is KVS_ERR_IO naming what and
 * path, with *open_errno (may be NULL) set to its errno. On success *fd is
 * the open descriptor (blocking again for reads) and *size its size. path,
 * what, fd or size NULL is KVS_ERR_INVALID_ARGUMENT naming it. */
kvs_status kvs_open_regular(const char *path, const char *what, uint64_t max_bytes, int *fd,
                            uint64_t *size, int *open_errno, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_REGULAR_FILE_H */
