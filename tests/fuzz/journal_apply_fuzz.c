/* Fuzzes the journal apply path with the journals a leader writes, of
 * every entry kind, valid and corrupted.
 *
 * The input drives a leader pool with a prefix cache, a host tier and
 * request slots with tail states through every kind of leader call: page
 * runs bound and freed, request slots bound and freed, prefix inserts
 * (tails kept or not), matches taken at once or later (stale) by acquire
 * (exact, restoring a tail state, or re-prefilling) or by fetch (the host
 * tier), releases, abandons and evictions (tails dropped, blocks spilled).
 * The calls' arguments come from the input, so many are refused: a refused
 * call must change nothing of the leader (its whole state compared), and
 * the leader's own integrity check passes after every call. The leader's
 * journal goes in steps to a follower, as the runtime ships it:
 *   - every step as the leader wrote it applies, and leaves the follower
 *     equal to the leader (mapping, digest per unit, every block, slot and
 *     host slot);
 *   - about one step in three is first corrupted (an entry's page, operand
 *     or operation changed, an entry duplicated, dropped or two swapped,
 *     an entry from nowhere): the follower refuses it, changing nothing,
 *     or takes it, and then its bindings are what a plain reference replay
 *     of the page entries gives and its integrity check passes (a follower
 *     that took a changed step left the leader: it is rebuilt from the
 *     leader's steps);
 *   - after every step an entry no leader could journal next is forged
 *     from the leader's state (an EVICT of a held or non-leaf block, a
 *     FETCH from a host slot holding another block, a SPILL of a chain
 *     another slot holds, an ACQUIRE by a request holding a block, a
 *     RELEASE by one holding none, a TAIL on a tail or on a page with no
 *     window page, an UNTAIL of a tail being written, a free of a tail's
 *     window page, a block linked before it starts or started twice, a
 *     RESTORE without a readable tail, an unknown operation, a page outside
 *     the history): the step with it appended is refused and the follower
 *     is exactly as before.
 * An input counts as past parsing when at least one step carrying prefix
 * entries was replayed. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/host.h" /* kvs_prefix_chain: a block's chain, as the tier names it */
#include "pool/window_pool.h"
#include "tests/fuzz/fuzz_stats.h"

KVS_FUZZ_TARGET("journal_apply_fuzz",
                "at least one step with prefix entries replayed, every step checked against the "
                "leader, the reference replay and forged impossible entries");

#define PAGES 16       /* full pages, the dummy (last) included */
#define WINDOW_PAGES 9 /* window pages, the dummy (last) included */
#define P 8
#define USABLE (WINDOW_PAGES - 1)
#define DUMMY_FULL (PAGES - 1)
#define SLOTS 5    /* request slots, the dummy (last) included */
#define HOST 4     /* host-tier slots */
#define REQUESTS 6 /* requests 1..6 */
#define JOURNAL 96 /* the leader's journal: a step carries at most this many */
#define MAX_BATCH (JOURNAL + 16)
#define MAX_STEPS 64
#define MAX_KEYS 4
#define KEPT 4
#define OP_SHIFT 56

/* Says what broke (and the pool's own words, when it gave some), and
 * stops: libFuzzer keeps the input. */
static void fail(const char *what, const kvs_error *err) {
  fprintf(stderr, "journal_apply_fuzz: %s%s%s\n", what, err != NULL ? ": " : "",
          err != NULL ? err->message : "");
  __builtin_trap();
}

/* ---- the reference: page entries only, nothing but arrays ---- */

typedef struct reference {
  int64_t window_of[PAGES]; /* -1: unbound */
  bool window_free[USABLE];
} reference;

static void reference_init(reference *r) {
  for (int fp = 0; fp < PAGES; fp++) r->window_of[fp] = -1;
  for (int wp = 0; wp < USABLE; wp++) r->window_free[wp] = true;
}

/* Replays a batch's page entries (request-slot and prefix entries carry
 * the top bit and bind nothing) onto *r; false when one does not apply
 * (*r is then partly replayed: callers pass a copy). */
