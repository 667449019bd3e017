"""A hot loop's step: Node.stepper(stride) gives fixed batch arrays that
the engine fills in place and a step() that is one foreign call.

Node.step(dict) checks and converts every array it is given and copies the
results out, about 11 us of Python a step whatever the batch. A decode loop
that steps hundreds of times a second wants none of that: the arrays here
are allocated once with the C types the step reads (so nothing is checked
or converted per step; the library still refuses a bad row, naming it), the
batch and result structs are built once, and the results are numpy views
(host) or Views (device) of the node's own result buffers, made once per
buffer and batch size and handed out again after. They read the results in
place, so they hold what kvshard.h says a step's results hold: valid until
the step after next (the node's buffers alternate); copy what must stay.
"""

import ctypes
import numbers

import numpy as np

from ._lib import CError, Error, NodeBatch, StepResult, c_bool, c_int, check, lib

# KVS_ERR_DIVERGENCE: a check found the ranks differ; the step itself counted.
_DIVERGENCE = 20
# Cached result sets kept before the cache is cleared: one per (buffer,
# batch size) seen; a loop cycling through more sizes than this rebuilds
# its views, which stays correct and only costs what Node.step costs.
_MAX_CACHED = 256


class StepRows:
    """One step's results, read in place: own, prev, ring ([n, page]),
    csa_loc, hca_loc (numpy arrays on the host, Views in device memory),
    and the step's counts as attributes. Valid until the step after next."""

    __slots__ = ("own", "prev", "ring", "csa_loc", "hca_loc", "_r", "_message", "_status")

    def __init__(self, arrays, r):
        self.own, self.prev, self.ring, self.csa_loc, self.hca_loc = arrays
        self._r = r
        self._message = ""
        self._status = 0

    # The counts are read from the result struct when asked for: a loop
    # that never looks pays nothing for them.
    step = property(lambda self: self._r.step)
    entries = property(lambda self: self._r.entries)
    binds = property(lambda self: self._r.binds)
    frees = property(lambda self: self._r.frees)
    n = property(lambda self: self._r.n)
    page = property(lambda self: self._r.page)
    on_device = property(lambda self: bool(self._r.on_device))
    digest = property(lambda self: self._r.digest)
    event = property(lambda self: self._r.event)
    diverged = property(lambda self: self._status == _DIVERGENCE)
    message = property(lambda self: self._message)

    @property
    def requests(self):
        """The step's rows' requests (the leader's, on a follower with
        carry_batch), a copy."""
        r = self._r
        return _copy(r.requests, r.n, np.uint64)

    @property
    def positions(self):
        r = self._r
        return _copy(r.positions, r.n, np.int64)

    @property
    def lengths(self):
        r = self._r
        return _copy(r.lengths, r.n, np.int64) if r.lengths else None

    @property
    def payload(self):
        r = self._r
        return ctypes.string_at(r.payload, r.payload_bytes) if r.payload_bytes else None


def _copy(address, n, dtype):
    if not n or not address:
        return np.zeros(0, dtype=dtype)
    ctype = ctypes.c_uint64 if dtype == np.uint64 else ctypes.c_int64
    return np.frombuffer((ctype * n).from_address(address), dtype=dtype).copy()


