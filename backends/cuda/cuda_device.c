#include "backends/cuda/cuda_device.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_status.h"

/* ---- the device scope ---- */

typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*ctx_set_fn)(CUcontext);

static pthread_once_t g_driver_once = PTHREAD_ONCE_INIT;
static ctx_get_fn g_ctx_get;
static ctx_set_fn g_ctx_set;

static void find_driver(void) {
  void *get = NULL, *set = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess ||
      cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return;
  }
  g_ctx_get = (ctx_get_fn)get;
  g_ctx_set = (ctx_set_fn)set;
}

kvs_status kvs_cuda_device_enter(int device, kvs_cuda_device_scope *scope, kvs_error *err) {
  if (scope == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "device scope is NULL");
  (void)pthread_once(&g_driver_once, find_driver);
  kvs_cuda_device_scope s = {NULL, 0, 0, 0};
  CUcontext current = NULL;
  s.use_driver = g_ctx_get != NULL && g_ctx_set != NULL && g_ctx_get(&current) == CUDA_SUCCESS;
  s.saved = current;
  /* With no context the thread has no device: reading one would say 0. */
  int has_device = !s.use_driver || current != NULL;
  if (has_device) {
    kvs_status status = kvs_cuda_status(cudaGetDevice(&s.previous), "cudaGetDevice", err);
    if (status != KVS_OK) return status;
  }
  if (!has_device || s.previous != device) {
    char what[48];
    snprintf(what, sizeof what, "cudaSetDevice(%d)", device);
    kvs_status status = kvs_cuda_status(cudaSetDevice(device), what, err);
    if (status != KVS_OK) {
      kvs_cuda_device_leave(&s); /* a failed switch may still have moved the thread */
      return status;
    }
    s.switched = 1;
  }
  *scope = s;
  return KVS_OK;
}

void kvs_cuda_device_leave(const kvs_cuda_device_scope *scope) {
  if (scope == NULL) return;
  if (scope->use_driver) {
    CUcontext now = NULL;
    if (g_ctx_get(&now) == CUDA_SUCCESS && now == (CUcontext)scope->saved) return;
    (void)g_ctx_set((CUcontext)scope->saved);
  } else if (scope->switched) {
    (void)cudaSetDevice(scope->previous);
  }
}

kvs_status kvs_cuda_upload(void *dst, const void *src, size_t bytes, const char *what,
                           kvs_error *err) {
  char call[160];
  snprintf(call, sizeof call, "cudaDeviceSynchronize before %s", what != NULL ? what : "a copy");
  kvs_status status = kvs_cuda_status(cudaDeviceSynchronize(), call, err);
  if (status != KVS_OK) return status;
  status = kvs_cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what, err);
  if (status != KVS_OK) return status;
  snprintf(call, sizeof call, "cudaDeviceSynchronize after %s", what != NULL ? what : "a copy");
  return kvs_cuda_status(cudaDeviceSynchronize(), call, err);
}

kvs_status kvs_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes,
                             kvs_error *err) {
  char what[96];
  size_t free_b = 0, total_b = 0;
  kvs_cuda_device_scope scope;
  kvs_status status = kvs_cuda_device_enter(device, &scope, err);
  if (status != KVS_OK) return status;
  snprintf(what, sizeof what, "cudaMemGetInfo on device %d", device);
  status = kvs_cuda_status(cudaMemGetInfo(&free_b, &total_b), what, err);
  kvs_cuda_device_leave(&scope);
  if (status != KVS_OK) return status;
  *free_bytes = free_b;
  *total_bytes = total_b;
  return KVS_OK;
}

/* ---- a device's facts ---- */

kvs_status kvs_cuda_device_describe(int ordinal, kvs_cuda_device_facts *out, kvs_error *err) {
  if (out == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "output is NULL");
  char what[96];
  struct cudaDeviceProp prop;
  kvs_cuda_device_facts d;
  memset(&d, 0, sizeof d);
  snprintf(what, sizeof what, "cudaDeviceGetPCIBusId of device %d", ordinal);
  kvs_status status = kvs_cuda_status(
      cudaDeviceGetPCIBusId(d.pci_bus_id, (int)sizeof d.pci_bus_id, ordinal), what, err);
  if (status != KVS_OK) return status;
  snprintf(what, sizeof what, "cudaGetDeviceProperties of device %d", ordinal);
  if ((status = kvs_cuda_status(cudaGetDeviceProperties(&prop, ordinal), what, err))) return status;
  snprintf(d.name, sizeof d.name, "%.*s", (int)(sizeof d.name - 1), prop.name);
  d.total_bytes = prop.totalGlobalMem;
  *out = d;
  return KVS_OK;
}
