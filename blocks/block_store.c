/* Open-file-description locks (Linux) conflict between handles of one
 * process too and survive closing other descriptors of the file; plain
 * POSIX record locks are the fallback elsewhere. */
#define _GNU_SOURCE 1

#include "blocks/block_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/options.h"
#include "blocks/atomic_file.h"
#include "blocks/block_codec.h"
#include "blocks/page_codec.h"
#include "core/file_kind.h"

#define LOCK_NAME ".lock"
#define TEMP_PREFIX ".tmp-"
#define BLOCK_SUFFIX ".kvb"

struct entry {
  kvs_block_hash key;
  uint64_t bytes;
  struct timespec mtime; /* only used while the scan orders entries */
  struct entry *newer;   /* LRU neighbours; head is the most recent */
  struct entry *older;
  struct entry *chain; /* next in the hash bucket */
};

struct kvs_block_store {
  int dirfd;
  int lockfd; /* -1 when read-only */
  kvs_block_store_options options;
  pthread_mutex_t mu; /* guards everything below */
  struct entry **buckets;
  size_t n_buckets; /* a power of two */
  uint64_t count;
  uint64_t bytes;
  struct entry *head; /* most recently used */
  struct entry *tail; /* least recently used: evicted first */
  atomic_uint_fast64_t temp_serial;
};

char *kvs_block_store_file_name(const kvs_block_hash *key, char *buf) {
  if (buf == NULL) return NULL;
  if (key == NULL) {
    buf[0] = '\0';
    return buf;
  }
  kvs_block_hash_hex(key, buf);
  memcpy(buf + KVS_BLOCK_HASH_HEX_LEN, BLOCK_SUFFIX, sizeof BLOCK_SUFFIX);
  return buf;
}

/* ---- index: hash buckets + LRU list, all under mu ---- */

static size_t bucket_of(const struct kvs_block_store *s, const kvs_block_hash *key) {
  return (size_t)(key->low ^ (key->high >> 7)) & (s->n_buckets - 1);
}

static struct entry *index_find(struct kvs_block_store *s, const kvs_block_hash *key) {
  for (struct entry *e = s->buckets[bucket_of(s, key)]; e != NULL; e = e->chain) {
    if (kvs_block_hash_equal(&e->key, key)) return e;
  }
  return NULL;
}

static void lru_unlink(struct kvs_block_store *s, struct entry *e) {
  if (e->newer != NULL)
    e->newer->older = e->older;
  else
    s->head = e->older;
  if (e->older != NULL)
    e->older->newer = e->newer;
  else
    s->tail = e->newer;
  e->newer = e->older = NULL;
}

static void lru_push_front(struct kvs_block_store *s, struct entry *e) {
  e->newer = NULL;
  e->older = s->head;
  if (s->head != NULL)
    s->head->newer = e;
  else
    s->tail = e;
  s->head = e;
}

/* Doubles the buckets when the load passes 1. A failed allocation only
 * means longer chains, so it is not an error. */
static void index_grow(struct kvs_block_store *s) {
  if (s->count < s->n_buckets) return;
  size_t n = s->n_buckets * 2;
  struct entry **b = calloc(n, sizeof *b);
  if (b == NULL) return;
  for (size_t i = 0; i < s->n_buckets; i++) {
    struct entry *e = s->buckets[i];
    while (e != NULL) {
      struct entry *next = e->chain;
      size_t at = (size_t)(e->key.low ^ (e->key.high >> 7)) & (n - 1);
      e->chain = b[at];
      b[at] = e;
      e = next;
    }
  }
  free(s->buckets);
  s->buckets = b;
  s->n_buckets = n;
}

/* Inserts a new entry (key absent) as the most recent. */
static void index_insert(struct kvs_block_store *s, struct entry *e) {
  size_t at = bucket_of(s, &e->key);
  e->chain = s->buckets[at];
  s->buckets[at] = e;
  lru_push_front(s, e);
  s->count++;
  s->bytes += e->bytes;
  index_grow(s);
}

static void index_remove(struct kvs_block_store *s, struct entry *e) {
  struct entry **p = &s->buckets[bucket_of(s, &e->key)];
  while (*p != e) p = &(*p)->chain;
  *p = e->chain;
  lru_unlink(s, e);
  s->count--;
  s->bytes -= e->bytes;
  free(e);
}

