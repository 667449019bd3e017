/* The backend registry: the only door from kvshard's core to CUDA, NCCL and
 * MPI.
 *
 * The core library links none of them, so a CPU user (kvplan, kvsim over
 * MPI or one rank, a Python binding) loads it on a machine that has none
 * installed. Each backend is a shared object of its own,
 * libkvshard-<name>.so.1, that links its vendor library and exports one
 * or more entry points: functions taking no argument that return a table
 * of function pointers starting with kvs_backend_header. Each backend's
 * folder declares its tables and their getters (backends/<name>/entry.h);
 * this registry defines the getters (KVS_BACKEND_GETTER) and the loading,
 * so a new backend is a folder and a kind here.
 *
 * A backend linked into the program itself (a test linking the backend's
 * code against the CPU stand-in, an engine that links the backend's
 * library directly) is used as is: the getter declares the entry point
 * weak and passes it in. Otherwise the registry loads the backend's file
 * once per process, after its vendor libraries (libcudart.so.13,
 * libnccl.so.2, libmpi.so.40), and keeps it loaded for the life of the
 * process, as NCCL keeps its plugins.
 *
 * Where it looks, in order, for the backend's file:
 *   1. each folder of KVSHARD_BACKEND_PATH (colon-separated);
 *   2. the folder of the object that holds the core: the installed
 *      library's lib/, or a tool's own folder when the core is linked in;
 *   3. the dynamic loader's path (LD_LIBRARY_PATH, the cache, RUNPATH).
 * And for a vendor library: each folder of KVSHARD_CUDA_PATH when it is
 * set (then nowhere else: it names the CUDA to use, a pip wheel's
 * nvidia/{cuda_runtime,nccl}/lib for instance); otherwise the loader's
 * path, then $CUDA_HOME/lib64 and /usr/local/cuda/lib64. MPI is the
 * loader's (the launcher's libmpi).
 *
 * The loader's path is searched as glibc searches it (the caller's RPATH,
 * LD_LIBRARY_PATH, RUNPATH, /etc/ld.so.cache, the default folders) and
 * the file found there is the one loaded.
 *
 * Every file is checked before dlopen maps it (backends/shared_object.h): one
 * that is there but broken (cut short by an interrupted copy, empty, not
 * a shared object, a directory, a FIFO or another non-regular file) ends
 * the search, unloaded, as KVS_ERR_LIBRARY naming the file and what is
 * wrong with it; the backend's own file is found and checked before its
 * vendor libraries are loaded. A file for another machine (an ELF class,
 * byte order or architecture not the process's) is passed over, as the
 * loader passes over it.
 *
 * A backend that cannot be loaded is KVS_ERR_LIBRARY whose message
 * names the file and every place tried with the loader's reason; never a
 * crash. A table built for another ABI, or smaller than the consumer
 * needs, is refused the same way. */
#ifndef KVS_BACKENDS_REGISTRY_H
#define KVS_BACKENDS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when a table's layout changes incompatibly (a slot removed or
 * retyped); slots are only ever added at the end within one ABI. */
#define KVS_BACKEND_ABI 1

typedef enum kvs_backend_kind {
  KVS_BACKEND_CUDA = 0,
  KVS_BACKEND_NCCL = 1,
  KVS_BACKEND_MPI = 2
} kvs_backend_kind;

/* Every entry table starts with this. */
typedef struct kvs_backend_header {
  uint32_t abi;        /* KVS_BACKEND_ABI the backend was built with */
  uint32_t size;       /* sizeof the whole table */
  const char *name;    /* "cuda", "nccl", "mpi" */
  const char *version; /* KVS_VERSION_STRING of its build */
} kvs_backend_header;

typedef const void *(*kvs_backend_entry_fn)(void);

/* "cuda", "nccl", "mpi"; "?" for anything else. */
const char *kvs_backend_name(kvs_backend_kind kind);
/* "libkvshard-cuda.so.1", ... */
const char *kvs_backend_file(kvs_backend_kind kind);

/* The table of backend `kind` that entry point `entry` returns: from
 * `linked` when the program links the backend (NULL otherwise), else from
 * the backend's file, loaded as above. The table must be of this ABI, of
 * the kind asked for, and at least min_size bytes. *table is written only
 * on success. Thread-safe. */
kvs_status kvs_backend_table(kvs_backend_kind kind, const char *entry, kvs_backend_entry_fn linked,
                             size_t min_size, const void **table, kvs_error *err);

/* Whether the load of kind stopped at a file that is there but broken (as
 * above), rather than finding none: an install to repair, which a caller
 * that would otherwise go on without the backend (the live topology's
 * CUDA probe, a node choosing its device) refuses with the load's error
 * instead of working around. False until a load of kind was tried, and
 * for a backend the program links. Thread-safe. */
bool kvs_backend_broken(kvs_backend_kind kind);

/* A handle on an object already in this process whose file is named file
 * (the loader found it by that name: a soname, as torch loads its CUDA
 * runtime), opened with flags | RTLD_NOLOAD by the path it was loaded
 * from, so nothing is searched, opened or mapped; NULL when none is (or
 * file is NULL). The caller dlcloses it. Asked of the link maps rather
 * than of dlopen(file, RTLD_NOLOAD), which searches the loader's path and
 * opens what it finds there: a FIFO's open waits for a writer forever. */
void *kvs_loaded_object(const char *file, int flags);

/* Builds a table header for a backend's entry point. */
#define KVS_BACKEND_HEADER(name, type) \
  { KVS_BACKEND_ABI, (uint32_t)sizeof(type), (name), KVS_VERSION_STRING }

/* Defines getter `fn` of backend `kind`'s table of type `type`, which the
 * backend's entry point `entry` returns (registry.c, once per table: a
 * new backend adds its getters there). `entry` is declared weak in the
 * same file, so a program that links the backend uses its own. */
#define KVS_BACKEND_GETTER(fn, kind, entry, type)                                            \
  extern const void *entry(void) __attribute__((weak));                                      \
  kvs_status fn(const type **out, kvs_error *err) {                                          \
    if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output is NULL");  \
    const void *table = NULL;                                                                \
    kvs_status status = kvs_backend_table((kind), #entry, entry, sizeof(type), &table, err); \
    if (status == KVS_OK) *out = table;                                                      \
    return status;                                                                           \
  }

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_REGISTRY_H */
