"""Op recipes (fusegrad/mixin/recipes.py): a composite method called again on inputs of the same structure rebuilds
its first call's graph. Checked: the rebuilt graph is the very graph the method builds (RECIPE_CACHE=2 runs both),
results and gradients match torch on new data every call, and calls whose graph depends on more than the structure
(values read, writes, random draws, training mode, float signs, sharing) are run, not reused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusegrad import Tensor, dtypes
from fusegrad.helpers import Context
from fusegrad.mixin import recipes, traced
from fusegrad.uop.ops import all_metadata

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _every_recording_gains(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a recording gains is timed (the method against a rebuild's cost): on a loaded machine or a fast one
    that decides differently, so these tests keep every recording, from fresh tables."""
    monkeypatch.setattr(recipes, "REBUILD_US", 0.0)
    monkeypatch.setattr(recipes, "NODE_US", 0.0)
    monkeypatch.setattr(recipes, "_recordings", {})
    monkeypatch.setattr(recipes, "_stats", {})


def _data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _hits(fn: Callable[[], Any]) -> int:
    before = recipes.counts["hit"]
    fn()
    return recipes.counts["hit"] - before


# (name, input shapes, fusegrad op, torch op): composite methods a training step calls
CASES: list[tuple[str, list[tuple[int, ...]], Callable[..., Tensor], Callable[..., torch.Tensor]]] = [
    ("layernorm", [(4, 6, 16)], lambda x: x.layernorm(), lambda x: F.layer_norm(x, (16,), eps=1e-5)),
    ("softmax", [(5, 9)], lambda x: x.softmax(-1), lambda x: x.softmax(-1)),
    ("log_softmax", [(5, 9)], lambda x: x.log_softmax(0), lambda x: x.log_softmax(0)),
    ("gelu", [(3, 7)], lambda x: x.gelu(), lambda x: F.gelu(x, approximate="tanh")),
    ("linear", [(4, 8), (5, 8), (5,)], lambda x, w, b: x.linear(w.T, b), lambda x, w, b: F.linear(x, w, b)),
    (
        "sdpa causal",
        [(2, 3, 8, 4), (2, 3, 8, 4), (2, 3, 8, 4)],
        lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    (
        "conv2d",
        [(2, 3, 9, 9), (4, 3, 3, 3)],
        lambda x, w: x.conv2d(w, padding=1, stride=2),
        lambda x, w: F.conv2d(x, w, padding=1, stride=2),
    ),
    ("getitem", [(6, 5, 4)], lambda x: x[1:5:2, 3, ::-1], lambda x: x[1:5:2, 3].flip(-1)),
    ("cat", [(2, 3), (4, 3)], lambda a, b: a.cat(b, dim=0), lambda a, b: torch.cat([a, b], 0)),
    ("max_pool", [(2, 2, 8, 8)], lambda x: x.max_pool2d(), lambda x: F.max_pool2d(x, 2)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rebuilt_graph_is_the_methods_and_gradients_match_torch(case: Any) -> None:
    _, shapes, ours, theirs = case
    with Context(RECIPE_CACHE=2):  # every reuse also runs the method: raises if the graphs differ
        hits = 0
        for _ in range(3):  # new data each call: a reuse must read this call's buffers
            data = [_data(*s) for s in shapes]
            xs = [Tensor(d, requires_grad=True) for d in data]
            before = recipes.counts["hit"]
            out = ours(*xs)
            hits += recipes.counts["hit"] - before
            (out * out).sum().backward()
            ts = [torch.tensor(d, requires_grad=True) for d in data]
            want = theirs(*ts)
            (want * want).sum().backward()
            np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
            for x, t in zip(xs, ts, strict=True):
                assert x.grad is not None
                assert t.grad is not None
                np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-3, atol=1e-4)
    assert hits >= 2  # the second and third calls reuse the first one's recording


def test_sparse_categorical_crossentropy_reused_with_new_targets() -> None:
    with Context(RECIPE_CACHE=2):
        for i in range(3):
            logits, labels = _data(8, 5), RNG.integers(0, 5, 8)
            x = Tensor(logits, requires_grad=True)
            loss = x.sparse_categorical_crossentropy(Tensor(labels.astype(np.int32)))
            loss.backward()
            t = torch.tensor(logits, requires_grad=True)
            want = F.cross_entropy(t, torch.tensor(labels))
            want.backward()
            assert abs(loss.item() - want.item()) < 1e-5, i
            assert x.grad is not None
            assert t.grad is not None
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)


def _layernorm(x: Tensor) -> Tensor:
    return x.layernorm()  # one call site: the key holds the caller's line (its label)


def _softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.softmax(axis)


def test_a_reuse_makes_no_python_op_calls() -> None:
    """The point of it: the method's inner ops don't run on a reuse (counted by patching an inner primitive)."""
    _layernorm(Tensor(_data(4, 16)))
    calls = 0
    real = Tensor.mean

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    try:
        Tensor.mean = counted  # type: ignore[method-assign]
        assert _hits(lambda: _layernorm(Tensor(_data(4, 16)))) == 1
        reused = calls
        with Context(RECIPE_CACHE=0):
            _layernorm(Tensor(_data(4, 16)))
    finally:
        Tensor.mean = real  # type: ignore[method-assign]
    assert reused == 0
    assert calls > 0


def test_other_structure_or_arguments_are_recorded_anew() -> None:
    a, b = Tensor(_data(4, 8)), Tensor(_data(4, 8))
    _softmax(a)
    assert _hits(lambda: _softmax(b)) == 1
    assert _hits(lambda: _softmax(b, 0)) == 0  # another axis
    assert _hits(lambda: _softmax(b + 1)) == 0  # a lazy input: another structure
    assert _hits(lambda: _softmax(Tensor(_data(4, 9)))) == 0  # another shape
    assert _hits(lambda: _softmax(Tensor(_data(4, 8), dtype=dtypes.float16))) == 0  # another dtype
    assert _hits(lambda: b.softmax(-1)) == 0  # another call site: another label


def test_float_arguments_keep_their_sign_and_type() -> None:
    x = Tensor([1.0, -2.0])
    assert x.mul(0.0).tolist() == [0.0, -0.0]
    assert [str(v) for v in x.mul(-0.0).tolist()] == ["-0.0", "0.0"]
    n = Tensor([3, 4])
    assert n.add(1).dtype == dtypes.int32
    assert n.add(1.0).dtype == dtypes.float32
    assert n.add(True).dtype == dtypes.int32


def test_sharing_between_inputs_is_part_of_the_key() -> None:
    a, b = Tensor(_data(3, 3)), Tensor(_data(3, 3))
    for _ in range(2):
        np.testing.assert_allclose(a.matmul(a).numpy(), a.numpy() @ a.numpy(), rtol=1e-5)
        np.testing.assert_allclose(a.matmul(b).numpy(), a.numpy() @ b.numpy(), rtol=1e-5)


def test_random_draws_are_never_reused() -> None:
    with Tensor.train():
        x = Tensor.ones(64)
        masks = [x.dropout(0.5).numpy() for _ in range(3)]
    assert not np.array_equal(masks[0], masks[1])
    assert not np.array_equal(masks[1], masks[2])
    with Tensor.test():  # training mode is part of the key: no dropout here
        np.testing.assert_array_equal(x.dropout(0.5).numpy(), np.ones(64, np.float32))


def test_writes_are_never_reused() -> None:
    for value in (1.0, 2.0, 3.0):
        t = Tensor.zeros(4).contiguous().realize()
        t[1:3] = value
        assert t.tolist() == [0.0, value, value, 0.0]


def test_methods_that_read_values_are_run_every_time() -> None:
    @traced
    def scaled_by_max(self: Tensor) -> Tensor:  # the graph holds the value read: a recording would keep the first
        return self * float(self.max().item())

    for top in (2.0, 5.0, 7.0):
        x = Tensor([1.0, top])
        assert scaled_by_max(x).tolist() == [top, top * top]


def test_outputs_carry_the_call_sites_label() -> None:
    _layernorm(Tensor(_data(4, 16)))
    before = recipes.counts["hit"]
    out = _layernorm(Tensor(_data(4, 16)))
    assert recipes.counts["hit"] == before + 1
    label = all_metadata.get(out.uop)
    assert label is not None
    assert label[0].name == "layernorm"


def test_a_method_whose_recordings_do_not_gain_is_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recipes, "REBUILD_US", 1e9)  # no method is slower than this: no recording gains
    for n in range(2, recipes.TRIES + 4):  # a new key each time: a recording each, until the method is off
        _softmax(Tensor(_data(n)))
    stats = next(s for f, s in recipes._stats.items() if f.__name__ == "softmax")
    assert stats.off == recipes.RETRY - 2  # two calls ran straight since
    monkeypatch.setattr(recipes, "REBUILD_US", 0.0)  # it would gain now, but the method stays off
    assert _hits(lambda: [_softmax(Tensor(_data(2))) for _ in range(2)]) == 0


