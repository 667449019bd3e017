// NCCL on the simulated machine: ranks are threads of this process, a
// collective is one operation per rank on that rank's stream, completing
// when every rank's has reached the head of its stream.
//
// Point to point (ncclSend, ncclRecv): each call is numbered per pair at
// the call, the k-th send from A to B meeting B's k-th receive from A,
// which must have the same count and type. Between ncclGroupStart and
// ncclGroupEnd the calls are held; ncclGroupEnd queues one operation per
// communicator holding them all, which completes once every one met its
// counterpart, as a group's kernels run together. A call outside a group
// is an operation of its own that blocks its stream until its counterpart
// arrives, so two ranks that both send first deadlock, as real NCCL may
// for a message above its buffers; a send or receive to the rank itself
// outside a group, which real NCCL hangs on (its counterpart is queued
// behind it), is refused as a violation (ncclInvalidUsage). A collective
// inside a group, which kvshard never makes, is refused the same way.
//
// Where real NCCL differs in a way that matters:
// - An abort here makes the peers' pending and later collectives fail at
//   once with ncclRemoteError. Real NCCL learns of a dead peer from its
//   transport: over the network it reports ncclRemoteError, but peers
//   spinning in an NVLink kernel may hang until their own abort. Hence the
//   backend's deadline on every wait, which the tests also exercise.
// - A nonblocking collective may answer ncclInProgress here for a few
//   polls; the kernel is queued at once either way.
#include <sys/utsname.h>

#include <climits>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "tests/standin/engine.h"

using kvs_standin::Clique;
using kvs_standin::CommState;
using kvs_standin::Engine;
using kvs_standin::engine;
using kvs_standin::Op;

namespace {

using Lock = std::unique_lock<std::mutex>;

std::string host_name() {
  const std::string &name = kvs_standin::thread_hostname();
  if (!name.empty()) return name;
  struct utsname u;
  return uname(&u) == 0 ? std::string(u.nodename) : std::string("localhost");
}

// A handle the caller may still use; aborted and destroyed ones are freed
// memory in real NCCL.
ncclComm *valid(Engine &e, ncclComm_t comm, const char *call) {
  if (comm == nullptr) return nullptr;
  if (comm->state == CommState::kAborted || comm->state == CommState::kDestroyed) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "%s on rank %d's communicator after it was %s (NCCL has freed it)", call,
                  comm->rank, comm->state == CommState::kAborted ? "aborted" : "destroyed");
    e.violation(text);
    return nullptr;
  }
  return comm;
}

size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclInt32:
    case ncclUint32:
      return 4;
    case ncclInt64:
    case ncclUint64:
      return 8;
    default:
      return 0;
  }
}

using kvs_standin::P2P;
using kvs_standin::Part;

// This thread's open group (ncclGroupStart ... ncclGroupEnd): its depth
// and the point-to-point calls it holds. NCCL's group state is per thread
// too. Forgotten by a reset of the machine (generation).
struct GroupCall {
  ncclComm *comm;
  CUstream_st *stream;
  P2P p2p;
};
struct GroupState {
  int depth = 0;
  uint64_t generation = 0;
  std::vector<GroupCall> calls;
};
thread_local GroupState group_state;

GroupState &group_of(Engine &e) {
  if (group_state.generation != e.generation) group_state = GroupState{0, e.generation, {}};
  return group_state;
}

