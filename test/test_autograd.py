"""Tests for fusegrad/gradient.py and the autograd API in fusegrad/tensor.py: backward, gradient, requires_grad, detach.

Every differentiable Tensor op is run forward and backward against torch (CPU) on random inputs; a sample is also
checked against central finite differences in float64. Shapes repeat across tests so the CPU compile cache is reused
(each new kernel costs a C compile). Gradients are seeded with a random upstream gradient, so a wrong transpose or a
wrong broadcast shows even where a plain `.sum()` would hide it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fusegrad import Tensor
from fusegrad.dtype import DType, dtypes
from fusegrad.gradient import compute_gradient
from fusegrad.uop import Ops
from test.shared import GRAD_TOLERANCES

TORCH_DTYPES = {dtypes.float32: torch.float32, dtypes.float16: torch.float16, dtypes.float64: torch.float64}
NP_DTYPES = {dtypes.float32: np.float32, dtypes.float16: np.float16, dtypes.float64: np.float64}

# an input: "any" uniform in [-2, 2), "pos" in [0.5, 3), "nonzero" magnitude in [0.5, 2) with a random sign,
# "ties" small integers (many equal values, to test how max/min split the gradient)
Kind = str
Case = tuple[Callable[..., Tensor], Callable[..., torch.Tensor], list[tuple[tuple[int, ...], Kind]]]


# *** helpers ***


def make_input(shape: tuple[int, ...], kind: Kind, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    match kind:
        case "any":
            return rng.uniform(-2, 2, shape)
        case "pos":
            return rng.uniform(0.5, 3, shape)
        case "nonzero":
            return rng.uniform(0.5, 2, shape) * rng.choice([-1.0, 1.0], shape)
        case "ties":
            return rng.integers(-1, 2, shape).astype(np.float64)
    raise ValueError(f"make_input: unknown kind {kind!r}")


def tensor(arr: np.ndarray, requires_grad: bool | None = None) -> Tensor:
    """Tensor(arr) that also takes a 0-d array (built from one element and reshaped: the 0-d view is the leaf)."""
    if arr.ndim:
        return Tensor(arr, requires_grad=requires_grad)
    return Tensor(arr.reshape(1)).reshape(()).requires_grad_(bool(requires_grad))


def assert_close(got: Tensor, want: torch.Tensor, dtype: DType, what: str) -> None:
    rtol, atol = GRAD_TOLERANCES[dtype]
    ref = want.detach().to(torch.float64).numpy()
    out = got.numpy().astype(np.float64)
    assert out.shape == ref.shape, f"{what}: shape {out.shape}, expected {ref.shape}"
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=what)


def check_against_torch(case: Case, dtype: DType = dtypes.float32, seed: int = 0) -> None:
    """Forward values and the gradient of every input match torch, for a random upstream gradient."""
    fg_fn, torch_fn, specs = case
    arrays = [make_input(shape, kind, seed + i).astype(NP_DTYPES[dtype]) for i, (shape, kind) in enumerate(specs)]
    xs = [tensor(a, requires_grad=True) for a in arrays]
    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, tout = fg_fn(*xs), torch_fn(*txs)
    upstream = make_input(tuple(tout.shape), "any", seed + 100).astype(NP_DTYPES[dtype])
    out.backward(gradient=tensor(upstream))
    tout.backward(torch.tensor(upstream))
    grads = [x.grad for x in xs]
    assert all(g is not None for g in grads), "backward left an input without .grad"
    Tensor.realize(out, *[g for g in grads if g is not None])
    assert_close(out, tout, dtype, "forward")
    for i, (x, tx) in enumerate(zip(xs, txs, strict=True)):
        assert x.grad is not None
        assert tx.grad is not None
        assert x.grad.dtype == x.dtype, f"grad {i} has dtype {x.grad.dtype}, expected {x.dtype}"
        assert_close(x.grad, tx.grad, dtype, f"gradient of input {i}")


def pad_torch(x: torch.Tensor, pads: list[tuple[int, int]], value: float = 0.0) -> torch.Tensor:
    """torch's pad lists (before, after) from the last axis backwards."""
    flat = [p for pair in reversed(pads) for p in pair]
    return torch.nn.functional.pad(x, flat, value=value)


# *** every differentiable op against torch ***

A, B = (3, 4), (4,)  # broadcasting operands: B grows along axis 0, so its gradient is a sum
C3 = (2, 3, 4)

ELEMENTWISE: dict[str, Case] = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, [(A, "any"), (B, "any")]),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, [(A, "any"), (B, "any")]),
    "rsub_const": (lambda a: 1.5 - a, lambda a: 1.5 - a, [(A, "any")]),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, [(A, "any"), (B, "any")]),
    "div": (lambda a, b: a / b, lambda a, b: a / b, [(A, "any"), (B, "nonzero")]),
    "rdiv_const": (lambda a: 2.0 / a, lambda a: 2.0 / a, [(A, "nonzero")]),
    "neg": (lambda a: -a, lambda a: -a, [(A, "any")]),
    "exp": (lambda a: a.exp(), lambda a: a.exp(), [(A, "any")]),
    "log": (lambda a: a.log(), lambda a: a.log(), [(A, "pos")]),
    "exp2": (lambda a: a.exp2(), lambda a: a.exp2(), [(A, "any")]),
    "log2": (lambda a: a.log2(), lambda a: a.log2(), [(A, "pos")]),
    "sqrt": (lambda a: a.sqrt(), lambda a: a.sqrt(), [(A, "pos")]),
    "sin": (lambda a: a.sin(), lambda a: a.sin(), [(A, "any")]),
    "reciprocal": (lambda a: a.reciprocal(), lambda a: a.reciprocal(), [(A, "nonzero")]),
    "relu": (lambda a: a.relu(), lambda a: a.relu(), [(A, "nonzero")]),
    "abs": (lambda a: a.abs(), lambda a: a.abs(), [(A, "nonzero")]),
    "sigmoid": (lambda a: a.sigmoid(), lambda a: a.sigmoid(), [(A, "any")]),
    "tanh": (lambda a: a.tanh(), lambda a: a.tanh(), [(A, "any")]),
    "square": (lambda a: a.square(), lambda a: a.square(), [(A, "any")]),
    "maximum": (lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b), [(A, "any"), (B, "any")]),
    "minimum": (lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b), [(A, "any"), (B, "any")]),
    "maximum_ties": (lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b), [(A, "ties"), (A, "ties")]),
    "minimum_ties": (lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b), [(A, "ties"), (A, "ties")]),
    "maximum_self": (lambda a: a.maximum(a), lambda a: torch.maximum(a, a), [(A, "any")]),  # all ties
    "where": (
        lambda a, b: (a > 0.3).where(a * 2, b),
        lambda a, b: torch.where(a > 0.3, a * 2, b),
        [(A, "any"), (B, "any")],
    ),
    "chain": (lambda a: (a * a.exp()).sin() + a, lambda a: (a * a.exp()).sin() + a, [(A, "any")]),
}