def test_a_switched_off_method_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off for RETRY calls, then counted afresh: a test suite's or a warm-up's many shapes don't keep the recipes of
    the training loop that follows off."""
    monkeypatch.setattr(recipes, "RETRY", 5)
    monkeypatch.setattr(recipes, "REBUILD_US", 1e9)
    for n in range(2, recipes.TRIES + 2):
        _softmax(Tensor(_data(n)))
    monkeypatch.setattr(recipes, "REBUILD_US", 0.0)
    x = Tensor(_data(3, 4))
    assert _hits(lambda: [_softmax(x) for _ in range(5)]) == 0  # off
    assert _hits(lambda: [_softmax(x) for _ in range(3)]) == 2  # recorded, then reused


def test_a_method_called_with_new_values_each_time_is_switched_off() -> None:
    x = Tensor(_data(8))

    @traced
    def shifted_softmax(self: Tensor, shift: float) -> Tensor:
        return (self + shift).softmax()

    for i in range(recipes.MISSES + 2):
        np.testing.assert_allclose(shifted_softmax(x, 0.5 * i).numpy().sum(), 1.0, rtol=1e-5)
    stats = next(s for f, s in recipes._stats.items() if f.__name__ == "shifted_softmax")
    assert stats.off == recipes.RETRY - 2  # off after MISSES recordings without a reuse, two calls ran straight since


def test_off_runs_the_method() -> None:
    _softmax(Tensor(_data(4, 8)))
    with Context(RECIPE_CACHE=0):
        assert _hits(lambda: _softmax(Tensor(_data(4, 8)))) == 0
    assert _hits(lambda: _softmax(Tensor(_data(4, 8)))) == 1


def test_structure_ids() -> None:
    a, b = Tensor(_data(2, 3)), Tensor(_data(2, 3))
    sa, sb = recipes.structure_id(a.uop), recipes.structure_id(b.uop)
    assert sa is not None
    assert sa == sb
    assert recipes.structure_id((a + 1).uop) == recipes.structure_id((b + 1).uop) != sa
    assert recipes.structure_id((a + 1).uop) != recipes.structure_id((a + 2).uop)
