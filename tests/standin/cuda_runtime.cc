// The CUDA runtime functions kvshard calls, on the simulated machine.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/standin/engine.h"

using kvs_standin::Alloc;
using kvs_standin::Engine;
using kvs_standin::engine;
using kvs_standin::fail;
using kvs_standin::Op;
using kvs_standin::Range;

namespace {

using Lock = std::unique_lock<std::mutex>;

bool valid_device(const Engine &e, int device) { return device >= 0 && device < e.config.devices; }

// What a pointer is, as a copy sees it.
enum class Memory { kPageable, kPinned, kDevice };

Memory classify(const Engine &e, const void *p) {
  const Alloc *a = e.find(p);
  if (a == nullptr) return Memory::kPageable;
  return a->device >= 0 ? Memory::kDevice : Memory::kPinned;
}

const char *memory_name(Memory m) {
  return m == Memory::kDevice ? "device" : m == Memory::kPinned ? "pinned host" : "pageable host";
}

// The declared kind must agree with where the pointers are (the runtime
// would copy the wrong way or fault).
bool check_kind(Engine &e, cudaMemcpyKind kind, Memory dst, Memory src, const char *call) {
  bool dst_dev = dst == Memory::kDevice, src_dev = src == Memory::kDevice;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = !dst_dev && !src_dev;
      break;
    case cudaMemcpyHostToDevice:
      ok = dst_dev && !src_dev;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dst_dev && src_dev;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_dev && src_dev;
      break;
    default:
      break;
  }
  if (!ok) {
    char text[200];
    std::snprintf(text, sizeof text, "%s of kind %d from %s memory to %s memory", call,
                  static_cast<int>(kind), memory_name(src), memory_name(dst));
    e.violation(text);
  }
  return ok;
}

// A copy's effect when it runs: device ranges must still be live, and a
// pinned source still allocated.
Op copy_op(Engine &e, void *dst, const void *src, size_t bytes, Memory dst_m, Memory src_m,
           std::shared_ptr<std::vector<unsigned char>> staged, const char *call) {
  Op op;
  op.what = call;
  op.run = [&e, dst, src, bytes, dst_m, src_m, staged, call] {
    if (dst_m == Memory::kDevice && !e.check_device({dst, bytes, "the destination"}, -1, call)) {
      return;
    }
    if (src_m == Memory::kDevice && !e.check_device({src, bytes, "the source"}, -1, call)) return;
    if (src_m == Memory::kPinned && !staged && !e.pinned(src, bytes)) {
      e.violation(std::string(call) + ": its pinned source was freed before the copy ran");
      return;
    }
    if (staged) {
      std::memcpy(dst, staged->data(), bytes);
    } else {
      std::memmove(dst, src, bytes);
    }
  };
  return op;
}

std::shared_ptr<std::vector<unsigned char>> stage(const void *src, size_t bytes) {
  auto staged = std::make_shared<std::vector<unsigned char>>(bytes);
  if (bytes > 0) std::memcpy(staged->data(), src, bytes);
  return staged;
}

bool done(const kvs_standin::DonePtr &d) { return !d || d->done; }

CUresult ctx_get_current(CUcontext *ctx) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = e.current_device();
  *ctx = device < 0 ? nullptr : e.contexts[static_cast<size_t>(device)].get();
  return CUDA_SUCCESS;
}

// The context only: the runtime's choice (cudaSetDevice's) stays.
CUresult ctx_set_current(CUcontext ctx) {
  Engine &e = engine();
  Lock lock(e.mutex);
  e.set_current(ctx == nullptr ? -1 : ctx->device);
  return CUDA_SUCCESS;
}

// A driver device handle names one GPU of the machine: the stand-in's
// physical device for the runtime's ordinal on the thread's host (on one
// real host the two are the same number). The calls below take it.
CUresult device_get(CUdevice *dev, int ordinal) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = e.physical(ordinal);
  return CUDA_SUCCESS;
}

bool valid_handle(const Engine &e, CUdevice dev) {
  return dev >= 0 && static_cast<size_t>(dev) < e.context_live.size();
}

