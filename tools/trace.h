/* Serving traces in the public Mooncake format (JSONL, one request a
 * line: "timestamp" in ms, "input_length", "output_length", "hash_ids":
 * the ids of the prompt's consecutive blocks of `block` tokens, 512 in
 * the published traces; equal ids under equal parents mean equal blocks).
 * kvsim replays them (--trace). */
#ifndef KVS_TOOLS_TRACE_H
#define KVS_TOOLS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_trace {
  size_t n;          /* requests */
  uint64_t block;    /* tokens per hash id */
  double *timestamp; /* ms, per request */
  uint64_t *input;   /* prompt tokens */
  uint64_t *output;  /* generated tokens */
  size_t *first;     /* request i's ids are ids[first[i] .. first[i + 1]) */
  uint64_t *ids;
  uint64_t max_total; /* the longest input + output */
  /* An infinite cache at the trace's block granularity, from the trace
   * alone: each request hits the longest prefix of its ids that is a
   * prefix of an earlier request's (min(k x block, input) tokens). */
  uint64_t prompt_tokens;
  uint64_t ideal_hit_tokens;
} kvs_trace;

/* Reads FILE. A line that is not one JSON object with the four fields
 * (non-negative integers, timestamps non-decreasing, hash_ids an array of
 * ceil(input_length / block) non-negative integers) is KVS_ERR_PARSE
 * naming its line number; an unreadable file KVS_ERR_IO; an empty one
 * KVS_ERR_PARSE. */
kvs_status kvs_trace_load(const char *path, uint64_t block, kvs_trace *out, kvs_error *err);
void kvs_trace_free(kvs_trace *trace);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOOLS_TRACE_H */
