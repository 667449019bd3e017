/* The page-atomic window pool: which window page backs each full page.
 *
 * Token-faced on the outside (callers pass full-history locations),
 * page-atomic inside. A window page is bound to exactly one full page with
 * in-page offsets preserved (window_slot = window_base + loc % P), because
 * the compress-state ring location is derived from the window slot,
 *   state_loc = (slot / P) * ring_size + slot % ring_size,
 * and never stored: a stored location outlives its binding and, once the
 * page is recycled, addresses another request's carry state.
 *
 * The last full page and the last window page are a permanently bound
 * dummy (graph-padded rows scatter there); the dummy window page is never
 * on the free list. The mapping has one extra trailing row holding -1, so
 * a gather at -1 reads "no slot" instead of faulting.
 *
 * Beyond the reference design, every allocator bind and free is appended
 * to a bounded binding journal and folded into an order-independent 64-bit
 * digest in O(1), so ranks can prove identical bindings without shipping
 * the table. Every call is all-or-nothing and nothing aborts.
 *
 * NULL: every kvs_status call refuses a NULL pool, location array (when
 * it holds locations) or output with KVS_ERR_INVALID_ARGUMENT naming the
 * function and the argument, changing nothing; the accessors read 0 for a
 * NULL pool (kvs_window_pool_mapping NULL, kvs_window_pool_slot_of -1,
 * kvs_window_pool_slot_request KVS_SLOT_FREE, kvs_window_pool_state_rings
 * per page), and kvs_window_pool_journal_drain moves nothing. */
#ifndef KVS_POOL_WINDOW_POOL_H
#define KVS_POOL_WINDOW_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cost_model.h"
#include "pool/free_list.h"
#include "pool/journal.h"
#include "core/serving_defaults.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_window_pool *kvs_window_pool_t;

/* A versioned config: start from KVS_WINDOW_POOL_OPTIONS_INIT. */
typedef struct kvs_window_pool_options {
  size_t size;             /* sizeof(kvs_window_pool_options) */
  uint64_t max_running;    /* concurrent requests, for the chunk budget */
  bool radix;              /* radix (prefix-sharing) cache mode */
  size_t journal_capacity; /* entries; 0 turns journaling off */
  /* The prefix cache (kvs_window_pool_prefix_*): off by default. Hits end
   * on multiples of lcm(P, prefix_align) tokens (the compression ratios'
   * lcm, 128 for DSV4: the rings are empty there). */
  bool prefix_cache;
  uint64_t prefix_align;
  /* The prefix cache's host tier: full pages it holds (0: none; fewer than
   * KVS_HOST_SLOTS_LIMIT). Evicted blocks move there and a hit fetches them
   * back (pool/host.c). */
  uint64_t host_pages;
  /* Entries one replayed batch may carry (kvs_window_pool_apply): 0 means
   * journal_capacity, or 4096 without a journal. A follower, which
   * journals nothing, is given the leader's step capacity here: its
   * replay must take every batch the leader can journal. */
  size_t replay_capacity;
  /* The prefix cache's disk tier: full pages it holds (0: none; fewer
   * than KVS_HOST_SLOTS_LIMIT). Written through: each cached block is
   * stored once (kvs_window_pool_prefix_write_back), and a match reaches
   * into it past the GPU index and the host tier. */
  uint64_t disk_pages;
  /* Blocks one step writes to the disk tier at most (>= 1 with one). */
  uint64_t disk_stores_per_step;
} kvs_window_pool_options;

/* A host tier holds fewer slots (full pages) than this: 2^30. */
#define KVS_HOST_SLOTS_LIMIT (UINT64_C(1) << 30)

#define KVS_WINDOW_POOL_DEFAULT_JOURNAL 4096
#define KVS_WINDOW_POOL_OPTIONS_INIT                                                               \
  {                                                                                                \
    sizeof(kvs_window_pool_options), 0, KVS_DEFAULT_RADIX, KVS_WINDOW_POOL_DEFAULT_JOURNAL, false, \
        128, 0, 0, 0, 0                                                                            \
  }

/* Builds the mapping (all -1 plus the sentinel row), the free list over
 * n_win_slots - P slots, and the dummy binding. full_token and n_win_slots
 * must be whole pages, at least one each. options NULL means the INIT
 * values. */
