"""Tests for reading a tensor's values back (fusegrad/tensor.py `numpy`, `_buffer`): a realized tensor is read straight
from its memory, without going through realize (and the schedule cache); anything else is realized first."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad.tensor as tensor_module
from fusegrad import Tensor
from fusegrad.uop import Ops


def test_a_realized_tensor_is_read_without_a_realize(monkeypatch: pytest.MonkeyPatch) -> None:
    flat = (Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) * 2).realize()
    grid = flat.reshape(2, 3)
    assert flat.uop.op is Ops.BUFFER
    assert grid.uop.op is Ops.RESHAPE
    calls: list[object] = []
    monkeypatch.setattr(tensor_module, "realize_tensors", lambda *args, **kwargs: calls.append(args))
    np.testing.assert_array_equal(flat.numpy(), [2, 4, 6, 8, 10, 12])
    np.testing.assert_array_equal(grid.numpy(), [[2, 4, 6], [8, 10, 12]])
    assert grid.tolist() == [[2, 4, 6], [8, 10, 12]]
    assert calls == []


def test_a_realized_reduce_is_read_without_a_copy_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reduce's result settles as reshapes of its buffer (keepdim, then the axis dropped): `loss.item()` and a row
    sum's numpy() read that memory. They ran a copy kernel each (E_ / E_4) while only one reshape was read directly."""
    grid = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    rows, total = grid.sum(axis=1).realize(), (grid * 2).sum().realize()
    assert rows.uop.op is Ops.RESHAPE
    assert rows.uop.src[0].op is Ops.RESHAPE
    calls: list[object] = []
    monkeypatch.setattr(tensor_module, "realize_tensors", lambda *args, **kwargs: calls.append(args))
    np.testing.assert_array_equal(rows.numpy(), [6, 22, 38])
    assert total.item() == 132.0
    assert rows.tolist() == [6.0, 22.0, 38.0]
    assert calls == []


def test_views_and_lazy_tensors_are_realized_first() -> None:
    grid = (Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) + 0).realize()
    np.testing.assert_array_equal(grid.T.numpy(), [[1, 4], [2, 5], [3, 6]])  # a view: copied out contiguous
    np.testing.assert_array_equal(grid[:, 1].numpy(), [2, 5])
    lazy = grid * 10
    np.testing.assert_array_equal(lazy.numpy(), [[10, 20, 30], [40, 50, 60]])


def test_a_realized_tensor_whose_memory_was_freed_is_read_again() -> None:
    x = (Tensor([1.0, 2.0]) + 1).realize()
    x.uop.buffer.deallocate()
    assert x.numpy().shape == (2,)  # memory again (contents undefined), not an error