static bool reference_apply(reference *r, const kvs_journal_entry *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t fp = e[i].full_page;
    int64_t wp = e[i].window_page;
    if (fp & KVS_JOURNAL_SLOT_TAG) continue;
    if (fp >= PAGES || fp == DUMMY_FULL) return false;
    if (wp >= 0) {
      if (wp >= USABLE || r->window_of[fp] >= 0 || !r->window_free[wp]) return false;
      r->window_of[fp] = wp;
      r->window_free[wp] = false;
    } else if (wp == KVS_JOURNAL_FREED) {
      int64_t cur = r->window_of[fp];
      if (cur < 0 || cur >= USABLE || r->window_free[cur]) return false;
      r->window_of[fp] = -1;
      r->window_free[cur] = true;
    } else {
      return false;
    }
  }
  return true;
}

/* Whether the pool holds exactly the reference's bindings, free window
 * pages, count and page digest. */
static bool matches(const struct kvs_window_pool *pool, const reference *r) {
  const int64_t *map = kvs_window_pool_mapping(pool);
  uint64_t digest = kvs_binding_digest_term(DUMMY_FULL, USABLE);
  uint64_t bound = 0, free_pages = 0;
  for (int fp = 0; fp < PAGES; fp++) {
    int64_t wp = fp == DUMMY_FULL ? USABLE : r->window_of[fp];
    for (int o = 0; o < P; o++) {
      int64_t want = wp < 0 ? -1 : wp * P + o;
      if (map[fp * P + o] != want) return false;
    }
    if (fp != DUMMY_FULL && wp >= 0) {
      bound++;
      digest += kvs_binding_digest_term((uint64_t)fp, (uint64_t)wp);
    }
  }
  if (map[PAGES * P] != -1) return false; /* the sentinel row */
  for (int wp = 0; wp < USABLE; wp++) free_pages += r->window_free[wp];
  return kvs_window_pool_bound_pages(pool) == bound &&
         kvs_window_pool_page_digest(pool) == digest &&
         kvs_window_pool_swa_available(pool) == free_pages * P;
}

/* ---- a pool's whole state, as its public calls show it ---- */

#define UNITS (PAGES + SLOTS + PAGES + HOST) /* the digest's index space */

typedef struct block {
  uint64_t key;
  int64_t parent;
  uint32_t refs;
  uint8_t cached, tail;
} block;

typedef struct snapshot {
  uint64_t digest, page_digest, available, bound, bound_slots;
  uint64_t units[UNITS];
  int64_t map[PAGES * P + 1];
  kvs_prefix_stats stats;
  block blocks[PAGES];
  int64_t slot_request[SLOTS];
  uint64_t host_chain[HOST];
  uint8_t host_used[HOST];
} snapshot;

static void snap(const struct kvs_window_pool *pool, snapshot *s) {
  memset(s, 0, sizeof *s);
  if (kvs_window_pool_digest_units(pool) != UNITS)
    fail("the pool is not the harness's shape", NULL);
  s->digest = kvs_window_pool_digest(pool);
  s->page_digest = kvs_window_pool_page_digest(pool);
  s->available = kvs_window_pool_swa_available(pool);
  s->bound = kvs_window_pool_bound_pages(pool);
  s->bound_slots = kvs_window_pool_bound_slots(pool);
  for (uint64_t u = 0; u < UNITS; u++) s->units[u] = kvs_window_pool_digest_range(pool, u, u + 1);
  memcpy(s->map, kvs_window_pool_mapping(pool), sizeof s->map);
  if (kvs_window_pool_prefix_stats(pool, &s->stats, NULL) != KVS_OK) fail("no stats", NULL);
  for (uint64_t fp = 0; fp < PAGES; fp++) {
    block *b = &s->blocks[fp];
    bool tail = false;
    if (kvs_window_pool_prefix_node(pool, fp, &b->key, &b->parent, &b->refs, &tail, NULL) ==
        KVS_OK) {
      b->cached = 1;
      b->tail = tail;
    }
  }
  for (uint64_t slot = 0; slot < SLOTS; slot++) {
    s->slot_request[slot] = kvs_window_pool_slot_request(pool, slot);
  }
  for (uint64_t h = 0; h < HOST; h++) {
    s->host_used[h] = kvs_window_pool_prefix_host_slot(pool, h, &s->host_chain[h], NULL) == KVS_OK;
  }
}

