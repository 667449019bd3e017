"""The node: one rank's share of the KV cache, kept identical across ranks.

Every rank creates it with the same options, steps it in the same order
and checks it together; the leader (rank 0) alone admits, binds, frees and
finishes (and changes the prefix cache), and each change reaches every
rank with the next step.
"""

import ctypes
import dataclasses
import enum
import numbers
import weakref

import numpy as np

from . import _dlpack
from ._lib import (CError, Error, NodeBatch, NodeCapacity, NodePrefixCounts, NodePrefixHit,
                   NodeRows, NodeTransfer, NodeTransferReport,
                   NodeReport, NodeResultBuffers, NodeView, StepResult, c_bool, c_int, c_strings, call, check,
                   is_bool, lib, refuse_outside)
from ._options import NODE_OPTIONS, NODE_PYTHON_OPTIONS, to_flags
from .comm import comm_of

class Divergence(enum.IntEnum):
    """What a check found differing between the ranks (kvshard.h's
    kvs_divergence, the same names and values)."""
    NONE = 0
    BINDINGS = 1
    RING_CONTEXTS = 2
    INTEGRITY = 3
    STEPS = 4
    PREFIX_BLOCK = 5


def _kind_name(kind):
    """The name a report gives a kind: the library's (kvs_divergence_name)."""
    return lib().kvs_divergence_name(int(kind)).decode()
_NONE = (1 << 64) - 1
# The keys a step's batch dict takes (kvs_node_batch's fields).
_BATCH_KEYS = ("requests", "positions", "block_table", "window_rows", "lengths")
# numpy dtype -> the C type its arrays reach
_CTYPES = {np.dtype(np.int64): "int64_t", np.dtype(np.uint64): "uint64_t",
           np.dtype(np.int32): "int32_t", np.dtype(np.uint8): "uint8_t"}


def _destroy(handle, comm, owned):
    lib().kvs_node_destroy(handle)
    comm._returned()
    if owned:
        # Nothing runs over the node's own communicator once the C node is
        # gone, even when its Node was never closed (one still alive at
        # interpreter exit, where this runs as weakref.finalize's atexit
        # hook): Comm.close()'s refusal under an open Node would only print
        # a traceback at exit and leave the communicator undestroyed.
        comm._close(refuse_open=False)


class _Handle:
    """The C node and everything it borrows: its Comm (kvshard.h: the
    communicator must outlive the node) and the engine's stream object.
    Destroyed once the Node is closed and no view of its memory is left
    (each view, and each capsule a view handed out, keeps this object
    alive); the Comm is returned then, and closed when the node owned it.
    It is the node's ctypes argument (_as_parameter_), so a call in
    flight keeps it too."""

    def __init__(self, handle, comm, owned, borrowed):
        self._as_parameter_ = handle
        self.comm = comm
        self.borrowed = borrowed  # the stream object an engine passed, kept as long
        self.last_event = None  # the last step's event, for a consumer's stream
        self.result_buffers = None  # the engine's result arrays, which the C node borrows
        weakref.finalize(self, _destroy, handle, comm, owned)


def _host(values, name):
    """A torch tensor as numpy (CUDA ones refused); anything else as given."""
    if type(values).__module__.startswith("torch"):
        if getattr(values, "is_cuda", False):
            raise TypeError(f"{name} is a CUDA tensor; this call reads host memory: pass "
                            f"{name}.cpu()")
        return values.numpy()
    return values


def _entry(name, flat, shape):
    """An array entry's name: name[i] (name[i, j] for 2-D)."""
    return f"{name}[{', '.join(str(int(i)) for i in np.unravel_index(flat, shape))}]"


def _in_range(arr, name, dtype):
    """Refuses (never wraps) an integer array holding a value the C type
    of `dtype` cannot: the one range check (refuse_outside) on the array's
    extremes, naming an entry at fault, as name[i]."""
    if arr.size:
        ctype = _CTYPES[np.dtype(dtype)]
        for extreme in (arr.min(), arr.max()):
            refuse_outside(lambda extreme=extreme: _entry(name, int(np.argmax(arr == extreme)),
                                                          arr.shape),
                           int(extreme), ctype)


def _int_array(values, name, dtype=np.int64):
    """Host integers as a contiguous array of `dtype` (a copy only where
    the type or layout needs one). CUDA tensors are refused: these calls
    read host memory. A value `dtype` cannot hold is refused, not cast."""
    if type(values) is np.ndarray and values.dtype == dtype and values.flags.c_contiguous:
        return values  # (a step's arrays, as an engine keeps them: nothing to check)
    values = _host(values, name)
    arr = np.asarray(values)
    if arr.size == 0:
        return np.zeros(0, dtype=dtype)
    if arr.dtype.kind in "fO" and not isinstance(values, np.ndarray):
        # Python values numpy did not type as integers (ints past int64
        # beside negative ones become floats; past uint64, objects): each
        # entry through the one check, as given.
        arr = np.asarray(values, dtype=object)
        ctype = _CTYPES[np.dtype(dtype)]
        return np.array([c_int(v, _entry(name, i, arr.shape), ctype)
                         for i, v in enumerate(arr.flat)], dtype=dtype)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got {arr.dtype}")
    if arr.dtype != dtype:
        _in_range(arr, name, dtype)
    return np.ascontiguousarray(arr, dtype=dtype)


