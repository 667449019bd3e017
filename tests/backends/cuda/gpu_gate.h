// Whether this process has a GPU, asked of CUDA, never read off a tool's
// output. A test that needs a GPU skips only where CUDA says there is none
// (the CUDA backend's probe answers KVS_ERR_UNSUPPORTED, naming why) and
// fails where asking failed in any other way (the backend or libcudart
// cannot be loaded, or the runtime answers an error that is not "no
// device"), so a broken runtime on a GPU machine is a failure, not a row
// of skips. A test of the no-GPU path does the opposite: it runs where CUDA
// sees none and skips where it sees some.
//
//   kvs_gpu_gate::Answer a = kvs_gpu_gate::probe();
//   KVS_NEED_GPU(a);      // in SetUp or a test body
//
// Links //topology:cuda_probe_api and the CUDA backend: linked in (the
// real //backends/cuda, or //backends/cuda:backend_api over the stand-in),
// or loaded (//backends/cuda:libkvshard-cuda.so.1 in data, with
// KVSHARD_BACKEND_PATH naming its folder). A test that links the CUDA
// runtime also asks it directly (gpu_gate_runtime.h).
#ifndef KVS_TESTS_BACKENDS_CUDA_GPU_GATE_H
#define KVS_TESTS_BACKENDS_CUDA_GPU_GATE_H

#include <gtest/gtest.h>

#include <string>

#include "core/status.h"
#include "topology/cuda_probe.h"

namespace kvs_gpu_gate {

enum class Gpus {
  kPresent,  // CUDA sees `count` devices
  kNone,     // CUDA says there is none, `why`
  kBroken,   // asking failed, `why`: a test that needs the answer fails
};

struct Answer {
  Gpus gpus = Gpus::kBroken;
  int count = 0;
  std::string why;
};

// The CUDA backend's probe (kvs_cuda_probe_device_count).
inline Answer probe() {
  Answer a;
  int count = 0;
  kvs_error err;
  err.message[0] = '\0';
  kvs_status status = kvs_cuda_probe_device_count(&count, &err);
  if (status == KVS_OK && count > 0) {
    a.gpus = Gpus::kPresent;
    a.count = count;
  } else if (status == KVS_OK) {
    a.why =
        "kvs_cuda_probe_device_count answered KVS_OK with " + std::to_string(count) + " devices";
  } else if (status == KVS_ERR_UNSUPPORTED) {
    a.gpus = Gpus::kNone;
    a.why = err.message;
  } else {
    a.why = std::string("asking CUDA for its devices failed (") + kvs_status_string(status) +
            "): " + err.message;
  }
  return a;
}

}  // namespace kvs_gpu_gate

// Skips the test where CUDA sees no GPU, fails it where asking failed.
#define KVS_NEED_GPU(answer)                                                            \
  do {                                                                                  \
    const ::kvs_gpu_gate::Answer &kvs_gate_answer_ = (answer);                          \
    if (kvs_gate_answer_.gpus == ::kvs_gpu_gate::Gpus::kNone) {                         \
      GTEST_SKIP() << kvs_gate_answer_.why;                                             \
    }                                                                                   \
    if (kvs_gate_answer_.gpus == ::kvs_gpu_gate::Gpus::kBroken) {                       \
      FAIL() << "cannot tell whether this machine has a GPU: " << kvs_gate_answer_.why; \
    }                                                                                   \
  } while (0)

// The opposite, for a test of the no-GPU path: skips where CUDA sees a GPU,
// fails where asking failed.
#define KVS_NEED_NO_GPU(answer)                                                         \
  do {                                                                                  \
    const ::kvs_gpu_gate::Answer &kvs_gate_answer_ = (answer);                          \
    if (kvs_gate_answer_.gpus == ::kvs_gpu_gate::Gpus::kPresent) {                      \
      GTEST_SKIP() << "CUDA sees " << kvs_gate_answer_.count                            \
                   << " GPU(s) here; the no-GPU path is not reachable";                 \
    }                                                                                   \
    if (kvs_gate_answer_.gpus == ::kvs_gpu_gate::Gpus::kBroken) {                       \
      FAIL() << "cannot tell whether this machine has a GPU: " << kvs_gate_answer_.why; \
    }                                                                                   \
  } while (0)

#endif  // KVS_TESTS_BACKENDS_CUDA_GPU_GATE_H
