"""Several devices at once (fusegrad/schedule/multi.py, collectives.py and the multi-device paths of rangeify.py,
kernelize.py and engine/schedule.py): shard/replicate/gather, ops on sharded tensors, allreduce (naive and ring),
autograd and a data-parallel training step, each checked against numpy, torch or the same work on one device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.dtype import dtypes
from fusegrad.helpers import Context
from fusegrad.schedule.multi import REPLICATED, Placement, multi_buffer, reshaped_axis
from fusegrad.tensor import Tensor
from fusegrad.uop import AxisType, Ops

CPUS = {n: tuple(f"CPU:{i}" for i in range(n)) for n in (2, 3, 4)}
D4 = CPUS[4]
D4_NAMES = ("CPU", "CPU:1", "CPU:2", "CPU:3")  # canonical: "CPU:0" is "CPU"


def rand(*shape: int, seed: int = 0) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def placement(t: Tensor) -> Placement:
    """Where a realized multi-device tensor's memory lives."""
    t.realize()
    return multi_buffer(t.uop.base).placement


# *** placing data ***


def test_shard_and_replicate_keep_the_logical_tensor() -> None:
    a = rand(8, 3)
    sharded, replicated = Tensor(a).shard(D4, axis=0), Tensor(a).to(D4)
    assert sharded.device == D4_NAMES
    assert replicated.device == D4_NAMES
    assert sharded.shape == replicated.shape == (8, 3)
    np.testing.assert_array_equal(sharded.numpy(), a)
    np.testing.assert_array_equal(replicated.numpy(), a)
    assert sharded.tolist() == a.tolist()
    assert placement(sharded) == Placement(0)
    assert placement(replicated) == REPLICATED
    assert multi_buffer(sharded.uop.base).bufs[1].size == 6  # each device holds its 2 x 3 block


def test_shard_devices_hold_their_blocks() -> None:
    a = np.arange(12, dtype=np.int32).reshape(4, 3)
    t = Tensor(a).shard(CPUS[2], axis=0).realize()
    blocks = [b.numpy().view(np.int32).reshape(2, 3) for b in multi_buffer(t.uop.base).bufs]
    np.testing.assert_array_equal(blocks[0], a[:2])
    np.testing.assert_array_equal(blocks[1], a[2:])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_shard_any_axis_round_trips(axis: int) -> None:
    a = rand(4, 6, 2 * 3)
    t = Tensor(a).shard(CPUS[2], axis=axis)
    assert placement(t) == Placement(axis % 3)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(t.to("CPU:1").numpy(), a)


def test_gather_and_move_between_device_sets() -> None:
    a = rand(6, 4)
    t = Tensor(a).shard(CPUS[3], axis=0)
    np.testing.assert_array_equal(t.to(CPUS[2]).numpy(), a)
    np.testing.assert_array_equal(t.shard(CPUS[2], axis=1).numpy(), a)
    assert placement(t.shard(CPUS[2], axis=1)) == Placement(1)


def test_uneven_shard_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shard: axis 0 of shape \(10, 2\) does not split evenly: got size 10, "
                       r"expected a multiple of the device count 4"):  # fmt: skip
        Tensor.ones(10, 2).shard(D4, axis=0)
    with pytest.raises(IndexError, match=r"shard: axis 2 out of range"):
        Tensor.ones(4, 2).shard(D4, axis=2)


def test_mismatched_devices_name_both_and_suggest_to() -> None:
    with pytest.raises(ValueError, match=r"add: tensors on different devices \('CPU', 'CPU:1'\) and CPU; use \.to\(\)"):
        Tensor.ones(4).to(CPUS[2]) + Tensor.ones(4)
    with pytest.raises(ValueError, match=r"mul: tensors on different devices .*CPU:1.* and .*CPU:2.*; use \.to\(\)"):
        Tensor.ones(4).to(CPUS[2]) * Tensor.ones(4).to(CPUS[3])
    assert (Tensor.ones(4).to(CPUS[2]) + Tensor.ones(4).to(CPUS[2])).tolist() == [2.0] * 4  # .to() fixes it


# *** ops ***


def test_elementwise_sharded_with_sharded_and_replicated() -> None:
    a, b, c = rand(8, 4), rand(8, 4, seed=1), rand(4, seed=2)
    x, y, z = Tensor(a).shard(D4, 0), Tensor(b).shard(D4, 0), Tensor(c).to(D4)
    out = (x * y + z).exp()
    np.testing.assert_allclose(out.numpy(), np.exp(a * b + c), rtol=1e-5)
    assert placement(out) == Placement(0)
    # shards along different axes: one is regathered, the result is still right
    np.testing.assert_allclose((x + Tensor(b).shard(D4, 1)).numpy(), a + b, rtol=1e-6)


