"""Loading libkvshard.so.2 and declaring the C calls the package makes.

The library is looked for beside this package, then where KVSHARD_LIBRARY
says (the file, or its folder), then on the loader's path; the error names
every place tried. Calls go through ctypes.CDLL, which releases the GIL for
the length of each call: a rank waiting in a collective never stops the
interpreter's other threads.
"""

import ctypes
import numbers
import os
import pathlib
import threading

SONAME = "libkvshard.so.2"
ERROR_MESSAGE_MAX = 512  # KVS_ERROR_MESSAGE_MAX
NCCL_UNIQUE_ID_BYTES = 128  # KVS_NCCL_UNIQUE_ID_BYTES


class Error(Exception):
    """A refusal or failure of kvshard: `.status` is the kvs_status name
    (e.g. "KVS_ERR_PARSE"), the text is the library's message."""

    def __init__(self, status, message, details=None):
        super().__init__(message)
        self.status = status
        self.details = details  # kvplan's JSON error object, where it printed one

    def __reduce__(self):
        return (Error, (self.status, str(self), self.details))


Error.__module__ = "kvshard"

# ---- what reaches C: the one check of each kind ----
#
# Every Python value the package hands to a C type passes here first, so
# that nothing is cut, wrapped, truncated at a NUL or read as True without
# being a bool: integers (scalars through c_int, arrays through
# refuse_outside with their extremes), switches (c_bool) and strings
# (c_text). A node's and kvplan's options reach C as text, which kvplan's
# own parsers read and range-check in C ("--page=2**64" is refused there).

