#include "blocks/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/file_kind.h"

/* The staging steps; each failure returns the errno of the failing call
 * and names the step in *step, with temp removed. 0 on success. */
static int stage(int dirfd, const char *temp, const void *data, size_t n, const char **step) {
  int fd = openat(dirfd, temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *step = "creating";
    return errno;
  }
  const char *failed = NULL;
  int e = 0;
  const uint8_t *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      failed = "writing";
      e = w == 0 ? EIO : errno;
      break;
    }
    p += w;
    n -= (size_t)w;
  }
  if (failed == NULL && fsync(fd) != 0) {
    failed = "fsync of";
    e = errno;
  }
  if (close(fd) != 0 && failed == NULL) {
    failed = "closing";
    e = errno;
  }
  if (failed != NULL) {
    unlinkat(dirfd, temp, 0);
    *step = failed;
    return e;
  }
  return 0;
}

/* The rename; on failure its errno, with temp removed if it can be. */
static int publish(int dirfd, const char *temp, const char *name) {
  if (renameat(dirfd, temp, dirfd, name) == 0) return 0;
  int e = errno;
  unlinkat(dirfd, temp, 0);
  return e;
}

kvs_status kvs_atomic_file_stage(int dirfd, const char *temp, const void *data, size_t n,
                                 kvs_error *err) {
  if (temp == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: temp is NULL", __func__);
  }
  if (data == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: data is NULL", __func__);
  }
  const char *step = NULL;
  int e = stage(dirfd, temp, data, n, &step);
  if (e != 0) return kvs_error_set(err, KVS_ERR_IO, "%s %s: %s", step, temp, strerror(e));
  return KVS_OK;
}

kvs_status kvs_atomic_file_publish(int dirfd, const char *temp, const char *name, kvs_error *err) {
  if (temp == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: temp is NULL", __func__);
  }
  if (name == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: name is NULL", __func__);
  }
  int e = publish(dirfd, temp, name);
  if (e != 0) {
    return kvs_error_set(err, KVS_ERR_IO, "renaming %s to %s: %s", temp, name, strerror(e));
  }
  return KVS_OK;
}

/* Tells apart the temporary files of threads writing the same path. */
static atomic_uint_fast64_t temp_serial;

kvs_status kvs_write_file_atomic(const char *path, const void *data, size_t n, kvs_error *err) {
  if (path == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: path is NULL", __func__);
  }
  if (data == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: data is NULL", __func__);
  }
  struct stat st;
  if (lstat(path, &st) == 0) {
    const char *what = kvs_file_kind(st.st_mode); /* NULL: a regular file */
    if (what != NULL) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "%s: refusing to write: it is %s, not a regular file", path, what);
    }
  } else if (errno != ENOENT) {
    return kvs_error_set(err, KVS_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  }
  size_t len = strlen(path);
  /* No file name to write: "" names nothing, and "name/" a directory
   * that lstat found missing. */
  if (len == 0 || path[len - 1] == '/') {
    return kvs_error_set(err, KVS_ERR_IO, "%s: cannot write: %s", path, strerror(ENOENT));
  }
  char *dir_copy = strdup(path);
  char *base_copy = strdup(path);
  size_t temp_cap = len + 64;
  char *temp = malloc(temp_cap);
  if (dir_copy == NULL || base_copy == NULL || temp == NULL) {
    free(dir_copy);
    free(base_copy);
    free(temp);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "%s: out of memory", path);
  }
  const char *dir = dirname(dir_copy);
  const char *base = basename(base_copy);
  snprintf(temp, temp_cap, "%s.tmp-%ld-%" PRIuFAST64, base, (long)getpid(),
           (uint_fast64_t)atomic_fetch_add(&temp_serial, 1));
  kvs_status status = KVS_OK;
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) {
    status = kvs_error_set(err, KVS_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  } else {
    const char *step = NULL;
    int e = stage(dirfd, temp, data, n, &step);
    if (e == 0) e = publish(dirfd, temp, base);
    if (e != 0) {
      status = kvs_error_set(err, KVS_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    } else if (fsync(dirfd) != 0) {
      status =
          kvs_error_set(err, KVS_ERR_IO, "%s: written, but the directory could not be synced: %s",
                        path, strerror(errno));
    }
    close(dirfd);
  }
  free(dir_copy);
  free(base_copy);
  free(temp);
  return status;
}
