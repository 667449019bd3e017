/* kvshard: the paged KV cache of hybrid-attention LLMs (DeepSeek-V4 style:
 * sliding window, compressed, indexer and fp32 compress-state ring tiers),
 * planned, allocated and kept identical across the ranks of a serving
 * group. This is the whole API an engine calls, in one header:
 *
 *   cc engine.c $(pkg-config --cflags --libs kvshard)
 *
 * It names no CUDA, NCCL or MPI type and needs none of them installed:
 * those live in backends the library loads when asked for (a device
 * "cuda" node, an "nccl" or "mpi" communicator), each a shared object of
 * its own (libkvshard-cuda.so.1, libkvshard-nccl.so.1,
 * libkvshard-mpi.so.1) found beside libkvshard.so.2, in
 * KVSHARD_BACKEND_PATH, or on the loader's path. kvshard_cuda.h,
 * kvshard_nccl.h and kvshard_mpi.h add typed helpers for engines that
 * hold those libraries' handles.
 *
 * Conventions. Every fallible call returns a kvs_status and, given a
 * non-NULL kvs_error, a message naming the field, layer, page or rank at
 * fault with the expected and found values; a call that fails changes
 * nothing. Handles are opaque, made by *_create and released by *_destroy
 * (which accept NULL). Options structs start with their own size: fill
 * them with *_options_init, then set fields; a struct from an older build
 * (shorter) takes this build's defaults for the rest, one from a newer
 * build (longer) is refused.
 *
 * The node is the per-rank object: "node" in this header always means it,
 * never a machine (a machine is a host). */
#ifndef KVS_KVSHARD_H
#define KVS_KVSHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVS_VERSION_MAJOR 0
#define KVS_VERSION_MINOR 7
#define KVS_VERSION_PATCH 0
#define KVS_VERSION_STRING "0.7.0"
/* The ABI this header describes: the shared object's SONAME number
 * (libkvshard.so.2). */
#define KVS_ABI_VERSION 2

#if defined(__GNUC__) && !defined(KVS_NO_VISIBILITY)
#define KVS_API __attribute__((visibility("default")))
#else
#define KVS_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors ---- */

typedef enum kvs_status {
  KVS_OK = 0,
  KVS_ERR_INVALID_ARGUMENT = 1, /* a parameter outside its domain (NULL, zero page, ...) */
  KVS_ERR_UNKNOWN_RATIO = 2,    /* a compress ratio that is none of 0, 4, 128 */
  KVS_ERR_BUDGET_TOO_SMALL = 3, /* the budget cannot hold the minimal pool */
  KVS_ERR_EXHAUSTED = 4,        /* no free pages (or request slots); nothing was taken */
  KVS_ERR_PARTIAL_PAGE = 5,     /* a page-atomic call given part of a page */
  KVS_ERR_OUT_OF_RANGE = 6,     /* an unaligned base, or a location outside the pool */
  KVS_ERR_INTEGRITY = 7,        /* the pool's conservation or binding invariants broke */
  KVS_ERR_JOURNAL_FULL = 8,     /* the step has no room for this operation's entries */
  KVS_ERR_NO_MEMORY = 9,        /* an allocation failed */
  KVS_ERR_IO = 10,              /* a file could not be read or written */
  KVS_ERR_PARSE = 11,           /* malformed text (JSON, flags) */
  KVS_ERR_OVERFLOW = 12,        /* a size does not fit in 64 bits */
  KVS_ERR_CONFLICT = 13,        /* a binding that conflicts with the pool (bound twice) */
  KVS_ERR_SIGNATURE = 14,       /* a stored block refused by its signature */
  KVS_ERR_CORRUPT = 15,         /* encoded bytes truncated, foreign or failing a checksum */
  KVS_ERR_NOT_FOUND = 16,       /* nothing under that name or key */
  KVS_ERR_CUDA = 17,            /* the CUDA runtime reported an error */
  KVS_ERR_COMM = 18,            /* a communication backend failed, or a peer did */
  KVS_ERR_TIMEOUT = 19,         /* a wait ran past its deadline */
  KVS_ERR_DIVERGENCE = 20,      /* ranks disagree on state that must be identical */
  KVS_ERR_UNSUPPORTED = 21,     /* not available on this machine (no GPU, say) */
  KVS_ERR_EPOCH = 22,           /* a step applied out of order or twice */
  KVS_ERR_LIBRARY = 23,         /* a shared library the call needs cannot be loaded */
  KVS_ERR_PENDING = 24          /* the leader's changes are not stepped yet: step first */
} kvs_status;

#define KVS_ERROR_MESSAGE_MAX 512

typedef struct kvs_error {
  kvs_status status;
  char message[KVS_ERROR_MESSAGE_MAX];
} kvs_error;

/* KVS_VERSION_STRING as the library was built: compare with the header's. */
KVS_API const char *kvs_version(void);
/* A short description ("out of range"); never NULL. */
KVS_API const char *kvs_status_string(kvs_status status);
/* The enumerator's name ("KVS_ERR_OUT_OF_RANGE"); "KVS_ERR_UNKNOWN" for
 * none. */
KVS_API const char *kvs_status_name(kvs_status status);
/* Resets err to KVS_OK and an empty message; NULL is accepted. */
KVS_API void kvs_error_clear(kvs_error *err);

/* ---- the model ---- */

/* Largest compress_ratios array a geometry holds (DSV4-Pro ships 62). */
#define KVS_MAX_LAYERS 1024

/* The few numbers the KV tiers are priced from: a plain value. Ratio 0 is
 * a window-only layer, 4 a compressed layer with an indexer (CSA), 128 a
 * heavily compressed one (HCA). Only the first n_layers ratios are read
 * (a checkpoint ships one more for its MTP layer). */
typedef struct kvs_geometry {
  uint64_t head_dim;       /* the MLA latent width; V aliases K */
  uint64_t index_head_dim; /* the indexer key width */
  size_t n_layers;
  size_t n_ratios; /* entries present in compress_ratios */
  uint32_t compress_ratios[KVS_MAX_LAYERS];
} kvs_geometry;

/* "dsv4-flash" (the default model), "dsv4-pro"; another name is
 * KVS_ERR_NOT_FOUND listing the known ones. */
KVS_API kvs_status kvs_geometry_builtin(const char *name, kvs_geometry *out, kvs_error *err);
/* A built-in name, a model folder, or its config.json. */
KVS_API kvs_status kvs_geometry_resolve(const char *name_or_path, kvs_geometry *out,
                                        kvs_error *err);
/* Layers the model uses: min(n_layers, n_ratios); 0 for NULL. */
KVS_API size_t kvs_geometry_layer_count(const kvs_geometry *geometry);

/* How KV rows are stored. */
typedef enum kvs_kv_dtype {
  KVS_KV_BF16 = 0, /* every row bf16: head_dim x 2, index_head_dim x 2 bytes */
  KVS_KV_FP8 = 1   /* fp8 rows with a bf16 rope part and scales (584 B on DSV4) */
} kvs_kv_dtype;

/* Where the fp32 compress-state rings live. */
typedef enum kvs_state_rings {
  KVS_STATE_RINGS_PER_PAGE = 0,       /* one ring per window page */
  KVS_STATE_RINGS_PER_REQUEST = 1,    /* one ring per running request (the default) */
  KVS_STATE_RINGS_HCA_PER_REQUEST = 2 /* ratio-128 rings per request, ratio-4 per page */
} kvs_state_rings;

/* ---- communicators ---- */

/* A group of ranks the node talks over. Every wait has a deadline: a peer
 * that died or stalled becomes KVS_ERR_TIMEOUT naming the collective, and
 * a failed collective poisons the communicator. */
