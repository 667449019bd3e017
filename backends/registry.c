#include "backends/registry.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/cuda/entry.h"
#include "backends/mpi/entry.h"
#include "backends/nccl/entry.h"
#include "backends/shared_object.h"

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
  bool broken; /* a file there but broken stopped it */
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

/* ---- one search: each place in order until one answers ---- */

/* A search for one file (a backend's, or a vendor library's soname). A
 * file is checked before dlopen sees it (backends/shared_object.h): one that
 * is there but broken ends the search with why, never reaching the
 * loader, which would map it and fault on its missing pages. */
typedef struct search {
  const char *file;
  int flags;    /* dlopen's */
  bool load;    /* dlopen what passes the check; false: only check */
  trail *t;     /* the places tried, for the message */
  void *handle; /* loaded */
  bool found;   /* check only: a whole file, or the object already loaded */
  bool broken;  /* a file there but broken ended the search */
  char why[KVS_ERROR_MESSAGE_MAX];
} search;

static bool done(const search *s) { return s->handle != NULL || s->found || s->broken; }

/* One candidate path; true when it answered (a file the loader would take:
 * loaded, found, broken, or refused by dlopen), so the loader's own search
 * stops there. by_loader: a place of the loader's search, which lists no
 * absent file. */
static bool try_path(search *s, const char *path, bool by_loader) {
  char why[KVS_ERROR_MESSAGE_MAX];
  switch (kvs_shared_object_check(path, why, sizeof why)) {
    case KVS_SO_ABSENT:
      if (!by_loader) trail_add(s->t, "%s: %s", path, "not there");
      return false;
    case KVS_SO_PASSED_OVER:
      trail_add(s->t, "%s%s", why, "");
      return false;
    case KVS_SO_BROKEN:
      s->broken = true;
      snprintf(s->why, sizeof s->why, "%s", why);
      return true;
    case KVS_SO_OK:
      break;
  }
  if (!s->load) {
    s->found = true;
    return true;
  }
  s->handle = dlopen(path, s->flags);
  if (s->handle == NULL) trail_add(s->t, "%s: %s", path, reason());
  return true;
}

/* dir/file. */
static bool try_in(search *s, const char *dir, bool by_loader) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/%s", dir[0] != '\0' ? dir : ".", s->file);
  if (n < 0 || (size_t)n >= sizeof path) return false;
  return try_path(s, path, by_loader);
}

/* Each folder of a colon-separated list, until one gives the file. */
static void search_list(search *s, const char *list) {
  char dir[PATH_MAX];
  for (const char *p = list; p != NULL && *p != '\0' && !done(s);) {
    const char *end = strchr(p, ':');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    if (len > 0 && len < sizeof dir) {
      memcpy(dir, p, len);
      dir[len] = '\0';
      try_in(s, dir, false);
    }
    p = end != NULL ? end + 1 : NULL;
  }
}

/* The object holding this code: the installed libkvshard.so.2, or the
 * program when the core is linked into it (*is_program). NULL when dladdr
 * cannot say. path (PATH_MAX) receives its file name as dladdr gives it. */
static struct link_map *core_object(bool *is_program, char *path) {
  Dl_info info;
  struct link_map *mine = NULL, *program = NULL;
  if (dladdr1(&g_anchor, &info, (void **)&mine, RTLD_DL_LINKMAP) == 0 || info.dli_fname == NULL) {
    return NULL;
  }
  void *self = dlopen(NULL, RTLD_NOW);
  if (self != NULL) {
    if (dlinfo(self, RTLD_DI_LINKMAP, &program) != 0) program = NULL;
    dlclose(self);
  }
  *is_program = mine == program || info.dli_fname[0] == '\0';
  snprintf(path, PATH_MAX, "%s", info.dli_fname);
  return mine;
}

/* A handle on the object that calls dlopen (whose RPATH and RUNPATH the
 * loader searches), for dlinfo; NULL when none can be had. */
static void *caller_handle(void) {
  bool is_program = false;
  char path[PATH_MAX];
  if (core_object(&is_program, path) == NULL || is_program) return dlopen(NULL, RTLD_LAZY);
  void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  return h != NULL ? h : dlopen(NULL, RTLD_LAZY);
}