kvs_status kvs_window_pool_create(const kvs_pool_sizes *sizes,
                                  const kvs_window_pool_options *options, kvs_window_pool_t *out,
                                  kvs_error *err);
/* NULL is accepted. */
void kvs_window_pool_destroy(kvs_window_pool_t pool);

uint64_t kvs_window_pool_page_size(const struct kvs_window_pool *pool);
uint64_t kvs_window_pool_full_tokens(const struct kvs_window_pool *pool);
uint64_t kvs_window_pool_window_slots(const struct kvs_window_pool *pool);
/* Allocatable window slots plus one: the generic pool's convention of
 * capacity == tokens - 1, with the dummy page already excluded. */
uint64_t kvs_window_pool_swa_num_tokens(const struct kvs_window_pool *pool);
/* Window slots that can still be handed out. */
uint64_t kvs_window_pool_swa_available(const struct kvs_window_pool *pool);
/* Full pages currently bound by the allocator (the dummy excluded). */
uint64_t kvs_window_pool_bound_pages(const struct kvs_window_pool *pool);
/* The largest prefill chunk the pool can hold the window for: the window
 * pages left after the working-set reserve, halved (a batched prefill
 * holds a whole chunk's window live at once), and at least one page. */
uint64_t kvs_window_pool_prefill_chunk_budget(const struct kvs_window_pool *pool);

/* Binds one window page per full page in full_locs, which must be whole,
 * contiguous, ascending, page-aligned pages inside the history and not
 * already bound. Offsets are preserved. With too few free pages:
 * KVS_ERR_EXHAUSTED and *shortfall (when non-NULL) filled; with too
 * little journal room: KVS_ERR_JOURNAL_FULL. Either way nothing changes. */
kvs_status kvs_window_pool_alloc(kvs_window_pool_t pool, const int64_t *full_locs, size_t n,
                                 kvs_free_list_shortfall *shortfall, kvs_error *err);

/* kvs_window_pool_alloc for full-page numbers: each in 0 .. full pages
 * - 2 (the last is the dummy), none twice. The same checks, journal and
 * order as the location form, which converts to this. */
kvs_status kvs_window_pool_alloc_pages(kvs_window_pool_t pool, const int64_t *pages, size_t n,
                                       kvs_free_list_shortfall *shortfall, kvs_error *err);

/* Unbinds the full pages these locations cover and returns their window
 * pages. Negative locations are ignored. Every touched page must be
 * covered exactly once in full (KVS_ERR_PARTIAL_PAGE names up to four
 * (base, count) pairs); pages already unbound are a no-op, so a slide, a
 * tombstone and an eviction may all name the same page. Pages are freed
 * in ascending order. The dummy page is refused. */
kvs_status kvs_window_pool_free(kvs_window_pool_t pool, const int64_t *full_locs, size_t n,
                                kvs_error *err);

/* kvs_window_pool_free for full-page numbers, freed in the order given:
 * negative entries are skipped (a block table's unassigned -1), a page
 * named twice is refused, the rest as the location form. */
kvs_status kvs_window_pool_free_pages(kvs_window_pool_t pool, const int64_t *pages, size_t n,
                                      kvs_error *err);

/* The window slot holding full_loc; -1 for a negative or unbound loc.
 * full_loc == full_tokens reads the sentinel row (-1); past it is
 * KVS_ERR_OUT_OF_RANGE. */
kvs_status kvs_window_pool_translate(const struct kvs_window_pool *pool, int64_t full_loc,
                                     int64_t *out, kvs_error *err);

/* The mapping itself, full_tokens + 1 entries (the last is the sentinel),
 * for upload to a device table. Valid until the pool is destroyed. */
const int64_t *kvs_window_pool_mapping(const struct kvs_window_pool *pool);

/* The ring context of one decode step: the window slot of `pos`, of its
 * predecessor (position 0 reads itself), and for each ring slot j < P the
 * slot of the latest position p <= pos with p % P == j, or -1 where the
 * sequence has not reached j. full_locs is the request's snapshot of full
 * locations per position (n of them; pos < n). ring_out holds P entries;
 * on an error its contents are unspecified (the pool is never changed).
 * Computed fresh on every call: a cached context freezes stale slots. */
