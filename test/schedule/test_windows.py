"""Window gradients (schedule/windows.py): the sum over a pool view's copies read as a direct reduce over the window,
checked against torch forward and backward, and the kernel it makes (no div/mod indices, only the cropped input)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.schedule.windows import find_unwindow
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp

RTOL, ATOL = 1e-4, 1e-4


def _conv_grads(
    shape: tuple[int, ...], wshape: tuple[int, ...], transposed: bool = False, device: str | None = None, **kw: Any
) -> None:
    """conv2d (or conv_transpose2d) forward, input and weight gradients under a random output gradient vs torch."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(wshape, dtype=np.float32)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch_fn = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d
    if len(shape) == 3 and not transposed:
        torch_fn = torch.nn.functional.conv1d
    if len(shape) == 5 and not transposed:
        torch_fn = torch.nn.functional.conv3d
    out_t = torch_fn(xt, wt, **kw)
    g = rng.standard_normal(tuple(out_t.shape), dtype=np.float32)
    (out_t * torch.tensor(g)).sum().backward()
    xf, wf = Tensor(x, requires_grad=True, device=device), Tensor(w, requires_grad=True, device=device)
    out = xf.conv_transpose2d(wf, **kw) if transposed else xf.conv2d(wf, **kw)
    (out * Tensor(g, device=device)).sum().backward()
    assert xf.grad is not None
    assert wf.grad is not None
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=RTOL, atol=ATOL)
    assert xt.grad is not None
    assert wt.grad is not None
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(wf.grad.numpy(), wt.grad.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("shape", "wshape", "kw"),
    [
        ((2, 3, 7, 6), (4, 3, 3, 3), {"padding": 1}),
        ((2, 3, 9, 8), (4, 3, 3, 2), {"stride": 2}),
        ((1, 2, 9, 9), (3, 2, 3, 3), {"stride": (2, 3), "padding": (1, 2)}),
        ((1, 2, 10, 9), (2, 2, 3, 2), {"dilation": (2, 3), "padding": 2}),
        ((2, 4, 6, 6), (4, 2, 3, 3), {"groups": 2, "padding": 1}),
        ((1, 2, 8, 8), (2, 2, 1, 1), {"stride": 2}),
        ((2, 3, 11), (2, 3, 4), {"padding": 3, "stride": 2}),
        ((1, 2, 4, 5, 5), (2, 2, 2, 3, 3), {"padding": 1}),
    ],
)
def test_conv_gradients_match_torch(shape: tuple[int, ...], wshape: tuple[int, ...], kw: dict[str, Any]) -> None:
    _conv_grads(shape, wshape, **kw)


def test_conv_transpose_gradients_match_torch() -> None:
    _conv_grads((2, 3, 5, 6), (3, 2, 3, 3), transposed=True, stride=2, padding=1, output_padding=1)


@pytest.mark.parametrize("pool", ["avg", "max"])
def test_pool_gradients_match_torch(pool: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 9, 8), dtype=np.float32)
    xt, xf = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    if pool == "avg":
        out_t = torch.nn.functional.avg_pool2d(xt, 3, stride=2, padding=1)
        out = xf.avg_pool2d(3, stride=2, padding=1)
    else:
        out_t = torch.nn.functional.max_pool2d(xt, (3, 2), stride=(1, 2), dilation=(2, 1))
        out = xf.max_pool2d((3, 2), stride=(1, 2), dilation=(2, 1))
    g = rng.standard_normal(tuple(out_t.shape), dtype=np.float32)
    (out_t * torch.tensor(g)).sum().backward()
    (out * Tensor(g)).sum().backward()
    assert xf.grad is not None
    assert xt.grad is not None
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=RTOL, atol=ATOL)


def _window_reduces(x: UOp) -> list[UOp]:
    return [u for u in x.toposort() if u.op is Ops.REDUCE_AXIS and find_unwindow(u) is not None]


def test_conv_input_gradient_is_found_per_spatial_axis() -> None:
    x, w = Tensor.empty(2, 3, 9, 8, requires_grad=True), Tensor.empty(4, 3, 3, 2, requires_grad=True)
    x.conv2d(w, stride=2, dilation=(1, 2)).sum().backward()
    assert x.grad is not None
    found = [find_unwindow(u) for u in _window_reduces(x.grad.uop)]
    assert sorted((f.k, f.stride, f.dilation) for f in found if f is not None) == [(2, 2, 2), (3, 2, 1)]


