// A CPU stand-in for the part of the CUDA runtime and NCCL that kvshard
// calls, linked into test binaries in place of libcudart and libnccl (the
// product keeps the real ones). It defines those functions against the real
// headers' types and runs a simulated machine of `devices` GPUs:
//
// - Device memory is host memory the stand-in tracks. Use of freed memory,
//   of memory that is not device memory, or of another device's memory in a
//   kernel or a collective is a violation (below), and the work is skipped.
// - Every stream is a queue run lazily: nothing runs at enqueue. Work runs
//   when a call needs it (a synchronisation, a blocking copy, a query) and
//   at random while the host makes other calls, and the stand-in picks
//   which stream goes next from a seeded generator, so work on different
//   streams interleaves in an adversarial order unless events, stream waits
//   or synchronisations order it. The legacy default stream (NULL) orders
//   itself with the blocking streams of its device, as CUDA's does.
// - Copies follow CUDA's documented host synchronisation: a cudaMemcpy
//   from pageable memory to the device returns once the source is staged
//   and lands later on the legacy stream; cudaMemcpyAsync from pinned
//   memory reads it when the copy runs; to pageable memory it returns once
//   done. cudaMemset and device-to-device copies are asynchronous.
// - The kernels' launchers (backends/cuda/device_kernels.h) run the real kernel
//   source through the CPU emulation (tests/backends/cuda/kernel_emulation.h).
// - Each thread has a current device, none until it chooses one; a call
//   that needs a context without one creates device 0's, as the runtime
//   does, and cudaSetDevice creates the device's primary context (CUDA 12
//   and later). contexts_created counts them per device.
// - The runtime's choice is not the current context. cudaSetDevice records
//   the device for the thread; the driver's cuCtxSetCurrent changes only
//   the current context, so after cudaSetDevice(2) and cuCtxSetCurrent(NULL)
//   the thread has no context, cudaGetDevice still reads 2 and its next
//   call that needs a context binds device 2's, not 0's. The driver's
//   primary-context calls (cuDeviceGet, cuDevicePrimaryCtxRetain,
//   cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxGetState, through
//   cudaGetDriverEntryPointByVersion) create and count a primary context
//   and change neither the current context nor the choice.
// - NCCL communicators join ranks that are threads: ncclCommInitRankConfig
//   (nonblocking) answers ncclInProgress for a seeded number of polls,
//   collectives are stream operations that complete when every rank's has
//   reached the head of its stream, two ranks of one host on one device
//   fail initialisation (ncclInvalidUsage, as NCCL's duplicate GPU check),
//   an abort makes the peers' pending and later collectives fail with
//   ncclRemoteError, and async errors can be injected. ncclCommSplit joins
//   the parent's ranks into a new communicator (one color, the parent's
//   rank as the key). ncclSend and ncclRecv match per pair in call order
//   (the k-th send from A to B with B's k-th receive from A, same count
//   and type); a group (ncclGroupStart/End) runs its calls together, a
//   call outside one blocks its stream until its counterpart arrives, and
//   a send or receive to the rank itself outside a group (a hang in real
//   NCCL) is a violation.
// - Stream capture (cudaStreamBeginCapture ... cudaStreamEndCapture) records
//   a stream's operations into a graph instead of queueing them, and
//   cudaGraphLaunch queues them again, in order, on any stream of the
//   device. As in CUDA, a host synchronisation of the capturing stream (a
//   stream or device synchronise, a query), a copy to or from pageable
//   memory, an event record or a wait on an event from outside the capture
//   is refused (cudaErrorStreamCaptureUnsupported) and invalidates the
//   capture (cudaStreamEndCapture answers cudaErrorStreamCaptureInvalidated).
//   host_syncs counts, per stream, the host waits a graph may not hold.
// - Kernels are loaded lazily, per context: the first launch of a kernel
//   not yet loaded (cudaFuncGetAttributes loads one) counts a lazy load.
//
// Where the real hardware differs in a way that matters, the comment at
// the spot says so. One holds throughout: an operation (a copy, a kernel,
// a rank's part of a collective) runs whole, so streams interleave between
// operations, not inside them; a GPU also overlaps two streams' kernels
// mid-way. A race the stand-in reports is real; one inside a kernel's
// duration it can miss. The stand-in refuses to run in a process that also
// loaded libcudart or libnccl.
#ifndef KVS_TESTS_STANDIN_STANDIN_H
#define KVS_TESTS_STANDIN_STANDIN_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvs_standin {