ncclResult_t enqueue_collective(Engine &e, ncclComm_t handle, cudaStream_t stream, const Part &part,
                                const char *call) {
  ncclComm *c = valid(e, handle, call);
  if (c == nullptr) return ncclInvalidArgument;
  if (c->state != CommState::kReady) {
    e.violation(std::string(call) + " on a communicator whose initialisation has not finished");
    return ncclInvalidUsage;
  }
  if (c->async != ncclSuccess) return c->async;
  if (group_of(e).depth > 0) {
    e.violation(std::string(call) +
                " inside ncclGroupStart/ncclGroupEnd: the stand-in groups only ncclSend and "
                "ncclRecv");
    return ncclInvalidUsage;
  }
  size_t width = type_bytes(part.type);
  if (width == 0) return ncclInvalidArgument;
  CUstream_st *s = e.resolve(stream, call);
  if (s == nullptr) return ncclInvalidArgument;
  char who[160];
  std::snprintf(who, sizeof who, "%s on rank %d (device %d)", call, c->rank, e.ordinal(c->device));
  if (s->device != c->device) {
    char text[240];
    std::snprintf(text, sizeof text, "%s: its stream belongs to device %d", who,
                  e.ordinal(s->device));
    e.violation(text);
    return ncclInvalidArgument;
  }
  size_t bytes = part.count * width;
  bool sends = std::strcmp(part.kind, "allreduce") == 0 || part.root == c->rank;
  if ((sends && !e.check_device({part.send, bytes, "the send buffer"}, c->device, who)) ||
      !e.check_device({part.recv, bytes, "the receive buffer"}, c->device, who)) {
    return ncclInvalidArgument;
  }
  Op op;
  op.what = call;
  op.comm = c;
  op.part = part;
  op.seq = c->next_seq++;
  c->outstanding++;
  e.enqueue(s, std::move(op));
  // A nonblocking communicator may take a few polls to accept the call.
  if (!c->blocking && e.chance(30)) {
    c->polls = 1 + static_cast<int>(e.random(3));
    return ncclInProgress;
  }
  return ncclSuccess;
}

// Queues a point-to-point operation (a group's calls on one communicator,
// or one call outside a group) on its stream.
ncclResult_t enqueue_p2p(Engine &e, ncclComm *c, CUstream_st *s, std::vector<P2P> calls,
                         const char *what) {
  Op op;
  op.what = what;
  op.comm = c;
  op.part.kind = "p2p";
  op.p2p = std::move(calls);
  c->outstanding++;
  e.enqueue(s, std::move(op));
  if (!c->blocking && e.chance(30)) {
    c->polls = 1 + static_cast<int>(e.random(3));
    return ncclInProgress;
  }
  return ncclSuccess;
}

// ncclSend and ncclRecv: checked at the call, as NCCL checks them, then
// held by the open group or queued alone.
ncclResult_t p2p_call(bool send, void *buffer, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t handle, cudaStream_t stream) {
  const char *call = send ? "ncclSend" : "ncclRecv";
  Engine &e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  e.background();
  ncclComm *c = valid(e, handle, call);
  if (c == nullptr) return ncclInvalidArgument;
  if (c->state != CommState::kReady) {
    e.violation(std::string(call) + " on a communicator whose initialisation has not finished");
    return ncclInvalidUsage;
  }
  if (c->async != ncclSuccess) return c->async;
  size_t width = type_bytes(type);
  if (width == 0 || peer < 0 || peer >= c->clique->nranks) return ncclInvalidArgument;
  CUstream_st *s = e.resolve(stream, call);
  if (s == nullptr) return ncclInvalidArgument;
  char who[200];
  std::snprintf(who, sizeof who, "%s of %zu bytes %s rank %d on rank %d (device %d)", call,
                count * width, send ? "to" : "from", peer, c->rank, e.ordinal(c->device));
  if (s->device != c->device) {
    e.violation(std::string(who) + ": its stream belongs to device " +
                std::to_string(e.ordinal(s->device)));
    return ncclInvalidArgument;
  }
  size_t bytes = count * width;
  if (bytes > 0 && !e.check_device({buffer, bytes, send ? "the send buffer" : "the receive buffer"},
                                   c->device, who)) {
    return ncclInvalidArgument;
  }
  GroupState &g = group_of(e);
  if (g.depth == 0 && peer == c->rank) {
    e.violation(std::string(who) +
                " outside ncclGroupStart/ncclGroupEnd: alone on its stream it waits for its "
                "counterpart queued behind it, which real NCCL never runs (a hang)");
    return ncclInvalidUsage;
  }
  size_t n = static_cast<size_t>(c->clique->nranks);
  if (c->sends_to.size() != n) c->sends_to.assign(n, 0);
  if (c->receives_from.size() != n) c->receives_from.assign(n, 0);
  P2P x;
  x.send = send;
  x.peer = peer;
  x.buffer = buffer;
  x.bytes = bytes;
  x.type = type;
  x.seq = send ? c->sends_to[static_cast<size_t>(peer)]++
               : c->receives_from[static_cast<size_t>(peer)]++;
  if (g.depth > 0) {
    g.calls.push_back({c, s, x});
    return ncclSuccess;
  }
  return enqueue_p2p(e, c, s, {x}, call);
}

}  // namespace

