#include "core/version.h"

const char *kvs_version(void) { return KVS_VERSION_STRING; }
