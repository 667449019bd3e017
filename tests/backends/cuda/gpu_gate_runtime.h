// gpu_gate.h for a test that links the CUDA runtime (the real libcudart, or
// the stand-in): the backend's probe and the runtime's own answer, which
// must agree. The probe reads every cudaGetDeviceCount failure as "no
// device" (KVS_ERR_UNSUPPORTED); here only the answers that mean no device
// is there are: cudaErrorNoDevice, success with 0 devices, and
// cudaErrorInsufficientDriver where no NVIDIA kernel driver is loaded
// (/proc/driver/nvidia/version absent; the runtime reports a missing
// driver as an old one). Any other error (a driver too old for this
// runtime, a runtime that fails to initialise, devices busy or
// unavailable) is kBroken, and a test that needs a GPU fails on it.
#ifndef KVS_TESTS_BACKENDS_CUDA_GPU_GATE_RUNTIME_H
#define KVS_TESTS_BACKENDS_CUDA_GPU_GATE_RUNTIME_H

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <string>

#include "tests/backends/cuda/gpu_gate.h"

namespace kvs_gpu_gate {

inline Answer runtime() {
  Answer probed = probe();
  if (probed.gpus == Gpus::kBroken) return probed;
  int n = 0;
  cudaError_t code = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  const bool driver_loaded = access("/proc/driver/nvidia/version", F_OK) == 0;
  const std::string said = std::string("cudaGetDeviceCount returned ") + cudaGetErrorName(code) +
                           " (" + cudaGetErrorString(code) + ")";
  Answer a;
  if (code == cudaSuccess && n > 0) {
    a.gpus = Gpus::kPresent;
    a.count = n;
  } else if (code == cudaSuccess || code == cudaErrorNoDevice ||
             (code == cudaErrorInsufficientDriver && !driver_loaded)) {
    a.gpus = Gpus::kNone;
  } else {
    a.why = said + (driver_loaded ? ", with an NVIDIA driver loaded" : "") +
            ": the CUDA runtime is broken here, not absent";
    return a;
  }
  if (a.gpus != probed.gpus || a.count != probed.count) {
    a.gpus = Gpus::kBroken;
    a.why = "the CUDA backend's probe and the runtime disagree: the probe says " +
            (probed.gpus == Gpus::kPresent ? std::to_string(probed.count) + " device(s)"
                                           : "'" + probed.why + "'") +
            ", " + said + " with " + std::to_string(n) + " device(s)";
    return a;
  }
  a.why = probed.why;
  return a;
}

}  // namespace kvs_gpu_gate

#endif  // KVS_TESTS_BACKENDS_CUDA_GPU_GATE_RUNTIME_H
