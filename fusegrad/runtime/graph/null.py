"""The NULL device's graph: a TinyJit batch of NULL kernels (and transfers) replayed as one call that, like each of
them, runs nothing, so a replay costs one call per batch instead of one per kernel.
Entry point: `NullDevice(...).graph` is `NullGraph`; `engine.graph.apply_graph_to_jit` builds it.
"""

from __future__ import annotations

from fusegrad.device import Buffer
from fusegrad.engine.graph import MultiGraphRunner
from fusegrad.helpers import cpu_profile


class NullGraph(MultiGraphRunner):
    """A batch of NULL kernels replayed as one call that runs nothing; reports 1e-4 s per kernel (as each kernel does)
    and records one profile span per batch."""

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        with cpu_profile(self.display_name, self.device):
            return 1e-4 * len(self.jit_cache)
