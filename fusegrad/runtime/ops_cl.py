"""The CL device: OpenCL C kernels from the OpenCLRenderer, built by the OpenCL driver, run through the ICD loader.

`CL` is the first OpenCL device of all platforms, `CL:1` the second. `CLCompiler` builds source to the driver's binary
(its build log in the CompileError), `CLProgram` launches it (event timing with `wait=True` and under PROFILE),
`CLAllocator` holds cl_mem buffers.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusegrad.device import Allocator, BufferSpec, Compiled, CompileError, Compiler
from fusegrad.helpers import PROFILE, ProfileRangeEvent, cpu_events, perf_counter_us, suppress_finalizing
from fusegrad.runtime.support import cl
from fusegrad.runtime.support.cl import check, checked, lib

if TYPE_CHECKING:
    from fusegrad.renderer import Renderer

__all__ = ["CLAllocator", "CLBuffer", "CLCompiler", "CLDevice", "CLProgram"]


@dataclass(frozen=True, slots=True)
class CLBuffer:
    """A cl_mem and a byte offset into it: a view is its base's cl_mem at an offset. OpenCL's sub-buffers would need
    offsets aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN (128 bytes on PoCL), so kernels take the offset as an argument
    (OpenCLRenderer's calling convention) and copies pass it to the driver."""

    mem: int
    offset: int = 0


class CLCompiler(Compiler):
    """OpenCL C -> the device's program binary (clBuildProgram), cached per device name."""

    def __init__(self, dev: CLDevice, cachekey: str) -> None:
        self.dev = dev
        super().__init__(cachekey)

    def compile(self, src: str) -> bytes:
        """Raises CompileError with the driver's build log and the source when the build fails."""
        source = ctypes.c_char_p(src.encode())
        program = checked("clCreateProgramWithSource", self.dev.context, 1, ctypes.byref(source), None)
        try:
            status = lib().clBuildProgram(program, 1, self.dev.device_id_array, None, None, None)
            if status != cl.CL_SUCCESS:
                log = cl.build_log(program, self.dev.device_id)
                raise CompileError(
                    f"CL: OpenCL build failed ({cl.ERRORS.get(status, status)}):\n{log}\n{src}", src, log
                )
            return cl.program_binary(program)
        finally:
            lib().clReleaseProgram(program)


class CLProgram:
    """One kernel of a built binary, called as `prg(*cl_mems, global_size=, local_size=, vals=, wait=) -> seconds`."""

    def __init__(self, dev: CLDevice, name: str, lib_bytes: bytes) -> None:
        self.dev, self.name = dev, name
        binary = ctypes.c_char_p(lib_bytes)
        size, status = cl.size_t(len(lib_bytes)), cl.cl_int()
        self.program = checked("clCreateProgramWithBinary", dev.context, 1, dev.device_id_array, ctypes.byref(size),
                               ctypes.byref(binary), ctypes.byref(status))  # fmt: skip
        check(status.value, "clCreateProgramWithBinary (binary status)")
        check(lib().clBuildProgram(self.program, 1, dev.device_id_array, None, None, None), "clBuildProgram")
        self.kernel = checked("clCreateKernel", self.program, name.encode())

    @suppress_finalizing  # at interpreter exit the library's handle may already be torn down
    def __del__(self) -> None:
        if getattr(self, "kernel", None) is not None:
            lib().clReleaseKernel(self.kernel)
        if getattr(self, "program", None) is not None:
            lib().clReleaseProgram(self.program)

    def __call__(
        self,
        *bufs: CLBuffer,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        for i, buf in enumerate(bufs):  # each buffer is two arguments: its cl_mem and its byte offset
            mem, offset = ctypes.c_void_p(buf.mem), ctypes.c_uint64(buf.offset)
            check(lib().clSetKernelArg(self.kernel, 2 * i, ctypes.sizeof(mem), ctypes.byref(mem)), "clSetKernelArg")
            check(lib().clSetKernelArg(self.kernel, 2 * i + 1, 8, ctypes.byref(offset)), "clSetKernelArg")
        for i, val in enumerate(vals, start=2 * len(bufs)):
            value = ctypes.c_int64(val)  # variables are `long` arguments (OpenCLRenderer.arg_int_prefix)
            check(lib().clSetKernelArg(self.kernel, i, 8, ctypes.byref(value)), "clSetKernelArg")
        groups, threads = tuple(global_size or (1, 1, 1)), tuple(local_size or (1, 1, 1))
        # OpenCL's global size counts threads, not work-groups
        total = (cl.size_t * 3)(*[g * t for g, t in zip(groups, threads, strict=True)])
        event = cl.handle()
        local = (cl.size_t * 3)(*threads)
        status = lib().clEnqueueNDRangeKernel(
            self.dev.queue, self.kernel, 3, None, total, local, 0, None, ctypes.byref(event)
        )
        check(status, f"clEnqueueNDRangeKernel of {self.name}")
        try:
            if not (wait or PROFILE):
                return None
            check(lib().clWaitForEvents(1, ctypes.byref(event)), f"clWaitForEvents of {self.name}")
            seconds = self._event_seconds(event)
            if PROFILE:  # the device's duration, ending now on the host clock
                end = perf_counter_us()
                cpu_events.append(ProfileRangeEvent(self.dev.device, self.name, end - type(end)(seconds * 1e6), end))
            return seconds if wait else None
        finally:
            lib().clReleaseEvent(event)

    @staticmethod
    def _event_seconds(event: Any) -> float:  # Any: a cl_event handle
        start, end = cl.cl_ulong(), cl.cl_ulong()
        for param, value in ((cl.CL_PROFILING_COMMAND_START, start), (cl.CL_PROFILING_COMMAND_END, end)):
            check(lib().clGetEventProfilingInfo(event, param, 8, ctypes.byref(value), None), "clGetEventProfilingInfo")
        return (end.value - start.value) * 1e-9


class CLAllocator(Allocator[CLBuffer]):
    """cl_mem buffers; copies are blocking reads and writes on the device's in-order queue."""

    dev: CLDevice

    def _alloc(self, size: int, options: BufferSpec) -> CLBuffer:
        try:
            return CLBuffer(int(checked("clCreateBuffer", self.dev.context, cl.CL_MEM_READ_WRITE, size, None)))
        except RuntimeError as err:
            if "ALLOCATION_FAILURE" in str(err) or "OUT_OF" in str(err) or "BUFFER_SIZE" in str(err):
                raise MemoryError(f"CL: clCreateBuffer of {size} bytes failed: {err}") from err
            raise

    def _free(self, opaque: CLBuffer, options: BufferSpec) -> None:
        check(lib().clReleaseMemObject(opaque.mem), "clReleaseMemObject")

    def _copyin(self, dest: CLBuffer, src: memoryview) -> None:
        host = (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else _host_pointer(src)
        status = lib().clEnqueueWriteBuffer(
            self.dev.queue, dest.mem, True, dest.offset, src.nbytes, host, 0, None, None
        )
        check(status, "clEnqueueWriteBuffer")

    def _copyout(self, dest: memoryview, src: CLBuffer) -> None:
        host = _host_pointer(dest)
        status = lib().clEnqueueReadBuffer(self.dev.queue, src.mem, True, src.offset, dest.nbytes, host, 0, None, None)
        check(status, "clEnqueueReadBuffer")

    def _offset(self, buf: CLBuffer, size: int, offset: int) -> CLBuffer:
        return CLBuffer(buf.mem, buf.offset + offset)


def _host_pointer(mv: memoryview) -> Any:  # Any: a ctypes array over the memoryview's memory
    if mv.nbytes == 0:
        return None
    return (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B") if mv.format != "B" else mv)


class CLDevice(Compiled):
    """An OpenCL device (`CL`, `CL:1`, ...): its context, an in-order profiling queue, and what the renderer needs
    to know of it (whether it computes in half)."""

    def __init__(self, device: str) -> None:
        index = int(device.split(":")[1]) if ":" in device else 0
        devices = cl.all_devices()
        if index >= len(devices):
            raise RuntimeError(f"CL: no device {device}: this machine has {len(devices)} OpenCL device(s)")
        self.device_id = devices[index]
        self.device_id_array = (cl.handle * 1)(self.device_id)
        self.context = checked("clCreateContext", None, 1, self.device_id_array, None, None)
        self.queue = checked("clCreateCommandQueue", self.context, self.device_id, cl.CL_QUEUE_PROFILING_ENABLE)
        self.name = cl.device_info_str(self.device_id, cl.CL_DEVICE_NAME)
        self.extensions = cl.device_info_str(self.device_id, cl.CL_DEVICE_EXTENSIONS).split()
        compiler = CLCompiler(self, f"compile_cl_{self.name}")
        super().__init__(device, CLAllocator(self), functools.partial(_cl_renderer, "cl_khr_fp16" in self.extensions),
                         compiler, CLProgram)  # fmt: skip

    def synchronize(self) -> None:
        check(lib().clFinish(self.queue), "clFinish")

    def device_props(self) -> dict[str, Any]:  # Any: JSON-able device properties
        return {"name": self.name, "extensions": self.extensions}


def _cl_renderer(has_half: bool) -> Renderer:
    from fusegrad.renderer.gpu import OpenCLNoHalfRenderer, OpenCLRenderer  # codegen loads after the runtime

    return OpenCLRenderer() if has_half else OpenCLNoHalfRenderer()
