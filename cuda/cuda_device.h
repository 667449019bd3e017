/* The CUDA devices this process sees: the one place that asks the CUDA
 * runtime for them (topology/'s GPU discovery, the NCCL backend and the
 * device benchmark all come here).
 *
 * Reading free memory (cudaMemGetInfo) needs a context on each device:
 * the list makes each device current once, which creates its primary
 * context (a few hundred MiB of device memory, the same the serving
 * process would create). It never resets a device, since a caller inside
 * a serving process may be using those contexts. */
#ifndef KVS_CUDA_CUDA_DEVICE_H
#define KVS_CUDA_CUDA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cudaDeviceGetPCIBusId's "0000:1b:00.0" form, with room for the longest
 * domain the runtime prints. */
#define KVS_CUDA_PCI_BUS_ID_MAX 32
#define KVS_CUDA_DEVICE_NAME_MAX 256

typedef struct kvs_cuda_device_info {
  int ordinal;                               /* CUDA device ordinal in this process */
  char pci_bus_id[KVS_CUDA_PCI_BUS_ID_MAX];  /* cudaDeviceGetPCIBusId */
  char name[KVS_CUDA_DEVICE_NAME_MAX];       /* cudaDeviceProp.name */
  uint64_t free_bytes;                       /* cudaMemGetInfo */
  uint64_t total_bytes;
} kvs_cuda_device_info;

/* Lists the visible devices into out[0..cap) in ordinal order. No driver
 * or no device is KVS_ERR_UNSUPPORTED saying why (kvs_cuda_device_count);
 * a runtime error on a device is KVS_ERR_CUDA naming the call and the
 * device; more devices than cap is KVS_ERR_INVALID_ARGUMENT. *n_out and
 * out are written only on success. The current device is restored. */
kvs_status kvs_cuda_devices_list(kvs_cuda_device_info *out, size_t cap, size_t *n_out,
                                 kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CUDA_CUDA_DEVICE_H */
