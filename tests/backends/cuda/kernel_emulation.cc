// The fiber scheduler behind kernel_emulation.h: a block's threads are
// stacks switched cooperatively on the launching OS thread, so a barrier
// costs a few stack switches instead of an OS thread's wake-up (a 256-
// thread block used to cost tens of milliseconds in OS threads; the
// stand-in runs thousands of launches per test).
#include "tests/backends/cuda/kernel_emulation.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define KVS_EMU_ASAN 1
#else
#define KVS_EMU_ASAN 0
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace kvs_emu {

Dim3 thread_idx;
Dim3 block_idx;
Dim3 block_dim;
Dim3 grid_dim;
uint64_t entry_loads = 0;

namespace {

constexpr unsigned kWarp = 32;
// Kernel frames are small; sanitizers make them several times larger.
constexpr size_t kStackBytes = KVS_EMU_ASAN ? (256u << 10) : (64u << 10);
constexpr size_t kGuardBytes = 4096;

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores its stack
// pointer in *save, loads `load` and restores the registers saved there.
extern "C" void kvs_emu_switch_stack(void **save, void *load);
asm(R"(
  .pushsection .text
  .globl kvs_emu_switch_stack
  .hidden kvs_emu_switch_stack
  .type kvs_emu_switch_stack, @function
kvs_emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kvs_emu_switch_stack, .-kvs_emu_switch_stack
  .popsection
)");
#endif

enum class State { kReady, kWaiting, kDone };

struct Fiber {
  char *stack = nullptr;  // kStackBytes usable, a guard page below
#if defined(__x86_64__)
  void *sp = nullptr;
#else
  ucontext_t context;
#endif
  Dim3 thread_idx;
  State state = State::kReady;
  void *fake_stack = nullptr;  // ASan's, while switched out
};

// A barrier over the live threads of a group (the block, or a warp).
struct Barrier {
  unsigned arrived = 0;
  unsigned live = 0;
  int vote = 0;
  int result = 0;
  std::vector<unsigned> waiting;
};

struct Launch {
  std::mutex mutex;  // one launch at a time: __shared__ is static
  std::mt19937_64 rng{0};
  bool shuffle = false;
  std::vector<Fiber> fibers;
  std::vector<unsigned> ready;
  Barrier block;
  std::vector<Barrier> warps;
  unsigned current = 0;
  void (*body)(void *) = nullptr;
  void *arg = nullptr;
#if defined(__x86_64__)
  void *scheduler_sp = nullptr;
#else
  ucontext_t scheduler;
#endif
  const void *scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
  void *scheduler_fake_stack = nullptr;
};

Launch &launch_state() {
  static Launch *state = new Launch;  // lives for the process: never torn down mid-launch
  return *state;
}

[[noreturn]] void die(const char *what) {
  std::fprintf(stderr, "kernel emulation: %s\n", what);
  std::abort();
}

char *new_stack() {
  void *p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("cannot map a fiber stack");
  mprotect(p, kGuardBytes, PROT_NONE);  // an overflow faults instead of corrupting
  return static_cast<char *>(p) + kGuardBytes;
}

// Switches from the running fiber back to the scheduler.
void to_scheduler(Launch &l, bool finished) {
  Fiber &f = l.fibers[l.current];
#if KVS_EMU_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.fake_stack, l.scheduler_bottom,
                                 l.scheduler_size);
#else
  (void)finished;
#endif
#if defined(__x86_64__)
  kvs_emu_switch_stack(&f.sp, l.scheduler_sp);
#else
  swapcontext(&f.context, &l.scheduler);
#endif
#if KVS_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &l.scheduler_bottom, &l.scheduler_size);
#endif
}

extern "C" [[noreturn]] void kvs_emu_fiber_main() {
  Launch &l = launch_state();
#if KVS_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &l.scheduler_bottom, &l.scheduler_size);
#endif
  l.body(l.arg);
  Fiber &f = l.fibers[l.current];
  f.state = State::kDone;
  // A thread that exits no longer holds up its block's or warp's barrier.
  auto leave = [&](Barrier &b) {
    b.live--;
    if (b.live > 0 && b.arrived == b.live) {
      for (unsigned w : b.waiting) {
        l.fibers[w].state = State::kReady;
        l.ready.push_back(w);
      }
      b.waiting.clear();
      b.arrived = 0;
      b.result = b.vote;
      b.vote = 0;
    }
  };
  leave(l.block);
  leave(l.warps[f.thread_idx.x / kWarp]);
  to_scheduler(l, true);
  die("a finished fiber was resumed");
}

void start_fiber(Launch &l, unsigned index) {
  Fiber &f = l.fibers[index];
  if (f.stack == nullptr) f.stack = new_stack();
#if KVS_EMU_ASAN
  __asan_unpoison_memory_region(f.stack, kStackBytes);
#endif
#if defined(__x86_64__)
  // Six saved registers (zero), then kvs_emu_fiber_main as the return
  // address, entered with the stack aligned as after a call.
  void **top = reinterpret_cast<void **>(f.stack + kStackBytes);
  void **sp = top - 8;
  for (int i = 0; i < 8; i++) sp[i] = nullptr;
  sp[6] = reinterpret_cast<void *>(&kvs_emu_fiber_main);
  f.sp = sp;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, reinterpret_cast<void (*)()>(&kvs_emu_fiber_main), 0);
#endif
  f.state = State::kReady;
  f.fake_stack = nullptr;
}