// Creates the primary context when it is not live, counts the reference,
// and makes nothing current: as the driver's call does.
CUresult primary_ctx_retain(CUcontext *ctx, CUdevice dev) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_handle(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  size_t d = static_cast<size_t>(dev);
  e.create_context(static_cast<int>(d));
  e.primary_retains[d]++;
  *ctx = e.contexts[d].get();
  return CUDA_SUCCESS;
}

// The driver resets a primary context when its last reference goes; the
// stand-in does not model that (the runtime holds its own reference to a
// context it made) and refuses a release without a retain, as the driver
// does (CUDA_ERROR_INVALID_CONTEXT).
CUresult primary_ctx_release(CUdevice dev) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (!valid_handle(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  size_t d = static_cast<size_t>(dev);
  if (e.primary_retains[d] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  e.primary_retains[d]--;
  return CUDA_SUCCESS;
}

CUresult primary_ctx_get_state(CUdevice dev, unsigned int *flags, int *active) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_handle(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = e.context_live[static_cast<size_t>(dev)] ? 1 : 0;
  return CUDA_SUCCESS;
}

}  // namespace

// ---- devices and contexts ----

cudaError_t cudaGetDeviceCount(int *count) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t f = e.injected("cudaGetDeviceCount")) return fail(f);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  *count = e.config.devices;
  return cudaSuccess;
}

// Since CUDA 12 cudaSetDevice creates the device's primary context at once;
// the runtime also records the choice for the thread.
cudaError_t cudaSetDevice(int device) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (cudaError_t f = e.injected("cudaSetDevice")) return fail(f);
  if (!valid_device(e, device)) return fail(cudaErrorInvalidDevice);
  e.choose(e.physical(device));
  return cudaSuccess;
}

// The current context's device; with none, the thread's last choice, and 0
// on a thread that never chose (no context is created either way).
cudaError_t cudaGetDevice(int *device) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  int d = e.current_device();
  *device = e.ordinal(d >= 0 ? d : e.current_choice());
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  int device = e.need_context();
  if (cudaError_t c = e.host_sync_device(device, "cudaDeviceSynchronize")) return fail(c);
  if (cudaError_t f = e.injected("cudaDeviceSynchronize")) return fail(f);
  e.stats.device_syncs++;
  e.wait_until(
      lock, [&] { return e.idle(device); }, "cudaDeviceSynchronize");
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(e, device)) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = e.config.multiprocessors;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = 6144;
      break;
    case cudaDevAttrL2CacheSize:
      *value = 50 << 20;
      break;
    case cudaDevAttrMemoryClockRate:
      *value = 2619000;
      break;
    case cudaDevAttrMaxPitch:
      *value = static_cast<int>(e.config.max_pitch);
      break;
    default:
      *value = 0;
      break;
  }
  return cudaSuccess;
}

// Loads the kernel into the current context (under lazy loading, the
// documented way to load one before its first launch). The attributes are
// the stand-in's: what kvshard reads of them is nothing.
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (attr == nullptr || func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  int device = e.need_context();
  if (cudaError_t f = e.injected("cudaFuncGetAttributes")) return fail(f);
  std::memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  e.load_kernel(device, func, false);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  int device = e.need_context();
  if (cudaError_t f = e.injected("cudaMemGetInfo")) return fail(f);
  uint64_t used = e.context_live[static_cast<size_t>(device)] ? e.config.context_bytes : 0;
  for (const auto &entry : e.allocs) {
    if (entry.second.device == device && !entry.second.freed) used += entry.second.bytes;
  }
  uint64_t total = e.config.device_bytes;
  if (free_bytes != nullptr) *free_bytes = used < total ? total - used : 0;
  if (total_bytes != nullptr) *total_bytes = total;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (bus_id == nullptr || len <= 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(e, device)) return fail(cudaErrorInvalidDevice);
  std::snprintf(bus_id, static_cast<size_t>(len), "0000:%02x:00.0", 0x18 + 0x10 * device);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(e, device)) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "kvs stand-in GPU %d", device);
  prop->totalGlobalMem = e.config.device_bytes;
  prop->multiProcessorCount = e.config.multiprocessors;
  prop->major = 9;
  prop->minor = 0;
  prop->pciBusID = 0x18 + 0x10 * device;
  prop->warpSize = 32;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

