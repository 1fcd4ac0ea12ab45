"""Tests for running Tensors (fusegrad/tensor.py with engine/ and schedule/ behind it): realize, schedule, kernelize,
assign, contiguous; realized results replace the graph in every live tensor, so no work is done twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fusegrad import GlobalCounters, Tensor
from fusegrad.engine.realize import ExecItem
from fusegrad.uop import Ops

DEVICES = ("CPU", "PYTHON")


def kernels_run(fn: Callable[[], Any]) -> int:
    """How many kernels `fn` runs."""
    before = GlobalCounters.kernel_count
    fn()
    return GlobalCounters.kernel_count - before


def is_buffer(t: Tensor) -> bool:
    return t.uop.base.op is Ops.BUFFER


# *** realize ***


@pytest.mark.parametrize("device", DEVICES)
def test_realize_returns_self_and_leaves_a_buffer(device: str) -> None:
    t = Tensor([1.0, 2.0], device=device) * 3
    assert not is_buffer(t)
    assert t.realize() is t
    assert is_buffer(t)
    assert t.uop.base.buffer.device == device
    assert t.tolist() == [3.0, 6.0]


@pytest.mark.parametrize("device", DEVICES)
def test_fused_intermediate_is_not_realized(device: str) -> None:
    a = Tensor([1.0, 2.0, 3.0], device=device)
    b = a + 1
    c = b * 2
    assert kernels_run(c.realize) == 1  # b is computed inside c's kernel
    assert is_buffer(c)
    assert not is_buffer(b)
    assert b.tolist() == [2.0, 3.0, 4.0]


@pytest.mark.parametrize("device", DEVICES)
def test_realize_several_at_once(device: str) -> None:
    a = Tensor([1.0, 2.0, 3.0], device=device)
    b = a + 1
    c = b * 2
    n = kernels_run(lambda: Tensor.realize(b, c))
    assert 1 <= n <= 2
    assert is_buffer(b)
    assert is_buffer(c)
    assert b.tolist() == [2.0, 3.0, 4.0]
    assert c.tolist() == [4.0, 6.0, 8.0]
    assert kernels_run(lambda: (b.numpy(), c.numpy())) == 0
    # later work reads b's buffer instead of recomputing it
    e = b * 3
    assert kernels_run(e.realize) == 1
    assert e.tolist() == [6.0, 9.0, 12.0]


@pytest.mark.parametrize("device", DEVICES)
def test_live_tensors_point_at_realized_buffers(device: str) -> None:
    """Tensors built on c before c was realized read c's buffer afterwards, not c's graph."""
    a = Tensor([1.0, 2.0], device=device)
    c = (a + 1) * 2
    d = c + 1
    e = c.reshape(2, 1).expand(2, 3)
    c.realize()
    for user in (d, e):
        nodes = user.uop.toposort()
        assert c.uop.base in nodes
        assert not any(u.op is Ops.MUL for u in nodes), "c's computation is still in the graph"
    assert kernels_run(d.realize) == 1
    assert d.tolist() == [5.0, 7.0]
    assert e.tolist() == [[4.0] * 3, [6.0] * 3]


@pytest.mark.parametrize("device", DEVICES)
def test_no_work_done_twice(device: str) -> None:
    c = (Tensor([1.0, 2.0, 3.0], device=device) + 1) * 2
    assert kernels_run(c.realize) == 1
    assert kernels_run(c.realize) == 0
    assert kernels_run(lambda: (c.numpy(), c.tolist(), c.sum(0).item())) == 1  # only the sum runs
    assert kernels_run(lambda: Tensor.realize(c, c)) == 0
    s = c.sum()
    assert kernels_run(s.realize) == 1
    assert kernels_run(lambda: (s.item(), s.item(), s.numpy())) == 0


def test_realizing_a_buffer_runs_nothing() -> None:
    t = Tensor([1, 2, 3])
    assert kernels_run(t.realize) == 0
    assert kernels_run(t.numpy) == 0
    assert is_buffer(t)


def test_realizing_buffers_builds_no_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Realized tensors (an optimiser's gradients, `loss.item()`) are checked without making a SINK of them."""
    from fusegrad.uop.ops import UOp

    a, b = Tensor.rand(3).realize(), Tensor.rand(2, 2).realize()
    views = (b.T, b.reshape(4))  # made before counting: a first call of a Tensor method records its recipe's graph
    sinks: list[Any] = []
    sink = UOp.sink

    def counted(*srcs: UOp, **kwargs: Any) -> UOp:
        sinks.append(srcs)
        return sink(*srcs, **kwargs)

    monkeypatch.setattr(UOp, "sink", staticmethod(counted))
    Tensor.realize(a, *views)
    assert sinks == []
    (a + 1).realize()
    assert sinks


def test_reading_a_view_of_a_buffer() -> None:
    t = (Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)) * 1).realize()
    assert t.T.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert t[1, 1:].tolist() == [4, 5]
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_realize_a_view_of_a_lazy_tensor() -> None:
    b = Tensor([1.0, 2.0, 3.0]) * 2
    v = b[1:]
    v.realize()
    assert v.tolist() == [4.0, 6.0]
    assert b.tolist() == [2.0, 4.0, 6.0]