kvs_status kvs_window_pool_window_ctx(const struct kvs_window_pool *pool, uint64_t pos,
                                      const int64_t *full_locs, size_t n, int64_t *window_slot,
                                      int64_t *prev_window_slot, int64_t *ring_out, kvs_error *err);

/* Binds a full page to a window page directly, outside the allocator and
 * the journal (the dummy page uses this; tests and fault injection do
 * too). Both bases must be page-aligned and inside the pool. The digest
 * follows the mapping, so an injected binding shows up as a digest that
 * differs from other ranks'. */
kvs_status kvs_window_pool_bind_raw(kvs_window_pool_t pool, uint64_t full_page_base,
                                    uint64_t window_page_base, kvs_error *err);

/* Drops the bindings of the full pages these locations cover without
 * returning their window pages (negative locations ignored; whole pages
 * only). What a caller that leaks looks like. Not journaled. */
kvs_status kvs_window_pool_unbind_raw(kvs_window_pool_t pool, const int64_t *full_locs, size_t n,
                                      kvs_error *err);

/* Every window page is free or bound to exactly one full page, bindings
 * are page-atomic and aligned, the dummy and sentinel are intact, and
 * free units + bound pages == capacity units exactly (a <= would tolerate
 * a leak). Also checks the digest against its recomputation. The message
 * names the page at fault. */
kvs_status kvs_window_pool_check_integrity(const struct kvs_window_pool *pool, kvs_error *err);

/* The running digest: a sum over bound full pages of a 64-bit mix of
 * (full page, window page), the dummy included. Equal mappings give equal
 * digests whatever order they were built in. */
uint64_t kvs_window_pool_digest(const struct kvs_window_pool *pool);
/* Its full pages' share alone (no request slots): what a table that
 * follows the pool digests from its own rows (kvs_table_digest). 0 for
 * NULL. */
uint64_t kvs_window_pool_page_digest(const struct kvs_window_pool *pool);
/* The same, recomputed from the mapping in O(pages). */
uint64_t kvs_window_pool_digest_recompute(const struct kvs_window_pool *pool);
/* The digest of full pages [first, end) only, from the mapping: ranks
 * bisect a mismatch with it. */
uint64_t kvs_window_pool_digest_range(const struct kvs_window_pool *pool, uint64_t first,
                                      uint64_t end);
/* One binding's term in the digest. */
uint64_t kvs_binding_digest_term(uint64_t full_page, uint64_t window_page);
/* The index space the digest covers: the full pages, then the request
 * slots (kvs_window_pool_digest_range takes indices in it). */
uint64_t kvs_window_pool_digest_units(const struct kvs_window_pool *pool);

/* The journal of allocator binds and frees since the last drain. */
size_t kvs_window_pool_journal_pending(const struct kvs_window_pool *pool);
size_t kvs_window_pool_journal_capacity(const struct kvs_window_pool *pool);
uint64_t kvs_window_pool_journal_sequence(const struct kvs_window_pool *pool);
void kvs_window_pool_journal_drain(kvs_window_pool_t pool, kvs_journal_entry *out, size_t cap,
                                   size_t *n_out);

/* Replays a leader's journal onto this pool (a follower's mirror): a bind
 * takes that exact window page off this pool's free list, a free returns
 * it. The whole batch is validated first and applied only if every entry
 * is consistent with this pool's state (KVS_ERR_CONFLICT names the entry
 * and page otherwise) and, with a prefix cache, it leaves the index as a
 * leader's step does: every block it starts linked, every tail on a page
 * it names keeping a window page. Applied entries are not re-journaled. */
kvs_status kvs_window_pool_apply(kvs_window_pool_t pool, const kvs_journal_entry *entries, size_t n,
                                 kvs_error *err);

/* Which position occupies ring slot j of a `win`-slot ring at decode
 * position pos: pos - ((pos - j) mod win) with a euclidean modulo, or -1
 * when the sequence has not reached slot j. A truncated modulo would name
 * a position after pos for j > pos: a slot not written yet. */
kvs_status kvs_window_ring_position(int64_t pos, uint64_t j, uint64_t win, int64_t *out,
                                    kvs_error *err);