typedef struct kvs_comm *kvs_comm_t;

#define KVS_COMM_DEFAULT_TIMEOUT_MS 30000

/* One rank: every collective is the identity. */
KVS_API kvs_status kvs_comm_self_create(kvs_comm_t *out, kvs_error *err);

/* Ranks as threads of one process (tests, one-process engines): a group
 * of `size` ranks, then one communicator per rank, each used by one
 * thread. The group lives until its last communicator is destroyed. */
typedef struct kvs_comm_loopback_group *kvs_comm_loopback_group_t;
KVS_API kvs_status kvs_comm_loopback_group_create(int size, kvs_comm_loopback_group_t *out,
                                                  kvs_error *err);
KVS_API void kvs_comm_loopback_group_destroy(kvs_comm_loopback_group_t group);
KVS_API kvs_status kvs_comm_loopback_create(kvs_comm_loopback_group_t group, int rank,
                                            int timeout_ms, kvs_comm_t *out, kvs_error *err);

/* MPI (the mpi backend): starts MPI unless the program did (and then ends
 * it in kvs_mpi_finalize), and a communicator over an MPI communicator's
 * handle (kvshard_mpi.h takes an MPI_Comm; mpi4py's MPI._handleof gives
 * the same value), NULL for MPI_COMM_WORLD. */
KVS_API kvs_status kvs_mpi_init(int *world_rank, int *world_size, kvs_error *err);
KVS_API kvs_status kvs_mpi_finalize(kvs_error *err);
KVS_API kvs_status kvs_comm_mpi_create(const void *handle, size_t handle_bytes, int timeout_ms,
                                       kvs_comm_t *out, kvs_error *err);

/* NCCL (the nccl backend): a communicator of kvshard's own, on its own
 * stream, never interleaved with the engine's collectives. */
#define KVS_NCCL_UNIQUE_ID_BYTES 128

typedef struct kvs_comm_nccl_options {
  size_t size; /* sizeof(kvs_comm_nccl_options) */
  int rank;    /* this rank, in [0, nranks) */
  int nranks;  /* the group's size */
  int device;  /* the CUDA device this rank runs on */
  /* From kvs_comm_nccl_unique_id on one rank, shared by the engine over
   * its own group (torch.distributed, MPI): the same on every rank. */
  unsigned char unique_id[KVS_NCCL_UNIQUE_ID_BYTES];
  /* Or an engine's ncclComm_t to split from (ncclCommSplit): rank and
   * nranks are then the engine's. The engine's stays untouched. */
  void *parent;
  int init_timeout_ms; /* the initialisation's deadline (default 120 s) */
  int timeout_ms;      /* every collective's (default 30 s) */
} kvs_comm_nccl_options;

KVS_API void kvs_comm_nccl_options_init(kvs_comm_nccl_options *options);
/* A fresh id (ncclGetUniqueId) for one rank to share. */
KVS_API kvs_status kvs_comm_nccl_unique_id(unsigned char out[KVS_NCCL_UNIQUE_ID_BYTES],
                                           kvs_error *err);
/* Collective over the ranks of the id (or the parent). */
KVS_API kvs_status kvs_comm_nccl_create(const kvs_comm_nccl_options *options, kvs_comm_t *out,
                                        kvs_error *err);

/* An engine's own group through callbacks (torch.distributed's
 * ProcessGroup, a framework's collectives; Python's kvshard.torch_comm is
 * one): the "callbacks" backend. It is a host backend, as MPI is: every
 * callback gets host memory, and a "cuda" node over it takes each step's
 * entries from host memory and uploads them on its own stream (the node's
 * device tables work over any host communicator; only a device
 * communicator's buffers are read in place). Every rank calls the same
 * collectives in the same order; a callback runs on the thread that made
 * the kvshard call and must not call kvshard on this communicator or a
 * node over it.
 *
 * Each callback returns KVS_OK once its collective is complete on this
 * rank, or a failure with a message in err (err is cleared before the
 * call). Any failure poisons the communicator as a backend's does: every
 * later collective is refused with the first failure's message.
 * KVS_ERR_TIMEOUT stays a timeout; every other status, and a value that is
 * no kvs_status at all, becomes KVS_ERR_COMM naming the callback and what
 * it returned. kvshard cannot interrupt a callback: timeout_ms is the
 * deadline the callback is asked to keep, and waits inside it are the
 * engine's group's own (torch's group timeout, say). */
#define KVS_COMM_REDUCE_MIN 0
#define KVS_COMM_REDUCE_MAX 1
#define KVS_COMM_REDUCE_SUM 2 /* wraps modulo 2^64 */

/* One point-to-point transfer of a batch (kvs_comm_exchange): `bytes` at
 * `data` to (send) or from (a receive) rank `peer` of the communicator.
 * data is device memory on a device communicator (nccl), host memory on
 * the host ones (self, loopback, mpi, callbacks). */
typedef struct kvs_comm_transfer {
  int peer;
  bool send;
  void *data;
  size_t bytes;
} kvs_comm_transfer;

typedef struct kvs_comm_callbacks {
  size_t size; /* sizeof(kvs_comm_callbacks); fields past it are NULL */
  void *user;  /* handed to every callback */
  /* Required. After it returns, every rank's first n bytes at `bytes`
   * (n >= 1) are the root's. */
  kvs_status (*broadcast)(void *user, void *bytes, size_t n, int root, int timeout_ms,
                          kvs_error *err);
  /* Required. In place over `count` >= 1 words, every rank's the same;
   * op is KVS_COMM_REDUCE_MIN, _MAX or _SUM, unsigned 64-bit. */
  kvs_status (*allreduce_u64)(void *user, uint64_t *words, size_t count, int op, int timeout_ms,
                              kvs_error *err);
  /* Required. Returns once every rank has called it. */
  kvs_status (*barrier)(void *user, int timeout_ms, kvs_error *err);
  /* Optional: called once with user by kvs_comm_destroy (never when the
   * create failed: user is then still the caller's). */
  void (*destroy)(void *user);
  /* Optional (added in 0.7, after destroy: a shorter struct has none):
   * kvs_comm_exchange's batch of n >= 1 transfers, every one of at least
   * one byte with its peer in range (the call checked them), run as one
   * group so that no order of sends and receives deadlocks; returns once
   * every transfer of the batch completed on this rank. Without it
   * kvs_comm_exchange is KVS_ERR_UNSUPPORTED. */
  kvs_status (*exchange)(void *user, const kvs_comm_transfer *transfers, size_t n, int timeout_ms,
                         kvs_error *err);
} kvs_comm_callbacks;

/* This rank (in [0, size)) of a group of `size` >= 1 ranks over the
 * callbacks (copied: the struct may go after the call; user must live
 * until destroy). Local: no callback runs here. A missing callback, a
 * size field this build does not know, a rank outside the group or a
 * timeout_ms <= 0 is KVS_ERR_INVALID_ARGUMENT naming it, and nothing is
 * made. */
KVS_API kvs_status kvs_comm_callbacks_create(const kvs_comm_callbacks *callbacks, int rank,
                                             int size, int timeout_ms, kvs_comm_t *out,
                                             kvs_error *err);

KVS_API void kvs_comm_destroy(kvs_comm_t comm);
/* 0 and -1 for NULL. */
KVS_API int kvs_comm_rank(const struct kvs_comm *comm);
KVS_API int kvs_comm_size(const struct kvs_comm *comm);
/* "self", "loopback", "mpi", "nccl", "callbacks"; "" for NULL. */
KVS_API const char *kvs_comm_backend(const struct kvs_comm *comm);
/* The deadline of every later wait; > 0. */
KVS_API kvs_status kvs_comm_set_timeout_ms(kvs_comm_t comm, int timeout_ms, kvs_error *err);

