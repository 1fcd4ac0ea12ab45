"""ONNX indexing ops (Gather*, Scatter*) and Resize on fusegrad Tensors.

Negative indices count from the end of their axis, so they are wrapped with a `where` before indexing; a Gather by
indices the runner already knows (folded constants) that pick one element or a run of the axis is a slice instead,
a view its consumers fuse (an exported attention's q, k, v picked from one projection). Resize builds
one interpolation matrix per resized axis from the static shapes, then contracts the axis with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.registry import is_float, known_values, normalize_axis, onnx_op, static, static_ints
from fusegrad.tensor import Tensor


def wrap_index(index: Tensor, size: int | Tensor) -> Tensor:
    """Indices in [-size, size) as non-negative int64."""
    index = index.cast(dtypes.int64)
    return (index < 0).where(index + size, index)


@onnx_op("Gather")
def gather(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    axis = normalize_axis(axis, x.ndim)
    if (view := gather_run(x, indices, axis)) is not None:
        return view
    # out shape: x.shape[:axis] + indices.shape + x.shape[axis+1:]
    return x[(slice(None),) * axis + (wrap_index(indices, x.shape[axis]),)]


def gather_run(x: Tensor, indices: Tensor, axis: int) -> Tensor | None:
    """Gather by known indices that are one element or consecutive ones of the axis, as a slice (a view, where a
    gather by a tensor is a one-hot reduce of its own kernel); None for unknown, out-of-range or other indices."""
    values, size = known_values(indices), x.shape[axis]
    if not values or not isinstance(size, int) or not all(-size <= v < size for v in values):
        return None
    first = int(values[0]) % size
    if [int(v) % size for v in values] != list(range(first, first + len(values))):
        return None
    picked = x[(slice(None),) * axis + (slice(first, first + len(values)),)]
    # (..., n, ...) -> (..., *indices.shape, ...): a 0-d index drops the axis
    return picked.reshape(*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :])


@onnx_op("GatherElements")
def gather_elements(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    axis = normalize_axis(axis, x.ndim)
    return x.gather(axis, wrap_index(indices, x.shape[axis]))


def flat_nd_index(data_shape: tuple[int, ...], indices: Tensor, batch_dims: int) -> tuple[Tensor, int]:
    """For GatherND/ScatterND: each index tuple (last dim of indices) as one row of data viewed (rows, rest...).

    data (B..., D1..Dk, R...) with indices (B..., I..., k) -> flat row numbers (B..., I...) and the row count.
    """
    k = indices.shape[-1]
    batch = math.prod(data_shape[:batch_dims])
    indexed = data_shape[batch_dims : batch_dims + k]
    strides = [math.prod(indexed[i + 1 :]) for i in range(k)]
    wrapped = wrap_index(indices, Tensor(list(indexed), dtype=dtypes.int64))
    rows = (wrapped * Tensor(strides, dtype=dtypes.int64)).sum(-1)
    if batch_dims:
        # (B..., I...): add each batch's first row, counted over the flattened batch dims
        batch_id = Tensor.arange(batch).reshape(indices.shape[:batch_dims] + (1,) * (indices.ndim - 1 - batch_dims))
        rows = rows + batch_id * math.prod(indexed)
    return rows, batch * math.prod(indexed)


@onnx_op("GatherND")
def gather_nd(x: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
    k = indices.shape[-1]
    rest = x.shape[batch_dims + k :]
    rows, count = flat_nd_index(x.shape, indices, batch_dims)
    return x.reshape(count, *rest)[rows]


SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def scatter_rows(data: Tensor, index: Tensor, updates: Tensor, reduction: str, dim: int) -> Tensor:
    """data with updates written (or reduced) at index along dim; index has updates' shape."""
    if reduction == "none":
        return data.scatter(dim, index, updates)
    if reduction not in SCATTER_REDUCE:
        raise ValueError(f"Scatter: reduction {reduction!r} is not one of none, {', '.join(SCATTER_REDUCE)}")
    return data.scatter_reduce(dim, index, updates, SCATTER_REDUCE[reduction])  # type: ignore[arg-type]


