"""The CPU device: C kernels from the ClangRenderer, compiled by the system C compiler and called through ctypes.

Memory is host memory (`CPUAllocator`: MallocAllocator's mappings with readable bytes around each buffer, see
GUARD_BYTES); `CPUProgram(dev, name, lib)` loads one kernel from shared-object bytes and
unloads it (dlclose) when the program object is freed, so a long process keeps only the kernels something still holds.
"""

from __future__ import annotations

import _ctypes
import ctypes
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fusegrad.device import Buffer, BufferSpec, Compiled, MallocAllocator
from fusegrad.helpers import CRASH_REPORT, PROFILE, cpu_profile, mv_address, report_kernel, suppress_finalizing
from fusegrad.runtime.support.compiler_cpu import ClangCompiler, kernel_source

if TYPE_CHECKING:
    from fusegrad.renderer import Renderer

CPUCompiler = ClangCompiler  # the name newer reference code uses


# kernel libraries open with their own symbols (RTLD_LOCAL) and resolve them all at load (RTLD_NOW)
_OPEN_MODE = os.RTLD_NOW | os.RTLD_LOCAL
# OpenMP runtimes a kernel can link (gcc's, clang's, Intel's): their worker threads outlive every kernel, so once loaded
# they are made resident (RTLD_NODELETE); unloading the last kernel linking one unmapped code its threads sleep in
# (SIGSEGV)
_THREAD_RUNTIMES = ["libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so"]


# Mapped bytes before and after every buffer the CPU allocator makes: one vector of the widest x86 registers (AVX-512).
# gcc vectorises a pad's gated load (`g ? buf[i] : 0`) as a masked load, and where the mask is known at compile time
# (a lane's gate in an unrolled tap) it folds that into a whole-vector load and a blend: lanes outside the gate read up
# to a vector before or after the valid ones, i.e. outside the buffer (a flaky segfault at a page edge). Reading those
# bytes is harmless when they are mapped; turning the vectoriser's if-conversion off instead left every padded conv's
# inner loop scalar (3x3 convs ~4x slower). Buffers at a user's address (from_blob) get no guard.
GUARD_BYTES = 64


class CPUAllocator(MallocAllocator):
    """MallocAllocator whose buffers each sit GUARD_BYTES inside their mapping, with as many readable bytes after them
    (still 64-byte aligned, so vector loads stay aligned where the buffer's start is)."""

    LEAD = GUARD_BYTES  # the buffer, not its mapping, starts on a huge-page boundary

    def _alloc(self, size: int, options: BufferSpec) -> memoryview:
        if options.external_ptr is not None:
            return super()._alloc(size, options)
        return super()._alloc(size + 2 * GUARD_BYTES, options)[GUARD_BYTES : GUARD_BYTES + size]