# The C integer types an argument may reach: (lowest, highest).
C_RANGES = {
    "int": (-(1 << 31), (1 << 31) - 1),
    "int32_t": (-(1 << 31), (1 << 31) - 1),
    "int64_t": (-(1 << 63), (1 << 63) - 1),
    "uint8_t": (0, 255),
    "uint64_t": (0, (1 << 64) - 1),
    "size_t": (0, (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1),
    "uintptr_t": (0, (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1),
}


def refuse_outside(name, value, ctype):
    """The one range check: ValueError naming `name` (or what the callable
    `name` returns, asked only then), the value and the range when the int
    `value` is outside C's `ctype`."""
    low, high = C_RANGES[ctype]
    if not low <= value <= high:
        name = name() if callable(name) else name
        raise ValueError(f"{name} = {value} is outside the range of {ctype} ({low} to {high})")


def c_int(value, name, ctype):
    """A Python int for a C integer argument of type `ctype`: TypeError
    naming `name` for anything but an int (a bool, a float or a numeric
    string included), ValueError where the type cannot hold it (C would
    cut it: 2**32 + 300 as an int is 300)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    refuse_outside(name, value, ctype)
    return value


def is_bool(value):
    """True for Python's bools and numpy's (numpy.bool_), nothing else."""
    return isinstance(value, bool) or (type(value).__name__ == "bool_"
                                       and type(value).__module__ == "numpy")


def c_bool(value, name):
    """A switch as a C bool: True or False (numpy's too); anything else
    (a string such as "no", an int, None) is a TypeError naming `name`,
    never read as its truth."""
    if not is_bool(value):
        raise TypeError(f"{name} takes True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def c_text(text, name):
    """A str as a C string's bytes (UTF-8): ValueError naming `name` where it
    holds a NUL character, at which C would end it ("fp8\\x00bf16" read as
    "fp8")."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a string, got {type(text).__name__}")
    at = text.find("\x00")
    if at >= 0:
        raise ValueError(f"{name} holds a NUL character at index {at} ({text!r}): C would read "
                         f"only {text[:at]!r}")
    return text.encode()


def c_strings(texts, name):
    """A char *[] of `texts` (each through c_text, named name[i]); a
    one-slot array for none."""
    encoded = [c_text(t, f"{name}[{i}]") for i, t in enumerate(texts)]
    return (ctypes.c_char_p * max(1, len(encoded)))(*encoded)


class CError(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("message", ctypes.c_char * ERROR_MESSAGE_MAX)]


class NodeView(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 3),
        ("strides", ctypes.c_int64 * 3),
        ("on_device", ctypes.c_bool),
        ("device", ctypes.c_int),
        ("offset", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
    ]


class NodeBatch(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("n", ctypes.c_size_t),
        ("requests", ctypes.c_void_p),
        ("positions", ctypes.c_void_p),
        ("block_table", ctypes.c_void_p),
        ("stride", ctypes.c_uint64),
        ("window_rows", ctypes.c_bool),
        ("lengths", ctypes.c_void_p),
        ("payload", ctypes.c_void_p),
        ("payload_bytes", ctypes.c_size_t),
    ]


class StepResult(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("step", ctypes.c_uint64),
        ("entries", ctypes.c_size_t),
        ("binds", ctypes.c_size_t),
        ("frees", ctypes.c_size_t),
        ("n", ctypes.c_size_t),
        ("page", ctypes.c_uint64),
        ("on_device", ctypes.c_bool),
        ("own", ctypes.c_void_p),
        ("prev", ctypes.c_void_p),
        ("ring", ctypes.c_void_p),
        ("csa_loc", ctypes.c_void_p),
        ("hca_loc", ctypes.c_void_p),
        ("event", ctypes.c_void_p),
        ("digest", ctypes.c_uint64),
        ("requests", ctypes.c_void_p),
        ("positions", ctypes.c_void_p),
        ("lengths", ctypes.c_void_p),
        ("payload", ctypes.c_void_p),
        ("payload_bytes", ctypes.c_size_t),
    ]


class NodeResultBuffers(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("own", ctypes.c_void_p),
        ("prev", ctypes.c_void_p),
        ("ring", ctypes.c_void_p),
        ("csa_loc", ctypes.c_void_p),
        ("hca_loc", ctypes.c_void_p),
    ]


class NodeCapacity(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("step", ctypes.c_uint64),
        ("running", ctypes.c_uint64),
        ("max_running", ctypes.c_uint64),
        ("free_window_pages", ctypes.c_uint64),
        ("droppable_window_pages", ctypes.c_uint64),
        ("usable_pages", ctypes.c_uint64),
        ("journal_room", ctypes.c_size_t),
        ("step_capacity", ctypes.c_size_t),
        ("max_batch", ctypes.c_size_t),
        ("max_payload_bytes", ctypes.c_size_t),
        ("result_depth", ctypes.c_uint),
    ]


class NodeReport(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("kind", ctypes.c_int),
        ("step", ctypes.c_uint64),
        ("digest", ctypes.c_uint64),
        ("full_page", ctypes.c_uint64),
        ("rank", ctypes.c_int),
        ("leader_window_page", ctypes.c_int64),
        ("rank_window_page", ctypes.c_int64),
        ("request_slot", ctypes.c_uint64),
    ]


class NodePrefixHit(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("matched_pages", ctypes.c_uint64),
        ("hit_tokens", ctypes.c_uint64),
        ("reprefill_tokens", ctypes.c_uint64),
        ("truncated_tokens", ctypes.c_uint64),
        ("block", ctypes.c_int64),
        ("reprefill", ctypes.c_bool),
        ("host_pages", ctypes.c_uint64),
        ("stamp", ctypes.c_uint64),
        ("disk_pages", ctypes.c_uint64),
    ]


class NodePrefixCounts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in (
        "blocks", "tails", "holds", "refs", "evictable", "evictions", "tail_drops", "digest",
        "host_slots", "host_blocks", "spills", "fetches", "host_drops", "host_page_bytes",
        "disk_slots", "disk_blocks", "stores", "loads", "disk_drops", "store_missed", "disk_found",
        "disk_refused", "disk_agreed", "disk_failures", "host_failures")]


class NodeRows(ctypes.Structure):
    """kvshard.h's kvs_node_rows: one unit of a request's rows."""
    _fields_ = [
        ("view", ctypes.c_char_p),
        ("layer", ctypes.c_uint32),
        ("tail_state", ctypes.c_bool),
        ("address", ctypes.c_void_p),
        ("offset", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("first_token", ctypes.c_uint64),
        ("end_token", ctypes.c_uint64),
    ]


class NodeTransfer(ctypes.Structure):
    """kvshard.h's kvs_node_transfer: a request on one side of a move."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("request", ctypes.c_uint64),
        ("pages", ctypes.c_void_p),
        ("n_pages", ctypes.c_size_t),
        ("tokens", ctypes.c_uint64),
        ("reuse_tokens", ctypes.c_uint64),
        ("peers", ctypes.c_void_p),
        ("n_peers", ctypes.c_size_t),
        ("window_tokens", ctypes.c_uint64),
    ]


class NodeTransferReport(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in (
        "units", "bytes", "wire_bytes", "reused_bytes", "messages")] + [
        ("seconds", ctypes.c_double),
        ("view", ctypes.c_char_p),
        ("layer", ctypes.c_uint32),
        ("first_token", ctypes.c_uint64),
        ("end_token", ctypes.c_uint64),
    ]


class NcclOptions(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("rank", ctypes.c_int),
        ("nranks", ctypes.c_int),
        ("device", ctypes.c_int),
        ("unique_id", ctypes.c_ubyte * NCCL_UNIQUE_ID_BYTES),
        ("parent", ctypes.c_void_p),
        ("init_timeout_ms", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
    ]


# kvshard.h's kvs_comm_callbacks: an engine's group as callbacks (_torch.py
# fills it). Each callback returns a kvs_status; the pointers are ints.
COMM_REDUCE_MIN, COMM_REDUCE_MAX, COMM_REDUCE_SUM = 0, 1, 2  # KVS_COMM_REDUCE_*
STATUS_COMM, STATUS_TIMEOUT = 18, 19  # KVS_ERR_COMM, KVS_ERR_TIMEOUT
BROADCAST_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.POINTER(CError))
ALLREDUCE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.POINTER(CError))
BARRIER_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                    ctypes.POINTER(CError))
DESTROY_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CommTransfer(ctypes.Structure):
    """kvshard.h's kvs_comm_transfer: one send or receive of an exchange."""
    _fields_ = [
        ("peer", ctypes.c_int),
        ("send", ctypes.c_bool),
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_size_t),
    ]


EXCHANGE_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(CommTransfer),
                                     ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(CError))