@onnx_op("ScatterND")
def scatter_nd(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
    k = indices.shape[-1]
    rest = x.shape[k:]
    rows, count = flat_nd_index(x.shape, indices, 0)
    flat_rows = rows.reshape(-1, *([1] * len(rest)))
    flat_updates = updates.reshape(-1, *rest)
    out = scatter_rows(x.reshape(count, *rest), flat_rows.expand(flat_updates.shape), flat_updates, reduction, 0)
    return out.reshape(x.shape)


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "none") -> Tensor:
    axis = normalize_axis(axis, x.ndim)
    return scatter_rows(x, wrap_index(indices, x.shape[axis]), updates, reduction, axis)


# *** Resize ***


def source_coordinate(
    mode: str, out_index: int, scale: float, in_size: int, out_size: int, roi: tuple[float, float]
) -> float:
    """The input coordinate an output index maps to under coordinate_transformation_mode."""
    if mode == "half_pixel":
        return (out_index + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (out_index + 0.5) / scale - 0.5 if out_size > 1 else 0.0
    if mode == "align_corners":
        # the resized length is in_size * scale, unrounded, when the node gave scales
        return out_index * (in_size - 1) / (in_size * scale - 1) if out_size > 1 else 0.0
    if mode == "asymmetric":
        return out_index / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_size == 1:
            return (end - start) * (in_size - 1) / 2
        return start * (in_size - 1) + out_index * (end - start) * (in_size - 1) / (out_size - 1)
    if mode == "half_pixel_symmetric":
        adjustment = out_size / (scale * in_size)
        center = in_size / 2
        offset = center * (1 - adjustment)
        return offset + (out_index + 0.5) / scale - 0.5
    raise ValueError(f"Resize: unknown coordinate_transformation_mode {mode!r}")


NEAREST: dict[str, Callable[[float], int]] = {
    "round_prefer_floor": lambda x: math.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: math.floor(x + 0.5),
    "floor": math.floor,
    "ceil": math.ceil,
}


def cubic_weights(t: float, a: float) -> list[float]:
    """Keys cubic kernel weights for the taps at offsets -1, 0, 1, 2 from floor(x), t = x - floor(x)."""

    def kernel(d: float) -> float:
        d = abs(d)
        if d <= 1:
            return (a + 2) * d**3 - (a + 3) * d**2 + 1
        if d < 2:
            return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
        return 0.0

    return [kernel(t + 1), kernel(t), kernel(1 - t), kernel(2 - t)]


def interpolation_row(x: float, in_size: int, mode: str, options: dict[str, object]) -> dict[int, float]:
    """{input index: weight} for one output position at input coordinate x."""
    if mode == "nearest":
        index = NEAREST[str(options["nearest_mode"])](x)
        return {min(max(index, 0), in_size - 1): 1.0}
    base = math.floor(x)
    if mode == "linear":
        taps, weights = [base, base + 1], [1 - (x - base), x - base]
    else:  # cubic
        taps, weights = [base - 1, base, base + 1, base + 2], cubic_weights(x - base, float(options["cubic_coeff_a"]))  # type: ignore[arg-type]
    row: dict[int, float] = {}
    inside = [(t, w) for t, w in zip(taps, weights, strict=False) if 0 <= t < in_size]
    if options["exclude_outside"] and mode == "cubic":
        total = sum(w for _, w in inside)
        inside = [(t, w / total) for t, w in inside]
    else:
        inside = [(min(max(t, 0), in_size - 1), w) for t, w in zip(taps, weights, strict=False)]
    for tap, weight in inside:
        row[tap] = row.get(tap, 0.0) + weight
    return row


def resize_axis(
    x: Tensor, axis: int, out_size: int, scale: float, roi: tuple[float, float], mode: str, options: dict[str, object]
) -> Tensor:
    """x with one axis resized by an (out, in) interpolation matrix (nearest: a gather, so ints stay exact)."""
    in_size = x.shape[axis]
    coordinate_mode = str(options["coordinate_transformation_mode"])
    rows: list[dict[int, float]] = []
    for i in range(out_size):
        source = source_coordinate(coordinate_mode, i, scale, in_size, out_size, roi)
        if coordinate_mode == "tf_crop_and_resize" and not 0 <= source <= in_size - 1:
            rows.append({})  # outside the crop box: extrapolation_value
            continue
        rows.append(interpolation_row(source, in_size, mode, options))
    if mode == "nearest" and all(rows):
        picks = Tensor([next(iter(r)) for r in rows], dtype=dtypes.int64)
        return x[(slice(None),) * axis + (picks,)]
    matrix = [[r.get(j, 0.0) for j in range(in_size)] for r in rows]
    # (..., in, ...) -> (..., out, ...): move the axis last, multiply by matrix.T, move it back
    compute = x.dtype if is_float(x.dtype) else dtypes.float32
    moved = x.cast(compute).transpose(axis, -1) @ Tensor(matrix, dtype=compute).T
    out = moved.transpose(axis, -1)
    empty = [i for i, r in enumerate(rows) if not r]
    if empty:
        mask = Tensor([not r for r in rows]).reshape([out_size if d == axis else 1 for d in range(x.ndim)])
        out = mask.where(float(options["extrapolation_value"]), out)  # type: ignore[arg-type]
    return out.cast(x.dtype) if is_float(x.dtype) else out.round().cast(x.dtype)


@onnx_op("Upsample")
def upsample(
    x: Tensor, scales_input: Tensor | None = None, mode: str = "nearest", scales: list[float] | None = None
) -> Tensor:
    # the deprecated Resize: scales as an attribute (opset 7) or input (9), asymmetric coordinates
    factors = static(scales_input) if scales_input is not None else list(scales or [])
    return resize(
        x, None, Tensor(factors), None, mode=mode, coordinate_transformation_mode="asymmetric", nearest_mode="floor"
    )


@onnx_op("Resize")
def resize(
    x: Tensor,
    roi: Tensor | None = None,
    scales: Tensor | None = None,
    sizes: Tensor | None = None,
    mode: str = "nearest",
    axes: list[int] | None = None,
    coordinate_transformation_mode: str = "half_pixel",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    keep_aspect_ratio_policy: str = "stretch",
    nearest_mode: str = "round_prefer_floor",
    antialias: int = 0,
    opset: int = 19,
) -> Tensor:
    if antialias:
        raise NotImplementedError("Resize: antialias is not supported")
    axis_list = [normalize_axis(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
    scale_list = [float(s) for s in static(scales)]
    size_list = static_ints(sizes) if sizes is not None else []
    if size_list and keep_aspect_ratio_policy != "stretch":
        pick = min if keep_aspect_ratio_policy == "not_larger" else max
        ratio = pick(s / x.shape[a] for a, s in zip(axis_list, size_list, strict=False))
        scale_list = [ratio] * len(axis_list)
        size_list = [int(x.shape[a] * ratio + 0.5) for a in axis_list]
    if not size_list:
        size_list = [math.floor(x.shape[a] * s) for a, s in zip(axis_list, scale_list, strict=False)]
    if not scale_list:
        scale_list = [s / x.shape[a] for a, s in zip(axis_list, size_list, strict=False)]
    roi_list = [float(r) for r in static(roi)]
    options: dict[str, object] = {
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "exclude_outside": exclude_outside,
        "extrapolation_value": extrapolation_value,
        "nearest_mode": nearest_mode,
    }
    out = x
    for i, (axis, size, scale) in enumerate(zip(axis_list, size_list, scale_list, strict=False)):
        box = (roi_list[i], roi_list[i + len(axis_list)]) if roi_list else (0.0, 1.0)
        if size != x.shape[axis] or coordinate_transformation_mode == "tf_crop_and_resize":
            out = resize_axis(out, axis, size, scale, box, mode, options)
    return out


@onnx_op("TensorScatter")
def tensor_scatter(
    past_cache: Tensor, update: Tensor, write_indices: Tensor | None = None, mode: str = "linear", axis: int = -2
) -> Tensor:
    # a KV-cache write: batch b's update goes to positions write_indices[b] + i along axis (wrapping when circular)
    axis = normalize_axis(axis, past_cache.ndim)
    batch, steps, capacity = update.shape[0], update.shape[axis], past_cache.shape[axis]
    start = write_indices if write_indices is not None else Tensor.zeros(batch, dtype=dtypes.int64)
    start = start.cast(dtypes.int64).reshape(batch, *([1] * (update.ndim - 1)))
    step = Tensor.arange(steps, dtype=dtypes.int64).reshape([steps if i == axis else 1 for i in range(update.ndim)])
    position = start + step
    if mode == "circular":
        position = position % capacity
    return past_cache.scatter(axis, position.expand(update.shape), update)