REDUCTIONS: dict[str, Case] = {
    "sum_all": (lambda a: a.sum(), lambda a: a.sum(), [(C3, "any")]),
    "sum_axis0": (lambda a: a.sum(0), lambda a: a.sum(0), [(C3, "any")]),
    "sum_axes_keepdim": (lambda a: a.sum((0, 2), keepdim=True), lambda a: a.sum((0, 2), keepdim=True), [(C3, "any")]),
    "max_all": (lambda a: a.max(), lambda a: a.amax(), [(C3, "any")]),
    "max_axis1_keepdim": (lambda a: a.max(1, keepdim=True), lambda a: a.amax(1, keepdim=True), [(C3, "any")]),
    "max_all_ties": (lambda a: a.max(), lambda a: a.amax(), [(C3, "ties")]),
    "max_axes_ties": (lambda a: a.max((0, 2)), lambda a: a.amax((0, 2)), [(C3, "ties")]),
    "min_axis_neg1": (lambda a: a.min(-1), lambda a: a.amin(-1), [(C3, "any")]),
    "min_axis0_ties": (lambda a: a.min(0), lambda a: a.amin(0), [(C3, "ties")]),
    "mean_all": (lambda a: a.mean(), lambda a: a.mean(), [(C3, "any")]),
    "mean_axes_keepdim": (
        lambda a: a.mean((1, 2), keepdim=True),
        lambda a: a.mean((1, 2), keepdim=True),
        [(C3, "any")],
    ),
    "prod_axis1": (lambda a: a.prod(1), lambda a: a.prod(1), [(C3, "nonzero")]),
    "prod_zeros": (lambda a: a.prod(1), lambda a: a.prod(1), [(C3, "ties")]),  # groups with one zero and with more
    "prod_all_zeros": (lambda a: a.prod() * 1e3, lambda a: a.prod() * 1e3, [((3, 1), "ties")]),
    "softmax": (lambda a: a.softmax(-1), lambda a: a.softmax(-1), [(C3, "any")]),
    "softmax_axis0": (lambda a: a.softmax(0), lambda a: a.softmax(0), [(C3, "any")]),
    "log_softmax": (lambda a: a.log_softmax(-1), lambda a: a.log_softmax(-1), [(C3, "any")]),
}

MOVEMENT: dict[str, Case] = {
    "reshape": (lambda a: a.reshape(6, 4) * 1.5, lambda a: a.reshape(6, 4) * 1.5, [(C3, "any")]),
    "permute": (lambda a: a.permute(2, 0, 1), lambda a: a.permute(2, 0, 1), [(C3, "any")]),
    "transpose": (lambda a: a.transpose(0, 2), lambda a: a.transpose(0, 2), [(C3, "any")]),
    "T": (lambda a: a.T, lambda a: a.T, [(A, "any")]),
    "expand": (lambda a: a.expand(2, 3, 4), lambda a: a.expand(2, 3, 4), [((1, 3, 1), "any")]),
    "expand_new_axes": (lambda a: a.expand(2, 3, 4), lambda a: a.expand(2, 3, 4), [(B, "any")]),
    "pad": (
        lambda a: a.pad(((1, 0), (0, 2), (1, 1))),
        lambda a: pad_torch(a, [(1, 0), (0, 2), (1, 1)]),
        [(C3, "any")],
    ),
    "pad_value": (
        lambda a: a.pad(((0, 0), (2, 1), None), value=1.5),
        lambda a: pad_torch(a, [(0, 0), (2, 1), (0, 0)], value=1.5),
        [(C3, "any")],
    ),
    "pad_negative": (
        lambda a: a.pad(((0, 0), (-1, 1), (1, -2))),
        lambda a: pad_torch(a, [(0, 0), (-1, 1), (1, -2)]),
        [(C3, "any")],
    ),
    "shrink": (lambda a: a.shrink(((0, 1), (1, 3), None)), lambda a: a[0:1, 1:3, :], [(C3, "any")]),
    "flip": (lambda a: a.flip((0, 2)), lambda a: a.flip((0, 2)), [(C3, "any")]),
    "getitem_int_slice": (lambda a: a[1, ::2, 1:3], lambda a: a[1, ::2, 1:3], [(C3, "any")]),
    "getitem_steps": (lambda a: a[:, 1:, ::3], lambda a: a[:, 1:, ::3], [(C3, "any")]),
    "getitem_negative_step": (lambda a: a[::-1, :, ::-2], lambda a: a.flip(0).flip(2)[:, :, ::2], [(C3, "any")]),
    "getitem_none_ellipsis": (lambda a: a[None, ..., -1], lambda a: a[None, ..., -1], [(C3, "any")]),
    "used_twice": (
        lambda a: a.reshape(4, 6)[1:3] * a.permute(2, 1, 0).reshape(4, 6)[:2],
        lambda a: a.reshape(4, 6)[1:3] * a.permute(2, 1, 0).reshape(4, 6)[:2],
        [(C3, "any")],
    ),
}

MATMUL: dict[str, Case] = {
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b, [(A, "any"), ((4, 5), "any")]),
    "matmul_batched": (lambda a, b: a @ b, lambda a, b: a @ b, [(C3, "any"), ((4, 5), "any")]),
    "matmul_vector": (lambda a, b: a @ b, lambda a, b: a @ b, [(B, "any"), ((4, 5), "any")]),
    "dot_vectors": (lambda a, b: a.dot(b), lambda a, b: a.dot(b), [(B, "any"), (B, "any")]),
    "mlp_layer": (
        lambda x, w, b: (x @ w + b).relu().sum(1),
        lambda x, w, b: (x @ w + b).relu().sum(1),
        [(A, "any"), ((4, 5), "any"), ((5,), "any")],
    ),
}


