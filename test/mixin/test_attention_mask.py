"""scaled_dot_product_attention with a bool or causal mask (mixin/nn.py's _masked_softmax): masked scores take exp(0)
and are then zeroed instead of taking exp(-inf) (glibc's vector exp2f runs -inf lanes through its scalar fallback).
Checked against torch forward and backward, and bit for bit against the additive -inf form it replaces."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.mixin.nn import _masked_softmax

SHAPES = [(2, 3, 8, 4), (1, 2, 33, 16), (2, 1, 64, 8)]


def _qkv(shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, dtype=np.float32) for _ in range(3)]


def check_against_torch(
    qkv: list[np.ndarray], mask: np.ndarray | None, is_causal: bool = False, device: str = "CPU"
) -> None:
    """sdpa's output and the gradients of sum(out**2) wrt q, k and v, against torch's."""
    ours = [Tensor(x, requires_grad=True, device=device) for x in qkv]
    out = ours[0].scaled_dot_product_attention(
        ours[1], ours[2], attn_mask=None if mask is None else Tensor(mask, device=device), is_causal=is_causal
    )
    (out * out).sum().backward()
    theirs = [torch.tensor(x, requires_grad=True) for x in qkv]
    want = F.scaled_dot_product_attention(
        *theirs, attn_mask=None if mask is None else torch.tensor(mask), is_causal=is_causal
    )
    (want * want).sum().backward()
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    for got, ref in zip(ours, theirs, strict=True):
        assert got.grad is not None
        assert ref.grad is not None
        np.testing.assert_allclose(got.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("shape", "device"), [(s, "CPU") for s in SHAPES] + [(SHAPES[0], "PYTHON")])
def test_causal_forward_backward_matches_torch(shape: tuple[int, ...], device: str) -> None:
    check_against_torch(_qkv(shape, 0), None, is_causal=True, device=device)


@pytest.mark.parametrize("shape", SHAPES)
def test_bool_mask_forward_backward_matches_torch(shape: tuple[int, ...]) -> None:
    qkv = _qkv(shape, 1)
    mask = np.random.default_rng(2).random((shape[-2], shape[-2])) < 0.6
    mask[:, 0] = True  # every row keeps a position (a fully masked row is NaN here, 0 in torch 2.13)
    check_against_torch(qkv, mask)


@pytest.mark.parametrize("shape", SHAPES)
def test_float_mask_with_minus_inf_forward_backward_matches_torch(shape: tuple[int, ...]) -> None:
    """A causal LLM's additive mask (-inf above the diagonal) plus a finite bias."""
    qkv = _qkv(shape, 7)
    length = shape[-2]
    mask = np.triu(np.full((length, length), -np.inf, np.float32), 1)
    mask += np.random.default_rng(8).standard_normal((length, length)).astype(np.float32)
    check_against_torch(qkv, mask)


@settings(max_examples=12, deadline=None)
@given(
    cols=st.sampled_from([1, 5, 32]),
    minus_inf=st.floats(0.0, 1.0),
    specials=st.booleans(),
    seed=st.integers(0, 2**16),
    device=st.sampled_from(["CPU", "PYTHON"]),
)
def test_a_float_mask_holding_minus_inf_is_softmax_bit_for_bit(
    cols: int, minus_inf: float, specials: bool, seed: int, device: str
) -> None:
    """What sdpa does with a float mask: scores + mask, softmax'd with -inf as the mask. Rows with every entry -inf
    (NaN), a +inf (NaN, as +inf - +inf) and a NaN when `specials`."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((4, cols)) * 5).astype(np.float32)
    x[rng.random((4, cols)) < minus_inf] = -np.inf
    if specials:
        x[0] = -np.inf
        x[1, 0], x[2, -1] = np.inf, np.nan
    xt = Tensor(x, device=device)
    got = _masked_softmax(xt, xt != -math.inf, holds_mask=True).numpy()
    np.testing.assert_array_equal(got, xt.softmax(-1).numpy())


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_masked_softmax_is_the_additive_form_bit_for_bit(device: str) -> None:
    """Scores with large, tied, zero and negative-zero values; rows fully kept, partly kept and fully masked (NaN)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 24)) * np.array([[1.0], [30.0], [0.0], [1e-3], [5.0]])).astype(np.float32)
    x[2, :12] = -0.0
    mask = rng.random((5, 24)) < 0.5
    mask[0] = True
    mask[3] = False
    _check_additive_form(x, mask, device)
    got = _masked_softmax(Tensor(x, device=device), Tensor(mask, device=device)).numpy()
    assert np.isnan(got[3]).all()
    assert not np.isnan(got[[0, 1, 2, 4]]).any()


@settings(max_examples=12, deadline=None)
@given(
    rows=st.integers(1, 4),
    cols=st.sampled_from([1, 3, 16, 33]),
    scale=st.sampled_from([1e-3, 1.0, 40.0]),
    keep=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
    device=st.sampled_from(["CPU", "PYTHON"]),
)
def test_masked_softmax_is_the_additive_form_on_random_masks(
    rows: int, cols: int, scale: float, keep: float, seed: int, device: str
) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    _check_additive_form(x, rng.random((rows, cols)) < keep, device)


def _check_additive_form(x: np.ndarray, mask: np.ndarray, device: str) -> None:
    xt, mt = Tensor(x, device=device), Tensor(mask, device=device)
    got = _masked_softmax(xt, mt).numpy()
    want = (xt + mt.where(0.0, -math.inf)).softmax(-1).numpy()
    np.testing.assert_array_equal(got, want)  # NaN where NaN: the fully masked rows


def test_masked_softmax_gradient_is_zero_where_masked() -> None:
    x = Tensor(np.random.default_rng(4).standard_normal((3, 10), dtype=np.float32), requires_grad=True)
    mask = np.random.default_rng(5).random((3, 10)) < 0.5
    mask[:, 0] = True
    probs = _masked_softmax(x, Tensor(mask))
    (probs * Tensor(np.arange(30, dtype=np.float32).reshape(3, 10))).sum().backward()
    assert x.grad is not None
    grad = x.grad.numpy()
    assert (grad[~mask] == 0).all()
    ref = torch.tensor(x.numpy(), requires_grad=True)
    weights = torch.arange(30, dtype=torch.float32).reshape(3, 10)
    (torch.softmax(ref.masked_fill(~torch.tensor(mask), -math.inf), -1) * weights).sum().backward()
    assert ref.grad is not None
    np.testing.assert_allclose(grad, ref.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_causal_attention_stays_three_kernels() -> None:
    q, k, v = (Tensor(x).realize() for x in _qkv((2, 2, 32, 8), 6))
    out = q.scaled_dot_product_attention(k, v, is_causal=True)
    assert len(out.schedule()) == 3  # q @ k.T, the masked softmax in one row kernel, p @ v
