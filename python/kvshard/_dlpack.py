"""DLPack views of memory the node owns, without a copy.

A View hands out an unversioned "dltensor" capsule (what numpy.from_dlpack
and torch.from_dlpack take). The DLManagedTensor and its shape and stride
arrays live in a registry until the consumer calls the deleter (or the
capsule dies unconsumed); each entry holds a reference to the node's
handle, which holds what the node borrows (its communicator), so the
memory outlives every array viewing it even after Node.close().
"""

import ctypes
import threading

KDL_CPU = 1
KDL_CUDA = 2

# kvs_view_dtype -> (DLPack type code, bits, numpy name)
DTYPES = {
    0: (0, 64, "int64"),
    1: (0, 32, "int32"),
    2: (1, 8, "uint8"),
    3: (4, 16, "bfloat16"),
    4: (2, 32, "float32"),
}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

_registry = {}
_registry_lock = threading.Lock()


def _release(address):
    with _registry_lock:
        _registry.pop(address, None)


@_DELETER
def _deleter(address):
    _release(address)


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # Still named "dltensor": nobody consumed it, so nobody will call the
    # deleter; a consumer renames it ("used_dltensor") and owns that call.
    if _capsule_is_valid(capsule, b"dltensor"):
        _release(_capsule_pointer(capsule, b"dltensor"))


def capsule(owner, data, dtype, shape, strides, device_type, device_id):
    """A fresh capsule over `data`, keeping `owner` alive until released."""
    ndim = len(shape)
    managed = DLManagedTensor()
    shape_arr = (ctypes.c_int64 * ndim)(*shape)
    strides_arr = (ctypes.c_int64 * ndim)(*strides)
    code, bits, _ = DTYPES[dtype]
    t = managed.dl_tensor
    t.data = data
    t.device = DLDevice(device_type, device_id)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.deleter = _deleter
    address = ctypes.addressof(managed)
    with _registry_lock:
        _registry[address] = (managed, shape_arr, strides_arr, owner)
    return _capsule_new(address, b"dltensor", _capsule_destructor)


def live_views():
    """Capsules handed out and not yet released (for tests)."""
    with _registry_lock:
        return len(_registry)
