/* SGLang's memory rule and default fraction (see sglang_memory.h). The
 * arithmetic follows Python's: GiB as doubles, int() truncating toward
 * zero, round(x, 3) correctly rounded to three decimals. */
#include "core/sglang_memory.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define GIB 1073741824.0 /* 1 << 30, exact */

/* The byte count as SGLang's get_available_gpu_memory returns it, in GiB:
 * the minimum over ranks travels as a float32 tensor, so with more than
 * one rank the bytes are rounded to float32 before the division. */
static double as_sglang_gib(uint64_t bytes, bool distributed) {
  double exact = (double)bytes;
  return (distributed ? (double)(float)exact : exact) / GIB;
}

/* Python's round(x, 3): the decimal nearest the exact binary value of x,
 * which printf's %.3f gives (glibc rounds the exact value correctly). */
static double round3(double x) {
  char text[64];
  snprintf(text, sizeof text, "%.3f", x);
  return strtod(text, NULL);
}

kvs_status kvs_sglang_memory_rule(const kvs_sglang_memory_input *in, kvs_sglang_memory *out,
                                  kvs_error *err) {
  if (in == NULL)
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: input is NULL", __func__);
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  if (in->free_before_load_bytes == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "the free memory before the weights load is 0 bytes");
  }
  if (in->available_bytes > in->free_before_load_bytes) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "%llu bytes free after the weights load is more than the %llu free "
                         "before it",
                         (unsigned long long)in->available_bytes,
                         (unsigned long long)in->free_before_load_bytes);
  }
  double f = in->mem_fraction_static;
  if (!(f > 0.0 && f <= 1.0)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "--mem-fraction-static must be in (0, 1], got %g", f);
  }
  kvs_sglang_memory m = {0};
  m.free_before_load_gib = as_sglang_gib(in->free_before_load_bytes, in->distributed);
  m.available_gib = as_sglang_gib(in->available_bytes, in->distributed);
  m.slack_gib = m.free_before_load_gib * (1.0 - f);
  m.min_viable_mem_fraction = 1.0 - m.available_gib / m.free_before_load_gib;
  m.suggested_mem_fraction = ceil(m.min_viable_mem_fraction * 1000.0) / 1000.0;
  double rest = m.available_gib - m.slack_gib;
  m.no_kv = !(rest > 0.0);
  /* int(rest x 2^30): rest is below P, itself below 2^64 bytes. */
  m.rest_bytes = m.no_kv ? 0 : (uint64_t)(rest * GIB);
  *out = m;
  return KVS_OK;
}

/* SGLang's capacity buckets: chunked prefill and decode graph slots by the
 * GPU's memory in MiB (tp below 4 takes the smaller slot count). */
static void default_sizes(uint64_t mib, uint64_t tp_size, uint64_t *chunked, uint64_t *max_bs) {
  bool small_tp = tp_size < 4;
  if (mib < 20 * 1024) {
    *chunked = 2048, *max_bs = 8;
  } else if (mib < 35 * 1024) {
    *chunked = 4096, *max_bs = small_tp ? 48 : 160;
  } else if (mib < 60 * 1024) {
    *chunked = 4096, *max_bs = small_tp ? 32 : 160;
  } else if (mib < 160 * 1024) {
    /* H100, A100 80GB (< 90 GiB) and H20, H200 (< 160 GiB) alike. */
    *chunked = 8192, *max_bs = small_tp ? 256 : 512;
  } else {
    *chunked = 16384, *max_bs = 512;
  }
}

kvs_status kvs_sglang_default_mem_fraction(const kvs_sglang_launch *launch,
                                           kvs_sglang_default_fraction *out, kvs_error *err) {
  if (launch == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: launch is NULL", __func__);
  }
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  if (launch->gpu_memory_mib == 0 || launch->tp_size == 0 || launch->pp_size == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "a launch needs the GPU's memory, tp and pp (got %llu MiB, tp %llu, pp "
                         "%llu)",
                         (unsigned long long)launch->gpu_memory_mib,
                         (unsigned long long)launch->tp_size, (unsigned long long)launch->pp_size);
  }
  kvs_sglang_default_fraction d = {0};
  default_sizes(launch->gpu_memory_mib, launch->tp_size, &d.chunked_prefill, &d.decode_max_bs);
  if (launch->chunked_prefill != 0) d.chunked_prefill = launch->chunked_prefill;
  if (launch->decode_max_bs != 0) d.decode_max_bs = launch->decode_max_bs;
  double gpu_mem = (double)launch->gpu_memory_mib;
  double max_bs = (double)d.decode_max_bs;
  double dp = launch->dp_size == 0 ? 1.0 : (double)launch->dp_size;
  double activation = d.chunked_prefill > 2048 ? (double)d.chunked_prefill : 2048.0;
  double reserved = 512.0 + activation * 1.5;
  reserved += (double)launch->tp_size * (double)launch->pp_size / 8.0 * 1024.0;
  double graph = max_bs * 2.0;
  if (launch->dp_attention) {
    graph += max_bs * dp * 3.0;
    if (d.decode_max_bs > 300) graph += max_bs * dp * 1.5;
  }
  reserved += graph;
#ifndef KVS_MUTANT_SGLANG_NO_FLOOR /* defined: planted bug (tests/mutants), no 10 GiB floor */
  if (gpu_mem > 60.0 * 1024.0 && reserved < 10.0 * 1024.0) reserved = 10.0 * 1024.0;
#endif
  d.reserved_mib = reserved;
  d.mem_fraction_static = round3((gpu_mem - reserved) / gpu_mem);
  *out = d;
  return KVS_OK;
}
