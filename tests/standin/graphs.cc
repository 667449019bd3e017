// CUDA graphs on the simulated machine: stream capture records a stream's
// operations (kernels, pinned and device copies, memsets) instead of
// queueing them; a launch queues copies of them, in order, on a stream.
// What CUDA refuses during a capture the stand-in refuses too, and it
// invalidates the capture (engine.cc: host_sync, enqueue; cuda_runtime.cc:
// copies and events), so a device step that is not capturable fails its
// test here before it fails on a GPU.
#include <string>

#include "tests/standin/engine.h"

using kvs_standin::Engine;
using kvs_standin::engine;
using kvs_standin::fail;
using kvs_standin::Op;

namespace {
using Lock = std::unique_lock<std::mutex>;
}  // namespace

namespace kvs_standin {

uint64_t host_syncs(cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "host_syncs");
  return s != nullptr ? s->host_syncs : 0;
}

cudaStream_t stream_of_event(cudaEvent_t event) {
  Engine &e = engine();
  Lock lock(e.mutex);
  return event != nullptr ? event->recorded_on : nullptr;
}

// The calling thread's capture mode (CUDA's default: global).
thread_local cudaStreamCaptureMode g_thread_mode = cudaStreamCaptureModeGlobal;

cudaError_t Engine::unsafe_call(const char *call) {
  if (g_thread_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  cudaError_t rc = cudaSuccess;
  for (auto &s : streams) {
    if (s->destroyed || s->capture == nullptr || s->capture_invalidated) continue;
    if (!s->capture_global && s->capture_thread != std::this_thread::get_id()) continue;
    invalidate_capture(
        s.get(), std::string(call) + " on a thread in " +
                     (g_thread_mode == cudaStreamCaptureModeGlobal ? "global" : "thread-local") +
                     " capture mode during a global-mode capture");
    rc = cudaErrorStreamCaptureUnsupported;
  }
  return rc;
}

}  // namespace kvs_standin

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  if (mode == nullptr) return kvs_standin::fail(cudaErrorInvalidValue);
  cudaStreamCaptureMode previous = kvs_standin::g_thread_mode;
  kvs_standin::g_thread_mode = *mode;
  *mode = previous;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaStreamBeginCapture");
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (s->legacy) return fail(cudaErrorStreamCaptureUnsupported);  // as CUDA: not the legacy stream
  if (s->capture != nullptr) return fail(cudaErrorIllegalState);
  e.graphs.emplace_back(new CUgraph_st);
  s->capture = e.graphs.back().get();
  s->capture_invalidated = false;
  s->capture_global = mode == cudaStreamCaptureModeGlobal;
  s->capture_thread = std::this_thread::get_id();
  s->capture_why.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaStreamEndCapture");
  if (s == nullptr || graph == nullptr) return fail(cudaErrorInvalidValue);
  if (s->capture == nullptr) return fail(cudaErrorIllegalState);
  CUgraph_st *g = s->capture;
  bool invalid = s->capture_invalidated;
  s->capture = nullptr;
  s->capture_invalidated = false;
  if (invalid) {
    g->destroyed = true;
    *graph = nullptr;
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  e.stats.captures++;
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaStreamIsCapturing");
  if (s == nullptr || status == nullptr) return fail(cudaErrorInvalidValue);
  *status = s->capture == nullptr    ? cudaStreamCaptureStatusNone
            : s->capture_invalidated ? cudaStreamCaptureStatusInvalidated
                                     : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  (void)flags;
  Engine &e = engine();
  Lock lock(e.mutex);
  if (exec == nullptr || graph == nullptr || graph->destroyed) return fail(cudaErrorInvalidValue);
  e.graph_execs.emplace_back(new CUgraphExec_st);
  CUgraphExec_st *x = e.graph_execs.back().get();
  x->ops = graph->ops;
  x->device = e.current_device();
  *exec = x;
  return cudaSuccess;
}

// Each operation again, in order, after the stream's earlier work; a
// launch on a capturing stream would nest graphs, which the stand-in does
// not model.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  CUstream_st *s = e.resolve(stream, "cudaGraphLaunch");
  if (s == nullptr || exec == nullptr || exec->destroyed) return fail(cudaErrorInvalidValue);
  if (s->capture != nullptr) {
    e.violation("cudaGraphLaunch on a capturing stream: the stand-in does not nest graphs");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (cudaError_t f = e.injected("cudaGraphLaunch")) return fail(f);
  e.background();
  for (const Op &op : exec->ops) {
    Op again = op;
    again.done = std::make_shared<kvs_standin::Done>();
    e.enqueue(s, std::move(again));
  }
  e.stats.graph_launches++;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (exec == nullptr || exec->destroyed) return fail(cudaErrorInvalidValue);
  exec->destroyed = true;
  exec->ops.clear();
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (graph == nullptr || graph->destroyed) return fail(cudaErrorInvalidValue);
  graph->destroyed = true;
  graph->ops.clear();
  return cudaSuccess;
}
