"""ONNX shape and movement ops: Reshape, Transpose, Concat, Split, Slice, Squeeze, Expand, Pad, Tile, Shape, Range...

Shapes, axes and pads arrive as tensors in ONNX; they are read as Python ints (`static_ints`), because fusegrad
shapes are known when the graph is built. Registered into `registry.ONNX_OPS` on import.
"""

from __future__ import annotations

import math
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.proto import dtype_of
from fusegrad.nn.onnx.registry import normalize_axis, onnx_op, scalar, static, static_ints
from fusegrad.tensor import Tensor


@onnx_op("Reshape")
def reshape(x: Tensor, shape: Tensor, allowzero: int = 0) -> Tensor:
    wanted = static_ints(shape)
    # a 0 copies the input's dim at that position unless allowzero says it means an empty dim
    dims = [x.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(wanted)]
    return x.reshape(dims)


@onnx_op("Transpose")
def transpose(x: Tensor, perm: list[int] | None = None) -> Tensor:
    return x.permute(perm if perm is not None else list(range(x.ndim))[::-1])


@onnx_op("Concat")
def concat(*xs: Tensor, axis: int) -> Tensor:
    return xs[0].cat(*xs[1:], dim=axis)


@onnx_op("Split")
def split(
    x: Tensor,
    sizes: Tensor | None = None,
    axis: int = 0,
    num_outputs: int | None = None,
    split: list[int] | None = None,
    node_outputs: int = 1,
) -> list[Tensor]:
    axis = normalize_axis(axis, x.ndim)
    parts = static_ints(sizes) if sizes is not None else (split or [])
    if not parts:
        count = num_outputs or node_outputs
        # equal parts; the last one smaller when the dim does not divide (opset 18)
        chunk = math.ceil(x.shape[axis] / count)
        parts = [min(chunk, x.shape[axis] - i * chunk) for i in range(count)]
    return list(x.split(parts, dim=axis))


@onnx_op("Slice")
def slice_op(
    x: Tensor, starts: Tensor, ends: Tensor, axes: Tensor | None = None, steps: Tensor | None = None
) -> Tensor:
    begin, end = static_ints(starts), static_ints(ends)
    axis_list = [normalize_axis(a, x.ndim) for a in static_ints(axes)] if axes is not None else list(range(len(begin)))
    step_list = static_ints(steps) if steps is not None else [1] * len(begin)
    index: list[slice] = [slice(None)] * x.ndim
    for axis, b, e, s in zip(axis_list, begin, end, step_list, strict=False):
        # Python slices clamp out-of-range bounds exactly as ONNX Slice does
        index[axis] = slice(*slice(b, e, s).indices(x.shape[axis]))
        if index[axis].stop < 0:  # a negative-step slice running to the front
            index[axis] = slice(index[axis].start, None, s)
    return x[tuple(index)]


def _axes(axes_input: Tensor | None, axes: list[int] | None) -> list[int]:
    """Axes from the input (opset 13) or the attribute (older)."""
    return static_ints(axes_input) if axes_input is not None else list(axes or [])


@onnx_op("Squeeze")
def squeeze(x: Tensor, axes_input: Tensor | None = None, axes: list[int] | None = None) -> Tensor:
    chosen = [normalize_axis(a, x.ndim) for a in _axes(axes_input, axes)] or [
        i for i, s in enumerate(x.shape) if s == 1
    ]
    return x.reshape([s for i, s in enumerate(x.shape) if i not in chosen])


@onnx_op("Unsqueeze")
def unsqueeze(x: Tensor, axes_input: Tensor | None = None, axes: list[int] | None = None) -> Tensor:
    out_rank = x.ndim + len(_axes(axes_input, axes))
    chosen = sorted(normalize_axis(a, out_rank) for a in _axes(axes_input, axes))
    shape = list(x.shape)
    for axis in chosen:
        shape.insert(axis, 1)
    return x.reshape(shape)