F = torch.nn.functional
IDX = np.array([[0, 2, 1, 0], [2, 2, 0, 1]])  # (2, 4) indices into an axis of size 3 (with duplicates)
SCATTER_IDX = np.array([[0, 2, 1], [2, 1, 0]])  # no duplicates: torch sends the gradient to every duplicate, even
# the ones the forward pass overwrote, fusegrad only to the value that was written
CLASS_WEIGHTS, POS_WEIGHTS = np.array([0.5, 2.0, 1.5]), np.array([0.5, 1.0, 2.0, 3.0])  # torch: not differentiable

# the Tensor methods of fusegrad/mixin/*: reductions, movement and nn functionals built from the core ops
MIXIN_REDUCE: dict[str, Case] = {
    "var_mean": (lambda a: sum_pair(a.var_mean(1)), lambda a: sum_pair(torch.var_mean(a, 1)), [(C3, "any")]),
    "std_mean": (lambda a: sum_pair(a.std_mean((0, 2))), lambda a: sum_pair(torch.std_mean(a, (0, 2))), [(C3, "any")]),
    "logsumexp": (lambda a: a.logsumexp((0, 2)), lambda a: a.logsumexp((0, 2)), [(C3, "any")]),
    "cumprod": (lambda a: a.cumprod(1), lambda a: a.cumprod(1), [(C3, "nonzero")]),
    "cummax": (lambda a: a.cummax(2)[0], lambda a: a.cummax(2)[0], [(C3, "any")]),
    "cummin": (lambda a: a.cummin(0)[0], lambda a: a.cummin(0)[0], [(C3, "any")]),
    "cummax_ties": (lambda a: a.cummax(2)[0], lambda a: a.cummax(2)[0], [(C3, "ties")]),  # to the index, not split
    "cummin_ties": (lambda a: a.cummin(1)[0], lambda a: a.cummin(1)[0], [(C3, "ties")]),
    "sort": (lambda a: a.sort(1, descending=True)[0], lambda a: a.sort(1, descending=True)[0], [(C3, "any")]),
    "topk": (lambda a: a.topk(2, 2)[0], lambda a: a.topk(2, 2)[0], [(C3, "any")]),
    "softmin": (lambda a: a.softmin(0), lambda a: F.softmin(a, 0), [(C3, "any")]),
}
MIXIN_MOVEMENT: dict[str, Case] = {
    "repeat": (lambda a: a.repeat(2, 1, 2), lambda a: a.repeat(2, 1, 2), [(A, "any")]),
    "repeat_interleave": (lambda a: a.repeat_interleave(2, 1), lambda a: a.repeat_interleave(2, 1), [(A, "any")]),
    "stack": (lambda a, b: a.stack(b, b, dim=1), lambda a, b: torch.stack([a, b, b], 1), [(A, "any"), (A, "any")]),
    "split": (lambda a: a.split([1, 3], 1)[1] * 2, lambda a: a.split([1, 3], 1)[1] * 2, [(A, "any")]),
    "chunk": (lambda a: a.chunk(2, 0)[1], lambda a: a.chunk(2, 0)[1], [(A, "any")]),
    "tril_triu": (lambda a: a.tril(-1) * 2 + a.triu(2), lambda a: a.tril(-1) * 2 + a.triu(2), [(A, "any")]),
    "diag": (lambda a: a.diag(), lambda a: a.diag(), [(B, "any")]),
    "pad_to": (lambda a: a.pad_to(5, 6), lambda a: F.pad(a, (0, 2, 0, 2)), [(A, "any")]),
    "pad_replicate": (
        lambda a: a.pad((2, 1, 1, 0), mode="replicate"),
        lambda a: F.pad(a[None], (2, 1, 1, 0), mode="replicate")[0],
        [(C3, "any")],
    ),
    "pad_circular": (
        lambda a: a.pad((2, -1, 1, 1), mode="circular"),
        lambda a: F.pad(a[None], (2, -1, 1, 1), mode="circular")[0],
        [(C3, "any")],
    ),
    "unflatten": (lambda a: a.unflatten(1, (2, 2)) * 3, lambda a: a.unflatten(1, (2, 2)) * 3, [(A, "any")]),
    "scatter": (
        lambda a, b: a.scatter(0, Tensor(SCATTER_IDX), b),
        lambda a, b: a.scatter(0, torch.tensor(SCATTER_IDX), b),
        [((3, 3), "any"), ((2, 3), "any")],
    ),
    "scatter_reduce_sum": (
        lambda a, b: a.scatter_reduce(1, Tensor(IDX), b, "sum"),
        lambda a, b: a.scatter_reduce(1, torch.tensor(IDX), b, "sum"),
        [((2, 3), "any"), ((2, 4), "any")],
    ),
    "scatter_reduce_amax": (
        lambda a, b: a.scatter_reduce(1, Tensor(IDX), b, "amax", include_self=False),
        lambda a, b: a.scatter_reduce(1, torch.tensor(IDX), b, "amax", include_self=False),
        [((2, 3), "any"), ((2, 4), "any")],
    ),
    "masked_fill": (lambda a: a.masked_fill(a > 0.5, 2.0), lambda a: a.masked_fill(a > 0.5, 2.0), [(A, "any")]),
    "gather": (
        lambda a: a.gather(1, Tensor(IDX[:, :3].T.copy())),
        lambda a: a.gather(1, torch.tensor(IDX[:, :3].T.copy())),
        [(A, "any")],
    ),
}
MIXIN_NN: dict[str, Case] = {
    "conv_transpose2d": (
        lambda x, w: x.conv_transpose2d(w, stride=2, padding=1, output_padding=1),
        lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
        [((1, 2, 3, 3), "any"), ((2, 3, 3, 3), "any")],
    ),
    "conv2d_dilated_same": (
        lambda x, w, b: x.conv2d(w, b, padding="same", dilation=2),
        lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=2),
        [((1, 2, 5, 5), "any"), ((3, 2, 3, 3), "any"), ((3,), "any")],
    ),
    "max_pool2d": (lambda x: x.max_pool2d(), lambda x: F.max_pool2d(x, 2), [((1, 2, 4, 4), "any")]),
    "max_unpool2d": (
        lambda x: Tensor.max_unpool2d(*x.max_pool2d(return_indices=True)),
        lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2),
        [((1, 2, 4, 4), "any")],
    ),
    "interpolate_linear": (
        lambda x: x.interpolate((5, 7)),
        lambda x: F.interpolate(x, (5, 7), mode="bilinear"),
        [((1, 2, 3, 4), "any")],
    ),
    "interpolate_nearest": (
        lambda x: x.interpolate((5, 7), mode="nearest"),
        lambda x: F.interpolate(x, (5, 7), mode="nearest"),
        [((1, 2, 3, 4), "any")],
    ),
    "batchnorm": (
        lambda x, w, b, m, v: x.batchnorm(w, b, m, v.rsqrt()),
        lambda x, w, b, m, v: (x - m[:, None]) * w[:, None] * v.rsqrt()[:, None] + b[:, None],
        [(C3, "any"), ((3,), "any"), ((3,), "any"), ((3,), "any"), ((3,), "pos")],
    ),
    "sdpa_mask": (
        lambda q, k, v, m: q.scaled_dot_product_attention(k, v, m),
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
        [((2, 3, 4), "any"), ((2, 5, 4), "any"), ((2, 5, 2), "any"), ((3, 5), "any")],
    ),
    "sdpa_causal": (
        lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [((2, 4, 4), "any"), ((2, 4, 4), "any"), ((2, 4, 3), "any")],
    ),
    "nll_loss_weighted": (
        lambda x: x.log_softmax(1).nll_loss(Tensor(IDX[:, :3]), _like(x, CLASS_WEIGHTS)),
        lambda x: F.nll_loss(x.log_softmax(1), torch.tensor(IDX[:, :3]), _like(x, CLASS_WEIGHTS)),
        [((2, 3, 3), "any")],
    ),
    "sparse_categorical_crossentropy": (
        lambda x: x.sparse_categorical_crossentropy(Tensor(IDX), label_smoothing=0.2),
        lambda x: F.cross_entropy(x.permute(0, 2, 1), torch.tensor(IDX), label_smoothing=0.2),
        [((2, 4, 3), "any")],
    ),
    "cross_entropy_probabilities": (
        lambda x, y: x.cross_entropy(y.softmax(1), reduction="none"),
        lambda x, y: F.cross_entropy(x, y.softmax(1), reduction="none"),
        [(A, "any"), (A, "any")],
    ),
    "binary_crossentropy": (
        lambda p, y: p.sigmoid().binary_crossentropy(y.sigmoid()),
        lambda p, y: F.binary_cross_entropy(p.sigmoid(), y.sigmoid()),
        [(A, "any"), (A, "any")],
    ),
    "binary_crossentropy_logits": (
        lambda x, y: x.binary_crossentropy_logits(y.sigmoid(), pos_weight=_like(x, POS_WEIGHTS)),
        lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid(), pos_weight=_like(x, POS_WEIGHTS)),
        [(A, "any"), (A, "any")],
    ),
    "linear": (
        lambda x, w, b: x.linear(w, b).gelu(),
        lambda x, w, b: F.gelu(x @ w + b, approximate="tanh"),
        [(A, "any"), ((4, 5), "any"), ((5,), "any")],
    ),
    "einsum": (
        lambda a, b: Tensor.einsum("bij,jk->bki", a, b),
        lambda a, b: torch.einsum("bij,jk->bki", a, b),
        [(C3, "any"), ((4, 5), "any")],
    ),
}
MIXIN_CASES = {**MIXIN_REDUCE, **MIXIN_MOVEMENT, **MIXIN_NN}