namespace kvs_standin {

// A p2p operation at the head of its stream: each of its sends and
// receives meets the counterpart already arrived (copying the bytes) or
// waits for it; an operation whose every one has met completes.
void Engine::arrive_p2p(CUstream_st *s) {
  Op &op = s->queue.front();
  ncclComm *c = op.comm;
  Clique *clique = c->clique;
  op.arrived = true;
  clique->p2p_arrived.insert(s);
  std::set<CUstream_st *> touched = {s};
  for (size_t i = 0; i < op.p2p.size(); i++) {
    P2P &x = op.p2p[i];
    int src = x.send ? c->rank : x.peer, dst = x.send ? x.peer : c->rank;
    auto key = std::make_tuple(src, dst, x.seq);
    auto &mine = x.send ? clique->p2p_sends : clique->p2p_receives;
    auto &theirs = x.send ? clique->p2p_receives : clique->p2p_sends;
    auto it = theirs.find(key);
    if (it == theirs.end()) {
      mine[key] = Clique::Waiting{s, i};
      continue;
    }
    Clique::Waiting w = it->second;
    theirs.erase(it);
    Op &other = w.stream->queue.front();
    P2P &y = other.p2p[w.index];
    const P2P &send = x.send ? x : y;
    const P2P &recv = x.send ? y : x;
    ncclComm *sender = x.send ? c : other.comm;
    ncclComm *receiver = x.send ? other.comm : c;
    char who[200];
    std::snprintf(who, sizeof who, "ncclSend %llu from rank %d to rank %d when it ran",
                  static_cast<unsigned long long>(send.seq), src, dst);
    std::string why;
    if (send.bytes != recv.bytes || send.type != recv.type) {
      char text[400];
      std::snprintf(text, sizeof text,
                    "%s: %zu bytes of type %d, its ncclRecv %zu bytes of type %d (NCCL needs the "
                    "same count and type on both sides)",
                    who, send.bytes, static_cast<int>(send.type), recv.bytes,
                    static_cast<int>(recv.type));
      violation(text);
      why = "a send and its receive differ in size or type";
    } else if (!check_device({send.buffer, send.bytes, "the send buffer"}, sender->device, who) ||
               !check_device({recv.buffer, recv.bytes, "the receive buffer"}, receiver->device,
                             who)) {
      why = "a buffer of a send or receive was not live device memory of its rank";
    } else {
      std::memmove(recv.buffer, send.buffer, send.bytes);
      stats.p2p++;
    }
    if (!why.empty()) {
      for (ncclComm *k : {sender, receiver}) {
        if (k->async == ncclSuccess && k->state != CommState::kAborted) {
          k->async = ncclInvalidUsage;
          k->last_error = why;
        }
      }
    }
    x.done = y.done = true;
    touched.insert(w.stream);
  }
  for (CUstream_st *t : touched) {
    const Op &head = t->queue.front();
    bool all = true;
    for (const P2P &x : head.p2p) all = all && x.done;
    if (!all) continue;
    clique->p2p_arrived.erase(t);
    complete_part(t, ncclSuccess, "");
  }
}

void Engine::fail_p2p(Clique *clique, const std::string &why) {
  std::set<CUstream_st *> waiting;
  waiting.swap(clique->p2p_arrived);
  clique->p2p_sends.clear();
  clique->p2p_receives.clear();
  for (CUstream_st *s : waiting) complete_part(s, ncclRemoteError, why);
}

// Initialisation finishes once every rank joined: two ranks of one host on
// one device are refused, as NCCL's duplicate GPU check refuses them.
void Engine::check_init(Clique *clique) {
  if (clique->checked || clique->joined < clique->nranks) return;
  clique->checked = true;
  for (int a = 0; a < clique->nranks; a++) {
    for (int b = a + 1; b < clique->nranks; b++) {
      const ncclComm *x = clique->ranks[static_cast<size_t>(a)];
      const ncclComm *y = clique->ranks[static_cast<size_t>(b)];
      if (x->host == y->host && x->device == y->device && clique->init_result == ncclSuccess) {
        char text[200];
        std::snprintf(text, sizeof text,
                      "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d of "
                      "host %s",
                      b, a, ordinal(x->device), x->host.c_str());
        clique->init_result = ncclInvalidUsage;
        clique->init_error = text;
      }
    }
  }
}

void Engine::complete_part(CUstream_st *s, ncclResult_t error, const std::string &why) {
  Op &op = s->queue.front();
  ncclComm *c = op.comm;
  if (error != ncclSuccess && c->async == ncclSuccess && c->state != CommState::kAborted) {
    c->async = error;
    c->last_error = why;
  }
  c->outstanding--;
  op.done->done = true;
  s->queue.pop_front();
  changed.notify_all();
}

void Engine::arrive(CUstream_st *s) {
  Op &op = s->queue.front();
  ncclComm *c = op.comm;
  Clique *clique = c->clique;
  if (op.cancelled || c->state == CommState::kAborted) {
    complete_part(s, ncclSuccess, "");
    return;
  }
  if (clique->broken) {
    complete_part(s, ncclRemoteError, "a peer rank aborted the communicator");
    return;
  }
  if (std::strcmp(op.part.kind, "p2p") == 0) {
    arrive_p2p(s);
    return;
  }
  op.arrived = true;
  std::vector<CUstream_st *> &here = clique->arrived[op.seq];
  here.push_back(s);
  if (static_cast<int>(here.size()) == clique->nranks) run_collective(clique, op.seq);
}

void Engine::run_collective(Clique *clique, uint64_t seq) {
  std::vector<CUstream_st *> streams_of = clique->arrived[seq];
  clique->arrived.erase(seq);
  std::vector<ncclComm *> cs(static_cast<size_t>(clique->nranks), nullptr);
  std::vector<Part> by_rank(static_cast<size_t>(clique->nranks));
  for (CUstream_st *s : streams_of) {
    const Op &op = s->queue.front();
    by_rank[static_cast<size_t>(op.comm->rank)] = op.part;
    cs[static_cast<size_t>(op.comm->rank)] = op.comm;
  }
  const Part &first = by_rank[0];
  bool same = true;
  for (const Part &p : by_rank) {
    same = same && std::strcmp(p.kind, first.kind) == 0 && p.count == first.count &&
           p.type == first.type && p.root == first.root && p.op == first.op;
  }
  size_t width = type_bytes(first.type), bytes = first.count * width;
  bool memory_ok = same;
  for (int r = 0; memory_ok && r < clique->nranks; r++) {
    const Part &p = by_rank[static_cast<size_t>(r)];
    char who[120];
    std::snprintf(who, sizeof who, "%s on rank %d when it ran", p.kind, r);
    bool sends = std::strcmp(p.kind, "allreduce") == 0 || p.root == r;
    int device = cs[static_cast<size_t>(r)]->device;
    memory_ok = (!sends || check_device({p.send, bytes, "the send buffer"}, device, who)) &&
                check_device({p.recv, bytes, "the receive buffer"}, device, who);
  }
  if (!same) {
    violation("a collective whose ranks disagree on its kind, size, type, root or operation");
  } else if (memory_ok) {
    std::vector<unsigned char> result(bytes);
    if (std::strcmp(first.kind, "broadcast") == 0) {
      std::memcpy(result.data(), by_rank[static_cast<size_t>(first.root)].send, bytes);
    } else {
      // Unsigned 64-bit words (the only reduction kvshard asks for) and bytes.
      for (size_t i = 0; i < first.count; i++) {
        uint64_t acc = 0;
        for (int r = 0; r < clique->nranks; r++) {
          const unsigned char *src =
              static_cast<const unsigned char *>(by_rank[static_cast<size_t>(r)].send) + i * width;
          uint64_t v = 0;
          std::memcpy(&v, src, width);
          if (r == 0) {
            acc = v;
          } else if (first.op == ncclSum) {
            acc += v;
          } else if (first.op == ncclMin) {
            acc = v < acc ? v : acc;
          } else if (first.op == ncclMax) {
            acc = v > acc ? v : acc;
          }
        }
        std::memcpy(result.data() + i * width, &acc, width);
      }
    }
    for (const Part &p : by_rank) std::memcpy(p.recv, result.data(), bytes);
  }
  stats.collectives++;
  for (CUstream_st *s : streams_of) {
    complete_part(s, same && memory_ok ? ncclSuccess : ncclInvalidUsage,
                  same ? "a buffer of the collective was not live device memory of its rank"
                       : "ranks called different collectives");
  }
}

void inject_nccl_async_error(ncclComm_t comm, ncclResult_t error) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  comm->async = error;
  comm->stalled = true;
  comm->last_error = "injected by the test";
  e.changed.notify_all();
}

