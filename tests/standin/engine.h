// The stand-in's simulated machine (private to tests/standin): memory,
// streams and their scheduler, events, contexts, communicators. One mutex
// guards all of it; every API function takes it for its whole call (a
// blocking wait releases it while it sleeps).
#ifndef KVS_TESTS_STANDIN_ENGINE_H
#define KVS_TESTS_STANDIN_ENGINE_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/standin/standin.h"

namespace kvs_standin {

struct Clique;

struct Done {
  bool done = false;
};
using DonePtr = std::shared_ptr<Done>;

// One ncclSend or ncclRecv of a point-to-point operation.
struct P2P {
  bool send = false;
  int peer = 0;
  void *buffer = nullptr;  // const for a send
  size_t bytes = 0;
  ncclDataType_t type = ncclUint8;
  uint64_t seq = 0;  // its place among this pair's sends (or receives), from 0
  bool done = false;
};

// A rank's part of a collective, as it called it.
struct Part {
  const char *kind = "";  // "broadcast", "allreduce", "p2p"
  const void *send = nullptr;
  void *recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclUint8;
  int root = 0;
  ncclRedOp_t op = ncclSum;
};

// One queued operation of a stream.
struct Op {
  std::string what;
  std::function<void()> run;   // its effect, when it runs
  std::vector<DonePtr> after;  // operations it waits for (events, the legacy stream)
  DonePtr done = std::make_shared<Done>();
  // A rank's part of a collective: it arrives when it reaches the head of
  // its stream and completes when every rank's part has arrived.
  ncclComm *comm = nullptr;
  Part part;
  uint64_t seq = 0;
  bool arrived = false;
  bool cancelled = false;  // its communicator was aborted: completes doing nothing
  // Point to point (part.kind "p2p"): a group's sends and receives, or a
  // lone one called outside a group. It arrives at the head of its stream
  // and completes once every one of them met its peer's counterpart.
  std::vector<P2P> p2p;
};

}  // namespace kvs_standin

// A graph under capture or captured: the operations a stream's calls made
// while it captured, in order, to be run again by every launch.
struct CUgraph_st {
  std::vector<kvs_standin::Op> ops;
  bool destroyed = false;
};

struct CUgraphExec_st {
  std::vector<kvs_standin::Op> ops;
  int device = 0;
  bool destroyed = false;
};

struct CUstream_st {
  int device = 0;
  bool blocking = true;  // orders itself with the legacy stream
  bool legacy = false;
  bool destroyed = false;
  // While capturing (cudaStreamBeginCapture): the graph being built; its
  // calls queue nothing. A host synchronisation, a pageable copy or an
  // event wait across the capture's edge invalidates it, as CUDA's does.
  CUgraph_st *capture = nullptr;
  bool capture_invalidated = false;
  // Who captures and how: in global mode (CUDA's default, torch's) every
  // other thread not in relaxed mode is barred from potentially unsafe
  // calls while it lasts, and such a call invalidates the capture.
  bool capture_global = false;
  std::thread::id capture_thread;
  std::string capture_why;            // what invalidated it
  uint64_t host_syncs = 0;            // host calls that waited on (or polled) its work
  int64_t stuck_since_ms = -1;        // first unanswered poll (for KVS_STANDIN_TRACE)
  std::deque<kvs_standin::Op> queue;  // front: the next to run
  kvs_standin::DonePtr tail;          // the last enqueued
};

struct CUevent_st {
  int device = 0;
  bool destroyed = false;
  kvs_standin::DonePtr recorded;       // the last record's marker; null: never recorded
  CUstream_st *recorded_on = nullptr;  // the stream of the last record
};

struct CUctx_st {
  int device = 0;
};

