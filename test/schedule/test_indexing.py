"""Reshape indices group by group (schedule/indexing.py): the same source element as the flat computation, and no
div/mod where an axis only gains or loses size-1 neighbours or splits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.schedule.indexing import Index, _source_index, _unflatten, idx_const, linearize_index
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp

Case = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def _reshape_index(in_shape: tuple[int, ...], shape: tuple[int, ...], idx: Index) -> Index:
    return _source_index(Ops.RESHAPE, shape, in_shape, shape, idx, None)[0]


def _shape_of(draw: st.DrawFn, factors: list[int]) -> tuple[int, ...]:
    """A shape whose sizes multiply the given factors in order, with some size-1 axes mixed in."""
    shape: list[int] = []
    for f in factors:
        if shape and draw(st.booleans()):
            shape[-1] *= f
        else:
            shape.append(f)
        if draw(st.integers(0, 4)) == 0:
            shape.append(1)
    return tuple(shape)


@st.composite
def reshapes(draw: st.DrawFn) -> Case:
    factors = draw(st.lists(st.sampled_from([2, 3, 5]), min_size=1, max_size=6))
    in_shape, shape = _shape_of(draw, factors), _shape_of(draw, factors)
    return in_shape, shape, tuple(draw(st.integers(0, s - 1)) for s in shape)


@settings(max_examples=200, deadline=None)
@given(reshapes())
def test_reshape_index_equals_the_flat_one(case: Case) -> None:
    in_shape, shape, position = case
    idx = tuple(idx_const(i) for i in position)
    grouped = _reshape_index(in_shape, shape, idx)
    flat = _unflatten(linearize_index(idx, shape), in_shape)
    assert [i.simplify().arg for i in grouped] == [i.simplify().arg for i in flat]


def test_unit_axes_and_splits_need_no_div_or_mod() -> None:
    i, j = UOp.range(idx_const(6), 0, AxisType.LOOP), UOp.range(idx_const(8), 1, AxisType.LOOP)
    zero = idx_const(0)
    # a window's masked (possibly negative) index i - 1 stays in its own axis instead of carrying into the next
    first, second = _reshape_index((6, 8), (6, 1, 8, 1), (i - 1, zero, j, zero))
    assert second is j
    assert {u.op for u in first.toposort()} <= {Ops.ADD, Ops.RANGE, Ops.CONST}
    split = _reshape_index((6, 8), (2, 3, 8), (i % 2, i % 3, j))
    assert split[1] is j
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in split[0].toposort() if u not in ((i % 2), (i % 3)))


def test_symbolic_axes_matched_one_to_one_need_no_div_or_mod() -> None:
    """A slice to a bound variable, then a reshape that only drops unit axes or splits/merges concrete ones: the
    variable's axis keeps its index (it used to go through a flat index and back: `(x / (i*48)) % 6` chains)."""
    n = UOp.variable("n", 1, 16)
    a, b, c = (UOp.range(idx_const(s), k, AxisType.LOOP) for k, s in enumerate((6, 16, 48)))
    src = _reshape_index((1, 6, n, 48), (6, n, 48), (a, b, c))
    assert src[1:] == (a, b, c)
    merged = _reshape_index((1, n, 6, 48), (1, n, 288), (idx_const(0), b, a * 48 + c))
    assert merged[1] is b
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in merged[1].toposort())


def test_symbolic_slice_values() -> None:
    """The sliced keys' scores at a bound length equal numpy's on the first n rows."""
    import numpy as np

    from fusegrad import Tensor

    rng = np.random.default_rng(0)
    cache, q = rng.standard_normal((2, 1, 6, 16, 48)).astype(np.float32), rng.standard_normal((1, 6, 4, 48))
    keys = Tensor(cache).contiguous().realize()[0, :, :, : UOp.variable("i", 1, 16).bind(5), :]
    got = (Tensor(q.astype(np.float32)) @ keys.transpose(-1, -2)).sum(-1).numpy()
    np.testing.assert_allclose(got, (q @ cache[0, :, :, :5].transpose(0, 1, 3, 2)).sum(-1), rtol=1e-4, atol=1e-4)
