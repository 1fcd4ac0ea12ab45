"""ONNX network layers on fusegrad Tensors: Gemm/MatMul, Conv/ConvTranspose (groups, dilations, auto_pad), pooling.

ONNX lists pads as [begin of each spatial axis..., end of each...]; fusegrad's conv and pool take torch's flat
order (last axis first, (begin, end) pairs), so `torch_pads` converts. Registered into `registry.ONNX_OPS` on import.
"""

from __future__ import annotations

import itertools
import math

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.registry import onnx_op, static_ints
from fusegrad.tensor import Tensor


@onnx_op("MatMul")
def matmul(x: Tensor, y: Tensor) -> Tensor:
    return x @ y


@onnx_op("MatMulInteger")
def matmul_integer(
    a: Tensor, b: Tensor, a_zero_point: Tensor | None = None, b_zero_point: Tensor | None = None
) -> Tensor:
    # a 1-d zero point of a has one entry per row: (M,) -> (M, 1)
    a_zero = a_zero_point.reshape(-1, 1) if a_zero_point is not None and a_zero_point.ndim == 1 else a_zero_point
    shifted_a = a.cast(dtypes.int32) - (a_zero.cast(dtypes.int32) if a_zero is not None else 0)
    shifted_b = b.cast(dtypes.int32) - (b_zero_point.cast(dtypes.int32) if b_zero_point is not None else 0)
    return shifted_a @ shifted_b


@onnx_op("Gemm")
def gemm(
    a: Tensor,
    b: Tensor,
    c: Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,  # noqa: N803  (ONNX's attribute name)
    transB: int = 0,  # noqa: N803
) -> Tensor:
    product = (a.T if transA else a) @ (b.T if transB else b)
    if alpha != 1.0:
        product = product * alpha
    if c is None:
        return product
    return product + (c * beta if beta != 1.0 else c)


def same_pads(
    in_sizes: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int], auto_pad: str
) -> list[int]:
    """ONNX pads for auto_pad SAME_UPPER / SAME_LOWER: the output is ceil(in / stride), the odd pixel last / first."""
    begins, ends = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations, strict=False):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return begins + ends


def resolve_pads(
    x: Tensor, kernel: list[int], strides: list[int], dilations: list[int], pads: list[int] | None, auto_pad: str
) -> list[int]:
    """ONNX-ordered pads from the pads attribute or auto_pad."""
    spatial = len(kernel)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return same_pads(x.shape[-spatial:], kernel, strides, dilations, auto_pad)
    if auto_pad == "VALID" or pads is None:
        return [0] * (2 * spatial)
    return list(pads)


def torch_pads(pads: list[int]) -> tuple[int, ...]:
    """[b1, b2, ..., e1, e2, ...] -> (b_last, e_last, ..., b1, e1)."""
    half = len(pads) // 2
    return tuple(p for axis in reversed(range(half)) for p in (pads[axis], pads[axis + half]))


