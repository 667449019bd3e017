/* Whole files written atomically and durably: after a crash or a power
 * loss a reader finds the old file or the new one, never a mix or a
 * part, and a write that returned KVS_OK is on disk.
 *
 * The steps: the bytes go into a fresh temporary file beside the target
 * (O_EXCL | O_NOFOLLOW: never through a link or into a file planted under
 * the temporary name; O_CLOEXEC: no child inherits it), every write and
 * the close are checked, the file is fsynced; it is renamed over the
 * target, and the directory is fsynced, since the rename is durable only
 * once the directory is. A failed step removes the temporary file.
 *
 * kvs_write_file_atomic takes every step for one path (kvblock's output).
 * The block store (block_store.h) takes the same steps one by one: it
 * stages, renames under its index lock, and syncs its directory after.
 * A NULL name, path or data (data only when n > 0) is
 * KVS_ERR_INVALID_ARGUMENT naming it, nothing written. */
#ifndef KVS_BLOCKS_ATOMIC_FILE_H
#define KVS_BLOCKS_ATOMIC_FILE_H

#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates `temp` (which must not exist) in the directory dirfd (AT_FDCWD:
 * the working directory), writes the n bytes of data, fsyncs and closes
 * it. On failure KVS_ERR_IO names the step and temp ("creating T",
 * "writing T", "fsync of T", "closing T") with the system's reason, and
 * temp is removed (if it was created and can be). */
kvs_status kvs_atomic_file_stage(int dirfd, const char *temp, const void *data, size_t n,
                                 kvs_error *err);

/* Renames temp over name, both in dirfd: the step that makes the new
 * bytes visible, durable once dirfd is fsynced. On failure KVS_ERR_IO
 * ("renaming T to N: reason") and temp is removed (if it can be). */
kvs_status kvs_atomic_file_publish(int dirfd, const char *temp, const char *name, kvs_error *err);

/* Replaces (or creates) the file at path with the n bytes of data, every
 * step above included. Only a regular file, or nothing, is replaced:
 * renaming over a directory, symbolic link, FIFO or device would replace
 * the node or the link itself, so one at path is refused, unchanged
 * (KVS_ERR_INVALID_ARGUMENT, "PATH: refusing to write: it is a symbolic
 * link, not a regular file"). The check precedes the rename; a path
 * swapped in between is the one case left, as with any rename-based
 * writer. Other failures are KVS_ERR_IO, "PATH: cannot write: reason",
 * with nothing left behind; or, when only the final directory fsync
 * failed, "PATH: written, but the directory could not be synced: reason"
 * (the new file is in place, but a power loss could still undo it). */
kvs_status kvs_write_file_atomic(const char *path, const void *data, size_t n, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BLOCKS_ATOMIC_FILE_H */