static bool same(const snapshot *a, const snapshot *b) { return memcmp(a, b, sizeof *a) == 0; }

/* A cached block's chain: its keys from the root, hashed as the tier
 * names blocks. */
static uint64_t chain_of(const snapshot *s, int64_t fp) {
  uint64_t keys[PAGES];
  size_t n = 0;
  for (int64_t at = fp; at >= 0 && n < PAGES; at = s->blocks[at].parent)
    keys[n++] = s->blocks[at].key;
  uint64_t chain = KVS_PREFIX_ROOT_CHAIN;
  while (n > 0) chain = kvs_prefix_chain(chain, keys[--n]);
  return chain;
}

/* ---- the input ---- */

typedef struct reader {
  const uint8_t *data;
  size_t size, at;
} reader;

static uint8_t next_byte(reader *in) { return in->at < in->size ? in->data[in->at++] : 0; }

/* ---- the leader ---- */

/* What the harness knows of the leader's requests: for the forged
 * entries (a request holding a block, one writing a tail) and for hits
 * kept to be taken later (stale by then, or not). */
typedef struct leader_model {
  bool holds[REQUESTS + 1];
  int64_t writes[REQUESTS + 1]; /* the block whose tail it re-prefills, -1 */
  kvs_prefix_hit kept[KEPT];
  uint64_t kept_keys[KEPT][MAX_KEYS];
  size_t kept_n[KEPT];
  size_t n_kept, next_kept;
} leader_model;

/* A prompt of 1..4 pages over a small key tree, so that prompts share
 * prefixes and pages come back as blocks of other prompts. */
static size_t prompt(reader *in, uint64_t *keys) {
  uint8_t b = next_byte(in);
  size_t n = 1 + b % MAX_KEYS;
  for (size_t i = 0; i < n; i++) keys[i] = 10 * (i + 1) + ((b >> (2 + i)) & 1);
  return n;
}

static int64_t page_of(reader *in) { return next_byte(in) % PAGES; }

/* A page for a call that caches it: mostly the first from where the input
 * says that a leader would give (bound by the engine or not, as `bound`
 * says, and not cached), sometimes any page at all (refused, mostly). */
static int64_t page_for(const snapshot *s, reader *in, bool want_bound, const int64_t *taken,
                        size_t n_taken) {
  uint8_t b = next_byte(in);
  if (b & 0x80) return b % PAGES;
  for (int k = 0; k < PAGES; k++) {
    int64_t fp = (b + k) % PAGES;
    bool used = fp == DUMMY_FULL || s->blocks[fp].cached || (s->map[fp * P] >= 0) != want_bound;
    for (size_t i = 0; i < n_taken && !used; i++) used = taken[i] == fp;
    if (!used) return fp;
  }
  return b % PAGES;
}

/* Takes a hit for request r: acquire, or fetch into pages the input names. */
static kvs_status take_hit(kvs_window_pool_t leader, leader_model *m, const snapshot *s, reader *in,
                           uint64_t r, const kvs_prefix_hit *hit, const uint64_t *keys, size_t n) {
  if (hit->host_pages == 0) {
    kvs_status st = kvs_window_pool_prefix_acquire(leader, r, hit, NULL);
    if (st == KVS_OK && hit->block >= 0) {
      m->holds[r] = true;
      if (hit->reprefill) m->writes[r] = hit->block;
    }
    return st;
  }
  int64_t pages[MAX_KEYS];
  for (uint64_t i = 0; i < hit->host_pages && i < MAX_KEYS; i++) {
    pages[i] = page_for(s, in, false, pages, (size_t)i);
  }
  kvs_status st = kvs_window_pool_prefix_fetch(leader, r, hit, keys, n, pages, NULL);
  if (st == KVS_OK) {
    m->holds[r] = true;
    m->writes[r] = pages[hit->host_pages - 1];
  }
  return st;
}