@onnx_op("Conv")
def conv(
    x: Tensor,
    w: Tensor,
    b: Tensor | None = None,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Tensor:
    kernel = list(w.shape[2:])
    strides = strides or [1] * len(kernel)
    dilations = dilations or [1] * len(kernel)
    padding = torch_pads(resolve_pads(x, kernel, strides, dilations, pads, auto_pad))
    return x.conv2d(w, b, groups=group, stride=tuple(strides), dilation=tuple(dilations), padding=padding)


@onnx_op("ConvInteger")
def conv_integer(
    x: Tensor,
    w: Tensor,
    x_zero_point: Tensor | None = None,
    w_zero_point: Tensor | None = None,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Tensor:
    # zero points are subtracted before padding, so the pad value is the zero point itself
    shifted_x = x.cast(dtypes.int32) - (x_zero_point.cast(dtypes.int32) if x_zero_point is not None else 0)
    # a 1-d weight zero point has one entry per output channel: (M,) -> (M, 1, ...)
    w_zero = w_zero_point.reshape(-1, *([1] * (w.ndim - 1))) if w_zero_point is not None else Tensor(0)
    shifted_w = w.cast(dtypes.int32) - w_zero.cast(dtypes.int32)
    return conv(shifted_x, shifted_w, None, auto_pad, dilations, group, kernel_shape, pads, strides)


@onnx_op("ConvTranspose")
def conv_transpose(
    x: Tensor,
    w: Tensor,
    b: Tensor | None = None,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    output_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Tensor:
    kernel = list(w.shape[2:])
    spatial = len(kernel)
    strides = strides or [1] * spatial
    dilations = dilations or [1] * spatial
    extra = list(output_padding or [0] * spatial)
    in_sizes = x.shape[2:]
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(in_sizes, strides, kernel, dilations, strict=False)]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # pads follow from the wanted output size: total = full + output_padding - wanted
        wanted = (
            list(output_shape)[-spatial:]
            if output_shape is not None
            else [i * s for i, s in zip(in_sizes, strides, strict=False)]
        )
        totals = [f + e - o for f, e, o in zip(full, extra, wanted, strict=False)]
        # the spec gives the odd pixel to the end only for SAME_UPPER (a negative total grows the output)
        upper = auto_pad == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
        pad_list = begins + [t - b for t, b in zip(totals, begins, strict=False)]
    else:
        pad_list = list(pads) if pads is not None and auto_pad != "VALID" else [0] * (2 * spatial)
    # fusegrad's conv_transpose2d takes symmetric padding; pads are cropped afterwards (negative ones add zeros)
    out = x.conv_transpose2d(
        w, b, groups=group, stride=tuple(strides), dilation=tuple(dilations), output_padding=tuple(extra)
    )
    crop = [(0, 0), (0, 0)] + [(-pad_list[axis], -pad_list[axis + spatial]) for axis in range(spatial)]
    return out.pad(crop)


# *** pooling ***


def pool_setup(
    x: Tensor,
    kernel_shape: list[int],
    strides: list[int] | None,
    dilations: list[int] | None,
    pads: list[int] | None,
    auto_pad: str,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(strides, dilations, torch-ordered padding) of a pooling node."""
    spatial = len(kernel_shape)
    stride_list = strides or [1] * spatial
    dilation_list = dilations or [1] * spatial
    onnx_pads = resolve_pads(x, kernel_shape, stride_list, dilation_list, pads, auto_pad)
    return tuple(stride_list), tuple(dilation_list), torch_pads(onnx_pads)


@onnx_op("MaxPool")
def max_pool(
    x: Tensor,
    kernel_shape: list[int],
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    storage_order: int = 0,
    strides: list[int] | None = None,
    node_outputs: int = 1,
) -> Tensor | tuple[Tensor, Tensor]:
    stride, dilation, padding = pool_setup(x, kernel_shape, strides, dilations, pads, auto_pad)
    if node_outputs == 1:  # no Indices output: skip computing them
        pooled = x.max_pool2d(tuple(kernel_shape), stride, dilation, padding, bool(ceil_mode))
        assert isinstance(pooled, Tensor)
        return pooled
    values, indices = x.max_pool2d(tuple(kernel_shape), stride, dilation, padding, bool(ceil_mode), return_indices=True)  # type: ignore[misc]
    spatial = x.shape[2:]
    if storage_order:  # column-major: index = w * H + h (2-d only)
        rows, cols = indices // spatial[1], indices % spatial[1]
        indices = cols * spatial[0] + rows
    # fusegrad's indices count within one (n, c) plane; ONNX counts over the whole tensor
    plane = math.prod(spatial)
    offset = Tensor.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], *([1] * len(spatial))) * plane
    return values, (indices.cast(dtypes.int64) + offset)


@onnx_op("AveragePool")
def average_pool(
    x: Tensor,
    kernel_shape: list[int],
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Tensor:
    stride, dilation, padding = pool_setup(x, kernel_shape, strides, dilations, pads, auto_pad)
    return x.avg_pool2d(tuple(kernel_shape), stride, dilation, padding, bool(ceil_mode), bool(count_include_pad))


@onnx_op("LpPool")
def lp_pool(
    x: Tensor,
    kernel_shape: list[int],
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    p: int = 2,
    strides: list[int] | None = None,
) -> Tensor:
    stride, dilation, padding = pool_setup(x, kernel_shape, strides, dilations, pads, auto_pad)
    # sum |x|^p over the window = mean (counting pads as zeros) * window size
    mean = x.abs().pow(p).avg_pool2d(tuple(kernel_shape), stride, dilation, padding, bool(ceil_mode), True)
    return (mean * math.prod(kernel_shape)).pow(1 / p)


@onnx_op("GlobalAveragePool")
def global_average_pool(x: Tensor) -> Tensor:
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalMaxPool")
def global_max_pool(x: Tensor) -> Tensor:
    return x.max(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalLpPool")
def global_lp_pool(x: Tensor, p: int = 2) -> Tensor:
    return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1 / p)


@onnx_op("MaxUnpool")
def max_unpool(
    x: Tensor,
    indices: Tensor,
    output_shape: Tensor | None = None,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Tensor:
    assert kernel_shape is not None, "MaxUnpool: kernel_shape is a required attribute"
    spatial = len(kernel_shape)
    stride_list = strides or [1] * spatial
    pad_list = pads or [0] * (2 * spatial)
    if output_shape is not None:
        out_spatial = [int(s) for s in output_shape.tolist()][-spatial:]
    else:
        out_spatial = [
            (i - 1) * s + k - pad_list[a] - pad_list[a + spatial]
            for a, (i, s, k) in enumerate(zip(x.shape[2:], stride_list, kernel_shape, strict=False))
        ]
    # ONNX indices count over the whole output tensor: scatter into a flat (N*C*H*W) buffer
    flat = Tensor.zeros(x.shape[0] * x.shape[1] * math.prod(out_spatial), dtype=x.dtype)
    out = flat.scatter(0, indices.reshape(-1).cast(dtypes.int64), x.reshape(-1))
    return out.reshape(x.shape[0], x.shape[1], *out_spatial)


def spread(t: Tensor, axis: int, stride: int) -> Tensor:
    """t with stride - 1 zeros between neighbours along axis: (..., o, ...) -> (..., (o - 1) * stride + 1, ...)."""
    if stride == 1:
        return t
    size = t.shape[axis]
    widened = t.unsqueeze(axis + 1).pad([(0, 0)] * (axis + 1) + [(0, stride - 1)] + [(0, 0)] * (t.ndim - axis - 1))
    merged = widened.reshape(*t.shape[:axis], size * stride, *t.shape[axis + 1 :])
    return merged.shrink([(0, (size - 1) * stride + 1) if i == axis else None for i in range(t.ndim)])


@onnx_op("Col2Im")
def col2im(
    x: Tensor,
    image_shape: Tensor,
    block_shape: Tensor,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Tensor:
    # x (N, C * prod(block), L) -> image (N, C, spatial...): every column adds its block back where it came from
    image, block = static_ints(image_shape), static_ints(block_shape)
    spatial = len(image)
    dilation = dilations or [1] * spatial
    stride = strides or [1] * spatial
    pad_list = pads or [0] * (2 * spatial)
    padded = [size + pad_list[a] + pad_list[a + spatial] for a, size in enumerate(image)]
    blocks = [(p - (d * (k - 1) + 1)) // s + 1 for p, d, k, s in zip(padded, dilation, block, stride, strict=True)]
    batch = x.shape[0]
    columns = x.reshape(batch, -1, *block, *blocks)  # (N, C, k..., o...)
    out = Tensor.zeros(batch, columns.shape[1], *padded, dtype=x.dtype)
    for offset in itertools.product(*[range(k) for k in block]):
        part = columns[(slice(None), slice(None), *offset)]  # (N, C, o...)
        for a in range(spatial):
            part = spread(part, 2 + a, stride[a])
        widths = [(0, 0), (0, 0)]
        for a in range(spatial):
            start = offset[a] * dilation[a]
            widths.append((start, padded[a] - start - part.shape[2 + a]))
        out = out + part.pad(widths)
    crop = [None, None] + [(pad_list[a], pad_list[a] + image[a]) for a in range(spatial)]
    return out.shrink(crop)