def _like(x: Any, arr: np.ndarray) -> Any:
    """A constant array as a Tensor (or torch tensor) of x's dtype."""
    if isinstance(x, Tensor):
        return Tensor(arr).cast(x.dtype)
    return torch.tensor(arr, dtype=x.dtype)


def sum_pair(pair: Any) -> Any:
    """(var, mean) -> var + 2 * mean: both results reach the gradient."""
    return pair[0] + 2 * pair[1]


@pytest.mark.parametrize("name", MIXIN_CASES)
def test_mixin_op_matches_torch(name: str) -> None:
    check_against_torch(MIXIN_CASES[name])


@pytest.mark.parametrize(
    "name", ["logsumexp", "sort", "stack", "interpolate_linear", "sdpa_causal", "linear", "einsum"]
)
def test_mixin_op_float16_matches_torch(name: str) -> None:
    check_against_torch(MIXIN_CASES[name], dtypes.float16)


# shapes with size-0 and size-1 axes and scalars: forward and backward still match torch
EDGE_SHAPES = [(), (1,), (0,), (3, 1), (2, 0, 3)]
EDGE_OPS: dict[str, tuple[Callable[..., Tensor], Callable[..., torch.Tensor]]] = {
    "exp_mul": (lambda a: a.exp() * a, lambda a: a.exp() * a),
    "sum": (lambda a: a.sum(), lambda a: a.sum()),
    "mean_last": (lambda a: a.mean(-1), lambda a: a.mean(-1)),
    "softmax_last": (lambda a: a.softmax(-1), lambda a: a.softmax(-1)),
    "logsumexp_last": (lambda a: a.logsumexp(-1), lambda a: a.logsumexp(-1)),
    "cumsum_first": (lambda a: a.cumsum(0), lambda a: a.cumsum(0)),
    "flip_pad": (lambda a: a.flip(-1).pad([None] * (a.ndim - 1) + [(1, 2)]), None),  # type: ignore[dict-item]
    "gelu_sigmoid": (lambda a: a.gelu() + a.sigmoid(), lambda a: F.gelu(a, approximate="tanh") + a.sigmoid()),
}


def _flip_pad_torch(a: torch.Tensor) -> torch.Tensor:
    return F.pad(a.flip(-1), (1, 2)) if a.ndim else a


@pytest.mark.parametrize("shape", EDGE_SHAPES, ids=str)
@pytest.mark.parametrize("name", EDGE_OPS)
def test_edge_shapes_match_torch(name: str, shape: tuple[int, ...]) -> None:
    fg_fn, torch_fn = EDGE_OPS[name]
    if name == "flip_pad":
        if not shape:
            pytest.skip("flip and pad need an axis")
        torch_fn = _flip_pad_torch
    if not shape and name in ("mean_last", "softmax_last", "logsumexp_last"):
        fg_fn, torch_fn = _scalar_variant(name)
    check_against_torch((fg_fn, torch_fn, [(shape, "any")]))