@onnx_op("Flatten")
def flatten(x: Tensor, axis: int = 1) -> Tensor:
    axis = normalize_axis(axis, x.ndim)
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@onnx_op("Expand")
def expand(x: Tensor, shape: Tensor) -> Tensor:
    wanted = static_ints(shape)
    rank = max(len(wanted), x.ndim)
    have = [1] * (rank - x.ndim) + list(x.shape)
    wanted = [1] * (rank - len(wanted)) + wanted
    # bidirectional broadcast: a 1 in the requested shape keeps the input's dim
    return x.reshape(have).expand([h if w == 1 else w for h, w in zip(have, wanted, strict=False)])


@onnx_op("Tile")
def tile(x: Tensor, repeats: Tensor) -> Tensor:
    return x.repeat(static_ints(repeats))


PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


@onnx_op("Pad")
def pad(
    x: Tensor,
    pads: Tensor | None = None,
    constant_value: Tensor | None = None,
    axes: Tensor | None = None,
    mode: str = "constant",
    value: float = 0.0,
    paddings: list[int] | None = None,
) -> Tensor:
    widths = static_ints(pads) if pads is not None else list(paddings or [])
    axis_list = [normalize_axis(a, x.ndim) for a in static_ints(axes)] if axes is not None else list(range(x.ndim))
    per_axis = [(0, 0)] * x.ndim
    for i, axis in enumerate(axis_list):
        # ONNX pads are [begin of each axis..., end of each axis...]
        per_axis[axis] = (widths[i], widths[i + len(axis_list)])
    if mode not in PAD_MODES:
        raise ValueError(f"Pad: mode {mode!r} is not one of {list(PAD_MODES)}")
    fill = scalar(constant_value, value)
    if mode == "constant":
        return x.pad(per_axis, value=fill)
    return x.pad(per_axis, mode=PAD_MODES[mode])


@onnx_op("Shape")
def shape(x: Tensor, start: int = 0, end: int | None = None) -> Tensor:
    return Tensor(list(x.shape[slice(start, end)]), dtype=dtypes.int64)


@onnx_op("Size")
def size(x: Tensor) -> Tensor:
    return Tensor(math.prod(x.shape), dtype=dtypes.int64)