ncclComm_t latest_comm(int rank) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  for (auto it = e.comms.rbegin(); it != e.comms.rend(); ++it) {
    if ((*it)->rank == rank) return it->get();
  }
  return nullptr;
}

CommState comm_state(ncclComm_t comm) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return comm->state;
}

int comm_max_ctas(ncclComm_t comm) {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return comm->max_ctas;
}

}  // namespace kvs_standin

ncclResult_t ncclGetVersion(int *version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "kvs-standin-%llu-%llu",
                static_cast<unsigned long long>(e.generation),
                static_cast<unsigned long long>(++e.unique_ids));
  return ncclSuccess;
}

namespace {

// One rank joining the clique `key` of nranks on `device`: what
// ncclCommInitRankConfig and ncclCommSplit share. The lock is held.
ncclResult_t join(Engine &e, Lock &lock, const std::string &key, int nranks, int rank, int device,
                  const ncclConfig_t *config, ncclComm_t *comm, const char *call) {
  Clique *clique = nullptr;
  for (auto &c : e.cliques) {
    if (c->key == key) clique = c.get();
  }
  if (clique == nullptr) {
    e.cliques.emplace_back(new Clique);
    clique = e.cliques.back().get();
    clique->key = key;
    clique->nranks = nranks;
    clique->ranks.assign(static_cast<size_t>(nranks), nullptr);
  }
  if (clique->nranks != nranks) return ncclInvalidArgument;
  if (clique->ranks[static_cast<size_t>(rank)] != nullptr) {
    e.violation(std::string(call) + ": rank " + std::to_string(rank) + " joined twice");
    return ncclInvalidUsage;
  }
  e.comms.emplace_back(new ncclComm);
  ncclComm *c = e.comms.back().get();
  c->clique = clique;
  c->rank = rank;
  c->device = device;
  c->host = host_name();
  c->blocking =
      config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  c->max_ctas = config == nullptr ? NCCL_CONFIG_UNDEF_INT : config->maxCTAs;
  c->polls = 1 + static_cast<int>(e.random(static_cast<uint64_t>(e.config.max_init_polls)));
  clique->ranks[static_cast<size_t>(rank)] = c;
  clique->joined++;
  e.check_init(clique);
  e.changed.notify_all();
  *comm = c;
  if (!c->blocking) return ncclInProgress;
  e.wait_until(
      lock, [&] { return clique->joined == clique->nranks; },
      (std::string(call) + " waiting for every rank").c_str());
  c->state = CommState::kReady;
  if (clique->init_result != ncclSuccess) {
    c->async = clique->init_result;
    c->last_error = clique->init_error;
  }
  return clique->init_result;
}

}  // namespace

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  Engine &e = engine();
  Lock lock(e.mutex);
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (config != nullptr && config->magic != 0xcafebeef) return ncclInvalidArgument;
  if (e.config.devices <= 0) return ncclUnhandledCudaError;
  // NCCL takes the calling thread's current device (creating its context).
  int device = e.need_context();
  std::string key(id.internal, sizeof id.internal);
  return join(e, lock, key, nranks, rank, device, config, comm, "ncclCommInitRankConfig");
}