def _scalar_variant(name: str) -> tuple[Callable[..., Tensor], Callable[..., torch.Tensor]]:
    """A 0-d tensor reduces over no axes: the ops take axis=None (torch: dim=()) instead of -1."""
    return {
        "mean_last": (lambda a: a.mean(), lambda a: a.mean()),
        "softmax_last": (lambda a: a.softmax(0), lambda a: a.softmax(0)),
        "logsumexp_last": (lambda a: a.logsumexp(), lambda a: a.logsumexp(())),
    }[name]


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_matches_torch(name: str) -> None:
    check_against_torch(ELEMENTWISE[name])


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_matches_torch(name: str) -> None:
    check_against_torch(REDUCTIONS[name])


@pytest.mark.parametrize("name", MOVEMENT)
def test_movement_matches_torch(name: str) -> None:
    check_against_torch(MOVEMENT[name])


@pytest.mark.parametrize("name", MATMUL)
def test_matmul_matches_torch(name: str) -> None:
    check_against_torch(MATMUL[name])


@pytest.mark.parametrize("name", ["mul", "div", "exp", "log", "sqrt", "sigmoid"])
def test_float16_matches_torch(name: str) -> None:
    check_against_torch(ELEMENTWISE[name], dtypes.float16)


@pytest.mark.parametrize("name", ["sum_axis0", "max_axis1_keepdim", "softmax"])
def test_float16_reduction_matches_torch(name: str) -> None:
    check_against_torch(REDUCTIONS[name], dtypes.float16)


def test_float16_matmul_matches_torch() -> None:
    check_against_torch(MATMUL["matmul"], dtypes.float16)


CASTS: dict[str, Case] = {
    "float32_to_float16": (lambda a: a.half() * 3, lambda a: a.half() * 3, [(A, "any")]),
    "round_trip": (lambda a: (a.half() * 3).float().exp(), lambda a: (a.half() * 3).float().exp(), [(A, "any")]),
}


@pytest.mark.parametrize("name", list(CASTS))
def test_cast_float32_float16_matches_torch(name: str) -> None:
    fg_fn, torch_fn, specs = CASTS[name]
    arr = make_input(specs[0][0], "any", 3).astype(np.float32)
    x, tx = Tensor(arr, requires_grad=True), torch.tensor(arr, requires_grad=True)
    out, tout = fg_fn(x), torch_fn(tx)
    out.sum().backward()
    tout.sum().backward()
    assert x.grad is not None
    assert tx.grad is not None
    assert x.grad.dtype == dtypes.float32
    assert_close(out, tout, out.dtype, "forward")
    assert_close(x.grad, tx.grad, dtypes.float16, "gradient")  # it passed through float16


def test_cast_float16_to_float32_gradient_is_float16() -> None:
    arr = make_input(A, "any", 4).astype(np.float16)
    x, tx = Tensor(arr, requires_grad=True), torch.tensor(arr, requires_grad=True)
    (x.float() * x.float()).sum().backward()
    (tx.float() * tx.float()).sum().backward()
    assert x.grad is not None
    assert tx.grad is not None
    assert x.grad.dtype == dtypes.float16
    assert_close(x.grad, tx.grad, dtypes.float16, "gradient")


def test_cast_to_int_has_no_gradient() -> None:
    """A cast to an integer is piecewise constant: the gradient through it is zero (torch does not track it)."""
    x = Tensor([1.7, -2.2], requires_grad=True)
    (x.int().float() * 3 + x).sum().backward()
    assert x.grad is not None
    assert x.grad.tolist() == [1.0, 1.0]


# *** finite differences in float64 ***

# batch-friendly functions: they act on the trailing axes, so a leading axis can hold every perturbation at once
FINITE_DIFFERENCE: dict[str, tuple[Callable[..., Tensor], list[tuple[tuple[int, ...], Kind]]]] = {
    "mul_div": (lambda a, b: a * b / (b * b + 1), [((2, 3), "any"), ((3,), "any")]),
    "exp_log_sqrt": (lambda a: (a.exp() + a.sqrt()).log(), [((2, 3), "pos")]),
    "sin_tanh_sigmoid": (lambda a: a.sin() * a.tanh() + a.sigmoid(), [((2, 3), "any")]),
    "max_reduce": (lambda a: a.max(-1) * a.min(-2).sum(-1, keepdim=True), [((2, 3), "any")]),
    "prod_zeros": (lambda a: a.prod(-1) + a.prod(-2).sum(-1, keepdim=True), [((3, 4), "ties")]),  # multilinear: exact
    "softmax": (lambda a: a.softmax(-1) * a, [((2, 3), "any")]),
    "log_softmax": (lambda a: a.log_softmax(-2), [((2, 3), "any")]),
    "matmul": (lambda a, b: (a @ b).relu() @ b.transpose(-1, -2), [((2, 3), "any"), ((3, 3), "any")]),
    "movement": (lambda a: pad_last(a, (1, 2))[..., ::2].flip(-1) * a[..., ::-1, :1], [((2, 3), "any")]),
    # the mixin methods (fusegrad/mixin/*)
    "gelu_softplus_erf": (lambda a: a.gelu() * a.softplus() + a.erf() + a.mish(), [((2, 3), "any")]),
    "inverse_trig": (lambda a: (a * 0.4).asin() + a.atan() + (a.abs() + 1.5).acosh() + a.sinh(), [((2, 3), "any")]),
    "logsumexp_cumsum": (lambda a: a.logsumexp(-1, keepdim=True) * a.cumsum(-1), [((2, 3), "any")]),
    "cumprod_logcumsumexp": (lambda a: a.cumprod(-1) + a.logcumsumexp(-2), [((2, 3), "nonzero")]),
    "layernorm_softmin_std": (lambda a: a.layernorm() + a.softmin(-1) * a.std(-1, keepdim=True), [((2, 3), "any")]),
    "sort_topk": (lambda a: a.sort(-1)[0] * a.topk(2)[0].sum(-1, keepdim=True), [((2, 3), "any")]),
    "einsum": (lambda a, b: Tensor.einsum("...ij,...jk->...ki", a, b), [((2, 3), "any"), ((3, 4), "any")]),
    "attention": (lambda q, k: q.scaled_dot_product_attention(k, k * 2), [((2, 3), "any"), ((4, 3), "any")]),
    "interpolate_linear": (lambda a: a.interpolate((5,)), [((2, 3), "any")]),
    "bce_logits": (lambda a, b: a.binary_crossentropy_logits(b.sigmoid(), reduction="none"), [((2, 3), "any")] * 2),
    "pow_lerp_copysign": (
        lambda a, b: (a.abs() + 0.5).pow(b) + a.lerp(b, 0.3) + a.copysign(b) + a.logaddexp(b),
        [((2, 3), "nonzero"), ((3,), "nonzero")],
    ),
    "pad_modes_repeat": (
        lambda a: a.pad((2, 1), mode="reflect") * 2 + a.pad((1, 1), mode="circular").repeat_interleave(2, -1)[..., :6],
        [((2, 3), "any")],
    ),
}