/* One leader call, as the input says; a refused one changes nothing. */
static void leader_call(kvs_window_pool_t leader, leader_model *m, reader *in) {
  snapshot before, after;
  snap(leader, &before);
  size_t pending = kvs_window_pool_journal_pending(leader);
  uint64_t sequence = kvs_window_pool_journal_sequence(leader);
  uint8_t what = next_byte(in);
  uint64_t r = 1 + next_byte(in) % REQUESTS;
  uint64_t keys[MAX_KEYS];
  kvs_status st = KVS_OK;
  switch (what % 10) {
    case 0:   /* the engine binds a run of pages */
    case 1: { /* or frees one */
      int64_t locs[3 * P];
      uint64_t first = (uint64_t)page_of(in), pages = (uint64_t)(what >> 4) % 3 + 1;
      for (uint64_t i = 0; i < pages * P; i++) locs[i] = (int64_t)(first * P + i);
      st = what % 10 == 0 ? kvs_window_pool_alloc(leader, locs, (size_t)(pages * P), NULL, NULL)
                          : kvs_window_pool_free(leader, locs, (size_t)(pages * P), NULL);
      break;
    }
    case 2: {
      uint64_t slot = 0;
      st = kvs_window_pool_slot_bind(leader, r, &slot, NULL);
      break;
    }
    case 3:
      st = kvs_window_pool_slot_free(leader, r, NULL);
      break;
    case 4: { /* a request caches its pages */
      size_t n = prompt(in, keys);
      int64_t pages[MAX_KEYS];
      uint8_t tails[MAX_KEYS], taken[MAX_KEYS];
      uint8_t t = next_byte(in);
      for (size_t i = 0; i < n; i++) {
        pages[i] = page_for(&before, in, true, pages, i);
        tails[i] = (t >> i) & 1;
      }
      st = kvs_window_pool_prefix_insert(leader, r, keys, pages, tails, n, taken, NULL);
      if (st == KVS_OK) m->holds[r] = true;
      break;
    }
    case 5: { /* a match, kept and taken now */
      size_t n = prompt(in, keys);
      uint8_t how = next_byte(in);
      kvs_prefix_hit hit;
      st = kvs_window_pool_prefix_match_within(leader, keys, n, n * P + 1, how & 1 ? P : 0,
                                               (how >> 1) % 3, &hit, NULL, NULL);
      if (st != KVS_OK) fail("a match was refused", NULL);
      size_t k = m->next_kept++ % KEPT;
      m->kept[k] = hit;
      memcpy(m->kept_keys[k], keys, sizeof keys);
      m->kept_n[k] = n;
      if (m->n_kept < KEPT) m->n_kept++;
      st = take_hit(leader, m, &before, in, r, &hit, keys, n);
      break;
    }
    case 6: { /* a hit kept from before, the index changed since or not */
      if (m->n_kept == 0) return;
      size_t k = next_byte(in) % m->n_kept;
      st = take_hit(leader, m, &before, in, r, &m->kept[k], m->kept_keys[k], m->kept_n[k]);
      break;
    }
    case 7:
    case 8:
      st = what % 10 == 7 ? kvs_window_pool_prefix_release(leader, r, NULL)
                          : kvs_window_pool_prefix_abandon(leader, r, NULL);
      if (st == KVS_OK) {
        m->holds[r] = false;
        m->writes[r] = -1;
      }
      break;
    default: { /* the engine needs pages */
      int64_t freed[PAGES];
      size_t n_freed = 0;
      st = kvs_window_pool_prefix_evict(leader, (what >> 4) % 3, (what >> 6) % 2, freed, PAGES,
                                        &n_freed, NULL, NULL);
      break;
    }
  }
  if (st != KVS_OK) {
    snap(leader, &after);
    if (!same(&before, &after) || kvs_window_pool_journal_pending(leader) != pending ||
        kvs_window_pool_journal_sequence(leader) != sequence) {
      fail("a refused leader call changed the pool", NULL);
    }
  }
  kvs_error err;
  if (kvs_window_pool_check_integrity(leader, &err) != KVS_OK) {
    fail("a leader call left the leader inconsistent", &err);
  }
}

/* ---- corrupted steps ---- */

static kvs_journal_entry prefix_entry(unsigned op, uint64_t page, int64_t operand) {
  kvs_journal_entry e = {KVS_JOURNAL_PREFIX_TAG | ((uint64_t)op << OP_SHIFT) | page, operand};
  return e;
}

static bool is_prefix(const kvs_journal_entry *e) {
  return (e->full_page & KVS_JOURNAL_PREFIX_TAG) == KVS_JOURNAL_PREFIX_TAG;
}

