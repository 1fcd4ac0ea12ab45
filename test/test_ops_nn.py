"""Tests for fusegrad/mixin/nn.py: conv, pooling, resampling, normalisation, attention and losses against torch.

Every op is compared with torch.nn.functional (CPU) on small random inputs over strides, paddings, dilations, groups,
ceil_mode, masks and reductions, in float32 (and float16 for a few). Shapes are few and small: every distinct kernel
costs a C compile on a cold cache. Backward checks run once Tensor.backward exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusegrad import Tensor
from fusegrad.dtype import dtypes
from fusegrad.uop import Ops

F32 = {"rtol": 1e-4, "atol": 1e-5}
F16 = {"rtol": 1e-2, "atol": 1e-2}
HAS_BACKWARD = hasattr(Tensor, "backward")
TORCH_CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}
TORCH_CONV_T = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}


# *** helpers ***


def rand(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def labels(*shape: int, classes: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, classes, size=shape).astype(np.int32)


def check(got: Tensor, expected: torch.Tensor, tol: dict[str, float] = F32) -> None:
    want = expected.detach().numpy()
    out = got.numpy()
    assert out.shape == want.shape, f"shape {out.shape} != torch {want.shape}"
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), **tol)


def tt(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


# *** windows ***


@pytest.mark.parametrize(
    ("shape", "k", "s", "d"),
    [((2, 7, 9), (2, 3), (1, 2), (1, 1)), ((2, 40), (3,), (4,), (2,)), ((5,), (2,), (7,), (3,))],
)
def test_pool_windows_match_numpy(
    shape: tuple[int, ...], k: tuple[int, ...], s: tuple[int, ...], d: tuple[int, ...]
) -> None:
    x = rand(*shape)
    spans = [d_ * (k_ - 1) + 1 for k_, d_ in zip(k, d, strict=True)]
    view = np.lib.stride_tricks.sliding_window_view(x, spans, axis=tuple(range(-len(k), 0)))
    view = view[(..., *[slice(None, None, s_) for s_ in s], *[slice(None, None, d_) for d_ in d])]
    np.testing.assert_array_equal(Tensor(x)._pool(k, s, d).numpy(), view)


# *** convolution ***

CONV_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 7, 7), (4, 3, 3, 3), {}),
    ((2, 3, 7, 6), (4, 3, 3, 2), {"stride": 2, "padding": 1}),
    ((1, 4, 8, 8), (6, 2, 3, 3), {"groups": 2, "dilation": 2, "padding": (2, 1)}),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"groups": 4, "stride": (1, 2), "padding": 1}),
    ((2, 2, 5, 5), (3, 2, 1, 1), {"stride": 3}),
    ((1, 2, 3, 3), (2, 2, 4, 4), {"padding": 1}),
    ((2, 3, 10), (4, 3, 3), {"stride": 2, "dilation": 2, "padding": 2}),
    ((1, 2, 4, 5, 4), (3, 2, 3, 3, 2), {"padding": 1}),
    ((1, 2, 8, 7), (3, 2, 3, 3), {"padding": "same", "dilation": (2, 1)}),
    ((1, 2, 6, 6), (3, 2, 2, 2), {"padding": "valid"}),
]


@pytest.mark.parametrize(("xs", "ws", "kwargs"), CONV_CASES)
def test_conv2d(xs: tuple[int, ...], ws: tuple[int, ...], kwargs: dict[str, Any]) -> None:
    x, w, b = rand(*xs), rand(*ws, seed=1), rand(ws[0], seed=2)
    check(Tensor(x).conv2d(Tensor(w), Tensor(b), **kwargs), TORCH_CONV[len(xs)](tt(x), tt(w), tt(b), **kwargs))


def test_conv2d_asymmetric_padding_orders_like_f_pad() -> None:
    x, w = rand(1, 2, 5, 6), rand(3, 2, 3, 3, seed=1)
    pads = (2, 0, 1, 3)  # (left, right, top, bottom)
    check(Tensor(x).conv2d(Tensor(w), padding=pads), F.conv2d(F.pad(tt(x), pads), tt(w)))


def test_conv2d_is_one_kernel() -> None:
    x, w, b = Tensor(rand(2, 4, 9, 9)), Tensor(rand(8, 2, 3, 3, seed=1)), Tensor(rand(8, seed=2))
    out = x.conv2d(w, b, groups=2, stride=2, padding=1, dilation=1)
    assert len([item for item in out.schedule() if item.ast.op is Ops.SINK]) == 1  # besides the inputs' uploads


def test_conv2d_float16() -> None:
    x, w = rand(1, 3, 6, 6, dtype=np.float16), rand(4, 3, 3, 3, seed=1, dtype=np.float16)
    out = Tensor(x).conv2d(Tensor(w), padding=1)
    assert out.dtype == dtypes.float16
    check(out, F.conv2d(tt(x).float(), tt(w).float(), padding=1), F16)


def test_conv2d_accumulate_dtype() -> None:
    x, w = rand(1, 2, 4, 4, dtype=np.float16), rand(2, 2, 3, 3, seed=1, dtype=np.float16)
    out = Tensor(x).conv2d(Tensor(w), dtype=dtypes.float32)
    assert out.dtype == dtypes.float32
    check(out, F.conv2d(tt(x).float(), tt(w).float()), F16)


def test_conv2d_on_python_device() -> None:
    x, w = rand(1, 2, 4, 4), rand(2, 2, 2, 2, seed=1)
    check(Tensor(x, device="PYTHON").conv2d(Tensor(w, device="PYTHON"), padding=1), F.conv2d(tt(x), tt(w), padding=1))


@pytest.mark.parametrize(
    ("xs", "ws", "kwargs", "match"),
    [
        ((1, 4, 5, 5), (8, 3, 3, 3), {}, r"conv2d: input \(1, 4, 5, 5\) has 4 channels but weight \(8, 3, 3, 3\)"),
        ((1, 4, 5, 5), (8, 4, 3), {}, r"conv2d: input \(1, 4, 5, 5\) and weight \(8, 4, 3\) need the same rank"),
        ((1, 4, 5, 5), (6, 1, 3, 3), {"groups": 4}, r"groups=4 must divide"),
        ((1, 2, 5, 5), (3, 2, 3, 3), {"bias": (4,)}, r"bias shape \(4,\) does not match the 3 output channels"),
        ((1, 2, 3, 3), (3, 2, 5, 5), {}, r"pool: kernel 5 .* does not fit an axis of size 3"),
        ((1, 2, 5, 5), (3, 2, 3, 3), {"padding": (1, 2, 3)}, r"padding must be an int or a sequence of 2 or 4"),
        ((1, 2, 5, 5), (3, 2, 3, 3), {"padding": "same", "stride": 2}, r"padding='same' needs stride 1"),
        ((1, 2, 5, 5), (3, 2, 3, 3), {"padding": "full"}, r"padding string must be 'valid' or 'same'"),
    ],
)
def test_conv2d_errors(xs: tuple[int, ...], ws: tuple[int, ...], kwargs: dict[str, Any], match: str) -> None:
    if "bias" in kwargs:
        kwargs = {**kwargs, "bias": Tensor.zeros(*kwargs["bias"])}
    with pytest.raises(ValueError, match=match):
        Tensor.zeros(*xs).conv2d(Tensor.zeros(*ws), **kwargs)


CONV_T_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 4, 4), (3, 2, 3, 3), {}),
    ((1, 3, 4, 5), (3, 2, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ((1, 4, 3, 4), (4, 1, 3, 2), {"groups": 2, "stride": (2, 1), "dilation": 2, "padding": (1, 0)}),
    ((2, 2, 5), (2, 3, 4), {"stride": 3, "padding": 2}),
]


@pytest.mark.parametrize(("xs", "ws", "kwargs"), CONV_T_CASES)
def test_conv_transpose2d(xs: tuple[int, ...], ws: tuple[int, ...], kwargs: dict[str, Any]) -> None:
    groups = kwargs.get("groups", 1)
    x, w, b = rand(*xs), rand(*ws, seed=1), rand(ws[1] * groups, seed=2)
    check(
        Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), **kwargs), TORCH_CONV_T[len(xs)](tt(x), tt(w), tt(b), **kwargs)
    )


def test_conv_transpose2d_channel_error() -> None:
    with pytest.raises(
        ValueError, match=r"conv_transpose2d: input \(1, 3, 4, 4\) has 3 channels but weight \(2, 2, 3, 3\)"
    ):
        Tensor.zeros(1, 3, 4, 4).conv_transpose2d(Tensor.zeros(2, 2, 3, 3))


# *** pooling ***

POOL_CASES: list[dict[str, Any]] = [
    {"kernel_size": (2, 2)},
    {"kernel_size": (3, 3), "stride": 1, "padding": 1},
    {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
    {"kernel_size": (3, 3), "stride": 2, "ceil_mode": True},
    {"kernel_size": (3, 2), "stride": (2, 3), "padding": 1, "ceil_mode": True},
]


@pytest.mark.parametrize("kwargs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(kwargs: dict[str, Any], count_include_pad: bool) -> None:
    x = rand(2, 3, 7, 8)
    got = Tensor(x).avg_pool2d(**kwargs, count_include_pad=count_include_pad)
    check(got, F.avg_pool2d(tt(x), **kwargs, count_include_pad=count_include_pad))


def test_avg_pool_1d_and_3d() -> None:
    x1, x3 = rand(2, 3, 9), rand(1, 2, 5, 4, 6)
    check(Tensor(x1).avg_pool2d((3,), stride=2, padding=1), F.avg_pool1d(tt(x1), 3, stride=2, padding=1))
    check(Tensor(x3).avg_pool2d((2, 2, 3)), F.avg_pool3d(tt(x3), (2, 2, 3)))


@pytest.mark.parametrize("kwargs", [*POOL_CASES, {"kernel_size": (2, 3), "stride": 1, "dilation": (2, 1)}])
def test_max_pool2d(kwargs: dict[str, Any]) -> None:
    x = rand(2, 3, 7, 8)
    check(Tensor(x).max_pool2d(**kwargs), F.max_pool2d(tt(x), **kwargs))


@pytest.mark.parametrize("kwargs", [POOL_CASES[0], POOL_CASES[2], POOL_CASES[4]])
def test_max_pool2d_indices(kwargs: dict[str, Any]) -> None:
    x = rand(2, 3, 7, 8)
    values, indices = Tensor(x).max_pool2d(**kwargs, return_indices=True)
    want_values, want_indices = F.max_pool2d(tt(x), **kwargs, return_indices=True)
    check(values, want_values)
    assert indices.dtype == dtypes.int32
    np.testing.assert_array_equal(indices.numpy(), want_indices.numpy())


def test_max_pool2d_indices_pick_first_on_ties() -> None:
    x = np.round(rand(1, 2, 6, 6)).astype(np.float32)  # few distinct values: many ties
    _, indices = Tensor(x).max_pool2d((3, 3), stride=1, return_indices=True)
    np.testing.assert_array_equal(indices.numpy(), F.max_pool2d(tt(x), 3, stride=1, return_indices=True)[1].numpy())


def test_max_pool1d_and_default_kernel_on_int() -> None:
    x = rand(2, 3, 9)
    check(Tensor(x).max_pool2d((3,), stride=2, padding=1), F.max_pool1d(tt(x), 3, stride=2, padding=1))
    xi = np.arange(32, dtype=np.int32).reshape(1, 2, 4, 4)
    np.testing.assert_array_equal(Tensor(xi).max_pool2d().numpy(), xi.reshape(1, 2, 2, 2, 2, 2).max((3, 5)))


@pytest.mark.parametrize(("shape", "output_size"), [((2, 3, 6, 8), None), ((2, 3, 7, 9), (7, 9))])
def test_max_unpool2d(shape: tuple[int, ...], output_size: tuple[int, int] | None) -> None:
    x = rand(*shape)
    values, indices = Tensor(x).max_pool2d(return_indices=True)
    want_values, want_indices = F.max_pool2d(tt(x), 2, return_indices=True)
    got = Tensor.max_unpool2d(values, indices, output_size=output_size)
    check(got, F.max_unpool2d(want_values, want_indices, 2, output_size=output_size))


def test_pool_errors() -> None:
    with pytest.raises(ValueError, match=r"max_pool2d: kernel \(5, 5\) .* larger than the padded input"):
        Tensor.zeros(1, 1, 3, 3).max_pool2d((5, 5))
    with pytest.raises(ValueError, match=r"avg_pool2d: stride must be an int or 2 ints, got \(1, 2, 3\)"):
        Tensor.zeros(1, 1, 4, 4).avg_pool2d(stride=(1, 2, 3))
    with pytest.raises(ValueError, match=r"max_unpool2d: indices shape \(1, 1, 2\) does not match values"):
        Tensor.zeros(1, 1, 2, 2).max_unpool2d(Tensor.zeros(1, 1, 2, dtype=dtypes.int32))


# *** resampling ***


@pytest.mark.parametrize("mode", ["linear", "nearest", "nearest-exact"])
@pytest.mark.parametrize("size", [(5, 13), (3, 4)])
def test_interpolate_2d(mode: str, size: tuple[int, int]) -> None:
    x = rand(2, 3, 6, 7)
    torch_mode = "bilinear" if mode == "linear" else mode
    check(Tensor(x).interpolate(size, mode=mode), F.interpolate(tt(x), size=size, mode=torch_mode))


@pytest.mark.parametrize(("xs", "size"), [((2, 3, 5), (11,)), ((2, 3, 5), (1,)), ((1, 2, 3, 4, 3), (5, 2, 4))])
def test_interpolate_linear_align_corners(xs: tuple[int, ...], size: tuple[int, ...]) -> None:
    x = rand(*xs)
    torch_mode = {1: "linear", 3: "trilinear"}[len(size)]
    got = Tensor(x).interpolate(size, mode="linear", align_corners=True)
    check(got, F.interpolate(tt(x), size=size, mode=torch_mode, align_corners=True))


def test_interpolate_trilinear_and_float16() -> None:
    x = rand(1, 2, 3, 4, 3)
    check(Tensor(x).interpolate((5, 2, 4)), F.interpolate(tt(x), size=(5, 2, 4), mode="trilinear"))
    xh = rand(1, 2, 4, 5, dtype=np.float16)
    got = Tensor(xh).interpolate((7, 3))
    assert got.dtype == dtypes.float16
    check(got, F.interpolate(tt(xh).float(), size=(7, 3), mode="bilinear"), F16)


@pytest.mark.parametrize(
    ("xs", "size"),
    [((2, 3, 64, 64), (10, 10)), ((2, 3, 12, 20), (9, 31)), ((1, 2, 7, 5), (13, 17)), ((1, 1, 9, 31), (20, 12))],
)
def test_interpolate_bilinear_uint8_matches_torch_exactly(xs: tuple[int, ...], size: tuple[int, int]) -> None:
    """uint8 goes through torch's fixed-point path (rounding after each axis): every value equal, down and up."""
    x = np.random.default_rng(0).integers(0, 256, xs).astype(np.uint8)
    got = Tensor(x).interpolate(size, mode="linear")
    assert got.dtype == dtypes.uint8
    np.testing.assert_array_equal(got.numpy(), F.interpolate(torch.from_numpy(x), size=size, mode="bilinear").numpy())


