/* CUDA runtime errors as kvs_status, and whether a device is there.
 *
 * Every CUDA call in cuda/ goes through kvs_cuda_status: a failure becomes
 * KVS_ERR_CUDA with a message naming what was attempted, the error's name
 * and its CUDA string ("cudaMalloc of 4096 bytes on device 0:
 * cudaErrorMemoryAllocation (out of memory)"). A non-sticky error is also
 * cleared from the runtime's last-error slot, so it is reported once, by
 * the call that caused it, and not again by an unrelated later check. */
#ifndef KVS_BACKENDS_CUDA_CUDA_STATUS_H
#define KVS_BACKENDS_CUDA_CUDA_STATUS_H

#include <cuda_runtime_api.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* KVS_OK for cudaSuccess; otherwise KVS_ERR_CUDA with "<what>: <name>
 * (<string>)" in err (when non-NULL). */
kvs_status kvs_cuda_status(cudaError_t code, const char *what, kvs_error *err);

/* One line per fallible CUDA call, jumping to the caller's cleanup label:
 *   KVS_CUDA_GOTO(cudaMemset(p, 0, n), "cudaMemset of the mapping", err, status, fail); */
#define KVS_CUDA_GOTO(call, what, err, status, label)  \
  do {                                                 \
    (status) = kvs_cuda_status((call), (what), (err)); \
    if ((status) != KVS_OK) goto label;                \
  } while (0)

/* How many CUDA devices this process sees. With none, or no usable driver,
 * KVS_ERR_UNSUPPORTED and a message that says so and why, e.g. "no CUDA
 * device visible: cudaGetDeviceCount returned cudaErrorNoDevice (no
 * CUDA-capable device is detected)"; device tests skip with that message.
 * *count is written only on success. */
kvs_status kvs_cuda_device_count(int *count, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_BACKENDS_CUDA_CUDA_STATUS_H */
