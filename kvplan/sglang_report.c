#include "kvplan/sglang_report.h"

#include "kvplan/args.h"
#include "kvplan/plan_json.h"

kvs_status kvs_sglang_report_compute(const kvs_plan_model *model, const kvs_sglang_options *options,
                                     size_t first, size_t end, uint64_t available_bytes,
                                     kvs_sglang_pools *out, kvs_error *err) {
  if (!model->have_config) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "SGLang's sizing needs the model's config (qk_rope_head_dim, "
                         "sliding_window): give --model");
  }
  kvs_sglang_model m;
  kvs_status status =
      kvs_sglang_model_make(&model->config.geometry, first, end, model->config.qk_rope_head_dim,
                            model->config.sliding_window, model->config.context_len, &m, err);
  if (status != KVS_OK) return status;
  return kvs_sglang_pools_compute(&m, options, available_bytes, out, err);
}

json_t *kvs_sglang_report_json(const kvs_sglang_pools *p, const kvs_sglang_options *o,
                               uint64_t available_bytes) {
  json_t *j = json_object();
  json_object_set_new(j, "full", kvs_json_u64(p->full));
  json_object_set_new(j, "swa", kvs_json_u64(p->swa));
  json_object_set_new(j, "c4", kvs_json_u64(p->c4));
  json_object_set_new(j, "c128", kvs_json_u64(p->c128));
  json_object_set_new(j, "c4_state", kvs_json_u64(p->c4_state));
  json_object_set_new(j, "c128_state", kvs_json_u64(p->c128_state));
  json_object_set_new(j, "bytes_per_full_token", json_real(p->bytes_per_full_token));
  json_object_set_new(j, "c128_state_fixed_bytes", kvs_json_u64(p->c128_state_fixed_bytes));
  json_object_set_new(j, "available_bytes", kvs_json_u64(available_bytes));
  json_object_set_new(j, "page", kvs_json_u64(o->page_size));
  json_object_set_new(j, "swa_ratio", json_real(o->swa_ratio));
  json_object_set_new(j, "speculative", json_boolean(o->speculative));
  json_object_set_new(j, "max_running", kvs_json_u64(p->max_running));
  json_object_set_new(j, "max_running_estimated", json_boolean(p->max_running_estimated));
  json_object_set_new(j, "c4_ring_size", kvs_json_u64(p->c4_ring_size));
  json_object_set_new(j, "c128_ring_size", kvs_json_u64(p->c128_ring_size));
  json_object_set_new(j, "kv_row_bytes", kvs_json_u64(p->kv_row_bytes));
  json_object_set_new(j, "indexer_row_bytes", kvs_json_u64(p->indexer_row_bytes));
  json_object_set_new(j, "no_pool", json_boolean(p->no_pool));
  json_object_set_new(j, "swa_below_window_plus_page", json_boolean(p->swa_below_window_plus_page));
  json_object_set_new(j, "revision", json_string(KVS_SGLANG_REVISION));
  return j;
}

void kvs_sglang_report_print(FILE *out, const kvs_sglang_pools *p, const kvs_sglang_options *o,
                             uint64_t available_bytes, uint64_t kvshard_tokens,
                             kvs_kv_dtype kvshard_dtype) {
  char buf[32], fixed[32];
  fprintf(out, "\nSGLang (DSV4PoolConfigurator at %.12s) on %s:\n", KVS_SGLANG_REVISION,
          kvs_format_bytes(available_bytes, buf, sizeof buf));
  fprintf(out,
          "  %.2f bytes per full token (fp8 rows: KV %llu, indexer %llu; rings %llu/%llu), "
          "c128 state reserved %s for %llu running requests%s\n",
          p->bytes_per_full_token, (unsigned long long)p->kv_row_bytes,
          (unsigned long long)p->indexer_row_bytes, (unsigned long long)p->c4_ring_size,
          (unsigned long long)p->c128_ring_size,
          kvs_format_bytes(p->c128_state_fixed_bytes, fixed, sizeof fixed),
          (unsigned long long)p->max_running,
          p->max_running_estimated ? " (SGLang's estimate)" : "");
  fprintf(out,
          "  page %llu, swa ratio %g%s: full %llu tokens, swa %llu tokens, c4 %llu rows, "
          "c128 %llu rows, c4_state %llu slots, c128_state %llu slots\n",
          (unsigned long long)o->page_size, o->swa_ratio, o->speculative ? ", speculative" : "",
          (unsigned long long)p->full, (unsigned long long)p->swa, (unsigned long long)p->c4,
          (unsigned long long)p->c128, (unsigned long long)p->c4_state,
          (unsigned long long)p->c128_state);
  if (p->no_pool) {
    fprintf(out, "  SGLang would not start here: no room for a full-token pool\n");
  } else if (p->swa_below_window_plus_page) {
    fprintf(out,
            "  warning: SGLang's window pool (%llu tokens) is not above one sliding window plus "
            "a page: admission stalls\n",
            (unsigned long long)p->swa);
  }
  if (p->full > 0 && kvshard_tokens > 0) {
    fprintf(out, "  kvshard holds %llu tokens of history: %.3fx SGLang's %llu%s\n",
            (unsigned long long)kvshard_tokens, (double)kvshard_tokens / (double)p->full,
            (unsigned long long)p->full,
            kvshard_dtype == KVS_KV_FP8 ? ""
                                        : " (kvshard's rows are bf16 here: --kv-dtype fp8 "
                                          "compares like with like)");
  }
}
