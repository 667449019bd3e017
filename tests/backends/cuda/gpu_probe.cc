// The GPU gate's answer (gpu_gate.h) for shell tests: "gpus N" and exit 0,
// "none: WHY" and exit 3 where CUDA says there is no GPU, "broken: WHY" and
// exit 1 where asking failed.
#include <cstdio>

#include "tests/backends/cuda/gpu_gate.h"

int main() {
  kvs_gpu_gate::Answer a = kvs_gpu_gate::probe();
  switch (a.gpus) {
    case kvs_gpu_gate::Gpus::kPresent:
      std::printf("gpus %d\n", a.count);
      return 0;
    case kvs_gpu_gate::Gpus::kNone:
      std::printf("none: %s\n", a.why.c_str());
      return 3;
    case kvs_gpu_gate::Gpus::kBroken:
      break;
  }
  std::printf("broken: %s\n", a.why.c_str());
  return 1;
}