def pad_last(a: Tensor, pads: tuple[int, int]) -> Tensor:
    return a.pad([None] * (a.ndim - 1) + [pads])


def finite_difference_gradient(
    fn: Callable[..., Tensor], arrays: list[np.ndarray], upstream: np.ndarray, i: int, eps: float = 1e-6
) -> np.ndarray:
    """d sum(fn(*arrays) * upstream) / d arrays[i] by central differences, all perturbations in one batched run."""
    x, ndim = arrays[i], max(a.ndim for a in arrays)
    eye = np.eye(x.size).reshape(x.size, *x.shape)
    batch = np.concatenate([x + eps * eye, x - eps * eye])  # (2n, *x.shape)
    batch = batch.reshape(2 * x.size, *(1,) * (ndim - x.ndim), *x.shape)  # so it broadcasts against the others
    inputs = [Tensor(batch) if j == i else Tensor(a).reshape(1, *a.shape) for j, a in enumerate(arrays)]
    out = fn(*inputs)
    ndim = out.ndim - 1
    losses = (out * Tensor(upstream)).sum(tuple(range(1, ndim + 1))).numpy() if ndim else (out * upstream[()]).numpy()
    return np.asarray((losses[: x.size] - losses[x.size :]) / (2 * eps)).reshape(x.shape)


@pytest.mark.parametrize("name", FINITE_DIFFERENCE)
def test_gradient_matches_finite_differences_in_float64(name: str) -> None:
    fn, specs = FINITE_DIFFERENCE[name]
    arrays = [make_input(shape, kind, 10 + i) for i, (shape, kind) in enumerate(specs)]
    xs = [Tensor(a, requires_grad=True) for a in arrays]
    out = fn(*xs)
    assert out.dtype == dtypes.float64
    upstream = make_input(out.shape, "any", 99)
    out.backward(gradient=Tensor(upstream))
    for i, x in enumerate(xs):
        assert x.grad is not None
        numeric = finite_difference_gradient(fn, arrays, upstream, i)
        np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-6, atol=1e-7, err_msg=f"input {i}")


# *** the API: backward, gradient, requires_grad, detach ***


def test_backward_accumulates_over_two_calls() -> None:
    w = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    (w * w).sum().backward()
    first = w.grad
    assert first is not None
    assert first.tolist() == [2.0, -4.0, 6.0]  # realizes the first gradient
    (w * 3).sum().backward()
    assert w.grad is first, "the second backward adds into the same .grad tensor"
    assert w.grad.tolist() == [5.0, -1.0, 9.0]


def test_backward_twice_on_one_unrealized_loss_doubles_the_gradient() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w * w).sum()
    loss.backward()
    loss.backward()
    assert w.grad is not None
    assert w.grad.tolist() == [6.0, 24.0]


def test_backward_on_scalar_sets_grad_of_leaves_only() -> None:
    w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x = Tensor([[0.5, -1.0], [2.0, 1.0]])  # requires_grad unset: no .grad
    frozen = Tensor([1.0, 1.0], requires_grad=False)
    h = x @ w + frozen
    loss = h.sum()
    assert loss.backward() is loss
    assert x.grad is None
    assert frozen.grad is None
    assert h.grad is None
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), np.array([[2.5, 2.5], [0.0, 0.0]]))


def test_backward_reaches_intermediate_tensors_marked_requires_grad() -> None:
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = (w * 2).requires_grad_()
    loss = (h * h).sum()
    loss.backward()
    assert h.grad is not None
    assert h.grad.tolist() == [4.0, 8.0, 12.0]  # 2h
    assert w.grad is not None
    assert w.grad.tolist() == [8.0, 16.0, 24.0]  # 2h * 2


def test_backward_one_element_non_scalar_needs_no_gradient() -> None:
    w = Tensor([2.0], requires_grad=True)
    (w * w).backward()
    assert w.grad is not None
    assert w.grad.tolist() == [4.0]


def test_backward_on_non_scalar_without_gradient_raises() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(
        ValueError, match=r"backward: an implicit gradient needs a one-element result, got shape \(2, 2\)"
    ):
        (w.reshape(2, 1) * w).backward()


def test_backward_with_mismatched_gradient_raises() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match=r"gradient shape \(3,\) does not match the result's shape \(2,\)"):
        (w * 2).backward(gradient=Tensor([1.0, 1.0, 1.0]))


def test_backward_without_any_requires_grad_tensor_raises() -> None:
    with pytest.raises(RuntimeError, match="depends on no tensor with requires_grad=True"):
        (Tensor([1.0, 2.0]) * 2).sum().backward()


def test_backward_on_an_int_result_raises() -> None:
    with pytest.raises(TypeError, match=r"backward: only float tensors have gradients, got dtypes\.int"):
        Tensor([1, 2]).sum().backward()


def test_gradient_of_several_targets() -> None:
    x = Tensor([1.0, 2.0, 3.0])
    y = Tensor([4.0, 5.0, 6.0])
    z = x * y + x.exp()
    gx, gy, gz = z.sum().gradient(x, y, z)
    np.testing.assert_allclose(gx.numpy(), np.array([4.0, 5.0, 6.0]) + np.exp([1.0, 2.0, 3.0]), rtol=1e-6)
    assert gy.tolist() == [1.0, 2.0, 3.0]
    assert gz.tolist() == [1.0, 1.0, 1.0]
    assert x.grad is None
    assert y.grad is None, "gradient() does not touch .grad"


def test_gradient_with_explicit_upstream_gradient() -> None:
    x = Tensor([1.0, 2.0])
    (gx,) = (x * x).gradient(x, gradient=Tensor([10.0, -1.0]))
    assert gx.tolist() == [20.0, -4.0]


def test_gradient_of_unrelated_target() -> None:
    x, other = Tensor([1.0, 2.0]), Tensor([3.0])
    loss = (x * 2).sum()
    with pytest.raises(RuntimeError, match=r"does not depend on target 1 \(shape \(1,\)\)"):
        loss.gradient(x, other)
    assert loss.gradient(x, other, materialize_grads=True)[1].tolist() == [0.0]


