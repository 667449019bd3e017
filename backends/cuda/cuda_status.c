#include "backends/cuda/cuda_status.h"

kvs_status kvs_cuda_status(cudaError_t code, const char *what, kvs_error *err) {
  if (code == cudaSuccess) return KVS_OK;
  /* Clears a non-sticky error; a sticky one (the context is lost) stays
   * and every later call reports it, which is what it means. */
  (void)cudaGetLastError();
  return kvs_error_set(err, KVS_ERR_CUDA, "%s: %s (%s)", what != NULL ? what : "CUDA call",
                       cudaGetErrorName(code), cudaGetErrorString(code));
}

kvs_status kvs_cuda_device_count(int *count, kvs_error *err) {
  if (count == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "count is NULL");
  int n = 0;
  cudaError_t code = cudaGetDeviceCount(&n);
  if (code != cudaSuccess) {
    (void)cudaGetLastError();
    /* The runtime reports a missing driver as an old one; say both. */
    const char *hint = code == cudaErrorInsufficientDriver
                           ? "; no NVIDIA driver is loaded, or it is older than this CUDA runtime"
                           : "";
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "no CUDA device visible: cudaGetDeviceCount returned %s (%s)%s",
                         cudaGetErrorName(code), cudaGetErrorString(code), hint);
  }
  if (n <= 0) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "no CUDA device visible: cudaGetDeviceCount returned cudaSuccess with "
                         "0 devices (CUDA_VISIBLE_DEVICES may hide them)");
  }
  *count = n;
  return KVS_OK;
}
