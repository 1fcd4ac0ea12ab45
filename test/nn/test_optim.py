"""fusegrad.nn.optim: five steps on a small MLP against torch's optimisers (or a numpy re-implementation where the
reference's formula differs from torch's), the step protocol (training mode, zero_grad, skipped tensors, lr writes),
argument errors, and the number of kernels one step runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fusegrad import Tensor
from fusegrad.dtype import dtypes
from fusegrad.engine.cache import cache_counts, schedule_cache
from fusegrad.engine.schedule import MAX_SIBLING_STORES
from fusegrad.helpers import Context, GlobalCounters
from fusegrad.nn import optim
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, all_metadata

STEPS = 5
RNG = np.random.default_rng(7)
# a 2-layer MLP (4 -> 8 -> 3) and a batch of 16 rows; float32 like the optimisers' state
INIT = [RNG.standard_normal(shape).astype(np.float32) for shape in [(4, 8), (8,), (8, 3), (3,)]]
X = RNG.standard_normal((16, 4)).astype(np.float32)
Y = RNG.standard_normal((16, 3)).astype(np.float32)


def mlp_loss(params: list[Any], x: Any, y: Any) -> Any:
    """Mean squared error of relu(x @ w1 + b1) @ w2 + b2; works for fusegrad and torch tensors alike."""
    w1, b1, w2, b2 = params
    return (((x @ w1 + b1).relu() @ w2 + b2 - y) ** 2).mean()


def mlp_steps(opt: optim.Optimizer, params: list[Tensor], x: Tensor, y: Tensor, steps: int) -> None:
    """`steps` plain training steps of the MLP (call inside Tensor.train())."""
    for _ in range(steps):
        opt.zero_grad()
        mlp_loss(params, x, y).backward()
        opt.step()


def train_fusegrad(make: Callable[[list[Tensor]], optim.Optimizer], lrs: list[float] | None = None) -> list[np.ndarray]:
    """STEPS optimiser steps from INIT; lrs[i], if given, is written into opt.lr before step i."""
    params = [Tensor(p.copy(), requires_grad=True) for p in INIT]
    opt = make(params)
    x, y = Tensor(X), Tensor(Y)
    with Tensor.train():
        for i in range(STEPS):
            if lrs is not None:
                opt.lr = lrs[i]
            opt.zero_grad()
            mlp_loss(params, x, y).backward()
            opt.step()
    return [p.numpy() for p in params]


def train_torch(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer]) -> list[np.ndarray]:
    params = [torch.tensor(p, requires_grad=True) for p in INIT]
    opt = make(params)
    for _ in range(STEPS):
        opt.zero_grad()
        mlp_loss(params, torch.tensor(X), torch.tensor(Y)).backward()
        opt.step()
    return [p.detach().numpy() for p in params]


def torch_grads(params: list[np.ndarray]) -> list[np.ndarray]:
    """The MLP loss's gradients at `params` (float64), for the numpy re-implementations."""
    ts = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params]
    mlp_loss(ts, torch.tensor(X, dtype=torch.float64), torch.tensor(Y, dtype=torch.float64)).backward()
    return [t.grad.numpy() for t in ts]  # type: ignore[union-attr]  # every param is used by the loss


def assert_close(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"parameter {i}")


# *** against torch, where the reference's formula is torch's ***

TORCH_CASES = {
    "sgd": (lambda p: optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    "sgd_momentum_wd": (
        lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1),
    ),
    "sgd_nesterov": (
        lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
    ),
    # classic momentum keeps lr * g in the buffer: the same steps as torch's while lr does not change
    "sgd_classic": (
        lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01, classic=True),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01),
    ),
    "adam": (lambda p: optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
    "adam_betas": (
        lambda p: optim.Adam(p, lr=0.02, b1=0.5, b2=0.9, eps=1e-6),
        lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.5, 0.9), eps=1e-6),
    ),
    "adamw": (
        lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1),
        lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    ),
    "adamw_defaults": (lambda p: optim.AdamW(p), lambda p: torch.optim.AdamW(p)),
    # fused: one update over all parameters concatenated, the same numbers
    "sgd_fused": (
        lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1, fused=True),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
    ),
    "adamw_fused": (
        lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1, fused=True),
        lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    ),
}