def test_interpolate_errors() -> None:
    x = Tensor.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match=r"interpolate: mode must be linear, nearest or nearest-exact, got 'cubic'"):
        x.interpolate((2, 2), mode="cubic")
    with pytest.raises(ValueError, match=r"interpolate: align_corners needs mode 'linear'"):
        x.interpolate((2, 2), mode="nearest", align_corners=True)
    with pytest.raises(ValueError, match=r"interpolate: size must be 1..4 positive ints"):
        x.interpolate((1, 1, 1, 1, 1))


# *** normalisation ***


@pytest.mark.parametrize(("axis", "normalized"), [(-1, (6,)), ((-2, -1), (5, 6))])
def test_layernorm(axis: int | tuple[int, ...], normalized: tuple[int, ...]) -> None:
    x = rand(2, 3, 5, 6) * 3 + 1
    check(Tensor(x).layernorm(axis, eps=1e-3), F.layer_norm(tt(x), normalized, eps=1e-3))


@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm(affine: bool) -> None:
    x, mean, var = rand(2, 3, 4, 5), rand(3, seed=1), np.abs(rand(3, seed=2)) + 0.5
    weight, bias = (rand(3, seed=3), rand(3, seed=4)) if affine else (None, None)
    invstd = Tensor(1 / np.sqrt(var + 1e-5))
    got = Tensor(x).batchnorm(
        None if weight is None else Tensor(weight), None if bias is None else Tensor(bias), Tensor(mean), invstd
    )
    want = F.batch_norm(
        tt(x), tt(mean), tt(var), None if weight is None else tt(weight), None if bias is None else tt(bias)
    )
    check(got, want)


