#include "tools/trace.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/mix.h"
#include "core/regular_file.h"

/* Traces up to 1 GiB. */
#define TRACE_MAX_BYTES (UINT64_C(1) << 30)

void kvs_trace_free(kvs_trace *t) {
  if (t == NULL) return;
  free(t->timestamp);
  free(t->input);
  free(t->output);
  free(t->first);
  free(t->ids);
  memset(t, 0, sizeof *t);
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t c = *cap > 0 ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (q == NULL) return false;
  *p = q;
  *cap = c;
  return true;
}

static bool as_u64(const json_t *v, uint64_t *out) {
  if (json_is_integer(v)) {
    json_int_t i = json_integer_value(v);
    if (i < 0) return false;
    *out = (uint64_t)i;
    return true;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (!(d >= 0) || d > 9.0e15 || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
  }
  return false;
}

/* The ideal hit rate: a trie over id chains, (parent node, id) -> node in
 * an open-addressing table that grows. */
typedef struct trie {
  uint64_t mask, used;
  uint64_t *parent, *id, *node; /* node 0: empty slot (nodes count from 1) */
} trie;

static uint64_t trie_hash(uint64_t parent, uint64_t id) {
  return kvs_splitmix64_finalise(id ^ (parent * 0x9e3779b97f4a7c15ull));
}

static bool trie_grow(trie *t) {
  uint64_t cap = t->mask == 0 ? 1024 : (t->mask + 1) * 2;
  uint64_t *p = calloc(cap, 8), *i = calloc(cap, 8), *n = calloc(cap, 8);
  if (p == NULL || i == NULL || n == NULL) {
    free(p);
    free(i);
    free(n);
    return false;
  }
  for (uint64_t s = 0; t->mask != 0 && s <= t->mask; s++) {
    if (t->node[s] == 0) continue;
    uint64_t h = trie_hash(t->parent[s], t->id[s]) & (cap - 1);
    while (n[h] != 0) h = (h + 1) & (cap - 1);
    p[h] = t->parent[s];
    i[h] = t->id[s];
    n[h] = t->node[s];
  }
  free(t->parent);
  free(t->id);
  free(t->node);
  t->parent = p;
  t->id = i;
  t->node = n;
  t->mask = cap - 1;
  return true;
}

/* The child of parent under id; with add, created when absent (*added). */
static uint64_t trie_step(trie *t, uint64_t parent, uint64_t id, bool add, bool *ok) {
  if ((t->used + 1) * 2 > t->mask + 1 && !trie_grow(t)) {
    *ok = false;
    return 0;
  }
  uint64_t h = trie_hash(parent, id) & t->mask;
  while (t->node[h] != 0) {
    if (t->parent[h] == parent && t->id[h] == id) return t->node[h];
    h = (h + 1) & t->mask;
  }
  if (!add) return 0;
  t->parent[h] = parent;
  t->id[h] = id;
  t->node[h] = ++t->used;
  return t->node[h];
}

/* What is wrong with one line of a trace (o, its JSON, NULL when it is not
 * JSON), or NULL with its fields in *ts, *in, *outl and *ids. */
static const char *line_fault(json_t *o, const kvs_trace *t, uint64_t *ts, uint64_t *in,
                              uint64_t *outl, json_t **ids) {
  if (o == NULL) return "is not JSON";
  if (!json_is_object(o)) return "is not a JSON object";
  if (!as_u64(json_object_get(o, "timestamp"), ts)) {
    return "has no timestamp (a non-negative integer of ms)";
  }
  if (!as_u64(json_object_get(o, "input_length"), in) || *in == 0) {
    return "has no input_length (a positive integer)";
  }
  if (!as_u64(json_object_get(o, "output_length"), outl)) {
    return "has no output_length (a non-negative integer)";
  }
  if (!json_is_array(*ids = json_object_get(o, "hash_ids"))) {
    return "has no hash_ids (an array of block ids)";
  }
  if (json_array_size(*ids) != (*in + t->block - 1) / t->block) {
    return "has hash_ids whose count is not ceil(input_length / block)";
  }
  if (*in > (UINT64_C(1) << 40) || *outl > (UINT64_C(1) << 40)) {
    return "has a length past 2^40 tokens";
  }
  if (t->n > 0 && (double)*ts < t->timestamp[t->n - 1]) {
    return "has a timestamp before the previous line's";
  }
  return NULL;
}

/* The growing arrays' capacities while a trace loads, and its ids so far. */
typedef struct capacities {
  size_t req, ids, n_ids;
} capacities;

/* One checked line as the trace's next request: its ids walked through the
 * trie of every earlier prompt (the blocks an ideal cache would hit).
 * Returns what is wrong with an id, or NULL; *ok false when out of memory
 * (the request then not added). */
static const char *add_request(kvs_trace *t, trie *tr, capacities *c, json_t *ids, uint64_t ts,
                               uint64_t in, uint64_t outl, bool *ok) {
  size_t k = json_array_size(ids);
  *ok = grow((void **)&t->timestamp, &c->req, t->n + 2, sizeof *t->timestamp);
  size_t c2 = c->req, c3 = c->req, c4 = c->req;
  /* The per-request arrays share one capacity: grow them alike. */
  *ok = *ok && (t->input = realloc(t->input, c2 * sizeof *t->input)) != NULL &&
        (t->output = realloc(t->output, c3 * sizeof *t->output)) != NULL &&
        (t->first = realloc(t->first, c4 * sizeof *t->first)) != NULL &&
        grow((void **)&t->ids, &c->ids, c->n_ids + k, sizeof *t->ids);
  if (!*ok) return NULL;
  t->first[t->n] = c->n_ids;
  uint64_t node = 0, hit = 0;
  bool matching = true;
  for (size_t j = 0; j < k; j++) {
    uint64_t id;
    if (!as_u64(json_array_get(ids, j), &id)) {
      return "has a hash id that is not a non-negative integer";
    }
    t->ids[c->n_ids + j] = id;
    uint64_t next = trie_step(tr, node, id, false, ok);
    if (next == 0) {
      matching = false;
      next = trie_step(tr, node, id, true, ok);
    } else if (matching) {
      hit++;
    }
    if (!*ok) return NULL;
    node = next;
  }
  t->timestamp[t->n] = (double)ts;
  t->input[t->n] = in;
  t->output[t->n] = outl;
  c->n_ids += k;
  t->first[t->n + 1] = c->n_ids;
  uint64_t hit_tokens = hit * t->block < in ? hit * t->block : in;
  t->prompt_tokens += in;
  t->ideal_hit_tokens += hit_tokens;
  if (in + outl > t->max_total) t->max_total = in + outl;
  t->n++;
  return NULL;
}

kvs_status kvs_trace_load(const char *path, uint64_t block, kvs_trace *out, kvs_error *err) {
  if (path == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "trace: %s is NULL",
                         path == NULL ? "path" : "out");
  }
  if (block == 0) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "trace block is 0 tokens");
  memset(out, 0, sizeof *out);
  int fd = -1;
  uint64_t size = 0;
  kvs_status status = kvs_open_regular(path, "trace", TRACE_MAX_BYTES, &fd, &size, NULL, err);
  if (status != KVS_OK) return status;
  FILE *f = fdopen(fd, "r");
  if (f == NULL) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_IO, "trace %s cannot be read", path);
  }
  kvs_trace t;
  memset(&t, 0, sizeof t);
  t.block = block;
  capacities caps = {0, 0, 0};
  char *line = NULL;
  size_t line_cap = 0;
  ssize_t got;
  size_t lineno = 0;
  trie tr = {0, 0, NULL, NULL, NULL};
  bool ok = true;
  status = KVS_OK;
  while ((got = getline(&line, &line_cap, f)) >= 0) {
    lineno++;
    json_error_t jerr;
    json_t *o = json_loadb(line, (size_t)got, JSON_REJECT_DUPLICATES, &jerr);
    uint64_t ts = 0, in = 0, outl = 0;
    json_t *ids = NULL;
    const char *why = line_fault(o, &t, &ts, &in, &outl, &ids);
    if (why == NULL) {
      why = add_request(&t, &tr, &caps, ids, ts, in, outl, &ok);
      if (!ok) {
        json_decref(o);
        status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for trace %s", path);
        break;
      }
    }
    json_decref(o);
    if (why != NULL) {
      status = kvs_error_set(err, KVS_ERR_PARSE, "trace %s line %zu %s", path, lineno, why);
      break;
    }
  }
  free(line);
  free(tr.parent);
  free(tr.id);
  free(tr.node);
  bool read_error = ferror(f) != 0;
  fclose(f);
  if (status == KVS_OK && read_error) {
    status = kvs_error_set(err, KVS_ERR_IO, "trace %s could not be read to its end", path);
  }
  if (status == KVS_OK && t.n == 0) {
    status = kvs_error_set(err, KVS_ERR_PARSE, "trace %s holds no request", path);
  }
  if (status != KVS_OK) {
    kvs_trace_free(&t);
    return status;
  }
  *out = t;
  return KVS_OK;
}