/* Evicts from the cold end until within capacity, sparing `keep`.
 * Returns how many files were removed. */
static uint64_t evict_to_capacity(struct kvs_block_store *s, const struct entry *keep) {
  uint64_t evicted = 0;
  uint64_t cap = s->options.capacity_bytes;
  while (cap > 0 && s->bytes > cap) {
    struct entry *victim = s->tail;
    if (victim == keep) victim = victim->newer;
    if (victim == NULL) break;
    char name[KVS_BLOCK_STORE_NAME_MAX];
    kvs_block_store_file_name(&victim->key, name);
    /* ENOENT: already gone (removed by hand); the index follows the disk.
     * Any other failure leaves the file and stops: bytes stay counted. */
    if (unlinkat(s->dirfd, name, 0) != 0 && errno != ENOENT) break;
    index_remove(s, victim);
    evicted++;
  }
  return evicted;
}

/* ---- files ---- */

/* Reads a whole block file into a fresh buffer. Only a regular file is
 * read: the open does not block (a FIFO would wait for a writer forever)
 * and anything else is refused by its type. Its size is checked against
 * the maximum, and a file that starts with the block magic against the
 * body length its envelope records, before a byte is allocated: the
 * buffer is only ever as large as a file that claims to be exactly that
 * large (and at most the maximum). */
static kvs_status read_block_file(int dirfd, const char *name, uint8_t **buf_out, size_t *len_out,
                                  kvs_error *err) {
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return kvs_error_set(err, KVS_ERR_NOT_FOUND, "no block file %s", name);
    return kvs_error_set(err, KVS_ERR_IO, "opening %s: %s", name, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    kvs_status s = kvs_error_set(err, KVS_ERR_IO, "stat of %s: %s", name, strerror(errno));
    close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_CORRUPT, "%s is %s, not a regular file", name,
                         kvs_file_kind(st.st_mode));
  }
  uint64_t size = (uint64_t)st.st_size;
  if (size > KVS_BLOCK_STORE_MAX_FILE_BYTES) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_CORRUPT,
                         "%s: %" PRIu64
                         " bytes is larger than any block file can be "
                         "(%" PRIu64 "), refused before reading",
                         name, size, (uint64_t)KVS_BLOCK_STORE_MAX_FILE_BYTES);
  }
  uint8_t head[KVS_BLOCK_ENVELOPE_BYTES];
  size_t head_len = size < sizeof head ? (size_t)size : sizeof head;
  size_t got = 0;
  while (got < head_len) {
    ssize_t r = pread(fd, head + got, head_len - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got == sizeof head && memcmp(head, KVS_BLOCK_MAGIC, 8) == 0) {
    uint64_t body = 0;
    for (int i = 7; i >= 0; i--) body = (body << 8) | head[16 + i];
    if (body > size || size - body != KVS_BLOCK_MIN_ENCODED) {
      close(fd);
      return kvs_error_set(err, KVS_ERR_CORRUPT,
                           "%s: truncated or overlong block: body_len says %" PRIu64
                           " bytes, the file holds %" PRIu64 " in all",
                           name, body, size);
    }
  }
  /* Any other head (foreign, too short) is left to the decoder, which
   * names it; the allocation is bounded by the maximum above. */
  uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
  if (buf == NULL) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to read %s (%" PRIu64 " bytes)", name,
                         size);
  }
  got = 0;
  while (got < size) {
    ssize_t r = pread(fd, buf + got, (size_t)size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      kvs_status s = kvs_error_set(err, KVS_ERR_IO, "reading %s: %s", name, strerror(errno));
      free(buf);
      close(fd);
      return s;
    }
    if (r == 0) {
      free(buf);
      close(fd);
      return kvs_error_set(err, KVS_ERR_CORRUPT, "%s shrank to %zu bytes while being read", name,
                           got);
    }
    got += (size_t)r;
  }
  close(fd);
  *buf_out = buf;
  *len_out = (size_t)size;
  return KVS_OK;
}

kvs_status kvs_block_store_read_file(const char *path, uint8_t **bytes, size_t *len,
                                     kvs_error *err) {
  if (path == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: path is NULL", __func__);
  }
  if (bytes == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", __func__);
  }
  if (len == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: len is NULL", __func__);
  }
  return read_block_file(AT_FDCWD, path, bytes, len, err);
}

