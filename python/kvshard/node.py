"""The node: one rank's share of the KV cache, kept identical across ranks.

Every rank creates it with the same options, steps it in the same order
and checks it together; the leader (rank 0) alone admits, binds, frees and
finishes, and each change reaches every rank with the next step.
"""

import ctypes
import numbers
import weakref

import numpy as np

from . import _dlpack
from ._lib import CError, Error, NodeBatch, NodeReport, NodeView, StepResult, call, check, lib
from ._options import NODE_OPTIONS, NODE_PYTHON_OPTIONS, to_flags
from .comm import comm_of

_KINDS = {0: "agree", 1: "bindings", 2: "ring contexts", 3: "integrity", 4: "steps"}
_NONE = (1 << 64) - 1


def _destroy(handle, comm):
    lib().kvs_node_destroy(handle)
    if comm is not None:
        comm.close()


class _Handle:
    """The C node; destroyed once the Node is closed and no view of its
    memory is left (each view keeps this object alive)."""

    def __init__(self, handle, owned_comm):
        self.handle = handle
        weakref.finalize(self, _destroy, handle, owned_comm)


def _int_array(values, name, dtype=np.int64):
    """Host integers as a contiguous array of `dtype` (a copy only where
    the type or layout needs one). CUDA tensors are refused: these calls
    read host memory."""
    if type(values).__module__.startswith("torch"):
        if getattr(values, "is_cuda", False):
            raise TypeError(f"{name} is a CUDA tensor; this call reads host memory: pass "
                            f"{name}.cpu()")
        values = values.numpy()
    arr = np.asarray(values)
    if arr.size == 0:
        return np.zeros(0, dtype=dtype)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=dtype)


def _request_id(request):
    if not isinstance(request, numbers.Integral) or isinstance(request, bool) or request < 0:
        raise TypeError(f"request must be a non-negative int, got {request!r}")
    return int(request)


class View:
    """A tier of the node's memory (or its mapping), in place, for
    numpy.from_dlpack / torch.from_dlpack."""

    def __init__(self, handle, node_view, event_source):
        v = node_view
        self._handle = handle
        self._event_source = event_source
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
        if self.on_device and stream != -1:
            self._event_source(0 if stream is None else int(stream))
        return _dlpack.capsule(self._handle, self.data, self._dtype_code, self.shape,
                               self.strides, *self.__dlpack_device__())


class Node:
    """Node(comm=None, **options): comm is None or "self" (one rank), an
    mpi4py.MPI.Comm, or a kvshard.Comm (nccl_comm, loopback_comms).
    Options are kvplan's flags with underscores (budget="9GiB",
    kv_dtype="fp8", topology="bundled", max_running=64, ...) plus the
    node's own (device="cpu"|"cuda"|"auto", stream=..., check_every=...)
    and timeout_ms (every collective's deadline); kvshard.node_options()
    lists them."""

    def __init__(self, comm=None, **options):
        timeout = options.pop("timeout_ms", None)
        flags = to_flags(options, NODE_OPTIONS, "Node()", NODE_PYTHON_OPTIONS)
        if timeout is not None and (not isinstance(timeout, numbers.Integral)
                                    or isinstance(timeout, bool)):
            raise TypeError(f"Node(): option 'timeout_ms' takes an int, got "
                            f"{type(timeout).__name__}")
        self._comm, owned = comm_of(comm, timeout)
        args = (ctypes.c_char_p * max(1, len(flags)))(*[f.encode() for f in flags])
        out = ctypes.c_void_p()
        try:
            call("kvs_node_create_flags", self._comm.handle, args, len(flags), ctypes.byref(out))
        except BaseException:
            if owned:
                self._comm.close()
            raise
        self._h = _Handle(out, self._comm if owned else None)
        self._last_event = None
        self.rank = lib().kvs_node_rank(out)
        self.size = lib().kvs_node_size(out)
        self.page = lib().kvs_node_page(out)
        self.num_pages = lib().kvs_node_num_pages(out)
        self.window_pages = lib().kvs_node_window_pages(out)
        self.max_running = lib().kvs_node_max_running(out)
        self.is_leader = bool(lib().kvs_node_is_leader(out))
        self.device = "cuda" if lib().kvs_node_device_of(out) == 2 else "cpu"
        self.cuda_device = lib().kvs_node_cuda_device(out)

    # ---- life ----

    @property
    def _node(self):
        if self._h is None:
            raise Error("KVS_ERR_INVALID_ARGUMENT", "the node is closed")
        return self._h.handle

    @property
    def closed(self):
        return self._h is None

    def close(self):
        """Ends this rank's node (views of its memory keep it until they
        go). Idempotent."""
        self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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

    def finish(self, request):
        call("kvs_node_finish", self._node, _request_id(request))

    # ---- every rank ----

    def step(self, batch=None):
        """Collective: the leader's changes reach every rank, then the
        batch's ring contexts. batch: None, or a dict of "requests" (n),
        "positions" (n; negative: an idle row), "block_table" ([n, stride]
        full-page numbers, -1 unassigned) and optional "window_rows".
        Returns what the step did and the contexts: numpy arrays on the
        host, Views (DLPack) in device memory."""
        keep = []
        b = None
        if batch is not None:
            if not isinstance(batch, dict):
                raise TypeError(f"batch must be a dict or None, got {type(batch).__name__}")
            unknown = set(batch) - {"requests", "positions", "block_table", "window_rows"}
            if unknown:
                raise TypeError(f"batch has unknown keys {sorted(unknown)}")
            missing = {"requests", "positions", "block_table"} - set(batch)
            if missing:
                raise TypeError(f"batch lacks {sorted(missing)}")
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
            window_rows = bool(batch.get("window_rows", False))
            keep = [req, pos, bt]
            b = NodeBatch(ctypes.sizeof(NodeBatch), n, req.ctypes.data, pos.ctypes.data,
                          bt.ctypes.data, stride, window_rows)
        r = StepResult()
        r.size = ctypes.sizeof(StepResult)
        err = CError()
        status = lib().kvs_node_step(self._node, ctypes.byref(b) if b is not None else None,
                                     ctypes.byref(r), ctypes.byref(err))
        del keep
        diverged = status == 20  # KVS_ERR_DIVERGENCE: the step counted
        if not diverged:
            check(status, err)
        self._last_event = r.event
        out = {"step": r.step, "entries": r.entries, "binds": r.binds, "frees": r.frees,
               "n": r.n, "page": r.page, "on_device": bool(r.on_device), "digest": r.digest,
               "event": r.event, "diverged": diverged,
               "message": err.message.decode(errors="replace") if diverged else ""}
        out.update(self._results(r))
        return out

    def _results(self, r):
        n, page = r.n, r.page
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
                res[name] = View(self._h, nv, self._order_after_step)
            else:
                # A copy: the host results are valid until the next step.
                buf = (ctypes.c_int64 * count).from_address(address)
                res[name] = np.frombuffer(buf, dtype=np.int64).reshape(shape).copy()
        return res

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
        return {"ok": status == 0, "digest": rep.digest, "kind": _KINDS.get(rep.kind, "?"),
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
            views[v.name.decode()] = View(self._h, v, self._order_after_step)
        return views

    def _order_after_step(self, stream):
        """A consumer on CUDA stream `stream` reads after the last step."""
        if self._last_event:
            from ._cuda import stream_wait_event
            stream_wait_event(stream, self._last_event)