/* Point to point: this rank's batch of n transfers (a send to, or a receive
 * from, each one's peer; prefill ranks handing a request's KV rows to
 * decode ranks), run as one group (NCCL: one ncclGroupStart/End; MPI:
 * every Isend and Irecv posted, then one wait), so that sends and
 * receives between the same ranks, in either order, never deadlock, and a
 * send to this rank itself with its receive in the same batch is allowed.
 * Returns once every transfer of the batch completed on this rank: sent
 * data may be reused and received data is in place. On nccl that means
 * the communicator's own stream ran the group and the call waited for it
 * against the deadline, as for its collectives, so later work on any
 * stream reads the received bytes; device work that writes the sent data
 * must be complete before the call (the communicator's stream is not the
 * engine's). MPI moves a transfer above 1 GiB in pieces of 1 GiB, so
 * sizes past INT_MAX work there too.
 *
 * Matching: the k-th send from rank A to rank B matches B's k-th receive
 * from A, counted over the communicator's life (not per batch), and the
 * two must have the same size. Transfers of 0 bytes move nothing and take
 * no part in matching (their data may be NULL). Not collective: only the
 * ranks named as peers take part, each with its own batch.
 *
 * Refused with KVS_ERR_INVALID_ARGUMENT, changing nothing: a NULL comm, a
 * NULL array with n > 0, a peer outside [0, size), NULL data with bytes >
 * 0 (naming the transfer). A communicator without point-to-point (a
 * callbacks communicator without `exchange`) is KVS_ERR_UNSUPPORTED naming
 * its backend, also changing nothing. A failure, a size mismatch with the
 * peer or the communicator's deadline (KVS_ERR_TIMEOUT, or KVS_ERR_COMM
 * when the backend noticed the failure) names the exchange, the peers and
 * the bytes, and poisons the communicator as a failed collective does.
 * After such a failure, self, loopback and nccl (which aborted its NCCL
 * communicator) touch no transfer's memory again; on mpi a send that did
 * not complete may still read its data, and a receive MPI had already
 * matched may still write its, until MPI ends; on callbacks, what the
 * engine's callback left running is the engine's. */
KVS_API kvs_status kvs_comm_exchange(kvs_comm_t comm, const kvs_comm_transfer *transfers, size_t n,
                                     kvs_error *err);

/* ---- kvplan, in process ----
 *
 * kvplan's own code, run in this process: args[0] is the subcommand
 * ("plan", "fit", "solve" or "transfer"), the rest its words as the command line
 * takes them ("--budget", "80GiB" or "--budget=80GiB"; "--json" for the
 * JSON object). *out gets what kvplan printed on standard output, *notes
 * (when notes is not NULL) what it printed on standard error; both are
 * NUL-terminated and freed with kvs_free, also after a refusal (a plan
 * that cannot be made prints a JSON error object with --json). KVS_OK
 * when kvplan exited 0, or fit exited 1 with its answer (no layout fits,
 * as its JSON says). A refusal is KVS_ERR_PARSE for bad usage (exit 2),
 * else the failure the run last met (KVS_ERR_BUDGET_TOO_SMALL,
 * KVS_ERR_IO, ...; KVS_ERR_UNSUPPORTED when none was named), with
 * kvplan's last line of standard error as the message, word for word.
 * Runs are one at a time (kvplan's parser is process-wide). */
KVS_API kvs_status kvs_plan_run(const char *const *args, size_t n, char **out, char **notes,
                                kvs_error *err);
/* Frees what kvs_plan_run returned; NULL is accepted. */
KVS_API void kvs_free(void *p);

/* ---- the node: one rank's KV manager ---- */

typedef struct kvs_node *kvs_node_t;

/* Where a node's tables live. */
typedef enum kvs_node_device {
  KVS_NODE_DEVICE_AUTO = 0, /* cuda where the CUDA backend sees a GPU, else cpu */
  KVS_NODE_DEVICE_CPU = 1,  /* a host twin running the kernels' CPU references */
  KVS_NODE_DEVICE_CUDA = 2  /* device tables through the CUDA backend */
} kvs_node_device;

/* local_rank / host_index: read the launcher's environment, or check
 * nothing (a cluster simulated on one machine). */
#define KVS_NODE_FROM_LAUNCHER (-2)
#define KVS_NODE_UNCHECKED (-1)

