#include "core/backend.h"

#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_KINDS 3

/* What each backend's file needs loaded before it: its vendor libraries,
 * by soname. */
typedef struct backend_spec {
  const char *name;
  const char *file;
  const char *deps[2];
  bool cuda_deps; /* found through KVSHARD_CUDA_PATH / CUDA_HOME */
  int dep_flags;  /* MPI's components resolve against libmpi globally */
} backend_spec;

static const backend_spec kSpecs[N_KINDS] = {
    {"cuda", "libkvshard-cuda.so.1", {"libcudart.so.13", NULL}, true, RTLD_NOW | RTLD_GLOBAL},
    {"nccl",
     "libkvshard-nccl.so.1",
     {"libcudart.so.13", "libnccl.so.2"},
     true,
     RTLD_NOW | RTLD_GLOBAL},
    {"mpi", "libkvshard-mpi.so.1", {"libmpi.so.40", NULL}, false, RTLD_NOW | RTLD_GLOBAL},
};

/* One load per kind per process; a failure is remembered with its message
 * so every later asker gets the same answer. */
typedef struct loaded {
  bool tried;
  void *handle;
  kvs_status status;
  char message[KVS_ERROR_MESSAGE_MAX];
} loaded;

static loaded g_loaded[N_KINDS];
/* An address inside this object, for dladdr. */
static const char g_anchor = 0;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

const char *kvs_backend_name(kvs_backend_kind kind) {
  return (unsigned)kind < N_KINDS ? kSpecs[kind].name : "?";
}

const char *kvs_backend_file(kvs_backend_kind kind) {
  return (unsigned)kind < N_KINDS ? kSpecs[kind].file : "?";
}

/* ---- the trail of places tried, for the message ---- */

/* Room for the places tried, inside one error message. */
#define TRAIL_MAX 400

typedef struct trail {
  char text[TRAIL_MAX];
  size_t used;
} trail;

/* Appends one place tried ("PATH: REASON"), separated from the last. */
static void trail_add(trail *t, const char *fmt, const char *a, const char *b) {
  if (t->used + 3 >= sizeof t->text) return;
  if (t->used > 0) {
    memcpy(t->text + t->used, "; ", 3);
    t->used += 2;
  }
  int n = snprintf(t->text + t->used, sizeof t->text - t->used, fmt, a, b);
  if (n < 0) return;
  size_t room = sizeof t->text - t->used - 1;
  t->used += (size_t)n < room ? (size_t)n : room;
}

/* dlerror's reason, shortened to what follows the path it repeats. */
static const char *reason(void) {
  const char *why = dlerror();
  if (why == NULL) return "unknown error";
  const char *colon = strrchr(why, ':');
  return colon != NULL && colon[1] == ' ' ? colon + 2 : why;
}

/* Opens dir/file; NULL (with the reason added to the trail) when it fails. */
static void *open_in(const char *dir, const char *file, int flags, trail *t) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/%s", dir, file);
  if (n < 0 || (size_t)n >= sizeof path) return NULL;
  if (access(path, F_OK) != 0) {
    trail_add(t, "%s: %s", path, "not there");
    return NULL;
  }
  void *h = dlopen(path, flags);
  if (h == NULL) trail_add(t, "%s: %s", path, reason());
  return h;
}

/* Tries each folder of a colon-separated list. */
static void *open_in_list(const char *list, const char *file, int flags, trail *t) {
  char dir[PATH_MAX];
  for (const char *p = list; p != NULL && *p != '\0';) {
    const char *end = strchr(p, ':');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    if (len > 0 && len < sizeof dir) {
      memcpy(dir, p, len);
      dir[len] = '\0';
      void *h = open_in(dir, file, flags, t);
      if (h != NULL) return h;
    }
    p = end != NULL ? end + 1 : NULL;
  }
  return NULL;
}

static void *open_by_loader(const char *file, int flags, trail *t) {
  void *h = dlopen(file, flags);
  if (h == NULL) {
    const char *why = dlerror();
    trail_add(t, "the loader's path: %s%s", why != NULL ? why : "not found", "");
  }
  return h;
}

/* The folder of the object that holds this code: the installed
 * libkvshard.so.1's, or the program's own when the core is linked into it
 * (dladdr then names the program, whose real path /proc/self/exe gives). */
static bool core_folder(char *out, size_t cap) {
  Dl_info info;
  struct link_map *mine = NULL, *program = NULL;
  char path[PATH_MAX];
  if (dladdr1(&g_anchor, &info, (void **)&mine, RTLD_DL_LINKMAP) == 0 || info.dli_fname == NULL) {
    return false;
  }
  void *self = dlopen(NULL, RTLD_NOW);
  if (self != NULL) {
    if (dlinfo(self, RTLD_DI_LINKMAP, &program) != 0) program = NULL;
    dlclose(self);
  }
  if (mine == program || info.dli_fname[0] == '\0') {
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return false;
    path[n] = '\0';
  } else if (realpath(info.dli_fname, path) == NULL) {
    return false;
  }
  char *slash = strrchr(path, '/');
  if (slash == NULL) return false;
  *slash = '\0';
  return (size_t)snprintf(out, cap, "%s", path[0] != '\0' ? path : "/") < cap;
}