class CommCallbacks(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("user", ctypes.c_void_p),
        ("broadcast", BROADCAST_CALLBACK),
        ("allreduce_u64", ALLREDUCE_CALLBACK),
        ("barrier", BARRIER_CALLBACK),
        ("destroy", DESTROY_CALLBACK),
        ("exchange", EXCHANGE_CALLBACK),  # optional: NULL, no point to point
    ]


_P = ctypes.c_void_p
_ERR = ctypes.POINTER(CError)
_STATUS = ctypes.c_int
# name: (restype, argtypes). Every kvs_status call ends with a kvs_error *.
_PROTOTYPES = {
    "kvs_version": (ctypes.c_char_p, []),
    "kvs_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kvs_divergence_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kvs_comm_self_create": (_STATUS, [ctypes.POINTER(_P), _ERR]),
    "kvs_comm_loopback_group_create": (_STATUS, [ctypes.c_int, ctypes.POINTER(_P), _ERR]),
    "kvs_comm_loopback_group_destroy": (None, [_P]),
    "kvs_comm_loopback_create": (_STATUS, [_P, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_P), _ERR]),
    "kvs_comm_mpi_create": (_STATUS, [_P, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(_P), _ERR]),
    "kvs_comm_nccl_options_init": (None, [ctypes.POINTER(NcclOptions)]),
    "kvs_comm_nccl_unique_id": (_STATUS, [ctypes.c_ubyte * NCCL_UNIQUE_ID_BYTES, _ERR]),
    "kvs_comm_nccl_create": (_STATUS, [ctypes.POINTER(NcclOptions), ctypes.POINTER(_P), _ERR]),
    "kvs_comm_callbacks_create": (_STATUS, [ctypes.POINTER(CommCallbacks), ctypes.c_int,
                                            ctypes.c_int, ctypes.c_int, ctypes.POINTER(_P), _ERR]),
    "kvs_comm_destroy": (None, [_P]),
    "kvs_comm_rank": (ctypes.c_int, [_P]),
    "kvs_comm_size": (ctypes.c_int, [_P]),
    "kvs_comm_backend": (ctypes.c_char_p, [_P]),
    "kvs_comm_set_timeout_ms": (_STATUS, [_P, ctypes.c_int, _ERR]),
    "kvs_comm_exchange": (_STATUS, [_P, ctypes.POINTER(CommTransfer), ctypes.c_size_t, _ERR]),
    "kvs_node_create_flags": (
        _STATUS, [_P, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, ctypes.POINTER(_P), _ERR]),
    "kvs_node_flags_help": (ctypes.c_char_p, []),
    "kvs_node_destroy": (None, [_P]),
    "kvs_node_rank": (ctypes.c_int, [_P]),
    "kvs_node_size": (ctypes.c_int, [_P]),
    "kvs_node_is_leader": (ctypes.c_bool, [_P]),
    "kvs_node_page": (ctypes.c_uint64, [_P]),
    "kvs_node_num_pages": (ctypes.c_uint64, [_P]),
    "kvs_node_window_pages": (ctypes.c_uint64, [_P]),
    "kvs_node_max_running": (ctypes.c_uint64, [_P]),
    "kvs_node_usable_pages": (ctypes.c_uint64, [_P]),
    "kvs_node_free_window_pages": (ctypes.c_uint64, [_P, ctypes.POINTER(ctypes.c_uint64)]),
    "kvs_node_device_of": (ctypes.c_int, [_P]),
    "kvs_node_cuda_device": (ctypes.c_int, [_P]),
    "kvs_node_admit": (_STATUS, [_P, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int64), _ERR]),
    "kvs_node_bind": (_STATUS, [_P, ctypes.c_uint64, _P, ctypes.c_size_t, _ERR]),
    "kvs_node_free": (_STATUS, [_P, _P, ctypes.c_size_t, _ERR]),
    "kvs_node_bind_pages": (_STATUS, [_P, ctypes.c_uint64, _P, ctypes.c_size_t, _ERR]),
    "kvs_node_free_pages": (_STATUS, [_P, _P, ctypes.c_size_t, _ERR]),
    "kvs_node_finish": (_STATUS, [_P, ctypes.c_uint64, _ERR]),
    "kvs_node_step": (_STATUS, [_P, ctypes.POINTER(NodeBatch), ctypes.POINTER(StepResult), _ERR]),
    "kvs_node_release": (_STATUS, [_P, ctypes.c_uint64, ctypes.c_void_p, _ERR]),
    "kvs_node_set_result_buffers": (_STATUS, [_P, _P, _ERR]),
    "kvs_node_capacity_of": (_STATUS, [_P, ctypes.POINTER(NodeCapacity), _ERR]),
    "kvs_node_translate": (_STATUS, [_P, _P, ctypes.c_size_t, _P, _ERR]),
    "kvs_node_check": (_STATUS, [_P, ctypes.POINTER(NodeReport), _ERR]),
    "kvs_node_prefix_match": (_STATUS, [_P, _P, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint64,
                                        ctypes.POINTER(NodePrefixHit), _P, _ERR]),
    "kvs_node_prefix_acquire": (
        _STATUS, [_P, ctypes.c_uint64, ctypes.POINTER(NodePrefixHit), _ERR]),
    "kvs_node_prefix_fetch": (_STATUS, [_P, ctypes.c_uint64, ctypes.POINTER(NodePrefixHit), _P,
                                        ctypes.c_size_t, _P, _ERR]),
    "kvs_node_prefix_insert": (
        _STATUS, [_P, ctypes.c_uint64, _P, _P, _P, ctypes.c_size_t, _P, _ERR]),
    "kvs_node_prefix_release": (_STATUS, [_P, ctypes.c_uint64, _ERR]),
    "kvs_node_prefix_abandon": (_STATUS, [_P, ctypes.c_uint64, _ERR]),
    "kvs_node_prefix_evict": (_STATUS, [_P, ctypes.c_uint64, ctypes.c_uint64, _P, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t), _ERR]),
    "kvs_node_prefix_evict_for_fetch": (_STATUS, [_P, _P, _P, ctypes.c_size_t, ctypes.c_uint64,
                                                  _P, ctypes.c_size_t, _P, _ERR]),
    "kvs_node_prefix_stats": (_STATUS, [_P, ctypes.POINTER(NodePrefixCounts), _ERR]),
    "kvs_node_request_rows": (_STATUS, [_P, ctypes.POINTER(NodeTransfer), ctypes.POINTER(NodeRows),
                                        ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), _ERR]),
    "kvs_node_import_admit": (_STATUS, [_P, ctypes.POINTER(NodeTransfer),
                                        ctypes.POINTER(ctypes.c_int64), _ERR]),
    "kvs_node_send_request": (_STATUS, [_P, _P, ctypes.POINTER(NodeTransfer),
                                        ctypes.POINTER(NodeTransferReport), _ERR]),
    "kvs_node_receive_request": (_STATUS, [_P, _P, ctypes.POINTER(NodeTransfer),
                                           ctypes.POINTER(NodeTransferReport), _ERR]),
    "kvs_plan_run": (_STATUS, [ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                               ctypes.POINTER(_P), ctypes.POINTER(_P), _ERR]),
    "kvs_free": (None, [_P]),
    "kvs_node_view_count": (ctypes.c_size_t, [_P]),
    "kvs_node_view_at": (_STATUS, [_P, ctypes.c_size_t, ctypes.POINTER(NodeView), _ERR]),
}