typedef struct kvs_node_options {
  size_t size; /* sizeof(kvs_node_options); kvs_node_options_init sets it */
  /* The model and the pool's shape: the same on every rank. */
  const kvs_geometry *geometry; /* required */
  kvs_kv_dtype kv_dtype;        /* KVS_KV_BF16 */
  uint64_t qk_rope_head_dim;    /* fp8 rows keep this many dims in bf16 (64: DSV4's) */
  kvs_state_rings state_rings;  /* KVS_STATE_RINGS_PER_REQUEST: max_running + 1 slots */
  double swa_ratio;             /* the window's share of the history (0.125) */
  uint64_t page;                /* tokens per page (128) */
  uint64_t max_seq_len;         /* the longest request (1048576) */
  uint64_t max_running;         /* requests at once (64) */
  bool radix;                   /* prefix-cache headroom in the window floor */
  uint64_t floor_win_pages;     /* 0: derived from the four above */
  uint64_t n_scratch;           /* scratch rows per compressed pool (1) */
  /* The layout: tp * pp must equal the communicator's size. */
  int tp, pp;
  /* NULL or "auto", "live", "bundled", an hwloc XML export, or a
   * comma-separated list of them (one per host). */
  const char *topology;
  /* The hosts the topology describes (0: the hosts the ranks run on,
   * found from their host names), and whether a tensor-parallel group may
   * span hosts. */
  size_t hosts;
  bool allow_cross_host_tp;
  /* -1: the plan's GPU; >= 0: the CUDA device the engine chose for this
   * rank (its tables go there). */
  int cuda_device;
  kvs_node_device device;
  /* The calling thread and host buffers bound to the GPU's NUMA node. */
  bool bind_numa;
  /* The budget: budget_bytes for every GPU, or budget_per_gpu (one per
   * GPU in the topology's order); neither: the GPU's free memory (measured
   * on a live GPU, else its known total) x memory_ratio - reserve_bytes -
   * the weights not loaded yet. */
  uint64_t budget_bytes;
  const uint64_t *budget_per_gpu;
  size_t n_budget_per_gpu;
  double memory_ratio;    /* 0.90 */
  uint64_t reserve_bytes; /* 512 MiB */
  uint64_t weights_bytes; /* per GPU, or weights_per_gpu (one per GPU) */
  const uint64_t *weights_per_gpu;
  size_t n_weights_per_gpu;
  /* The step. */
  size_t max_batch;     /* rows a step's batch may have (0: max_running) */
  size_t step_capacity; /* journal entries per step (0: from the pool's chunk budget) */
  uint64_t check_every; /* steps between digest checks (64; 0: on demand only) */
  bool check_integrity; /* each check also checks the pool's invariants */
  bool digest_steps;    /* each step hashes its ring contexts into the digest */
  /* Where the launcher put this rank, checked against the plan
   * (KVS_NODE_FROM_LAUNCHER, KVS_NODE_UNCHECKED or the value), and this
   * rank's host name (NULL: gethostname). */
  int local_rank;
  int host_index;
  const char *host;
  /* The engine's CUDA stream (a cudaStream_t). NULL is the legacy default
   * stream, as CUDA reads a NULL stream (torch's default stream has
   * cuda_stream 0): it is the engine's stream like any other. The node's
   * device work of a step waits (on the device) for the engine's work
   * queued before the step that read the same result buffers, and the
   * engine's later work on this stream waits for the step's results; a
   * host tier's copies are queued on it. It must outlive the node. An
   * engine that orders every stream itself by the step's event sets
   * no_stream instead (below). */
  void *stream;
  /* The steps' communicator: NULL, the one create was given; "nccl", an
   * NCCL communicator of the node's own on its plan's GPU (its tables'
   * device), set up over the given one, which then serves create only. */
  const char *step_backend;
  /* Capture each step parity's device work once as a CUDA graph and
   * replay it (true); false launches the same work each step. */
  bool cuda_graphs;
  /* Keep a prefix cache (kvs_node_prefix_*): false. */
  bool prefix_cache;
  /* With the prefix cache, a host tier of this many bytes of the machine's
   * memory (0: none): evicted blocks move to its slots and a match can
   * reach past the GPU index into them (kvs_node_prefix_fetch). Every rank
   * keeps its own copy of a slot (its stage's compressed and indexer rows
   * of the page), so a slot costs the machine the sum over the ranks it
   * runs (kvs_node_prefix_counts.host_page_bytes). The node moves the
   * rows itself, in each step's journal order: pinned host memory on a
   * GPU, copies queued on `stream` (the engine's) after the work the
   * engine queued before the step and ahead of what it queues after.
   * Without `stream` they go on the tables' own stream, ordered only
   * before the step's event: the engine's work of earlier steps must then
   * be finished when it calls kvs_node_step. */
  uint64_t host_cache_bytes;
  /* Keep and agree on the indexes only, moving no rows (false): no ring
   * clears at admission, no tail-state restores, no host-tier copies. For a
   * simulator whose tables hold no KV and which prices the copies itself
   * (kvsim). */
  bool index_only;
  /* No engine stream (false): the node orders nothing against the
   * engine's streams, whose work must wait for the step's event (the
   * result's `event`) and be done with a result buffer before the step
   * after next; a host tier's copies then go on the tables' own stream.
   * Refused together with a non-NULL stream. */
  bool no_stream;
  /* ---- the step's contract with an engine (docs/engines.md, "The step") */
  /* Steps carry the leader's batch to every rank (false): a follower passes
   * no batch (NULL) and its result holds the leader's rows (requests,
   * positions, lengths), so the step is the engine's one collective. */
  bool carry_batch;
  /* Bytes of the engine's own a step carries from the leader to every rank
   * (kvs_node_batch.payload; 0: none), at most KVS_NODE_MAX_PAYLOAD_BYTES. */
  size_t max_payload_bytes;
  /* The engine's result buffers (NULL: the node's own, which alternate by
   * step parity, so a step's results stay valid until the step after
   * next): every step's results are copied there, the same addresses
   * every step, so a CUDA graph of the forward can read them. Read at
   * create; device memory of the node's device on a cuda node. */
  const struct kvs_node_result_buffers *result_buffers;
  /* The engine says when it has read a step's results (kvs_node_release)
   * instead of the node taking its stream's order (false). A step that
   * would overwrite results not released (step k - 2's, or k - 1's with
   * result_buffers) is refused before anything collective. For overlap
   * schedulers, whose step k + 1 runs before the forward of step k. */
  bool explicit_release;
  /* ---- the prefix cache's disk tier (docs/operators.md, "Tiers") */
  /* Bytes of disk for it (0: none), priced as the host tier is: every rank
   * keeps its own blocks (its layers' rows of each page), so a block costs
   * the sum over the ranks a machine runs. Cached blocks are written
   * through, once each, soon after they are cached; a match reaches into
   * the tier past the GPU index and the host tier, and a restarted node
   * finds the blocks every rank holds. Needs prefix_cache and disk_path. */
  uint64_t disk_cache_bytes;
  /* The tier's folder: rank r keeps its blocks in `disk_path/rank-r`
   * (made when missing). */
  const char *disk_path;
  /* The model's weights, by a name the engine chooses: every stored block
   * is signed with it, and a block of another name is refused. Required
   * with a disk tier. */
  const char *model_name;
} kvs_node_options;

#define KVS_NODE_MAX_PAYLOAD_BYTES (16u << 20)

/* The engine's result buffers: own, prev, csa_loc and hca_loc hold
 * max_batch rows, ring max_batch x page (kvs_node_step_result's arrays). */
typedef struct kvs_node_result_buffers {
  size_t size; /* sizeof(kvs_node_result_buffers) */
  int64_t *own;
  int64_t *prev;
  int64_t *ring;
  int64_t *csa_loc;
  int64_t *hca_loc;
} kvs_node_result_buffers;

/* The defaults above, with size set. */
KVS_API void kvs_node_options_init(kvs_node_options *options);

/* Collective: plans every rank from the topology and the budgets (the
 * plan kvplan prints for the same options, byte for byte), carves this
 * rank's tables, and builds the step runtime. Every rank fails alike,
 * naming the lowest failing rank and what failed there; nothing stays
 * allocated then. comm is borrowed and must outlive the node. */
KVS_API kvs_status kvs_node_create(kvs_comm_t comm, const kvs_node_options *options,
                                   kvs_node_t *out, kvs_error *err);
KVS_API void kvs_node_destroy(kvs_node_t node);

/* Collective, as kvs_node_create: a node from flags, kvplan's names and
 * values, one string each ("--page=128", "--budget=9GiB", "--radix"),
 * read by kvplan's own parsers, so a value kvplan refuses is refused with
 * the same words and the same flags size the same pool; then the node's
 * own (--device=cpu|cuda|auto, --stream=ADDRESS, --check-every=N, ...).
 * kvs_node_flags_help lists them all. A flag given twice, an unknown one
 * (named, with the nearest known) and kvplan's report-only flags are
 * KVS_ERR_PARSE before anything collective; every rank must pass the same
 * flags (a rank refused alone leaves the others waiting until the
 * communicator's deadline). On a live GPU the budget is measured now: the
 * engine's weights already loaded are not counted again (--weights gives
 * weights still to come). */
KVS_API kvs_status kvs_node_create_flags(kvs_comm_t comm, const char *const *flags, size_t n,
                                         kvs_node_t *out, kvs_error *err);
KVS_API const char *kvs_node_flags_help(void);

/* What create decided (0, -1 or false for NULL). */
KVS_API int kvs_node_rank(const struct kvs_node *node);
KVS_API int kvs_node_size(const struct kvs_node *node);
KVS_API bool kvs_node_is_leader(const struct kvs_node *node);
KVS_API uint64_t kvs_node_page(const struct kvs_node *node);
/* Full-history pages, identical on every rank, and the window's; both
 * count their reserved dummy page, the last one (full page num_pages - 1,
 * window page window_pages - 1), where graph-padded rows write. */
KVS_API uint64_t kvs_node_num_pages(const struct kvs_node *node);
KVS_API uint64_t kvs_node_window_pages(const struct kvs_node *node);
KVS_API uint64_t kvs_node_max_running(const struct kvs_node *node);
/* KVS_NODE_DEVICE_CPU or _CUDA, and the CUDA device (-1 on the host). */
KVS_API kvs_node_device kvs_node_device_of(const struct kvs_node *node);
KVS_API int kvs_node_cuda_device(const struct kvs_node *node);
/* The full pages an engine allocates from: 0 .. usable_pages - 1, every
 * full page but the dummy, whose number it is (kvs_node_num_pages - 1;
 * binding or freeing the dummy is refused). 0 for NULL. */
