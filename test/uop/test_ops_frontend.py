"""uop/ops.py's frontend hot paths record what the general path works out: a constant tensor built without the
movement ops' checks is the node (and shape, device) they build; alu() and movement ops hand on shape and device as
compute_shape/compute_device would; node labels (NodeLabels) behave as a weak-keyed mapping."""

from __future__ import annotations

import gc
import math
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.dtype import dtypes
from fusegrad.helpers import Metadata
from fusegrad.uop import Ops
from fusegrad.uop import ops as uop_ops
from fusegrad.uop.ops import UOp, all_metadata
from fusegrad.uop.shape import compute_device, compute_shape


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 4), max_size=4), value=st.sampled_from([2.0, -0.0, 3, True]))
def test_const_tensor_is_the_movement_ops_node(shape: list[int], value: float) -> None:
    dtype = dtypes.bool if value is True else dtypes.float32
    fast = UOp.const_tensor(dtype, value, "CPU", tuple(shape))
    scalar = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg="CPU"),), dtypes.as_const(value, dtype))
    checked = scalar.reshape((1,) * len(shape)).expand(tuple(shape)) if shape else scalar
    assert fast is checked
    for node in fast.toposort():  # sources first: the rules read their sources' worked-out values
        for source in node.src:
            _ = source._shape, source.device
        if node.op is not Ops.DEVICE:
            assert node._shape == compute_shape(node)
            assert node.device == compute_device(node)


def test_constant_tensors_outlive_their_graph() -> None:
    """A training step makes the same constants every step: the last ones made stay alive (one look-up, no nodes
    made again), while equal-looking values of another type or sign stay distinct constants."""
    first = UOp.const_tensor(dtypes.float32, 0.125, "CPU", (4, 3))
    kept = weakref.ref(first)
    scalar = weakref.ref(first.src[0].src[0])
    del first
    gc.collect()
    assert kept() is not None
    assert scalar() is not None
    assert UOp.const_tensor(dtypes.float32, 0.125, "CPU", (4, 3)) is kept()
    assert UOp.const_tensor(dtypes.float32, 0.125, "CPU", [4, 3]) is kept()  # a list shape finds it too
    # -0.0 == 0.0 and True == 1 == 1.0 as dict keys: each still gets its own constant
    assert UOp.const_tensor(dtypes.float32, -0.0, "CPU", (2,)) is not UOp.const_tensor(dtypes.float32, 0.0, "CPU", (2,))
    assert math.copysign(1.0, UOp.const_tensor(dtypes.float32, -0.0, "CPU", ()).arg) == -1.0
    assert UOp.const_tensor(dtypes.bool, True, "CPU", ()).arg is True
    assert type(UOp.const_tensor(dtypes.int32, 1, "CPU", ()).arg) is int
    assert UOp.const_tensor(dtypes.float32, 1, "CPU", ()) is UOp.const_tensor(dtypes.float32, 1.0, "CPU", ())
    nan = UOp.const_tensor(dtypes.float32, float("nan"), "CPU", (2,))
    assert UOp.const_tensor(dtypes.float32, float("nan"), "CPU", (2,)) is nan


def test_kept_constants_are_bounded() -> None:
    for i in range(uop_ops.CONSTANTS_KEPT + 5):
        UOp.const_tensor(dtypes.int32, 1_000_000 + i, "CPU", (2,))
    assert 0 < len(uop_ops._kept_constants) <= uop_ops.CONSTANTS_KEPT


def test_alu_hands_on_shape_and_device() -> None:
    x = UOp.const_tensor(dtypes.float32, 1.5, "CPU", (2, 3))
    y = UOp.new_buffer("CPU", 6, dtypes.float32).reshape((2, 3))
    out = x.alu(Ops.ADD, y).alu(Ops.CMPLT, y)
    assert out.__dict__["_shape"] == compute_shape(out) == (2, 3)
    assert out.__dict__["_device"] == compute_device(out) == "CPU"
    with pytest.raises(ValueError, match="different shapes"):
        _ = x.alu(Ops.ADD, UOp.new_buffer("CPU", 3, dtypes.float32)).shape  # left to compute_shape's check


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_reduce_cast_and_detach_hand_on_shape_and_device(shape: list[int], data: st.DataObject) -> None:
    """UOp.r, cast and detach record the shape and device compute_shape and compute_device work out (read back
    without working them out again)."""
    x = UOp.new_buffer("CPU", 1, dtypes.float32).reshape((1,) * len(shape)).expand(tuple(shape))
    _ = x.shape, x.device  # known on the source (a bare BUFFER works its device out on first use)
    axes = tuple(data.draw(st.lists(st.integers(0, len(shape) - 1), max_size=len(shape))))
    for node in (x.r(Ops.ADD, axes), x.cast(dtypes.int32), x.detach(), x.r(Ops.MAX, axes).cast(dtypes.half)):
        if node is x:
            continue
        assert "_shape" in node.__dict__
        assert "_device" in node.__dict__
        assert node.__dict__["_shape"] == compute_shape(node)
        assert node.__dict__["_device"] == compute_device(node) == "CPU"
    kernel_level = UOp.variable("a", 0, 10).cast(dtypes.float32)  # no tensor shape below it: none recorded
    assert "_shape" not in kernel_level.__dict__


def test_a_nodes_buffer_is_read_once_and_kept_as_the_weak_map_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """UOp.buffer keeps what it read in the node: the next read (a replay reads ~150 a step) skips the weak map, and
    the Buffer lives as long as the node, as the map's entry does."""
    node = UOp.new_buffer("CPU", 4, dtypes.float32)
    view = node.reshape((2, 2))
    first = view.buffer
    assert node.buffer is first
    assert uop_ops.buffers.get(node) is first

    class Unread(dict):
        def get(self, *args: object) -> None:
            raise AssertionError("read the weak map again")

    monkeypatch.setattr(uop_ops, "buffers", Unread())
    assert view.buffer is first
    assert node.buffer is first
    monkeypatch.undo()
    kept = weakref.ref(first)
    del first, view, node
    gc.collect()
    assert kept() is None


def test_node_labels_live_on_the_node() -> None:
    node = UOp.new_buffer("CPU", 5, dtypes.float32).reshape((5, 1))
    label = (Metadata("relu", "here.py:1"),)
    assert node not in all_metadata
    assert all_metadata.get(node) is None
    assert all_metadata.get(node, ()) == ()
    all_metadata[node] = label
    assert node in all_metadata
    assert all_metadata[node] == label
    assert node.metadata == label
    del all_metadata[node]
    with pytest.raises(KeyError):
        _ = all_metadata[node]