/* Whether a directory entry is "<32 lowercase hex>.kvb"; *key receives it. */
static bool parse_block_name(const char *name, kvs_block_hash *key) {
  if (strlen(name) != KVS_BLOCK_HASH_HEX_LEN + strlen(BLOCK_SUFFIX)) return false;
  if (strcmp(name + KVS_BLOCK_HASH_HEX_LEN, BLOCK_SUFFIX) != 0) return false;
  char hex[KVS_BLOCK_HASH_HEX_LEN + 1];
  memcpy(hex, name, KVS_BLOCK_HASH_HEX_LEN);
  hex[KVS_BLOCK_HASH_HEX_LEN] = '\0';
  kvs_block_hash h;
  if (kvs_block_hash_parse(hex, &h, NULL) != KVS_OK) return false;
  char canon[KVS_BLOCK_HASH_HEX_LEN + 1];
  if (strcmp(kvs_block_hash_hex(&h, canon), hex) != 0) return false; /* not lowercase */
  *key = h;
  return true;
}

/* Checks one entry found by the scan. KVS_OK with *readable set, or
 * KVS_ERR_CORRUPT (or another error) with err filled. */
static kvs_status check_entry(struct kvs_block_store *s, const char *name,
                              const kvs_block_hash *key, uint64_t *bytes, bool *readable,
                              kvs_error *err) {
  uint8_t *buf = NULL;
  size_t len = 0;
  kvs_status st = read_block_file(s->dirfd, name, &buf, &len, err);
  if (st != KVS_OK) return st;
  kvs_block_view view;
  if (s->options.verify_on_open) {
    st = kvs_block_decode_view(buf, len, &view, NULL, 0, err);
  } else {
    /* Without the checksum pass only the envelope and key are looked at,
     * which needs the magic and the key at their fixed places. */
    st = KVS_OK;
    memset(&view, 0, sizeof view);
    if (len < KVS_BLOCK_MIN_ENCODED || memcmp(buf, KVS_BLOCK_MAGIC, 8) != 0) {
      st = kvs_error_set(err, KVS_ERR_CORRUPT, "%s is not a kvshard block", name);
    } else {
      uint32_t version =
          buf[8] | (uint32_t)buf[9] << 8 | (uint32_t)buf[10] << 16 | (uint32_t)buf[11] << 24;
      view.readable = kvs_block_format_readable(version);
      view.keyed = (buf[12] & KVS_BLOCK_FLAG_KEYED) != 0 && len >= KVS_BLOCK_MIN_ENCODED + 16;
      if (view.keyed) {
        for (int i = 7; i >= 0; i--) {
          view.key.high = (view.key.high << 8) | buf[KVS_BLOCK_ENVELOPE_BYTES + i];
          view.key.low = (view.key.low << 8) | buf[KVS_BLOCK_ENVELOPE_BYTES + 8 + i];
        }
      }
    }
  }
  free(buf);
  if (st != KVS_OK) return st;
  if (view.readable && (!view.keyed || !kvs_block_hash_equal(&view.key, key))) {
    return kvs_error_set(err, KVS_ERR_CORRUPT, "%s does not record the key its name says", name);
  }
  *bytes = len;
  *readable = view.readable;
  return KVS_OK;
}

static int by_mtime(const void *a, const void *b) {
  const struct entry *x = *(struct entry *const *)a, *y = *(struct entry *const *)b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return 0;
}

