/* Fuzzes the journal apply path with mostly valid journals.
 *
 * The input drives a leader pool (binds and frees of page runs), whose
 * journal is shipped in batches to a mirror pool, as the runtime does.
 * Some batches are mutated first (an entry's page changed, bind turned
 * into free or back, an entry duplicated, dropped or two swapped), so the
 * apply path sees both the journals a leader writes and near misses.
 *
 * Every apply is compared with a plain reference replay over two arrays
 * (full page -> window page, window page free or not), which decides
 * independently whether the batch is consistent:
 *   - apply succeeds exactly when the reference accepts the batch;
 *   - after a success the mirror's whole mapping, free window pages,
 *     bound count and digest equal the reference's;
 *   - after a refusal the mirror is exactly as it was;
 *   - an unmutated batch on a mirror in step with the leader always
 *     applies, and leaves the mirror equal to the leader;
 *   - the pool's integrity check passes after every batch.
 * An input counts as past parsing when at least one batch was applied. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pool/window_pool.h"
#include "tests/fuzz/fuzz_stats.h"

KVS_FUZZ_TARGET("journal_apply_fuzz",
                "at least one journal batch validated and applied, checked against the "
                "reference replay");

#define PAGES 16       /* full pages, the dummy (last) included */
#define WINDOW_PAGES 9 /* window pages, the dummy (last) included */
#define P 8
#define USABLE (WINDOW_PAGES - 1)
#define DUMMY_FULL (PAGES - 1)
#define MAX_BATCH 64

/* The reference: nothing but arrays and the rules a journal must obey. */
typedef struct reference {
  int64_t window_of[PAGES]; /* -1: unbound */
  bool window_free[USABLE];
} reference;

static void reference_init(reference *r) {
  for (int fp = 0; fp < PAGES; fp++) r->window_of[fp] = -1;
  for (int wp = 0; wp < USABLE; wp++) r->window_free[wp] = true;
}

/* Replays a batch onto a copy; *r changes only when every entry is
 * consistent with the state the entries before it left. */
static bool reference_apply(reference *r, const kvs_journal_entry *e, size_t n) {
  reference next = *r;
  for (size_t i = 0; i < n; i++) {
    uint64_t fp = e[i].full_page;
    int64_t wp = e[i].window_page;
    if (fp >= PAGES || fp == DUMMY_FULL) return false;
    if (wp >= 0) {
      if (wp >= USABLE || next.window_of[fp] >= 0 || !next.window_free[wp]) return false;
      next.window_of[fp] = wp;
      next.window_free[wp] = false;
    } else if (wp == KVS_JOURNAL_FREED) {
      int64_t cur = next.window_of[fp];
      if (cur < 0 || cur >= USABLE || next.window_free[cur]) return false;
      next.window_of[fp] = -1;
      next.window_free[cur] = true;
    } else {
      return false;
    }
  }
  *r = next;
  return true;
}

/* Whether the pool holds exactly the reference's bindings, free window
 * pages, count and digest. */
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
  return kvs_window_pool_bound_pages(pool) == bound && kvs_window_pool_digest(pool) == digest &&
         kvs_window_pool_swa_available(pool) == free_pages * P;
}

static bool same_pools(const struct kvs_window_pool *a, const struct kvs_window_pool *b) {
  return memcmp(kvs_window_pool_mapping(a), kvs_window_pool_mapping(b),
                (PAGES * P + 1) * sizeof(int64_t)) == 0 &&
         kvs_window_pool_digest(a) == kvs_window_pool_digest(b);
}

/* Reads the input a byte at a time; zeros once it runs out. */
typedef struct reader {
  const uint8_t *data;
  size_t size, at;
} reader;

static uint8_t next_byte(reader *in) { return in->at < in->size ? in->data[in->at++] : 0; }

/* Binds (bind true) or frees the run of n full pages from first. */
static void leader_op(kvs_window_pool_t leader, bool bind, uint64_t first, uint64_t n) {
  int64_t locs[3 * P];
  for (uint64_t i = 0; i < n * P; i++) locs[i] = (int64_t)(first * P + i);
  if (bind) {
    kvs_window_pool_alloc(leader, locs, (size_t)(n * P), NULL, NULL);
  } else {
    kvs_window_pool_free(leader, locs, (size_t)(n * P), NULL);
  }
}