def test_gradient_of_int_target_raises() -> None:
    with pytest.raises(TypeError, match=r"gradient: only float tensors have gradients, got dtypes\.int for target 0"):
        Tensor([1.0]).sum().gradient(Tensor([1]))


def test_detach_stops_gradients() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    assert w.detach().requires_grad is False
    loss = (w * w.detach() * 3).sum()  # d/dw = 3 * w, not 6 * w
    loss.backward()
    assert w.grad is not None
    assert w.grad.tolist() == [3.0, 6.0]
    only_detached = Tensor([1.0, 2.0], requires_grad=True)
    (only_detached.detach() * 2).sum().backward()  # in the graph, but only below a DETACH: zeros
    assert only_detached.grad is not None
    assert only_detached.grad.tolist() == [0.0, 0.0]


def test_gradient_after_assign_is_taken_at_the_new_value() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    w.assign(w * 2)
    (w * w).sum().backward()
    assert w.grad is not None
    assert w.grad.tolist() == [4.0, 8.0]


def test_gradient_through_contiguous_and_a_device_copy() -> None:
    x = Tensor([1.0, -2.0], requires_grad=True)
    loss = (x.contiguous() * x.to("PYTHON").exp().to("CPU")).sum()  # d/dx = e^x (1 + x)
    loss.backward()
    assert x.grad is not None
    assert x.grad.device == "CPU"
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, -2.0]) * (1 + np.array([1.0, -2.0])), rtol=1e-6)


def test_requires_grad_flag() -> None:
    t = Tensor([1.0])
    assert t.requires_grad is None
    assert t.requires_grad_() is t
    assert t.requires_grad is True
    assert t.requires_grad_(False).requires_grad is False
    assert Tensor([1.0], requires_grad=True).requires_grad is True


def test_backward_nodes_carry_backward_metadata() -> None:
    w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    (w.exp() * 2).sum().backward()
    assert w.grad is not None
    metadata = [m for si in w.grad.schedule() for m in (si.metadata or ())]
    assert any(m.backward for m in metadata), f"no backward metadata in {metadata}"


def test_compute_gradient_only_walks_paths_to_targets() -> None:
    x, y = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
    unrelated = (y * 5).exp()
    root = (x * 2 + unrelated).sum()
    grads = compute_gradient(root.uop, Tensor(1.0).uop, {x.uop})
    assert x.uop in grads
    assert unrelated.uop not in grads
    assert y.uop not in grads


# *** deep graphs: no recursion anywhere ***

CHAIN_LENGTH = 10_000
MLP_DEPTH = 1000


def test_deep_chain_forward_backward_without_recursion() -> None:
    limit = sys.getrecursionlimit()
    a0 = Tensor([1.0, 2.0], requires_grad=True)
    a = a0
    for _ in range(CHAIN_LENGTH):
        a = a + a * 1e-4  # a_n = a_0 (1 + 1e-4)^n; d a_n / d a_0 = (1 + 1e-4)^n ~ e
    loss = a.sum()
    loss.backward()
    assert a0.grad is not None
    Tensor.realize(loss, a0.grad)
    factor = (1 + 1e-4) ** CHAIN_LENGTH
    np.testing.assert_allclose(a0.grad.numpy(), [factor, factor], rtol=1e-4)
    np.testing.assert_allclose(loss.item(), 3 * factor, rtol=1e-4)
    assert sys.getrecursionlimit() == limit


def mlp_weights(depth: int) -> list[np.ndarray]:
    """Near-identity 4x4 weights: activations neither vanish nor explode over many layers."""
    rng = np.random.default_rng(5)
    return [(np.eye(4) + rng.uniform(-0.1, 0.1, (4, 4))).astype(np.float32) for _ in range(depth)]


def test_deep_mlp_forward_backward_without_recursion() -> None:
    """MLP_DEPTH layers `h = (h @ w_i).relu()`: ~3 kernels a layer, scheduled and run at once, against torch."""
    limit = sys.getrecursionlimit()
    arrays = mlp_weights(MLP_DEPTH)
    x_np = np.random.default_rng(6).uniform(-1, 1, (2, 4)).astype(np.float32)
    weights = [Tensor(w, requires_grad=True) for w in arrays]
    torch_weights = [torch.tensor(w, requires_grad=True) for w in arrays]
    h, th = Tensor(x_np), torch.tensor(x_np)
    for w, tw in zip(weights, torch_weights, strict=True):
        h, th = (h @ w).relu(), (th @ tw).relu()
    loss, torch_loss = h.sum(), th.sum()
    loss.backward()
    torch_loss.backward()
    grads = [w.grad for w in weights]
    assert all(g is not None and g.shape == (4, 4) for g in grads)
    Tensor.realize(loss, *[g for g in grads if g is not None])
    assert_close(loss, torch_loss, dtypes.float32, "loss")
    # a sample of layers: each numpy() call scans every live tensor, so reading all 1000 would take minutes
    for i in sorted({0, 1, *range(99, MLP_DEPTH, 100), MLP_DEPTH - 1}):
        assert weights[i].grad is not None
        assert torch_weights[i].grad is not None
        assert_close(weights[i].grad, torch_weights[i].grad, dtypes.float32, f"layer {i}")
    assert sys.getrecursionlimit() == limit


# *** fusion of the backward graph ***


def test_mlp_training_step_backward_fuses() -> None:
    """A 2-layer MLP with a log_softmax loss: forward + backward + SGD update in a bounded number of kernels.

    Measured: 10 kernels. Forward 5: 2 matmuls (relu fused), the max and the exp-sum of log_softmax, the loss.
    Backward 3: 2 for log_softmax (no gradient flows through its detached max), the hidden gradient. The 2 weight
    updates each fuse their weight-gradient matmul. The bound leaves two kernels of slack.
    """
    rng = np.random.default_rng(7)
    x = Tensor(rng.standard_normal((8, 16)).astype(np.float32))
    labels = Tensor(np.eye(4, dtype=np.float32)[rng.integers(0, 4, 8)])
    w1 = Tensor(rng.standard_normal((16, 32)).astype(np.float32), requires_grad=True)
    w2 = Tensor(rng.standard_normal((32, 4)).astype(np.float32), requires_grad=True)
    loss = -((x @ w1).relu() @ w2).log_softmax(-1).mul(labels).sum(-1).mean()
    loss.backward()
    assert w1.grad is not None
    assert w2.grad is not None
    new_w1, new_w2 = w1 - w1.grad * 0.1, w2 - w2.grad * 0.1
    schedule = loss.schedule(new_w1, new_w2)
    kernels = [si for si in schedule if si.ast.op is Ops.SINK]
    assert len(kernels) <= 12, f"{len(kernels)} kernels"