struct ncclComm {
  kvs_standin::Clique *clique = nullptr;
  int rank = 0;
  int device = 0;
  std::string host;
  bool blocking = true;
  int max_ctas = NCCL_CONFIG_UNDEF_INT;  // the config's maxCTAs: the channels NCCL may use
  kvs_standin::CommState state = kvs_standin::CommState::kInitializing;
  ncclResult_t async = ncclSuccess;  // sticky once an error
  bool stalled = false;              // injected: its collectives never arrive
  int polls = 0;                     // ncclInProgress answers left
  uint64_t next_seq = 0;
  uint64_t splits = 0;  // ncclCommSplit calls made on it
  int outstanding = 0;  // collectives enqueued, not complete
  // Point to point: sends queued to each peer, receives queued from each,
  // which number them for matching (the k-th send from A to B meets B's
  // k-th receive from A).
  std::vector<uint64_t> sends_to, receives_from;
  std::string last_error;
};

namespace kvs_standin {

struct Clique {
  std::string key;
  int nranks = 0;
  std::vector<ncclComm *> ranks;
  int joined = 0;
  bool checked = false;
  ncclResult_t init_result = ncclSuccess;
  std::string init_error;
  bool broken = false;                                     // a rank aborted
  std::map<uint64_t, std::vector<CUstream_st *>> arrived;  // seq -> streams holding that part
  // Point to point: the streams whose head is an arrived p2p operation
  // still waiting for a counterpart, and each arrived send or receive not
  // yet met, by (src, dst, seq).
  std::set<CUstream_st *> p2p_arrived;
  struct Waiting {
    CUstream_st *stream;
    size_t index;  // into the head operation's p2p
  };
  std::map<std::tuple<int, int, uint64_t>, Waiting> p2p_sends, p2p_receives;
};

struct Alloc {
  uintptr_t base = 0;
  size_t bytes = 0;
  int device = -1;  // -1: pinned host memory
  bool freed = false;
};

// A device range a kernel or collective touches.
struct Range {
  const void *pointer;
  size_t bytes;
  const char *what;
};

struct CudaFault {
  std::string call;
  int device;
  int nth;
  cudaError_t error;
};

class Engine {
 public:
  std::mutex mutex;
  std::condition_variable changed;
  Config config;
  uint64_t generation = 0;
  std::mt19937_64 rng{1};
  std::vector<std::unique_ptr<CUstream_st>> streams;
  std::vector<CUstream_st *> legacy;  // per device
  std::vector<std::unique_ptr<CUevent_st>> events;
  std::vector<std::unique_ptr<CUgraph_st>> graphs;
  std::vector<std::unique_ptr<CUgraphExec_st>> graph_execs;
  std::vector<std::unique_ptr<CUctx_st>> contexts;  // per device, primary
  std::vector<bool> context_live;
  std::vector<int> contexts_created;
  std::vector<int> primary_retains;  // per device: cuDevicePrimaryCtxRetain minus releases
  std::vector<std::set<const void *>> kernels_loaded;  // per device, in its live context
  std::vector<uint64_t> lazy_loads;                    // per device
  std::map<uintptr_t, Alloc> allocs;
  std::vector<std::string> violations;
  std::vector<CudaFault> cuda_faults;
  std::vector<std::unique_ptr<Clique>> cliques;
  std::vector<std::unique_ptr<ncclComm>> comms;
  uint64_t unique_ids = 0;
  Stats stats;

  // ---- everything below expects `mutex` held ----
  void reset_locked(const Config &config);
  void violation(const std::string &text);
  uint64_t random(uint64_t bound) { return bound == 0 ? 0 : rng() % bound; }
  bool chance(unsigned percent) { return random(100) < percent; }

  // Devices are physical: ordinal d of the i-th host name seen (the
  // thread's, kvs_standin::set_thread_hostname) is i * devices + d, so two
  // nodes simulated in one process never share a GPU. The runtime's
  // ordinals are per host, as on real nodes.
  static constexpr int kMaxHosts = 4;
  int physical(int ordinal);  // on the calling thread's host
  int ordinal(int physical) const { return physical % config.devices; }
  // The calling thread's (physical) device, creating its host's device 0
  // context when it has none (what the runtime does on the first call that
  // needs one).
  int need_context();
  void create_context(int device);
  int current_device();  // physical; -1: none
  // Makes device's context current (-1: none) without touching the
  // runtime's choice: what cuCtxSetCurrent does.
  void set_current(int device);
  // What cudaSetDevice does: the context current and the choice recorded.
  void choose(int device);
  // The device (physical) the runtime binds at the thread's next call that
  // needs a context when none is current: its last cudaSetDevice, else 0.
  int current_choice();
  std::vector<std::string> hosts;