_lock = threading.Lock()
_lib = None


def _candidates():
    here = pathlib.Path(__file__).resolve().parent
    yield str(here / SONAME), "beside the package"
    env = os.environ.get("KVSHARD_LIBRARY")
    if env:
        path = pathlib.Path(env)
        yield str(path / SONAME if path.is_dir() else path), "KVSHARD_LIBRARY"
    yield SONAME, "the loader's path"


# Where pip's wheels put each library the backends load: CUDA 13's wheels
# (nvidia-cuda-runtime 13, torch's cu13 builds) in nvidia/cu13/lib, the
# CUDA 12 era's in nvidia/cuda_runtime/lib and nvidia/nccl/lib.
_PIP_LIBRARIES = (("libcudart.so.13", ("cu13", "cuda_runtime")),
                  ("libnccl.so.2", ("cu13", "nccl")))


def pip_cuda_folders(complete=False):
    """The lib folders of pip's CUDA runtime and NCCL wheels that hold the
    libraries the backends load, in site-packages order; with complete,
    [] unless both libraries were found."""
    import site
    import sys
    roots = list(getattr(site, "getsitepackages", lambda: [])())
    roots += [site.getusersitepackages()] if hasattr(site, "getusersitepackages") else []
    roots += [p for p in sys.path if p.endswith("-packages")]
    found, held = [], set()
    for root in roots:
        for soname, subs in _PIP_LIBRARIES:
            for sub in subs:
                folder = os.path.join(root, "nvidia", sub, "lib")
                if os.path.exists(os.path.join(folder, soname)):
                    held.add(soname)
                    if folder not in found:
                        found.append(folder)
    if complete and len(held) < len(_PIP_LIBRARIES):
        return []
    return found


