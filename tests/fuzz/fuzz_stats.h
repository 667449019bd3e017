/* What a fuzz target's inputs reached, printed on stderr when the fuzzer
 * exits (libFuzzer ends with exit(), so atexit handlers run):
 *
 *   kvs_fuzz: NAME: R inputs run, P past parsing (MEANING)
 *
 * R counts every input the harness was given; P those that got past the
 * parser into the project's own code (each target says what that means
 * for it). tools/reliability-report.sh reads the line: a fuzz total
 * dominated by inputs a parser rejects says little, so both are shown.
 *
 * A harness includes this once, names itself with KVS_FUZZ_TARGET, and
 * calls KVS_FUZZ_RUN() per input and KVS_FUZZ_PAST() per input past
 * parsing. */
#ifndef KVS_TESTS_FUZZ_FUZZ_STATS_H
#define KVS_TESTS_FUZZ_FUZZ_STATS_H

#include <stdio.h>
#include <stdlib.h>

static unsigned long long kvs_fuzz_runs_, kvs_fuzz_past_;
static const char *kvs_fuzz_name_, *kvs_fuzz_meaning_;

static void kvs_fuzz_report_(void) {
  fprintf(stderr, "kvs_fuzz: %s: %llu inputs run, %llu past parsing (%s)\n", kvs_fuzz_name_,
          kvs_fuzz_runs_, kvs_fuzz_past_, kvs_fuzz_meaning_);
}

#define KVS_FUZZ_TARGET(name, meaning)                \
  int LLVMFuzzerInitialize(int *argc, char ***argv) { \
    (void)argc;                                       \
    (void)argv;                                       \
    kvs_fuzz_name_ = (name);                          \
    kvs_fuzz_meaning_ = (meaning);                    \
    if (atexit(kvs_fuzz_report_) != 0) abort();       \
    return 0;                                         \
  }                                                   \
  int LLVMFuzzerInitialize(int *argc, char ***argv)

#define KVS_FUZZ_RUN() (kvs_fuzz_runs_++)
#define KVS_FUZZ_PAST() (kvs_fuzz_past_++)

#endif /* KVS_TESTS_FUZZ_FUZZ_STATS_H */
