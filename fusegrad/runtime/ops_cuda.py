"""The CUDA device: CUDA C++ kernels from the CUDARenderer, compiled to PTX by NVRTC (runtime/support/nvrtc.py) and
run through the driver API (runtime/support/cuda.py). `CUDA` is GPU 0, `CUDA:1` GPU 1, each in its primary context.

Opening it without the NVIDIA driver or NVRTC raises RuntimeError naming what is missing.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING, Any

from fusegrad.device import Allocator, BufferSpec, Compiled
from fusegrad.helpers import PROFILE, ProfileRangeEvent, cpu_events, perf_counter_us, suppress_finalizing
from fusegrad.runtime.support import cuda
from fusegrad.runtime.support.cuda import check, lib
from fusegrad.runtime.support.nvrtc import NVRTCCompiler, find_nvrtc

if TYPE_CHECKING:
    from fusegrad.renderer import Renderer

__all__ = ["CUDAAllocator", "CUDADevice", "CUDAProgram"]


class CUDAProgram:
    """One kernel of a PTX module, called as `prg(*device_pointers, global_size=, local_size=, vals=, wait=)`."""

    def __init__(self, dev: CUDADevice, name: str, lib_bytes: bytes) -> None:
        self.dev, self.name = dev, name
        dev.make_current()
        self.module, self.function = cuda.handle(), cuda.handle()
        check(lib().cuModuleLoadData(ctypes.byref(self.module), lib_bytes), f"cuModuleLoadData of {name}")
        check(lib().cuModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()), "cuModuleGetFunction")

    @suppress_finalizing  # at interpreter exit the library's handle may already be torn down
    def __del__(self) -> None:
        if getattr(self, "module", None) is not None and self.module.value:
            lib().cuModuleUnload(self.module)

    def __call__(
        self,
        *bufs: Any,  # Any: device pointers (ints) from CUDAAllocator
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        self.dev.make_current()
        args = [ctypes.c_uint64(b) for b in bufs] + [ctypes.c_int64(v) for v in vals]  # vals are `long long`
        params = (cuda.handle * len(args))(*[ctypes.addressof(a) for a in args])
        grid, block = tuple(global_size or (1, 1, 1)), tuple(local_size or (1, 1, 1))
        timed = wait or bool(PROFILE)
        if timed:
            check(lib().cuEventRecord(self.dev.start_event, None), "cuEventRecord")
        check(
            lib().cuLaunchKernel(self.function, *grid, *block, 0, None, params, None), f"cuLaunchKernel of {self.name}"
        )
        if not timed:
            return None
        check(lib().cuEventRecord(self.dev.end_event, None), "cuEventRecord")
        check(lib().cuEventSynchronize(self.dev.end_event), f"cuEventSynchronize after {self.name}")
        ms = ctypes.c_float()
        check(lib().cuEventElapsedTime(ctypes.byref(ms), self.dev.start_event, self.dev.end_event), "elapsed")
        if PROFILE:  # the GPU's duration, ending now on the host clock
            end = perf_counter_us()
            cpu_events.append(ProfileRangeEvent(self.dev.device, self.name, end - type(end)(ms.value * 1e3), end))
        return ms.value * 1e-3 if wait else None


class CUDAAllocator(Allocator[int]):
    """Device memory (CUdeviceptr ints). Host copies go through a pinned staging buffer, so they run at full speed."""

    dev: CUDADevice

    def _alloc(self, size: int, options: BufferSpec) -> int:
        self.dev.make_current()
        ptr = ctypes.c_uint64()
        check(lib().cuMemAlloc_v2(ctypes.byref(ptr), size), f"cuMemAlloc of {size} bytes")
        return ptr.value

    def _free(self, opaque: int, options: BufferSpec) -> None:
        self.dev.make_current()
        check(lib().cuMemFree_v2(opaque), "cuMemFree")

    def _copyin(self, dest: int, src: memoryview) -> None:
        staging = self.dev.pinned(src.nbytes)
        ctypes.memmove(staging, (ctypes.c_char * src.nbytes).from_buffer_copy(src), src.nbytes)
        check(lib().cuMemcpyHtoD_v2(dest, staging, src.nbytes), "cuMemcpyHtoD")

    def _copyout(self, dest: memoryview, src: int) -> None:
        self.dev.synchronize()
        staging = self.dev.pinned(dest.nbytes)
        check(lib().cuMemcpyDtoH_v2(staging, src, dest.nbytes), "cuMemcpyDtoH")
        ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest.cast("B")), staging, dest.nbytes)

    def _offset(self, buf: int, size: int, offset: int) -> int:
        return buf + offset  # device pointers are plain addresses


class CUDADevice(Compiled):
    """An NVIDIA GPU (`CUDA`, `CUDA:1`, ...) in its primary context, with PTX compiled for its architecture."""

    def __init__(self, device: str) -> None:
        find_nvrtc()  # before the driver: either missing is named
        ordinal = int(device.split(":")[1]) if ":" in device else 0
        if ordinal >= (count := cuda.device_count()):
            raise RuntimeError(f"CUDA: no device {device}: this machine has {count} CUDA device(s)")
        self.ordinal, self.arch, self.name = ordinal, cuda.device_arch(ordinal), cuda.device_name(ordinal)
        self.context = cuda.handle()
        check(lib().cuDevicePrimaryCtxRetain(ctypes.byref(self.context), ordinal), "cuDevicePrimaryCtxRetain")
        self.make_current()
        self.start_event, self.end_event = cuda.handle(), cuda.handle()
        for event in (self.start_event, self.end_event):
            check(lib().cuEventCreate(ctypes.byref(event), cuda.CU_EVENT_DEFAULT), "cuEventCreate")
        self._pinned, self._pinned_size = cuda.handle(), 0
        renderer = functools.partial(_cuda_renderer, self.arch)
        super().__init__(device, CUDAAllocator(self), renderer, NVRTCCompiler(self.arch), CUDAProgram)

    def make_current(self) -> None:
        check(lib().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def pinned(self, size: int) -> int:
        """A page-locked host buffer of at least `size` bytes (grown as needed, kept for the next copy)."""
        if size > self._pinned_size:
            if self._pinned.value:
                check(lib().cuMemFreeHost(self._pinned), "cuMemFreeHost")
            self._pinned_size = max(size, 1 << 20)
            check(lib().cuMemHostAlloc(ctypes.byref(self._pinned), self._pinned_size, cuda.CU_MEMHOSTALLOC_PORTABLE),
                  "cuMemHostAlloc")  # fmt: skip
        return int(self._pinned.value or 0)

    def synchronize(self) -> None:
        self.make_current()
        check(lib().cuCtxSynchronize(), "cuCtxSynchronize")

    def device_props(self) -> dict[str, Any]:  # Any: JSON-able device properties
        return {"name": self.name, "arch": self.arch}


def _cuda_renderer(arch: str) -> Renderer:
    from fusegrad.renderer.gpu import CUDARenderer  # codegen loads after the runtime

    return CUDARenderer(arch)