/* Changes one thing about a step, as the input says. */
static void mutate(kvs_journal_entry *batch, size_t *n, reader *in) {
  if (*n == 0) return;
  uint8_t how = next_byte(in);
  size_t i = next_byte(in) % *n, j = next_byte(in) % *n;
  uint8_t value = next_byte(in);
  kvs_journal_entry t;
  switch (how % 8) {
    case 0: /* another full page, sometimes far outside (a prefix entry keeps its kind) */
      if (is_prefix(&batch[i])) {
        batch[i].full_page = (batch[i].full_page & ~((UINT64_C(1) << OP_SHIFT) - 1)) |
                             (value & 0x80 ? (uint64_t)value << 40 : value % (PAGES + 2));
      } else if (batch[i].full_page & KVS_JOURNAL_SLOT_TAG) {
        batch[i].full_page = KVS_JOURNAL_SLOT_TAG | (value % (SLOTS + 2));
      } else {
        batch[i].full_page = value & 0x80 ? (uint64_t)value << 40 : value % (PAGES + 2);
      }
      break;
    case 1: /* another operand: window page, request, key, parent, slot, ... */
      batch[i].window_page = (int64_t)(int8_t)value;
      break;
    case 2: /* a bind becomes a free or back; a prefix entry another operation */
      if (is_prefix(&batch[i])) {
        batch[i].full_page = (batch[i].full_page & ~(UINT64_C(0x3f) << OP_SHIFT)) |
                             ((uint64_t)(value % 14) << OP_SHIFT);
      } else {
        batch[i].window_page = batch[i].window_page >= 0 ? KVS_JOURNAL_FREED : value % WINDOW_PAGES;
      }
      break;
    case 3: /* an entry twice */
      if (*n < MAX_BATCH) {
        memmove(&batch[i + 1], &batch[i], (*n - i) * sizeof *batch);
        (*n)++;
      }
      break;
    case 4: /* an entry lost */
      memmove(&batch[i], &batch[i + 1], (*n - i - 1) * sizeof *batch);
      (*n)--;
      break;
    case 5: /* two entries swapped */
      t = batch[i];
      batch[i] = batch[j];
      batch[j] = t;
      break;
    case 6: /* a prefix entry from nowhere */
      if (*n < MAX_BATCH) {
        memmove(&batch[i + 1], &batch[i], (*n - i) * sizeof *batch);
        batch[i] = prefix_entry(1 + value % 11, (value >> 4) % PAGES, (int64_t)(j % 8) - 1);
        (*n)++;
      }
      break;
    default: /* a page or slot entry from nowhere */
      if (*n < MAX_BATCH) {
        batch[*n].full_page =
            value & 1 ? KVS_JOURNAL_SLOT_TAG | (value >> 1) % SLOTS : value % PAGES;
        batch[*n].window_page = (int64_t)(value >> 4) - 1;
        (*n)++;
      }
      break;
  }
}

/* ---- forged impossible entries ---- */

/* Whether cached block fp is another cached block's parent. */
static bool has_child(const snapshot *s, int64_t fp) {
  for (int k = 0; k < PAGES; k++) {
    if (s->blocks[k].cached && s->blocks[k].parent == fp) return true;
  }
  return false;
}

/* Whether full page fp is bound to a window page. */
static bool bound(const snapshot *s, int64_t fp) { return s->map[fp * P] >= 0; }

/* The first page from `from` (cyclically) for which want(s, fp, arg)
 * holds, or -1. */
static int64_t find(const snapshot *s, uint8_t from,
                    bool (*want)(const snapshot *, int64_t, int64_t), int64_t arg) {
  for (int k = 0; k < PAGES; k++) {
    int64_t fp = (from + k) % PAGES;
    if (want(s, fp, arg)) return fp;
  }
  return -1;
}

