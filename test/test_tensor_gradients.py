"""Tensor.gradient's recipes (tensor.py `_gradients`): a graph of a structure differentiated before gets its gradient
graph rebuilt from the first one's recipe; the rebuilt nodes must be the very nodes compute_gradient builds, labels
included, and anything the recipe can't express is differentiated every time."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad import tensor as tensor_module
from fusegrad.gradient import compute_gradient
from fusegrad.helpers import Context
from fusegrad.uop.ops import UOp, all_metadata


@pytest.fixture(autouse=True)
def _fresh_recipes() -> Iterator[None]:
    tensor_module.gradient_recipes.clear()
    yield
    tensor_module.gradient_recipes.clear()


def _loss(w: Tensor, b: Tensor, x: Tensor) -> Tensor:
    h = (x @ w + b).gelu()
    return (h.softmax(-1) * h.exp()).sum() / 3 + h.max()


def _params() -> tuple[Tensor, Tensor, Tensor]:
    w = Tensor.randn(5, 4, requires_grad=True).realize()
    b = Tensor.randn(4, requires_grad=True).realize()
    return w, b, Tensor.randn(3, 5).realize()


def _labels(u: UOp) -> list[object]:
    return [all_metadata.get(n) for n in u.toposort()]


def test_rebuilt_gradients_are_the_nodes_compute_gradient_builds() -> None:
    w, b, x = _params()
    _loss(w, b, x).gradient(w, b)  # recorded
    assert len(tensor_module.gradient_recipes) == 1
    w2, b2, x2 = _params()
    loss = _loss(w2, b2, x2)
    rebuilt = loss.gradient(w2, b2)
    (entry,) = tensor_module.gradient_recipes.values()
    assert entry[1] is not None
    root_grad = loss.ones_like(requires_grad=False).uop
    built = compute_gradient(loss.uop, root_grad, {w2.uop, b2.uop})
    assert rebuilt[0].uop is built[w2.uop]
    assert rebuilt[1].uop is built[b2.uop]
    assert any(label is not None for label in _labels(rebuilt[0].uop))


def test_rebuilt_gradients_keep_labels_and_values() -> None:
    """Values against a fresh differentiation, and the same labels as one built when nothing is recorded."""
    w, b, x = _params()
    for _ in range(2):
        _loss(w, b, x).gradient(w, b)
    rebuilt = [g.numpy() for g in _loss(w, b, x).gradient(w, b)]
    rebuilt_labels = [_labels(g.uop) for g in _loss(w, b, x).gradient(w, b)]
    tensor_module.gradient_recipes.clear()
    with Context(TRACK_MATCH_STATS=2):  # every gradient built by the rules
        built_grads = _loss(w, b, x).gradient(w, b)
        built = [g.numpy() for g in built_grads]
        built_labels = [_labels(g.uop) for g in built_grads]
    assert not tensor_module.gradient_recipes
    for a, c in zip(rebuilt, built, strict=True):
        np.testing.assert_array_equal(a, c)
    assert rebuilt_labels == built_labels


def test_other_targets_or_structure_are_recorded_apart() -> None:
    w, b, x = _params()
    _loss(w, b, x).gradient(w, b)
    _loss(w, b, x).gradient(w)  # other targets
    _loss(w, b, Tensor.randn(7, 5).realize()).gradient(w, b)  # other shapes
    assert len(tensor_module.gradient_recipes) == 3


def test_backward_twice_accumulates_through_rebuilt_gradients() -> None:
    w, b, x = _params()
    expected = [g.numpy() * 2 for g in _loss(w, b, x).gradient(w, b)]
    _loss(w, b, x).backward()
    _loss(w, b, x).backward()  # rebuilt, added to .grad
    np.testing.assert_allclose(w.grad.numpy(), expected[0], rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), expected[1], rtol=1e-6)
