// The simulated machine: contexts, memory, streams and their scheduler.
#include "tests/standin/engine.h"

#include <link.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvs_standin {

namespace {

// A thread's runtime state; stale (from before a reset) reads as fresh.
struct ThreadState {
  uint64_t generation = ~0ull;
  int device = -1;  // -1: no current context
  // The runtime's own record of the device the thread chose with
  // cudaSetDevice (-1: never; reads as its host's device 0). It is not the
  // current context: popping the context (cuCtxSetCurrent(NULL)) leaves
  // it, and the thread's next call that needs a context binds this
  // device's primary context again, as the CUDA 12 runtime does.
  int choice = -1;
  cudaError_t last_error = cudaSuccess;
  std::string hostname;
};

thread_local ThreadState t_state;

ThreadState &thread_state() {
  if (t_state.generation != engine().generation) {
    t_state.generation = engine().generation;
    t_state.device = -1;
    t_state.choice = -1;
    t_state.last_error = cudaSuccess;
    t_state.hostname.clear();
  }
  return t_state;
}

// A test that linked the real libraries would test them, or a mix.
int refuse_real_library(struct dl_phdr_info *info, size_t, void *) {
  const char *name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  if (std::strstr(name, "libcudart") != nullptr || std::strstr(name, "libnccl") != nullptr ||
      std::strstr(name, "libcuda.so") != nullptr) {
    std::fprintf(stderr,
                 "kvs stand-in: %s is loaded into this process; a stand-in test must link "
                 "neither the CUDA runtime nor NCCL (use the _api targets)\n",
                 name);
    std::abort();
  }
  return 0;
}

}  // namespace

Engine &engine() {
  static Engine *e = [] {
    dl_iterate_phdr(refuse_real_library, nullptr);
    auto *made = new Engine;
    made->reset_locked(Config{});  // one device until a test says otherwise
    return made;
  }();
  return *e;
}

cudaError_t fail(cudaError_t code) {
  if (code != cudaSuccess) thread_state().last_error = code;
  return code;
}

cudaError_t take_last_error(bool reset) {
  ThreadState &t = thread_state();
  cudaError_t e = t.last_error;
  if (reset) t.last_error = cudaSuccess;
  return e;
}

std::string &thread_hostname() { return thread_state().hostname; }

void Engine::violation(const std::string &text) {
  violations.push_back(text);
  changed.notify_all();
}

int Engine::current_device() { return thread_state().device; }

void Engine::create_context(int device) {
  if (!context_live[static_cast<size_t>(device)]) {
    context_live[static_cast<size_t>(device)] = true;
    contexts_created[static_cast<size_t>(device)]++;
    kernels_loaded[static_cast<size_t>(device)].clear();  // a new context loaded nothing
  }
}

void Engine::load_kernel(int device, const void *kernel, bool at_launch) {
  if (kernels_loaded[static_cast<size_t>(device)].insert(kernel).second && at_launch) {
    lazy_loads[static_cast<size_t>(device)]++;
    stats.lazy_loads++;
  }
}

void Engine::set_current(int device) {
  if (device >= 0) create_context(device);
  thread_state().device = device;
}

int Engine::physical(int ordinal_on_host) {
  const std::string &host = thread_state().hostname;
  size_t index = 0;
  while (index < hosts.size() && hosts[index] != host) index++;
  if (index == hosts.size()) {
    if (hosts.size() == static_cast<size_t>(kMaxHosts)) {
      violation("more than " + std::to_string(kMaxHosts) + " simulated hosts");
      index = 0;
    } else {
      hosts.push_back(host);
    }
  }
  return static_cast<int>(index) * config.devices + ordinal_on_host;
}

int Engine::current_choice() {
  ThreadState &t = thread_state();
  return t.choice >= 0 ? t.choice : physical(0);
}

void Engine::choose(int device) {
  set_current(device);
  thread_state().choice = device;
}

int Engine::need_context() {
  ThreadState &t = thread_state();
  if (t.device < 0) set_current(current_choice());
  return t.device;
}

cudaError_t Engine::injected(const char *call) {
  int device = thread_state().device >= 0 ? ordinal(thread_state().device) : -1;
  for (size_t i = 0; i < cuda_faults.size(); i++) {
    CudaFault &f = cuda_faults[i];
    if (f.call != call || (f.device >= 0 && f.device != device)) continue;
    if (--f.nth > 0) continue;
    cudaError_t error = f.error;
    cuda_faults.erase(cuda_faults.begin() + static_cast<long>(i));
    return error;
  }
  return cudaSuccess;
}

