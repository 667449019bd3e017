/* A shared object for the loader checks (shared_object_test,
 * backend_registry_test): code, read-only data and 64 KiB of initialised
 * data after the dynamic section, so a copy cut short loses whole pages
 * the loader maps and touches. */
int kvs_so_fixture_table[16384] = {1, 2, 3};

int kvs_so_fixture_value(int i) { return kvs_so_fixture_table[i & 16383]; }
