// A CPU stand-in for the CUDA execution model, so the kernel source in
// backends/cuda/device_kernels.cuh runs through the host compiler on machines
// without a GPU. Include it before that header.
//
// Each block's threads are fibers on the calling OS thread (one stack
// each, switched cooperatively), so __syncthreads is a real barrier of the
// block, __syncwarp and __any_sync real barriers and votes of a warp's
// lanes, and a thread runs until it waits at one. The order in which
// threads run between barriers, and the order of the blocks, follow a
// seed (set_schedule_seed; 0 runs both in index order), as a GPU
// guarantees neither. __shared__ variables are one copy per block
// (function statics: blocks never overlap), and launches from several OS
// threads take turns. A barrier that not every live thread of the block
// (or warp) reaches is a deadlock, reported and fatal.
//
// It checks the kernels' logic -- indexing, lane mapping, grid-stride
// loops, superseded journal entries across blocks, fault records, barrier
// placement -- not timing, the memory model or the compiler's code: the
// device test does that. It also counts the journal entries the kernels
// load (KVS_KERNEL_COUNT_ENTRY_LOADS), so a test can bound their work.
#ifndef KVS_TESTS_BACKENDS_CUDA_KERNEL_EMULATION_H
#define KVS_TESTS_BACKENDS_CUDA_KERNEL_EMULATION_H

#if defined(__CUDACC__)
#error "kernel_emulation.h stands in for CUDA; nvcc has the real thing"
#endif

#include <cstdint>

namespace kvs_emu {

// CUDA's dim3, under a name that does not clash with the CUDA headers'
// (the stand-in includes both).
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// The running thread's and block's indices, and the launch's shape: set
// by the scheduler before it switches to a thread.
extern Dim3 thread_idx;
extern Dim3 block_idx;
extern Dim3 block_dim;
extern Dim3 grid_dim;

// Journal entries loaded by kernels since the last reset (every thread's
// loads counted).
extern uint64_t entry_loads;

// 0: threads and blocks in index order; otherwise a seeded shuffle per
// launch (the next launch continues the sequence).
void set_schedule_seed(uint64_t seed);

// Runs body(arg) as `threads` threads in each of `grid` blocks.
void run_grid(unsigned grid, unsigned threads, void (*body)(void *), void *arg);

void syncthreads();
void syncwarp();
int any_sync(int predicate);

// kernel<<<grid, threads>>>(args...).
template <typename... Params, typename... Args>
void launch(unsigned grid, unsigned threads, void (*kernel)(Params...), Args... args) {
  auto call = [&] { kernel(args...); };
  run_grid(
      grid, threads, [](void *p) { (*static_cast<decltype(call) *>(p))(); }, &call);
}

}  // namespace kvs_emu

// Replaces the CUDA headers' host definitions where they were included
// first (they must not be included after this header).
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
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
#define KVS_KERNEL_COUNT_ENTRY_LOADS(n) (kvs_emu::entry_loads += (n))

inline void __syncthreads() { kvs_emu::syncthreads(); }

// Every live lane of the warp must call them, as on the device (full mask).
inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) { kvs_emu::syncwarp(); }
inline int __any_sync(unsigned /*mask*/, int predicate) { return kvs_emu::any_sync(predicate); }

// Threads of one launch never run at once, so plain read-modify-writes are
// atomic; the builtins keep them so should that ever change.
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

inline long long atomicMax(long long *address, long long value) {
  long long old = __atomic_load_n(address, __ATOMIC_SEQ_CST);
  while (value > old && !__atomic_compare_exchange_n(address, &old, value, false, __ATOMIC_SEQ_CST,
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

#endif  // KVS_TESTS_BACKENDS_CUDA_KERNEL_EMULATION_H
