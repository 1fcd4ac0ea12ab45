"""A costly elementwise operand of a reduce gets its own kernel instead of being recomputed per output element."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor
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