/* ---- request slots (per-request compress-state rings) ----
 *
 * With rings per request (kvs_state_rings, kvs_pool_sizes.n_req_slots > 0)
 * every running request holds one slot, bound by the leader's allocator at
 * admission and freed at completion, journaled and replayed like page
 * bindings and folded into the same digest and integrity check. The last
 * slot is a dummy, bound for good, where graph-padded rows write. A ring
 * location is derived from the live slot and the position, never stored:
 * kvs_request_state_loc. */

/* Request values a slot can hold besides a request (>= 0). */
#define KVS_SLOT_FREE (-1)
#define KVS_SLOT_DUMMY (-2)
/* Requests are numbered below this (they share the journal's int64). */
#define KVS_MAX_REQUEST_ID (UINT64_C(1) << 62)

/* Where the pool's sizes place the rings. */
kvs_state_rings kvs_window_pool_state_rings(const struct kvs_window_pool *pool);
/* Slots, the dummy included; 0 when the pool's rings are per page. */
uint64_t kvs_window_pool_request_slots(const struct kvs_window_pool *pool);
/* Slots bound to requests (the dummy excluded). */
uint64_t kvs_window_pool_bound_slots(const struct kvs_window_pool *pool);

/* Binds the lowest free slot to `request` (< KVS_MAX_REQUEST_ID, not bound
 * already: KVS_ERR_CONFLICT), journaled; *slot is it. No free slot is
 * KVS_ERR_EXHAUSTED, a pool without slots KVS_ERR_UNSUPPORTED, no journal
 * room KVS_ERR_JOURNAL_FULL; nothing changes on any of them. */
kvs_status kvs_window_pool_slot_bind(kvs_window_pool_t pool, uint64_t request, uint64_t *slot,
                                     kvs_error *err);
/* Frees the slot of `request`, journaled. A request without one is
 * KVS_ERR_NOT_FOUND (a second completion is a scheduler's bug). */
kvs_status kvs_window_pool_slot_free(kvs_window_pool_t pool, uint64_t request, kvs_error *err);
/* The slot `request` holds, or -1. */
int64_t kvs_window_pool_slot_of(const struct kvs_window_pool *pool, uint64_t request);
/* What slot `slot` holds: a request, KVS_SLOT_FREE or KVS_SLOT_DUMMY;
 * KVS_SLOT_FREE past the slots. */
int64_t kvs_window_pool_slot_request(const struct kvs_window_pool *pool, uint64_t slot);
/* Sets what a slot holds directly, outside the allocator and the journal
 * (fault injection: the digest follows, so another rank sees it). The
 * dummy cannot be changed. */
kvs_status kvs_window_pool_slot_bind_raw(kvs_window_pool_t pool, uint64_t slot, int64_t request,
                                         kvs_error *err);
/* One slot binding's term in the digest. */
uint64_t kvs_slot_digest_term(uint64_t slot, uint64_t request);

/* The ring location of a per-request ring: slot * ring + pos % ring, or
 * -1 for slot -1 or a negative position (an idle row). ring must be > 0;
 * out NULL is KVS_ERR_INVALID_ARGUMENT. A location past INT64_MAX is
 * KVS_ERR_OVERFLOW naming slot, ring and position, *out untouched. */
kvs_status kvs_request_state_loc(int64_t slot, int64_t pos, uint64_t ring, int64_t *out,
                                 kvs_error *err);

/* The compress-state ring location of a window slot, derived from the live
 * binding: (slot / P) * ring_size + slot % ring_size, or -1 for -1.
 * ring_size must divide P, which is what makes pages' ring blocks
 * disjoint; it also keeps the location at or below the slot, so every
 * int64 slot has one (no overflow). */
kvs_status kvs_state_loc(int64_t window_slot, uint64_t ring_size, uint64_t page, int64_t *out,
                         kvs_error *err);