/* A vendor library by soname, where the spec says to look. */
static void *open_dep(const backend_spec *spec, const char *soname, trail *t) {
  const char *cuda_path = spec->cuda_deps ? getenv("KVSHARD_CUDA_PATH") : NULL;
  if (cuda_path != NULL && cuda_path[0] != '\0') {
    void *h = open_in_list(cuda_path, soname, spec->dep_flags, t);
    if (h == NULL)
      trail_add(t, "KVSHARD_CUDA_PATH=%s names the only places to look%s", cuda_path, "");
    return h;
  }
  void *h = open_by_loader(soname, spec->dep_flags, t);
  if (h != NULL || !spec->cuda_deps) return h;
  const char *home = getenv("CUDA_HOME");
  if (home != NULL && home[0] != '\0') {
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/lib64", home) < sizeof dir &&
        (h = open_in(dir, soname, spec->dep_flags, t)) != NULL) {
      return h;
    }
  }
  return open_in("/usr/local/cuda/lib64", soname, spec->dep_flags, t);
}

/* The backend's file, where the registry looks (backend.h). */
static void *open_backend(const backend_spec *spec, trail *t) {
  const char *path = getenv("KVSHARD_BACKEND_PATH");
  void *h = NULL;
  if (path != NULL && path[0] != '\0') {
    h = open_in_list(path, spec->file, RTLD_NOW | RTLD_LOCAL, t);
  } else {
    trail_add(t, "KVSHARD_BACKEND_PATH is not set%s%s", "", "");
  }
  char dir[PATH_MAX];
  if (h == NULL && core_folder(dir, sizeof dir))
    h = open_in(dir, spec->file, RTLD_NOW | RTLD_LOCAL, t);
  if (h == NULL) h = open_by_loader(spec->file, RTLD_NOW | RTLD_LOCAL, t);
  return h;
}

/* Loads kind's vendor libraries and file once; the lock is held. */
static void load_locked(kvs_backend_kind kind) {
  loaded *l = &g_loaded[kind];
  if (l->tried) return;
  l->tried = true;
  const backend_spec *spec = &kSpecs[kind];
  trail t = {{0}, 0};
  for (size_t i = 0; i < 2 && spec->deps[i] != NULL; i++) {
    if (open_dep(spec, spec->deps[i], &t) == NULL) {
      l->status = KVS_ERR_LIBRARY;
      snprintf(l->message, sizeof l->message,
               "the %s backend needs %s, which could not be loaded: %.*s", spec->name,
               spec->deps[i], (int)sizeof t.text, t.text);
      return;
    }
  }
  t.used = 0;
  t.text[0] = '\0';
  l->handle = open_backend(spec, &t);
  if (l->handle == NULL) {
    l->status = KVS_ERR_LIBRARY;
    snprintf(l->message, sizeof l->message, "the %s backend (%s) could not be loaded: %.*s",
             spec->name, spec->file, (int)sizeof t.text, t.text);
    return;
  }
  l->status = KVS_OK;
}

/* The header's promises: this ABI, this kind, room for what the caller
 * reads. */
static kvs_status check_table(kvs_backend_kind kind, const char *entry, const void *table,
                              size_t min_size, kvs_error *err) {
  const kvs_backend_header *h = table;
  if (h == NULL) {
    return kvs_error_set(err, KVS_ERR_LIBRARY, "the %s backend's %s returned no table",
                         kSpecs[kind].name, entry);
  }
  if (h->abi != KVS_BACKEND_ABI || h->name == NULL || strcmp(h->name, kSpecs[kind].name) != 0 ||
      h->size < min_size) {
    return kvs_error_set(err, KVS_ERR_LIBRARY,
                         "the %s backend's %s is a table of ABI %u for '%s' of %u bytes (version "
                         "%s); this build needs ABI %d for '%s' of at least %zu bytes (version "
                         "%s): install the backend of the same kvshard build",
                         kSpecs[kind].name, entry, h->abi, h->name != NULL ? h->name : "?", h->size,
                         h->version != NULL ? h->version : "?", KVS_BACKEND_ABI, kSpecs[kind].name,
                         min_size, KVS_VERSION_STRING);
  }
  return KVS_OK;
}

kvs_status kvs_backend_table(kvs_backend_kind kind, const char *entry, kvs_backend_entry_fn linked,
                             size_t min_size, const void **table, kvs_error *err) {
  if ((unsigned)kind >= N_KINDS || entry == NULL || table == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "kvs_backend_table needs a known kind (got %d), an entry and an output",
                         (int)kind);
  }
  kvs_backend_entry_fn fn = linked;
  if (fn == NULL) {
    pthread_mutex_lock(&g_lock);
    load_locked(kind);
    loaded snapshot = g_loaded[kind];
    void *sym = snapshot.handle != NULL ? dlsym(snapshot.handle, entry) : NULL;
    pthread_mutex_unlock(&g_lock);
    if (snapshot.status != KVS_OK)
      return kvs_error_set(err, snapshot.status, "%s", snapshot.message);
    if (sym == NULL) {
      return kvs_error_set(err, KVS_ERR_LIBRARY, "the %s backend (%s) has no entry point %s",
                           kSpecs[kind].name, kSpecs[kind].file, entry);
    }
    /* POSIX guarantees that a function's address survives this round trip. */
    memcpy(&fn, &sym, sizeof fn);
  }
  const void *t = fn();
  kvs_status status = check_table(kind, entry, t, min_size, err);
  if (status == KVS_OK) *table = t;
  return status;
}
