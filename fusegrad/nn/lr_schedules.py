"""Learning-rate schedules as plain functions of the step number: a training loop sets `opt.lr = schedule(step, ...)`.

Setting `opt.lr` writes into the optimiser's lr buffer, so compiled kernels (and TinyJit replays) see the new value
without recompiling. Steps count from 0.
Example: `opt.lr = cosine_with_warmup(step, total=1000, warmup=100, lr_max=0.1)`.
"""

from __future__ import annotations

import math


def _check_step(op: str, step: int) -> None:
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"{op}: step must be an int: got {type(step).__name__}, expected int")
    if step < 0:
        raise ValueError(f"{op}: invalid step: got {step}, expected step >= 0")


def _check_count(op: str, name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{op}: {name} must be an int: got {type(value).__name__}, expected int")
    if value < minimum:
        raise ValueError(f"{op}: invalid {name}: got {value}, expected {name} >= {minimum}")


def _check_rate(op: str, name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{op}: {name} must be a Python number: got {type(value).__name__}, expected int or float")
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"{op}: invalid {name}: got {value}, expected a finite {name} >= 0")


def linear_warmup(step: int, warmup: int, lr_max: float, lr_start: float = 0.0) -> float:
    """lr_start at step 0, rising linearly to lr_max at step `warmup`, then lr_max.

    warmup=0 means no warmup (always lr_max). Raises ValueError for a negative step, warmup or rate.
    Example: `linear_warmup(2, warmup=4, lr_max=1.0) == 0.5`.
    """
    _check_step("linear_warmup", step)
    _check_count("linear_warmup", "warmup", warmup, 0)
    _check_rate("linear_warmup", "lr_max", lr_max)
    _check_rate("linear_warmup", "lr_start", lr_start)
    if step >= warmup:
        return float(lr_max)
    return lr_start + (lr_max - lr_start) * step / warmup


def cosine_with_warmup(step: int, total: int, warmup: int, lr_max: float, lr_min: float = 0.0) -> float:
    """Linear warmup from 0 to lr_max over `warmup` steps, then a half cosine from lr_max down to lr_min at `total`.

    Steps at or past `total` get lr_min. With warmup=0 this is torch's CosineAnnealingLR(T_max=total, eta_min=lr_min).
    Raises ValueError unless 0 <= warmup < total and 0 <= lr_min <= lr_max.
    Example: `cosine_with_warmup(10, total=10, warmup=2, lr_max=0.1, lr_min=0.001) == 0.001`.
    """
    op = "cosine_with_warmup"
    _check_step(op, step)
    _check_count(op, "total", total, 1)
    _check_count(op, "warmup", warmup, 0)
    if warmup >= total:
        raise ValueError(f"{op}: warmup does not fit: got warmup={warmup}, total={total}, expected warmup < total")
    _check_rate(op, "lr_max", lr_max)
    _check_rate(op, "lr_min", lr_min)
    if lr_min > lr_max:
        raise ValueError(f"{op}: lr_min above lr_max: got lr_min={lr_min}, lr_max={lr_max}, expected lr_min <= lr_max")
    if step < warmup:
        return lr_max * step / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))  # 0 at the end of warmup, 1 at `total`
    return _cosine_between(lr_max, lr_min, progress)


def step_decay(step: int, lr: float, step_size: int, gamma: float = 0.1) -> float:
    """lr multiplied by gamma once every `step_size` steps: lr * gamma ** (step // step_size) (torch's StepLR).

    Raises ValueError for step_size < 1 or a negative lr or gamma. Example: `step_decay(25, 1.0, 10, 0.5) == 0.25`.
    """
    _check_step("step_decay", step)
    _check_rate("step_decay", "lr", lr)
    _check_count("step_decay", "step_size", step_size, 1)
    _check_rate("step_decay", "gamma", gamma)
    return float(lr * gamma ** (step // step_size))


def one_cycle(
    step: int,
    total: int,
    lr_max: float,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> float:
    """The 1cycle policy (torch's OneCycleLR with cosine annealing, two phases).

    A cosine rise from lr_max / div_factor to lr_max until step pct_start * total - 1, then a cosine fall to
    lr_max / div_factor / final_div_factor at step total - 1. Raises ValueError unless 0 <= step < total,
    0 < pct_start < 1 and both factors are > 0. Example: `one_cycle(0, 100, lr_max=0.1) == 0.004`.
    """
    op = "one_cycle"
    _check_step(op, step)
    _check_count(op, "total", total, 2)
    if step >= total:
        raise ValueError(f"{op}: step past the cycle: got step={step}, expected step < total={total}")
    _check_rate(op, "lr_max", lr_max)
    if not 0 < pct_start < 1:
        raise ValueError(f"{op}: invalid pct_start: got {pct_start}, expected 0 < pct_start < 1")
    for name, factor in (("div_factor", div_factor), ("final_div_factor", final_div_factor)):
        if not factor > 0:
            raise ValueError(f"{op}: invalid {name}: got {factor}, expected {name} > 0")
    lr_start = lr_max / div_factor
    lr_end = lr_start / final_div_factor
    peak = pct_start * total - 1  # the step at lr_max (a float, like torch's phase boundary)
    if peak <= 0:
        raise ValueError(f"{op}: the rise has no steps: got pct_start * total = {pct_start * total}, expected > 1")
    if step <= peak:
        return _cosine_between(lr_start, lr_max, step / peak)
    return _cosine_between(lr_max, lr_end, (step - peak) / (total - 1 - peak))


def _cosine_between(start: float, end: float, fraction: float) -> float:
    """start at fraction 0, end at fraction 1, along half a cosine (both ends exact)."""
    weight = 0.5 * (1.0 + math.cos(math.pi * fraction))  # 1 -> 0
    return start * weight + end * (1.0 - weight)