def test_batchnorm_last_axis_and_scalar_invstd() -> None:
    x, mean = rand(4, 5), rand(5, seed=1)
    got = Tensor(x).batchnorm(None, None, Tensor(mean), Tensor(2.0), axis=-1)
    np.testing.assert_allclose(got.numpy(), (x - mean) * 2.0, **F32)


# *** attention ***


@pytest.mark.parametrize(("mask_kind", "causal"), [(None, False), (None, True), ("bool", False), ("float", False)])
def test_scaled_dot_product_attention(mask_kind: str | None, causal: bool) -> None:
    q, k, v = rand(2, 3, 5, 4), rand(2, 3, 6, 4, seed=1), rand(2, 3, 6, 7, seed=2)
    mask: np.ndarray | None = None
    if mask_kind == "bool":
        mask = np.random.default_rng(3).random((5, 6)) < 0.7
        mask[:, 0] = True  # every query attends somewhere
    elif mask_kind == "float":
        mask = rand(5, 6, seed=3)
    got = Tensor(q).scaled_dot_product_attention(
        Tensor(k), Tensor(v), attn_mask=None if mask is None else Tensor(mask), is_causal=causal
    )
    want = F.scaled_dot_product_attention(tt(q), tt(k), tt(v), None if mask is None else tt(mask), is_causal=causal)
    check(got, want)