# *** zero derivatives and special points: torch's values, not errors ***


def exact_grads(fn: Callable[..., Any], *values: list[float]) -> list[np.ndarray]:
    """d fn(*inputs).sum() / d each input, for exact float32 inputs."""
    xs = [Tensor(np.array(v, dtype=np.float32)) for v in values]
    return [g.numpy() for g in fn(*xs).sum().gradient(*xs)]


def torch_grads(fn: Callable[..., Any], *values: list[float]) -> list[np.ndarray]:
    xs = [torch.tensor(np.array(v, dtype=np.float32), requires_grad=True) for v in values]
    return [g.numpy() for g in torch.autograd.grad(fn(*xs).sum(), xs)]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.sign(),
        lambda x: (x < 0).where(1.0, 2.0),
        lambda x: x.trunc() + x.floor(),
        lambda x: x**0,
        lambda x: x**0.0,
    ],
    ids=["sign", "where_condition", "trunc_floor", "pow_int_0", "pow_float_0"],
)
def test_zero_derivative_gives_zeros_not_an_error(fn: Callable[..., Any]) -> None:
    """Each target is in the graph with derivative 0 everywhere: zeros (torch's values; torch raises only for the
    where, whose result it does not connect to x at all), not "does not depend on target"."""
    np.testing.assert_array_equal(exact_grads(fn, [-1.5, 0.0, 2.0, float("inf")])[0], [0.0] * 4)


def test_copysign_sign_input_and_an_empty_cat_input_get_zero_gradients() -> None:
    grads = exact_grads(lambda a, b: a.copysign(b), [1.5, -2.0, 0.0], [-1.0, 0.0, 3.0])
    want = torch_grads(torch.copysign, [1.5, -2.0, 0.0], [-1.0, 0.0, 3.0])
    for got, ref in zip(grads, want, strict=True):
        np.testing.assert_array_equal(got, ref)
    x, empty = Tensor.ones(2, 3), Tensor.ones(2, 0)
    g_x, g_empty = x.cat(empty, empty, dim=1).sum().gradient(x, empty)
    assert g_x.tolist() == [[1.0] * 3] * 2
    assert g_empty.shape == (2, 0)


def test_abs_gradient_is_zero_at_zero_but_odd_functions_keep_their_slope() -> None:
    """abs: sign(x), 0 at 0 (torch). atan/asinh/atanh/asin are built on |x| and still have slope 1 at 0."""
    vals = [-1.0, 0.0, -0.0, 1.0]
    np.testing.assert_array_equal(exact_grads(lambda x: x.abs(), vals)[0], [-1.0, 0.0, 0.0, 1.0])
    assert Tensor([-0.0, float("nan")]).abs().tolist()[0] == 0.0
    for name in ("atan", "asinh", "atanh", "asin"):
        got = exact_grads(lambda x, n=name: getattr(x, n)(), [0.0, 0.25])[0]
        ref = torch_grads(lambda x, n=name: getattr(torch, n)(x), [0.0, 0.25])[0]
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=name)


POW_SPECIAL = [-np.inf, -2.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, np.inf, np.nan]


def test_pow_values_and_gradients_match_torch_at_special_points() -> None:
    """Every pair of bases and exponents from zeros, signed values, infinities and NaN: b ** e and both gradients,
    NaN and inf included (inf at a zero base under 0 < e < 1, NaN in e for a negative base)."""
    base, exponent = np.meshgrid(
        np.array(POW_SPECIAL, np.float32), np.array([*POW_SPECIAL, 3, -3, 0.3, -0.3], np.float32)
    )
    b, e = Tensor(base), Tensor(exponent)
    tb, te = torch.tensor(base, requires_grad=True), torch.tensor(exponent, requires_grad=True)
    np.testing.assert_allclose((b**e).numpy(), (tb**te).detach().numpy(), rtol=1e-6, equal_nan=True)
    for got, ref in zip((b**e).sum().gradient(b, e), torch.autograd.grad((tb**te).sum(), (tb, te)), strict=True):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("c", [-1.5, -1, 0, 0.3, 1, 2, 2.5])
def test_pow_by_a_constant_matches_torch_at_special_points(c: float) -> None:
    vals = [v for v in POW_SPECIAL if not np.isnan(v)]
    np.testing.assert_allclose(exact_grads(lambda x: x**c, vals)[0], torch_grads(lambda x: x**c, vals)[0], rtol=1e-5)
    rpow = [-2.0, -1.0, 0.0, 1.0, 2.5]  # a negative constant base: NaN gradients (log of a negative number)
    np.testing.assert_allclose(
        exact_grads(lambda x: (-2.0) ** x, rpow)[0], torch_grads(lambda x: (-2.0) ** x, rpow)[0], rtol=1e-5
    )


def test_softmax_gradient_does_not_flow_through_the_max() -> None:
    """sum(softmax(x)) is 1 for every x: its gradient is rounding noise, as small as torch's (the max's shift used to
    send ~1e-7 to each argmax)."""
    x = make_input((45, 65), "any", 0).astype(np.float32)
    for fg, th in ((lambda t: t.softmax(1), lambda t: t.softmax(1)), (lambda t: t.log_softmax(1).exp(), None)):
        got = exact_grads(fg, x.tolist())[0]
        np.testing.assert_allclose(got, np.zeros_like(got), atol=5e-8)
        if th is not None:
            np.testing.assert_allclose(got, torch_grads(th, x.tolist())[0], atol=5e-8)


def test_float_remainder_matches_torch_forward_and_backward() -> None:
    a, b = [-4.0, 7.0, 5.5, 4.0, -7.25, 8.0], [2.0, -3.0, 8.0, -2.5, 3.0, 5.0]
    tfn = torch.remainder
    for got, ref in zip(exact_grads(lambda x, y: x % y, a, b), torch_grads(tfn, a, b), strict=True):
        np.testing.assert_allclose(got, ref)
    ta, tb = torch.tensor(a), torch.tensor(b)
    np.testing.assert_allclose(Tensor(a).mod(Tensor(b)).numpy(), tfn(ta, tb).numpy())
