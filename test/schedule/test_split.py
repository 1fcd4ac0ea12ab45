"""Long contractions split into partial sums (schedule/split.py): the kernels they make and the numbers."""

from __future__ import annotations

import numpy as np
import torch

from fusegrad import Tensor
from fusegrad.helpers import Context
from fusegrad.uop import Ops


def _weight_gradient(batch: int, size: int) -> tuple[Tensor, Tensor, np.ndarray, np.ndarray]:
    """A 3x3 conv's weight gradient over `batch` images of size x size (a reduce of batch*size*size elements)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 4, size, size), dtype=np.float32)
    w = rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    g = rng.standard_normal((batch, 8, size, size), dtype=np.float32)
    xf, wf = Tensor(x), Tensor(w, requires_grad=True)
    (xf.conv2d(wf, padding=1) * Tensor(g)).sum().backward()
    wt = torch.tensor(w, requires_grad=True)
    (torch.nn.functional.conv2d(torch.tensor(x), wt, padding=1) * torch.tensor(g)).sum().backward()
    assert wf.grad is not None
    assert wt.grad is not None
    return wf, wf.grad, wt.grad.numpy(), x


def _reduce_sizes(t: Tensor) -> list[int]:
    """The reduce size of each kernel computing `t` (in run order)."""
    sizes = []
    for item in t.schedule():
        if item.ast.op is Ops.SINK:
            reduces = [u for u in item.ast.toposort() if u.op is Ops.REDUCE]
            sizes.append(max((int(np.prod([int(r.src[0].arg) for r in u.src[1:]])) for u in reduces), default=0))
    return sizes


def test_long_weight_gradient_is_two_kernels() -> None:
    _, grad, expected, _ = _weight_gradient(4, 48)  # reduce 4*48*48 = 9216: partials over each image, then their sum
    assert _reduce_sizes(grad) == [48 * 48, 4]
    np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-4, atol=1e-3)


def test_split_off_is_one_kernel_with_the_same_numbers() -> None:
    with Context(SPLIT_REDUCEOP=0):
        _, grad, expected, _ = _weight_gradient(4, 48)
        assert _reduce_sizes(grad) == [4 * 48 * 48]
        np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-4, atol=1e-3)


def test_short_reduces_and_matmuls_are_not_split() -> None:
    _, grad, _, _ = _weight_gradient(2, 16)
    assert _reduce_sizes(grad) == [2 * 16 * 16]
    a, b = Tensor.empty(64, 16384), Tensor.empty(16384, 64)
    assert _reduce_sizes(a @ b) == [16384]  # one reduce axis: its tile's panel is blocked by codegen, not here
    x = Tensor.empty(64, 128, 128)
    assert _reduce_sizes((x * x).sum((1, 2))) == [128 * 128]  # no broadcast operands: not a contraction
