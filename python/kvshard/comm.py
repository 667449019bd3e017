"""Communicators a node runs over: one rank, an mpi4py communicator, a
NCCL group bootstrapped from a unique id, ranks as threads, or a
torch.distributed group (_torch.py: torch_comm).

A node borrows its communicator (kvshard.h: the comm must outlive the
node), and a node's memory outlives Node.close() while a view of it is
alive. So a Comm counts the C nodes over it: close() under an open
kvshard.Node is refused (kvshard.Error, KVS_ERR_CONFLICT, naming the
node), and a close after every node over it closed, while views still
keep one of them, ends the communicator for Python at once and in C with
the last of those nodes. Every node also keeps its Comm object alive, so
dropping the Comm, the Node and their views in any order is safe."""

import ctypes
import sys
import threading
import weakref

from ._lib import NCCL_UNIQUE_ID_BYTES, CommTransfer, Error, NcclOptions, c_int, call, lib


class Comm:
    """kvshard's communicator (a kvs_comm_t). Close it after every node
    over it is closed (views of a node's memory may outlive both); a node
    made with comm=None owns its own."""

    def __init__(self, handle, keep=None):
        self._handle = handle
        self._keep = keep  # what the C communicator borrows (a group)
        # Reentrant: a collection inside a locked region may run a node's
        # finalizer, which returns the communicator from the same thread.
        self._lock = threading.RLock()
        self._closed = False  # by close(): Python's calls are refused from then on
        self._borrowers = 0  # C nodes over it not yet destroyed
        self._open = weakref.WeakSet()  # the kvshard.Nodes over it not yet closed

    @property
    def handle(self):
        if self._closed or self._handle is None:
            raise Error("KVS_ERR_INVALID_ARGUMENT", "the communicator is closed")
        return self._handle

    @property
    def rank(self):
        return lib().kvs_comm_rank(self.handle)

    @property
    def size(self):
        return lib().kvs_comm_size(self.handle)

    @property
    def backend(self):
        return lib().kvs_comm_backend(self.handle).decode()

    def set_timeout_ms(self, timeout_ms):
        """Every later collective's deadline."""
        call("kvs_comm_set_timeout_ms", self.handle, c_int(timeout_ms, "timeout_ms", "int"))

    def exchange(self, transfers):
        """Point to point (kvs_comm_exchange): this rank's batch of
        transfers, each (peer, "send" or "recv", buffer), run as one group
        and returned from once all completed. A buffer is host memory with
        the buffer protocol (a numpy array, a bytearray; a receive's
        writable), C-contiguous, its whole bytes moved; on an NCCL
        communicator it is device memory, given as an object with
        data_ptr() and nbytes (a contiguous CUDA tensor). The k-th send
        from rank A to rank B matches B's k-th receive from A, of the same
        size; transfers of 0 bytes move nothing. kvshard.Error on a
        refusal (KVS_ERR_INVALID_ARGUMENT: nothing moved) or a failure
        (which poisons the communicator, as a failed collective does)."""
        transfers = list(transfers)
        batch = (CommTransfer * max(len(transfers), 1))()
        held = []  # what the addresses point into, alive through the call
        for i, item in enumerate(transfers):
            if not isinstance(item, (tuple, list)) or len(item) != 3:
                raise TypeError(f"exchange(): transfer {i} must be (peer, 'send' or 'recv', "
                                f"buffer), got {item!r}")
            peer, kind, buffer = item
            if kind not in ("send", "recv"):
                raise ValueError(f"exchange(): transfer {i}'s kind must be 'send' or 'recv', "
                                 f"got {kind!r}")
            address, nbytes = _address_of(buffer, writable=kind == "recv",
                                          what=f"exchange(): transfer {i}'s buffer")
            held.append(buffer)
            batch[i] = CommTransfer(c_int(peer, f"exchange(): transfer {i}'s peer", "int"),
                                    kind == "send", address, nbytes)
        call("kvs_comm_exchange", self.handle, batch, len(transfers))

    def close(self):
        """Ends the communicator; idempotent. Refused (kvshard.Error,
        KVS_ERR_CONFLICT, naming the node) while a kvshard.Node over it is
        open; a closed node that views still keep alive holds the C
        communicator until the last of them goes."""
        self._close(refuse_open=True)

    def _close(self, refuse_open):
        with self._lock:
            if self._closed or self._handle is None:
                return
            if refuse_open:
                live = [n for n in list(self._open) if not n.closed]
                if live:
                    raise Error("KVS_ERR_CONFLICT",
                                f"Comm.close(): {live[0]!r} runs over this communicator: "
                                f"close the node first ({len(live)} open)")
            self._closed = True
            ending = self._take() if self._borrowers == 0 else None
        self._destroy(ending)

    def _take(self):
        """Under the lock: (handle, keep) for _destroy, once."""
        ending = (self._handle, self._keep)
        self._handle = self._keep = None
        return ending

    @staticmethod
    def _destroy(ending):
        if ending is not None and ending[0] is not None:
            lib().kvs_comm_destroy(ending[0])
        # ending[1] (a loopback group) goes after its communicator

    # A node's use of the communicator (node.py): lent before the C node is
    # created, the Node marked open once it is, closed with Node.close(),
    # returned when the C node is destroyed (the last view gone).
    def _lend(self):
        with self._lock:
            handle = self.handle  # refused once closed
            self._borrowers += 1
        return handle

    def _opened(self, node):
        with self._lock:
            self._open.add(node)

    def _node_closed(self, node):
        with self._lock:
            self._open.discard(node)

    def _returned(self):
        with self._lock:
            self._borrowers -= 1
            ending = self._take() if self._closed and self._borrowers == 0 else None
        self._destroy(ending)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        # Leaving on an exception: the exception is what the caller needs to
        # see, so an open node defers the end instead of raising over it.
        self._close(refuse_open=exc_type is None)

    def __del__(self):
        # No node can be open here (each keeps this object alive).
        try:
            self._close(refuse_open=False)
        except Exception:
            pass