const Alloc *Engine::find(const void *pointer) const {
  uintptr_t p = reinterpret_cast<uintptr_t>(pointer);
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return nullptr;
  --it;
  const Alloc &a = it->second;
  return p < a.base + (a.bytes > 0 ? a.bytes : 1) ? &a : nullptr;
}

bool Engine::pinned(const void *pointer, size_t bytes) const {
  const Alloc *a = find(pointer);
  return a != nullptr && a->device < 0 && !a->freed &&
         reinterpret_cast<uintptr_t>(pointer) + bytes <= a->base + a->bytes;
}

bool Engine::check_device(const Range &r, int device, const std::string &who) {
  if (r.bytes == 0) return true;
  char text[512];
  const Alloc *a = find(r.pointer);
  uintptr_t p = reinterpret_cast<uintptr_t>(r.pointer);
  if (a == nullptr || a->device < 0) {
    std::snprintf(text, sizeof text, "%s: %s at %p (%zu bytes) is not device memory", who.c_str(),
                  r.what, r.pointer, r.bytes);
  } else if (a->freed) {
    std::snprintf(text, sizeof text,
                  "%s: %s at %p (%zu bytes) lies in device memory that was freed", who.c_str(),
                  r.what, r.pointer, r.bytes);
  } else if (p + r.bytes > a->base + a->bytes) {
    std::snprintf(text, sizeof text,
                  "%s: %s at %p (%zu bytes) runs %zu bytes past its allocation of %zu", who.c_str(),
                  r.what, r.pointer, r.bytes, static_cast<size_t>(p + r.bytes - a->base - a->bytes),
                  a->bytes);
  } else if (device >= 0 && a->device != device) {
    std::snprintf(text, sizeof text, "%s: %s at %p lies on device %d, not device %d", who.c_str(),
                  r.what, r.pointer, ordinal(a->device), ordinal(device));
  } else {
    return true;
  }
  violation(text);
  return false;
}

CUstream_st *Engine::new_stream(int device, bool blocking, bool is_legacy) {
  streams.emplace_back(new CUstream_st);
  CUstream_st *s = streams.back().get();
  s->device = device;
  s->blocking = blocking;
  s->legacy = is_legacy;
  return s;
}

CUstream_st *Engine::resolve(cudaStream_t stream, const char *call) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    // The per-thread default stream is taken as the legacy one: kvshard
    // never uses it.
    return legacy[static_cast<size_t>(need_context())];
  }
  if (stream->destroyed) {
    violation(std::string(call) + " on a destroyed stream");
    return nullptr;
  }
  return stream;
}

void Engine::enqueue(CUstream_st *s, Op op) {
  // A capturing stream records the operation in its graph instead: it runs
  // when the graph is launched (cudaGraphLaunch), with no dependency
  // beyond the launch's stream order.
  if (s->capture != nullptr) {
    if (op.comm != nullptr) {
      violation("an NCCL collective on a capturing stream: the stand-in does not capture NCCL");
      invalidate_capture(s, "an NCCL collective");
      return;
    }
    op.after.clear();
    s->capture->ops.push_back(std::move(op));
    return;
  }
  // The legacy stream waits for the blocking streams of its device, and
  // they for it.
  if (s->legacy) {
    for (auto &other : streams) {
      if (other->device == s->device && other->blocking && !other->legacy && other->tail) {
        op.after.push_back(other->tail);
      }
    }
  } else if (s->blocking) {
    CUstream_st *l = legacy[static_cast<size_t>(s->device)];
    if (l->tail) op.after.push_back(l->tail);
  }
  s->tail = op.done;
  s->queue.push_back(std::move(op));
  changed.notify_all();
}

bool Engine::runnable(const CUstream_st *s) const {
  if (s->queue.empty()) return false;
  const Op &op = s->queue.front();
  if (op.arrived) return false;  // waiting for its peers
  if (op.comm != nullptr && op.comm->stalled && !op.cancelled && !op.comm->clique->broken) {
    return false;
  }
  for (const DonePtr &d : op.after) {
    if (!d->done) return false;
  }
  return true;
}

