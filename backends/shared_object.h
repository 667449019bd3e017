/* What a shared object's file promises the dynamic loader, checked before
 * dlopen maps it.
 *
 * The loader maps each loadable segment's file range and reads the pages
 * it touches (the dynamic section, relocations, the data it writes): a
 * file cut short by an interrupted copy still passes dlopen's header
 * checks, and its first page past the end of the file is SIGBUS in the
 * caller's process. So every file the backend registry (backends/registry.c)
 * is about to dlopen is checked here first: a regular file (a FIFO is
 * never opened blocking, a directory never read), an ELF header of this
 * process's class, byte order and machine, a shared object, whole program
 * headers, and every segment's file range inside the file. Only the file
 * as it is now is checked: a file cut after the check is not caught. */
#ifndef KVS_BACKENDS_SHARED_OBJECT_H
#define KVS_BACKENDS_SHARED_OBJECT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_so_verdict {
  /* Nothing at the path (ENOENT, ENOTDIR). */
  KVS_SO_ABSENT = 0,
  /* Whole as far as the loader reads: safe to dlopen. */
  KVS_SO_OK = 1,
  /* A whole ELF object for another class, byte order or machine, or a file
   * this process may not read: the loader passes over it on its search
   * path, and so does the registry. */
  KVS_SO_PASSED_OVER = 2,
  /* There, but not a shared object the loader can map whole: cut short,
   * empty, not ELF, not a shared object, a directory, a FIFO or another
   * non-regular file. Never handed to dlopen. */
  KVS_SO_BROKEN = 3
} kvs_so_verdict;

/* Checks path (never blocking, mapping nothing) and, for every verdict
 * but KVS_SO_OK, writes why into why[cap] (when why is non-NULL and cap
 * is above 0) as a sentence that starts with the path: "/x/libfoo.so.1 is
 * cut short: its loadable segment at offset 659808 needs 661544 bytes of
 * the file, which has 200000 (an interrupted copy? copy it again)". A NULL
 * path is KVS_SO_ABSENT. */
kvs_so_verdict kvs_shared_object_check(const char *path, char *why, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_SHARED_OBJECT_H */
