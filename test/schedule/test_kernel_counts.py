"""Kernel counts are part of the scheduler's contract: fusion must not regress silently."""

from __future__ import annotations

import pytest

from fusegrad import Tensor
from fusegrad.helpers import Context
from test.shared import count_kernels


def test_elementwise_chain_any_length_is_one_kernel() -> None:
    a, b = Tensor.empty(64, 64), Tensor.empty(64, 64)
    x = a
    for i in range(50):
        x = (x + b) * (i + 1) if i % 2 else (x - 1).exp()
    assert count_kernels(x) == 1


def test_reduce_of_product_is_one_kernel() -> None:
    a, b = Tensor.empty(128), Tensor.empty(128)
    assert count_kernels((a * b).sum()) == 1


def test_broadcast_matmul_is_one_kernel() -> None:
    a, b = Tensor.empty(16, 32), Tensor.empty(32, 8)
    assert count_kernels((a.reshape(16, 1, 32) * b.T.reshape(1, 8, 32)).sum(2)) == 1
    assert count_kernels(a @ b) == 1


def test_softmax_is_at_most_three_kernels() -> None:
    assert count_kernels(Tensor.empty(32, 64).softmax(-1)) <= 3


def test_reduce_then_elementwise_fuses() -> None:
    x = Tensor.empty(16, 16)
    assert count_kernels(x.sum(1) * 2 + 1) == 1


def test_kernelize_two_outputs_is_two_kernels() -> None:
    a = Tensor.empty(4, 4)
    with Context(FUSE_SIBLINGS=0):
        assert count_kernels(a + 1, a + 2) == 2
    assert count_kernels(a + 1, a + 2) == 1  # then merged: both read a (schedule/siblings.py)


def test_full_reduce_reused_elementwise_is_fused_when_it_fits_in_cache() -> None:
    a = Tensor.empty(64)
    assert count_kernels(a - a.sum()) == 1  # the sum once, before the loop that reads it (was 2: row fusion, #12)
    big = Tensor.empty(1 << 16)  # 256 KiB: the elementwise pass would read it from memory again
    assert count_kernels(big - big.sum()) == 2


def test_contiguous_forces_a_kernel() -> None:
    a = Tensor.empty(8, 8)
    assert count_kernels(a.permute(1, 0).contiguous()) == 1
    assert count_kernels((a + 1).contiguous() * 2) == 2


def test_realized_tensor_schedules_nothing() -> None:
    a = Tensor([1.0, 2.0, 3.0], device="PYTHON")
    assert a.schedule() == []


@pytest.mark.parametrize("n", [1, 7, 100])
def test_arange_is_one_kernel(n: int) -> None:
    assert count_kernels(Tensor.arange(n) * 2) == 1


def test_chained_matmuls_compute_each_product_once() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((5, 5)).astype(np.float32) for _ in range(3))
    out = (Tensor(a) @ Tensor(b)) @ Tensor(c)
    assert count_kernels(out) == 2
    np.testing.assert_allclose(out.numpy(), (a @ b) @ c, rtol=1e-5, atol=1e-5)