def test_scaled_dot_product_attention_gqa_and_float16() -> None:
    q, k, v = rand(1, 4, 3, 8), rand(1, 2, 5, 8, seed=1), rand(1, 2, 5, 8, seed=2)
    got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True)
    check(got, F.scaled_dot_product_attention(tt(q), tt(k), tt(v), enable_gqa=True))
    qh, kh, vh = (a.astype(np.float16) for a in (q, rand(1, 4, 5, 8, seed=1), rand(1, 4, 5, 8, seed=2)))
    got = Tensor(qh).scaled_dot_product_attention(Tensor(kh), Tensor(vh), is_causal=True)
    assert got.dtype == dtypes.float16
    check(got, F.scaled_dot_product_attention(tt(qh).float(), tt(kh).float(), tt(vh).float(), is_causal=True), F16)


def test_scaled_dot_product_attention_errors_and_dropout() -> None:
    q = Tensor(rand(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"attn_mask and is_causal=True cannot both be set"):
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(3, 3), is_causal=True)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\], got 1.5"):
        q.scaled_dot_product_attention(q, q, dropout_p=1.5)
    # outside training, dropout is the identity
    np.testing.assert_allclose(
        q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy(), q.scaled_dot_product_attention(q, q).numpy()
    )
    with Tensor.train():
        assert (q.scaled_dot_product_attention(q, q, dropout_p=1.0).numpy() == 0).all()
        Tensor.manual_seed(0)
        # zero queries: each of the 3 keys gets probability 1/3; values of ones: an output sums the kept ones / 0.5
        dropped = q.zeros_like().scaled_dot_product_attention(q, q.ones_like(), dropout_p=0.5).numpy()
    # so every output is a multiple of 2/3, and not all of them are 1 (no dropout)
    assert np.allclose(dropped * 1.5, np.round(dropped * 1.5), atol=1e-5)
    assert not np.allclose(dropped, 1.0)