class Stepper:
    """Node.stepper(stride, lengths=False, window_rows=False): the batch
    arrays (requests uint64 [rows], positions int64 [rows], block_table
    int32 [rows, stride] of full-page numbers, -1 unassigned, lengths
    int64 [rows] when asked for), rows = the node's max_batch. Fill the
    first n rows, then step(n); step() passes no batch (a follower with
    carry_batch, or a step that only carries the leader's changes)."""

    def __init__(self, node, stride, lengths=False, window_rows=False):
        from .node import Node  # (node imports this module)
        if not isinstance(node, Node):
            raise TypeError(f"node must be a kvshard.Node, got {type(node).__name__}")
        stride = c_int(stride, "stride", "uint64_t")
        if not 1 <= stride <= node.num_pages:
            # (a row never needs more entries than the pool has pages, and
            # the arrays are allocated here: a huge stride is refused, not
            # attempted)
            raise Error("KVS_ERR_INVALID_ARGUMENT",
                        f"stride is {stride}; a block-table row holds 1 to {node.num_pages} "
                        f"pages (the node's num_pages)")
        lengths = c_bool(lengths, "lengths")
        window_rows = c_bool(window_rows, "window_rows")
        rows = node.capacity()["max_batch"]
        self.rows = rows
        self.stride = stride
        self.requests = np.zeros(rows, dtype=np.uint64)
        self.positions = np.full(rows, -1, dtype=np.int64)
        self.block_table = np.full((rows, stride), -1, dtype=np.int32)
        self.lengths = np.ones(rows, dtype=np.int64) if lengths else None
        b = NodeBatch(ctypes.sizeof(NodeBatch), 0, self.requests.ctypes.data,
                      self.positions.ctypes.data, self.block_table.ctypes.data, stride,
                      window_rows)
        if lengths:
            b.lengths = self.lengths.ctypes.data
        self._b = b
        self._bref = ctypes.byref(b)
        # Two result structs, alternating: a StepRows keeps its step's
        # struct, valid as long as its arrays (until the step after next).
        self._r = (StepResult(), StepResult())
        for r in self._r:
            r.size = ctypes.sizeof(StepResult)
        self._rref = tuple(ctypes.byref(r) for r in self._r)
        self._err = CError()
        self._eref = ctypes.byref(self._err)
        self._fn = lib().kvs_node_step
        self._node = node
        self._handle = node._node  # keeps the C node (and what it borrows) alive
        self._raw = self._handle._as_parameter_
        self._k = 0
        self._sides = {}

    def step(self, n=None, payload=None):
        """Collective, as Node.step: the leader's changes reach every rank,
        then the first n rows' ring contexts. Returns a StepRows."""
        if self._node._h is None:
            raise Error("KVS_ERR_INVALID_ARGUMENT", "the node is closed")
        if n is None:
            bref = None
        else:
            if type(n) is not int or not 0 <= n <= self.rows:
                n = self._rows(n)
            self._b.n = n
            bref = self._bref
        if payload is not None:
            return self._step_with(bref, payload)
        k = self._k = self._k ^ 1
        return self._done(self._fn(self._raw, bref, self._rref[k], self._eref), self._r[k])

    def _rows(self, n):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"n must be an int (rows of the batch), got {type(n).__name__}")
        n = int(n)
        if not 0 <= n <= self.rows:
            raise Error("KVS_ERR_INVALID_ARGUMENT",
                        f"n is {n}; the stepper's arrays hold 0 to {self.rows} rows "
                        f"(the node's max_batch)")
        return n

    def _step_with(self, bref, payload):
        """A step carrying the leader's payload (max_payload_bytes)."""
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload takes bytes, got {type(payload).__name__}")
        data = bytes(payload)
        b = self._b if bref is not None else NodeBatch(ctypes.sizeof(NodeBatch), 0, None, None,
                                                       None, 0, False)
        buf = ctypes.create_string_buffer(data, len(data))
        b.payload, b.payload_bytes = ctypes.addressof(buf), len(data)
        k = self._k = self._k ^ 1
        try:
            status = self._fn(self._raw, ctypes.byref(b), self._rref[k], self._eref)
        finally:
            b.payload, b.payload_bytes = None, 0
        return self._done(status, self._r[k])

    def _done(self, status, r):
        """A step's StepRows: the cached views of its result buffer at its
        batch size, or, when the step refused or diverged, fresh ones."""
        if status and status != _DIVERGENCE:
            check(status, self._err)  # raises: a refused step hands out nothing
        self._handle.last_event = r.event
        if status:
            s = self._new_side(r, cache=False)
            s._status = status
            s._message = self._err.message.decode(errors="replace")
            return s
        s = self._sides.get((r.own, r.n))
        if s is None:
            return self._new_side(r)
        s._r = r
        return s

    def _new_side(self, r, cache=True):
        """Views of one result buffer at one batch size, made once."""
        res = self._node._results(r, self._handle, in_place=True)
        s = StepRows([res[k] for k in ("own", "prev", "ring", "csa_loc", "hca_loc")], r)
        if cache and r.own:
            if len(self._sides) >= _MAX_CACHED:
                self._sides.clear()
            self._sides[(r.own, r.n)] = s
        return s