KVS_API uint64_t kvs_node_usable_pages(const struct kvs_node *node);
/* Local, any rank: window pages free for kvs_node_bind now (on the leader
 * its changes since the last step count at once; on a follower they count
 * from the step that carries them). A prefix cache's retained tails are
 * bound, not free: *droppable (may be NULL) gets how many of them
 * kvs_node_prefix_evict(node, 0, need_window_pages, ...) could give back
 * now (the tails of blocks no running request holds and none re-prefills;
 * 0 without a prefix cache), so a bind of up to free + *droppable window
 * pages succeeds once that eviction ran, without freeing any request's
 * pages. 0 for NULL. */
KVS_API uint64_t kvs_node_free_window_pages(const struct kvs_node *node, uint64_t *droppable);
/* Leader-only mutations, between steps; a follower's call is refused
 * (KVS_ERR_INVALID_ARGUMENT naming the rank) and changes nothing. Each
 * is journaled and reaches every rank with the next step.
 *   admit:  a running request's ring slot (-1 with per-page rings), or
 *           KVS_ERR_EXHAUSTED when max_running requests run;
 *   bind:   window pages for whole full pages of the request's
 *           full-pool token locations (contiguous, ascending, whole
 *           pages), KVS_ERR_EXHAUSTED when the window is full (the
 *           message says how many window pages retained prefix tails
 *           hold and how many kvs_node_prefix_evict's need_window_pages
 *           would give back);
 *   free:   those pages' window bindings back (idempotent);
 *   finish: the request's slot back. */
KVS_API kvs_status kvs_node_admit(kvs_node_t node, uint64_t request, int64_t *slot, kvs_error *err);
KVS_API kvs_status kvs_node_bind(kvs_node_t node, uint64_t request, const int64_t *locs, size_t n,
                                 kvs_error *err);
KVS_API kvs_status kvs_node_free(kvs_node_t node, const int64_t *locs, size_t n, kvs_error *err);
/* The same in pages, the unit of block tables and the prefix cache: one
 * full-page number per page (0 .. kvs_node_usable_pages - 1), bound or
 * freed whole; a page named twice is refused, and free skips negative
 * entries (a block table's unassigned -1). The units' rule: a location is
 * a token's row of the full history (page number * page + offset), a page
 * is a full page's number; errors name each as what it is ("location L",
 * "full page F", "window page W"). */
KVS_API kvs_status kvs_node_bind_pages(kvs_node_t node, uint64_t request, const int64_t *pages,
                                       size_t n, kvs_error *err);
KVS_API kvs_status kvs_node_free_pages(kvs_node_t node, const int64_t *pages, size_t n,
                                       kvs_error *err);
KVS_API kvs_status kvs_node_finish(kvs_node_t node, uint64_t request, kvs_error *err);

/* A step's batch: the rows whose ring contexts the step computes. Row r
 * decodes position positions[r] (negative: an idle, graph-padding row) of
 * request requests[r]; its block row holds full-page numbers (-1:
 * unassigned): the request's pages from its first (`stride` of them), or,
 * with window_rows, exactly two: the page of block pos/P - 1 (-1 when pos <
 * P) and the page of block pos/P, the only two a window of P tokens reads. */
typedef struct kvs_node_batch {
  size_t size; /* sizeof(kvs_node_batch) */
  size_t n;
  const uint64_t *requests;
  const int64_t *positions;
  const int32_t *block_table;
  uint64_t stride; /* with window_rows, 2 */
  bool window_rows;
  /* Range rows (NULL: every row is one position): row r covers positions
   * positions[r] .. positions[r] + lengths[r] - 1 (lengths[r] >= 1), a
   * prefill chunk in one row, within its block row (full rows only), and
   * its results are those of its last position; the engine reads the
   * other positions' rows from the mapping (docs/engines.md). */
  const int64_t *lengths;
  /* The leader's bytes for every rank (max_payload_bytes; a follower's
   * must be NULL and 0). */
  const void *payload;
  size_t payload_bytes;
} kvs_node_batch;

/* What a step did and where its ring contexts are: n own and prev window
 * slots, n x page ring slots, the n ratio-4 and ratio-128 ring locations;
 * in device memory on a cuda node, else host memory; valid until the step
 * after next (the results are double-buffered), or until the next step in
 * the engine's result_buffers. */
typedef struct kvs_node_step_result {
  size_t size; /* sizeof(kvs_node_step_result), set by the caller */
  uint64_t step;
  size_t entries; /* bindings and frees the step carried */
  size_t binds;
  size_t frees;
  size_t n;
  uint64_t page;
  bool on_device;
  const int64_t *own;
  const int64_t *prev;
  const int64_t *ring;
  const int64_t *csa_loc;
  const int64_t *hca_loc;
  /* A cudaEvent_t recorded after the step's device work (NULL on the
   * host): an engine's other streams wait for it. */
  void *event;
  uint64_t digest; /* of the ring contexts, with digest_steps; else 0 */
  /* The step's rows as this rank stepped them (on a follower with
   * carry_batch, the leader's) and the leader's payload: host memory,
   * valid until the step after next. lengths is NULL when every row is
   * one position. */
  const uint64_t *requests;
  const int64_t *positions;
  const int64_t *lengths;
  const void *payload;
  size_t payload_bytes;
} kvs_node_step_result;

/* Collective, every rank, in order: the leader's bindings since the last
 * step reach every rank and its tables, then the batch's ring contexts
 * (batch NULL or n 0: none). KVS_ERR_DIVERGENCE means this rank found
 * itself out of step with the leader: the step still counted, and the
 * next check names the page. Other failures stop the node. out may be
 * NULL. */
KVS_API kvs_status kvs_node_step(kvs_node_t node, const kvs_node_batch *batch,
                                 kvs_node_step_result *out, kvs_error *err);

/* Local, any rank: the engine's reads of step `step`'s results are all
 * queued on `stream` (a cudaStream_t; NULL: the legacy default stream)
 * before this call, or done on the host. Needed with explicit_release (else
 * accepted and ordering as said): the step that next writes those results
 * waits for that stream's work on the device. Refused outside the two
 * steps whose results the node holds, and on a stream that is capturing a
 * CUDA graph (release between replays, after the graph's launch). */
KVS_API kvs_status kvs_node_release(kvs_node_t node, uint64_t step, void *stream, kvs_error *err);
/* Local: options.result_buffers for a node made without them (from flags,
 * as Python's), or NULL for the node's own again; before the node's first
 * step only (a step's results were handed out at the old addresses), the
 * same choice on every rank (kvs_node_capacity's result_depth). */
KVS_API kvs_status kvs_node_set_result_buffers(kvs_node_t node,
                                               const kvs_node_result_buffers *buffers,
                                               kvs_error *err);

/* What the leader will accept before its next step, as every rank knows it:
 * on a follower the counts as of the last step it applied, which are the
 * leader's just after that step, before its new changes. A scheduler that
 * is not the leader (a replicated one on every rank, or a process of its
 * own that is sent this struct) decides from them alone: admit succeeds
 * while running < max_running; bind of k window pages while
 * k <= free_window_pages (+ droppable_window_pages once the prefix cache's
 * eviction gave them back); every admit, bind or free page, finish and
 * prefix change journals entries, at most journal_room in one step (a
 * bind of k pages takes k, a free of k pages up to k, admit and finish one
 * each with per-request rings). */