# *** losses ***


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_labels(reduction: str, smoothing: float) -> None:
    x, y = rand(4, 5), labels(4, classes=5)
    got = Tensor(x).cross_entropy(Tensor(y), reduction=reduction, label_smoothing=smoothing)
    check(got, F.cross_entropy(tt(x), tt(y).long(), reduction=reduction, label_smoothing=smoothing))


def test_cross_entropy_probabilities_spatial_and_1d() -> None:
    x, p = rand(3, 5, 2), np.abs(rand(3, 5, 2, seed=1))
    got = Tensor(x).cross_entropy(Tensor(p), label_smoothing=0.1)
    check(got, F.cross_entropy(tt(x), tt(p), label_smoothing=0.1))
    y = labels(3, 2, classes=5)
    check(Tensor(x).cross_entropy(Tensor(y), reduction="none"), F.cross_entropy(tt(x), tt(y).long(), reduction="none"))
    x1 = rand(5)
    check(Tensor(x1).cross_entropy(Tensor(2)), F.cross_entropy(tt(x1), torch.tensor(2)))


def test_cross_entropy_errors() -> None:
    x = Tensor.zeros(4, 5)
    with pytest.raises(ValueError, match=r"target shape \(5,\) fits neither logits \(4, 5\) .* nor \(4,\)"):
        x.cross_entropy(Tensor.zeros(5, dtype=dtypes.int32))
    with pytest.raises(ValueError, match=r"reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        x.cross_entropy(Tensor.zeros(4, dtype=dtypes.int32), reduction="avg")
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\], got 2"):
        x.cross_entropy(Tensor.zeros(4, dtype=dtypes.int32), label_smoothing=2)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_sparse_categorical_crossentropy(reduction: str) -> None:
    x, y = rand(2, 3, 5), labels(2, 3, classes=5)
    y[0, 1] = 2
    got = Tensor(x).sparse_categorical_crossentropy(Tensor(y), ignore_index=2, label_smoothing=0.1, reduction=reduction)
    want = F.cross_entropy(
        tt(x).permute(0, 2, 1), tt(y).long(), ignore_index=2, label_smoothing=0.1, reduction=reduction
    )
    check(got, want)