/* ---- the prefix cache ----
 *
 * Full pages of finished or running requests stay cached under a prefix
 * index: a tree over page-aligned blocks whose identity the engine gives
 * (a key per page: a chained hash of its tokens, say), one block per cached
 * full page (the block is named by its page), with reference counts (the
 * running requests whose hit or inserted path runs through the block). A
 * request that shares a prefix binds the cached pages instead of
 * recomputing their compressed and indexer rows.
 *
 * A hit ends on a boundary that is a multiple of lcm(P, prefix_align)
 * tokens and below the prompt's last token, so every compress-state ring
 * is empty there. The window tokens before the boundary are the window
 * page of the page ending there: either retained (the block's "tail", the
 * window binding a finished request left, kept as long as the cache keeps
 * it) or re-prefilled (the engine's re-prefill length, a window page bound
 * for the hitting request, which writes it alone: the tail is marked with
 * its writer and no other request hits through it until the writer
 * releases). The match chooses per hit what costs less: truncating to the
 * deepest retained boundary or re-prefilling. A cached full page can never
 * be bound for writing (kvs_window_pool_alloc refuses it: no aliasing),
 * and a tail's binding is the cache's (kvs_window_pool_free skips it).
 *
 * The leader decides everything (match, acquire, insert, release, evict:
 * LRU over unreferenced leaves, tails of unreferenced blocks first when the
 * window needs pages); each decision is journaled in the pool's journal
 * (entries tagged KVS_JOURNAL_PREFIX_TAG) and replayed by kvs_window_pool_apply
 * on every rank, all or nothing. The pool digest covers the index (a term
 * per block: page, key, parent, refs, tail, writer), its index space grows
 * by one unit per full page, so a check's bisection names a diverging
 * cached block, and kvs_window_pool_check_integrity checks conservation:
 * every block's refs equal the holds through it, children counts, the key
 * map, tails bound, writers held. */

/* A prefix entry: in a pool with a prefix cache, entries whose two top
 * bits are set (request slots never reach 2^62); a pool without one reads
 * them as request-slot entries, and refuses them as such. */
#define KVS_JOURNAL_PREFIX_TAG (UINT64_C(3) << 62)

/* What a match found. Tokens are multiples of P. */
typedef struct kvs_prefix_hit {
  uint64_t matched_pages;    /* consecutive cached pages of the keys from the root */
  uint64_t hit_tokens;       /* the prefix the request reuses: its first uncomputed position */
  uint64_t reprefill_tokens; /* window tokens the request recomputes before hit_tokens */
  uint64_t truncated_tokens; /* matched (aligned, capped) tokens left to recompute */
  int64_t block;             /* the hit's deepest block (its full page), -1 for no hit */
  bool reprefill;            /* the request writes the window page of `block` */
  /* Blocks past `block` (-1: the root) found in the host tier: the hit is
   * taken with kvs_window_pool_prefix_fetch, which gives them GPU pages,
   * and always re-prefills the window (reprefill is true). */
  uint64_t host_pages;
  /* Which block `block` named when matched (its birth in the index; 0 for
   * the root): acquire and fetch refuse a hit whose block left the index
   * since, even if its page came back as another block. */
  uint64_t stamp;
  /* Of the host_pages blocks, those read from the disk tier (the rest
   * come from the host tier). */
  uint64_t disk_pages;
} kvs_prefix_hit;

typedef struct kvs_prefix_stats {
  uint64_t nodes;       /* cached full pages */
  uint64_t tails;       /* retained window pages */
  uint64_t holds;       /* requests holding a path */
  uint64_t refs;        /* sum of block reference counts */
  uint64_t evictable;   /* unreferenced leaves */
  uint64_t evictions;   /* blocks evicted so far (this rank's replay) */
  uint64_t tail_drops;  /* tails dropped so far */
  uint64_t digest;      /* the index's share of the pool digest */
  uint64_t host_slots;  /* the host tier's pages (0: none) */
  uint64_t host_blocks; /* of them, holding a block */
  uint64_t spills;      /* blocks copied to the host tier so far */
  uint64_t fetches;     /* blocks copied back so far */
  uint64_t host_drops;  /* blocks the host tier let go (its least recently used) */
  /* Tails of unreferenced blocks nobody re-prefills: the window pages
   * kvs_window_pool_prefix_evict's need_window_pages drops first. */
  uint64_t droppable;
  uint64_t disk_slots;    /* the disk tier's pages (0: none) */
  uint64_t disk_blocks;   /* of them, holding a block */
  uint64_t stores;        /* blocks written to the disk tier so far */
  uint64_t loads;         /* blocks read back from it */
  uint64_t disk_drops;    /* blocks the disk tier let go (its least recently used) */
  uint64_t store_pending; /* leader: cached blocks waiting for their write */
  uint64_t store_missed;  /* leader: blocks that left the index before their write */
} kvs_prefix_stats;