/* glibc's cache of the default folders (ldconfig's /etc/ld.so.cache, the
 * format glibc 2.32 and later write, alone or after the old one): each
 * path it lists for s->file, in its order, until one answers. Entries for
 * a glibc-hwcaps subfolder are left to the loader's choice of CPU level:
 * the baseline entry is the one checked and loaded. */
#define CACHE_FILE "/etc/ld.so.cache"
#define CACHE_NEW "glibc-ld.so.cache1.1"
#define CACHE_OLD "ld.so-1.7.0"
#define CACHE_MAX_BYTES (256u << 20)

static uint32_t u32_at(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static bool try_cache_entries(search *s, const unsigned char *buf, size_t size) {
  size_t base = 0;
  if (size >= 16 && memcmp(buf, CACHE_OLD, strlen(CACHE_OLD)) == 0) {
    uint64_t after = 16 + (uint64_t)u32_at(buf + 12) * 12;
    base = (size_t)((after + 7) & ~(uint64_t)7);
    if (after > size) return false;
  }
  if (base > size || size - base < 48 || memcmp(buf + base, CACHE_NEW, strlen(CACHE_NEW)) != 0) {
    return false;
  }
  uint64_t n = u32_at(buf + base + 20);
  if (n > (size - base - 48) / 24) return false;
  for (uint64_t i = 0; i < n; i++) {
    const unsigned char *e = buf + base + 48 + i * 24;
    uint32_t flags = u32_at(e), key = u32_at(e + 4), value = u32_at(e + 8);
    uint64_t hwcap;
    memcpy(&hwcap, e + 16, sizeof hwcap);
    if ((flags & 0xff) != 3 /* FLAG_ELF_LIBC6 */ || hwcap != 0) continue;
    if (key >= size - base || value >= size - base) continue;
    const char *k = (const char *)buf + base + key, *v = (const char *)buf + base + value;
    if (memchr(k, '\0', size - base - key) == NULL || memchr(v, '\0', size - base - value) == NULL)
      continue;
    if (strcmp(k, s->file) == 0 && try_path(s, v, true)) return true;
  }
  return false;
}

static bool try_cache(search *s) {
  int fd = open(CACHE_FILE, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  unsigned char *buf = NULL;
  size_t got = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
      (uint64_t)st.st_size <= CACHE_MAX_BYTES && (buf = malloc((size_t)st.st_size)) != NULL) {
    while (got < (size_t)st.st_size) {
      ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
  }
  close(fd);
  bool answered = buf != NULL && try_cache_entries(s, buf, got);
  free(buf);
  return answered;
}

void *kvs_loaded_object(const char *file, int flags) {
  if (file == NULL) return NULL;
  struct link_map *map = NULL;
  void *self = dlopen(NULL, RTLD_LAZY);
  if (self == NULL) return NULL;
  if (dlinfo(self, RTLD_DI_LINKMAP, &map) != 0) map = NULL;
  dlclose(self);
  for (; map != NULL; map = map->l_next) {
    const char *name = map->l_name;
    if (name == NULL || name[0] == '\0') continue;
    const char *slash = strrchr(name, '/');
    if (strcmp(slash != NULL ? slash + 1 : name, file) == 0) {
      return dlopen(name, RTLD_NOLOAD | flags);
    }
  }
  return NULL;
}

/* The dynamic loader's own search for a name without a slash, as glibc
 * makes it for a dlopen from the core: the object already in the process
 * by that file name (nothing to map), else the caller's RPATH, LD_LIBRARY_PATH and RUNPATH
 * folders (dlinfo's RTLD_DI_SERINFO, as the loader read them at start),
 * the cache, then the default folders; the first file there is checked
 * and that very file loaded. Where none is found the loader is asked
 * anyway (its answer names the name), in places this does not know of
 * (a glibc-hwcaps subfolder) unchecked. */
static void search_loader(search *s) {
  void *h = kvs_loaded_object(s->file, s->flags);
  if (h != NULL) {
    if (s->load) {
      s->handle = h;
    } else {
      s->found = true;
      dlclose(h);
    }
    return;
  }
  (void)dlerror();
  void *self = caller_handle();
  Dl_serinfo size_info;
  Dl_serinfo *info = NULL;
  if (self != NULL && dlinfo(self, RTLD_DI_SERINFOSIZE, &size_info) == 0 &&
      (info = malloc(size_info.dls_size)) != NULL) {
    if (dlinfo(self, RTLD_DI_SERINFOSIZE, info) != 0 || dlinfo(self, RTLD_DI_SERINFO, info) != 0) {
      free(info);
      info = NULL;
    }
  }
  if (self != NULL) dlclose(self);
  bool answered = false, cached = false;
  for (unsigned i = 0; info != NULL && i < info->dls_cnt && !answered; i++) {
    if ((info->dls_serpath[i].dls_flags & LA_SER_DEFAULT) != 0 && !cached) {
      cached = true;
      if ((answered = try_cache(s))) break;
    }
    answered = try_in(s, info->dls_serpath[i].dls_name, true);
  }
  if (!answered && !cached) answered = try_cache(s);
  free(info);
  if (answered || !s->load) return;
  s->handle = dlopen(s->file, s->flags);
  if (s->handle == NULL) {
    const char *why = dlerror();
    trail_add(s->t, "the loader's path: %s%s", why != NULL ? why : "not found", "");
  }
}

/* The folder of the object that holds this code: the installed
 * libkvshard.so.2's, or the program's own when the core is linked into it
 * (dladdr then names the program, whose real path /proc/self/exe gives). */
static bool core_folder(char *out, size_t cap) {
  bool is_program = false;
  char name[PATH_MAX], path[PATH_MAX];
  if (core_object(&is_program, name) == NULL) return false;
  if (is_program) {
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return false;
    path[n] = '\0';
  } else if (realpath(name, path) == NULL) {
    return false;
  }
  char *slash = strrchr(path, '/');
  if (slash == NULL) return false;
  *slash = '\0';
  return (size_t)snprintf(out, cap, "%s", path[0] != '\0' ? path : "/") < cap;
}

/* A vendor library by soname, where the spec says to look. */
static void search_dep(const backend_spec *spec, search *s) {
  const char *cuda_path = spec->cuda_deps ? getenv("KVSHARD_CUDA_PATH") : NULL;
  if (cuda_path != NULL && cuda_path[0] != '\0') {
    search_list(s, cuda_path);
    if (!done(s))
      trail_add(s->t, "KVSHARD_CUDA_PATH=%s names the only places to look%s", cuda_path, "");
    return;
  }
  search_loader(s);
  if (done(s) || !spec->cuda_deps) return;
  const char *home = getenv("CUDA_HOME");
  if (home != NULL && home[0] != '\0') {
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/lib64", home) < sizeof dir) try_in(s, dir, false);
  }
  if (!done(s)) try_in(s, "/usr/local/cuda/lib64", false);
}

/* The backend's file, where the registry looks (backend.h). */
static void search_backend(search *s) {
  const char *path = getenv("KVSHARD_BACKEND_PATH");
  if (path != NULL && path[0] != '\0') {
    search_list(s, path);
  } else {
    trail_add(s->t, "KVSHARD_BACKEND_PATH is not set%s%s", "", "");
  }
  char dir[PATH_MAX];
  if (!done(s) && core_folder(dir, sizeof dir)) try_in(s, dir, false);
  if (!done(s)) search_loader(s);
}

/* printf into out[cap], cut at its size (a message's start names the
 * file). */
static void message_set(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void message_set(char *out, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, cap, fmt, ap);
  va_end(ap);
}

/* The refusal of what s could not load: the broken file and how (with the
 * places tried before it), or every place tried. */
static void refuse(loaded *l, const search *s, const char *what) {
  l->status = KVS_ERR_LIBRARY;
  l->broken = s->broken;
  if (s->broken && s->t->used > 0) {
    message_set(l->message, sizeof l->message, "%s: %s (tried before it: %s)", what, s->why,
                s->t->text);
  } else {
    message_set(l->message, sizeof l->message, "%s: %s", what, s->broken ? s->why : s->t->text);
  }
}

/* A loaded object whose file is named `soname`, found among what the
 * process holds (dl_iterate_phdr: nothing is opened, so no FIFO or broken
 * file on the search path is touched), reopened by its own path (the
 * loader then matches it without reading the file). NULL: none. */
typedef struct held_search {
  const char *soname;
  char path[PATH_MAX];
} held_search;

static int find_held(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  held_search *h = arg;
  const char *name = info->dlpi_name;
  if (name == NULL || name[0] == '\0') return 0;
  const char *base = strrchr(name, '/');
  base = base != NULL ? base + 1 : name;
  if (strcmp(base, h->soname) != 0) return 0;
  snprintf(h->path, sizeof h->path, "%s", name);
  return 1;
}

static void *held_by_process(const char *soname, int flags) {
  held_search h = {soname, {0}};
  if (dl_iterate_phdr(find_held, &h) == 0) return NULL;
  (void)dlerror();
  return dlopen(h.path, flags | RTLD_NOLOAD);
}

/* Loads kind's vendor libraries and file once; the lock is held. The
 * backend's file is found and checked first, so a broken one is named
 * before any vendor library is loaded (and on a machine without them). */
static void load_locked(kvs_backend_kind kind) {
  loaded *l = &g_loaded[kind];
  if (l->tried) return;
  l->tried = true;
  const backend_spec *spec = &kSpecs[kind];
  char what[160];
  snprintf(what, sizeof what, "the %s backend (%s) could not be loaded", spec->name, spec->file);
  trail t = {{0}, 0};
  search pre = {.file = spec->file, .flags = RTLD_NOW | RTLD_LOCAL, .load = false, .t = &t};
  search_backend(&pre);
  if (pre.broken) {
    refuse(l, &pre, what);
    return;
  }
  for (size_t i = 0; i < 2 && spec->deps[i] != NULL; i++) {
    trail td = {{0}, 0};
    search dep = {.file = spec->deps[i], .flags = spec->dep_flags, .load = true, .t = &td};
    /* One the process already holds (an engine's torch loaded its
     * libcudart.so.13) is the one: a second copy from another folder would
     * be a second runtime, with its own contexts' state, beside it. */
    dep.handle = held_by_process(spec->deps[i], spec->dep_flags);
    if (dep.handle == NULL) search_dep(spec, &dep);
    if (dep.handle == NULL) {
      char needs[160];
      snprintf(needs, sizeof needs, "the %s backend needs %s, which could not be loaded",
               spec->name, spec->deps[i]);
      refuse(l, &dep, needs);
      return;
    }
  }
  trail tb = {{0}, 0};
  search backend = {.file = spec->file, .flags = RTLD_NOW | RTLD_LOCAL, .load = true, .t = &tb};
  search_backend(&backend);
  if (backend.handle == NULL) {
    refuse(l, &backend, what);
    return;
  }
  l->handle = backend.handle;
  l->status = KVS_OK;
}

bool kvs_backend_broken(kvs_backend_kind kind) {
  if ((unsigned)kind >= N_KINDS) return false;
  pthread_mutex_lock(&g_lock);
  bool broken = g_loaded[kind].broken;
  pthread_mutex_unlock(&g_lock);
  return broken;
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

/* ---- each backend's tables (backends/<name>/entry.h) ---- */

KVS_BACKEND_GETTER(kvs_cuda_probe_table_get, KVS_BACKEND_CUDA, kvs_backend_cuda_probe_v1,
                   kvs_cuda_probe_table)
KVS_BACKEND_GETTER(kvs_cuda_tables_table_get, KVS_BACKEND_CUDA, kvs_backend_cuda_tables_v1,
                   kvs_cuda_tables_table)
KVS_BACKEND_GETTER(kvs_comm_nccl_table, KVS_BACKEND_NCCL, kvs_backend_nccl_v1, kvs_nccl_table)
KVS_BACKEND_GETTER(kvs_comm_mpi_table, KVS_BACKEND_MPI, kvs_backend_mpi_v1, kvs_mpi_table)