def test_sparse_categorical_crossentropy_default_ignore_index() -> None:
    x, y = rand(4, 5), labels(4, classes=5)
    check(Tensor(x).sparse_categorical_crossentropy(Tensor(y)), F.cross_entropy(tt(x), tt(y).long()))
    with pytest.raises(ValueError, match=r"labels shape \(5,\) does not match logits \(4, 5\)"):
        Tensor(x).sparse_categorical_crossentropy(Tensor.zeros(5, dtype=dtypes.int32))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [True, False])
def test_nll_loss(reduction: str, weighted: bool) -> None:
    x, y, w = rand(6, 4).clip(-3, 0), labels(6, classes=4), np.abs(rand(4, seed=2)) + 0.1
    y[0] = 1
    got = Tensor(x).nll_loss(Tensor(y), Tensor(w) if weighted else None, ignore_index=1, reduction=reduction)
    check(got, F.nll_loss(tt(x), tt(y).long(), tt(w) if weighted else None, ignore_index=1, reduction=reduction))


def test_nll_loss_spatial() -> None:
    x, y = rand(2, 4, 3), labels(2, 3, classes=4)
    check(Tensor(x).nll_loss(Tensor(y)), F.nll_loss(tt(x), tt(y).long()))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropy(reduction: str) -> None:
    p = np.random.default_rng(0).uniform(0.05, 0.95, (4, 5)).astype(np.float32)
    y = (rand(4, 5, seed=1) > 0).astype(np.float32)
    check(
        Tensor(p).binary_crossentropy(Tensor(y), reduction), F.binary_cross_entropy(tt(p), tt(y), reduction=reduction)
    )


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("pos_weight", [True, False])
def test_binary_crossentropy_logits(reduction: str, pos_weight: bool) -> None:
    x = rand(4, 5) * 4
    x[0, :2] = [80.0, -80.0]  # stable far from zero
    y, pw = (rand(4, 5, seed=1) > 0).astype(np.float32), np.abs(rand(5, seed=2))
    got = Tensor(x).binary_crossentropy_logits(Tensor(y), reduction, Tensor(pw) if pos_weight else None)
    check(
        got,
        F.binary_cross_entropy_with_logits(
            tt(x), tt(y), reduction=reduction, pos_weight=tt(pw) if pos_weight else None
        ),
    )


# *** composition ***


def test_linear_and_sequential() -> None:
    x, w, b, w1 = rand(3, 4), rand(4, 5, seed=1), rand(5, seed=2), rand(4, seed=3)
    check(Tensor(x).linear(Tensor(w), Tensor(b)), F.linear(tt(x), tt(w).T, tt(b)))
    np.testing.assert_allclose(Tensor(x).linear(Tensor(w1)).numpy(), x * w1, **F32)
    assert Tensor(x).linear(Tensor(w), dtype=dtypes.float16).dtype == dtypes.float16
    fns: list[Callable[[Tensor], Tensor]] = [lambda t: t * 2, Tensor.relu, lambda t: t + 1]
    np.testing.assert_allclose(Tensor(x).sequential(fns).numpy(), np.maximum(x * 2, 0) + 1, **F32)