static kvs_status scan(struct kvs_block_store *s, kvs_block_store_scan *report, kvs_error *err) {
  int fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (d == NULL) {
    if (fd >= 0) close(fd);
    return kvs_error_set(err, KVS_ERR_IO, "listing the store directory: %s", strerror(errno));
  }
  struct entry **found = NULL;
  size_t n_found = 0, cap_found = 0;
  kvs_status st = KVS_OK;
  bool removed = false;
  struct dirent *de;
  errno = 0;
  while ((de = readdir(d)) != NULL) {
    const char *name = de->d_name;
    kvs_block_hash key;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strcmp(name, LOCK_NAME) == 0) {
      continue;
    }
    if (strncmp(name, TEMP_PREFIX, strlen(TEMP_PREFIX)) == 0) {
      /* Only a writer may remove these: with the write lock held, no put
       * is in flight, so every temp file is a crashed put's leftover. */
      if (!s->options.read_only && unlinkat(s->dirfd, name, 0) == 0) {
        report->temp_removed++;
        removed = true;
      } else {
        report->ignored++;
      }
      continue;
    }
    if (!parse_block_name(name, &key)) {
      report->ignored++;
      continue;
    }
    uint64_t bytes = 0;
    bool readable = false;
    kvs_error why;
    kvs_error_clear(&why);
    kvs_status cs = check_entry(s, name, &key, &bytes, &readable, &why);
    if (cs == KVS_ERR_NOT_FOUND) continue; /* removed while we looked */
    if (cs == KVS_ERR_NO_MEMORY || cs == KVS_ERR_IO) {
      st = kvs_error_set(err, cs, "scanning the store: %s", why.message);
      break;
    }
    if (cs != KVS_OK) {
      report->corrupt++;
      if (s->options.on_corrupt != NULL)
        s->options.on_corrupt(s->options.on_corrupt_ctx, name, &why);
      continue;
    }
    if (!readable) report->unreadable++;
    struct stat sb;
    if (fstatat(s->dirfd, name, &sb, 0) != 0) continue;
    if (n_found == cap_found) {
      size_t nc = cap_found ? cap_found * 2 : 64;
      struct entry **g = realloc(found, nc * sizeof *g);
      if (g == NULL) {
        st = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to index the store");
        break;
      }
      found = g;
      cap_found = nc;
    }
    struct entry *e = calloc(1, sizeof *e);
    if (e == NULL) {
      st = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to index the store");
      break;
    }
    e->key = key;
    e->bytes = bytes;
    e->mtime = sb.st_mtim;
    found[n_found++] = e;
  }
  closedir(d);
  if (st != KVS_OK) {
    for (size_t i = 0; i < n_found; i++) free(found[i]);
    free(found);
    return st;
  }
  /* Oldest first, so the newest ends at the head of the LRU list. */
  if (n_found > 1) qsort(found, n_found, sizeof *found, by_mtime);
  for (size_t i = 0; i < n_found; i++) index_insert(s, found[i]);
  free(found);
  if (!s->options.read_only) {
    report->evicted = evict_to_capacity(s, NULL);
    if (report->evicted > 0) removed = true;
  }
  if (removed) fsync(s->dirfd);
  report->blocks = s->count;
  report->bytes = s->bytes;
  return KVS_OK;
}

static void free_index(struct kvs_block_store *s) {
  struct entry *e = s->head;
  while (e != NULL) {
    struct entry *next = e->older;
    free(e);
    e = next;
  }
  free(s->buckets);
}

kvs_status kvs_block_store_create(const char *dir, const kvs_block_store_options *options,
                                  kvs_block_store_t *out, kvs_block_store_scan *scan_out,
                                  kvs_error *err) {
  if (dir == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: dir is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  static const kvs_block_store_options defaults = KVS_BLOCK_STORE_OPTIONS_INIT;
  kvs_block_store_options opts;
  kvs_status adopt = kvs_options_adopt(options, &defaults, sizeof defaults,
                                       "KVS_BLOCK_STORE_OPTIONS_INIT", &opts, err);
  if (adopt != KVS_OK) return adopt;
  if (!opts.read_only && mkdir(dir, 0755) != 0 && errno != EEXIST) {
    return kvs_error_set(err, KVS_ERR_IO, "creating store directory %s: %s", dir, strerror(errno));
  }
  struct kvs_block_store *s = calloc(1, sizeof *s);
  struct entry **buckets = calloc(64, sizeof *buckets);
  if (s == NULL || buckets == NULL) {
    free(s);
    free(buckets);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a block store");
  }
  s->buckets = buckets;
  s->n_buckets = 64;
  s->options = opts;
  s->lockfd = -1;
  atomic_init(&s->temp_serial, 0);
  s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s->dirfd < 0) {
    kvs_status st =
        kvs_error_set(err, opts.read_only && errno == ENOENT ? KVS_ERR_NOT_FOUND : KVS_ERR_IO,
                      "opening store directory %s: %s", dir, strerror(errno));
    free(buckets);
    free(s);
    return st;
  }
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    close(s->dirfd);
    free(buckets);
    free(s);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "cannot create the store mutex");
  }
  kvs_status st = KVS_OK;
  if (!opts.read_only) {
    s->lockfd = openat(s->dirfd, LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->lockfd < 0) {
      st = kvs_error_set(err, KVS_ERR_IO, "opening %s/%s: %s", dir, LOCK_NAME, strerror(errno));
    } else {
      struct flock fl;
      memset(&fl, 0, sizeof fl);
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
#ifdef F_OFD_SETLK
      int rc = fcntl(s->lockfd, F_OFD_SETLK, &fl);
#else
      int rc = fcntl(s->lockfd, F_SETLK, &fl);
#endif
      if (rc != 0) {
        st = (errno == EACCES || errno == EAGAIN)
                 ? kvs_error_set(err, KVS_ERR_CONFLICT,
                                 "store %s is already open for writing by another handle", dir)
                 : kvs_error_set(err, KVS_ERR_IO, "locking %s/%s: %s", dir, LOCK_NAME,
                                 strerror(errno));
      }
    }
  }
  kvs_block_store_scan report;
  memset(&report, 0, sizeof report);
  if (st == KVS_OK) st = scan(s, &report, err);
  if (st != KVS_OK) {
    kvs_block_store_destroy(s);
    return st;
  }
  if (scan_out != NULL) *scan_out = report;
  *out = s;
  return KVS_OK;
}