struct Config {
  int devices = 1;                        // 0: cudaGetDeviceCount answers cudaErrorNoDevice
  uint64_t seed = 1;                      // the schedule
  uint64_t device_bytes = 80ull << 30;    // each device's memory
  uint64_t context_bytes = 512ull << 20;  // what a primary context takes of it
  int multiprocessors = 2;
  // cudaDevAttrMaxPitch, what a 2D copy or memset's pitch may be: a
  // real device's 2^31 - 1, or lower so a carve of a few MiB crosses it.
  uint64_t max_pitch = 2147483647;
  int max_init_polls = 6;          // ncclInProgress answers after init, finalize: 1..this
  unsigned progress_percent = 30;  // chance that a call runs some queued work first
  // A wait on a stream's work (a stream or event synchronisation or query,
  // a copy the host waits for) runs only that work and what it waits for,
  // stream to stream; work nothing waits on stays queued (with
  // progress_percent 0, until a device-wide wait). The schedule where an
  // ordering a library forgot shows at once. KVS_STANDIN_LAZY=1 in the
  // environment sets it (and progress_percent 0) at every reset.
  bool lazy = false;
};

// Forgets everything (memory, streams, events, contexts, communicators,
// violations, injections) and starts a machine with this config. No other
// thread may be inside the stand-in. Before the first reset the machine
// is Config{} (one device), so a test written for a GPU runs unchanged.
void reset(const Config &config);

// What the stand-in refused or caught since reset, one sentence each.
std::vector<std::string> violations();

// How many times the device's primary context was created since reset.
int contexts_created(int device);
// The calling thread's current device, or -1 when it has none.
int thread_device();
// The device the runtime runs the thread's next call on: its current
// context's, else the one it last chose with cudaSetDevice, else 0 (what
// cudaGetDevice answers).
int thread_runtime_device();
// cuDevicePrimaryCtxRetain calls on `device` (physical: host i's ordinal d is
// i * devices + d, as cuDeviceGet answers) not yet released.
int primary_retains(int device);
// The device a live device allocation belongs to; -1 for anything else.
int device_of(const void *pointer);
// Whether [pointer, pointer + bytes) lies in a live pinned host allocation.
bool is_pinned(const void *pointer, size_t bytes);

// The `nth` later call (1 = the next) of the runtime function named `call`
// ("cudaMemcpyAsync", ...) with device `device` current (-1: any) fails
// with `error` before doing anything.
void inject_cuda_error(const std::string &call, int device, int nth, cudaError_t error);
// From now on the rank's ncclCommGetAsyncError answers `error` and its
// collectives no longer complete (a failed network link, say).
void inject_nccl_async_error(ncclComm_t comm, ncclResult_t error);

// The communicator of `rank` created last (by any caller; nullptr if none),
// so a test can inject into one the backend created.
ncclComm_t latest_comm(int rank);

enum class CommState { kInitializing, kReady, kFinalizing, kFinalized, kAborted, kDestroyed };
CommState comm_state(ncclComm_t comm);
// The maxCTAs its creator's config gave (NCCL_CONFIG_UNDEF_INT: none): the
// channels, and so the lazily connected buffers, NCCL may use for it. The
// stand-in records it; it runs every collective the same way.
int comm_max_ctas(ncclComm_t comm);

// The host name gethostname answers on this thread (empty: the real one),
// so ranks that are threads can play ranks on different nodes.
void set_thread_hostname(const std::string &name);

struct Stats {
  uint64_t ops = 0;             // stream operations run
  uint64_t kernels = 0;         // kernel launches run
  uint64_t collectives = 0;     // collectives completed (all ranks)
  uint64_t reorders = 0;        // picks among two or more streams that could run
  uint64_t graph_launches = 0;  // cudaGraphLaunch calls accepted
  uint64_t captures = 0;        // captures ended into a valid graph
  uint64_t lazy_loads = 0;      // kernels loaded by their first launch (all devices)
  uint64_t device_syncs = 0;    // cudaDeviceSynchronize calls
  uint64_t p2p = 0;             // ncclSends that met their ncclRecv and moved their bytes
};
Stats stats();

// Kernels a launch on `device` loaded because nothing loaded them before
// in its context: CUDA's lazy loading (the default since 12.2) loads a
// kernel's module at its first launch, which can wait for the whole
// context. cudaFuncGetAttributes on a kernel loads it; a context created
// again starts with none loaded. Physical device, as contexts_created.
uint64_t lazy_loads(int device);

// Host calls that waited on, or polled, `stream`'s work: its
// synchronisations and queries, syncs and queries of events last recorded
// on it, device-wide synchronisations of its device, and copies to or from
// pageable memory on it (which wait for the host). What a step's device
// work may not do to be captured in a graph.
uint64_t host_syncs(cudaStream_t stream);
// The stream an event was last recorded on (nullptr: never recorded), so a
// test can find a library's stream from an event it hands out.
cudaStream_t stream_of_event(cudaEvent_t event);

// Every stream with queued work: its device, its head operation and what
// that waits for; and each communicator's collectives still gathering.
// With KVS_STANDIN_TRACE=1 in the environment the stand-in prints it when a
// stream has been polled or waited on for 5 seconds.
std::string describe();

// Runs every queued operation that can run; false (and a violation) when
// some never can (a collective a peer never joined).
bool drain();

}  // namespace kvs_standin

#endif  // KVS_TESTS_STANDIN_STANDIN_H