typedef struct kvs_node_capacity {
  size_t size;   /* sizeof(kvs_node_capacity), set by the caller */
  uint64_t step; /* the next step */
  uint64_t running;
  uint64_t max_running;
  uint64_t free_window_pages;
  uint64_t droppable_window_pages;
  uint64_t usable_pages;
  size_t journal_room; /* entries the next step can still carry */
  size_t step_capacity;
  size_t max_batch;
  size_t max_payload_bytes;
  /* Steps a result stays valid for: 2 (the node's own buffers) or 1 (the
   * engine's result_buffers). */
  unsigned result_depth;
} kvs_node_capacity;

/* Local, any rank. */
KVS_API kvs_status kvs_node_capacity_of(const struct kvs_node *node, kvs_node_capacity *out,
                                        kvs_error *err);

/* Local, any rank: out[i] = the window slot of full-pool location
 * locs[i], -1 where unbound. */
KVS_API kvs_status kvs_node_translate(const struct kvs_node *node, const int64_t *locs, size_t n,
                                      int64_t *out, kvs_error *err);

/* ---- the node's memory, viewed in place ----
 *
 * What an engine's kernels read: the full -> window mapping and each tier
 * of the carve, typed and shaped as the kernels see them, with strides in
 * elements (DLPack's convention). Tiers with regions per layer are 3-D:
 * [layers of that kind, rows + scratch rows, row elements] for bf16 KV and
 * indexer rows (bf16) and rings (fp32); fp8 KV and indexer tiers, whose
 * pages keep their rows' payloads and then their scales (FlashMLA's and
 * DeepGEMM's paged layouts), are [layers, pages, page bytes] of uint8,
 * the last page holding the scratch rows. The layer axis strides over
 * each region's aligned span. On a cuda node the
 * views are device memory of kvs_node_cuda_device; on the host twin the
 * carve's address range is reserved on the first view (pages cost
 * memory once written). Views live as long as the node. */
typedef enum kvs_view_dtype {
  KVS_VIEW_INT64 = 0,
  KVS_VIEW_INT32 = 1,
  KVS_VIEW_UINT8 = 2,
  KVS_VIEW_BF16 = 3,
  KVS_VIEW_FP32 = 4
} kvs_view_dtype;

#define KVS_VIEW_MAX_DIMS 3

typedef struct kvs_node_view {
  size_t size;      /* sizeof(kvs_node_view), set by the caller */
  const char *name; /* "mapping", "window", "compressed_4", "compressed_128",
                       "indexer", "state_4", "state_128", "index_state" */
  void *data;
  kvs_view_dtype dtype;
  int ndim;
  int64_t shape[KVS_VIEW_MAX_DIMS];
  int64_t strides[KVS_VIEW_MAX_DIMS]; /* elements */
  bool on_device;
  int device;      /* the CUDA device; -1 on the host */
  uint64_t offset; /* bytes from the carve's start (the mapping's own, on the host) */
  uint64_t bytes;  /* from data to the end of the last row */
} kvs_node_view;

/* The views this node has (tiers without layers are left out), 0 for
 * NULL; then view `index` of them, in carve order. An index past the
 * count is KVS_ERR_OUT_OF_RANGE naming both. */
KVS_API size_t kvs_node_view_count(const struct kvs_node *node);
KVS_API kvs_status kvs_node_view_at(kvs_node_t node, size_t index, kvs_node_view *out,
                                    kvs_error *err);
/* Bytes of one element of a view's dtype (0 for an unknown one). */
KVS_API size_t kvs_view_dtype_bytes(kvs_view_dtype dtype);

/* ---- the prefix cache (options.prefix_cache) ----
 *
 * Full pages of finished or running requests stay cached under a prefix
 * index over page-aligned blocks whose identity the engine gives: one key
 * per full page (a chained hash of its P tokens, say; equal keys under
 * equal parents mean equal blocks). A request that shares a prefix reads
 * the cached pages (their compressed and indexer rows) instead of
 * recomputing them. A hit ends on a multiple of every compression ratio
 * and of P, below the prompt's last token. There the ratio-128 rings are
 * empty; the ratio-4 compressors overlap (the first block after a hit at
 * H reads the first halves of the ring rows of H - 4 .. H - 1). With rings
 * per request a node with a prefix cache keeps them per window page (its
 * tail state, written by the engine with the page: two rows per window
 * page after the slots' rings in the state_4 and index_state views) and
 * seeds an exact hit's ring slot from its tail's in the step after the
 * request holds both the hit and its slot (kvs_node_admit, either order);
 * every ring slot is cleared when it is bound. docs/engines.md, "The
 * tables' contract", gives every row and formula. The window tokens before it are the window page
 * of the hit's last page: retained by the cache (a "tail" left by the request that inserted it), or
 * re-prefilled by the hitting request (the engine's re-prefill length; the window page is then
 * bound for it alone, and nobody else hits through it until it releases): the match takes what
 * costs less, or truncates to the deepest retained boundary. A cached
 * page can never be bound for writing (kvs_node_bind refuses it), and a
 * tail's window binding is the cache's (kvs_node_free skips it). Pages
 * here are full-page numbers (location / P).
 *
 * The leader decides (the mutations are leader-only, between steps, and
 * journaled like bindings); every rank replays, digests and checks the
 * index and its reference counts, and a check that finds them differing
 * names the cached block (KVS_DIVERGENCE_PREFIX_BLOCK: full_page the block,
 * leader_window_page and rank_window_page its references there, -1: not
 * cached). */
/* The tail state of a window page (rings per request with a prefix
 * cache): the first halves (kv and score) of the ratio-4 ring rows of the
 * page's last KVS_TAIL_STATE_POSITIONS positions (P - 4 .. P - 1), in
 * KVS_TAIL_STATE_ROWS ring-width rows of the state_4 and index_state
 * views: window page w's at row (max_running + 1) x 8 + 2w, position
 * P - 4 + i in row i / 2, half i % 2, each half [kv first half | score
 * first half]. */
#define KVS_TAIL_STATE_POSITIONS 4u
#define KVS_TAIL_STATE_ROWS 2u

typedef struct kvs_node_prefix_hit {
  size_t size;               /* sizeof(kvs_node_prefix_hit), set by the caller */
  uint64_t matched_pages;    /* consecutive cached pages of the keys */
  uint64_t hit_tokens;       /* positions [0, hit_tokens) are reused */
  uint64_t reprefill_tokens; /* window tokens recomputed before hit_tokens */
  uint64_t truncated_tokens; /* matched, aligned tokens recomputed for want of a tail */
  int64_t block;             /* the hit's last block (its full page); -1: no hit */
  bool reprefill;
  /* Blocks past `block` (-1: the root) found in the host tier: take the
   * hit with kvs_node_prefix_fetch (it always re-prefills the window). */
  uint64_t host_pages;
  /* Which block `block` named when matched: acquire and fetch refuse the hit
   * ("match again") once that block left the index, even if its page came
   * back as another block. Copy hits whole; never make one up. */
  uint64_t stamp;
  /* Of the host_pages blocks, those the fetch reads from the disk tier
   * (the rest come from the host tier). */
  uint64_t disk_pages;
} kvs_node_prefix_hit;