@pytest.mark.parametrize("device", DEVICES)
def test_shared_reduce_in_several_outputs(device: str) -> None:
    a = Tensor([1.0, 2.0, 3.0], device=device)
    s = a.sum()
    c = a / s
    e = c + s
    Tensor.realize(c, e)
    np.testing.assert_allclose(c.numpy(), np.array([1, 2, 3]) / 6, rtol=1e-6)
    np.testing.assert_allclose(e.numpy(), np.array([1, 2, 3]) / 6 + 6, rtol=1e-6)
    assert s.item() == 6.0


def test_constants_realize_without_error() -> None:
    t = Tensor.ones(3)
    t.realize()
    assert t.tolist() == [1.0, 1.0, 1.0]
    z = Tensor.zeros(0, 3)
    z.realize()
    assert z.shape == (0, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_realize_computed_size_zero_tensor(device: str) -> None:
    t = Tensor([], device=device) + 1
    assert kernels_run(t.realize) == 0
    assert t.shape == (0,)
    assert t.tolist() == []


@pytest.mark.parametrize("device", DEVICES)
def test_numpy_of_computed_size_zero_tensor(device: str) -> None:
    t = Tensor.zeros(2, 0, device=device) + Tensor.ones(2, 1, device=device)
    assert t.numpy().shape == (2, 0)


# *** schedule and kernelize ***


@pytest.mark.parametrize("device", DEVICES)
def test_schedule_returns_exec_items_without_running(device: str) -> None:
    a = Tensor([1.0, 2.0], device=device)
    b = a + 1
    c = (b * 2).sum()
    items: list[ExecItem] = []
    assert kernels_run(lambda: items.extend(Tensor.schedule(b, c))) == 0
    assert 1 <= len(items) <= 2
    for item in items:
        assert isinstance(item, ExecItem)
        assert item.ast.op is Ops.SINK
        assert item.ast.src
        assert all(s.op is Ops.STORE for s in item.ast.src)
    assert c.tolist() == 10.0
    assert b.tolist() == [2.0, 3.0]


def test_schedule_of_one_tensor() -> None:
    items = (Tensor([1.0, 2.0]) * 5).schedule()
    assert len(items) == 1
    assert [s.op for s in items[0].ast.src] == [Ops.STORE]
    assert all(b is not None for b in items[0].bufs)


def test_schedule_of_a_realized_tensor_is_empty() -> None:
    t = (Tensor([1.0]) + 1).realize()
    assert t.schedule() == []
    assert Tensor([1.0]).schedule() == []


@pytest.mark.parametrize("device", DEVICES)
def test_kernelize_builds_kernels_without_running(device: str) -> None:
    a = Tensor([1.0, 2.0], device=device)
    t = a * 3
    assert kernels_run(lambda: t.kernelize()) == 0
    base = t.uop.base
    assert base.op is Ops.ASSIGN
    assert base.src[1].op is Ops.KERNEL
    assert kernels_run(t.realize) == 1
    assert t.tolist() == [3.0, 6.0]


def test_kernelize_several() -> None:
    a = Tensor([1.0, 2.0])
    b, c = a + 1, a * 4
    assert Tensor.kernelize(b, c) is b
    assert b.uop.base.op is Ops.ASSIGN
    assert c.uop.base.op is Ops.ASSIGN
    assert kernels_run(c.realize) == 1
    assert kernels_run(b.realize) == 1
    assert (b.tolist(), c.tolist()) == ([2.0, 3.0], [4.0, 8.0])


# *** contiguous ***


@pytest.mark.parametrize("device", DEVICES)
def test_contiguous_materializes_a_view(device: str) -> None:
    a = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3), device=device)
    t = a.T.contiguous()
    t.realize()
    assert is_buffer(t)
    assert t.uop.base.buffer is not a.uop.base.buffer
    assert t.uop.base.buffer.size == 6
    assert t.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert kernels_run(t.numpy) == 0


# *** assign ***


@pytest.mark.parametrize("device", DEVICES)
def test_assign_in_place(device: str) -> None:
    a = Tensor([1.0, 2.0, 3.0], device=device)
    buffer = a.uop.base.buffer
    assert a.assign(a + 1) is a
    assert kernels_run(a.realize) == 1
    assert a.tolist() == [2.0, 3.0, 4.0]
    assert a.uop.base.buffer is buffer, "assign wrote to a new buffer"


@pytest.mark.parametrize("device", DEVICES)
def test_assign_into_realized_tensor(device: str) -> None:
    b = (Tensor.ones(3, device=device) * 2).realize()
    buffer = b.uop.base.buffer
    b.assign(Tensor([5.0, 6.0, 7.0], device=device)).realize()
    assert b.tolist() == [5.0, 6.0, 7.0]
    assert b.uop.base.buffer is buffer
    b.assign(9.0).realize()
    assert b.tolist() == [9.0, 9.0, 9.0]


