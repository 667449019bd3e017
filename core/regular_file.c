#include "core/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_kind.h"

kvs_status kvs_open_regular(const char *path, const char *what, uint64_t max_bytes, int *fd_out,
                            uint64_t *size, int *open_errno, kvs_error *err) {
  if (path == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: path is NULL", __func__);
  }
  if (what == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: what is NULL", __func__);
  }
  if (fd_out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: fd_out is NULL", __func__);
  }
  if (size == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: size is NULL", __func__);
  }
  if (open_errno != NULL) *open_errno = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (open_errno != NULL) *open_errno = e;
    return kvs_error_set(err, KVS_ERR_IO, "cannot open %s %s: %s", what, path, strerror(e));
  }
  struct stat st;
  kvs_status status = KVS_OK;
  if (fstat(fd, &st) != 0) {
    status = kvs_error_set(err, KVS_ERR_IO, "cannot stat %s %s: %s", what, path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    status = kvs_error_set(err, KVS_ERR_IO, "%s %s is %s, not a regular file", what, path,
                           kvs_file_kind(st.st_mode));
  } else if ((uint64_t)st.st_size > max_bytes) {
    status = kvs_error_set(err, KVS_ERR_PARSE, "%s %s is larger than %llu bytes", what, path,
                           (unsigned long long)max_bytes);
  } else {
    /* Reads of a regular file do not block; clear the flag all the same. */
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  }
  if (status != KVS_OK) {
    close(fd);
    return status;
  }
  *fd_out = fd;
  *size = (uint64_t)st.st_size;
  return KVS_OK;
}