@pytest.mark.parametrize("case", TORCH_CASES)
def test_matches_torch(case: str) -> None:
    make_fusegrad, make_torch = TORCH_CASES[case]
    got = train_fusegrad(make_fusegrad)
    assert_close(got, train_torch(make_torch))
    assert not np.allclose(got[0], INIT[0]), "the weights did not move"


# *** against numpy re-implementations of the reference's formulas ***


def numpy_train(update: Callable[[int, list[np.ndarray], list[np.ndarray], dict[str, Any]], None]) -> list[np.ndarray]:
    """STEPS updates in float64: update(step, params, grads, state) changes params in place."""
    params = [p.astype(np.float64) for p in INIT]
    state: dict[str, Any] = {}
    for step in range(STEPS):
        update(step, params, torch_grads(params), state)
    return params


def numpy_lars(lr: float, momentum: float, wd: float, tcoef: float, nesterov: bool, classic: bool) -> list[np.ndarray]:
    def update(step: int, params: list[np.ndarray], grads: list[np.ndarray], state: dict[str, Any]) -> None:
        buffers = state.setdefault("b", [np.zeros_like(p) for p in params])
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            wn, gn = np.linalg.norm(p), np.linalg.norm(g)
            ratio = tcoef * wn / (gn + wd * wn) if wn > 0 and gn > 0 and tcoef else 1.0
            g = (g + wd * p) * (ratio * lr if classic else 1.0)
            buffers[i] = momentum * buffers[i] + g
            g = g + momentum * buffers[i] if nesterov else buffers[i]
            p -= g if classic else g * ratio * lr

    return numpy_train(update)


def numpy_lamb(lr: float, b1: float, b2: float, eps: float, wd: float, adam: bool) -> list[np.ndarray]:
    def update(step: int, params: list[np.ndarray], grads: list[np.ndarray], state: dict[str, Any]) -> None:
        m = state.setdefault("m", [np.zeros_like(p) for p in params])
        v = state.setdefault("v", [np.zeros_like(p) for p in params])
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            up = m[i] / (1 - b1 ** (step + 1)) / (np.sqrt(v[i] / (1 - b2 ** (step + 1))) + eps) + wd * p
            wn, un = np.linalg.norm(p), np.linalg.norm(up)
            ratio = wn / un if wn > 0 and un > 0 and not adam else 1.0
            p -= lr * ratio * up

    return numpy_train(update)


def numpy_newton_schulz(x: np.ndarray, steps: int, coefficients: tuple[float, ...]) -> np.ndarray:
    if x.shape[0] > x.shape[1]:
        return numpy_newton_schulz(x.T, steps, coefficients).T
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        x = sum(c * np.linalg.matrix_power(x @ x.T, k) @ x for k, c in enumerate(coefficients))
    return x


def numpy_muon(lr: float, momentum: float, wd: float, steps: int, coefficients: tuple[float, ...]) -> list[np.ndarray]:
    def update(step: int, params: list[np.ndarray], grads: list[np.ndarray], state: dict[str, Any]) -> None:
        buffers = state.setdefault("b", [np.zeros_like(p) for p in params])
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            buffers[i] = momentum * buffers[i] + g
            u = g + momentum * buffers[i]  # nesterov
            u = numpy_newton_schulz(u.reshape(u.shape[0], -1), steps, coefficients).reshape(u.shape)
            p -= lr * u + wd * lr * p

    return numpy_train(update)


def test_lamb_matches_numpy() -> None:
    got = train_fusegrad(lambda p: optim.LAMB(p, lr=0.05, weight_decay=0.1))
    assert_close(got, numpy_lamb(0.05, 0.9, 0.999, 1e-6, 0.1, adam=False), rtol=1e-4, atol=1e-5)


def test_lamb_adam_flag_is_adam() -> None:
    got = train_fusegrad(lambda p: optim.LAMB(p, lr=0.01, eps=1e-8, adam=True))
    assert_close(got, train_torch(lambda p: torch.optim.Adam(p, lr=0.01)))


