"""Communicators a node runs over: one rank, an mpi4py communicator, a
NCCL group bootstrapped from a unique id, or ranks as threads."""

import ctypes
import numbers

from ._lib import NCCL_UNIQUE_ID_BYTES, Error, NcclOptions, call, lib


class Comm:
    """kvshard's communicator (a kvs_comm_t). Close it after every node
    over it is closed; a node made with comm=None owns its own."""

    def __init__(self, handle, keep=None):
        self._handle = handle
        self._keep = keep  # what the C communicator borrows (a group)

    @property
    def handle(self):
        if self._handle is None:
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
        _check_int("timeout_ms", timeout_ms)
        call("kvs_comm_set_timeout_ms", self.handle, int(timeout_ms))

    def close(self):
        if self._handle is not None:
            lib().kvs_comm_destroy(self._handle)
            self._handle = None
            self._keep = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _check_int(name, v):
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TypeError(f"option '{name}' takes an int, got {type(v).__name__}")


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
    _check_int("size", size)
    _check_int("timeout_ms", timeout_ms)
    group = ctypes.c_void_p()
    call("kvs_comm_loopback_group_create", int(size), ctypes.byref(group))
    g = _Group(group)
    comms = []
    for r in range(size):
        out = ctypes.c_void_p()
        call("kvs_comm_loopback_create", group, r, int(timeout_ms), ctypes.byref(out))
        comms.append(Comm(out, keep=g))
    return comms


def mpi_comm(comm, timeout_ms=30000):
    """Over an mpi4py communicator (duplicated: kvshard's messages never
    match the program's). MPI is already running: mpi4py started it."""
    from mpi4py import MPI

    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py.MPI.Comm, got {type(comm).__name__}")
    _check_int("timeout_ms", timeout_ms)
    out = ctypes.c_void_p()
    call("kvs_comm_mpi_create", ctypes.c_void_p(MPI._addressof(comm)), MPI._sizeof(MPI.Comm),
         int(timeout_ms), ctypes.byref(out))
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
    for name, v in (("rank", rank), ("size", size), ("device", device)):
        _check_int(name, v)
    o = NcclOptions()
    lib().kvs_comm_nccl_options_init(ctypes.byref(o))
    o.rank, o.nranks, o.device = int(rank), int(size), int(device)
    ctypes.memmove(o.unique_id, bytes(unique_id), NCCL_UNIQUE_ID_BYTES)
    if timeout_ms is not None:
        _check_int("timeout_ms", timeout_ms)
        o.timeout_ms = int(timeout_ms)
    if init_timeout_ms is not None:
        _check_int("init_timeout_ms", init_timeout_ms)
        o.init_timeout_ms = int(init_timeout_ms)
    out = ctypes.c_void_p()
    call("kvs_comm_nccl_create", ctypes.byref(o), ctypes.byref(out))
    return Comm(out)


def comm_of(comm, timeout_ms):
    """(Comm, owned) for Node's comm argument."""
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
    raise TypeError("comm must be None, 'self', an mpi4py.MPI.Comm or a kvshard.Comm "
                    f"(nccl_comm, loopback_comms), got {type(comm).__name__}")