void kvs_block_store_destroy(kvs_block_store_t s) {
  if (s == NULL) return;
  free_index(s);
  if (s->lockfd >= 0) close(s->lockfd); /* releases the write lock */
  close(s->dirfd);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* Checks what every put needs: a writable store, a key, a block. */
static kvs_status check_put(const char *function, const struct kvs_block_store *s,
                            const kvs_block_hash *key, const void *block, kvs_error *err) {
  if (s == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: store is NULL", function);
  }
  if (key == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: key is NULL", function);
  }
  if (block == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: block is NULL", function);
  }
  if (s->options.read_only) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "store is open read-only");
  }
  return KVS_OK;
}

/* Encodes a block of either kind into a fresh buffer of exactly its size. */
typedef kvs_status (*encode_fn)(const kvs_block_hash *key, const void *block, void *dst, size_t cap,
                                kvs_error *err);

static kvs_status encode_layers(const kvs_block_hash *key, const void *block, void *dst, size_t cap,
                                kvs_error *err) {
  return kvs_block_encode(key, block, dst, cap, NULL, err);
}

static kvs_status encode_page(const kvs_block_hash *key, const void *block, void *dst, size_t cap,
                              kvs_error *err) {
  return kvs_page_block_encode(key, block, dst, cap, NULL, err);
}

/* The put every kind of block shares, from its encoded size on: encode,
 * stage, publish, index, evict, fsync the directory. */
static kvs_status put_encoded(struct kvs_block_store *s, const kvs_block_hash *key,
                              const void *block, size_t size, encode_fn encode, kvs_error *err) {
  if (size == 0) return kvs_error_set(err, KVS_ERR_OVERFLOW, "block does not fit the format");
  if (s->options.capacity_bytes > 0 && size > s->options.capacity_bytes) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a %zu-byte block exceeds the store capacity of %" PRIu64 " bytes", size,
                         s->options.capacity_bytes);
  }
  uint8_t *buf = malloc(size);
  struct entry *fresh = calloc(1, sizeof *fresh);
  if (buf == NULL || fresh == NULL) {
    free(buf);
    free(fresh);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to encode a %zu-byte block", size);
  }
  kvs_status st = encode(key, block, buf, size, err);
  if (st != KVS_OK) {
    free(buf);
    free(fresh);
    return st;
  }

  char name[KVS_BLOCK_STORE_NAME_MAX];
  kvs_block_store_file_name(key, name);
  char temp[96];
  snprintf(temp, sizeof temp, "%s%.*s-%ld-%" PRIuFAST64, TEMP_PREFIX, KVS_BLOCK_HASH_HEX_LEN, name,
           (long)getpid(), (uint_fast64_t)atomic_fetch_add(&s->temp_serial, 1));
  /* The temporary file is written, fsynced and closed (atomic_file.h);
   * a failure removes it. */
  st = kvs_atomic_file_stage(s->dirfd, temp, buf, size, err);
  free(buf);
  if (st != KVS_OK) {
    free(fresh);
    return st;
  }

  /* Renamed under the lock, so the index and the directory change
   * together for a concurrent put, remove or eviction. */
  pthread_mutex_lock(&s->mu);
  st = kvs_atomic_file_publish(s->dirfd, temp, name, err);
  if (st != KVS_OK) {
    pthread_mutex_unlock(&s->mu);
    free(fresh);
    return st;
  }
  struct entry *e = index_find(s, key);
  if (e != NULL) {
    s->bytes = s->bytes - e->bytes + size;
    e->bytes = size;
    lru_unlink(s, e);
    lru_push_front(s, e);
    free(fresh);
  } else {
    e = fresh;
    e->key = *key;
    e->bytes = size;
    index_insert(s, e);
  }
  evict_to_capacity(s, e);
  pthread_mutex_unlock(&s->mu);

  /* The rename (and any eviction) is durable only once the directory is. */
  if (fsync(s->dirfd) != 0) {
    return kvs_error_set(err, KVS_ERR_IO, "fsync of the store directory after writing %s: %s", name,
                         strerror(errno));
  }
  return KVS_OK;
}