// Only the driver calls kvshard uses; any other symbol is not found.
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status) {
  (void)version;
  (void)flags;
  if (symbol == nullptr || fn == nullptr) return fail(cudaErrorInvalidValue);
  *fn = nullptr;
  if (std::strcmp(symbol, "cuCtxGetCurrent") == 0) {
    *fn = reinterpret_cast<void *>(&ctx_get_current);
  } else if (std::strcmp(symbol, "cuCtxSetCurrent") == 0) {
    *fn = reinterpret_cast<void *>(&ctx_set_current);
  } else if (std::strcmp(symbol, "cuDeviceGet") == 0) {
    *fn = reinterpret_cast<void *>(&device_get);
  } else if (std::strcmp(symbol, "cuDevicePrimaryCtxRetain") == 0) {
    *fn = reinterpret_cast<void *>(&primary_ctx_retain);
  } else if (std::strcmp(symbol, "cuDevicePrimaryCtxRelease") == 0) {
    *fn = reinterpret_cast<void *>(&primary_ctx_release);
  } else if (std::strcmp(symbol, "cuDevicePrimaryCtxGetState") == 0) {
    *fn = reinterpret_cast<void *>(&primary_ctx_get_state);
  }
  if (status != nullptr) {
    *status = *fn != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  }
  return *fn != nullptr ? cudaSuccess : fail(cudaErrorSymbolNotFound);
}

// ---- errors ----

cudaError_t cudaGetLastError(void) {
  Engine &e = engine();
  Lock lock(e.mutex);
  return kvs_standin::take_last_error(true);
}

cudaError_t cudaPeekAtLastError(void) {
  Engine &e = engine();
  Lock lock(e.mutex);
  return kvs_standin::take_last_error(false);
}

namespace {

struct ErrorText {
  cudaError_t code;
  const char *name;
  const char *text;
};

// The runtime's own names and strings for the codes the stand-in answers
// and the tests name.
const ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText &error_text(cudaError_t code) {
  for (const ErrorText &t : kErrors) {
    if (t.code == code) return t;
  }
  return kErrors[sizeof kErrors / sizeof kErrors[0] - 1];
}

}  // namespace

const char *cudaGetErrorName(cudaError_t error) { return error_text(error).name; }
const char *cudaGetErrorString(cudaError_t error) { return error_text(error).text; }

// ---- memory ----

cudaError_t cudaMalloc(void **pointer, size_t size) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (cudaError_t c = e.unsafe_call("cudaMalloc")) return fail(c);
  if (pointer == nullptr) return fail(cudaErrorInvalidValue);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  int device = e.need_context();
  e.background();
  if (cudaError_t f = e.injected("cudaMalloc")) return fail(f);
  if (size == 0) {
    *pointer = nullptr;
    return cudaSuccess;
  }
  uint64_t used = e.config.context_bytes;
  for (const auto &entry : e.allocs) {
    if (entry.second.device == device && !entry.second.freed) used += entry.second.bytes;
  }
  if (used + size > e.config.device_bytes) return fail(cudaErrorMemoryAllocation);
  size_t rounded = (size + 255) / 256 * 256;
  void *p = std::aligned_alloc(256, rounded);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  // Fresh device memory holds whatever was there: never zeros to rely on.
  std::memset(p, 0xa5, rounded);
  Alloc a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.bytes = size;
  a.device = device;
  e.allocs[a.base] = a;
  *pointer = p;
  return cudaSuccess;
}

