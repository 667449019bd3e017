/* The library's version: the headers' (KVS_VERSION_STRING) and the linked
 * library's (kvs_version()), so an engine can check that the two match. */
#ifndef KVS_CORE_VERSION_H
#define KVS_CORE_VERSION_H

#define KVS_VERSION_MAJOR 0
#define KVS_VERSION_MINOR 5
#define KVS_VERSION_PATCH 0
#define KVS_VERSION_STRING "0.5.0"

#ifdef __cplusplus
extern "C" {
#endif

/* KVS_VERSION_STRING as the library was built. */
const char *kvs_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_VERSION_H */