static bool held(const snapshot *s, int64_t fp, int64_t arg) {
  (void)arg;
  return s->blocks[fp].cached && s->blocks[fp].refs > 0;
}
static bool parent(const snapshot *s, int64_t fp, int64_t arg) {
  (void)arg;
  return s->blocks[fp].cached && has_child(s, fp);
}
static bool cached(const snapshot *s, int64_t fp, int64_t arg) {
  (void)arg;
  return s->blocks[fp].cached;
}
static bool with_tail(const snapshot *s, int64_t fp, int64_t arg) {
  (void)arg;
  return s->blocks[fp].cached && s->blocks[fp].tail;
}
static bool unbound_untailed(const snapshot *s, int64_t fp, int64_t arg) {
  (void)arg;
  return s->blocks[fp].cached && !s->blocks[fp].tail && !bound(s, fp);
}
static bool untailed(const snapshot *s, int64_t fp, int64_t arg) {
  (void)arg;
  return s->blocks[fp].cached && !s->blocks[fp].tail;
}
static bool uncached(const snapshot *s, int64_t fp, int64_t arg) {
  (void)arg;
  return !s->blocks[fp].cached && fp != DUMMY_FULL;
}
/* A cached block whose chain host slot `arg` does not hold. */
static bool not_in_slot(const snapshot *s, int64_t fp, int64_t arg) {
  return s->blocks[fp].cached && s->host_chain[arg] != chain_of(s, fp);
}

/* The host slot holding block fp's chain, or -1. */
static int64_t slot_of(const snapshot *s, int64_t fp) {
  uint64_t chain = chain_of(s, fp);
  for (int64_t h = 0; h < HOST; h++) {
    if (s->host_used[h] && s->host_chain[h] == chain) return h;
  }
  return -1;
}
static bool spilled(const snapshot *s, int64_t fp, int64_t arg) {
  (void)arg;
  return s->blocks[fp].cached && slot_of(s, fp) >= 0;
}

/* An entry no leader could journal right after the step the follower just
 * replayed (s: the leader's state then), of a kind the input picks; where
 * no block fits that kind, an entry of an operation that does not exist. */
static kvs_journal_entry forge(const snapshot *s, const leader_model *m, reader *in) {
  uint8_t kind = next_byte(in), from = next_byte(in);
  int64_t fp = -1;
  uint64_t r = 1 + from % REQUESTS;
  switch (kind % 15) {
    case 0: /* an eviction of a block a request holds */
      if ((fp = find(s, from, held, 0)) >= 0) {
        return prefix_entry(KVS_PREFIX_OP_EVICT, (uint64_t)fp, (int64_t)s->blocks[fp].key);
      }
      break;
    case 1: /* an eviction of a block another hangs under */
      if ((fp = find(s, from, parent, 0)) >= 0) {
        return prefix_entry(KVS_PREFIX_OP_EVICT, (uint64_t)fp, (int64_t)s->blocks[fp].key);
      }
      break;
    case 2: /* a fetch from a host slot that holds another block */
      for (int64_t h = 0; h < HOST && fp < 0; h++) {
        if (s->host_used[(h + from) % HOST] &&
            (fp = find(s, from, not_in_slot, (h + from) % HOST)) >= 0) {
          return prefix_entry(KVS_PREFIX_OP_FETCH, (uint64_t)fp, (h + from) % HOST);
        }
      }
      break;
    case 3: /* a spill of a block whose chain another host slot holds */
      if ((fp = find(s, from, spilled, 0)) >= 0) {
        return prefix_entry(KVS_PREFIX_OP_SPILL, (uint64_t)fp,
                            (slot_of(s, fp) + 1 + kind / 15 % (HOST - 1)) % HOST);
      }
      break;
    case 4: /* an acquire by a request that holds a block already */
      for (uint64_t k = 0; k < REQUESTS; k++) {
        uint64_t q = 1 + (r - 1 + k) % REQUESTS;
        if (m->holds[q] && (fp = find(s, from, cached, 0)) >= 0) {
          return prefix_entry(KVS_PREFIX_OP_ACQUIRE, (uint64_t)fp, (int64_t)q);
        }
      }
      break;
    case 5: /* a release by a request that holds nothing */
      for (uint64_t k = 0; k < REQUESTS; k++) {
        uint64_t q = 1 + (r - 1 + k) % REQUESTS;
        if (!m->holds[q] && (fp = find(s, from, cached, 0)) >= 0) {
          return prefix_entry(KVS_PREFIX_OP_RELEASE, (uint64_t)fp, (int64_t)q);
        }
      }
      break;
    case 6: /* a tail kept where the block keeps one */
      if ((fp = find(s, from, with_tail, 0)) >= 0) {
        return prefix_entry(KVS_PREFIX_OP_TAIL, (uint64_t)fp, -1);
      }
      break;
    case 7: /* a tail dropped while a request writes it */
      for (uint64_t k = 0; k < REQUESTS; k++) {
        uint64_t q = 1 + (r - 1 + k) % REQUESTS;
        if (m->writes[q] >= 0)
          return prefix_entry(KVS_PREFIX_OP_UNTAIL, (uint64_t)m->writes[q], -1);
      }
      break;
    case 8: /* a block linked that was never started */
      if ((fp = find(s, from, uncached, 0)) >= 0) {
        return prefix_entry(KVS_PREFIX_OP_NEW_LINK, (uint64_t)fp, -1);
      }
      break;
    case 9: /* a block started on a page that holds one */
      if ((fp = find(s, from, cached, 0)) >= 0) {
        return prefix_entry(KVS_PREFIX_OP_NEW_KEY, (uint64_t)fp, 10 + from % 50);
      }
      break;
    case 10: /* a tail state restored from a block without a readable tail */
      if ((fp = find(s, from, untailed, 0)) >= 0) {
        return prefix_entry(KVS_PREFIX_OP_RESTORE, (uint64_t)fp, 0);
      }
      break;
    case 11: /* a tail kept on a page that holds no window page */
      if ((fp = find(s, from, unbound_untailed, 0)) >= 0) {
        return prefix_entry(KVS_PREFIX_OP_TAIL, (uint64_t)fp, -1);
      }
      break;
    case 12: /* the window page of a tail freed, the tail kept */
      if ((fp = find(s, from, with_tail, 0)) >= 0) {
        kvs_journal_entry e = {(uint64_t)fp, KVS_JOURNAL_FREED};
        return e;
      }
      break;
    case 13: /* a page outside the history */
      return prefix_entry(1 + from % 11, PAGES + from, 0);
    default:
      break;
  }
  return prefix_entry(12 + from % 52, (uint64_t)(from % PAGES), 0);
}

