"""The NULL device: renders and "compiles" kernels like CPU but runs nothing and stores nothing.

For scheduling, codegen and profiling tests that need no results: each kernel 'takes' 1e-4 s and records its event;
a TinyJit replays its kernels in batches through NullGraph (runtime/graph/null.py), one call per batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegrad.device import Allocator, BufferSpec, Compiled, Compiler
from fusegrad.helpers import cpu_profile

if TYPE_CHECKING:
    from fusegrad.renderer import Renderer


class NullAllocator(Allocator[None]):
    """Allocates nothing: every handle is None, copies in are dropped and copies out leave the destination as it was."""

    def _alloc(self, size: int, options: BufferSpec) -> None:
        return None

    def _copyin(self, dest: None, src: memoryview) -> None:
        pass

    def _copyout(self, dest: memoryview, src: None) -> None:
        pass

    def _offset(self, buf: None, size: int, offset: int) -> None:
        return None


class NullProgram:
    """Runs nothing; a call records a ProfileRangeEvent (when PROFILE is on) and reports 1e-4 seconds."""

    def __init__(self, dev: Compiled, name: str, lib: bytes) -> None:
        self.dev, self.name, self.device, self.lib = dev, name, dev.device, lib

    def __call__(
        self,
        *bufs: None,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float:
        with cpu_profile(self.name, self.device):
            return 1e-4


def _null_renderer() -> Renderer:
    # renderers import codegen, which loads after the runtime: the class is made on first render
    from fusegrad.renderer.cstyle import ClangRenderer

    class NullRenderer(ClangRenderer):
        """NULL renders C exactly as CPU does; only the device name differs."""

        device = "NULL"

    return NullRenderer()


class NullDevice(Compiled):
    def __init__(self, device: str) -> None:
        from fusegrad.runtime.graph.null import NullGraph  # the engine loads after the runtime: import on first device

        # Compiler(): the "binary" is the source itself, never cached
        super().__init__(device, NullAllocator(self), _null_renderer, Compiler(), NullProgram, NullGraph)
