#include "plan/parallel.h"

#include <stdio.h>

/* "1, 2, 4 or 8": the divisors of n up to limit, for a refusal to offer. */
static void list_divisors(size_t n, size_t limit, char *buf, size_t len) {
  size_t used = 0, count = 0;
  buf[0] = '\0';
  for (size_t k = 1; k <= n && k <= limit; k++) {
    if (n % k != 0) continue;
    count++;
    if (used < len)
      used += (size_t)snprintf(buf + used, len - used, "%s%zu", count > 1 ? ", " : "", k);
  }
}

static kvs_status check_counts(const kvs_parallel *p, kvs_error *err) {
  const size_t counts[] = {p->tp, p->pp, p->dp, p->ep};
  const char *const flags[] = {"--tp", "--pp", "--dp", "--ep"};
  for (size_t i = 0; i < 4; i++) {
    if (counts[i] == 0) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s is 0: every count is at least 1",
                           flags[i]);
    }
  }
  return KVS_OK;
}

kvs_status kvs_parallel_check(const kvs_parallel *p, size_t n_gpus, kvs_error *err) {
  if (p == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: p is NULL", __func__);
  kvs_status status = check_counts(p, err);
  if (status != KVS_OK) return status;
  char values[256];
  size_t group = p->tp * p->pp, moe = p->tp * p->dp;
  if (group > n_gpus || n_gpus % group != 0 || group * p->dp > n_gpus ||
      n_gpus % (group * p->dp) != 0) {
    list_divisors(group <= n_gpus && n_gpus % group == 0 ? n_gpus / group : 0, n_gpus, values,
                  sizeof values);
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "--dp %zu: tp %zu x pp %zu x dp %zu = %zu GPUs per replica, %s the %zu "
                         "GPUs%s%s",
                         p->dp, p->tp, p->pp, p->dp, group * p->dp,
                         group * p->dp > n_gpus ? "more than" : "which does not divide", n_gpus,
                         values[0] != '\0' ? "; --dp can be " : "", values);
  }
  if (p->ep > n_gpus) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "--ep %zu is more than the %zu GPUs: experts are sharded over GPUs that "
                         "exist",
                         p->ep, n_gpus);
  }
  if (moe % p->ep != 0) {
    list_divisors(moe, moe, values, sizeof values);
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "--ep %zu does not divide tp %zu x dp %zu = %zu, the GPUs of a stage "
                         "that share its routed experts; --ep can be %s",
                         p->ep, p->tp, p->dp, moe, values);
  }
  return KVS_OK;
}

size_t kvs_parallel_replicas(const kvs_parallel *p, size_t n_gpus) {
  if (p == NULL) return 0;
  size_t per = p->tp * p->pp * p->dp;
  return per == 0 || n_gpus % per != 0 ? 0 : n_gpus / per;
}

size_t kvs_parallel_groups(const kvs_parallel *p, size_t n_gpus) {
  if (p == NULL) return 0;
  size_t per = p->tp * p->pp;
  return per == 0 || n_gpus % per != 0 ? 0 : n_gpus / per;
}

size_t kvs_parallel_moe_gpus(const kvs_parallel *p) {
  if (p == NULL) return 0;
#ifndef KVS_MUTANT_EXPERTS_OVER_PP /* defined: planted bug (tests/mutants), pp divides too */
  return p->tp * p->dp;
#else
  return p->tp * p->pp * p->dp;
#endif
}
