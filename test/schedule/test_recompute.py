"""A costly elementwise operand of a reduce gets its own kernel instead of being recomputed per output element."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor
from fusegrad.helpers import Context
from test.shared import count_kernels


def test_cheap_operand_stays_fused_into_matmul() -> None:
    a, w = Tensor.empty(32, 64), Tensor.empty(64, 16)
    assert count_kernels(a.relu() @ w) == 1
    assert count_kernels((a * 2 + 1) @ w) == 1


def test_costly_operand_is_stored_once() -> None:
    a, b, c, w = Tensor.empty(32, 64), Tensor.empty(32, 64), Tensor.empty(32, 64), Tensor.empty(64, 16)
    assert count_kernels((a + b + c) @ w) == 2  # three loads: recomputing per output column costs more than a store
    assert count_kernels((a.exp() * a.sin()).sqrt() @ w) == 2  # transcendental work


def test_costly_operand_fused_when_every_loop_uses_it() -> None:
    a, b, c = Tensor.empty(32, 64), Tensor.empty(32, 64), Tensor.empty(32, 64)
    assert count_kernels((a + b + c).exp().sum(1)) == 1  # each element is read once: nothing is recomputed


def test_stored_operand_gives_the_same_numbers() -> None:
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((9, 17), dtype=np.float32) for _ in range(3))
    w = rng.standard_normal((17, 5), dtype=np.float32)
    got = ((Tensor(a) + Tensor(b) + Tensor(c)).exp() @ Tensor(w)).numpy()
    np.testing.assert_allclose(got, np.exp(a + b + c) @ w, rtol=1e-4, atol=1e-4)


def test_row_statistic_read_in_its_rows_reduce_is_computed_once_per_row() -> None:
    """1/sqrt(var) of a row, read in the reduce over that row: it ignores only that inner loop, so the kernel
    computes it once per row outside the loop; storing it took a kernel of its own (layernorm's backward)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 64), dtype=np.float32)
    x = Tensor(a)
    inv = ((x * x).sum(1, keepdim=True) + 1).sqrt().reciprocal()  # costly: sqrt + reciprocal
    out = (x * inv).sum(1)
    assert count_kernels(out) == 1  # the sum of squares, then the scaled sum, per row (2 before row fusion, #12)
    expected = (a / np.sqrt((a * a).sum(1, keepdims=True) + 1)).sum(1)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_costly_value_ignoring_an_outer_loop_is_still_stored() -> None:
    a, w = Tensor.empty(32, 64), Tensor.empty(64, 16)
    col = (a.sum(0, keepdim=True) + 1).sqrt().reciprocal()  # per column k: read in the reduce over k for every row
    assert count_kernels((a * col) @ w) == 3  # the column sums, the costly scale stored once, the matmul


def test_layernorm_forward_and_backward_kernels() -> None:
    x, dy = Tensor.empty(64, 256, requires_grad=True), Tensor.empty(64, 256)
    out = x.layernorm()
    (out * dy).sum().backward()
    assert x.grad is not None
    # out; dx with the mean, var and the backward's two row sums computed per row (was 8, then 6 before row fusion)
    with Context(FUSE_SIBLINGS=0):
        assert count_kernels(out, x.grad) == 2
    assert count_kernels(out, x.grad) == 1  # the two as one kernel (schedule/siblings.py)
