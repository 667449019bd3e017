/* A LIFO free list over page-aligned unit bases.
 *
 * The window tier hands out one unit of P slots at a time, so every base
 * is a page base. That is what keeps the compress-state rings disjoint:
 * a window slot's ring block is (slot / P) * ring_size, and a base off a
 * page boundary would put two full pages' carry state in one block, each
 * silently overwriting the other. Keeping the list in units rather than
 * slots makes that unrepresentable.
 *
 * LIFO (pop from the tail) so a page just freed is the next handed out,
 * keeping live window pages clustered. Every call is all-or-nothing.
 *
 * NULL: the kvs_status calls refuse a NULL list, output or base array
 * (when it holds bases) with KVS_ERR_INVALID_ARGUMENT naming it; the
 * accessors read 0 (kvs_free_list_bases NULL, kvs_free_list_is_free
 * false) for a NULL list; destroy and reset accept NULL. */
#ifndef KVS_POOL_FREE_LIST_H
#define KVS_POOL_FREE_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_free_list *kvs_free_list_t;

/* What an allocation that could not be served asked for and found. */
typedef struct kvs_free_list_shortfall {
  uint64_t needed_units;
  uint64_t available_units;
  uint64_t capacity; /* slots */
  uint64_t page_unit;
} kvs_free_list_shortfall;

/* A free list over `capacity` slots in units of `page_unit` slots, all
 * free, in ascending order (so the first allocation takes the top bases).
 * A capacity that is not a whole number of units is refused: the ragged
 * tail would be handed out short or lost. */
kvs_status kvs_free_list_create(uint64_t capacity, uint64_t page_unit, kvs_free_list_t *out,
                                kvs_error *err);
void kvs_free_list_destroy(kvs_free_list_t list);

/* Takes n_units unit bases from the tail into bases_out, in ascending
 * stack order (the caller pairs base i with its i-th page). With too few
 * free units: KVS_ERR_EXHAUSTED, *shortfall filled, nothing taken. */
kvs_status kvs_free_list_alloc(kvs_free_list_t list, size_t n_units, uint64_t *bases_out,
                               kvs_free_list_shortfall *shortfall, kvs_error *err);

/* Returns unit bases. Anything that is not a unit base inside the
 * capacity, is already free, or appears twice is refused (nothing is
 * returned then): a bad base poisons every later allocation, and the ring
 * aliasing it causes shows only as wrong logits. */
kvs_status kvs_free_list_free(kvs_free_list_t list, const uint64_t *bases, size_t n,
                              kvs_error *err);

/* Takes one specific free base out of the list (a follower replaying the
 * leader's choice). KVS_ERR_CONFLICT when it is not free. */
kvs_status kvs_free_list_take(kvs_free_list_t list, uint64_t base, kvs_error *err);

/* Whether base is a unit base currently on the free list. */
bool kvs_free_list_is_free(const struct kvs_free_list *list, uint64_t base);

uint64_t kvs_free_list_available(const struct kvs_free_list *list); /* free slots */
uint64_t kvs_free_list_free_units(const struct kvs_free_list *list);
uint64_t kvs_free_list_capacity(const struct kvs_free_list *list); /* slots */
uint64_t kvs_free_list_page_unit(const struct kvs_free_list *list);

/* The free bases, bottom of the stack first (the next alloc takes from
 * the end). Valid until the next mutating call. */
const uint64_t *kvs_free_list_bases(const struct kvs_free_list *list);

/* Makes every unit free again, in ascending order. */
void kvs_free_list_reset(kvs_free_list_t list);

#ifdef __cplusplus
}
#endif

#endif /* KVS_POOL_FREE_LIST_H */
