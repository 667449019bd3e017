/* What a path that is not a regular file is, for messages that refuse it
 * ("is a FIFO, not a config file"): every reader of a named file opens it
 * without blocking and refuses anything but a regular file by its type. */
#ifndef KVS_CORE_FILE_KIND_H
#define KVS_CORE_FILE_KIND_H

#include <stddef.h>
#include <sys/stat.h>

/* "a directory", "a FIFO", "a symbolic link", ... for a non-regular mode;
 * NULL for a regular file. */
static inline const char *kvs_file_kind(mode_t mode) {
  if (S_ISREG(mode)) return NULL;
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

#endif /* KVS_CORE_FILE_KIND_H */
