"""Writes and reads of the same buffer in one schedule: every read of the old contents sees them (ordering.py)."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor

A0 = np.arange(1, 5, dtype=np.float32)
B0 = np.arange(5, 9, dtype=np.float32)


def buffers() -> tuple[Tensor, Tensor]:
    return Tensor(A0.copy()).realize(), Tensor(B0.copy()).realize()


def test_read_of_old_value_runs_before_the_write() -> None:
    x, y = buffers()
    new_x, new_y = x - y * 2, y - x * 3  # built before either write: both read the old contents
    x.assign(new_x)
    y.assign(new_y)
    Tensor.realize(x, y)
    np.testing.assert_allclose(x.numpy(), A0 - B0 * 2)
    np.testing.assert_allclose(y.numpy(), B0 - A0 * 3)


def test_updates_reading_each_other_form_a_cycle() -> None:
    x, y = buffers()
    new_x, new_y = x - y * 0.5, y - x * 0.25
    x.assign(new_x)
    y.assign(new_y)
    Tensor.realize(x, y)
    np.testing.assert_allclose(x.numpy(), A0 - B0 * 0.5)
    np.testing.assert_allclose(y.numpy(), B0 - A0 * 0.25)


def test_swap_by_assign() -> None:
    x, y = buffers()
    old_x, old_y = x + 0, y + 0
    x.assign(old_y)
    y.assign(old_x)
    Tensor.realize(x, y)
    np.testing.assert_allclose(x.numpy(), B0)
    np.testing.assert_allclose(y.numpy(), A0)


def test_three_way_rotation() -> None:
    x, y = buffers()
    z = Tensor(np.full(4, 10, np.float32)).realize()
    old_x, old_y, old_z = x * 1, y * 1, z * 1
    x.assign(old_y)
    y.assign(old_z)
    z.assign(old_x)
    Tensor.realize(x, y, z)
    np.testing.assert_allclose(x.numpy(), B0)
    np.testing.assert_allclose(y.numpy(), np.full(4, 10, np.float32))
    np.testing.assert_allclose(z.numpy(), A0)


def test_sgd_step_by_hand_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    w1_np, w2_np = rng.standard_normal((3, 4), dtype=np.float32), rng.standard_normal((4, 2), dtype=np.float32)
    x_np = rng.standard_normal((5, 3), dtype=np.float32)
    w1, w2 = Tensor(w1_np.copy(), requires_grad=True).realize(), Tensor(w2_np.copy(), requires_grad=True).realize()
    (Tensor(x_np) @ w1 @ w2).sum().backward()
    assert w1.grad is not None
    assert w2.grad is not None
    w1.assign(w1.detach() - w1.grad * 0.1)  # w2's gradient reads w1, w1's reads w2: no realize in between
    w2.assign(w2.detach() - w2.grad * 0.1)
    Tensor.realize(w1, w2)
    g_out = np.ones((5, 2), np.float32)
    np.testing.assert_allclose(w1.numpy(), w1_np - 0.1 * x_np.T @ g_out @ w2_np.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w2.numpy(), w2_np - 0.1 * (x_np @ w1_np).T @ g_out, rtol=1e-5, atol=1e-5)


def test_reads_after_an_assign_see_the_new_value() -> None:
    x, y = buffers()
    x.assign(x - y * 2)
    y.assign(y - x * 3)  # x here is the assigned value, as in eager code
    Tensor.realize(x, y)
    np.testing.assert_allclose(x.numpy(), A0 - B0 * 2)
    np.testing.assert_allclose(y.numpy(), B0 - (A0 - B0 * 2) * 3)