// A split joins every rank of the parent that makes its n-th split with the
// same color into one new clique, on the parent's device. The stand-in
// supports what kvshard does: one color for every rank, the parent's rank
// as the key (the new rank).
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
  Engine &e = engine();
  Lock lock(e.mutex);
  ncclComm *parent = valid(e, comm, "ncclCommSplit");
  if (parent == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  if (config != nullptr && config->magic != 0xcafebeef) return ncclInvalidArgument;
  if (parent->state != CommState::kReady) {
    e.violation("ncclCommSplit of a communicator whose initialisation has not finished");
    return ncclInvalidUsage;
  }
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  if (key != parent->rank) {
    e.violation("ncclCommSplit: the stand-in splits with the parent's rank as the key");
    return ncclInvalidUsage;
  }
  std::string clique = parent->clique->key + "/split" + std::to_string(parent->splits++) +
                       "/color" + std::to_string(color);
  return join(e, lock, clique, parent->clique->nranks, key, parent->device, config, newcomm,
              "ncclCommSplit");
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
  Engine &e = engine();
  Lock lock(e.mutex);
  ncclComm *c = valid(e, comm, "ncclCommGetAsyncError");
  if (c == nullptr || async == nullptr) return ncclInvalidArgument;
  e.background();
  if (c->async != ncclSuccess) {
    *async = c->async;
    return ncclSuccess;
  }
  switch (c->state) {
    case CommState::kInitializing:
      if (c->clique->joined == c->clique->nranks && --c->polls <= 0) {
        c->state = CommState::kReady;
        if (c->clique->init_result != ncclSuccess) {
          c->async = c->clique->init_result;
          c->last_error = c->clique->init_error;
        }
        *async = c->async;
      } else {
        *async = ncclInProgress;
      }
      break;
    case CommState::kFinalizing:
      if (c->outstanding == 0 && --c->polls <= 0) {
        c->state = CommState::kFinalized;
        *async = ncclSuccess;
      } else {
        *async = ncclInProgress;
      }
      break;
    default:
      *async = c->polls > 0 && c->polls-- > 0 ? ncclInProgress : ncclSuccess;
      break;
  }
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  e.background();
  if (comm != nullptr && (root < 0 || root >= comm->clique->nranks)) return ncclInvalidArgument;
  Part part;
  part.kind = "broadcast";
  part.send = send;
  part.recv = recv;
  part.count = count;
  part.type = type;
  part.root = root;
  return enqueue_collective(e, comm, stream, part, "ncclBroadcast");
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Engine &e = engine();
  Lock lock(e.mutex);
  e.background();
  if (op != ncclSum && op != ncclMin && op != ncclMax) return ncclInvalidArgument;
  Part part;
  part.kind = "allreduce";
  part.send = send;
  part.recv = recv;
  part.count = count;
  part.type = type;
  part.op = op;
  return enqueue_collective(e, comm, stream, part, "ncclAllReduce");
}