# *** backward (once autograd exists) ***

needs_backward = pytest.mark.skipif(not HAS_BACKWARD, reason="Tensor.backward not available yet")


def grads(fn: Callable[..., Any], torch_fn: Callable[..., torch.Tensor], *arrays: np.ndarray) -> None:
    """Gradients of sum(fn(*inputs) * r) for a fixed random r, against torch's."""
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [tt(a).requires_grad_(True) for a in arrays]
    out, want = fn(*ours), torch_fn(*theirs)
    r = rand(*want.shape, seed=9)
    (out * Tensor(r)).sum().backward()
    (want * tt(r)).sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        assert a.grad is not None
        assert b.grad is not None
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-4)


@needs_backward
def test_conv2d_backward() -> None:
    grads(
        lambda x, w, b: x.conv2d(w, b, stride=2, padding=1, groups=2),
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2),
        rand(2, 4, 6, 6), rand(4, 2, 3, 3, seed=1), rand(4, seed=2),
    )  # fmt: skip


@needs_backward
def test_pool_backward() -> None:
    x = rand(1, 2, 6, 7)
    grads(lambda t: t.max_pool2d((3, 3), stride=2, padding=1), lambda t: F.max_pool2d(t, 3, stride=2, padding=1), x)
    grads(lambda t: t.avg_pool2d((3, 2), ceil_mode=True), lambda t: F.avg_pool2d(t, (3, 2), ceil_mode=True), x)


@needs_backward
def test_layernorm_and_cross_entropy_backward() -> None:
    grads(lambda t: t.layernorm(), lambda t: F.layer_norm(t, (5,)), rand(3, 5))
    y = labels(4, classes=5)
    grads(
        lambda t: t.cross_entropy(Tensor(y), label_smoothing=0.1),
        lambda t: F.cross_entropy(t, tt(y).long(), label_smoothing=0.1),
        rand(4, 5),
    )


# *** kernel names: the user-facing op, not the ones inside it ***

TRACED_OPS = [
    pytest.param("softmax", lambda x: x.softmax()),
    pytest.param("conv2d", lambda x: x.conv2d(Tensor(rand(3, 2, 2, 2, seed=1)))),
    pytest.param("cross_entropy", lambda x: x.reshape(2, 2, 4, 4).cross_entropy(Tensor(labels(2, 4, 4, classes=2)))),
    pytest.param("gelu", lambda x: x.gelu()),
    pytest.param("logsumexp", lambda x: x.logsumexp(1)),  # its max is detached: the labels survive DETACH's removal
    pytest.param("log_softmax", lambda x: x.log_softmax(1)),
    pytest.param("cumsum", lambda x: x.cumsum(2)),
    pytest.param("cat", lambda x: x.cat(x, dim=1)),
    pytest.param("layernorm", lambda x: x.layernorm()),
]


@pytest.mark.parametrize(("name", "fn"), TRACED_OPS)
def test_kernels_are_named_after_the_user_facing_op(name: str, fn: Any) -> None:
    x = Tensor(rand(2, 2, 4, 4))
    out = fn(x)
    schedule = [item for item in out.schedule() if item.ast.op is Ops.SINK]  # not the input's upload (a COPY)
    assert schedule, "the op built no kernel"
    for item in schedule:
        assert item.metadata, f"a kernel of {name} carries no metadata"
        assert [m.name for m in item.metadata] == [name]
        assert all(m.caller.startswith(__file__) for m in item.metadata), item.metadata


def test_traced_method_keeps_its_signature_and_tracemeta_0_turns_labels_off() -> None:
    import inspect

    from fusegrad.helpers import Context

    assert list(inspect.signature(Tensor.conv2d).parameters)[:3] == ["self", "weight", "bias"]
    with Context(TRACEMETA=0):
        out = Tensor(rand(3, 5)).gelu()
    assert all(not item.metadata for item in out.schedule() if item.ast.op is Ops.SINK)


# *** einsum ***