  // Loads `kernel` into device's context; at a launch, a kernel not loaded
  // before counts a lazy load.
  void load_kernel(int device, const void *kernel, bool at_launch);

  // A failure injected for this call, else cudaSuccess.
  cudaError_t injected(const char *call);

  // Memory.
  const Alloc *find(const void *pointer) const;  // the allocation holding pointer, freed or not
  bool pinned(const void *pointer, size_t bytes) const;
  // Device memory of `device` (-1: any device), live; else a violation.
  bool check_device(const Range &range, int device, const std::string &who);

  // Streams. resolve maps NULL / cudaStreamLegacy / cudaStreamPerThread to
  // the current device's legacy stream; a destroyed stream is a violation.
  CUstream_st *resolve(cudaStream_t stream, const char *call);
  CUstream_st *new_stream(int device, bool blocking, bool legacy);
  void enqueue(CUstream_st *stream, Op op);
  // A host call that waits on, or polls, the work of `stream` (every
  // stream of its device for a device-wide wait): counted per stream, and
  // an error that invalidates the capture when the stream is capturing.
  // Returns cudaSuccess when the call may go on.
  cudaError_t host_sync(CUstream_st *stream, const char *call);
  cudaError_t host_sync_device(int device, const char *call);
  // A potentially unsafe call (a host wait or poll, an allocation or free)
  // on this thread: refused, invalidating the captures it would break,
  // while another thread (or this one) captures in global mode and this
  // thread is not in relaxed mode (cudaThreadExchangeStreamCaptureMode).
  cudaError_t unsafe_call(const char *call);
  // Ends a stream's capture as invalid, naming why.
  void invalidate_capture(CUstream_st *stream, const std::string &why);
  bool runnable(const CUstream_st *stream) const;
  // Runs one runnable head, chosen at random; false: none. With a focus
  // under Config::lazy, only a head the focus stream's work needs: its
  // own, or that of a stream whose operation it waits for, and so on.
  bool step(const CUstream_st *focus = nullptr);
  void background();            // maybe runs some queued work, as a GPU would meanwhile
  bool idle(int device) const;  // every stream of the device empty (-1: all)
  std::string describe() const;
  // KVS_STANDIN_TRACE: prints describe() once when `s` has waited 5 s.
  void trace_stuck(CUstream_st *s);
  // Runs work (and waits for other threads) until pred holds; false, with
  // a violation naming `what`, when nothing can make it hold.
  // `focus`: the stream whose work pred waits for, if one (Config::lazy).
  bool wait_until(std::unique_lock<std::mutex> &lock, const std::function<bool()> &pred,
                  const std::string &what, const CUstream_st *focus = nullptr);

  // NCCL.
  void arrive(CUstream_st *stream);
  void complete_part(CUstream_st *stream, ncclResult_t error, const std::string &why);
  void run_collective(Clique *clique, uint64_t seq);
  void arrive_p2p(CUstream_st *stream);
  // Fails every arrived p2p operation of the clique (an abort).
  void fail_p2p(Clique *clique, const std::string &why);
  void check_init(Clique *clique);
};

Engine &engine();

// Sets the calling thread's last error (cudaGetLastError) and returns code.
cudaError_t fail(cudaError_t code);
// The calling thread's last error; reset clears it.
cudaError_t take_last_error(bool reset);
// The host name gethostname answers on this thread ("" for the real one).
std::string &thread_hostname();

}  // namespace kvs_standin

#endif  // KVS_TESTS_STANDIN_ENGINE_H