def test_kernel_is_described_once_with_a_multi_range() -> None:
    a = rand(8, 4)
    # arange is replicated and computed inline: each device needs the global row index of its block
    out = Tensor(a).shard(D4, 0).realize() + Tensor.arange(8, device=D4).reshape(8, 1).cast(dtypes.float32)
    items = out.schedule()
    assert len(items) == 4
    assert len({ei.ast for ei in items}) == 1  # one program for all devices
    assert [ei.fixedvars for ei in items] == [{"_device_num": d} for d in range(4)]
    kernel = out.uop.base.src[1].arg.ast
    assert [u.arg[1] for u in kernel.toposort() if u.op is Ops.RANGE].count(AxisType.MULTI) == 1
    np.testing.assert_array_equal(out.numpy(), a + np.arange(8, dtype=np.float32).reshape(8, 1))


def test_reduce_over_unsharded_axis_stays_sharded() -> None:
    a = rand(8, 5)
    s = Tensor(a).shard(D4, 0).sum(1)
    np.testing.assert_allclose(s.numpy(), a.sum(1), rtol=1e-5)
    assert placement(s) == Placement(0)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("ring", [0, 2])
@pytest.mark.parametrize("cols", [1, 7, 33])
def test_allreduce_matches_numpy(n: int, ring: int, cols: int) -> None:
    a = rand(2 * n, cols, seed=n * 100 + cols)
    with Context(RING=ring):
        t = Tensor(a).shard(CPUS[n], 0).realize()
        total = t.sum(0)
        copies = [ei for ei in total.schedule() if ei.ast.op is Ops.COPY]
        np.testing.assert_allclose(total.numpy(), a.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(Tensor(a).shard(CPUS[n], 0).max(0).numpy(), a.max(0))
    assert placement(total) == REPLICATED
    # naive: every device copies the n-1 others; ring: n copies per step, 2(n-1) steps
    assert len(copies) == (n * (n - 1) if ring == 0 else 2 * n * (n - 1))


def test_ring_is_chosen_by_size() -> None:
    t = Tensor(rand(4, 16)).shard(D4, 0).realize()
    with Context(RING=1, RING_ALLREDUCE_THRESHOLD=16):
        ring = sum(ei.ast.op is Ops.COPY for ei in t.sum(0).schedule())
    with Context(RING=1, RING_ALLREDUCE_THRESHOLD=17):
        naive = sum(ei.ast.op is Ops.COPY for ei in t.sum(0).schedule())
    assert (ring, naive) == (2 * 4 * 3, 4 * 3)


def test_matmul_data_parallel_and_weight_sharded() -> None:
    x, w = rand(8, 6), rand(6, 4, seed=1)
    data_parallel = Tensor(x).shard(D4, 0) @ Tensor(w).to(D4)
    np.testing.assert_allclose(data_parallel.numpy(), x @ w, rtol=1e-5, atol=1e-5)
    assert placement(data_parallel) == Placement(0)
    column_split = Tensor(x).to(D4) @ Tensor(w).shard(D4, 1)
    np.testing.assert_allclose(column_split.numpy(), x @ w, rtol=1e-5, atol=1e-5)
    assert placement(column_split) == Placement(1)
    contraction_split = Tensor(x).shard(CPUS[2], 1) @ Tensor(w).shard(CPUS[2], 0)  # partial sums, allreduced
    np.testing.assert_allclose(contraction_split.numpy(), x @ w, rtol=1e-5, atol=1e-5)
    assert placement(contraction_split) == REPLICATED


def test_movement_ops_on_sharded() -> None:
    a = rand(8, 6)
    t = Tensor(a).shard(D4, 0)
    cases = {
        "permute": (t.permute(1, 0), a.T),
        "reshape keeps blocks": (t.reshape(4, 12), a.reshape(4, 12)),
        "reshape flat": (t.reshape(48), a.reshape(48)),
        "reshape across blocks": (t.reshape(6, 8), a.reshape(6, 8)),
        "expand": (t.reshape(8, 1, 6).expand(8, 3, 6), np.broadcast_to(a.reshape(8, 1, 6), (8, 3, 6))),
        "getitem within a shard": (t[2:4], a[2:4]),
        "getitem across shards": (t[1:7:2, ::-1], a[1:7:2, ::-1]),
        "shrink other axis": (t[:, 1:4], a[:, 1:4]),
        "pad": (t.pad(((1, 1), (0, 2))), np.pad(a, ((1, 1), (0, 2)))),
        "flip": (t.flip(0), a[::-1]),
    }
    for name, (got, expected) in cases.items():
        np.testing.assert_array_equal(got.numpy(), expected, err_msg=name)
    assert placement(t.permute(1, 0).contiguous()) == Placement(1)
    assert placement(t.reshape(4, 12).contiguous()) == Placement(0)


def test_reshaped_axis() -> None:
    assert reshaped_axis((8, 6), 0, (48,), 4) == 0
    assert reshaped_axis((8, 6), 0, (4, 12), 4) == 0
    assert reshaped_axis((8, 6), 0, (6, 8), 4) is None
    assert reshaped_axis((2, 8), 1, (2, 2, 4), 2) == 1
    assert reshaped_axis((2, 8), 1, (16,), 2) is None


def test_assign_into_sharded_and_replicated() -> None:
    a, b = rand(8, 2), rand(8, 2, seed=1)
    t = Tensor(a).shard(D4, 0).realize()
    buffer = t.uop.base
    t.assign(t * 2 + Tensor(b).shard(D4, 0)).realize()
    assert t.uop.base is buffer  # written in place
    np.testing.assert_allclose(t.numpy(), a * 2 + b, rtol=1e-6)
    r = Tensor(a).to(D4).realize()
    r += 1
    np.testing.assert_allclose(r.numpy(), a + 1, rtol=1e-6)


def test_autograd_through_sharded_ops() -> None:
    x, w = rand(8, 5), rand(5, 3, seed=1)
    xt, wt = Tensor(x).shard(D4, 0).requires_grad_(), Tensor(w).to(D4).requires_grad_()
    (xt @ wt).relu().sum(1).square().mean().backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (tx @ tw).relu().sum(1).square().mean().backward()
    assert wt.grad is not None
    assert xt.grad is not None
    assert wt.grad.device == D4_NAMES
    np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def _train(devices: tuple[str, ...] | None, steps: int = 2) -> tuple[np.ndarray[Any, Any], ...]:
    """A small MLP trained by hand-written SGD; data sharded along the batch, weights replicated."""
    rng = np.random.default_rng(0)
    x, y = Tensor(rng.standard_normal((16, 6)).astype(np.float32)), Tensor(rng.integers(0, 3, 16).astype(np.int32))
    w1, w2 = Tensor(rand(6, 8, seed=1) * 0.3), Tensor(rand(8, 3, seed=2) * 0.3)
    if devices is not None:
        x, y, w1, w2 = x.shard(devices, 0), y.shard(devices, 0), w1.to(devices), w2.to(devices)
    Tensor.realize(w1, w2)
    for _ in range(steps):
        w1.requires_grad_()
        w2.requires_grad_()
        (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y).backward()
        assert w1.grad is not None
        assert w2.grad is not None
        w1.assign(w1.detach() - 0.1 * w1.grad)
        w2.assign(w2.detach() - 0.1 * w2.grad)
        w1.grad = w2.grad = None
        Tensor.realize(w1, w2)
    return w1.numpy(), w2.numpy()


def test_data_parallel_training_step_matches_one_device() -> None:
    for single, multi in zip(_train(None), _train(D4), strict=True):
        np.testing.assert_allclose(multi, single, rtol=1e-5, atol=1e-6)


def test_null_devices_run_with_the_right_shapes() -> None:
    null = tuple(f"NULL:{i}" for i in range(4))
    w1, w2 = _train(null, steps=1)
    assert w1.shape == (6, 8)
    assert w2.shape == (8, 3)
    t = Tensor.empty(8, 4, device="NULL").shard(null, 0)
    assert (t.sum(0) + 1).numpy().shape == (4,)
    assert t.permute(1, 0).to("NULL").numpy().shape == (4, 8)


def test_int_and_bool_dtypes() -> None:
    a = np.arange(12, dtype=np.int32).reshape(4, 3)
    t = Tensor(a).shard(CPUS[2], 0)
    assert (t.sum(0)).tolist() == a.sum(0).tolist()
    assert (t > 5).to("CPU").dtype == dtypes.bool
    assert (t > 5).tolist() == (a > 5).tolist()


def test_adam_on_replicated_weights_matches_one_device() -> None:
    from fusegrad.nn import optim

    x, y = rand(8, 6), np.arange(8, dtype=np.int32) % 3

    def train(devices: tuple[str, ...] | None) -> np.ndarray[Any, Any]:
        w = Tensor(rand(6, 3, seed=5), requires_grad=True)
        xt, yt = Tensor(x), Tensor(y)
        if devices is not None:
            w, xt, yt = w.to(devices).realize().requires_grad_(), xt.shard(devices, 0), yt.shard(devices, 0)
        opt = optim.Adam([w], lr=0.1)
        with Tensor.train():
            for _ in range(2):
                opt.zero_grad()
                (xt @ w).sparse_categorical_crossentropy(yt).backward()
                opt.step()
        return w.numpy()

    np.testing.assert_allclose(train(CPUS[2]), train(None), rtol=1e-5, atol=1e-6)


def test_in_place_moves_carry_the_gradient() -> None:
    a = rand(4, 2)
    t = Tensor(a, requires_grad=True)
    t.grad = Tensor.ones(4, 2)
    assert t.shard_(CPUS[2], axis=0) is t
    assert t.device == ("CPU", "CPU:1")
    assert t.grad is not None
    assert t.grad.device == ("CPU", "CPU:1")
    assert placement(t) == Placement(0)
    t.to_("CPU:1")
    assert t.device == "CPU:1"
    np.testing.assert_array_equal(t.numpy(), a)


def test_reshard_in_place_and_from_numpy_directly() -> None:
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    sharded = Tensor(a).shard(CPUS[2], 0)
    # a numpy array is scattered straight from its memory: one copy per device, no staging copy on the host
    assert [[b.device for b in ei.bufs] for ei in sharded.schedule()] == [["CPU", "NPY"], ["CPU:1", "NPY"]]
    replicated = Tensor(a).to(CPUS[2]).realize()
    resharded = replicated.shard(CPUS[2], 1)
    # replicated -> sharded on the same devices: each device keeps its block, nothing is copied
    assert all(ei.ast.op is Ops.SINK for ei in resharded.schedule())
    assert placement(resharded) == Placement(1)
    np.testing.assert_array_equal(resharded.numpy(), a)
    np.testing.assert_array_equal(sharded.shard(CPUS[2], 1).numpy(), a)
    again = Tensor(a).shard(CPUS[2], 1)
    again.schedule()  # kernelized but not run: the stored buffer keeps the shape its shard axis refers to
    np.testing.assert_array_equal((again.reshape(16) + 1).numpy(), a.reshape(16) + 1)
    np.testing.assert_array_equal(again.numpy(), a)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_updates_reading_each_others_old_values(axis: int | None) -> None:
    """a <- b + 1 and b <- a + 1 realized together: one of them reads a snapshot copy (per device, of its memory)."""
    a0, b0 = np.arange(4, dtype=np.float32).reshape(2, 2), np.arange(4, dtype=np.float32).reshape(2, 2) * 10
    a, b = Tensor(a0).shard(CPUS[2], axis).realize(), Tensor(b0).shard(CPUS[2], axis).realize()
    new_a, new_b = b + 1, a + 1
    a.assign(new_a)
    b.assign(new_b)
    Tensor.realize(a, b)
    np.testing.assert_array_equal(a.numpy(), b0 + 1)
    np.testing.assert_array_equal(b.numpy(), a0 + 1)


def _random_op(draw: Any, t: Tensor, a: np.ndarray[Any, Any]) -> tuple[Tensor, np.ndarray[Any, Any]]:
    """One random op on a (possibly sharded) tensor and on the array: movement, elementwise, reduce or realize."""
    kind = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip", "add", "sum", "contiguous"]))
    axis = draw(st.integers(0, a.ndim - 1))
    if kind == "reshape":
        d = draw(st.sampled_from([d for d in range(1, a.size + 1) if a.size % d == 0]))
        return t.reshape(d, a.size // d), a.reshape(d, a.size // d)
    if kind == "permute":
        order = draw(st.permutations(list(range(a.ndim))))
        return t.permute(order), a.transpose(order)
    if kind == "expand":
        grown = (*a.shape[:axis], 2, *a.shape[axis:])
        return t.unsqueeze(axis).expand(*grown), np.repeat(np.expand_dims(a, axis), 2, axis)
    if kind == "pad":
        pads = [(draw(st.integers(0, 1)), draw(st.integers(0, 1))) if i == axis else (0, 0) for i in range(a.ndim)]
        return t.pad(pads), np.pad(a, pads)
    if kind == "shrink" and a.shape[axis] > 1:
        lo = draw(st.integers(0, a.shape[axis] - 1))
        hi = draw(st.integers(lo + 1, a.shape[axis]))
        bounds = [(lo, hi) if i == axis else None for i in range(a.ndim)]
        return t.shrink(bounds), a[tuple(slice(lo, hi) if i == axis else slice(None) for i in range(a.ndim))]
    if kind == "flip":
        return t.flip(axis), np.flip(a, axis)
    if kind == "sum" and a.ndim > 1:
        return t.sum(axis), a.sum(axis)
    if kind == "contiguous":
        return t.contiguous(), a
    return t * 2 + 1, a * 2 + 1


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_chains_on_sharded_match_numpy(data: Any) -> None:
    shape = data.draw(st.sampled_from([(4, 6), (2, 4, 2), (8,), (6, 2, 2)]))
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    axis = data.draw(st.sampled_from([None, *[i for i, s in enumerate(shape) if s % 2 == 0]]))
    t = Tensor(a).shard(CPUS[2], axis)
    for _ in range(3):
        if a.size > 96:
            break
        t, a = _random_op(data.draw, t, a)
    np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_shard_from_disk(axis: int | None, tmp_path: Any) -> None:
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    a.tofile(tmp_path / "weights.bin")
    on_disk = Tensor.empty(8, 4, dtype=dtypes.float32, device=f"DISK:{tmp_path / 'weights.bin'}")
    sharded = on_disk.shard(CPUS[2], axis)
    np.testing.assert_array_equal(sharded.numpy(), a)
    assert placement(sharded) == (REPLICATED if axis is None else Placement(axis))
    np.testing.assert_array_equal(sharded.to("NPY").numpy(), a)  # and back to a device that can't compute


def test_allreduced_result_is_copied_out_without_an_extra_kernel() -> None:
    t = Tensor(rand(6, 4)).shard(CPUS[2], 0).realize()
    ops = [ei.ast.op for ei in t.sum(0).to("CPU").schedule()]
    # partial sums, allreduce (copies + combine), one copy out: the reduce's result is already contiguous memory
    assert ops == [Ops.SINK] * 2 + [Ops.COPY] * 2 + [Ops.SINK] * 2 + [Ops.COPY]


def test_setitem_across_shards_writes_each_devices_block() -> None:
    a = np.arange(8, dtype=np.float32).reshape(4, 2)
    t = Tensor(a).shard(CPUS[2], 0).realize()
    buffer = t.uop.base
    t[1:3] = 0  # rows 1 and 2 live on different devices: each device stores only into its own block
    expected = a.copy()
    expected[1:3] = 0
    np.testing.assert_array_equal(t.numpy(), expected)
    assert t.uop.base is buffer
    t[1:3] += 10
    expected[1:3] += 10
    np.testing.assert_array_equal(t.numpy(), expected)
    columns = Tensor(a).shard(CPUS[2], 1).realize()
    columns[:, 1] = Tensor([5.0, 6.0, 7.0, 8.0]).to(CPUS[2])
    np.testing.assert_array_equal(columns.numpy(), np.stack([a[:, 0], [5, 6, 7, 8]], 1))
    view = t[::-1][0:3]
    view.assign(Tensor(np.full((3, 2), 9, np.float32)).to(CPUS[2]))
    np.testing.assert_array_equal((view + 1).numpy(), np.full((3, 2), 10))  # read in the schedule that writes it
    expected[1:] = 9
    np.testing.assert_array_equal(t.numpy(), expected)


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_random_setitem_on_sharded_matches_numpy(data: Any) -> None:
    shape = data.draw(st.sampled_from([(4, 6), (2, 4, 2), (8,)]))
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    axis = data.draw(st.sampled_from([None, *[i for i, s in enumerate(shape) if s % 2 == 0]]))
    t = Tensor(a).shard(CPUS[2], axis).realize()
    index: list[int | slice] = []
    for s in shape:
        if data.draw(st.booleans()):
            index.append(data.draw(st.integers(0, s - 1)))
        else:
            lo = data.draw(st.integers(0, s - 1))
            index.append(slice(lo, data.draw(st.integers(lo + 1, s))))
    key = tuple(index)
    t[key] = -1.0
    a[key] = -1.0
    t[key] += 2
    a[key] += 2
    np.testing.assert_array_equal(t.numpy(), a)
