"""ONNX control flow on fusegrad Tensors: If, Loop and Scan, with conditions and trip counts read as Python values.

Their sub-graphs run through the runner's `run_graph` keyword, in the scope of the node. A data-dependent branch
or trip count is read (realized) when the node runs, so such graphs unroll for the given inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.registry import Value, onnx_op, scalar
from fusegrad.tensor import Tensor

RunGraph = Callable[[Any, dict[str, Value]], list[Value]]


def as_tensor(value: Value, what: str) -> Tensor:
    """A body output that must be a tensor; ValueError naming it when it is empty or a sequence."""
    if not isinstance(value, Tensor):
        raise ValueError(f"{what}: the body gives {'nothing' if value is None else 'a sequence'}, not a tensor")
    return value


@onnx_op("If")
def if_op(condition: Tensor, then_branch: Any, else_branch: Any, run_graph: RunGraph) -> list[Value]:
    return run_graph(then_branch if scalar(condition) else else_branch, {})


@onnx_op("Loop")
def loop(
    trip_count: Tensor | None, condition: Tensor | None, *carried: Value, body: Any, run_graph: RunGraph
) -> list[Value]:
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
        keep_going = bool(scalar(as_tensor(outputs[0], "Loop condition"), True))
        state = outputs[1 : 1 + len(carried)]
        for collected, value in zip(scans, outputs[1 + len(carried) :], strict=True):
            collected.append(as_tensor(value, "Loop scan output"))
        iteration += 1
    stacked = [Tensor.stack(*values) if values else Tensor.zeros(0) for values in scans]
    return [*state, *stacked]


@onnx_op("Scan")
def scan(
    *inputs: Tensor | None,
    body: Any,
    num_scan_inputs: int,
    scan_input_axes: list[int] | None = None,
    scan_input_directions: list[int] | None = None,
    scan_output_axes: list[int] | None = None,
    scan_output_directions: list[int] | None = None,
    run_graph: RunGraph,
    opset: int = 9,
) -> list[Value]:
    # inputs: N carried states, then M sequences sliced along their scan axis; the body maps
    # (states..., slices...) -> (states..., per-step outputs...), the per-step outputs are stacked
    if opset < 9:
        raise NotImplementedError("Scan: opset 8 (batched, with sequence_lens) is not supported")
    carried = len(inputs) - num_scan_inputs
    state: list[Value] = list(inputs[:carried])
    sequences = [t for t in inputs[carried:] if t is not None]
    axes = [a % t.ndim for a, t in zip(scan_input_axes or [0] * num_scan_inputs, sequences, strict=True)]
    backwards = scan_input_directions or [0] * num_scan_inputs
    steps = sequences[0].shape[axes[0]]
    names = [i.name for i in body.input]
    collected: list[list[Tensor]] = [[] for _ in range(len(body.output) - carried)]
    for step in range(steps):
        slices = []
        for t, axis, backward in zip(sequences, axes, backwards, strict=True):
            slices.append(t[(slice(None),) * axis + (steps - 1 - step if backward else step,)])
        outputs = run_graph(body, dict(zip(names, [*state, *slices], strict=True)))
        state = outputs[:carried]
        for per_step, value in zip(collected, outputs[carried:], strict=True):
            per_step.append(as_tensor(value, "Scan scan output"))
    out_axes = scan_output_axes or [0] * len(collected)
    out_backwards = scan_output_directions or [0] * len(collected)
    stacked = []
    for values, axis, backward in zip(collected, out_axes, out_backwards, strict=True):
        ordered = values[::-1] if backward else values
        stacked.append(Tensor.stack(*ordered, dim=axis % (ordered[0].ndim + 1)))
    return [*state, *stacked]


# *** optionals: an empty optional is None, a full one its tensor ***


@onnx_op("Optional")
def optional(value: Tensor | None = None, type: Any = None) -> Tensor | list[None]:  # noqa: A002  (ONNX's name)
    return [None] if value is None else value


@onnx_op("OptionalHasElement")
def optional_has_element(value: Tensor | None = None) -> Tensor:
    return Tensor(value is not None)


@onnx_op("OptionalGetElement")
def optional_get_element(value: Tensor | None) -> Tensor:
    if value is None:
        raise ValueError("OptionalGetElement: the optional is empty")
    return value