/* Changes one thing about a batch, as the input says. */
static void mutate(kvs_journal_entry *batch, size_t *n, reader *in) {
  if (*n == 0) return;
  uint8_t how = next_byte(in);
  size_t i = next_byte(in) % *n, j = next_byte(in) % *n;
  uint8_t value = next_byte(in);
  kvs_journal_entry t;
  switch (how % 7) {
    case 0: /* another full page, sometimes far outside */
      batch[i].full_page = value & 0x80 ? (uint64_t)value << 40 : value % (PAGES + 2);
      break;
    case 1: /* another window page, or a value no entry may hold */
      batch[i].window_page = (int64_t)(int8_t)value;
      break;
    case 2: /* a bind becomes a free, or a free a bind */
      batch[i].window_page = batch[i].window_page >= 0 ? KVS_JOURNAL_FREED : value % WINDOW_PAGES;
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
    default: /* an entry from nowhere */
      if (*n < MAX_BATCH) {
        batch[*n].full_page = value % PAGES;
        batch[*n].window_page = (int64_t)(value >> 4) - 1;
        (*n)++;
      }
      break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  KVS_FUZZ_RUN();
  kvs_pool_sizes sizes = {P, 0.5, PAGES * P, WINDOW_PAGES, WINDOW_PAGES * P, 1};
  kvs_window_pool_options opts = KVS_WINDOW_POOL_OPTIONS_INIT;
  opts.journal_capacity = 256;
  kvs_window_pool_t leader = NULL, mirror = NULL;
  if (kvs_window_pool_create(&sizes, &opts, &leader, NULL) != KVS_OK ||
      kvs_window_pool_create(&sizes, &opts, &mirror, NULL) != KVS_OK) {
    __builtin_trap();
  }
  reference ref;
  reference_init(&ref);
  if (!matches(mirror, &ref)) __builtin_trap(); /* a fresh pool is the empty reference */
  reader in = {data, size, 0};
  bool in_step = true; /* the mirror holds what the leader holds */
  bool applied_any = false;
  while (in.at < in.size) {
    /* A few leader operations: 1 byte of kind and length, 1 of page. */
    uint8_t ops = next_byte(&in) % 4 + 1;
    for (uint8_t k = 0; k < ops; k++) {
      uint8_t op = next_byte(&in);
      leader_op(leader, (op & 1) == 0, next_byte(&in) % PAGES, (uint64_t)(op >> 1) % 3 + 1);
    }
    kvs_journal_entry batch[MAX_BATCH];
    size_t n = 0;
    kvs_window_pool_journal_drain(leader, batch, MAX_BATCH - 8, &n);
    /* About one batch in four is mutated. */
    bool mutated = (next_byte(&in) & 3) == 0;
    kvs_journal_entry original[MAX_BATCH];
    size_t n_original = n;
    memcpy(original, batch, n * sizeof *batch);
    if (mutated) mutate(batch, &n, &in);

    const kvs_journal_entry *tries[2] = {batch, original};
    size_t counts[2] = {n, n_original};
    for (int t = 0; t < (mutated ? 2 : 1); t++) {
      /* A mutated batch first; when the mirror refuses it, the leader's
       * own batch follows and must apply. */
      uint64_t digest = kvs_window_pool_digest(mirror);
      uint64_t available = kvs_window_pool_swa_available(mirror);
      int64_t before[PAGES * P + 1];
      memcpy(before, kvs_window_pool_mapping(mirror), sizeof before);
      bool accepted = reference_apply(&ref, tries[t], counts[t]);
      kvs_error err;
      kvs_status st = kvs_window_pool_apply(mirror, tries[t], counts[t], &err);
      if ((st == KVS_OK) != accepted) __builtin_trap(); /* apply and reference disagree */
      if (st == KVS_OK) {
        applied_any = true;
        if (!matches(mirror, &ref)) __builtin_trap(); /* applied other than replayed */
        if (t == 0 && mutated &&
            (n != n_original || memcmp(batch, original, n * sizeof *batch) != 0)) {
          in_step = false; /* a changed batch was consistent: the mirror left the leader */
        }
      } else {
        if (digest != kvs_window_pool_digest(mirror) ||
            available != kvs_window_pool_swa_available(mirror) ||
            memcmp(before, kvs_window_pool_mapping(mirror), sizeof before) != 0) {
          __builtin_trap(); /* a refused journal changed the mirror */
        }
        if (in_step && (t == 1 || !mutated)) __builtin_trap(); /* the leader's journal refused */
      }
      if (kvs_window_pool_check_integrity(mirror, &err) != KVS_OK) __builtin_trap();
      if (!mutated || t == 1) break;
      if (st == KVS_OK) break; /* the mutated batch was the same bindings */
    }
    if (in_step && !same_pools(mirror, leader)) __builtin_trap();
  }
  if (applied_any) KVS_FUZZ_PAST();
  kvs_window_pool_destroy(leader);
  kvs_window_pool_destroy(mirror);
  return 0;
}