@pytest.mark.parametrize(
    ("momentum", "nesterov", "classic", "tcoef"),
    [(0.9, False, True, 0.001), (0.9, True, False, 0.01), (0.0, False, True, 0.02)],
)
def test_lars_matches_numpy(momentum: float, nesterov: bool, classic: bool, tcoef: float) -> None:
    def make(p: list[Tensor]) -> optim.Optimizer:
        return optim.LARS(
            p, lr=0.5, momentum=momentum, weight_decay=1e-3, nesterov=nesterov, classic=classic, tcoef=tcoef
        )

    want = numpy_lars(0.5, momentum, 1e-3, tcoef, nesterov, classic)
    assert_close(train_fusegrad(make), want, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # five Newton-Schulz iterations per tensor: many kernels to compile on a cold cache
def test_muon_matches_numpy() -> None:
    got = train_fusegrad(lambda p: optim.Muon(p, lr=0.02))
    assert_close(got, numpy_muon(0.02, 0.95, 0.1, 5, (3.4445, -4.775, 2.0315)), rtol=1e-4, atol=1e-5)


def test_classic_momentum_with_changing_lr() -> None:
    """Classic momentum stores lr * g, so a new lr acts on new gradients only (unlike torch's form)."""
    lrs = [0.1, 0.1, 0.05, 0.02, 0.2]
    got = train_fusegrad(lambda p: optim.SGD(p, lr=0.1, momentum=0.9, classic=True), lrs)
    buffer: list[np.ndarray] = []
    params = [p.astype(np.float64) for p in INIT]
    for lr in lrs:
        grads = torch_grads(params)
        buffer = [0.9 * b + lr * g for b, g in zip(buffer or [0 * g for g in grads], grads, strict=True)]
        params = [p - b for p, b in zip(params, buffer, strict=True)]
    assert_close(got, params)


# *** the step protocol ***


def test_step_outside_training_raises() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    assert not Tensor.training
    with pytest.raises(RuntimeError, match=r"SGD\.step: optimisers only step in training mode"):
        opt.step()
    assert w.tolist() == [1.0, 2.0]


def test_step_without_gradient_raises() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = optim.Adam([w])
    with Tensor.train(), pytest.raises(RuntimeError, match=r"parameter 0 \(shape \(2,\)\) has no gradient"):
        opt.step()


def test_zero_grad_clears_grads() -> None:
    w, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
    opt = optim.SGD([w, b])
    (w * b).sum().backward()
    assert w.grad is not None
    assert b.grad is not None
    opt.zero_grad()
    assert (w.grad, b.grad) == (None, None)
    # the next backward starts from nothing instead of adding to the old gradient
    (w * b).sum().backward()
    assert w.grad is not None
    assert w.grad.tolist() == [3.0, 3.0]


def test_frozen_tensor_is_skipped_but_realized() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    frozen = Tensor([5.0, 6.0], requires_grad=False)
    unset = Tensor([7.0, 8.0])
    opt = optim.SGD([w, frozen, w, unset], lr=0.5)
    assert opt.params == [w, unset]
    assert opt.buffers == [frozen]
    assert unset.requires_grad is True, "a tensor given to an optimiser without a say becomes a parameter"
    with Tensor.train():
        (w * frozen + unset).sum().backward()
        assert frozen.grad is None
        opt.step()
    assert w.tolist() == [1.0 - 0.5 * 5.0, 2.0 - 0.5 * 6.0]
    assert unset.tolist() == [6.5, 7.5]
    assert frozen.tolist() == [5.0, 6.0]


def test_updates_keep_parameter_buffers() -> None:
    """Parameters and state are written in place: the same Buffer objects after every step (what TinyJit needs)."""
    w = Tensor.randn(3, 4, requires_grad=True).realize()
    opt = optim.Adam([w], lr=0.1)
    x = Tensor.randn(2, 3).realize()
    buffers = []
    with Tensor.train():
        for _ in range(3):
            opt.zero_grad()
            (x @ w).square().sum().backward()
            opt.step()
            buffers.append([t._buffer() for t in [w, opt.m[0], opt.v[0], opt.b1_t, opt.lr]])
    assert all(b is first for later in buffers[1:] for b, first in zip(later, buffers[0], strict=True))
    assert buffers[0][0] is w._buffer()


def test_lr_write_is_in_place() -> None:
    w = Tensor([1.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.5)
    lr_buffer = opt.lr._buffer()
    assert opt.lr.shape == (1,)
    assert opt.lr.tolist() == [0.5]
    opt.lr = 0.25
    assert opt.lr.tolist() == [0.25]
    assert opt.lr._buffer() is lr_buffer
    opt.lr = Tensor(0.125)
    assert opt.lr.tolist() == [0.125]
    assert opt.lr._buffer() is lr_buffer
    with Tensor.train():
        (w * 4.0).sum().backward()
        opt.step()
    assert w.tolist() == [0.5]
    with pytest.raises(ValueError, match=r"lr: invalid lr: got -1\.0, expected lr >= 0"):
        opt.lr = -1.0
    with pytest.raises(ValueError, match=r"got shape \(2,\), expected 1 element"):
        opt.lr = Tensor([1.0, 2.0])


def test_state_dict_names_match_the_reference() -> None:
    """get_state_dict(opt) walks attributes: the keys are the reference's, so checkpoints carry over."""
    from fusegrad.nn.state import get_state_dict

    w, b = Tensor.ones(2, 2, requires_grad=True), Tensor.ones(2, requires_grad=True)
    keys = ["params.0", "params.1", "lr", "b1_t", "b2_t", "m.0", "m.1", "v.0", "v.1"]
    assert list(get_state_dict(optim.Adam([w, b]))) == keys
    assert list(get_state_dict(optim.SGD([w, b], momentum=0.9))) == ["params.0", "params.1", "lr", "b.0", "b.1"]


def test_state_dict_round_trip_resumes_training() -> None:
    """Saving an Adam optimiser's state mid-run and loading it into a fresh one continues the same trajectory."""
    from fusegrad.nn.state import get_state_dict, load_state_dict

    def train(resume_at: int | None) -> tuple[list[float], float]:
        w = Tensor([1.0, -2.0, 3.0], requires_grad=True).realize()
        opt = optim.Adam([w], lr=0.1)
        with Tensor.train():
            for i in range(4):
                if i == resume_at:
                    saved = {k: Tensor(v.numpy()) for k, v in get_state_dict(opt).items()}
                    w = Tensor([0.0, 0.0, 0.0], requires_grad=True).realize()
                    opt = optim.Adam([w], lr=0.5)
                    load_state_dict(opt, saved)
                opt.zero_grad()
                (w * w * w).sum().backward()
                opt.step()
        return w.tolist(), opt.lr.item()

    assert train(resume_at=2) == train(resume_at=None)


def test_optimizer_group() -> None:
    a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
    group = optim.OptimizerGroup(optim.SGD([a], lr=0.5), optim.SGD([b], lr=0.25, momentum=0.9))
    assert group.params == [a, b]
    assert isinstance(group[1], optim.SGD)
    with Tensor.train():
        for _ in range(2):
            group.zero_grad()
            (a.sum() * 2.0 + b.sum()).backward()
            group.step()
    assert a.grad is not None
    np.testing.assert_allclose(a.numpy(), [1.0 - 2 * 0.5 * 2.0, 2.0 - 2 * 0.5 * 2.0])
    np.testing.assert_allclose(b.numpy(), [3.0 - 0.25 * 1.0 - 0.25 * 1.9], rtol=1e-6)
    group.lr = 0.125
    assert [o.lr.item() for o in group.optimizers] == [0.125, 0.125]
    with pytest.raises(AttributeError, match=r"OptimizerGroup\.lr: each member has its own lr"):
        _ = group.lr
    with pytest.raises(ValueError, match="OptimizerGroup: no optimiser"):
        optim.OptimizerGroup()


def test_half_parameters_keep_their_dtype() -> None:
    w = Tensor([1.0, -2.0], dtype=dtypes.float16, requires_grad=True)
    opt = optim.Adam([w], lr=0.5)
    with Tensor.train():
        (w * w).sum().backward()
        opt.step()
    assert w.dtype == dtypes.float16
    assert (opt.m[0].dtype, opt.lr.dtype) == (dtypes.float32, dtypes.float32), "state and lr stay float32"
    np.testing.assert_allclose(w.numpy().astype(np.float32), [0.5, -1.5], rtol=1e-3)


# *** argument errors ***


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda p: optim.SGD(p, lr=-0.1), ValueError, r"SGD: invalid lr: got -0\.1, expected lr >= 0"),
        (lambda p: optim.SGD(p, lr=float("nan")), ValueError, r"SGD: invalid lr: got nan"),
        (lambda p: optim.SGD(p, momentum=-1), ValueError, r"SGD: invalid momentum: got -1, expected momentum >= 0"),
        (lambda p: optim.SGD(p, weight_decay=-0.5), ValueError, r"invalid weight_decay: got -0\.5"),
        (lambda p: optim.SGD(p, nesterov=True), ValueError, r"SGD: nesterov needs momentum: got momentum=0\.0"),
        (lambda p: optim.Adam(p, b1=1.0), ValueError, r"Adam: invalid b1: got 1\.0, expected 0 <= b1 < 1"),
        (lambda p: optim.AdamW(p, b2=-0.1), ValueError, r"AdamW: invalid b2: got -0\.1, expected 0 <= b2 < 1"),
        (lambda p: optim.Adam(p, eps=-1e-8), ValueError, r"Adam: invalid eps: got -1e-08, expected eps >= 0"),
        (lambda p: optim.LAMB(p, weight_decay=-1), ValueError, r"LAMB: invalid weight_decay: got -1"),
        (lambda p: optim.LARS(p, tcoef=-1), ValueError, r"LARS: invalid tcoef: got -1"),
        (lambda p: optim.Muon(p, ns_steps=-2), ValueError, r"Muon: invalid ns_steps: got -2"),
        (lambda p: optim.Muon(p, ns_steps=2.5), TypeError, r"Muon: ns_steps must be an int: got float"),
        (lambda p: optim.Muon(p, ns_coefficients=()), ValueError, r"Muon: invalid ns_coefficients: got \(\)"),
        (lambda p: optim.Adam(p, lr="0.1"), TypeError, r"Adam: lr must be a Python number: got str"),
        (lambda p: optim.SGD([]), ValueError, r"SGD: no parameter to optimise: got 0 tensors"),
        (lambda p: optim.SGD([Tensor([1.0], requires_grad=False)]), ValueError, r"no parameter to optimise"),
        (lambda p: optim.SGD([np.ones(3)]), TypeError, r"SGD: params\[0\] is not a Tensor: got ndarray"),
        (lambda p: optim.SGD([Tensor([1, 2])]), TypeError, r"SGD: parameter 0 is not a float tensor: got dtypes\.int"),
        (lambda p: optim.Muon([Tensor(1.0)]), ValueError, r"Muon: Newton-Schulz needs parameters with a dimension"),
        (lambda p: optim.LAMB(p, fused=True), ValueError, r"LAMB: fused would share one trust ratio"),
        (lambda p: optim.LARS(p, fused=True), ValueError, r"LARS: fused would share .*got tcoef=0\.001"),
    ],
)
def test_bad_arguments(make: Callable[[list[Tensor]], Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make([Tensor([1.0, 2.0], requires_grad=True)])


def test_mis_shaped_gradient_raises() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([w])
    w.grad = Tensor([1.0, 2.0, 3.0])
    with (
        Tensor.train(),
        pytest.raises(ValueError, match=r"gradient shape differs from parameter 0's: got \(3,\), expected \(2,\)"),
    ):
        opt.step()


# *** kernels per step ***


MERGED = MAX_SIBLING_STORES  # kernels over one parameter shape that read one buffer run in groups of this many


@pytest.mark.parametrize(
    ("make", "kernels", "merged"),
    [
        (lambda p: optim.SGD(p, lr=0.1), lambda n: n, lambda n: n),  # one fused kernel per parameter: w -= lr * g
        (lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda n: 2 * n, lambda n: 2 * n),  # + the momentum buffer
        # m, v and w per parameter; b1^t and b2^t. Merged: m and v both read the gradient, one kernel
        (lambda p: optim.Adam(p), lambda n: 3 * n + 2, lambda n: 2 * n + 2),
        # fused: one buffer per state in all, plus the concatenated update, then one write per parameter. Merged: the
        # writes all read the concatenated update, in groups
        (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, fused=True), lambda n: n + 2, lambda n: 2 + -(-n // MERGED)),
        (lambda p: optim.Adam(p, fused=True), lambda n: n + 5, lambda n: 5 + -(-n // MERGED)),
    ],
)
def test_kernels_per_step(
    make: Callable[[list[Tensor]], optim.Optimizer], kernels: Callable[[int], int], merged: Callable[[int], int]
) -> None:
    """With the gradients realized, a step writes each parameter and state buffer once: one kernel each, or fewer
    where sibling kernels merge (FUSE_SIBLINGS, schedule/siblings.py)."""
    n = 6
    for fuse, expected in ((0, kernels(n)), (1, merged(n))):
        params = [Tensor.randn(5, 3, requires_grad=True).realize() for _ in range(n)]
        opt = make(params)
        with Tensor.train(), Context(FUSE_SIBLINGS=fuse):
            for _ in range(2):  # the second step runs on buffers that the first one created
                opt.zero_grad()
                sum((p * p).sum() for p in params).backward()  # type: ignore[union-attr]  # a sum of Tensors
                Tensor.realize(*[p.grad for p in params if p.grad is not None])
                GlobalCounters.reset()
                opt.step()
                assert GlobalCounters.kernel_count == expected


def test_jitted_step_sees_new_lr() -> None:
    """A TinyJit replay reads lr from its buffer: writing opt.lr between calls changes the replayed update."""
    from fusegrad.engine.jit import TinyJit

    rng = np.random.default_rng(3)
    w_init = rng.standard_normal((6, 2)).astype(np.float32)
    batches = [(rng.standard_normal((8, 6), np.float32), rng.standard_normal((8, 2), np.float32)) for _ in range(5)]
    lrs = [0.1, 0.05, 0.2, 0.01, 0.1]
    w = Tensor(w_init.copy(), requires_grad=True).realize()
    opt = optim.Adam([w], lr=0.1)

    @TinyJit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.realize()

    tw = torch.tensor(w_init, requires_grad=True)
    topt = torch.optim.Adam([tw], lr=0.1)
    with Tensor.train():
        for lr, (x_np, y_np) in zip(lrs, batches, strict=True):
            opt.lr = lr
            train_step(Tensor(x_np).realize(), Tensor(y_np).realize())
            topt.param_groups[0]["lr"] = lr
            topt.zero_grad()
            ((torch.tensor(x_np) @ tw - torch.tensor(y_np)) ** 2).mean().backward()
            topt.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # allreduce and per-device kernels to compile
def test_data_parallel_step_matches_torch() -> None:
    """Weights replicated on two devices and a batch split across them: lr and state follow the weights' devices."""
    devices = ("CPU:0", "CPU:1")
    w_np, x_np = INIT[2], RNG.standard_normal((8, 8)).astype(np.float32)
    w = Tensor(w_np.copy(), requires_grad=True).shard(devices).realize()
    x = Tensor(x_np).shard(devices, axis=0).realize()
    opt = optim.Adam([w], lr=0.1)
    tw = torch.tensor(w_np, requires_grad=True)
    topt = torch.optim.Adam([tw], lr=0.1)
    with Tensor.train():
        for _ in range(3):
            opt.zero_grad()
            (x @ w).square().mean().backward()
            opt.step()
            topt.zero_grad()
            (torch.tensor(x_np) @ tw).square().mean().backward()
            topt.step()
    assert w.device == opt.lr.device == opt.m[0].device
    assert isinstance(w.device, tuple)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)


# *** rebuilt steps: after one step built op by op, a step of the same structure is rebuilt from a recording ***

REBUILT_CASES = {
    "adam": lambda ps: optim.Adam(ps, lr=0.01),
    "adamw": lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    "lamb": lambda ps: optim.LAMB(ps, lr=0.01),
    "sgd_nesterov": lambda ps: optim.SGD(ps, lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.01),
    "lars": lambda ps: optim.LARS(ps, lr=0.01),
    "muon": lambda ps: optim.Muon(ps, lr=0.01),
}


def _train_labelled(
    make: Callable[[list[Tensor]], optim.Optimizer], rebuild: bool, change: Callable[..., None] | None = None
) -> tuple[list[np.ndarray], list[Any], bool]:
    """STEPS steps from INIT; without `rebuild` the recordings are dropped before each step (every step built op by
    op). Returns the parameters, the labels of the last step's written graph, and whether that step was rebuilt."""
    params = [Tensor(p.copy(), requires_grad=True) for p in INIT]
    opt = make(params)
    x, y = Tensor(X), Tensor(Y)
    labels: list[Any] = []
    with Tensor.train():
        for i in range(STEPS):
            if not rebuild:
                optim._recordings.clear()
            if change is not None:
                change(opt, i)
            opt.zero_grad()
            mlp_loss(params, x, y).backward()
            recording = optim._recordings.get(opt)
            written = opt.schedule_step()
            labels = [all_metadata.get(u) for u in UOp.sink(*[t.uop for t in written]).toposort()]
            Tensor.realize(*written)
    rebuilt = recording is not None and recording.recipe is not None
    return [p.numpy() for p in params], labels, rebuilt


@pytest.mark.parametrize("case", REBUILT_CASES)
def test_rebuilt_step_matches_built_step(case: str) -> None:
    """Bit for bit the same parameters, and the same labels (kernel names) on the rebuilt graph."""
    rebuilt, rebuilt_labels, was_rebuilt = _train_labelled(REBUILT_CASES[case], rebuild=True)
    built, built_labels, was_built = _train_labelled(REBUILT_CASES[case], rebuild=False)
    assert was_rebuilt
    assert not was_built
    for a, b in zip(rebuilt, built, strict=True):
        np.testing.assert_array_equal(a, b)
    assert rebuilt_labels == built_labels
    assert any(label is not None for label in rebuilt_labels)


def test_rebuilt_step_sees_changed_hyperparameters_and_lr() -> None:
    """A hyperparameter set between steps is part of the recording's key; an lr write goes into the lr buffer."""

    def change(opt: optim.Optimizer, i: int) -> None:
        if i == 3:
            opt.b1 = 0.5  # type: ignore[attr-defined]  # Adam's first-moment decay
        if i == 4:
            opt.lr = 0.05

    rebuilt, _, _ = _train_labelled(REBUILT_CASES["adam"], rebuild=True, change=change)
    built, _, _ = _train_labelled(REBUILT_CASES["adam"], rebuild=False, change=change)
    unchanged, _, _ = _train_labelled(REBUILT_CASES["adam"], rebuild=False)
    for a, b in zip(rebuilt, built, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(rebuilt[0], unchanged[0])


def test_rebuilt_step_updates_views_of_parameters() -> None:
    """A tensor viewing a parameter reads the parameter after a rebuilt step's write, as after a built one."""
    params = [Tensor(p.copy(), requires_grad=True) for p in INIT]
    opt = optim.Adam(params, lr=0.01)
    x, y = Tensor(X), Tensor(Y)
    with Tensor.train():
        for _ in range(STEPS):
            view = params[0].reshape(-1)
            opt.zero_grad()
            mlp_loss(params, x, y).backward()
            opt.step()
            np.testing.assert_array_equal(view.numpy(), params[0].numpy().reshape(-1))
    assert optim._recordings[opt].recipe is not None


def test_step_with_pending_write_is_built() -> None:
    """A parameter with a pending (unrealized) write is no realized buffer: that step is built op by op."""
    params = [Tensor(p.copy(), requires_grad=True) for p in INIT]
    opt = optim.SGD(params, lr=0.1)
    x, y = Tensor(X), Tensor(Y)
    with Tensor.train():
        mlp_steps(opt, params, x, y, 3)
        params[1].assign(params[1] * 0)  # pending: the step reads the zeroed bias
        opt.zero_grad()
        mlp_loss(params, x, y).backward()
        grad = params[1].grad.numpy()
        opt.step()
    np.testing.assert_allclose(params[1].numpy(), -0.1 * grad, rtol=1e-6)


# *** rerun steps: a rebuilt step's realize is remembered, and the next step of its key reruns its schedule ***


def _train_stepping(
    make: Callable[[list[Tensor]], optim.Optimizer], rerun: bool, buffer: Tensor | None = None
) -> tuple[list[np.ndarray], int]:
    """STEPS + 2 steps through `opt.step()`; without `rerun` every step is built op by op. Returns the parameters
    and how many steps reran a remembered realize (a step whose recording remembered one before it ran)."""
    params = [Tensor(p.copy(), requires_grad=True) for p in INIT]
    opt = make([*params, *([buffer] if buffer is not None else [])])
    x, y = Tensor(X), Tensor(Y)
    reran = 0
    with Tensor.train():
        for _ in range(STEPS + 2):
            if not rerun:
                optim._recordings.clear()
            opt.zero_grad()
            mlp_loss(params, x, y).backward()
            Tensor.realize(*[p.grad for p in params if p.grad is not None])  # the step's own realize is counted
            recording = optim._recordings.get(opt)
            remembered = recording is not None and bool(recording.realized)
            hits = cache_counts["hit"]
            opt.step()
            reran += remembered and cache_counts["hit"] == hits + 1 and optim._recordings[opt] is recording
    return [p.numpy() for p in params], reran


@pytest.mark.parametrize("case", REBUILT_CASES)
def test_rerun_step_matches_built_step(case: str) -> None:
    """Bit for bit the parameters of steps built op by op, and every step after the first rebuilt one reruns."""
    rerun, reran = _train_stepping(REBUILT_CASES[case], rerun=True)
    built, built_reran = _train_stepping(REBUILT_CASES[case], rerun=False)
    # steps 1-2 built (the first reads the state's lazy zeros), step 3 rebuilt and remembered, steps 4-7 rerun
    assert reran == STEPS - 1
    assert built_reran == 0
    for a, b in zip(rerun, built, strict=True):
        np.testing.assert_array_equal(a, b)


def test_rerun_step_realizes_buffers() -> None:
    """A step with a buffer (requires_grad=False) reruns while the buffer is realized; a pending write into it makes
    the next step build again, and that step realizes the write."""
    buffer = Tensor([1.0, 2.0], requires_grad=False).realize()
    params, reran = _train_stepping(REBUILT_CASES["adam"], rerun=True, buffer=buffer)
    built, _ = _train_stepping(REBUILT_CASES["adam"], rerun=False, buffer=Tensor([1.0, 2.0], requires_grad=False))
    assert reran == STEPS - 1
    for a, b in zip(params, built, strict=True):
        np.testing.assert_array_equal(a, b)
    weights = [Tensor(p.copy(), requires_grad=True) for p in INIT]
    opt = optim.Adam([*weights, buffer], lr=0.01)
    with Tensor.train():
        for i in range(4):
            if i == 3:
                buffer.assign(buffer + 1)  # pending: no realized buffer, so the step can't rerun
            opt.zero_grad()
            mlp_loss(weights, Tensor(X), Tensor(Y)).backward()
            opt.step()
    assert buffer.uop.base.op is Ops.BUFFER
    assert buffer.tolist() == [2.0, 3.0]


def test_rerun_step_schedules_again_after_cache_clear() -> None:
    """A cleared schedule cache is no stale schedule to rerun: the step is rebuilt and scheduled (a miss)."""
    params = [Tensor(p.copy(), requires_grad=True) for p in INIT]
    opt = optim.Adam(params, lr=0.01)
    x, y = Tensor(X), Tensor(Y)
    with Tensor.train():
        mlp_steps(opt, params, x, y, 3)
        opt.zero_grad()
        mlp_loss(params, x, y).backward()
        Tensor.realize(*[p.grad for p in params if p.grad is not None])
        schedule_cache.clear()
        misses = cache_counts["miss"]
        opt.step()
        assert cache_counts["miss"] == misses + 1
        assert optim._recordings[opt].realized  # remembered again for the next step