/* ---- the follower ---- */

/* A fresh follower with the leader's steps so far replayed. */
static kvs_window_pool_t follower(const kvs_pool_sizes *sizes, const kvs_journal_entry *history,
                                  const size_t *counts, size_t steps) {
  kvs_window_pool_options o = KVS_WINDOW_POOL_OPTIONS_INIT;
  o.max_running = 4;
  o.journal_capacity = 0;
  o.prefix_cache = true;
  o.prefix_align = P;
  o.host_pages = HOST;
  o.replay_capacity = MAX_BATCH;
  kvs_window_pool_t pool = NULL;
  kvs_error err;
  if (kvs_window_pool_create(sizes, &o, &pool, &err) != KVS_OK) fail("no follower", &err);
  for (size_t i = 0, at = 0; i < steps; at += counts[i++]) {
    if (kvs_window_pool_apply(pool, history + at, counts[i], &err) != KVS_OK) {
      fail("a rebuilt follower refused a step of the leader's", &err);
    }
  }
  return pool;
}

/* The follower as it was (before), checked after a refused step. */
static void expect_unchanged(const struct kvs_window_pool *pool, const snapshot *before) {
  snapshot after;
  snap(pool, &after);
  if (!same(before, &after)) fail("a refused step changed the follower", NULL);
  kvs_error err;
  if (kvs_window_pool_check_integrity(pool, &err) != KVS_OK) {
    fail("a refused step left the follower inconsistent", &err);
  }
}

