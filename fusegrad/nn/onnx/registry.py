"""The table of ONNX operators: op type -> a function of (inputs..., attributes...) returning Tensors.

Op modules register with `@onnx_op("Name")`; the runner calls `fn(*inputs, **attributes)` and, when the function
takes them, the keywords `opset` (the model's), `node_outputs` (how many outputs the node names), `run_graph`
(runs a sub-graph attribute in the node's scope: `run_graph(graph, {input name: value}) -> outputs`) and
`input_types` (the ONNX element type of each input where the graph declares it, else 0: a container dtype holds
several). Absent optional inputs arrive as None. `static` turns a small tensor (shapes, axes, pads) into Python
ints, which realizes it: ONNX passes those as tensors, fusegrad needs them known.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fusegrad.dtype import DType, dtypes
from fusegrad.tensor import Tensor


class TensorSequence(list[Tensor]):
    """An ONNX sequence value: a list of tensors, a type of its own so that an op returning one returns one output
    (a plain list is an op's several outputs)."""


# what a graph value is: a tensor, a sequence of tensors, or an empty optional
Value = Tensor | TensorSequence | None
OpResult = Tensor | TensorSequence | Sequence[Value]
OpFunction = Callable[..., OpResult]
F = TypeVar("F", bound=OpFunction)

# op type -> (function, the context keywords it takes: some of CONTEXT_KEYWORDS)
ONNX_OPS: dict[str, tuple[OpFunction, tuple[str, ...]]] = {}
CONTEXT_KEYWORDS = ("opset", "node_outputs", "run_graph", "input_types")


def onnx_op(*names: str) -> Callable[[F], F]:
    """Register fn under each ONNX op type name."""

    def register(fn: F) -> F:
        parameters = inspect.signature(fn).parameters
        extras = tuple(key for key in CONTEXT_KEYWORDS if key in parameters)
        for name in names:
            ONNX_OPS[name] = (fn, extras)
        return fn

    return register


# id(tensor) -> (a weak reference to it, its flat values): small static values the runner already read, so `static`
# needs no buffer read (which a TinyJit capture forbids)
KNOWN_VALUES: dict[int, tuple[weakref.ref[Tensor], list[Any]]] = {}


def remember_value(t: Tensor) -> None:
    """Read a realized tensor's values once and keep them for `static` while the tensor lives."""
    key = id(t)
    values = t.reshape(-1).tolist()
    assert isinstance(values, list)
    KNOWN_VALUES[key] = (weakref.ref(t, lambda _: KNOWN_VALUES.pop(key, None)), values)


def known_values(t: Tensor) -> list[Any] | None:
    """A tensor's flat values when the runner already read them (a folded static value), else None; reads nothing."""
    if (known := KNOWN_VALUES.get(id(t))) is not None and known[0]() is t:
        return list(known[1])
    return None


def static(value: Tensor | Sequence[Any] | int | float | None) -> list[Any]:
    """A shape-like input as a flat Python list (realizing a Tensor); None stays an empty list."""
    if value is None:
        return []
    if isinstance(value, Tensor):
        if (known := known_values(value)) is not None:
            return known
        if value.dtype in (dtypes.bfloat16, *dtypes.fp8s):  # no Python-side format: read as float32 (exact)
            value = value.cast(dtypes.float32)
        result = value.reshape(-1).tolist()
        assert isinstance(result, list)
        return result
    if isinstance(value, (int, float)):
        return [value]
    return list(value)


def static_ints(value: Tensor | Sequence[Any] | int | None) -> list[int]:
    """A shape-like input as Python ints."""
    return [int(x) for x in static(value)]


def scalar(value: Tensor | float | int | None, default: float | int | bool = 0) -> Any:
    """A 0-d or 1-element tensor input as a Python number (default when the optional input is absent)."""
    items = static(value)
    return items[0] if items else default


def normalize_axis(axis: int, ndim: int) -> int:
    """An ONNX axis in [-ndim, ndim) as a non-negative int."""
    return axis + ndim if axis < 0 else axis


def is_float(dtype: DType) -> bool:
    """Whether dtype is a floating-point dtype."""
    return dtypes.is_float(dtype)
