"""Random chains of movement ops, computed through the scheduler's index arithmetic, must match numpy exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor


def apply(draw: Any, t: Tensor, a: np.ndarray) -> tuple[Tensor, np.ndarray]:
    """One random movement op applied to both the tensor and the array."""
    kind = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip", "add"]))
    if kind == "reshape":
        flat = a.size
        divisors = [d for d in range(1, flat + 1) if flat % d == 0]
        d = draw(st.sampled_from(divisors))
        shape = (d, flat // d)
        return t.reshape(shape), a.reshape(shape)
    if kind == "permute" and a.ndim > 1:
        order = draw(st.permutations(list(range(a.ndim))))
        return t.permute(order), a.transpose(order)
    if kind == "expand" and 1 in a.shape:
        shape = tuple(3 if s == 1 else s for s in a.shape)
        return t.expand(shape), np.broadcast_to(a, shape)
    if kind == "pad":
        pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in a.shape]
        return t.pad(pads), np.pad(a, pads)
    if kind == "shrink":
        bounds = []
        for s in a.shape:
            lo = draw(st.integers(0, s - 1)) if s > 1 else 0
            bounds.append((lo, draw(st.integers(lo + 1, s)) if s > 0 else 0))
        return t.shrink(bounds), a[tuple(slice(lo, hi) for lo, hi in bounds)]
    if kind == "flip":
        axis = draw(st.integers(0, a.ndim - 1))
        return t.flip(axis), np.flip(a, axis)
    return t + 1, a + 1  # an elementwise op in the middle: fused, read through the views around it


@st.composite
def chains(draw: Any) -> tuple[Tensor, np.ndarray]:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    device = draw(st.sampled_from(["CPU", "PYTHON"]))
    t = Tensor(a, device=device)
    for _ in range(draw(st.integers(1, 5))):
        t, a = apply(draw, t, a)
    return t, a


@settings(max_examples=60, deadline=None)
@given(chains())
def test_movement_chain_matches_numpy(case: tuple[Tensor, np.ndarray]) -> None:
    t, a = case
    np.testing.assert_array_equal(t.numpy(), a)


@settings(max_examples=30, deadline=None)
@given(chains())
def test_movement_chain_then_reduce_matches_numpy(case: tuple[Tensor, np.ndarray]) -> None:
    t, a = case
    np.testing.assert_allclose(t.sum(axis=0).numpy(), a.sum(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(t.max().numpy(), a.max())
