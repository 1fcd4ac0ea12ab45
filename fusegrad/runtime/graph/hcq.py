"""The reference's graph class for hardware-command-queue devices (its AMD, NV and QCOM backends), which fusegrad
does not have. `HCQGraph` exists so code that compares a device's graph class against it, such as the reference's
`test_jit.py` (`graph_class(dev) is HCQGraph` to pick which batches to expect), runs unchanged: no fusegrad device
returns it from `graph_class`, so such a comparison is simply False. Constructing one is an error.
"""

from __future__ import annotations

from fusegrad.device import Buffer
from fusegrad.engine.graph import MultiGraphRunner
from fusegrad.engine.realize import ExecItem

# the reference's devices whose graphs this class batches; fusegrad has none of them
HCQ_BACKENDS = ("AMD", "NV", "QCOM")


class HCQGraph(MultiGraphRunner):
    """The reference's graph runner for hardware-command-queue devices (AMD, NV, QCOM), kept as a name only.

    fusegrad has none of those backends, so no device's `graph` is this class and `graph_class` never returns it;
    it exists so code written against the reference that compares graph classes with it runs unchanged.
    Raises NotImplementedError when constructed, naming the missing backends and the graphs fusegrad does have.
    Example: `graph_class(Device["CPU"]) is HCQGraph` is False (CPU's graph is `runtime.graph.cpu.CPUGraph`).
    """

    def __init__(self, jit_cache: list[ExecItem], input_buffers: list[Buffer], var_vals: dict[str, int]) -> None:
        raise NotImplementedError(
            f"HCQGraph: fusegrad has no hardware-command-queue device ({', '.join(HCQ_BACKENDS)}), so it has no HCQ "
            f"graph: got a batch of {len(jit_cache)} items, expected a device whose graph_class is not None "
            "(CPU: fusegrad.runtime.graph.cpu.CPUGraph)"
        )
