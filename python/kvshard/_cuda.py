"""The one CUDA runtime call the package needs: a consumer's stream
waiting for a step's event before it reads a device view (DLPack's
producer-side ordering). libcudart is found as the node found it: by the
loader, where the CUDA backend already loaded it."""

import ctypes

from ._lib import Error

_cudart = None


def _runtime():
    global _cudart
    if _cudart is None:
        tried = []
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
            try:
                _cudart = ctypes.CDLL(name)
                break
            except OSError as e:
                tried.append(f"{name}: {e}")
        else:
            raise Error("KVS_ERR_LIBRARY", "no CUDA runtime loads: " + "; ".join(tried))
        _cudart.cudaStreamWaitEvent.restype = ctypes.c_int
        _cudart.cudaStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
    return _cudart


def stream_wait_event(stream, event):
    rc = _runtime().cudaStreamWaitEvent(ctypes.c_void_p(stream), ctypes.c_void_p(event), 0)
    if rc != 0:
        raise Error("KVS_ERR_CUDA", f"cudaStreamWaitEvent(stream {stream:#x}) failed: error {rc}")
