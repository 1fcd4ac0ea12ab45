"""Tensor.assign and the tensors that view the written buffer: every view (reshape, permute, index, alias), made
before the write or between writes, reads the new values, pending writes included; and the index of views by buffer
that assign consults (instead of every live tensor) lets go of tensors and buffers when they die."""

from __future__ import annotations

import gc

import numpy as np

from fusegrad import Tensor
from fusegrad.tensor import _buffer_views, _viewed_buffer


def test_views_made_before_a_write_read_it() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = Tensor(a).realize()
    v, p, row, alias = w.reshape(3, 2), w.T, w[1], Tensor(w.uop)
    w.assign(w + 1)
    np.testing.assert_array_equal(v.numpy(), (a + 1).reshape(3, 2))
    np.testing.assert_array_equal(p.numpy(), (a + 1).T)
    np.testing.assert_array_equal(row.numpy(), (a + 1)[1])
    np.testing.assert_array_equal(alias.numpy(), a + 1)


def test_views_follow_pending_and_run_writes() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = Tensor(a).realize()
    v = w.reshape(3, 2)
    w.assign(w + 1)
    w.assign(w * 10)  # a write on a pending write
    np.testing.assert_array_equal(v.numpy(), ((a + 1) * 10).reshape(3, 2))
    q = w.reshape(6)  # made after the writes ran
    w.assign(w - 1).realize()
    np.testing.assert_array_equal(q.numpy(), ((a + 1) * 10 - 1).reshape(6))
    np.testing.assert_array_equal(v.numpy(), ((a + 1) * 10 - 1).reshape(3, 2))
    row = w[0]
    w[0] = Tensor([7.0, 8.0, 9.0])
    np.testing.assert_array_equal(row.numpy(), [7.0, 8.0, 9.0])


def test_an_update_loop_keeps_its_views_current() -> None:
    m = Tensor.zeros(4).contiguous().realize()
    total = 0.0
    for i in range(4):
        view = m.reshape(2, 2)
        m.assign(m + i)
        total += i
        np.testing.assert_array_equal(view.numpy(), np.full((2, 2), total, dtype=np.float32))


def test_a_write_reaches_only_views_of_its_own_buffer() -> None:
    w, u = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
    w_view, u_view = w.reshape(2, 1), u.reshape(2, 1)
    w.assign(w * 0)
    np.testing.assert_array_equal(w_view.numpy(), [[0.0], [0.0]])
    np.testing.assert_array_equal(u_view.numpy(), [[3.0], [4.0]])


def test_index_forgets_dead_views_and_buffers() -> None:
    gc.collect()  # earlier tests' dead tensors leave the index now, not inside the measured span
    before = len(_buffer_views), len(_viewed_buffer)
    w = Tensor([1.0, 2.0, 3.0]).realize()
    buffer = w.uop
    views = [w.reshape(3, 1), w.flip(0), w[1:], Tensor(w.uop)]
    assert len(_buffer_views[buffer]) == 1 + len(views)
    del views
    gc.collect()
    assert len(_buffer_views[buffer]) == 1
    w.assign(w + 1).realize()
    del w
    gc.collect()
    assert buffer not in _buffer_views  # the index holds no buffer alive once no tensor views it
    assert (len(_buffer_views), len(_viewed_buffer)) == before