@onnx_op("Range")
def range_op(start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    first, stop, step = scalar(start), scalar(limit), scalar(delta)
    count = max(math.ceil((stop - first) / step), 0)
    out: Tensor = (Tensor.arange(count) * step + first).cast(start.dtype)
    return out


@onnx_op("ConstantOfShape")
def constant_of_shape(shape: Tensor, value: Tensor | None = None) -> Tensor:
    dtype = value.dtype if value is not None else dtypes.float32
    fill = scalar(value, 0.0)
    return Tensor.full(tuple(static_ints(shape)), fill, dtype=dtype)


@onnx_op("Constant")
def constant(
    value: Tensor | None = None,
    value_float: float | None = None,
    value_floats: list[float] | None = None,
    value_int: int | None = None,
    value_ints: list[int] | None = None,
) -> Tensor:
    if value is not None:
        return value
    if value_float is not None or value_floats is not None:
        return Tensor(value_float if value_floats is None else value_floats, dtype=dtypes.float32)
    if value_int is not None or value_ints is not None:
        return Tensor(value_int if value_ints is None else value_ints, dtype=dtypes.int64)
    raise NotImplementedError("Constant: only value, value_float(s) and value_int(s) are supported (no strings/sparse)")


@onnx_op("Dropout")
def dropout(x: Tensor, ratio: Tensor | None = None, training_mode: Tensor | None = None, seed: int = 0) -> list[Tensor]:
    # inference: the identity, with an all-true mask
    return [x, Tensor.ones(*x.shape, dtype=dtypes.bool)]


@onnx_op("Trilu")
def trilu(x: Tensor, k: Tensor | None = None, upper: int = 1) -> Tensor:
    diagonal = int(scalar(k, 0))
    return x.triu(diagonal) if upper else x.tril(diagonal)


@onnx_op("EyeLike")
def eye_like(x: Tensor, dtype: int | None = None, k: int = 0) -> Tensor:
    rows, cols = x.shape
    out_dtype = dtype_of(dtype, "EyeLike") if dtype is not None else x.dtype
    # (rows, 1) == (1, cols) - k marks the k-th diagonal
    return (Tensor.arange(rows).reshape(rows, 1) == Tensor.arange(cols).reshape(1, cols) - k).cast(out_dtype)


@onnx_op("OneHot")
def one_hot(indices: Tensor, depth: Tensor, values: Tensor, axis: int = -1) -> Tensor:
    classes = int(scalar(depth))
    axis = normalize_axis(axis, indices.ndim + 1)
    wrapped = (indices < 0).where(indices + classes, indices).cast(dtypes.int64).unsqueeze(axis)
    shape = [1] * (indices.ndim + 1)
    shape[axis] = classes
    hit = wrapped == Tensor.arange(classes).reshape(shape)
    off, on = values[0], values[1]
    return hit.where(on, off)


@onnx_op("NonZero")
def nonzero(x: Tensor) -> Tensor:
    # Tensor.nonzero gives (count, ndim); ONNX wants (ndim, count)
    return x.reshape(x.shape if x.ndim else (1,)).nonzero().cast(dtypes.int64).T


@onnx_op("Compress")
def compress(x: Tensor, condition: Tensor, axis: int | None = None) -> Tensor:
    keep = [i for i, c in enumerate(static(condition)) if c]
    source = x.reshape(-1) if axis is None else x
    axis = 0 if axis is None else normalize_axis(axis, x.ndim)
    return source[(slice(None),) * axis + (Tensor(keep, dtype=dtypes.int64),)]


@onnx_op("DepthToSpace")
def depth_to_space(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":  # (N, b, b, C/b², H, W) -> (N, C/b², H, b, W, b)
        return x.reshape(n, b, b, c // b**2, h, w).permute(0, 3, 4, 1, 5, 2).reshape(n, c // b**2, h * b, w * b)
    # CRD: (N, C/b², b, b, H, W)
    return x.reshape(n, c // b**2, b, b, h, w).permute(0, 1, 4, 2, 5, 3).reshape(n, c // b**2, h * b, w * b)


@onnx_op("SpaceToDepth")
def space_to_depth(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    n, c, h, w = x.shape
    b = blocksize
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    # DCR: (N, C, H/b, b, W/b, b) -> (N, b, b, C, H/b, W/b); CRD: -> (N, C, b, b, H/b, W/b)
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return blocks.permute(*order).reshape(n, c * b * b, h // b, w // b)


@onnx_op("ReverseSequence")
def reverse_sequence(x: Tensor, lengths: Tensor, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
    steps = x.shape[time_axis]
    shape = [1] * x.ndim
    shape[time_axis], shape[batch_axis] = steps, x.shape[batch_axis]
    time = Tensor.arange(steps).reshape([steps if i == time_axis else 1 for i in range(x.ndim)])
    length = lengths.reshape([x.shape[batch_axis] if i == batch_axis else 1 for i in range(x.ndim)])
    # position t < len reads from len-1-t, the rest stay where they are
    source = (time < length).where(length - 1 - time, time).expand(x.shape)
    return x.gather(time_axis, source)


@onnx_op("CenterCropPad")
def center_crop_pad(x: Tensor, shape: Tensor, axes: list[int] | None = None) -> Tensor:
    sizes = static_ints(shape)
    axis_list = [normalize_axis(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
    widths: list[Any] = [(0, 0)] * x.ndim
    for axis, wanted in zip(axis_list, sizes, strict=False):
        diff = wanted - x.shape[axis]
        # padding puts the extra at the end, cropping removes the extra from the end
        widths[axis] = (diff // 2, diff - diff // 2) if diff >= 0 else (-(-diff // 2), -(-diff - (-diff // 2)))
    return x.pad(widths)