EINSUM_CASES: list[tuple[str, list[tuple[int, ...]]]] = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit output: letters used once, sorted
    ("ba,cb", [(2, 3), (4, 2)]),  # implicit output "ac"
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iij->j", [(3, 3, 2)]),
    ("ij->ji", [(2, 3)]),
    ("...ij,...jk->...ik", [(5, 2, 3), (5, 3, 4)]),
    ("i...,i...->...", [(2, 3, 4), (2, 1, 4)]),  # ellipsis axes broadcast
    ("...j,j", [(2, 3), (3,)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk", [(2, 1), (3, 4)]),  # a size-1 letter broadcasts, as torch
    ("i,j", [(0,), (2,)]),
    ("i,i", [(0,), (0,)]),  # an empty sum is 0
    ("ij->", [(0, 3)]),
    ("i->", [(1,)]),
    ("->", [()]),
    (",", [(), ()]),
]


@pytest.mark.parametrize(("formula", "shapes"), EINSUM_CASES, ids=[c[0] or "empty" for c in EINSUM_CASES])
def test_einsum_matches_torch_forward_and_backward(formula: str, shapes: list[tuple[int, ...]]) -> None:
    arrays = [rand(*s, seed=i) for i, s in enumerate(shapes)]
    ours = [Tensor(a.reshape(-1)).reshape(a.shape).requires_grad_() for a in arrays]  # 0-d arrays too
    theirs = [torch.tensor(np.asarray(a), requires_grad=True) for a in arrays]  # tt() makes 0-d arrays 1-d
    out, want = Tensor.einsum(formula, *ours), torch.einsum(formula, *theirs)
    if want.numel():
        upstream = rand(*want.shape, seed=9)
        gradients = (out * Tensor(upstream.reshape(-1)).reshape(upstream.shape)).sum().gradient(*ours)
        (want * tt(upstream)).sum().backward()
        for got, t in zip(gradients, theirs, strict=True):
            assert t.grad is not None
            check(got, t.grad)
    check(out, want)


def test_einsum_operand_list_dtypes_and_errors() -> None:
    a, b = rand(2, 3), rand(3, 2, seed=1)
    check(Tensor.einsum("ij,jk", [Tensor(a), Tensor(b)]), torch.einsum("ij,jk", [tt(a), tt(b)]))
    ints = Tensor.einsum("ij,jk", Tensor([[1, 2]]), Tensor([[3], [4]]))
    assert ints.dtype == dtypes.int32
    assert ints.tolist() == [[11]]
    assert Tensor.einsum("ij,jk", Tensor(a), Tensor(b), dtype=dtypes.float64).dtype == dtypes.float64
    assert Tensor.einsum("ij->ji", Tensor(a), dtype=dtypes.float16).dtype == dtypes.float16
    x = Tensor.ones(2, 3)
    bad: list[tuple[str, list[Any], str]] = [
        ("ij,jk", [x], r"einsum: formula 'ij,jk' has 2 inputs, got 1 operands"),
        ("ij,jk", [x, x], r"einsum: subscript 'j' has size 3 before operand 1 of 'ij,jk' but 2 in it"),
        ("ijk", [x], r"einsum: operand 0 has shape \(2, 3\), but subscripts 'ijk' name 3 axes"),
        ("ij->ijk", [x], r"einsum: output subscripts 'ijk' must be distinct letters"),
        ("ij->ii", [x], r"einsum: output subscripts 'ii' must be distinct letters"),
        ("i1", [x], r"einsum: subscripts must be letters \(and one '...'\), got 'i1'"),
        ("...i...", [x], r"einsum: subscripts must be letters"),
        ("ii", [x], r"einsum: subscript 'i' repeats in 'ii' on axes of sizes 2 and 3"),
        ("...i,...i", [Tensor.ones(2, 3), Tensor.ones(4, 3)], r"einsum: the ellipsis has size 2 before operand 1"),
    ]
    for formula, operands, match in bad:
        with pytest.raises(ValueError, match=match):
            Tensor.einsum(formula, *operands)
    with pytest.raises(TypeError, match=r"einsum: operands must be Tensors, got \['Tensor', 'ndarray'\]"):
        Tensor.einsum("ij,jk", x, a)  # type: ignore[arg-type]