def _address_of(buffer, writable, what):
    """(address, bytes) of a transfer's memory: a device tensor's
    (data_ptr(), nbytes), else a C-contiguous buffer's."""
    if hasattr(buffer, "data_ptr") and hasattr(buffer, "nbytes"):
        if hasattr(buffer, "is_contiguous") and not buffer.is_contiguous():
            raise ValueError(f"{what} is not contiguous")
        return (buffer.data_ptr() or None), int(buffer.nbytes)
    try:
        view = memoryview(buffer)
    except TypeError:
        raise TypeError(f"{what} must support the buffer protocol (a numpy array, a bytearray) "
                        f"or be a device tensor, got {type(buffer).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous")
    if writable and view.readonly:
        raise ValueError(f"{what} is read-only, and a receive writes it")
    if view.nbytes == 0:
        return None, 0
    import numpy
    return numpy.frombuffer(view.cast("B"), dtype=numpy.uint8).ctypes.data, view.nbytes


def self_comm():
    """One rank: every collective is the identity."""
    out = ctypes.c_void_p()
    call("kvs_comm_self_create", ctypes.byref(out))
    return Comm(out)


class _Group:
    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        lib().kvs_comm_loopback_group_destroy(self.handle)


def loopback_comms(size, timeout_ms=30000):
    """`size` ranks as threads of this process: one Comm per rank, each
    for one thread (collectives release the GIL while they wait)."""
    size = c_int(size, "size", "int")
    timeout_ms = c_int(timeout_ms, "timeout_ms", "int")
    group = ctypes.c_void_p()
    call("kvs_comm_loopback_group_create", size, ctypes.byref(group))
    g = _Group(group)
    comms = []
    for r in range(size):
        out = ctypes.c_void_p()
        call("kvs_comm_loopback_create", group, r, timeout_ms, ctypes.byref(out))
        comms.append(Comm(out, keep=g))
    return comms


def mpi_comm(comm, timeout_ms=30000):
    """Over an mpi4py communicator (duplicated: kvshard's messages never
    match the program's). MPI is already running: mpi4py started it."""
    timeout_ms = c_int(timeout_ms, "timeout_ms", "int")
    from mpi4py import MPI

    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py.MPI.Comm, got {type(comm).__name__}")
    out = ctypes.c_void_p()
    call("kvs_comm_mpi_create", ctypes.c_void_p(MPI._addressof(comm)), MPI._sizeof(MPI.Comm),
         timeout_ms, ctypes.byref(out))
    return Comm(out, keep=comm)


def nccl_unique_id():
    """A fresh NCCL unique id (bytes) for rank 0 to share over the engine's
    own group, e.g. torch.distributed.broadcast_object_list."""
    buf = (ctypes.c_ubyte * NCCL_UNIQUE_ID_BYTES)()
    call("kvs_comm_nccl_unique_id", buf)
    return bytes(buf)


def nccl_comm(unique_id, rank, size, device, timeout_ms=None, init_timeout_ms=None):
    """Collective over the ranks sharing `unique_id`: kvshard's own NCCL
    communicator on CUDA device `device`, on a stream of its own."""
    if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != NCCL_UNIQUE_ID_BYTES:
        raise TypeError(f"unique_id must be the {NCCL_UNIQUE_ID_BYTES} bytes nccl_unique_id() "
                        f"gives, got {type(unique_id).__name__} of "
                        f"{len(unique_id) if hasattr(unique_id, '__len__') else '?'}")
    values = {"rank": rank, "nranks": size, "device": device, "timeout_ms": timeout_ms,
              "init_timeout_ms": init_timeout_ms}
    names = {"nranks": "size"}
    checked = {field: c_int(v, names.get(field, field), "int")
               for field, v in values.items() if v is not None}
    o = NcclOptions()
    lib().kvs_comm_nccl_options_init(ctypes.byref(o))
    for field, v in checked.items():
        setattr(o, field, v)
    ctypes.memmove(o.unique_id, bytes(unique_id), NCCL_UNIQUE_ID_BYTES)
    out = ctypes.c_void_p()
    call("kvs_comm_nccl_create", ctypes.byref(o), ctypes.byref(out))
    return Comm(out)


def comm_of(comm, timeout_ms):
    """(Comm, owned) for Node's comm argument."""
    if timeout_ms is not None:
        timeout_ms = c_int(timeout_ms, "Node(): option 'timeout_ms'", "int")
    if comm is None or (isinstance(comm, str) and comm == "self"):
        c = self_comm()
        if timeout_ms is not None:
            c.set_timeout_ms(timeout_ms)
        return c, True
    if isinstance(comm, Comm):
        if timeout_ms is not None:
            comm.set_timeout_ms(timeout_ms)
        return comm, False
    if type(comm).__module__.startswith("mpi4py"):
        return mpi_comm(comm, 30000 if timeout_ms is None else timeout_ms), True
    # A ProcessGroup exists only once its program imported torch.distributed:
    # asked of sys.modules, never importing torch (seconds) for the test.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and isinstance(comm, getattr(dist, "ProcessGroup", ())):
        from ._torch import torch_comm
        return torch_comm(comm, 30000 if timeout_ms is None else timeout_ms), True
    raise TypeError("comm must be None, 'self', an mpi4py.MPI.Comm, a torch.distributed "
                    "ProcessGroup or a kvshard.Comm (nccl_comm, loopback_comms, torch_comm), "
                    f"got {type(comm).__name__}")