@pytest.mark.parametrize("device", DEVICES)
def test_assign_is_lazy_and_chains(device: str) -> None:
    a = Tensor([1, 2, 3], device=device)
    a.assign(a + 1)
    a.assign(a * 10)
    c = a + 1
    assert c.tolist() == [21, 31, 41]
    assert a.tolist() == [20, 30, 40]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda a: a.flip(0), [4.0, 3.0, 2.0, 1.0]),
        (lambda a: a[1:].pad(((0, 1),)), [2.0, 3.0, 4.0, 0.0]),
        (lambda a: a[:-1].pad(((1, 0),)), [0.0, 1.0, 2.0, 3.0]),
        (lambda a: a - a.sum() / 4, [-1.5, -0.5, 0.5, 1.5]),
        (lambda a: a.reshape(2, 2).T.reshape(4), [1.0, 3.0, 2.0, 4.0]),
    ],
    ids=["flip", "shift-left", "shift-right", "reduce", "transpose"],
)
def test_assign_reading_other_elements_of_the_target(
    device: str, fn: Callable[[Tensor], Tensor], expected: list[float]
) -> None:
    """Every element is computed from the old values, even where the kernel writes what other elements read."""
    a = Tensor([1.0, 2.0, 3.0, 4.0], device=device)
    a.assign(fn(a)).realize()
    assert a.tolist() == expected


@pytest.mark.parametrize("device", DEVICES)
def test_assign_to_a_slice_view_after_realizing_it(device: str) -> None:
    z = Tensor.zeros(4, 4, device=device).contiguous().realize()
    buffer = z.uop.base.buffer
    z[1:3].assign(Tensor.ones(2, 4, device=device)).realize()
    z[1:3, 2:].assign(Tensor.full((2, 2), 5.0, device=device)).realize()
    expected = np.zeros((4, 4), np.float32)
    expected[1:3] = 1
    expected[1:3, 2:] = 5
    np.testing.assert_array_equal(z.numpy(), expected)
    assert z.uop.base.buffer is buffer


@pytest.mark.parametrize("device", DEVICES)
def test_assign_to_a_slice_view_is_seen_by_the_base(device: str) -> None:
    """As in tinygrad: `z[1:3].assign(x)` updates z even though the view tensor is dropped at once."""
    z = Tensor.zeros(4, device=device).contiguous().realize()
    z[1:3].assign(Tensor([7.0, 8.0], device=device))
    assert z.tolist() == [0.0, 7.0, 8.0, 0.0]


def test_assign_to_a_permuted_view() -> None:
    z = Tensor.zeros(2, 3).contiguous().realize()
    z.T.assign(Tensor(np.arange(6, dtype=np.float32).reshape(3, 2))).realize()
    assert z.tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]


def test_assign_to_a_strided_view_raises() -> None:
    z = Tensor.zeros(6).contiguous().realize()
    with pytest.raises(ValueError, match="assign"):
        z[::2].assign(Tensor([1.0, 2.0, 3.0])).realize()


def test_assign_to_an_unrealized_target_replaces_it() -> None:
    z = Tensor.zeros(3)
    z.assign(Tensor([1.0, 2.0, 3.0]))
    assert z.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("device", DEVICES)
def test_assign_then_readers_see_new_values(device: str) -> None:
    """Tensors built from a after its assign read the assigned values."""
    a = Tensor([1.0, 2.0], device=device)
    a.assign(a * 10)
    b = a + 1
    a.realize()
    assert b.tolist() == [11.0, 21.0]
    assert kernels_run(a.realize) == 0


def test_train_mode_context_and_decorator():
    assert not Tensor.training
    with Tensor.train():
        assert Tensor.training
        with Tensor.test():
            assert not Tensor.training
        assert Tensor.training
    assert not Tensor.training

    @Tensor.train()
    def step() -> bool:
        return Tensor.training

    assert step()
    assert not Tensor.training


def test_contiguous_results_realized_together_do_not_share_memory():
    a, b = Tensor.ones(3).contiguous(), Tensor.ones(3).contiguous()
    Tensor.realize(a, b)
    a.assign(Tensor([5.0, 6.0, 7.0])).realize()
    np.testing.assert_equal(a.numpy(), [5, 6, 7])
    np.testing.assert_equal(b.numpy(), [1, 1, 1])


def test_contiguous_of_a_realized_buffer_is_itself():
    a = Tensor([1.0, 2.0]).contiguous().realize()
    assert a.contiguous() is a


def test_realized_arange_is_backed_by_its_buffer() -> None:
    """An arange (IOTA) is replaced by its buffer when realized: the tensor must be repointed like any lazy one (the
    lazy-tensor set once skipped IOTA, so a realize computed it and the tensor kept recomputing it; schedule() was
    empty)."""
    items, _ = Tensor.arange(65535).schedule_with_vars()
    assert len(items) == 1
    t = Tensor.arange(5).realize()
    assert t.uop.base.op is Ops.BUFFER
    assert t.tolist() == [0, 1, 2, 3, 4]