def test_plain_sums_are_not_windows() -> None:
    a = Tensor.empty(4, 6, 5)
    assert _window_reduces((a.reshape(4, 30).pad(((0, 0), (0, 2))).reshape(4, 4, 8).sum(1)).uop) == []
    assert _window_reduces(a.sum(1).uop) == []


def _dx_kernel(shape: tuple[int, ...]) -> UOp:
    x, w = Tensor.empty(*shape, requires_grad=True), Tensor.empty(8, shape[1], 3, 3, requires_grad=True)
    (x.conv2d(w, padding=1) * Tensor.empty(shape[0], 8, *shape[2:])).sum().backward()
    assert x.grad is not None
    kernels = [item.ast for item in x.grad.schedule() if item.ast.op is Ops.SINK]
    assert len(kernels) == 1
    return kernels[0]


def test_conv_input_gradient_kernel_is_a_direct_reduce() -> None:
    """One kernel writing only the (unpadded) input gradient, one reduce over 8 channels x 3 x 3 window positions,
    and no div/mod in any index (it had four nested loops over 4 copies each with div/mod on every load)."""
    ast = _dx_kernel((2, 4, 10, 12))
    store = ast.src[0]
    assert store.src[0].src[0].dtype.size == 2 * 4 * 10 * 12
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    assert len(reduces) == 1
    assert sorted(int(r.src[0].arg) for r in reduces[0].src[1:]) == [3, 3, 8]
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in ast.toposort())


def test_copy_sums_that_are_not_windows_keep_their_sum() -> None:
    """The copy-sum path (no window found: a chain that is not a window gradient) still computes the same sum."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 10), dtype=np.float32)
    # copies of a padded axis summed: positions p of copy c read a[c*8 + p] (not a window: copy c is not row c)
    got = Tensor(a).pad(((0, 0), (0, 6))).reshape(3, 2, 8).sum(1).numpy()
    padded = np.pad(a, ((0, 0), (0, 6))).reshape(3, 2, 8).sum(1)
    np.testing.assert_allclose(got, padded, rtol=1e-6)


def test_window_gradient_of_a_non_product_is_masked() -> None:
    """exp of the window view: outside the window the source is not zero, so the reduce must mask it."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, 7, 7), dtype=np.float32)
    xt, xf = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    w = np.ones((1, 1, 3, 3), np.float32)
    torch.nn.functional.conv2d(xt, torch.tensor(w), padding=1).exp().sum().backward()
    xf.conv2d(Tensor(w), padding=1).exp().sum().backward()
    assert xf.grad is not None
    assert xt.grad is not None
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_on_the_python_backend_too() -> None:
    _conv_grads((1, 2, 5, 5), (2, 2, 3, 3), device="PYTHON", padding=1, stride=2)


@settings(max_examples=25, deadline=None)
@given(
    size=st.integers(3, 12),
    k=st.integers(1, 4),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 3),
    pad=st.integers(0, 2),
)
def test_random_1d_windows_match_torch(size: int, k: int, stride: int, dilation: int, pad: int) -> None:
    """Any window (size, kernel, stride, dilation, padding) that fits: found or not, the gradient is torch's."""
    assume(dilation * (k - 1) + 1 <= size + 2 * pad)
    _conv_grads((1, 2, size), (2, 2, k), stride=stride, dilation=dilation, padding=pad)


def test_every_1d_conv_input_gradient_is_a_window() -> None:
    """Each (size, kernel, stride, dilation, padding) that fits gives a window reduce: none falls back to the sum
    over copies (all 987 configs with sizes 3..12 did when this was written; a subset runs here)."""
    missed = []
    for size, k, stride, dilation, pad in itertools.product((5, 8, 11), range(1, 5), range(1, 4), range(1, 4), (0, 2)):
        if dilation * (k - 1) + 1 > size + 2 * pad:
            continue
        x, w = Tensor.empty(1, 2, size, requires_grad=True), Tensor.empty(2, 2, k, requires_grad=True)
        x.conv2d(w, stride=stride, dilation=dilation, padding=pad).sum().backward()
        assert x.grad is not None
        if not _window_reduces(x.grad.uop):
            missed.append((size, k, stride, dilation, pad))
    assert missed == []