void resume(Launch &l, unsigned index) {
  Fiber &f = l.fibers[index];
  l.current = index;
  thread_idx = f.thread_idx;
#if KVS_EMU_ASAN
  __sanitizer_start_switch_fiber(&l.scheduler_fake_stack, f.stack, kStackBytes);
#endif
#if defined(__x86_64__)
  kvs_emu_switch_stack(&l.scheduler_sp, f.sp);
#else
  swapcontext(&l.scheduler, &f.context);
#endif
#if KVS_EMU_ASAN
  __sanitizer_finish_switch_fiber(l.scheduler_fake_stack, nullptr, nullptr);
#endif
}

void run_block(Launch &l, unsigned threads) {
  l.ready.clear();
  l.block = Barrier{};
  l.block.live = threads;
  l.warps.assign((threads + kWarp - 1) / kWarp, Barrier{});
  for (unsigned w = 0; w < l.warps.size(); w++) {
    l.warps[w].live = std::min(kWarp, threads - w * kWarp);
  }
  for (unsigned t = 0; t < threads; t++) {
    l.fibers[t].thread_idx = Dim3{t, 1, 1};
    start_fiber(l, t);
    l.ready.push_back(t);
  }
  size_t next = 0;  // in-order mode: a FIFO over `ready`
  while (next < l.ready.size()) {
    if (l.shuffle) {
      size_t pick = next + l.rng() % (l.ready.size() - next);
      std::swap(l.ready[next], l.ready[pick]);
    }
    unsigned index = l.ready[next++];
    resume(l, index);
    if (next > 4096 && next * 2 > l.ready.size()) {
      l.ready.erase(l.ready.begin(), l.ready.begin() + static_cast<long>(next));
      next = 0;
    }
  }
  for (const Fiber &f : l.fibers) {
    if (&f - l.fibers.data() >= static_cast<long>(threads)) break;
    if (f.state != State::kDone) {
      die("deadlock: a barrier (__syncthreads, __syncwarp or __any_sync) was not reached by "
          "every live thread of its block or warp");
    }
  }
}

// Waits at barrier b with this thread's vote; returns the group's vote.
int arrive(Barrier &b, int predicate) {
  Launch &l = launch_state();
  if (predicate) b.vote = 1;
  if (++b.arrived == b.live) {
    b.result = b.vote;
    b.vote = 0;
    b.arrived = 0;
    for (unsigned w : b.waiting) {
      l.fibers[w].state = State::kReady;
      l.ready.push_back(w);
    }
    b.waiting.clear();
    // Let the others run first now and then: a barrier orders them, not
    // who leaves it first.
    if (l.shuffle) {
      l.fibers[l.current].state = State::kReady;
      l.ready.push_back(l.current);
      to_scheduler(l, false);
    }
    return b.result;
  }
  l.fibers[l.current].state = State::kWaiting;
  b.waiting.push_back(l.current);
  to_scheduler(l, false);
  return b.result;
}

}  // namespace

void set_schedule_seed(uint64_t seed) {
  Launch &l = launch_state();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.shuffle = seed != 0;
  l.rng.seed(seed);
}

void run_grid(unsigned grid, unsigned threads, void (*body)(void *), void *arg) {
  Launch &l = launch_state();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (threads == 0 || threads > 1024) die("a block of 0 or more than 1024 threads");
  if (l.fibers.size() < threads) l.fibers.resize(threads);
  l.body = body;
  l.arg = arg;
  grid_dim = Dim3{grid, 1, 1};
  block_dim = Dim3{threads, 1, 1};
  std::vector<unsigned> order(grid);
  for (unsigned b = 0; b < grid; b++) order[b] = b;
  if (l.shuffle) std::shuffle(order.begin(), order.end(), l.rng);
  for (unsigned b : order) {
    block_idx = Dim3{b, 1, 1};
    run_block(l, threads);
  }
}

void syncthreads() { arrive(launch_state().block, 0); }

void syncwarp() {
  Launch &l = launch_state();
  arrive(l.warps[thread_idx.x / kWarp], 0);
}

int any_sync(int predicate) {
  Launch &l = launch_state();
  return arrive(l.warps[thread_idx.x / kWarp], predicate);
}

}  // namespace kvs_emu
