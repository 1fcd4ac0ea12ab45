"""ONNX control flow on fusegrad Tensors: If and Loop, with conditions and trip counts read as Python values.

Their sub-graphs run through the runner's `run_graph` keyword, in the scope of the node. A data-dependent branch
or trip count is read (realized) when the node runs, so such graphs unroll for the given inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.registry import onnx_op, scalar
from fusegrad.tensor import Tensor

RunGraph = Callable[[Any, dict[str, Tensor | None]], list[Tensor | None]]


@onnx_op("If")
def if_op(condition: Tensor, then_branch: Any, else_branch: Any, run_graph: RunGraph) -> list[Tensor | None]:
    return run_graph(then_branch if scalar(condition) else else_branch, {})


@onnx_op("Loop")
def loop(
    trip_count: Tensor | None, condition: Tensor | None, *carried: Tensor | None, body: Any, run_graph: RunGraph
) -> list[Tensor | None]:
    # body inputs: (iteration, condition, carried...); outputs: (condition, carried..., scan outputs...)
    limit = int(scalar(trip_count)) if trip_count is not None else None
    keep_going = bool(scalar(condition, True)) if condition is not None else True
    names = [i.name for i in body.input]
    state = list(carried)
    scans: list[list[Tensor]] = [[] for _ in range(len(body.output) - 1 - len(carried))]
    iteration = 0
    while keep_going and (limit is None or iteration < limit):
        bindings = dict(zip(names, [Tensor(iteration, dtype=dtypes.int64), Tensor(keep_going), *state], strict=True))
        outputs = run_graph(body, bindings)
        keep_going = bool(scalar(outputs[0], True))
        state = outputs[1 : 1 + len(carried)]
        for collected, value in zip(scans, outputs[1 + len(carried) :], strict=True):
            assert value is not None, "Loop: a scan output of the body is empty"
            collected.append(value)
        iteration += 1
    stacked = [Tensor.stack(*values) if values else Tensor.zeros(0) for values in scans]
    return [*state, *stacked]
