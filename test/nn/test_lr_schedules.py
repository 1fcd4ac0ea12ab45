"""fusegrad.nn.lr_schedules: each schedule against torch's scheduler (or its formula written out), argument errors, and
a training loop whose per-step lr writes reach the compiled update (same weights as torch's SGD + scheduler)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fusegrad import Tensor
from fusegrad.nn import lr_schedules, optim


def torch_lrs(base_lr: float, make: Callable[[torch.optim.Optimizer], Any], steps: int) -> list[float]:
    """The lr torch's scheduler gives at steps 0 .. steps-1."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base_lr)
    scheduler = make(opt)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return lrs


def test_step_decay_matches_torch() -> None:
    got = [lr_schedules.step_decay(s, 0.3, step_size=4, gamma=0.5) for s in range(13)]
    want = torch_lrs(0.3, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.5), 13)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_linear_warmup_matches_torch() -> None:
    got = [lr_schedules.linear_warmup(s, warmup=5, lr_max=0.2, lr_start=0.02) for s in range(9)]
    make = lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5)  # noqa: E731
    np.testing.assert_allclose(got, torch_lrs(0.2, make, 9), rtol=1e-12)
    assert lr_schedules.linear_warmup(3, warmup=0, lr_max=0.5) == 0.5


@pytest.mark.parametrize(("total", "lr_min"), [(10, 0.0), (7, 0.01)])
def test_cosine_without_warmup_matches_torch(total: int, lr_min: float) -> None:
    got = [
        lr_schedules.cosine_with_warmup(s, total=total, warmup=0, lr_max=0.1, lr_min=lr_min) for s in range(total + 1)
    ]
    make = lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total, eta_min=lr_min)  # noqa: E731
    np.testing.assert_allclose(got, torch_lrs(0.1, make, total + 1), rtol=1e-9, atol=1e-12)


def test_cosine_with_warmup_values() -> None:
    lrs = [lr_schedules.cosine_with_warmup(s, total=12, warmup=4, lr_max=1.0, lr_min=0.2) for s in range(15)]
    np.testing.assert_allclose(lrs[:5], [0.0, 0.25, 0.5, 0.75, 1.0])
    # halfway through the 8 cosine steps: the midpoint of lr_max and lr_min
    assert lrs[8] == pytest.approx(0.6)
    assert lrs[6] == pytest.approx(0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert lrs[12:] == [pytest.approx(0.2)] * 3, "at and past total: lr_min"
    assert all(a >= b for a, b in itertools.pairwise(lrs[4:])), "non-increasing after warmup"


@pytest.mark.parametrize(
    ("total", "pct_start", "div_factor", "final_div_factor"), [(20, 0.3, 25.0, 1e4), (13, 0.5, 10.0, 100.0)]
)
def test_one_cycle_matches_torch(total: int, pct_start: float, div_factor: float, final_div_factor: float) -> None:
    kwargs = {"pct_start": pct_start, "div_factor": div_factor, "final_div_factor": final_div_factor}
    got = [lr_schedules.one_cycle(s, total, 0.5, **kwargs) for s in range(total)]

    def make(o: torch.optim.Optimizer) -> Any:
        return torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=total, cycle_momentum=False, **kwargs)

    np.testing.assert_allclose(got, torch_lrs(0.5, make, total), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: lr_schedules.linear_warmup(-1, 5, 0.1), ValueError, r"linear_warmup: invalid step: got -1"),
        (lambda: lr_schedules.linear_warmup(1.5, 5, 0.1), TypeError, r"step must be an int: got float"),
        (lambda: lr_schedules.linear_warmup(1, -5, 0.1), ValueError, r"invalid warmup: got -5, expected warmup >= 0"),
        (lambda: lr_schedules.linear_warmup(1, 5, -0.1), ValueError, r"invalid lr_max: got -0\.1"),
        (lambda: lr_schedules.cosine_with_warmup(1, 5, 5, 0.1), ValueError, r"warmup=5, total=5, expected warmup <"),
        (lambda: lr_schedules.cosine_with_warmup(1, 0, 0, 0.1), ValueError, r"invalid total: got 0"),
        (lambda: lr_schedules.cosine_with_warmup(1, 9, 1, 0.1, 0.2), ValueError, r"lr_min above lr_max"),
        (lambda: lr_schedules.cosine_with_warmup(1, 9, 1, float("nan")), ValueError, r"invalid lr_max: got nan"),
        (lambda: lr_schedules.step_decay(1, 0.1, 0), ValueError, r"step_decay: invalid step_size: got 0"),
        (lambda: lr_schedules.step_decay(1, 0.1, 2, -0.5), ValueError, r"step_decay: invalid gamma: got -0\.5"),
        (lambda: lr_schedules.one_cycle(10, 10, 0.1), ValueError, r"one_cycle: step past the cycle: got step=10"),
        (lambda: lr_schedules.one_cycle(0, 10, 0.1, pct_start=1.0), ValueError, r"invalid pct_start: got 1\.0"),
        (lambda: lr_schedules.one_cycle(0, 10, 0.1, div_factor=0), ValueError, r"invalid div_factor: got 0"),
        (lambda: lr_schedules.one_cycle(0, 10, 0.1, pct_start=0.1), ValueError, r"the rise has no steps"),
    ],
)
def test_bad_arguments(call: Callable[[], float], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_schedule_drives_training_like_torch() -> None:
    """opt.lr = schedule(step) each step: the new value reaches the update kernels (same result as torch)."""
    rng = np.random.default_rng(3)
    w_init = rng.standard_normal((6, 2)).astype(np.float32)
    x_np, y_np = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    total = 6

    w = Tensor(w_init.copy(), requires_grad=True).realize()
    opt = optim.SGD([w], lr=0.2, momentum=0.9)
    x, y = Tensor(x_np), Tensor(y_np)
    with Tensor.train():
        for step in range(total):
            opt.lr = lr_schedules.cosine_with_warmup(step, total=total, warmup=0, lr_max=0.2, lr_min=0.01)
            opt.zero_grad()
            ((x @ w - y) ** 2).mean().backward()
            opt.step()

    tw = torch.tensor(w_init, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.2, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=total, eta_min=0.01)
    for _ in range(total):
        topt.zero_grad()
        ((torch.tensor(x_np) @ tw - torch.tensor(y_np)) ** 2).mean().backward()
        topt.step()
        scheduler.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert opt.lr.item() == pytest.approx(lr_schedules.cosine_with_warmup(total - 1, total, 0, 0.2, 0.01), rel=1e-6)


def test_cycle_ends_are_exact() -> None:
    """The documented end points hold exactly (no rounding drift at the start or end of a cosine)."""
    assert lr_schedules.one_cycle(0, 100, lr_max=0.1) == 0.1 / 25
    assert lr_schedules.one_cycle(99, 100, lr_max=0.1) == 0.1 / 25 / 1e4
    assert lr_schedules.one_cycle(29, 100, lr_max=0.1) == 0.1
    assert lr_schedules.cosine_with_warmup(10, total=10, warmup=2, lr_max=0.1, lr_min=0.001) == 0.001
    assert lr_schedules.cosine_with_warmup(2, total=10, warmup=2, lr_max=0.1, lr_min=0.001) == 0.1
    assert lr_schedules.step_decay(25, 1.0, 10, 0.5) == 0.25