class CPUProgram:
    """One kernel of a shared object, called as `prg(*buffers, vals=(...), wait=True) -> seconds`.

    The library stays mapped while this object lives; whoever calls the kernel (a runner, a graph holding its
    function address) must hold the CPUProgram. Freeing it unloads the library (not at interpreter exit: the
    process's mappings go with it)."""

    _handle = 0  # the dlopen handle; 0 until loaded, so __del__ after a failed load closes nothing

    def __init__(self, dev: Compiled, name: str, lib: bytes) -> None:
        self.dev, self.name, self.device = dev, name, dev.device
        self._handle = _load_library(name, lib)
        try:
            address = _ctypes.dlsym(self._handle, name)
        except OSError:
            raise ValueError(f"CPUProgram: no function {name!r} in the compiled library") from None
        self.fxn = ctypes.CFUNCTYPE(None)(address)  # argtypes are declared at the first call
        # CRASH_REPORT: the C source, printed before the first run (None once printed, or when unknown)
        self.src = kernel_source(lib, name) if CRASH_REPORT else None

    @suppress_finalizing  # at exit this module's globals may already be cleared
    def __del__(self) -> None:
        handle, self._handle = self._handle, 0
        if handle and not sys.is_finalizing():  # at exit the mappings go with the process
            _ctypes.dlclose(handle)

    def direct(self, nbufs: int) -> tuple[Callable[..., object], Callable[[Buffer], int]] | None:
        """(the kernel's C function, taking `nbufs` buffer addresses; how a Buffer gives its address), for a
        caller that launches the kernel itself (TinyJit's replay); None while CRASH_REPORT has a source to print
        before the first run."""
        if self.src is not None and CRASH_REPORT:
            return None
        if not self.fxn.argtypes:
            self.fxn.argtypes = [ctypes.c_void_p] * nbufs
        return self.fxn, host_address

    def __call__(
        self,
        *bufs: memoryview | int,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Run on buffers (host memoryviews or raw addresses, in slot order) and variable values (as int64)."""
        if not self.fxn.argtypes:  # a kernel's signature never changes: declared once, ctypes converts plain ints
            self.fxn.argtypes = [ctypes.c_void_p] * len(bufs) + [ctypes.c_int64] * len(vals)
        args = [b if isinstance(b, int) else memory_address(b) for b in bufs]
        if CRASH_REPORT:
            report_kernel(self.name, self.src)
            self.src = None
        if not PROFILE:  # the launch path TinyJit replays: no profile bookkeeping
            start = time.perf_counter()
            self.fxn(*args, *vals)
            return time.perf_counter() - start if wait else None
        with cpu_profile(self.name, self.device):
            start = time.perf_counter()
            self.fxn(*args, *vals)
            elapsed = time.perf_counter() - start
        return elapsed if wait else None


def _load_library(name: str, lib: bytes) -> int:
    """dlopen shared-object bytes and return the handle. dlopen needs a file: write a uniquely named one, load it, and
    unlink it (the mapping stays valid)."""
    fd, path = tempfile.mkstemp(prefix=f"fusegrad_{name[:64]}_", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        handle: int = _ctypes.dlopen(path, _OPEN_MODE)
    finally:
        os.unlink(path)
    _pin_thread_runtimes()
    return handle


def _pin_thread_runtimes() -> None:
    """Make every OpenMP runtime loaded so far resident (a no-op dlopen, RTLD_NOLOAD, of each not yet pinned)."""
    for soname in list(_THREAD_RUNTIMES):
        try:
            _ctypes.dlopen(soname, _OPEN_MODE | os.RTLD_NOLOAD | os.RTLD_NODELETE)
        except OSError:
            continue  # not loaded (yet): asked again after the next kernel loads
        _THREAD_RUNTIMES.remove(soname)


def memory_address(mv: memoryview) -> int:
    """A host buffer's address as a kernel takes it (0 for an empty one: the kernel never reads it)."""
    return mv_address(mv) if mv.nbytes else 0


def host_address(buf: Buffer) -> int:
    """A host Buffer's address as a kernel takes it (0 for an empty one), allocated first if it is not, worked out
    once per allocation: kept in the allocation's storage, whose memory never moves. TypeError for memory that is not
    the host's."""
    if not buf.nbytes:
        return 0
    storage = buf.ensure_allocated()._storage
    assert storage is not None, "host_address: ensure_allocated left no storage"
    if (address := storage.address) is None:
        if not isinstance(storage.buf, memoryview):
            raise TypeError(
                f"host_address: buffer on {buf.device} is not host memory: got {type(storage.buf).__name__}"
            )
        address = storage.address = mv_address(storage.buf)
    return address


def _clang_renderer() -> Renderer:
    from fusegrad.renderer.cstyle import ClangRenderer  # imported on first render: codegen loads after the runtime

    return ClangRenderer()


class CPUDevice(Compiled):
    def __init__(self, device: str) -> None:
        # OpenMP threads spin ~300k iterations at every barrier by default; on a machine busier than its core count
        # that spinning starves the thread it waits for (a training step ran 2-3x slower). libgomp reads this once,
        # when the first kernel loads it, so it is set before any kernel exists; a value the user set wins.
        os.environ.setdefault("GOMP_SPINCOUNT", "10000")
        from fusegrad.runtime.graph.cpu import CPUGraph  # the engine loads after the runtime: import on first device

        super().__init__(device, CPUAllocator(self), _clang_renderer, ClangCompiler(), CPUProgram, CPUGraph)
