// The NULL-argument tests' two checks, shared by every module's
// null_arguments_test: a call that must refuse a NULL (or otherwise bad)
// argument with KVS_ERR_INVALID_ARGUMENT and a message that names it.
#ifndef KVS_TESTS_NULL_ARGUMENTS_H
#define KVS_TESTS_NULL_ARGUMENTS_H

#include <gtest/gtest.h>

#include <string>

#include "core/status.h"

// Runs `call`, which passes &err, and expects KVS_ERR_INVALID_ARGUMENT
// with a message holding `text` (and, when `named`, err.status set too).
#define KVS_EXPECT_REFUSAL_(text, call, named)                        \
  do {                                                                \
    kvs_error err;                                                    \
    err.status = KVS_OK;                                              \
    err.message[0] = '\0';                                            \
    const kvs_status got_ = (call);                                   \
    EXPECT_EQ(got_, KVS_ERR_INVALID_ARGUMENT) << #call;               \
    if (named) {                                                      \
      EXPECT_EQ(err.status, KVS_ERR_INVALID_ARGUMENT) << #call;       \
    }                                                                 \
    EXPECT_NE(std::string(err.message).find(text), std::string::npos) \
        << #call << " said: " << err.message;                         \
  } while (0)

// The refusal of a NULL `arg`: the status, and a message "<arg> is NULL".
#define EXPECT_NULL_REFUSED(arg, call) \
  KVS_EXPECT_REFUSAL_(std::string(arg) + " is NULL", call, true)

// A refusal whose message holds `text`.
#define EXPECT_REFUSED(text, call) KVS_EXPECT_REFUSAL_(text, call, false)

#endif  // KVS_TESTS_NULL_ARGUMENTS_H