static bool any_prefix(const kvs_journal_entry *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (is_prefix(&e[i])) return true;
  }
  return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  KVS_FUZZ_RUN();
  kvs_pool_sizes sizes = {
      P,     0.5, PAGES * P, WINDOW_PAGES, WINDOW_PAGES * P, 1, KVS_STATE_RINGS_PER_REQUEST,
      SLOTS, true};
  kvs_window_pool_options opts = KVS_WINDOW_POOL_OPTIONS_INIT;
  opts.max_running = 4;
  opts.journal_capacity = JOURNAL;
  opts.prefix_cache = true;
  opts.prefix_align = P;
  opts.host_pages = HOST;
  kvs_window_pool_t leader = NULL;
  kvs_error err;
  if (kvs_window_pool_create(&sizes, &opts, &leader, &err) != KVS_OK) fail("no leader", &err);
  /* Every step the leader journaled, for rebuilding a follower that left it. */
  size_t counts[MAX_STEPS], steps = 0, at = 0, room = 64;
  kvs_journal_entry *history = malloc(room * sizeof *history);
  if (history == NULL) fail("no memory", NULL);
  kvs_window_pool_t mirror = follower(&sizes, history, counts, 0);
  reference ref;
  reference_init(&ref);
  if (!matches(mirror, &ref)) fail("a fresh pool is not the empty reference", NULL);
  leader_model m;
  memset(&m, 0, sizeof m);
  for (int r = 0; r <= REQUESTS; r++) m.writes[r] = -1;
  reader in = {data, size, 0};
  bool replayed_prefix = false;
  while (in.at < in.size && steps < MAX_STEPS) {
    uint8_t calls = next_byte(&in) % 4 + 1;
    for (uint8_t k = 0; k < calls; k++) leader_call(leader, &m, &in);
    kvs_journal_entry original[MAX_BATCH];
    size_t n = 0;
    kvs_window_pool_journal_drain(leader, original, JOURNAL, &n);
    if (kvs_window_pool_journal_pending(leader) != 0) fail("a step was not drained whole", NULL);
    snapshot leader_now, before;
    snap(leader, &leader_now);
    snap(mirror, &before);

    /* A corrupted step first, about one in three. */
    if (next_byte(&in) % 3 == 0) {
      kvs_journal_entry batch[MAX_BATCH];
      size_t nb = n;
      memcpy(batch, original, n * sizeof *batch);
      mutate(batch, &nb, &in);
      reference next = ref;
      bool consistent = reference_apply(&next, batch, nb);
      if (kvs_window_pool_apply(mirror, batch, nb, NULL) == KVS_OK) {
        if (!consistent) fail("the follower took bindings no replay gives", NULL);
        if (!matches(mirror, &next)) fail("the follower bound other than the replay", NULL);
        if (kvs_window_pool_check_integrity(mirror, &err) != KVS_OK) {
          fail("the follower took a changed step that leaves it inconsistent", &err);
        }
        /* It left the leader (unless the change changed nothing): rebuilt. */
        kvs_window_pool_destroy(mirror);
        mirror = follower(&sizes, history, counts, steps);
        expect_unchanged(mirror, &before);
      } else {
        expect_unchanged(mirror, &before);
      }
    }

    /* The leader's step with an impossible entry after it: refused whole. */
    {
      kvs_journal_entry batch[MAX_BATCH];
      memcpy(batch, original, n * sizeof *batch);
      batch[n] = forge(&leader_now, &m, &in);
      if (kvs_window_pool_apply(mirror, batch, n + 1, NULL) == KVS_OK) {
        fail("the follower took an entry no leader could journal", NULL);
      }
      expect_unchanged(mirror, &before);
    }

    /* The leader's step as it was: it applies, and the follower is the leader. */
    reference next = ref;
    if (!reference_apply(&next, original, n)) fail("the leader's step binds what it cannot", NULL);
    if (kvs_window_pool_apply(mirror, original, n, &err) != KVS_OK) {
      fail("the follower refused the leader's own step", &err);
    }
    ref = next;
    if (!matches(mirror, &ref)) fail("the follower bound other than the replay", NULL);
    snapshot now;
    snap(mirror, &now);
    if (!same(&now, &leader_now))
      fail("the follower replayed the leader's step to another state", NULL);
    if (kvs_window_pool_check_integrity(mirror, &err) != KVS_OK) {
      fail("the leader's step left the follower inconsistent", &err);
    }
    if (any_prefix(original, n)) replayed_prefix = true;
    if (at + n > room) {
      room = 2 * (at + n);
      history = realloc(history, room * sizeof *history);
      if (history == NULL) fail("no memory", NULL);
    }
    memcpy(history + at, original, n * sizeof *history);
    at += n;
    counts[steps++] = n;
  }
  if (replayed_prefix) KVS_FUZZ_PAST();
  kvs_window_pool_destroy(leader);
  kvs_window_pool_destroy(mirror);
  free(history);
  return 0;
}