bool Engine::step(const CUstream_st *focus) {
  std::vector<CUstream_st *> ready;
  if (config.lazy && focus != nullptr) {
    // The streams the focus's head needs, transitively: a head that waits
    // for an operation queued on another stream needs that stream's work.
    std::vector<const CUstream_st *> todo = {focus}, seen;
    while (!todo.empty()) {
      const CUstream_st *s = todo.back();
      todo.pop_back();
      if (std::find(seen.begin(), seen.end(), s) != seen.end() || s->queue.empty()) continue;
      seen.push_back(s);
      if (runnable(s)) {
        ready.push_back(const_cast<CUstream_st *>(s));
        continue;
      }
      for (const DonePtr &d : s->queue.front().after) {
        if (d->done) continue;
        for (auto &t : streams) {
          for (const Op &op : t->queue) {
            if (op.done == d) todo.push_back(t.get());
          }
        }
      }
    }
  } else {
    for (auto &s : streams) {
      if (runnable(s.get())) ready.push_back(s.get());
    }
  }
  if (ready.empty()) return false;
  if (ready.size() > 1) stats.reorders++;
  CUstream_st *s = ready[random(ready.size())];
  Op &op = s->queue.front();
  stats.ops++;
  if (op.comm != nullptr) {
    arrive(s);
  } else {
    if (op.run) op.run();
    op.done->done = true;
    s->queue.pop_front();
  }
  changed.notify_all();
  return true;
}

void Engine::background() {
  // A GPU keeps working while the host makes calls: sometimes run a few
  // operations, sometimes none, so both "already ran" and "not yet" occur.
  if (!chance(config.progress_percent)) return;
  for (uint64_t n = 1 + random(3); n > 0 && step(); n--) {
  }
}

bool Engine::idle(int device) const {
  for (const auto &s : streams) {
    if ((device < 0 || s->device == device) && !s->queue.empty()) return false;
  }
  return true;
}

std::string Engine::describe() const {
  std::string out;
  char line[400];
  for (const auto &s : streams) {
    if (s->queue.empty()) continue;
    const Op &op = s->queue.front();
    size_t pending = 0;
    for (const DonePtr &d : op.after) pending += !d->done;
    std::snprintf(line, sizeof line,
                  "stream %p (device %d%s%s): %zu queued; head %s%s%s, %zu of %zu waits open\n",
                  static_cast<const void *>(s.get()), s->device, s->legacy ? ", legacy" : "",
                  s->blocking ? ", blocking" : "", s->queue.size(), op.what.c_str(),
                  op.comm != nullptr ? (" of rank " + std::to_string(op.comm->rank) + " seq " +
                                        std::to_string(op.seq))
                                           .c_str()
                                     : "",
                  op.arrived ? " (arrived, waiting for peers)" : "", pending, op.after.size());
    out += line;
  }
  for (const auto &c : cliques) {
    for (const auto &entry : c->p2p_sends) {
      std::snprintf(line, sizeof line,
                    "clique of %d: send %llu from rank %d to rank %d waits for its receive\n",
                    c->nranks, static_cast<unsigned long long>(std::get<2>(entry.first)),
                    std::get<0>(entry.first), std::get<1>(entry.first));
      out += line;
    }
    for (const auto &entry : c->p2p_receives) {
      std::snprintf(line, sizeof line,
                    "clique of %d: receive %llu at rank %d from rank %d waits for its send\n",
                    c->nranks, static_cast<unsigned long long>(std::get<2>(entry.first)),
                    std::get<1>(entry.first), std::get<0>(entry.first));
      out += line;
    }
    for (const auto &entry : c->arrived) {
      std::snprintf(line, sizeof line, "clique of %d: collective %llu has %zu of %d ranks%s\n",
                    c->nranks, static_cast<unsigned long long>(entry.first), entry.second.size(),
                    c->nranks, c->broken ? " (broken)" : "");
      out += line;
    }
  }
  return out.empty() ? "every stream is empty\n" : out;
}

void Engine::trace_stuck(CUstream_st *s) {
  static const bool trace = std::getenv("KVS_STANDIN_TRACE") != nullptr;
  if (!trace) return;
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  if (s->queue.empty()) {
    s->stuck_since_ms = -1;
  } else if (s->stuck_since_ms < 0) {
    s->stuck_since_ms = now;
  } else if (now - s->stuck_since_ms > 5000) {
    s->stuck_since_ms = now + 3600 * 1000;  // once
    std::fprintf(stderr, "kvs stand-in: a stream has waited 5 s:\n%s", describe().c_str());
  }
}

bool Engine::wait_until(std::unique_lock<std::mutex> &lock, const std::function<bool()> &pred,
                        const std::string &what, const CUstream_st *focus) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t gen = generation;
  while (!pred()) {
    if (step(focus)) continue;
    // Nothing runnable here: another thread (a peer rank) must act.
    if (changed.wait_until(lock, deadline) == std::cv_status::timeout || gen != generation) {
      if (!pred()) violation("deadlock: waited 60 s for " + what + " with nothing able to run");
      return pred();
    }
  }
  return true;
}

