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
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*primary_retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*primary_state_fn)(CUdevice, unsigned int *, int *);

/* The driver's calls, found through the runtime (nothing links libcuda);
 * all of them or none. */
static struct {
  ctx_get_fn ctx_get;
  ctx_set_fn ctx_set;
  device_get_fn device_get;
  primary_retain_fn retain;
  primary_state_fn state;
} g_drv;
static pthread_once_t g_driver_once = PTHREAD_ONCE_INIT;

/* Each device's primary context, retained once and never released: the
 * tables live in it, and a release that dropped the last reference would
 * destroy them (the runtime keeps its own reference to a context it made
 * for as long, until cudaDeviceReset). After a reset the context reads
 * inactive and is retained again. */
#define SCOPE_DEVICES 256
static CUcontext g_primary[SCOPE_DEVICES];
static pthread_mutex_t g_primary_lock = PTHREAD_MUTEX_INITIALIZER;

static void *entry_point(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    /* Our own failed query, not the caller's error: do not leave it as the
     * thread's last error. */
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

static void find_driver(void) {
  void *get = entry_point("cuCtxGetCurrent"), *set = entry_point("cuCtxSetCurrent");
  void *dev = entry_point("cuDeviceGet"), *retain = entry_point("cuDevicePrimaryCtxRetain");
  void *state = entry_point("cuDevicePrimaryCtxGetState");
  if (get == NULL || set == NULL || dev == NULL || retain == NULL || state == NULL) return;
  g_drv.ctx_get = (ctx_get_fn)get;
  g_drv.ctx_set = (ctx_set_fn)set;
  g_drv.device_get = (device_get_fn)dev;
  g_drv.retain = (primary_retain_fn)retain;
  g_drv.state = (primary_state_fn)state;
}

/* A driver result, named (the driver's own names for the ones these calls
 * return; the number otherwise). */
static kvs_status driver_status(CUresult rc, const char *call, int device, kvs_error *err) {
  if (rc == CUDA_SUCCESS) return KVS_OK;
  const char *name =
      rc == CUDA_ERROR_INVALID_DEVICE       ? "CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)"
      : rc == CUDA_ERROR_INVALID_VALUE      ? "CUDA_ERROR_INVALID_VALUE"
      : rc == CUDA_ERROR_OUT_OF_MEMORY      ? "CUDA_ERROR_OUT_OF_MEMORY"
      : rc == CUDA_ERROR_NOT_INITIALIZED    ? "CUDA_ERROR_NOT_INITIALIZED"
      : rc == CUDA_ERROR_DEINITIALIZED      ? "CUDA_ERROR_DEINITIALIZED"
      : rc == CUDA_ERROR_INVALID_CONTEXT    ? "CUDA_ERROR_INVALID_CONTEXT"
      : rc == CUDA_ERROR_DEVICE_UNAVAILABLE ? "CUDA_ERROR_DEVICE_UNAVAILABLE (busy or unavailable)"
                                            : NULL;
  if (name != NULL) return kvs_error_set(err, KVS_ERR_CUDA, "%s(%d): %s", call, device, name);
  return kvs_error_set(err, KVS_ERR_CUDA, "%s(%d): CUresult %d", call, device, (int)rc);
}

/* The device's primary context, retained the first time and again after a
 * reset made it inactive. */
static kvs_status primary_context(int device, CUcontext *out, kvs_error *err) {
  CUdevice dev = 0;
  kvs_status status = driver_status(g_drv.device_get(&dev, device), "cuDeviceGet", device, err);
  if (status != KVS_OK) return status;
  /* Kept by the driver's device handle, not the ordinal. */
  if (dev < 0 || dev >= SCOPE_DEVICES) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "device %d: the device scope keeps contexts for %d devices", device,
                         SCOPE_DEVICES);
  }
  unsigned int flags = 0;
  int active = 0;
  pthread_mutex_lock(&g_primary_lock);
  CUcontext ctx = g_primary[dev];
  if (ctx == NULL || g_drv.state(dev, &flags, &active) != CUDA_SUCCESS || !active) {
    status = driver_status(g_drv.retain(&ctx, dev), "cuDevicePrimaryCtxRetain", device, err);
    if (status == KVS_OK) g_primary[dev] = ctx;
  }
  pthread_mutex_unlock(&g_primary_lock);
  if (status == KVS_OK) *out = ctx;
  return status;
}

