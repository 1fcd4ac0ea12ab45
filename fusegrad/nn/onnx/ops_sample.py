"""ONNX GridSample and AffineGrid on fusegrad Tensors: sampling an (N, C, spatial...) tensor at normalised points.

GridSample works per spatial axis: denormalise the grid coordinate, fold it into range (padding_mode), list the taps
the mode needs (nearest 1, linear 2, cubic 4) with their weights, then gathers every combination of taps from the
input flattened to (N, C, prod(spatial)). Registered into `registry.ONNX_OPS` on import.
"""

from __future__ import annotations

import itertools
import math

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.registry import onnx_op, static_ints
from fusegrad.tensor import Tensor

CUBIC_A = -0.75


def reflect(x: Tensor, low: float, high: float) -> Tensor:
    """x folded into [low, high] by reflecting at the borders as often as needed."""
    span = high - low
    if span <= 0:
        return x.zeros_like() + low
    # distance past low, folded with period 2 * span: t in [0, 2 span) -> low + (t or 2 span - t)
    t = (x - low).abs().fmod(2 * span)
    return low + (t > span).where(2 * span - t, t)


def denormalize(coordinate: Tensor, size: int, align_corners: int) -> Tensor:
    """A grid value in [-1, 1] as an input coordinate along an axis of length size."""
    if align_corners:
        return (coordinate + 1) / 2 * (size - 1)
    return ((coordinate + 1) * size - 1) / 2


def cubic_weights(t: Tensor) -> list[Tensor]:
    """Keys cubic weights of the taps at floor(x) - 1 .. floor(x) + 2 for t = x - floor(x)."""

    def near(d: Tensor) -> Tensor:  # |d| <= 1
        return ((CUBIC_A + 2) * d - (CUBIC_A + 3)) * d * d + 1

    def far(d: Tensor) -> Tensor:  # 1 < |d| < 2
        return ((CUBIC_A * d - 5 * CUBIC_A) * d + 8 * CUBIC_A) * d - 4 * CUBIC_A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def axis_taps(x: Tensor, mode: str) -> list[tuple[Tensor, Tensor]]:
    """(integer index, weight) pairs for one axis at coordinates x."""
    if mode == "nearest":
        return [(x.round().cast(dtypes.int32), x.ones_like())]
    base = x.floor()
    t = x - base
    index = base.cast(dtypes.int32)
    if mode == "linear":
        return [(index, 1 - t), (index + 1, t)]
    return [(index + offset, w) for offset, w in zip((-1, 0, 1, 2), cubic_weights(t), strict=True)]


def fix_index(index: Tensor, size: int, padding_mode: str, align_corners: int) -> tuple[Tensor, Tensor | None]:
    """An in-range index for a tap and, for zeros padding, whether the tap was inside at all."""
    inside = (index >= 0) & (index < size)
    if padding_mode == "zeros":
        return index.clip(0, size - 1), inside
    if padding_mode == "border":
        return index.clip(0, size - 1), None
    low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
    folded = reflect(index.cast(dtypes.float32), low, high).cast(dtypes.int32)
    return folded.clip(0, size - 1), None


@onnx_op("GridSample")
def grid_sample(
    x: Tensor, grid: Tensor, align_corners: int = 0, mode: str = "linear", padding_mode: str = "zeros"
) -> Tensor:
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    batch, channels, *sizes = x.shape
    out_spatial = grid.shape[1:-1]
    points = math.prod(out_spatial)
    flat_grid = grid.reshape(batch, points, len(sizes)).cast(dtypes.float32)
    per_axis = []
    for axis, size in enumerate(sizes):
        # the grid lists coordinates last axis first: (x, y[, z])
        coordinate = denormalize(flat_grid[:, :, len(sizes) - 1 - axis], size, align_corners)
        if mode == "nearest":
            coordinate = coordinate.round()
        if padding_mode == "border":
            coordinate = coordinate.clip(0, size - 1)
        elif padding_mode == "reflection":
            low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
            coordinate = reflect(coordinate, low, high)
        taps = [(*fix_index(i, size, padding_mode, align_corners), w) for i, w in axis_taps(coordinate, mode)]
        per_axis.append(taps)
    strides = [math.prod(sizes[a + 1 :]) for a in range(len(sizes))]
    values = x.reshape(batch, channels, -1).cast(dtypes.float32)
    out = Tensor.zeros(batch, channels, points, dtype=dtypes.float32)
    for combination in itertools.product(*per_axis):
        flat_index = sum(index * stride for (index, _, _), stride in zip(combination, strides, strict=True))
        weight = math.prod(w if inside is None else inside.where(w, 0) for _, inside, w in combination)
        assert isinstance(flat_index, Tensor)
        assert isinstance(weight, Tensor)
        gathered = values.gather(2, flat_index.cast(dtypes.int64).unsqueeze(1).expand(batch, channels, points))
        out = out + gathered * weight.unsqueeze(1)
    return out.reshape(batch, channels, *out_spatial).cast(x.dtype)


@onnx_op("AffineGrid")
def affine_grid(theta: Tensor, size: Tensor, align_corners: int = 0) -> Tensor:
    batch, _, *spatial = static_ints(size)
    # normalised positions along each axis, then the homogeneous grid (spatial..., [x, y, (z,) 1])
    axes = []
    for length in spatial:
        if align_corners:
            axes.append(Tensor.linspace(-1, 1, length) if length > 1 else Tensor.zeros(1))
        else:
            axes.append((Tensor.arange(length) * 2 + 1) / length - 1)
    grids = Tensor.meshgrid(*axes, indexing="ij")
    homogeneous = Tensor.stack(*reversed(grids), Tensor.ones(*spatial), dim=-1).cast(theta.dtype)
    # (P, D + 1) @ (N, D + 1, D) -> (N, P, D)
    points = homogeneous.reshape(-1, len(spatial) + 1) @ theta.transpose(1, 2)
    return points.reshape(batch, *spatial, len(spatial))