// Cancels this rank's queued collectives and fails the peers' (see the top
// of this file); the handle is freed.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  Engine &e = engine();
  Lock lock(e.mutex);
  ncclComm *c = valid(e, comm, "ncclCommAbort");
  if (c == nullptr) return ncclInvalidArgument;
  c->state = CommState::kAborted;
  Clique *clique = c->clique;
  clique->broken = true;
  for (auto &s : e.streams) {
    for (Op &op : s->queue) {
      if (op.comm == c) op.cancelled = true;
    }
  }
  std::map<uint64_t, std::vector<CUstream_st *>> waiting;
  waiting.swap(clique->arrived);
  for (auto &entry : waiting) {
    for (CUstream_st *s : entry.second) {
      e.complete_part(s, ncclRemoteError, "a peer rank aborted the communicator");
    }
  }
  e.fail_p2p(clique, "a peer rank aborted the communicator");
  e.changed.notify_all();
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return p2p_call(true, const_cast<void *>(sendbuff), count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return p2p_call(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
  Engine &e = engine();
  Lock lock(e.mutex);
  GroupState &g = group_of(e);
  if (g.depth++ == 0) g.calls.clear();
  return ncclSuccess;
}

// The outermost end queues, per communicator, one operation with the
// group's calls on it, in call order.
ncclResult_t ncclGroupEnd() {
  Engine &e = engine();
  Lock lock(e.mutex);
  GroupState &g = group_of(e);
  if (g.depth == 0) {
    e.violation("ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--g.depth > 0) return ncclSuccess;
  std::vector<GroupCall> calls;
  calls.swap(g.calls);
  ncclResult_t result = ncclSuccess;
  std::vector<ncclComm *> order;
  for (const GroupCall &k : calls) {
    if (std::find(order.begin(), order.end(), k.comm) == order.end()) order.push_back(k.comm);
  }
  for (ncclComm *c : order) {
    CUstream_st *stream = nullptr;
    std::vector<P2P> mine;
    for (const GroupCall &k : calls) {
      if (k.comm != c) continue;
      if (stream != nullptr && k.stream != stream) {
        e.violation("a group's calls on rank " + std::to_string(c->rank) +
                    "'s communicator on two streams: the stand-in runs a group on one");
        return ncclInvalidUsage;
      }
      stream = k.stream;
      mine.push_back(k.p2p);
    }
    if (valid(e, c, "ncclGroupEnd") == nullptr) return ncclInvalidArgument;
    ncclResult_t rc = enqueue_p2p(e, c, stream, std::move(mine), "ncclGroupEnd");
    if (rc != ncclSuccess) result = rc;
  }
  return result;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  Engine &e = engine();
  Lock lock(e.mutex);
  ncclComm *c = valid(e, comm, "ncclCommFinalize");
  if (c == nullptr) return ncclInvalidArgument;
  if (c->outstanding > 0) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "ncclCommFinalize on rank %d with %d collective(s) outstanding: it waits for "
                  "them, and so for peers that may never come",
                  c->rank, c->outstanding);
    e.violation(text);
  }
  c->state = CommState::kFinalizing;
  c->polls = 1 + static_cast<int>(e.random(static_cast<uint64_t>(e.config.max_init_polls)));
  if (!c->blocking) return ncclInProgress;
  e.wait_until(
      lock, [&] { return c->outstanding == 0; }, "ncclCommFinalize");
  c->state = CommState::kFinalized;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  Engine &e = engine();
  Lock lock(e.mutex);
  ncclComm *c = valid(e, comm, "ncclCommDestroy");
  if (c == nullptr) return ncclInvalidArgument;
  if (c->outstanding > 0) {
    e.violation("ncclCommDestroy on rank " + std::to_string(c->rank) + " with " +
                std::to_string(c->outstanding) + " collective(s) outstanding");
  }
  c->state = CommState::kDestroyed;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  Engine &e = engine();
  Lock lock(e.mutex);
  ncclComm *c = valid(e, comm, "ncclCommCount");
  if (c == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = c->clique->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  Engine &e = engine();
  Lock lock(e.mutex);
  ncclComm *c = valid(e, comm, "ncclCommUserRank");
  if (c == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  Engine &e = engine();
  Lock lock(e.mutex);
  ncclComm *c = valid(e, comm, "ncclCommCuDevice");
  if (c == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = e.ordinal(c->device);
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  Engine &e = engine();
  Lock lock(e.mutex);
  static thread_local std::string last;
  last = comm != nullptr ? comm->last_error : std::string();
  return last.c_str();
}