kvs_status kvs_block_store_put(kvs_block_store_t s, const kvs_block_hash *key,
                               const struct kvs_block *block, kvs_error *err) {
  kvs_status st = check_put(__func__, s, key, block, err);
  if (st != KVS_OK) return st;
  return put_encoded(s, key, block, kvs_block_encoded_size_of(key, block), encode_layers, err);
}

kvs_status kvs_block_store_put_page(kvs_block_store_t s, const kvs_block_hash *key,
                                    const struct kvs_page_block *block, kvs_error *err) {
  kvs_status st = check_put(__func__, s, key, block, err);
  if (st != KVS_OK) return st;
  return put_encoded(s, key, block, kvs_page_block_encoded_size_of(key, block), encode_page, err);
}

/* Checks what every get needs and reads the key's file. */
static kvs_status read_for_get(const char *function, struct kvs_block_store *s,
                               const kvs_block_hash *key, const void *expected, const void *out,
                               char *name, uint8_t **buf, size_t *len, kvs_error *err) {
  if (s == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: store is NULL", function);
  }
  if (key == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: key is NULL", function);
  }
  if (expected == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: expected is NULL", function);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", function);
  }
  kvs_block_store_file_name(key, name);
  return read_block_file(s->dirfd, name, buf, len, err);
}

/* A file whose recorded key is not its name's is misfiled: corrupt. */
static kvs_status check_key(const char *name, bool readable, bool keyed,
                            const kvs_block_hash *found, const kvs_block_hash *key,
                            kvs_error *err) {
  if (!readable || (keyed && kvs_block_hash_equal(found, key))) return KVS_OK;
  char hex[KVS_BLOCK_HASH_HEX_LEN + 1];
  if (keyed) kvs_block_hash_hex(found, hex);
  return kvs_error_set(err, KVS_ERR_CORRUPT, "%s holds the block of key %s, not of its name", name,
                       keyed ? hex : "(none recorded)");
}

/* A hit makes the block the most recently used. */
static void touch(struct kvs_block_store *s, const kvs_block_hash *key) {
  pthread_mutex_lock(&s->mu);
  struct entry *e = index_find(s, key);
  if (e != NULL) {
    lru_unlink(s, e);
    lru_push_front(s, e);
  }
  pthread_mutex_unlock(&s->mu);
}

kvs_status kvs_block_store_get(kvs_block_store_t s, const kvs_block_hash *key,
                               const kvs_block_signature *expected, kvs_block_t *out,
                               kvs_signature_error *why, kvs_error *err) {
  char name[KVS_BLOCK_STORE_NAME_MAX];
  uint8_t *buf = NULL;
  size_t len = 0;
  kvs_status st = read_for_get(__func__, s, key, expected, out, name, &buf, &len, err);
  if (st != KVS_OK) return st;
  kvs_block_view view;
  kvs_unverified_block_t ub = NULL;
  kvs_error derr;
  st = kvs_block_decode_adopt(buf, len, &view, &ub, &derr);
  if (st != KVS_OK) {
    free(buf);
    return kvs_error_set(err, st, "%s: %s", name, derr.message);
  }
  st = check_key(name, view.readable, view.keyed, &view.key, key, err);
  if (st != KVS_OK) {
    kvs_unverified_block_destroy(ub);
    return st;
  }
  kvs_block_t block = NULL;
  st = kvs_unverified_block_verify(&ub, expected, &block, why, err);
  kvs_unverified_block_destroy(ub); /* NULL when verify consumed it */
  if (st != KVS_OK) return st;
  touch(s, key);
  *out = block;
  return KVS_OK;
}