/* Whether the pool keeps a prefix cache. */
bool kvs_window_pool_prefix_enabled(const struct kvs_window_pool *pool);
/* Read-only: walks keys[0..n) (one per full page, from the first) and
 * fills *hit for a prompt of prompt_tokens. reprefill_tokens is what the
 * engine pays to recompute a missing window (0: exact hits only). pages
 * (when non-NULL, n of them) gets the cached full page of each hit page. */
kvs_status kvs_window_pool_prefix_match(const struct kvs_window_pool *pool, const uint64_t *keys,
                                        size_t n, uint64_t prompt_tokens, uint64_t reprefill_tokens,
                                        kvs_prefix_hit *hit, int64_t *pages, kvs_error *err);
/* The same, reaching at most max_host_pages blocks into the host tier (a
 * fetch journals three entries a block: a step with less room left takes
 * a shallower hit). */
kvs_status kvs_window_pool_prefix_match_within(const struct kvs_window_pool *pool,
                                               const uint64_t *keys, size_t n,
                                               uint64_t prompt_tokens, uint64_t reprefill_tokens,
                                               uint64_t max_host_pages, kvs_prefix_hit *hit,
                                               int64_t *pages, kvs_error *err);
/* Takes the hit for `request` (which holds nothing yet): refs on its
 * path, and with hit->reprefill a window page for the block's page, marked
 * as written by the request. A hit with no block holds nothing. */
kvs_status kvs_window_pool_prefix_acquire(kvs_window_pool_t pool, uint64_t request,
                                          const kvs_prefix_hit *hit, kvs_error *err);
/* Takes a hit that reaches into the host tier for `request` (which holds
 * nothing yet): pages[0..hit->host_pages) are free full pages (the
 * engine's, not bound) that become the fetched blocks (keys[] from the
 * first page of the prompt, as matched), each journaled with its host slot
 * so every rank copies the same rows back; the request then holds the
 * deepest and writes its window page (the re-prefill). Refused, changing
 * nothing, when the index or tier changed since the match. */
kvs_status kvs_window_pool_prefix_fetch(kvs_window_pool_t pool, uint64_t request,
                                        const kvs_prefix_hit *hit, const uint64_t *keys,
                                        size_t n_keys, const int64_t *pages, kvs_error *err);
/* The request's pages [first, first + n) (full page numbers, keys[i] each)
 * join the index below what the request holds (its hit, or what it
 * inserted last; the root when nothing): a key already cached there is
 * followed (the request's own page stays the engine's: taken[i] = 0),
 * another becomes a block owning that page (taken[i] = 1). tails[i] != 0
 * (tails may be NULL) keeps the page's window binding, which must be
 * bound, as the block's tail. The request then holds the deepest block. */
kvs_status kvs_window_pool_prefix_insert(kvs_window_pool_t pool, uint64_t request,
                                         const uint64_t *keys, const int64_t *pages,
                                         const uint8_t *tails, size_t n, uint8_t *taken,
                                         kvs_error *err);
/* The request's hold and the tail it wrote back (a request holding
 * nothing: KVS_OK, nothing journaled). */
kvs_status kvs_window_pool_prefix_release(kvs_window_pool_t pool, uint64_t request, kvs_error *err);
/* The same for a request that never wrote the tail its hit re-prefills
 * (refused or cancelled before its prefill passed the hit's boundary):
 * that tail is dropped and its window page freed instead of becoming
 * readable. A request holding nothing, or writing no tail, is released
 * as by kvs_window_pool_prefix_release. */
kvs_status kvs_window_pool_prefix_abandon(kvs_window_pool_t pool, uint64_t request, kvs_error *err);
/* Leader: drops tails of unreferenced blocks (least recently released
 * first) until need_window_pages window pages came back, then evicts
 * unreferenced leaves (tails with them; with a host tier each block is
 * spilled there first unless a copy is there) until need_pages full pages
 * are in freed[0..*n_freed) (cap of them), each journaled. Stops early
 * when nothing is evictable or the journal is full: *n_freed and
 * *window_pages_freed (may be NULL) say what it did. */
