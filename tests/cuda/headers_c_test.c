/* Every public header of cuda/ and core/device_ref.h compiles as pure C11
 * (the GoogleTest files see them through C++ only). */
#include <stdio.h>

#include "core/device_ref.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_status.h"
#include "cuda/device_budget.h"
#include "cuda/device_layout.h"
#include "cuda/device_tables.h"

int main(void) {
  kvs_batch_fault fault = KVS_BATCH_FAULT_INIT;
  kvs_device_layout_options options = KVS_DEVICE_LAYOUT_OPTIONS_INIT;
  kvs_device_faults faults = {fault, fault, fault, fault};
  kvs_error err;
  if (kvs_device_faults_check(&faults, &err) != KVS_OK) return 1;
  if (options.alignment != KVS_DEVICE_DEFAULT_ALIGNMENT) return 1;
  kvs_device_tables_destroy(NULL);
  printf("cuda/ headers compile as C11\n");
  return 0;
}
