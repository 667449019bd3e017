#include "pool/free_list.h"

#include <stdlib.h>

struct kvs_free_list {
  uint64_t capacity;  /* slots */
  uint64_t page_unit; /* slots per unit */
  uint64_t n_units;
  uint64_t top;    /* free units on the stack */
  uint64_t *stack; /* free unit bases; stack[top-1] is taken first */
  /* position of each unit on the stack, or UINT64_MAX when allocated: O(1)
   * double-free detection and O(1) removal of a named unit. */
  uint64_t *position;
  /* per-unit stamp for duplicate detection inside one call */
  uint32_t *seen;
  uint32_t epoch;
};

kvs_status kvs_free_list_create(uint64_t capacity, uint64_t page_unit, kvs_free_list_t *out,
                                kvs_error *err) {
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  if (page_unit == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "page_unit is 0; a unit spans a slot");
  }
  if (capacity % page_unit != 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "capacity %llu must be a multiple of page_unit %llu",
                         (unsigned long long)capacity, (unsigned long long)page_unit);
  }
  uint64_t n_units = capacity / page_unit;
  if (n_units > (SIZE_MAX / 2) / sizeof(uint64_t)) {
    return kvs_error_set(err, KVS_ERR_OVERFLOW, "%llu units do not fit in memory",
                         (unsigned long long)n_units);
  }
  struct kvs_free_list *list = calloc(1, sizeof *list);
  size_t alloc_units = n_units > 0 ? (size_t)n_units : 1;
  if (list != NULL) {
    list->stack = malloc(alloc_units * sizeof *list->stack);
    list->position = malloc(alloc_units * sizeof *list->position);
    list->seen = calloc(alloc_units, sizeof *list->seen);
  }
  if (list == NULL || list->stack == NULL || list->position == NULL || list->seen == NULL) {
    kvs_free_list_destroy(list);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for a %llu-unit free list",
                         (unsigned long long)n_units);
  }
  list->capacity = capacity;
  list->page_unit = page_unit;
  list->n_units = n_units;
  kvs_free_list_reset(list);
  *out = list;
  return KVS_OK;
}

void kvs_free_list_destroy(kvs_free_list_t list) {
  if (list == NULL) return;
  free(list->stack);
  free(list->position);
  free(list->seen);
  free(list);
}

void kvs_free_list_reset(kvs_free_list_t list) {
  if (list == NULL) return;
  for (uint64_t unit = 0; unit < list->n_units; unit++) {
    list->stack[unit] = unit * list->page_unit;
    list->position[unit] = unit;
  }
  list->top = list->n_units;
}

kvs_status kvs_free_list_alloc(kvs_free_list_t list, size_t n_units, uint64_t *bases_out,
                               kvs_free_list_shortfall *shortfall, kvs_error *err) {
  if (list == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: list is NULL", __func__);
  }
  if (bases_out == NULL && n_units > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: bases_out is NULL", __func__);
  }
  if (n_units > list->top) {
    if (shortfall != NULL) {
      shortfall->needed_units = n_units;
      shortfall->available_units = list->top;
      shortfall->capacity = list->capacity;
      shortfall->page_unit = list->page_unit;
    }
    return kvs_error_set(err, KVS_ERR_EXHAUSTED,
                         "window free list out of slots: requested %zu units, have %llu "
                         "(capacity %llu, unit %llu)",
                         n_units, (unsigned long long)list->top, (unsigned long long)list->capacity,
                         (unsigned long long)list->page_unit);
  }
  uint64_t first = list->top - n_units;
  for (size_t i = 0; i < n_units; i++) {
    uint64_t base = list->stack[first + i];
    bases_out[i] = base;
    list->position[base / list->page_unit] = UINT64_MAX;
  }
  list->top = first;
  return KVS_OK;
}

static bool is_unit_base(const struct kvs_free_list *list, uint64_t base) {
  return base % list->page_unit == 0 && base < list->capacity;
}

bool kvs_free_list_is_free(const struct kvs_free_list *list, uint64_t base) {
  return list != NULL && is_unit_base(list, base) &&
         list->position[base / list->page_unit] != UINT64_MAX;
}

static uint32_t next_epoch(struct kvs_free_list *list) {
  if (++list->epoch == 0) { /* wrapped: clear the stamps once */
    for (uint64_t unit = 0; unit < list->n_units; unit++) list->seen[unit] = 0;
    list->epoch = 1;
  }
  return list->epoch;
}

kvs_status kvs_free_list_free(kvs_free_list_t list, const uint64_t *bases, size_t n,
                              kvs_error *err) {
  if (list == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: list is NULL", __func__);
  }
  if (bases == NULL && n > 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: bases is NULL", __func__);
  }
  uint32_t epoch = next_epoch(list);
  for (size_t i = 0; i < n; i++) {
    uint64_t base = bases[i];
    if (!is_unit_base(list, base)) {
      return kvs_error_set(err, KVS_ERR_OUT_OF_RANGE,
                           "%llu is not a unit base of a %llu-slot unit inside a capacity of "
                           "%llu",
                           (unsigned long long)base, (unsigned long long)list->page_unit,
                           (unsigned long long)list->capacity);
    }
    uint64_t unit = base / list->page_unit;
    if (list->position[unit] != UINT64_MAX || list->seen[unit] == epoch) {
      return kvs_error_set(err, KVS_ERR_CONFLICT,
                           "unit base %llu is already free; returning it again would hand "
                           "one window page to two requests",
                           (unsigned long long)base);
    }
    list->seen[unit] = epoch;
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t unit = bases[i] / list->page_unit;
    list->position[unit] = list->top;
    list->stack[list->top++] = bases[i];
  }
  return KVS_OK;
}

kvs_status kvs_free_list_take(kvs_free_list_t list, uint64_t base, kvs_error *err) {
  if (list == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: list is NULL", __func__);
  }
  if (!kvs_free_list_is_free(list, base)) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "unit base %llu is not on the free list",
                         (unsigned long long)base);
  }
  uint64_t unit = base / list->page_unit;
  uint64_t at = list->position[unit];
  /* Shift the entries above down by one: keeps the LIFO order identical
   * to the leader's, and the taken unit is almost always the top one. */
  for (uint64_t i = at + 1; i < list->top; i++) {
    list->stack[i - 1] = list->stack[i];
    list->position[list->stack[i - 1] / list->page_unit] = i - 1;
  }
  list->top--;
  list->position[unit] = UINT64_MAX;
  return KVS_OK;
}

/* The accessors read 0 (NULL) for a NULL list. */
uint64_t kvs_free_list_available(const struct kvs_free_list *list) {
  return list != NULL ? list->top * list->page_unit : 0;
}
uint64_t kvs_free_list_free_units(const struct kvs_free_list *list) {
  return list != NULL ? list->top : 0;
}
uint64_t kvs_free_list_capacity(const struct kvs_free_list *list) {
  return list != NULL ? list->capacity : 0;
}
uint64_t kvs_free_list_page_unit(const struct kvs_free_list *list) {
  return list != NULL ? list->page_unit : 0;
}
const uint64_t *kvs_free_list_bases(const struct kvs_free_list *list) {
  return list != NULL ? list->stack : NULL;
}