kvs_status kvs_block_store_get_page(kvs_block_store_t s, const kvs_block_hash *key,
                                    const kvs_page_signature *expected, kvs_page_block_t *out,
                                    kvs_signature_error *why, kvs_error *err) {
  char name[KVS_BLOCK_STORE_NAME_MAX];
  uint8_t *buf = NULL;
  size_t len = 0;
  kvs_status st = read_for_get(__func__, s, key, expected, out, name, &buf, &len, err);
  if (st != KVS_OK) return st;
  /* The key first (a misfiled file is corrupt, whatever it holds), then
   * the decode that verifies against the reader. */
  kvs_page_block_view view;
  kvs_error derr;
  st = kvs_page_block_decode_view(buf, len, &view, NULL, 0, &derr);
  if (st != KVS_OK) {
    free(buf);
    return kvs_error_set(err, st, "%s: %s", name, derr.message);
  }
  st = check_key(name, view.readable, view.keyed, &view.key, key, err);
  kvs_page_block_t block = NULL;
  if (st == KVS_OK) st = kvs_page_block_decode_adopt(buf, len, expected, NULL, &block, why, err);
  if (st != KVS_OK) {
    free(buf);
    return st;
  }
  touch(s, key);
  *out = block;
  return KVS_OK;
}

kvs_status kvs_block_store_remove(kvs_block_store_t s, const kvs_block_hash *key, kvs_error *err) {
  if (s == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: store is NULL", __func__);
  }
  if (key == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: key is NULL", __func__);
  }
  if (s->options.read_only) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "store is open read-only");
  }
  char name[KVS_BLOCK_STORE_NAME_MAX];
  kvs_block_store_file_name(key, name);
  pthread_mutex_lock(&s->mu);
  int rc = unlinkat(s->dirfd, name, 0);
  int e = errno;
  struct entry *entry = index_find(s, key);
  if ((rc == 0 || e == ENOENT) && entry != NULL) index_remove(s, entry);
  pthread_mutex_unlock(&s->mu);
  if (rc != 0) {
    if (e == ENOENT) return kvs_error_set(err, KVS_ERR_NOT_FOUND, "no block file %s", name);
    return kvs_error_set(err, KVS_ERR_IO, "removing %s: %s", name, strerror(e));
  }
  if (fsync(s->dirfd) != 0) {
    return kvs_error_set(err, KVS_ERR_IO, "fsync of the store directory after removing %s: %s",
                         name, strerror(errno));
  }
  return KVS_OK;
}

bool kvs_block_store_contains(kvs_block_store_t s, const kvs_block_hash *key) {
  if (s == NULL || key == NULL) return false;
  char name[KVS_BLOCK_STORE_NAME_MAX];
  kvs_block_store_file_name(key, name);
  struct stat sb;
  return fstatat(s->dirfd, name, &sb, 0) == 0;
}

size_t kvs_block_store_keys(kvs_block_store_t s, kvs_block_hash *out, size_t cap) {
  if (s == NULL || out == NULL) return 0;
  pthread_mutex_lock(&s->mu);
  size_t n = 0;
  for (struct entry *e = s->tail; e != NULL && n < cap; e = e->newer) out[n++] = e->key;
  pthread_mutex_unlock(&s->mu);
  return n;
}

uint64_t kvs_block_store_count(kvs_block_store_t s) {
  if (s == NULL) return 0;
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->count;
  pthread_mutex_unlock(&s->mu);
  return n;
}

uint64_t kvs_block_store_bytes(kvs_block_store_t s) {
  if (s == NULL) return 0;
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->bytes;
  pthread_mutex_unlock(&s->mu);
  return n;
}

uint64_t kvs_block_store_capacity(kvs_block_store_t s) {
  return s != NULL ? s->options.capacity_bytes : 0;
}