def _request_id(request):
    return c_int(request, "request", "uint64_t")


def _count(value, name):
    """A uint64_t argument: an int from 0 to 2^64-1, as given."""
    return c_int(value, name, "uint64_t")


def _exact_array(values, name, dtype, what):
    """A 1-D sequence or array of integers as a contiguous array of
    `dtype`, refusing (never wrapping) what `dtype` cannot hold: other
    dtypes (bools and floats included), other shapes, values out of its
    range. CUDA tensors are refused as in _int_array."""
    values = _host(values, name)
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{name} must be 1-D {what}, got an array of shape {values.shape}")
        if values.dtype.kind not in "iu":
            raise TypeError(f"{name} must be 1-D {what}, got dtype {values.dtype}")
        _in_range(values, name, dtype)
        return np.ascontiguousarray(values, dtype=dtype)
    if isinstance(values, (str, bytes, bytearray)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be 1-D {what}, got {type(values).__name__}")
    ctype = _CTYPES[np.dtype(dtype)]
    return np.array([c_int(v, f"{name}[{i}]", ctype) for i, v in enumerate(list(values))],
                    dtype=dtype)


def _keys(keys, name="keys"):
    return _exact_array(keys, name, np.uint64, "unsigned 64-bit ints")


def _pages(pages, name="pages"):
    return _exact_array(pages, name, np.int64, "signed 64-bit ints")


def _flags(values, name, n):
    """n truths (bools, or ints 0 and 1) as uint8_t."""
    values = _host(values, name)
    if not isinstance(values, (np.ndarray, str, bytes, bytearray)) and hasattr(values, "__iter__"):
        values = list(values)  # read once: a generator is read here
    if isinstance(values, np.ndarray) and values.dtype == np.bool_:
        if values.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got an array of shape {values.shape}")
        a = values.astype(np.uint8)
    elif not isinstance(values, np.ndarray) and hasattr(values, "__iter__") and not isinstance(
            values, (str, bytes, bytearray)) and all(is_bool(v) for v in values):
        a = np.array([bool(v) for v in values], dtype=np.uint8)
    else:
        a = _exact_array(values, name, np.uint8, "bools (or 0 and 1)")
        if a.size and int(a.max()) > 1:
            raise ValueError(f"{name} holds {int(a.max())}: give bools, or 0 and 1")
    if a.size != n:
        raise ValueError(f"{name} has {a.size} entries for {n} keys")
    return a


@dataclasses.dataclass(frozen=True)
class PrefixHit:
    """What prefix_match found (kvs_node_prefix_hit, fields as in C):
    positions [0, hit_tokens) are reused; block is the hit's last block
    (its full page), -1 for no hit; host_pages > 0: blocks past it are in
    the host tier or the disk tier (disk_pages of them; take the hit with
    prefix_fetch). stamp: which block it was when
    matched (acquire and fetch refuse the hit once it left the index).
    pages: the full pages the hit reuses, hit_tokens // page of them, from
    the prompt's first page (-1: a host-tier block, which prefix_fetch
    brings back into a page of the engine's); empty when hit_tokens is 0,
    even when keys matched (matched_pages counts those)."""
    matched_pages: int
    hit_tokens: int
    reprefill_tokens: int
    truncated_tokens: int
    block: int
    reprefill: bool
    host_pages: int
    stamp: int
    pages: np.ndarray = dataclasses.field(default=None, compare=False, repr=False)
    # Of the host_pages blocks, those prefix_fetch reads from the disk tier.
    disk_pages: int = 0

    def _c(self):
        """As the C struct, each field checked against its C type (ctypes
        would cut an int past it: block 2**64 + 3 would name block 3)."""
        fields = {}
        for name in ("matched_pages", "hit_tokens", "reprefill_tokens", "truncated_tokens",
                     "host_pages", "stamp", "disk_pages"):
            fields[name] = _count(getattr(self, name), "hit." + name)
        block = c_int(self.block, "hit.block", "int64_t")
        return NodePrefixHit(ctypes.sizeof(NodePrefixHit), block=block,
                             reprefill=c_bool(self.reprefill, "hit.reprefill"), **fields)


@dataclasses.dataclass(frozen=True)
class Rows:
    """One unit of a request's rows on this rank (kvs_node_rows, fields as
    in C): `bytes` of view `view`'s model layer `layer` at `address`
    (device memory on a cuda node), `offset` bytes from the carve's start,
    the state of positions [first_token, end_token)."""
    view: str
    layer: int
    tail_state: bool
    address: int
    offset: int
    bytes: int
    first_token: int
    end_token: int


@dataclasses.dataclass(frozen=True)
class TransferReport:
    """What a transfer moved on this rank (kvs_node_transfer_report):
    units and their rows' bytes, what the link carried (wire_bytes), the
    rows the decode side's prefix saved (reused_bytes), messages, seconds;
    after a refusal on the decode side, the first differing unit's view,
    layer and positions (view None: none differed)."""
    units: int
    bytes: int
    wire_bytes: int
    reused_bytes: int
    messages: int
    seconds: float
    view: object
    layer: int
    first_token: int
    end_token: int


@dataclasses.dataclass(frozen=True)
class PrefixCounts:
    """The prefix cache's counts (kvs_node_prefix_counts, fields as in C)."""
    blocks: int
    tails: int
    holds: int
    refs: int
    evictable: int
    evictions: int
    tail_drops: int
    digest: int
    host_slots: int
    host_blocks: int
    spills: int
    fetches: int
    host_drops: int
    host_page_bytes: int
    disk_slots: int
    disk_blocks: int
    stores: int
    loads: int
    disk_drops: int
    store_missed: int
    disk_found: int
    disk_refused: int
    disk_agreed: int
    disk_failures: int
    host_failures: int


_RESULT_NAMES = ("own", "prev", "ring", "csa_loc", "hca_loc")


def _host_results(r, n, page):
    """A host step's five result arrays, copied out in one allocation (the
    node rewrites its buffers two steps on; the arrays returned stay)."""
    sizes = (n, n, n * page, n, n)
    total = sum(sizes)
    block = np.zeros(total, dtype=np.int64)
    at = block.ctypes.data
    res = {}
    offset = 0
    for name, size in zip(_RESULT_NAMES, sizes):
        address = getattr(r, name)
        if address and size:
            ctypes.memmove(at + 8 * offset, address, 8 * size)
        part = block[offset:offset + size]
        res[name] = part.reshape(n, page) if name == "ring" else part
        offset += size
    return res


def _order_after_step(handle, stream):
    """A consumer on CUDA stream `stream` reads after the node's last step."""
    if handle.last_event:
        from ._cuda import stream_wait_event
        stream_wait_event(stream, handle.last_event)


class View:
    """A tier of the node's memory (or its mapping), in place, for
    numpy.from_dlpack / torch.from_dlpack. It keeps the node's memory, and
    what the node borrows, alive (not the Node object: that closes as
    usual), and so does every array made from it."""

    def __init__(self, handle, node_view):
        v = node_view
        self._handle = handle
        self.name = v.name.decode()
        self.data = v.data
        self.dtype = _dlpack.DTYPES[v.dtype][2]
        self._dtype_code = v.dtype
        self.shape = tuple(v.shape[i] for i in range(v.ndim))
        self.strides = tuple(v.strides[i] for i in range(v.ndim))
        self.on_device = bool(v.on_device)
        self.device_id = v.device
        self.offset = v.offset
        self.nbytes = v.bytes

    def __repr__(self):
        where = f"cuda:{self.device_id}" if self.on_device else "cpu"
        return f"<kvshard.View {self.name} {self.dtype}{list(self.shape)} on {where}>"

    def __dlpack_device__(self):
        return ((_dlpack.KDL_CUDA, self.device_id) if self.on_device else (_dlpack.KDL_CPU, 0))

    def __dlpack__(self, stream=None):
        # stream: None, -1 (the consumer orders itself) or a cudaStream_t.
        if stream is not None and not (isinstance(stream, numbers.Integral)
                                       and not isinstance(stream, bool) and stream == -1):
            stream = c_int(stream, "stream", "uintptr_t")
        if self.on_device and stream != -1:
            _order_after_step(self._handle, 0 if stream is None else stream)
        return _dlpack.capsule(self._handle, self.data, self._dtype_code, self.shape,
                               self.strides, *self.__dlpack_device__())


class Node:
    """Node(comm=None, **options): comm is None or "self" (one rank), an
    mpi4py.MPI.Comm, a torch.distributed ProcessGroup (through torch_comm),
    or a kvshard.Comm (nccl_comm, loopback_comms, torch_comm).
    Options are kvplan's flags with underscores (budget="9GiB",
    kv_dtype="fp8", topology="bundled", max_running=64, ...) plus the
    node's own (device="cpu"|"cuda"|"auto", stream=..., check_every=...)
    and timeout_ms (every collective's deadline); kvshard.node_options()
    lists them."""

    def __init__(self, comm=None, **options):
        self._h = None
        timeout = options.pop("timeout_ms", None)
        flags = to_flags(options, NODE_OPTIONS, "Node()", NODE_PYTHON_OPTIONS)
        args = c_strings(flags, "Node()'s flags")
        comm, owned = comm_of(comm, timeout)
        out = ctypes.c_void_p()
        try:
            lent = comm._lend()
        except BaseException:
            if owned:
                comm.close()
            raise
        try:
            call("kvs_node_create_flags", lent, args, len(flags), ctypes.byref(out))
        except BaseException:
            comm._returned()
            if owned:
                comm.close()
            raise
        self._comm = comm
        self._h = _Handle(out, comm, owned, options.get("stream"))
        self.rank = lib().kvs_node_rank(out)
        self.size = lib().kvs_node_size(out)
        self.page = lib().kvs_node_page(out)
        self.num_pages = lib().kvs_node_num_pages(out)
        self.window_pages = lib().kvs_node_window_pages(out)
        # num_pages and window_pages count their reserved dummy page (the
        # last); an engine allocates full pages from range(usable_pages).
        self.usable_pages = lib().kvs_node_usable_pages(out)
        self.max_running = lib().kvs_node_max_running(out)
        self.is_leader = bool(lib().kvs_node_is_leader(out))
        self.device = "cuda" if lib().kvs_node_device_of(out) == 2 else "cpu"
        self.cuda_device = lib().kvs_node_cuda_device(out)
        comm._opened(self)

    # ---- life ----

    @property
    def _node(self):
        """The node's ctypes argument (the _Handle: a call keeps it alive)."""
        if self._h is None:
            raise Error("KVS_ERR_INVALID_ARGUMENT", "the node is closed")
        return self._h

    @property
    def closed(self):
        return self._h is None

    def close(self):
        """Ends this rank's node (views of its memory keep it, and its
        communicator, until they go). Idempotent."""
        if self._h is not None:
            self._h = None
            self._comm._node_closed(self)

    def __repr__(self):
        state = "closed" if self._h is None else "open"
        return (f"<kvshard.Node rank {self.rank} of {self.size}, {self.device}, "
                f"{self.num_pages} pages, {state}>")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def free_window_pages(self, droppable=False):
        """Window pages free for bind now (on the leader its changes count
        at once, on a follower from the step that carries them). With
        droppable=True, (free, droppable): droppable is how many window
        pages retained prefix tails hold that prefix_evict(0,
        need_window_pages=...) could give back now (0 without a prefix
        cache), so binding up to free + droppable pages needs no request's
        pages freed."""
        droppable = c_bool(droppable, "droppable")
        d = ctypes.c_uint64(0)
        free = lib().kvs_node_free_window_pages(self._node, ctypes.byref(d))
        return (free, d.value) if droppable else free

    # ---- the leader's calls ----

    def admit(self, request):
        """A running request's ring slot (-1 with per-page rings)."""
        slot = ctypes.c_int64(-1)
        call("kvs_node_admit", self._node, _request_id(request), ctypes.byref(slot))
        return slot.value

    def bind(self, request, locs):
        """Window pages for whole full pages of the request's locations."""
        a = _int_array(locs, "locs")
        call("kvs_node_bind", self._node, _request_id(request), a.ctypes.data, a.size)

    def free(self, locs):
        a = _int_array(locs, "locs")
        call("kvs_node_free", self._node, a.ctypes.data, a.size)

    def bind_pages(self, request, pages):
        """bind in pages (the unit of block tables and the prefix cache):
        full-page numbers, each bound whole; a block-table row of int32
        is taken as it is."""
        a = _int_array(pages, "pages")
        call("kvs_node_bind_pages", self._node, _request_id(request), a.ctypes.data, a.size)

    def free_pages(self, pages):
        """free in pages; negative entries (a block table's -1) are skipped."""
        a = _int_array(pages, "pages")
        call("kvs_node_free_pages", self._node, a.ctypes.data, a.size)

    def finish(self, request):
        call("kvs_node_finish", self._node, _request_id(request))

    # ---- the prefix cache (prefix_cache=True; host_cache=BYTES for a host tier) ----
    # Keys are the engine's, one per full page of a prompt (uint64);
    # pages are full-page numbers (location // page).

    def _hit_arg(self, hit):
        if not isinstance(hit, PrefixHit):
            raise TypeError(f"hit must be a kvshard.PrefixHit (from prefix_match), got "
                            f"{type(hit).__name__}")
        return hit._c()

    def prefix_match(self, keys, prompt_tokens, reprefill_tokens=0):
        """Any rank, read-only: the hit keys give a prompt of
        prompt_tokens (reprefill_tokens: what recomputing a missing window
        costs the engine; 0 for exact hits only). A PrefixHit."""
        k = _keys(keys)
        prompt = _count(prompt_tokens, "prompt_tokens")
        reprefill = _count(reprefill_tokens, "reprefill_tokens")
        hit = NodePrefixHit()
        hit.size = ctypes.sizeof(NodePrefixHit)
        pages = np.full(k.size, -1, dtype=np.int64)
        call("kvs_node_prefix_match", self._node, k.ctypes.data if k.size else None, k.size,
             prompt, reprefill, ctypes.byref(hit), pages.ctypes.data if k.size else None)
        return PrefixHit(hit.matched_pages, hit.hit_tokens, hit.reprefill_tokens,
                         hit.truncated_tokens, hit.block, bool(hit.reprefill), hit.host_pages,
                         hit.stamp,
                         pages[:hit.hit_tokens // self.page].copy(), hit.disk_pages)

    def prefix_acquire(self, request, hit):
        """Leader: request takes a match's hit (one without host_pages)."""
        h = self._hit_arg(hit)
        call("kvs_node_prefix_acquire", self._node, _request_id(request), ctypes.byref(h))

    def prefix_fetch(self, request, hit, keys, pages):
        """Leader: request takes a hit that reaches into the host tier;
        keys as matched (from the prompt's first page), pages: exactly
        hit.host_pages free full pages that become the fetched blocks."""
        h = self._hit_arg(hit)
        request = _request_id(request)
        k = _keys(keys)
        p = _pages(pages)
        if p.size != h.host_pages:
            raise ValueError(f"pages has {p.size} entries; the hit fetches {h.host_pages} "
                             f"blocks from the host tier")
        call("kvs_node_prefix_fetch", self._node, request, ctypes.byref(h),
             k.ctypes.data if k.size else None, k.size, p.ctypes.data if p.size else None)

    def prefix_insert(self, request, keys, pages, tails=None):
        """Leader: request's fully written full pages join the index, keys
        one each, below what it holds; tails (bools, or None) keep page i's
        window binding as its block's tail. The request then holds the
        deepest block. Returns taken, a bool array: False where the key was
        cached already and the page stays the engine's."""
        request = _request_id(request)
        k = _keys(keys)
        p = _pages(pages)
        if p.size != k.size:
            raise ValueError(f"pages has {p.size} entries for {k.size} keys")
        t = None if tails is None else _flags(tails, "tails", k.size)
        taken = np.zeros(k.size, dtype=np.uint8)
        n = k.size
        call("kvs_node_prefix_insert", self._node, request, k.ctypes.data if n else None,
             p.ctypes.data if n else None, t.ctypes.data if t is not None and n else None, n,
             taken.ctypes.data if n else None)
        return taken.astype(bool)

    def prefix_release(self, request):
        """Leader: the request lets go of its cached path (at its finish);
        a tail its hit re-prefilled becomes readable, so call it once the
        request's prefill passed hit.hit_tokens (else prefix_abandon)."""
        call("kvs_node_prefix_release", self._node, _request_id(request))

    def prefix_abandon(self, request):
        """Leader: like prefix_release, for a request that stops before its
        prefill reached the hit's boundary (refused, cancelled): the tail its
        hit was to re-prefill is dropped with its window page, never read."""
        call("kvs_node_prefix_abandon", self._node, _request_id(request))

    def prefix_evict(self, need_pages, need_window_pages=0):
        """Leader, LRU: drops tails of unreferenced blocks until
        need_window_pages window pages came back, then evicts unreferenced
        leaves until need_pages full pages are freed. Returns them (an
        int64 array, the engine's again); fewer when nothing more is
        evictable or the step is full (step, then evict again)."""
        need = _count(need_pages, "need_pages")
        need_window = _count(need_window_pages, "need_window_pages")
        freed = np.empty(min(need, self.num_pages), dtype=np.int64)
        n = ctypes.c_size_t(0)
        call("kvs_node_prefix_evict", self._node, need, need_window,
             freed.ctypes.data if freed.size else None, freed.size, ctypes.byref(n))
        return freed[:n.value].copy()

    def prefix_evict_for_fetch(self, hit, keys, need_pages):
        """Leader: the eviction a host hit needs, in one decision (its
        fetched blocks plus the request's own pages past the hit, less the
        free pages the engine has): as prefix_evict, but the hit's GPU
        block and the host slots it fetches are kept, so prefix_fetch
        takes the same hit after it. keys as matched. Returns the freed
        pages (int64, the engine's again); fewer than need_pages when
        nothing more was evictable."""
        h = self._hit_arg(hit)
        k = _keys(keys)
        need = _count(need_pages, "need_pages")
        freed = np.empty(min(need, self.num_pages), dtype=np.int64)
        n = ctypes.c_size_t(0)
        call("kvs_node_prefix_evict_for_fetch", self._node, ctypes.byref(h),
             k.ctypes.data if k.size else None, k.size, need,
             freed.ctypes.data if freed.size else None, freed.size, ctypes.byref(n))
        return freed[:n.value].copy()

    # ---- prefill/decode ----

    def _request(self, request, pages, tokens, peers=(), reuse_tokens=0, window_tokens=0):
        """A kvs_node_transfer (and the arrays it borrows) for these words."""
        p = _pages(pages)
        q = _exact_array(list(peers) if not isinstance(peers, np.ndarray) else peers, "peers",
                         np.int32, "link ranks")
        t = NodeTransfer(ctypes.sizeof(NodeTransfer), _request_id(request),
                         p.ctypes.data if p.size else None, p.size, _count(tokens, "tokens"),
                         _count(reuse_tokens, "reuse_tokens"), q.ctypes.data if q.size else None,
                         q.size, _count(window_tokens, "window_tokens"))
        return t, (p, q)

    def request_rows(self, request, pages, tokens, reuse_tokens=0, window_tokens=0):
        """Any rank: this rank's units of a request's rows (pages: its block
        table, at least ceil(tokens / page) of them), past the decode side's
        reused prefix, with the window rows of the last window_tokens
        positions (0: page - 1), in travel order: a list of Rows for a
        transfer engine."""
        t, keep = self._request(request, pages, tokens, (), reuse_tokens, window_tokens)
        n = ctypes.c_size_t(0)
        call("kvs_node_request_rows", self._node, ctypes.byref(t), None, 0, ctypes.byref(n))
        rows = (NodeRows * max(n.value, 1))()
        call("kvs_node_request_rows", self._node, ctypes.byref(t), rows, n.value, ctypes.byref(n))
        del keep
        return [Rows(r.view.decode(), r.layer, r.tail_state, r.address or 0, r.offset, r.bytes,
                     r.first_token, r.end_token) for r in rows[:n.value]]

    def import_admit(self, request, pages, tokens, reuse_tokens=0, window_tokens=0):
        """Decode leader: admits a request that arrives from prefill ranks
        (its slot, returned; -1 with rings per window page) and binds its
        tail pages past reuse_tokens (window_tokens as in request_rows), all
        or nothing. Step, then every decode rank calls receive_request."""
        t, keep = self._request(request, pages, tokens, (), reuse_tokens, window_tokens)
        slot = ctypes.c_int64(-1)
        call("kvs_node_import_admit", self._node, ctypes.byref(t), ctypes.byref(slot))
        del keep
        return slot.value

    def _transfer(self, name, link, request, pages, tokens, peers, reuse_tokens, window_tokens):
        from .comm import Comm
        if not isinstance(link, Comm):
            raise TypeError(f"link must be a kvshard.Comm, got {type(link).__name__}")
        t, keep = self._request(request, pages, tokens, peers, reuse_tokens, window_tokens)
        r = NodeTransferReport()
        r.size = ctypes.sizeof(NodeTransferReport)
        err = CError()
        status = getattr(lib(), name)(self._node, link.handle, ctypes.byref(t), ctypes.byref(r),
                                      ctypes.byref(err))
        del keep
        report = TransferReport(r.units, r.bytes, r.wire_bytes, r.reused_bytes, r.messages,
                                r.seconds, r.view.decode() if r.view else None, r.layer,
                                r.first_token, r.end_token)
        try:
            check(status, err)
        except Error as e:
            e.details = report
            raise
        return report

    def send_request(self, link, request, pages, tokens, peers):
        """Every prefill rank: sends its layers' rows of a request over the
        link (a kvshard.Comm spanning both nodes) to the decode ranks
        `peers` (their link ranks). Returns a TransferReport."""
        return self._transfer("kvs_node_send_request", link, request, pages, tokens, peers, 0, 0)

    def receive_request(self, link, request, pages, tokens, peers, reuse_tokens=0,
                        window_tokens=0):
        """Every decode rank, after the step that carried import_admit:
        receives the request's rows from the prefill ranks `peers`, checks
        every unit's digest and agrees with the other decode ranks. A
        refusal raises kvshard.Error (its details the TransferReport naming
        the first differing unit); the leader has then given the request's
        window pages, hit and slot back. window_tokens: as in request_rows
        (the prefill side takes this side's)."""
        return self._transfer("kvs_node_receive_request", link, request, pages, tokens, peers,
                              reuse_tokens, window_tokens)

    def prefix_stats(self):
        """Any rank: the index's counts (the same on every rank after a
        step), a PrefixCounts."""
        c = NodePrefixCounts()
        c.size = ctypes.sizeof(NodePrefixCounts)
        call("kvs_node_prefix_stats", self._node, ctypes.byref(c))
        return PrefixCounts(**{f.name: getattr(c, f.name)
                               for f in dataclasses.fields(PrefixCounts)})

    # ---- every rank ----

    def step(self, batch=None, payload=None):
        """Collective: the leader's changes reach every rank, then the
        batch's ring contexts. batch: None, or a dict of "requests" (n),
        "positions" (n; negative: an idle row), "block_table" ([n, stride]
        full-page numbers, -1 unassigned) and optional "window_rows" and
        "lengths" (range rows: row r covers positions[r] ..
        positions[r] + lengths[r] - 1; its results are its last
        position's). payload: the leader's bytes for every rank
        (max_payload_bytes); with carry_batch a follower passes no batch
        and gets the leader's rows ("requests", "positions", "lengths")
        and "payload" in the result.
        Returns what the step did and the contexts: numpy arrays on the
        host (copies, the caller's to keep: the node's own buffers are
        rewritten by its next step), Views (DLPack) in device memory,
        which read the node's results in place until the step after
        next (kvshard.h: the device results are double-buffered)."""
        keep = []
        b = None
        if batch is not None:
            if not isinstance(batch, dict):
                raise TypeError(f"batch must be a dict or None, got {type(batch).__name__}")
            unknown = set(batch) - set(_BATCH_KEYS)
            if unknown:
                raise TypeError(f"batch has unknown keys {sorted(map(str, unknown))}; a batch "
                                f"takes {', '.join(_BATCH_KEYS)} (window_rows and lengths "
                                f"optional); the engine's own data goes in payload=")
            missing = {"requests", "positions", "block_table"} - set(batch)
            if missing:
                raise TypeError(f"batch lacks {sorted(missing)}; a batch takes "
                                f"{', '.join(_BATCH_KEYS)} (window_rows and lengths optional)")
            req = _int_array(batch["requests"], "batch['requests']", np.uint64)
            pos = _int_array(batch["positions"], "batch['positions']")
            bt = _int_array(batch["block_table"], "batch['block_table']", np.int32)
            n = req.size
            if pos.size != n:
                raise Error("KVS_ERR_INVALID_ARGUMENT",
                            f"batch has {n} requests and {pos.size} positions")
            stride = bt.size // n if n else 0
            if n and bt.size != n * stride:
                raise Error("KVS_ERR_INVALID_ARGUMENT",
                            f"batch['block_table'] has {bt.size} entries, not {n} rows")
            window_rows = c_bool(batch.get("window_rows", False), "batch['window_rows']")
            keep = [req, pos, bt]
            b = NodeBatch(ctypes.sizeof(NodeBatch), n, req.ctypes.data, pos.ctypes.data,
                          bt.ctypes.data, stride, window_rows)
            if batch.get("lengths") is not None:
                lengths = _int_array(batch["lengths"], "batch['lengths']")
                if lengths.size != n:
                    raise Error("KVS_ERR_INVALID_ARGUMENT",
                                f"batch has {n} requests and {lengths.size} lengths")
                keep.append(lengths)
                b.lengths = lengths.ctypes.data
        if payload is not None:
            if not isinstance(payload, (bytes, bytearray, memoryview)):
                raise TypeError(f"payload takes bytes, got {type(payload).__name__}")
            data = bytes(payload)
            if b is None:
                b = NodeBatch(ctypes.sizeof(NodeBatch), 0, None, None, None, 0, False)
            buf = ctypes.create_string_buffer(data, len(data))
            keep.append(buf)
            b.payload = ctypes.addressof(buf)
            b.payload_bytes = len(data)
        r = StepResult()
        r.size = ctypes.sizeof(StepResult)
        err = CError()
        h = self._node
        status = lib().kvs_node_step(h, ctypes.byref(b) if b is not None else None,
                                     ctypes.byref(r), ctypes.byref(err))
        del keep
        diverged = status == 20  # KVS_ERR_DIVERGENCE: the step counted
        if not diverged:
            check(status, err)
        h.last_event = r.event
        out = {"step": r.step, "entries": r.entries, "binds": r.binds, "frees": r.frees,
               "n": r.n, "page": r.page, "on_device": bool(r.on_device), "digest": r.digest,
               "event": r.event, "diverged": diverged,
               "message": err.message.decode(errors="replace") if diverged else ""}
        out.update(self._results(r, h))
        n = r.n
        # The step's rows, copied out in one allocation as the results are.
        rows = np.empty(3 * n, dtype=np.int64) if n else None
        at = rows.ctypes.data if n else 0
        for i, key in enumerate(("requests", "positions", "lengths")):
            address = getattr(r, key)
            if n and address:
                ctypes.memmove(at + 8 * n * i, address, 8 * n)
                part = rows[n * i:n * (i + 1)]
                out[key] = part.view(np.uint64) if key == "requests" else part
            else:
                out[key] = np.zeros(0, dtype=np.uint64) if key == "requests" else None
        out["payload"] = (ctypes.string_at(r.payload, r.payload_bytes) if r.payload_bytes
                          else None)
        return out

    def release(self, step, stream=None):
        """Local: the engine's reads of step `step`'s results are queued on
        `stream` (an object with .cuda_stream, an int address, or None:
        the legacy default stream). Needed with explicit_release."""
        address = getattr(stream, "cuda_stream", stream)
        if address is not None:
            address = c_int(address, "stream", "uintptr_t")
        call("kvs_node_release", self._node, _count(step, "step"), address or None)

    def set_result_buffers(self, own=None, prev=None, ring=None, csa_loc=None, hca_loc=None):
        """Before the first step, on every rank alike: each step's results
        are copied into the engine's arrays, the same addresses every step
        (a CUDA graph of the forward can bake them; valid until the next
        step). int64, contiguous: own, prev, csa_loc, hca_loc max_batch
        rows, ring max_batch x page. numpy arrays or CPU tensors on a host
        node, CUDA tensors of the node's device on a device node; the node
        keeps them alive. No arguments: the node's own buffers again."""
        given = {"own": own, "prev": prev, "ring": ring, "csa_loc": csa_loc, "hca_loc": hca_loc}
        if all(v is None for v in given.values()):
            call("kvs_node_set_result_buffers", self._node, None)
            self._h.result_buffers = None
            return
        rows = self.capacity()["max_batch"]
        b = NodeResultBuffers(ctypes.sizeof(NodeResultBuffers))
        for name, value in given.items():
            need = rows * self.page if name == "ring" else rows
            setattr(b, name, self._result_buffer(name, value, need))
        call("kvs_node_set_result_buffers", self._node, ctypes.byref(b))
        self._h.result_buffers = tuple(given.values())  # as long as the C node

    def _result_buffer(self, name, value, need):
        """The address of one engine result array, checked as the node
        writes it: int64, contiguous, need entries, where the node is."""
        if value is None:
            raise TypeError(f"{name} is missing: set_result_buffers takes all five arrays "
                            f"(own, prev, ring, csa_loc, hca_loc) or none")
        on_cuda = type(value).__module__.startswith("torch") and value.is_cuda
        if self.device == "cuda":
            if not on_cuda:
                raise TypeError(f"{name} must be a CUDA tensor on cuda:{self.cuda_device} (the "
                                f"node's tables are on the device), got {type(value).__name__}")
            if value.device.index != self.cuda_device:
                raise ValueError(f"{name} is on {value.device}; the node is on "
                                 f"cuda:{self.cuda_device}")
            import torch
            dtype_ok, contiguous, count = (value.dtype == torch.int64, value.is_contiguous(),
                                           value.numel())
            address = value.data_ptr()
        else:
            if on_cuda:
                raise TypeError(f"{name} is a CUDA tensor; this node's results are on the host")
            arr = _host(value, name)
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"{name} must be a numpy array or a tensor, got "
                                f"{type(value).__name__}")
            if not arr.flags.writeable:
                raise ValueError(f"{name} is read-only; the node writes its results there")
            dtype_ok, contiguous, count = (arr.dtype == np.int64, arr.flags.c_contiguous,
                                           arr.size)
            address = arr.ctypes.data
        if not dtype_ok:
            raise TypeError(f"{name} must hold int64, got {value.dtype}")
        if not contiguous:
            raise ValueError(f"{name} must be contiguous (the node writes it as one array)")
        if count < need:
            raise ValueError(f"{name} holds {count} entries; the node writes up to {need} "
                             f"(max_batch{' x page' if name == 'ring' else ''})")
        return address

    def capacity(self):
        """Local, any rank: what the leader accepts before its next step
        (kvs_node_capacity), the same on every rank just after a step."""
        c = NodeCapacity()
        c.size = ctypes.sizeof(NodeCapacity)
        call("kvs_node_capacity_of", self._node, ctypes.byref(c))
        return {name: getattr(c, name) for name, _ in NodeCapacity._fields_ if name != "size"}

    def _results(self, r, h, in_place=False):
        """The five result arrays of a step: host ones copied out (the
        node rewrites its buffers two steps on), or with in_place views of
        the node's buffers that keep its memory alive (a Stepper's)."""
        n, page = r.n, r.page
        if not r.on_device and not in_place:
            return _host_results(r, n, page)
        shapes = {"own": (n,), "prev": (n,), "ring": (n, page), "csa_loc": (n,), "hca_loc": (n,)}
        res = {}
        for name, shape in shapes.items():
            address = getattr(r, name)
            count = n * page if len(shape) == 2 else n  # (np.prod costs more than the step)
            if not address or count == 0:
                res[name] = np.zeros(shape, dtype=np.int64)
            elif r.on_device:
                nv = NodeView(ctypes.sizeof(NodeView), name.encode(), address, 0, len(shape),
                              (ctypes.c_int64 * 3)(*shape, *([0] * (3 - len(shape)))),
                              (ctypes.c_int64 * 3)(*([page, 1] if len(shape) == 2 else [1]),
                                                   *([0] * (3 - len(shape)))),
                              True, self.cuda_device, 0, count * 8)
                res[name] = View(h, nv)
            else:
                buf = (ctypes.c_int64 * count).from_address(address)
                buf.keep = h  # the array's base: the node's memory stays
                res[name] = np.frombuffer(buf, dtype=np.int64).reshape(shape)
        return res

    def stepper(self, stride, lengths=False, window_rows=False):
        """A hot loop's step (kvshard.Stepper): batch arrays filled in
        place, results read in place, one foreign call a step."""
        from .stepper import Stepper
        return Stepper(self, stride, lengths=lengths, window_rows=window_rows)

    def translate(self, locs):
        """Local: the window slot of each full-pool location, -1 unbound."""
        a = _int_array(locs, "locs")
        out = np.empty(a.size, dtype=np.int64)
        call("kvs_node_translate", self._node, a.ctypes.data, a.size, out.ctypes.data)
        return out

    def check(self):
        """Collective: every rank's bindings, ring contexts and tables
        compared. {"ok", "digest", "kind", "step", "rank", "full_page",
        "request_slot", "message"}, the same on every rank."""
        rep = NodeReport()
        rep.size = ctypes.sizeof(NodeReport)
        err = CError()
        status = lib().kvs_node_check(self._node, ctypes.byref(rep), ctypes.byref(err))
        if status not in (0, 20):
            check(status, err)
        return {"ok": status == 0, "digest": rep.digest, "kind": _kind_name(rep.kind),
                "step": None if rep.step == _NONE else rep.step, "rank": rep.rank,
                "full_page": None if rep.full_page == _NONE else rep.full_page,
                "leader_window_page": rep.leader_window_page,
                "rank_window_page": rep.rank_window_page,
                "request_slot": None if rep.request_slot == _NONE else rep.request_slot,
                "message": err.message.decode(errors="replace") if status else ""}

    def tables(self):
        """name -> View of the node's memory in place: "mapping" (int64),
        then each tier ([layers, rows, row elements]; bf16, uint8 for fp8
        rows, float32 rings)."""
        node = self._node
        views = {}
        for i in range(lib().kvs_node_view_count(node)):
            v = NodeView()
            v.size = ctypes.sizeof(NodeView)
            call("kvs_node_view_at", node, i, ctypes.byref(v))
            views[v.name.decode()] = View(node, v)
        return views