kvs_status kvs_window_pool_prefix_evict(kvs_window_pool_t pool, uint64_t need_pages,
                                        uint64_t need_window_pages, int64_t *freed, size_t cap,
                                        size_t *n_freed, uint64_t *window_pages_freed,
                                        kvs_error *err);
/* Leader: the eviction a host hit needs before its fetch: as
 * kvs_window_pool_prefix_evict(need_pages, 0), but it never evicts the
 * hit's block (so its GPU path stays) and no spill takes the host slot of
 * a block the hit fetches, so the hit stays valid for
 * kvs_window_pool_prefix_fetch without a new match. Refused, changing
 * nothing, when the hit is stale (as fetch refuses it) or the journal lacks
 * room for the evictions and the fetch together (4 entries an eviction, 3
 * a fetched block and 3): step, then match again. *window_pages_freed
 * (may be NULL): the evicted blocks' tails. */
kvs_status kvs_window_pool_prefix_evict_for_fetch(kvs_window_pool_t pool, const kvs_prefix_hit *hit,
                                                  const uint64_t *keys, size_t n_keys,
                                                  uint64_t need_pages, int64_t *freed, size_t cap,
                                                  size_t *n_freed, uint64_t *window_pages_freed,
                                                  kvs_error *err);
/* Leader, before a step's journal is drained (the shard calls it): writes
 * cached blocks the disk tier lacks, oldest first, within the step's
 * share of writes (disk_stores_per_step) and the journal's room, each a journaled store (into the
 * tier's least recently used slot). A block that left the index before
 * its turn is passed over (stats.store_missed). *stored (may be NULL):
 * how many. A pool without a disk tier writes nothing. */
kvs_status kvs_window_pool_prefix_write_back(kvs_window_pool_t pool, size_t *stored,
                                             kvs_error *err);
/* Fills the empty disk tier with chains[0..n) (least recently used
 * first), outside the journal: what every rank found and agreed on at
 * creation. */
kvs_status kvs_window_pool_prefix_disk_seed(kvs_window_pool_t pool, const uint64_t *chains,
                                            size_t n, kvs_error *err);
/* Disk slot `slot`'s block chain; KVS_ERR_NOT_FOUND when it holds none. */
kvs_status kvs_window_pool_prefix_disk_slot(const struct kvs_window_pool *pool, uint64_t slot,
                                            uint64_t *chain, kvs_error *err);
/* The disk tier's chains, least recently used first (at most cap). */
size_t kvs_window_pool_prefix_disk_chains(const struct kvs_window_pool *pool, uint64_t *out,
                                          size_t cap);
/* The cached block of full page `page`: its chain and depth. */
kvs_status kvs_window_pool_prefix_block(const struct kvs_window_pool *pool, uint64_t page,
                                        uint64_t *chain, uint64_t *depth, kvs_error *err);
kvs_status kvs_window_pool_prefix_stats(const struct kvs_window_pool *pool, kvs_prefix_stats *out,
                                        kvs_error *err);
/* The block of full page `page`: its key, parent (-1: the root), refs and
 * tail; KVS_ERR_NOT_FOUND when that page is not cached. */
kvs_status kvs_window_pool_prefix_node(const struct kvs_window_pool *pool, uint64_t page,
                                       uint64_t *key, int64_t *parent, uint32_t *refs, bool *tail,
                                       kvs_error *err);
/* What a prefix entry of a step's journal does (the leader's decisions,
 * in the order every rank replays them), for a reader of the journal that
 * follows the cache without a pool of its own in the loop: a scheduler
 * learning which pages the cache took or gave back, tables moving rows. */
