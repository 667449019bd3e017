/* The library's version: the headers' (KVS_VERSION_STRING, kvshard.h) and
 * the linked library's (kvs_version(), declared there too), so an engine
 * can check that the two match. */
#ifndef KVS_CORE_VERSION_H
#define KVS_CORE_VERSION_H

#include "kvshard.h"

#endif /* KVS_CORE_VERSION_H */
