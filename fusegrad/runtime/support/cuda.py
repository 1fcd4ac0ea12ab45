"""ctypes bindings to the CUDA driver API (libcuda.so.1, installed with the NVIDIA driver): the calls
runtime/ops_cuda.py makes, and `check`, which turns a CUresult into a RuntimeError naming the call and the error.

Loaded on first use (`lib()`), so importing this module never touches the system.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from fusegrad.runtime.support import load_library

CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_MEMHOSTALLOC_PORTABLE = 1
CU_EVENT_DEFAULT = 0
CUDA_ERROR_OUT_OF_MEMORY = 2

handle, size_t, c_int, c_uint = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
P = ctypes.POINTER

# name -> argtypes (every call returns a CUresult, an int); device pointers are 64-bit ints (CUdeviceptr)
_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [c_uint],
    "cuGetErrorString": [c_int, P(ctypes.c_char_p)],
    "cuDeviceGetCount": [P(c_int)],
    "cuDeviceGet": [P(c_int), c_int],
    "cuDeviceGetName": [ctypes.c_char_p, c_int, c_int],
    "cuDeviceGetAttribute": [P(c_int), c_int, c_int],
    "cuDevicePrimaryCtxRetain": [P(handle), c_int],
    "cuCtxSetCurrent": [handle],
    "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [P(ctypes.c_uint64), size_t],
    "cuMemFree_v2": [ctypes.c_uint64],
    "cuMemHostAlloc": [P(handle), size_t, c_uint],
    "cuMemFreeHost": [handle],
    "cuMemcpyHtoD_v2": [ctypes.c_uint64, handle, size_t],
    "cuMemcpyDtoH_v2": [handle, ctypes.c_uint64, size_t],
    "cuMemcpyDtoD_v2": [ctypes.c_uint64, ctypes.c_uint64, size_t],
    "cuModuleLoadData": [P(handle), ctypes.c_char_p],
    "cuModuleGetFunction": [P(handle), handle, ctypes.c_char_p],
    "cuModuleUnload": [handle],
    "cuLaunchKernel": [handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, handle, P(handle), P(handle)],
    "cuEventCreate": [P(handle), c_uint],
    "cuEventRecord": [handle, handle],
    "cuEventSynchronize": [handle],
    "cuEventElapsedTime": [P(ctypes.c_float), handle, handle],
    "cuEventDestroy_v2": [handle],
}


@functools.cache
def lib() -> ctypes.CDLL:
    """The driver library, initialised. Raises RuntimeError saying what is missing (the NVIDIA driver, or a GPU)."""
    missing = (
        "CUDA: the NVIDIA driver library (libcuda.so.1) is not installed: {err}; CUDA needs an NVIDIA GPU and its "
        "driver (kernels still compile to PTX without them: NVRTCCompiler)"
    )
    dll = load_library("cuda", "libcuda.so.1", {fn: (c_int, args) for fn, args in _SIGNATURES.items()}, missing)
    status = dll.cuInit(0)
    if status != 0:
        raise RuntimeError(f"CUDA: cuInit failed: {_error_name(dll, status)} ({status}): no usable NVIDIA GPU")
    return dll


def _error_name(dll: ctypes.CDLL, status: int) -> str:
    text = ctypes.c_char_p()
    if dll.cuGetErrorString(status, ctypes.byref(text)) != 0 or text.value is None:
        return "error"
    return text.value.decode()


def check(status: int, call: str) -> None:
    """Raise RuntimeError (MemoryError for out of memory) naming `call` and the error when status is not 0."""
    if status == 0:
        return
    msg = f"CUDA: {call} failed: {_error_name(lib(), status)} ({status})"
    raise MemoryError(msg) if status == CUDA_ERROR_OUT_OF_MEMORY else RuntimeError(msg)


def device_count() -> int:
    count = c_int()
    check(lib().cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    return count.value


def device_arch(ordinal: int) -> str:
    """The device's architecture as NVRTC names it, e.g. sm_90."""
    major, minor = c_int(), c_int()
    check(
        lib().cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ordinal), "attr"
    )
    check(
        lib().cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ordinal), "attr"
    )
    return f"sm_{major.value}{minor.value}"


def device_name(ordinal: int) -> str:
    buf = ctypes.create_string_buffer(256)
    check(lib().cuDeviceGetName(buf, 256, ordinal), "cuDeviceGetName")
    return buf.value.decode(errors="replace")
