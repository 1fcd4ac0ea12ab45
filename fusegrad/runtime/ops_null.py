"""The NULL device: renders and "compiles" kernels like CPU but runs nothing and stores nothing.

For scheduling, codegen and profiling tests that need no results: each kernel 'takes' 1e-4 s and records its event;
a TinyJit replays its kernels in batches through NullGraph, one call per batch.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from fusegrad.device import Allocator, Buffer, BufferSpec, Compiled, Compiler
from fusegrad.helpers import cpu_profile

if TYPE_CHECKING:
    from fusegrad.engine.graph import MultiGraphRunner
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


@functools.cache
def null_graph() -> type[MultiGraphRunner]:
    """NullGraph, made on first use: the engine (which holds GraphRunner) loads after the runtime."""
    from fusegrad.engine.graph import MultiGraphRunner

    class NullGraph(MultiGraphRunner):
        """A TinyJit batch of NULL kernels (and transfers) replayed as one call that, like each of them, runs
        nothing: a replay costs one call per batch instead of one per kernel. Reports 1e-4 s per kernel."""

        def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
            with cpu_profile(self.display_name, self.device):
                return 1e-4 * len(self.jit_cache)

    return NullGraph


class NullDevice(Compiled):
    def __init__(self, device: str) -> None:
        # Compiler(): the "binary" is the source itself, never cached
        super().__init__(device, NullAllocator(self), _null_renderer, Compiler(), NullProgram, null_graph())