// ---- the test-facing controls ----

void Engine::reset_locked(const Config &c) {
  for (auto &entry : allocs) std::free(reinterpret_cast<void *>(entry.second.base));
  allocs.clear();
  streams.clear();
  legacy.clear();
  events.clear();
  graphs.clear();
  graph_execs.clear();
  violations.clear();
  cuda_faults.clear();
  cliques.clear();
  comms.clear();
  stats = Stats{};
  config = c;
  // KVS_STANDIN_LAZY=1: every reset of the run takes the lazy schedule with
  // no background progress (a whole suite's hunt for a missing ordering).
  if (std::getenv("KVS_STANDIN_LAZY") != nullptr) {
    config.lazy = true;
    config.progress_percent = 0;
  }
  generation++;
  rng.seed(c.seed);
  hosts.assign(1, std::string());  // the real host name: host 0
  size_t n = static_cast<size_t>(c.devices > 0 ? c.devices : 0) * kMaxHosts;
  context_live.assign(n, false);
  contexts_created.assign(n, 0);
  primary_retains.assign(n, 0);
  kernels_loaded.assign(n, std::set<const void *>());
  lazy_loads.assign(n, 0);
  // A primary context's handle is the driver's for the life of the
  // process: a reset makes every context inactive (as cudaDeviceReset
  // does) but keeps the handles, so a library's cached handle stays a
  // valid pointer across the tests of one binary.
  while (contexts.size() < n)
    contexts.emplace_back(new CUctx_st{static_cast<int>(contexts.size())});
  for (size_t d = 0; d < n; d++) legacy.push_back(new_stream(static_cast<int>(d), true, true));
  changed.notify_all();
}

void reset(const Config &config) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.reset_locked(config);
}

std::vector<std::string> violations() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.violations;
}

int contexts_created(int device) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (device < 0 || static_cast<size_t>(device) >= e.contexts_created.size()) return 0;
  return e.contexts_created[static_cast<size_t>(device)];
}

uint64_t lazy_loads(int device) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (device < 0 || static_cast<size_t>(device) >= e.lazy_loads.size()) return 0;
  return e.lazy_loads[static_cast<size_t>(device)];
}

int thread_device() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  int d = e.current_device();
  return d < 0 ? -1 : e.ordinal(d);
}

int thread_runtime_device() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (e.config.devices <= 0) return -1;
  int d = e.current_device();
  return e.ordinal(d >= 0 ? d : e.current_choice());
}

int primary_retains(int device) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (device < 0 || static_cast<size_t>(device) >= e.primary_retains.size()) return 0;
  return e.primary_retains[static_cast<size_t>(device)];
}

int device_of(const void *pointer) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  const Alloc *a = e.find(pointer);
  return a != nullptr && !a->freed && a->device >= 0 ? e.ordinal(a->device) : -1;
}

bool is_pinned(const void *pointer, size_t bytes) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.pinned(pointer, bytes);
}

void inject_cuda_error(const std::string &call, int device, int nth, cudaError_t error) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.cuda_faults.push_back(CudaFault{call, device, nth, error});
}

void set_thread_hostname(const std::string &name) { thread_hostname() = name; }

Stats stats() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.stats;
}

std::string describe() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.describe();
}

bool drain() {
  Engine &e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  while (e.step()) {
  }
  if (e.idle(-1)) return true;
  e.violation("drain: queued work can never run (a collective a peer never joined?)");
  return false;
}

}  // namespace kvs_standin

namespace kvs_standin {

void Engine::invalidate_capture(CUstream_st *s, const std::string &why) {
  if (s->capture == nullptr || s->capture_invalidated) return;
  s->capture_invalidated = true;
  s->capture_why = why;
}

cudaError_t Engine::host_sync(CUstream_st *s, const char *call) {
  if (cudaError_t c = unsafe_call(call)) return c;
  if (s->capture != nullptr) {
    invalidate_capture(s, std::string(call) + " on the capturing stream");
    return cudaErrorStreamCaptureUnsupported;
  }
  s->host_syncs++;
  return cudaSuccess;
}

cudaError_t Engine::host_sync_device(int device, const char *call) {
  if (cudaError_t c = unsafe_call(call)) return c;
  cudaError_t rc = cudaSuccess;
  for (auto &s : streams) {
    if (s->device != device || s->destroyed) continue;
    if (s->capture != nullptr) {
      invalidate_capture(s.get(), std::string(call) + " while it captured");
      rc = cudaErrorStreamCaptureUnsupported;
    } else {
      s->host_syncs++;
    }
  }
  return rc;
}

}  // namespace kvs_standin