typedef enum kvs_prefix_op {
  KVS_PREFIX_OP_NONE = 0, /* not a prefix entry */
  KVS_PREFIX_OP_NEW_KEY,  /* page: a block starts there; operand: its key */
  KVS_PREFIX_OP_NEW_LINK, /* page joins the index; operand: its parent or -1 */
  KVS_PREFIX_OP_ACQUIRE,  /* request `operand` holds the path down to page */
  KVS_PREFIX_OP_RELEASE,  /* request `operand` lets go of it */
  KVS_PREFIX_OP_TAIL,     /* page's window page is the cache's; operand: its writer or -1 */
  KVS_PREFIX_OP_WDONE,    /* writer `operand` let go of page's tail (written) */
  KVS_PREFIX_OP_UNTAIL,   /* page's tail is dropped (its window page freed next) */
  KVS_PREFIX_OP_EVICT,    /* page leaves the index; operand: its key */
  KVS_PREFIX_OP_SPILL,    /* page's rows go to host slot `operand` before it leaves */
  KVS_PREFIX_OP_FETCH,    /* page's rows come back from host slot `operand` */
  /* An exact hit through page's tail: its tail state seeds a request's
   * ring (operand: kvs_restore_operand's packing; kvs_window_pool_restore_of
   * decodes it). */
  KVS_PREFIX_OP_RESTORE,
  /* The disk tier (written through): page's rows are written to disk slot
   * `operand` (the block stays cached); or read back from that disk slot
   * into page (just linked). kvs_window_pool_disk_io_of decodes both. */
  KVS_PREFIX_OP_STORE,
  KVS_PREFIX_OP_LOAD
} kvs_prefix_op;

/* A journal entry's prefix operation, its full page and its operand
 * (either may be NULL); KVS_PREFIX_OP_NONE for any other entry. */
kvs_prefix_op kvs_window_pool_prefix_entry(const kvs_journal_entry *entry, uint64_t *page,
                                           int64_t *operand);

/* A host tier's row move, as a step's journal orders it: a spill copies
 * full page full_page's rows into host slot `slot` before the page leaves
 * the index; a fetch copies them back from the slot into full_page. */
typedef struct kvs_host_move {
  bool fetch;
  uint64_t full_page;
  uint64_t slot;
} kvs_host_move;

/* Whether a journal entry moves rows, and which (false for every other
 * entry, prefix or not). Tables run the moves in journal order. */
bool kvs_window_pool_host_move_of(const kvs_journal_entry *entry, kvs_host_move *out);

/* A disk tier's read or write, as a step's journal orders it. The node
 * does both after the step's row moves (a load's page may be one the same
 * step spilled from; a store's block is its step's last word on that
 * page, and a loaded block is held, so nothing later in the step touches
 * either). */
typedef struct kvs_disk_io {
  bool load;          /* read back (true) or written (false) */
  uint64_t full_page; /* the block's page */
  uint64_t disk_slot;
} kvs_disk_io;

/* Whether a journal entry reads or writes the disk tier, and which. */
bool kvs_window_pool_disk_io_of(const kvs_journal_entry *entry, kvs_disk_io *out);

/* Whether a journal entry binds a request slot to a request (its rings
 * start cleared), and which slot (false for every other entry: frees,
 * pages, prefix entries). */
bool kvs_window_pool_slot_bind_of(const kvs_journal_entry *entry, uint64_t *slot);

/* A tail state's restore, as a step's journal orders it: request slot
 * `slot`'s ring rows [ring_row, ring_row + KVS_TAIL_STATE_POSITIONS) of
 * the ratio-4 rings (attention and indexer), rows slot x 8 + 0 or + 4: the
 * positions before the hit, whose first halves (kv and score) come from
 * window page `window_page`'s tail state (kvs_row_widths.tail_states), on
 * every ratio-4 layer. The ring was cleared when the slot was bound (the
 * journal's slot entry): nothing else of it is the hit's. */
typedef struct kvs_tail_restore {
  uint64_t full_page;   /* the hit's block, whose tail it is */
  uint64_t window_page; /* the tail's window page */
  uint64_t slot;        /* the request slot */
  uint64_t ring_row;    /* slot x 8 + 0 or 4: where positions H - 4 .. H - 1 go */
} kvs_tail_restore;

/* Whether a journal entry restores a tail state, and which (false for
 * every other entry). Tables run the restores in journal order. */
bool kvs_window_pool_restore_of(const kvs_journal_entry *entry, kvs_tail_restore *out);

/* Host slot `slot`'s block chain; KVS_ERR_NOT_FOUND when it holds none. */
kvs_status kvs_window_pool_prefix_host_slot(const struct kvs_window_pool *pool, uint64_t slot,
                                            uint64_t *chain, kvs_error *err);
/* Fault injection: adds delta to one cached block's refs on this rank,
 * outside the journal (the digest follows, so a check names the block). */
kvs_status kvs_window_pool_prefix_inject(kvs_window_pool_t pool, uint64_t page, int32_t delta,
                                         kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_POOL_WINDOW_POOL_H */