// cudaFree waits for the device to go idle before it frees (the runtime
// does), so work queued before it still reads live memory. Freed memory is
// never reused until reset, so a later use is caught, not silently served.
cudaError_t cudaFree(void *pointer) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (cudaError_t c = e.unsafe_call("cudaFree")) return fail(c);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  e.need_context();
  if (pointer == nullptr) return cudaSuccess;
  auto it = e.allocs.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == e.allocs.end() || it->second.device < 0) {
    e.violation("cudaFree of a pointer cudaMalloc did not return");
    return fail(cudaErrorInvalidValue);
  }
  if (it->second.freed) {
    e.violation("cudaFree of device memory freed before");
    return fail(cudaErrorInvalidValue);
  }
  int device = it->second.device;
  e.wait_until(
      lock, [&] { return e.idle(device); }, "cudaFree's device synchronisation");
  e.allocs[reinterpret_cast<uintptr_t>(pointer)].freed = true;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **pointer, size_t size) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (cudaError_t c = e.unsafe_call("cudaMallocHost")) return fail(c);
  if (pointer == nullptr) return fail(cudaErrorInvalidValue);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  e.need_context();
  if (cudaError_t f = e.injected("cudaMallocHost")) return fail(f);
  size_t rounded = (size + 255) / 256 * 256;
  void *p = std::aligned_alloc(256, rounded > 0 ? rounded : 256);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  std::memset(p, 0x5a, rounded > 0 ? rounded : 256);
  Alloc a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.bytes = size;
  a.device = -1;
  e.allocs[a.base] = a;
  *pointer = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *pointer) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (cudaError_t c = e.unsafe_call("cudaFreeHost")) return fail(c);
  if (pointer == nullptr) return cudaSuccess;
  auto it = e.allocs.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == e.allocs.end() || it->second.device >= 0 || it->second.freed) {
    e.violation("cudaFreeHost of a pointer cudaMallocHost did not return, or freed before");
    return fail(cudaErrorInvalidValue);
  }
  // Like cudaFree, it synchronises the current device (its context), not
  // every device of the process: threads that are ranks on other GPUs
  // carry on meanwhile.
  int device = e.need_context();
  e.wait_until(
      lock, [&] { return e.idle(device); }, "cudaFreeHost's synchronisation");
  e.allocs[reinterpret_cast<uintptr_t>(pointer)].freed = true;
  return cudaSuccess;
}

namespace {

// A memset of device memory: asynchronous on the stream, as the runtime's.
cudaError_t enqueue_memset(Engine &e, CUstream_st *s, void *pointer, int value, size_t bytes,
                           const char *call) {
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t f = e.injected(call)) return fail(f);
  Op op;
  op.what = call;
  op.run = [&e, pointer, value, bytes, call] {
    if (e.check_device({pointer, bytes, "the destination"}, -1, call)) {
      std::memset(pointer, value, bytes);
    }
  };
  e.enqueue(s, std::move(op));
  return cudaSuccess;
}

