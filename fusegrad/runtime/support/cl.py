"""ctypes bindings to the OpenCL ICD loader (libOpenCL.so.1): the few OpenCL 1.2 calls runtime/ops_cl.py makes, and
`check`, which turns an error code into a RuntimeError naming the call and the error.

Loaded on first use (`lib()`), so importing this module never touches the system.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from fusegrad.runtime.support import load_library

# *** constants (cl.h) ***
CL_SUCCESS = 0
CL_DEVICE_NOT_FOUND = -1
CL_BUILD_PROGRAM_FAILURE = -11
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004
CL_DEVICE_MEM_BASE_ADDR_ALIGN = 0x1019
CL_DEVICE_LOCAL_MEM_SIZE = 0x1023
CL_DEVICE_NAME = 0x102B
CL_DEVICE_VERSION = 0x102F
CL_DEVICE_EXTENSIONS = 0x1030
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE = 1 << 0
CL_PROGRAM_BINARY_SIZES = 0x1165
CL_PROGRAM_BINARIES = 0x1166
CL_PROGRAM_BUILD_LOG = 0x1183
CL_PROFILING_COMMAND_START = 0x1282
CL_PROFILING_COMMAND_END = 0x1283
CL_BUFFER_CREATE_TYPE_REGION = 0x1220

# the names of the error codes this runtime can meet, for messages
ERRORS = {
    -1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE",
    -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY",
    -11: "CL_BUILD_PROGRAM_FAILURE", -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET", -30: "CL_INVALID_VALUE",
    -33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT", -36: "CL_INVALID_COMMAND_QUEUE", -38: "CL_INVALID_MEM_OBJECT",
    -42: "CL_INVALID_BINARY", -44: "CL_INVALID_PROGRAM", -45: "CL_INVALID_PROGRAM_EXECUTABLE",
    -46: "CL_INVALID_KERNEL_NAME", -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX", -50: "CL_INVALID_ARG_VALUE",
    -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS", -53: "CL_INVALID_WORK_DIMENSION",
    -54: "CL_INVALID_WORK_GROUP_SIZE", -55: "CL_INVALID_WORK_ITEM_SIZE", -61: "CL_INVALID_BUFFER_SIZE",
    -1001: "CL_PLATFORM_NOT_FOUND_KHR",
}  # fmt: skip

cl_int, cl_uint, cl_ulong, size_t, handle = (
    ctypes.c_int32,
    ctypes.c_uint32,
    ctypes.c_uint64,
    ctypes.c_size_t,
    ctypes.c_void_p,
)
P = ctypes.POINTER

# name -> (restype, argtypes); every handle (platform, device, context, queue, mem, program, kernel, event) is void*
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "clGetPlatformIDs": (cl_int, [cl_uint, P(handle), P(cl_uint)]),
    "clGetDeviceIDs": (cl_int, [handle, ctypes.c_uint64, cl_uint, P(handle), P(cl_uint)]),
    "clGetDeviceInfo": (cl_int, [handle, cl_uint, size_t, ctypes.c_void_p, P(size_t)]),
    "clCreateContext": (handle, [ctypes.c_void_p, cl_uint, P(handle), ctypes.c_void_p, ctypes.c_void_p, P(cl_int)]),
    "clCreateCommandQueue": (handle, [handle, handle, ctypes.c_uint64, P(cl_int)]),
    "clCreateBuffer": (handle, [handle, ctypes.c_uint64, size_t, ctypes.c_void_p, P(cl_int)]),
    "clCreateSubBuffer": (handle, [handle, ctypes.c_uint64, cl_uint, ctypes.c_void_p, P(cl_int)]),
    "clReleaseMemObject": (cl_int, [handle]),
    "clEnqueueWriteBuffer": (cl_int, [handle, handle, cl_uint, size_t, size_t, ctypes.c_void_p, cl_uint,
                                      ctypes.c_void_p, P(handle)]),
    "clEnqueueReadBuffer": (cl_int, [handle, handle, cl_uint, size_t, size_t, ctypes.c_void_p, cl_uint,
                                     ctypes.c_void_p, P(handle)]),
    "clEnqueueCopyBuffer": (cl_int, [handle, handle, handle, size_t, size_t, size_t, cl_uint, ctypes.c_void_p,
                                     P(handle)]),
    "clCreateProgramWithSource": (handle, [handle, cl_uint, P(ctypes.c_char_p), P(size_t), P(cl_int)]),
    "clCreateProgramWithBinary": (handle, [handle, cl_uint, P(handle), P(size_t), P(ctypes.c_char_p), P(cl_int),
                                           P(cl_int)]),
    "clBuildProgram": (cl_int, [handle, cl_uint, P(handle), ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]),
    "clGetProgramBuildInfo": (cl_int, [handle, handle, cl_uint, size_t, ctypes.c_void_p, P(size_t)]),
    "clGetProgramInfo": (cl_int, [handle, cl_uint, size_t, ctypes.c_void_p, P(size_t)]),
    "clReleaseProgram": (cl_int, [handle]),
    "clCreateKernel": (handle, [handle, ctypes.c_char_p, P(cl_int)]),
    "clReleaseKernel": (cl_int, [handle]),
    "clSetKernelArg": (cl_int, [handle, cl_uint, size_t, ctypes.c_void_p]),
    "clEnqueueNDRangeKernel": (cl_int, [handle, handle, cl_uint, P(size_t), P(size_t), P(size_t), cl_uint,
                                        ctypes.c_void_p, P(handle)]),
    "clWaitForEvents": (cl_int, [cl_uint, P(handle)]),
    "clGetEventProfilingInfo": (cl_int, [handle, cl_uint, size_t, ctypes.c_void_p, P(size_t)]),
    "clReleaseEvent": (cl_int, [handle]),
    "clFinish": (cl_int, [handle]),
}  # fmt: skip


@functools.cache
def lib() -> ctypes.CDLL:
    """The ICD loader with its signatures declared. Raises RuntimeError naming the library and how to get it."""
    missing = (
        "CL: can't load the OpenCL ICD loader ({name}): {err}; install one with an OpenCL driver, e.g. "
        "`apt-get install ocl-icd-libopencl1 pocl-opencl-icd` (PoCL runs OpenCL on the CPU)"
    )
    return load_library("OpenCL", "libOpenCL.so.1", _SIGNATURES, missing)


def check(status: int, call: str) -> None:
    """Raise RuntimeError naming `call` and the OpenCL error when `status` is not CL_SUCCESS."""
    if status != CL_SUCCESS:
        raise RuntimeError(f"CL: {call} failed: {ERRORS.get(status, 'error')} ({status})")


def checked(call: str, *args: Any) -> Any:  # Any: a ctypes handle or value, as the call returns it
    """Call a `clCreate*` function whose last argument is its error code; raise on failure, return its result."""
    status = cl_int(CL_SUCCESS)
    ret = getattr(lib(), call)(*args, ctypes.byref(status))
    check(status.value, call)
    return ret


def device_info_str(device: int, param: int) -> str:
    size = size_t()
    check(lib().clGetDeviceInfo(device, param, 0, None, ctypes.byref(size)), "clGetDeviceInfo")
    buf = ctypes.create_string_buffer(size.value)
    check(lib().clGetDeviceInfo(device, param, size, buf, None), "clGetDeviceInfo")
    return buf.value.decode(errors="replace")


def device_info_int(device: int, param: int, ctype: Any = cl_ulong) -> int:  # Any: a ctypes integer type
    value = ctype()
    check(lib().clGetDeviceInfo(device, param, ctypes.sizeof(value), ctypes.byref(value), None), "clGetDeviceInfo")
    return int(value.value)


def all_devices() -> list[int]:
    """Every OpenCL device of every platform, platforms in the loader's order."""
    count = cl_uint()
    status = lib().clGetPlatformIDs(0, None, ctypes.byref(count))
    if status == -1001 or count.value == 0:
        raise RuntimeError("CL: no OpenCL platform: install an OpenCL driver (an ICD), e.g. pocl-opencl-icd")
    check(status, "clGetPlatformIDs")
    platforms = (handle * count.value)()
    check(lib().clGetPlatformIDs(count.value, platforms, None), "clGetPlatformIDs")
    ret: list[int] = []
    for platform in platforms:
        n = cl_uint()
        if lib().clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(n)) != CL_SUCCESS:
            continue  # a platform without devices answers CL_DEVICE_NOT_FOUND
        devices = (handle * n.value)()
        check(lib().clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n.value, devices, None), "clGetDeviceIDs")
        ret.extend(d for d in devices if d is not None)
    return ret


def build_log(program: int, device: int) -> str:
    size = size_t()
    check(lib().clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, None, ctypes.byref(size)), "log")
    buf = ctypes.create_string_buffer(size.value)
    check(lib().clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, buf, None), "log")
    return buf.value.decode(errors="replace")


def program_binary(program: int) -> bytes:
    """The device binary of a built one-device program."""
    size = size_t()
    check(lib().clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(size), ctypes.byref(size), None),
          "clGetProgramInfo")  # fmt: skip
    buf = ctypes.create_string_buffer(size.value)
    ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(buf))  # the call fills each device's binary where this points
    check(lib().clGetProgramInfo(program, CL_PROGRAM_BINARIES, ctypes.sizeof(ptrs), ptrs, None), "clGetProgramInfo")
    return buf.raw[: size.value]
