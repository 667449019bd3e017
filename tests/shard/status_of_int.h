/* A kvs_status from any int (status_of_int.c). */
#ifndef KVS_TESTS_SHARD_STATUS_OF_INT_H
#define KVS_TESTS_SHARD_STATUS_OF_INT_H

#include "kvshard.h"

#ifdef __cplusplus
extern "C" {
#endif

kvs_status kvs_test_status_of_int(int value);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TESTS_SHARD_STATUS_OF_INT_H */