def _point_at_pip_cuda():
    # The library reads KVSHARD_CUDA_PATH when it first loads a CUDA or
    # NCCL backend; unset, it asks the loader, then CUDA_HOME and
    # /usr/local/cuda, none of which knows site-packages. When the
    # variable is unset and pip's wheels hold both libraries, they are
    # named, followed by the places the library would look anyway.
    if os.environ.get("KVSHARD_CUDA_PATH"):
        return
    folders = pip_cuda_folders(complete=True)
    if not folders:
        return
    tail = [os.path.join(os.environ["CUDA_HOME"], "lib64")] if os.environ.get("CUDA_HOME") else []
    tail += ["/usr/local/cuda/lib64"] + os.environ.get("LD_LIBRARY_PATH", "").split(":")
    os.environ["KVSHARD_CUDA_PATH"] = ":".join(folders + [t for t in tail if t])


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def lib():
    """The loaded library; kvshard.Error(KVS_ERR_LIBRARY) naming every
    place tried when none loads."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        _point_at_pip_cuda()
        tried = []
        for path, where in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path} ({where}): no such file")
                continue
            try:
                loaded = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({where}): {e}")
                continue
            try:
                _declare(loaded)
            except AttributeError as e:
                tried.append(f"{path} ({where}): not this package's library ({e})")
                continue
            _lib = loaded
            return _lib
        raise Error("KVS_ERR_LIBRARY", "kvshard: no " + SONAME + " loads; tried " + "; ".join(tried))


def check(status, err):
    """Raises kvshard.Error for a failed call."""
    if status != 0:
        name = lib().kvs_status_name(status).decode()
        raise Error(name, err.message.decode(errors="replace"))


def call(name, *args):
    """Calls kvs_<name>(*args, &err) and raises on failure."""
    err = CError()
    status = getattr(lib(), name)(*args, ctypes.byref(err))
    check(status, err)
    return status
