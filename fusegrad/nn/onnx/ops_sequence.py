"""ONNX sequence ops: a sequence value is a `TensorSequence` (a Python list of fusegrad Tensors), built and taken
apart here; the tensors in it stay lazy. Positions are read as Python ints (negative ones count from the end).
Registered into `registry.ONNX_OPS` on import.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.registry import TensorSequence, Value, normalize_axis, onnx_op, scalar, static_ints
from fusegrad.tensor import Tensor

RunGraph = Callable[[Any, dict[str, Value]], list[Value]]


def position_of(position: Tensor | None, length: int, default: int, what: str) -> int:
    """A sequence position in [-length, length) (or up to length inclusive where inserting) as a non-negative int."""
    index = default if position is None else int(scalar(position))
    limit = length + 1 if what == "SequenceInsert" else length
    if not -length <= index < limit:
        raise IndexError(f"{what}: position {index} is outside a sequence of length {length}")
    return index + length if index < 0 else index


@onnx_op("SequenceEmpty")
def sequence_empty(dtype: int = 1) -> TensorSequence:
    return TensorSequence()


@onnx_op("SequenceConstruct")
def sequence_construct(*inputs: Tensor) -> TensorSequence:
    return TensorSequence(inputs)


@onnx_op("SequenceLength")
def sequence_length(sequence: TensorSequence) -> Tensor:
    return Tensor(len(sequence), dtype=dtypes.int64)


@onnx_op("SequenceAt")
def sequence_at(sequence: TensorSequence, position: Tensor) -> Tensor:
    return sequence[position_of(position, len(sequence), 0, "SequenceAt")]


@onnx_op("SequenceInsert")
def sequence_insert(sequence: TensorSequence, tensor: Tensor, position: Tensor | None = None) -> TensorSequence:
    index = position_of(position, len(sequence), len(sequence), "SequenceInsert")
    return TensorSequence([*sequence[:index], tensor, *sequence[index:]])


@onnx_op("SequenceErase")
def sequence_erase(sequence: TensorSequence, position: Tensor | None = None) -> TensorSequence:
    index = position_of(position, len(sequence), -1, "SequenceErase")
    return TensorSequence([*sequence[:index], *sequence[index + 1 :]])


@onnx_op("ConcatFromSequence")
def concat_from_sequence(sequence: TensorSequence, axis: int, new_axis: int = 0) -> Tensor:
    if not sequence:
        raise ValueError("ConcatFromSequence: the sequence is empty")
    if new_axis:  # stack: axis may also be one past the last
        return Tensor.stack(*sequence, dim=normalize_axis(axis, sequence[0].ndim + 1))
    return Tensor.cat(*sequence, dim=normalize_axis(axis, sequence[0].ndim))


@onnx_op("SplitToSequence")
def split_to_sequence(x: Tensor, split: Tensor | None = None, axis: int = 0, keepdims: int = 1) -> TensorSequence:
    axis = normalize_axis(axis, x.ndim)
    size = x.shape[axis]
    if split is None:  # pieces of one, which keepdims=0 squeezes
        pieces = x.split(1, dim=axis)
        return TensorSequence(p if keepdims else p.squeeze(axis) for p in pieces)
    parts = static_ints(split)
    if split.ndim == 0:  # a chunk size; the last piece takes the rest
        parts = [min(parts[0], size - i * parts[0]) for i in range(math.ceil(size / parts[0]))]
    return TensorSequence(x.split(parts, dim=axis))


@onnx_op("SequenceMap")
def sequence_map(sequence: TensorSequence, *additional: Value, body: Any, run_graph: RunGraph) -> list[Value]:
    # body inputs: the i-th element of the sequence, then each additional input (its i-th element if a sequence)
    names = [i.name for i in body.input]
    outputs: list[TensorSequence] = [TensorSequence() for _ in body.output]
    for i, element in enumerate(sequence):
        extras = [value[i] if isinstance(value, TensorSequence) else value for value in additional]
        results = run_graph(body, dict(zip(names, [element, *extras], strict=True)))
        for collected, result in zip(outputs, results, strict=True):
            if not isinstance(result, Tensor):
                raise ValueError("SequenceMap: a body output is not a tensor")
            collected.append(result)
    return list(outputs)