// Where a copy lands when, per the runtime's "API synchronization
// behavior": from pageable memory to the device the source is staged at
// the call and the copy lands later; from pinned memory the source is read
// when the copy runs; to pageable memory the call returns once done.
cudaError_t copy(Engine &e, Lock &lock, void *dst, const void *src, size_t bytes,
                 cudaMemcpyKind kind, CUstream_st *s, bool async, const char *call) {
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t f = e.injected(call)) return fail(f);
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  Memory dst_m = classify(e, dst), src_m = classify(e, src);
  if (!check_kind(e, kind, dst_m, src_m, call)) return fail(cudaErrorInvalidValue);
  // Pageable memory makes the host wait (staging, or the copy itself), and
  // so does a synchronous copy: neither may happen in a capture.
  if (dst_m == Memory::kPageable || src_m == Memory::kPageable || !async) {
    if (cudaError_t c = e.host_sync(s, call)) return fail(c);
  }
  bool to_device = dst_m == Memory::kDevice, from_device = src_m == Memory::kDevice;
  std::shared_ptr<std::vector<unsigned char>> staged;
  if (!from_device && src_m == Memory::kPageable) {
    // A synchronous copy from pageable memory first waits for the legacy
    // stream's earlier work, then stages the source.
    if (!async) {
      kvs_standin::DonePtr before = s->tail;
      e.wait_until(
          lock, [&] { return done(before); }, std::string(call) + "'s stream sync", s);
    }
    staged = stage(src, bytes);
  }
  Op op = copy_op(e, dst, src, bytes, dst_m, src_m, staged, call);
  kvs_standin::DonePtr finished = op.done;
  e.enqueue(s, std::move(op));
  bool returns_at_once;
  if (to_device && from_device) {
    returns_at_once = true;  // device to device: no host synchronisation
  } else if (to_device) {
    // Pageable: staged, lands later. Pinned: cudaMemcpy is synchronous,
    // cudaMemcpyAsync is not.
    returns_at_once = src_m == Memory::kPageable || async;
  } else {
    // To the host: pageable memory always waits; pinned only for cudaMemcpy.
    returns_at_once = async && dst_m == Memory::kPinned;
  }
  if (!returns_at_once) {
    e.wait_until(
        lock, [&] { return finished->done; }, call, s);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemset(void *pointer, int value, size_t bytes) {
  Engine &e = engine();
  Lock lock(e.mutex);
  e.background();
  return enqueue_memset(e, e.resolve(nullptr, "cudaMemset"), pointer, value, bytes, "cudaMemset");
}

cudaError_t cudaMemsetAsync(void *pointer, int value, size_t bytes, cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  e.background();
  return enqueue_memset(e, e.resolve(stream, "cudaMemsetAsync"), pointer, value, bytes,
                        "cudaMemsetAsync");
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  e.background();
  return copy(e, lock, dst, src, bytes, kind, e.resolve(nullptr, "cudaMemcpy"), false,
              "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  e.background();
  return copy(e, lock, dst, src, bytes, kind, e.resolve(stream, "cudaMemcpyAsync"), true,
              "cudaMemcpyAsync");
}

// A 2D copy: `height` rows of `width` bytes, each pitch apart; queued as
// one copy per row, in order, with the 1D copy's synchronisation rules.
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidPitchValue);
  // A pitch past the device's maximum is refused (cudaDevAttrMaxPitch).
  if (dpitch > e.config.max_pitch || spitch > e.config.max_pitch) {
    return fail(cudaErrorInvalidPitchValue);
  }
  e.background();
  CUstream_st *s = e.resolve(stream, "cudaMemcpy2DAsync");
  for (size_t row = 0; row < height; row++) {
    cudaError_t c = copy(e, lock, static_cast<char *>(dst) + row * dpitch,
                         static_cast<const char *>(src) + row * spitch, width, kind, s, true,
                         "cudaMemcpy2DAsync");
    if (c != cudaSuccess) return c;
  }
  return cudaSuccess;
}

// A 2D memset: `height` rows of `width` bytes, `pitch` apart; queued as
// one memset per row, in order, asynchronous as the runtime's.
cudaError_t cudaMemset2DAsync(void *pointer, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  if (width > pitch || pitch > e.config.max_pitch) {
    return fail(cudaErrorInvalidPitchValue);
  }
  e.background();
  CUstream_st *s = e.resolve(stream, "cudaMemset2DAsync");
  for (size_t row = 0; row < height; row++) {
    cudaError_t c = enqueue_memset(e, s, static_cast<char *>(pointer) + row * pitch, value, width,
                                   "cudaMemset2DAsync");
    if (c != cudaSuccess) return c;
  }
  return cudaSuccess;
}

// ---- streams ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (stream == nullptr) return fail(cudaErrorInvalidValue);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  int device = e.need_context();
  if (cudaError_t f = e.injected("cudaStreamCreateWithFlags")) return fail(f);
  *stream = e.new_stream(device, (flags & cudaStreamNonBlocking) == 0, false);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