typedef struct kvs_node_prefix_counts {
  size_t size;              /* sizeof(kvs_node_prefix_counts), set by the caller */
  uint64_t blocks;          /* cached full pages */
  uint64_t tails;           /* retained window pages */
  uint64_t holds;           /* requests holding a cached path */
  uint64_t refs;            /* the blocks' reference counts, summed */
  uint64_t evictable;       /* unreferenced leaves */
  uint64_t evictions;       /* blocks evicted so far */
  uint64_t tail_drops;      /* tails dropped so far */
  uint64_t digest;          /* the index's share of the bindings' digest */
  uint64_t host_slots;      /* the host tier's pages (0: none) */
  uint64_t host_blocks;     /* of them, holding a block */
  uint64_t spills;          /* blocks moved to the host tier so far */
  uint64_t fetches;         /* blocks fetched back so far */
  uint64_t host_drops;      /* blocks the full tier let go, least recently used first */
  uint64_t host_page_bytes; /* a host slot's cost to the machine: one page's rows per rank */
  uint64_t disk_slots;      /* the disk tier's pages (0: none) */
  uint64_t disk_blocks;     /* of them, holding a block */
  uint64_t stores;          /* blocks written to it so far (every rank wrote its own) */
  uint64_t loads;           /* blocks read back from it so far */
  uint64_t disk_drops;      /* blocks it let go, least recently used first */
  uint64_t store_missed;    /* leader: blocks evicted before their write */
  uint64_t disk_found;      /* this rank's blocks found at creation */
  uint64_t disk_refused;    /* ... refused (another model, geometry or layer range) */
  uint64_t disk_agreed;     /* the blocks every rank held, seeded at creation */
  uint64_t disk_failures;   /* this rank's failed reads and writes */
  /* This rank's host-tier fetches refused by their seal (the rows' digest
   * taken at the spill, seeded by the block's chain): their pages got
   * zeroed rows and the step said which block. */
  uint64_t host_failures;
} kvs_node_prefix_counts;

/* Any rank, read-only: the hit keys[0..n) give a prompt of prompt_tokens
 * (reprefill_tokens: what recomputing a missing window costs the engine,
 * 0 for exact hits only). pages (NULL, or n entries): entry i below
 * hit_tokens / P is the full page the hit reuses for key i (-1: a block of
 * the host tier, which kvs_node_prefix_fetch brings back into a page of
 * the engine's); every other entry is -1, also the entries of keys that
 * matched (matched_pages counts them) but that the hit does not reuse. */
KVS_API kvs_status kvs_node_prefix_match(const struct kvs_node *node, const uint64_t *keys,
                                         size_t n, uint64_t prompt_tokens,
                                         uint64_t reprefill_tokens, kvs_node_prefix_hit *hit,
                                         int64_t *pages, kvs_error *err);
/* Leader: request takes a match's hit (references on its path; a
 * re-prefill hit also a window page for its last page). */
KVS_API kvs_status kvs_node_prefix_acquire(kvs_node_t node, uint64_t request,
                                           const kvs_node_prefix_hit *hit, kvs_error *err);
/* Leader: request takes a hit that reaches into the host tier: pages
 * [0..hit->host_pages) are free full pages of the engine's that become the
 * fetched blocks (keys as matched, from the prompt's first page); the
 * request then holds the deepest and re-prefills its window. Every rank
 * replays which host slot fills which page. Refused, changing nothing,
 * when the index or the tier changed since the match. */
KVS_API kvs_status kvs_node_prefix_fetch(kvs_node_t node, uint64_t request,
                                         const kvs_node_prefix_hit *hit, const uint64_t *keys,
                                         size_t n_keys, const int64_t *pages, kvs_error *err);
/* Leader: request's fully written full pages pages[0..n) with their keys
 * join the index below what it holds; taken[i] says whether the cache
 * took page i (0: that key was cached already and the page stays the
 * engine's). tails[i] != 0 (tails may be NULL) keeps page i's window
 * binding as its block's tail. The request then holds the deepest block. */
KVS_API kvs_status kvs_node_prefix_insert(kvs_node_t node, uint64_t request, const uint64_t *keys,
                                          const int64_t *pages, const uint8_t *tails, size_t n,
                                          uint8_t *taken, kvs_error *err);
/* Leader: the request lets go of its cached path (at its finish), and a
 * tail its hit re-prefilled becomes readable: call it only once the
 * request's prefill passed the hit's boundary (hit_tokens). */
KVS_API kvs_status kvs_node_prefix_release(kvs_node_t node, uint64_t request, kvs_error *err);
/* Leader: the same for a request that stops before its prefill reached
 * the hit's boundary (refused, cancelled): the tail it did not write is
 * dropped and its window page freed, never read. */
KVS_API kvs_status kvs_node_prefix_abandon(kvs_node_t node, uint64_t request, kvs_error *err);
/* Leader: LRU eviction. Drops tails of unreferenced blocks until
 * need_window_pages window pages came back, then evicts unreferenced
 * leaves until need_pages full pages are in freed[0..*n_freed) (at most
 * cap), which are the engine's again. It stops early when nothing more is
 * evictable or the step is full (step, then evict again). */
KVS_API kvs_status kvs_node_prefix_evict(kvs_node_t node, uint64_t need_pages,
                                         uint64_t need_window_pages, int64_t *freed, size_t cap,
                                         size_t *n_freed, kvs_error *err);
/* Leader: the eviction a host hit needs, in one decision, so that it
 * never falls back to its GPU part: as kvs_node_prefix_evict(node,
 * need_pages, 0, ...), but it never evicts the hit's `block` (its GPU
 * path stays) and no spill takes the host slot of a block the hit fetches,
 * so the hit stays valid for kvs_node_prefix_fetch without a new match.
 * need_pages is the scheduler's: hit->host_pages (the fetched blocks) plus
 * the request's own pages past the hit (ceil(tokens / P) - hit_tokens / P)
 * less the free full pages the engine has for them. The call is refused,
 * changing nothing, when the hit is stale (match again) or the step's
 * journal cannot hold the evictions and the fetch together (4 entries an
 * eviction, 3 a fetched block, 3 more; KVS_ERR_JOURNAL_FULL: step, then
 * match again). Fewer than need_pages in *n_freed means nothing more was
 * evictable. */
KVS_API kvs_status kvs_node_prefix_evict_for_fetch(kvs_node_t node, const kvs_node_prefix_hit *hit,
                                                   const uint64_t *keys, size_t n_keys,
                                                   uint64_t need_pages, int64_t *freed, size_t cap,
                                                   size_t *n_freed, kvs_error *err);
/* Any rank: the index's counts (identical on every rank after a step);
 * KVS_ERR_UNSUPPORTED on a node without a prefix cache, as every
 * kvs_node_prefix_* call there. */
KVS_API kvs_status kvs_node_prefix_stats(const struct kvs_node *node, kvs_node_prefix_counts *out,
                                         kvs_error *err);

/* ---- prefill/decode: a request's rows from one node to another ----
 *
 * A request prefilled on one node (its prefill ranks) decodes on another
 * (its decode ranks), of another layout (prefill tp 1 x pp 4, decode tp 4;
 * the same tp on both). Its state is every pool's rows of its tokens
 * (docs/engines.md, "Prefill/decode"): the compressed and indexer rows of
 * each full page of its block table, the window rows of its tail pages,
 * its compress-state rings and (rings per request, with a prefix cache)
 * its tail pages' tail states; fp8 scales travel inside their pages. A
 * decode side whose prefix cache already holds the request's first H
 * tokens (an exact hit it acquired) receives only the rows past them. */

/* One unit of a request's rows on this rank: `bytes` of view `view`'s
 * layer `layer` at `address` (device memory on a cuda node), `offset`
 * bytes from the carve's start (kvs_node_view's offset), holding the
 * state of positions [first_token, end_token): what a transfer engine an
 * engine already runs (NIXL, Mooncake's, UCX) registers and moves. */
typedef struct kvs_node_rows {
  const char *view; /* "window", "compressed_4", "compressed_128", "indexer",
                       "state_4", "state_128", "index_state" */
  uint32_t layer;   /* the model's layer */
  bool tail_state;  /* a tail page's tail-state rows (state_4, index_state) */
  void *address;
  uint64_t offset;
  uint64_t bytes;
  uint64_t first_token, end_token;
} kvs_node_rows;

