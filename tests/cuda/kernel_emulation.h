// A CPU stand-in for the CUDA execution model, so the kernel source in
// cuda/device_kernels.cuh runs through the host compiler on machines
// without a GPU. Include it before that header.
//
// Each block runs as blockDim.x host threads at once (blocks one after
// another), so __syncthreads is a real barrier, __any_sync a real vote of
// a warp's 32 lanes, __shared__ variables one copy per block (function
// statics: blocks never overlap), and the atomics real atomics. It checks
// the kernels' logic -- indexing, lane mapping, grid-stride loops,
// superseded journal entries across blocks, fault records -- not timing,
// the memory model or the compiler's code: the device test does that.
#ifndef KVS_TESTS_CUDA_KERNEL_EMULATION_H
#define KVS_TESTS_CUDA_KERNEL_EMULATION_H

#if defined(__CUDACC__)
#error "kernel_emulation.h stands in for CUDA; nvcc has the real thing"
#endif

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

namespace kvs_emu {

// A reusable barrier for a fixed number of threads.
class Barrier {
 public:
  explicit Barrier(unsigned count) : count_(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    unsigned generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      generation_++;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  unsigned count_;
  unsigned arrived_ = 0;
  unsigned generation_ = 0;
};

struct Warp {
  Barrier barrier{32};
  std::atomic<int> vote{0};
};

struct Block {
  explicit Block(unsigned threads) : barrier(threads) {
    for (unsigned w = 0; w < (threads + 31) / 32; w++) warps.emplace_back(new Warp);
  }
  Barrier barrier;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local dim3 thread_idx;
inline thread_local dim3 block_idx;
inline thread_local Block *block;
inline dim3 block_dim;
inline dim3 grid_dim;

}  // namespace kvs_emu

#define threadIdx kvs_emu::thread_idx
#define blockIdx kvs_emu::block_idx
#define blockDim kvs_emu::block_dim
#define gridDim kvs_emu::grid_dim
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

inline void __syncthreads() { kvs_emu::block->barrier.wait(); }

// Every lane of the warp must call it, as on the device (full mask).
inline int __any_sync(unsigned /*mask*/, int predicate) {
  kvs_emu::Warp &warp = *kvs_emu::block->warps[threadIdx.x / 32];
  warp.barrier.wait();  // the previous vote is read and reset
  if (predicate) warp.vote.fetch_or(1);
  warp.barrier.wait();
  int result = warp.vote.load();
  warp.barrier.wait();
  if (threadIdx.x % 32 == 0) warp.vote.store(0);
  return result;
}

inline unsigned long long atomicAdd(unsigned long long *address, unsigned long long value) {
  return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST);
}

inline unsigned long long atomicMin(unsigned long long *address, unsigned long long value) {
  unsigned long long old = __atomic_load_n(address, __ATOMIC_SEQ_CST);
  while (value < old && !__atomic_compare_exchange_n(address, &old, value, false, __ATOMIC_SEQ_CST,
                                                     __ATOMIC_SEQ_CST)) {
  }
  return old;
}

inline unsigned atomicOr(unsigned *address, unsigned value) {
  return __atomic_fetch_or(address, value, __ATOMIC_SEQ_CST);
}

inline int atomicAnd(int *address, int value) {
  return __atomic_fetch_and(address, value, __ATOMIC_SEQ_CST);
}

namespace kvs_emu {

// kernel<<<grid, threads>>>(args...), blocks one after another.
template <typename... Params, typename... Args>
void launch(unsigned grid, unsigned threads, void (*kernel)(Params...), Args... args) {
  grid_dim = dim3{grid, 1, 1};
  block_dim = dim3{threads, 1, 1};
  for (unsigned b = 0; b < grid; b++) {
    Block state(threads);
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; t++) {
      pool.emplace_back([&, t, b] {
        thread_idx = dim3{t, 1, 1};
        block_idx = dim3{b, 1, 1};
        block = &state;
        kernel(args...);
      });
    }
    for (std::thread &thread : pool) thread.join();
  }
}

}  // namespace kvs_emu

#endif  // KVS_TESTS_CUDA_KERNEL_EMULATION_H
