"""kernelize.py's prepare pass on assigns: a value that reads its target only through the target itself is written in
place, whatever chain of views the target is (a split reduce's gradient is RESHAPE(RESHAPE(BUFFER))); one that reads
the target through another view is computed into a fresh buffer first (in place, it would read overwritten values)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fusegrad import Tensor
from test.shared import count_kernels

N = 24


def _chained_target(a: np.ndarray) -> Tensor:
    """A realized (N, N) tensor whose node is RESHAPE(RESHAPE(BUFFER)), as a conv weight's gradient is."""
    t = Tensor(a.reshape(1, N, N)).realize().reshape(N, N)
    assert [t.uop.op.name, t.uop.src[0].op.name, t.uop.src[0].src[0].op.name] == ["RESHAPE", "RESHAPE", "BUFFER"]
    return t


Update = Callable[[Tensor], Tensor]
CASES: list[tuple[str, Update, Callable[[np.ndarray], np.ndarray], int]] = [
    ("t * 2 + 1", lambda t: t * 2 + 1, lambda a: a * 2 + 1, 1),  # was 2: computed aside, then copied in
    ("t + rows", lambda t: t + t.sum(1, keepdim=True), lambda a: a + a.sum(1, keepdims=True), 1),  # was 2
    ("t + t.T", lambda t: t + t.T, lambda a: a + a.T, 2),  # reads (j, i) while writing (i, j): aside, then copied
    ("t + flip", lambda t: t + t.flip(0), lambda a: a + a[::-1], 2),
    ("t @ t", lambda t: t @ t, lambda a: a @ a, 2),
]


@pytest.mark.parametrize(("name", "update", "expected", "kernels"), CASES, ids=[c[0] for c in CASES])
def test_assign_to_a_chain_of_views(
    name: str, update: Update, expected: Callable[[np.ndarray], np.ndarray], kernels: int
) -> None:
    a = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32)
    t = _chained_target(a)
    buffer = t.uop.base.buffer
    t.assign(update(t))
    assert count_kernels(t) == kernels, name
    t.realize()
    assert t.uop.base.buffer is buffer, "assign wrote to a new buffer"
    np.testing.assert_allclose(t.numpy(), expected(a.astype(np.float64)), rtol=1e-5, atol=1e-4)


def test_accumulated_conv_weight_gradient_matches_torch() -> None:
    """Two backward passes accumulate into the weight's gradient (its partial sums over images summed in place)."""
    import torch

    rng = np.random.default_rng(1)
    xs, ws, gs = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8, 12, 12), (8, 8, 3, 3), (4, 8, 12, 12)))
    x, w, g = Tensor(xs, requires_grad=True), Tensor(ws, requires_grad=True), Tensor(gs)
    xt, wt, gt = (torch.tensor(v.astype(np.float64), requires_grad=v is not gs) for v in (xs, ws, gs))
    for _ in range(2):
        (x.conv2d(w, padding=1) * g).sum().backward()
        Tensor.realize(x.grad, w.grad)
        (torch.nn.functional.conv2d(xt, wt, padding=1) * gt).sum().backward()
    for ours, theirs in ((w.grad, wt.grad), (x.grad, xt.grad)):
        assert ours is not None
        assert theirs is not None
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-3)