// Work still queued runs to the end, as the runtime promises.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaStreamDestroy");
  if (s == nullptr || s->legacy) return fail(cudaErrorInvalidResourceHandle);
  s->destroyed = true;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaStreamSynchronize");
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t c = e.host_sync(s, "cudaStreamSynchronize")) return fail(c);
  if (cudaError_t f = e.injected("cudaStreamSynchronize")) return fail(f);
  e.wait_until(
      lock, [&] { return s->queue.empty(); }, "cudaStreamSynchronize", s);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaStreamQuery");
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t c = e.host_sync(s, "cudaStreamQuery")) return fail(c);
  if (cudaError_t f = e.injected("cudaStreamQuery")) return fail(f);
  e.background();
  if (!s->queue.empty() && e.chance(50)) e.step(s);
  e.trace_stuck(s);
  // Not an error: cudaStreamQuery does not set the last error for "not ready".
  return s->queue.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  (void)flags;
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaStreamWaitEvent");
  if (s == nullptr || event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (event->destroyed) {
    e.violation("cudaStreamWaitEvent on a destroyed event");
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (cudaError_t f = e.injected("cudaStreamWaitEvent")) return fail(f);
  if (s->capture != nullptr) {
    // An event recorded outside this capture: CUDA refuses the wait (it
    // would make the graph depend on work that is not in it).
    e.invalidate_capture(s, "cudaStreamWaitEvent on an event from outside the capture");
    return fail(cudaErrorStreamCaptureIsolation);
  }
  Op op;
  op.what = "cudaStreamWaitEvent";
  // The wait is on the event's record as of now; a later record of the
  // same event does not move it.
  if (event->recorded) op.after.push_back(event->recorded);
  e.enqueue(s, std::move(op));
  return cudaSuccess;
}

// ---- events ----

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  (void)flags;
  Engine &e = engine();
  Lock lock(e.mutex);
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  if (e.config.devices <= 0) return fail(cudaErrorNoDevice);
  int device = e.need_context();
  if (cudaError_t f = e.injected("cudaEventCreateWithFlags")) return fail(f);
  e.events.emplace_back(new CUevent_st);
  e.events.back()->device = device;
  *event = e.events.back().get();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaEventRecord");
  if (s == nullptr || event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (event->destroyed) {
    e.violation("cudaEventRecord of a destroyed event");
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (event->device != s->device) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "cudaEventRecord of an event of device %d on a stream of device %d",
                  e.ordinal(event->device), e.ordinal(s->device));
    e.violation(text);
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (cudaError_t f = e.injected("cudaEventRecord")) return fail(f);
  if (s->capture != nullptr) {
    e.violation("cudaEventRecord on a capturing stream: the stand-in does not capture events");
    e.invalidate_capture(s, "cudaEventRecord");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  Op op;
  op.what = "cudaEventRecord";
  event->recorded = op.done;
  event->recorded_on = s;
  e.enqueue(s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (event == nullptr || event->destroyed) return fail(cudaErrorInvalidResourceHandle);
  if (event->recorded_on != nullptr) {
    if (cudaError_t c = e.host_sync(event->recorded_on, "cudaEventSynchronize")) return fail(c);
  }
  kvs_standin::DonePtr recorded = event->recorded;
  e.wait_until(
      lock, [&] { return done(recorded); }, "cudaEventSynchronize", event->recorded_on);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (event == nullptr || event->destroyed) return fail(cudaErrorInvalidResourceHandle);
  if (event->recorded_on != nullptr) {
    if (cudaError_t c = e.host_sync(event->recorded_on, "cudaEventQuery")) return fail(c);
  }
  e.background();
  if (!done(event->recorded) && e.chance(50)) e.step(event->recorded_on);
  return done(event->recorded) ? cudaSuccess : cudaErrorNotReady;
}

// A record still queued completes; the handle is gone.
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (event == nullptr || event->destroyed) return fail(cudaErrorInvalidResourceHandle);
  event->destroyed = true;
  return cudaSuccess;
}

// The stand-in keeps no clock: every completed interval reads 1 us.
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (ms == nullptr || start == nullptr || end == nullptr) return fail(cudaErrorInvalidValue);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded->done || !end->recorded->done) return fail(cudaErrorNotReady);
  *ms = 0.001f;
  return cudaSuccess;
}