/* A request on one side of a transfer: its block table's pages (at least
 * ceil(tokens / page) of them, from its first; the decode side's own
 * pages, whose first reuse_tokens / page are the hit's), its tokens, and
 * on the decode side the tokens its cache already holds (a multiple of
 * the page; 0 without a hit). peers are the other side's ranks in the
 * link communicator: every rank of the other node. window_tokens (decode
 * side; the prefill side takes the decode side's): the window rows of the
 * request's last window_tokens positions move (all of them when it has
 * fewer; 0, or fewer than page - 1: the page - 1 a decode at `tokens`
 * reads), so that a page the decode
 * side will keep as a cached prefix's tail brings its window; the prefill
 * side must still hold those pages' window bindings. */
typedef struct kvs_node_transfer {
  size_t size; /* sizeof(kvs_node_transfer) */
  uint64_t request;
  const int64_t *pages;
  size_t n_pages;
  uint64_t tokens;
  uint64_t reuse_tokens;
  const int *peers;
  size_t n_peers;
  uint64_t window_tokens;
} kvs_node_transfer;

/* What a transfer moved, on this rank. On the decode side after a refusal
 * `view`, `layer` and the token range name the first unit whose digest
 * differed (view NULL: none differed; the transfer failed otherwise). */
typedef struct kvs_node_transfer_report {
  size_t size;           /* sizeof(kvs_node_transfer_report), set by the caller */
  uint64_t units;        /* units moved and digested (this rank's share) */
  uint64_t bytes;        /* their rows' bytes, exactly */
  uint64_t wire_bytes;   /* what the link carried: the rows, the page padding
                            inside runs of consecutive pages, headers, digests */
  uint64_t reused_bytes; /* rows not moved: the decode side's prefix */
  uint64_t messages;     /* point-to-point messages of the rows */
  double seconds;        /* the call's time on this rank */
  const char *view;
  uint32_t layer;
  uint64_t first_token, end_token;
} kvs_node_transfer_report;

/* Local, any rank: this rank's units of the request `transfer` describes
 * (its peers unused), in travel order (pool, layer, page), into
 * out[0..cap); *n the units there are (out may be NULL to count). A page,
 * window page or slot the request lacks on this rank is
 * KVS_ERR_INVALID_ARGUMENT naming it (a tail page not bound, no slot). */
KVS_API kvs_status kvs_node_request_rows(kvs_node_t node, const kvs_node_transfer *transfer,
                                         kvs_node_rows *out, size_t cap, size_t *n, kvs_error *err);

/* Leader of the decode node: admits the request `transfer` describes (its
 * peers unused; its slot in *slot, -1 with rings per window page) and
 * binds its tail pages past reuse_tokens (those whose window rows move)
 * to window pages, all or nothing (refused, changing nothing, when slots,
 * window pages or the step's journal run short). After the next step
 * every decode rank holds them; then every decode rank calls
 * kvs_node_receive_request. A hit (reuse_tokens > 0) is acquired first,
 * with kvs_node_prefix_acquire. */
KVS_API kvs_status kvs_node_import_admit(kvs_node_t node, const kvs_node_transfer *transfer,
                                         int64_t *slot, kvs_error *err);

/* Every prefill rank, paired with the decode ranks' receive: sends this
 * rank's layers' rows of the request to the decode ranks that need them
 * (every decode rank receives the rows of its layers once, from one
 * prefill rank holding them) over `link` (kvs_comm_exchange), with a
 * digest of each unit computed over its logical positions, then waits for
 * every decode rank's verdict: KVS_OK only when the decode node kept the
 * request; its refusal (a digest that differs, a header that does not
 * pair, a decode rank that failed) is this call's error, naming it. The
 * request stays the prefill node's either way (finish it, or send it
 * again, after). Rows move where they live: a host twin's over a link
 * that moves host memory (MPI, loopback, callbacks); a GPU node's device
 * to device over an NCCL link on its GPU, the small messages (headers,
 * digests, verdicts) staged through the link's device memory, and the
 * digests taken on the GPU by a kernel on the engine's stream, so after
 * the engine's writes queued there (with no stream, `no_stream`, the
 * engine's writes must have finished). Rows and link in different
 * memories are KVS_ERR_UNSUPPORTED saying which. */
KVS_API kvs_status kvs_node_send_request(kvs_node_t node, kvs_comm_t link,
                                         const kvs_node_transfer *transfer,
                                         kvs_node_transfer_report *report, kvs_error *err);

/* Collective over the decode node, every rank, after the step that
 * carried kvs_node_import_admit: receives this rank's layers' rows into
 * the request's pages, recomputes each unit's digest from this rank's
 * own tables (the views, the mapping, the slot, as an engine reads them)
 * and compares it with the prefill side's before returning, then every
 * decode rank agrees. A mismatch (KVS_ERR_CORRUPT naming the view, layer
 * and token range), a prefill rank that fails or misses the link's
 * deadline (naming it), or any disagreement refuses the request on every
 * decode rank: the leader frees its window pages, releases its hit and
 * finishes it (journaled: the next step returns them everywhere). */
KVS_API kvs_status kvs_node_receive_request(kvs_node_t node, kvs_comm_t link,
                                            const kvs_node_transfer *transfer,
                                            kvs_node_transfer_report *report, kvs_error *err);

/* What a check found differing between the ranks (Python's
 * kvshard.Divergence has the same names and values). */
typedef enum kvs_divergence {
  KVS_DIVERGENCE_NONE = 0,          /* every rank agrees */
  KVS_DIVERGENCE_BINDINGS = 1,      /* window bindings (full_page or request_slot names one) */
  KVS_DIVERGENCE_RING_CONTEXTS = 2, /* the steps' ring contexts, bindings agreeing */
  KVS_DIVERGENCE_INTEGRITY = 3,     /* a rank's pool or tables fail their integrity check */
  KVS_DIVERGENCE_STEPS = 4,         /* ranks are at different steps */
  KVS_DIVERGENCE_PREFIX_BLOCK = 5   /* a cached prefix block (full_page names it) */
} kvs_divergence;

/* "agree", "bindings", "ring contexts", "integrity", "steps", "prefix block";
 * "unknown" for any other value. */
KVS_API const char *kvs_divergence_name(kvs_divergence kind);

/* What a check found; identical on every rank. */
typedef struct kvs_node_report {
  size_t size;         /* sizeof(kvs_node_report), set by the caller */
  kvs_divergence kind; /* KVS_DIVERGENCE_NONE when every rank agrees */
  uint64_t step;       /* the last step applied */
  uint64_t digest;     /* the bindings' digest (the leader's) */
  uint64_t full_page;  /* the first differing full page; UINT64_MAX: none */
  int rank;            /* the first rank that differs; -1: none */
  int64_t leader_window_page;
  int64_t rank_window_page;
  uint64_t request_slot; /* a differing request slot; UINT64_MAX: none */
} kvs_node_report;

/* Collective: every rank's bindings, ring contexts and tables compared in
 * one allreduce; a difference is located by bisection and named.
 * KVS_ERR_DIVERGENCE on every rank then. report may be NULL. Between the
 * leader's changes (admit, bind, free, finish, the prefix calls) and the
 * step that carries them the ranks cannot agree yet: the check is then
 * KVS_ERR_PENDING on every rank ("N entries pending on the leader: step
 * first"), report untouched, nothing compared; step, then check. */
KVS_API kvs_status kvs_node_check(kvs_node_t node, kvs_node_report *report, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVSHARD_H */