/* Puts back the runtime's choice of device for a thread that had no
 * context: a call inside the scope may have made one with cudaSetDevice
 * (NCCL's blocking paths do, on the caller's thread). cudaSetDevice would
 * create the earlier choice's context if it had none, so the choice is put
 * back only when that context is already live; otherwise the thread keeps
 * no context and the runtime's choice of the scope's device (see the
 * header). */
static void restore_choice(int previous) {
  int now = -1;
  if (cudaGetDevice(&now) != cudaSuccess || now == previous) return;
  CUdevice dev = 0;
  unsigned int flags = 0;
  int active = 0;
  if (g_drv.device_get(&dev, previous) != CUDA_SUCCESS ||
      g_drv.state(dev, &flags, &active) != CUDA_SUCCESS || !active) {
    return;
  }
  if (cudaSetDevice(previous) == cudaSuccess) (void)g_drv.ctx_set(NULL);
}

/* Where the driver cannot be asked: the runtime's own calls. */
static kvs_status enter_by_runtime(int device, kvs_cuda_device_scope *s, kvs_error *err) {
  kvs_status status = kvs_cuda_status(cudaGetDevice(&s->previous), "cudaGetDevice", err);
  if (status != KVS_OK) return status;
  if (s->previous != device) {
    char what[48];
    snprintf(what, sizeof what, "cudaSetDevice(%d)", device);
    status = kvs_cuda_status(cudaSetDevice(device), what, err);
    if (status != KVS_OK) {
      (void)cudaSetDevice(s->previous); /* a failed switch may still have moved the thread */
      return status;
    }
    s->switched = 1;
  }
  return KVS_OK;
}

/* Relaxed capture mode for the scope (the header says why). */
static void relax_capture(kvs_cuda_device_scope *s) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) {
    s->capture_mode = (int)mode;
    s->exchanged = 1;
  }
}

static kvs_status enter_context(int device, kvs_cuda_device_scope *scope, kvs_error *err);

kvs_status kvs_cuda_device_enter(int device, kvs_cuda_device_scope *scope, kvs_error *err) {
  if (scope == NULL) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "device scope is NULL");
  kvs_status status = enter_context(device, scope, err);
  if (status == KVS_OK) relax_capture(scope);
  return status;
}

static kvs_status enter_context(int device, kvs_cuda_device_scope *scope, kvs_error *err) {
  (void)pthread_once(&g_driver_once, find_driver);
  kvs_cuda_device_scope s = {NULL, 0, 0, 0, 0, 0};
  CUcontext current = NULL;
  if (g_drv.ctx_get == NULL || g_drv.ctx_get(&current) != CUDA_SUCCESS) {
    kvs_status status = enter_by_runtime(device, &s, err);
    if (status == KVS_OK) *scope = s;
    return status;
  }
  CUcontext target = NULL;
  kvs_status status = primary_context(device, &target, err);
  if (status != KVS_OK) return status;
  s.use_driver = 1;
  s.saved = current;
  /* The runtime's choice, read with no context current: it creates none. */
  if (current == NULL &&
      (status = kvs_cuda_status(cudaGetDevice(&s.previous), "cudaGetDevice", err)) != KVS_OK) {
    return status;
  }
  if (current != target) {
    if ((status = driver_status(g_drv.ctx_set(target), "cuCtxSetCurrent on device", device, err)) !=
        KVS_OK) {
      (void)g_drv.ctx_set(current);
      return status;
    }
    s.switched = 1;
  }
  *scope = s;
  return KVS_OK;
}

void kvs_cuda_device_leave(const kvs_cuda_device_scope *scope) {
  if (scope == NULL) return;
  if (scope->exchanged) {
    enum cudaStreamCaptureMode mode = (enum cudaStreamCaptureMode)scope->capture_mode;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
  }
  if (scope->use_driver) {
    if (scope->switched) (void)g_drv.ctx_set((CUcontext)scope->saved);
    if (scope->saved == NULL) restore_choice(scope->previous);
  } else if (scope->switched) {
    (void)cudaSetDevice(scope->previous);
  }
}

kvs_status kvs_cuda_upload(void *dst, const void *src, size_t bytes, const char *what,
                           kvs_error *err) {
  char call[160];
  snprintf(call, sizeof call, "cudaDeviceSynchronize before %s", what != NULL ? what : "a copy");
#ifdef KVS_MUTANT_UPLOAD_NO_SYNC /* planted bug, test builds only (tests/mutants): no wait */
  kvs_status status = KVS_OK;
#else
  kvs_status status = kvs_cuda_status(cudaDeviceSynchronize(), call, err);
#endif
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
