"""ONNX training ops (domain ai.onnx.preview.training) on fusegrad Tensors: one optimizer step of Adagrad, Momentum
and Adam over any number of tensors. Inputs are (R learning rate, T step count, X..., G..., state...); outputs are
(X new..., state new...). Registered into `registry.ONNX_OPS` on import."""

from __future__ import annotations

import math

from fusegrad.nn.onnx.registry import onnx_op, scalar
from fusegrad.tensor import Tensor


def groups(tensors: tuple[Tensor, ...], count: int) -> list[list[Tensor]]:
    """(X..., G..., S1..., S2...) split into count equal groups."""
    size = len(tensors) // count
    return [list(tensors[i * size : (i + 1) * size]) for i in range(count)]


@onnx_op("Adagrad")
def adagrad(
    rate: Tensor,
    step: Tensor,
    *tensors: Tensor,
    decay_factor: float = 0.0,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
) -> list[Tensor]:
    xs, gs, hs = groups(tensors, 3)
    decayed = scalar(rate) / (1 + scalar(step) * decay_factor)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs, strict=True):
        regularized = norm_coefficient * x + g
        accumulated = h + regularized * regularized
        new_x.append(x - decayed * regularized / (accumulated.sqrt() + epsilon))
        new_h.append(accumulated)
    return [*new_x, *new_h]


@onnx_op("Momentum")
def momentum(
    rate: Tensor,
    step: Tensor,
    *tensors: Tensor,
    alpha: float,
    beta: float,
    mode: str,
    norm_coefficient: float,
) -> list[Tensor]:
    xs, gs, vs = groups(tensors, 3)
    learning_rate = scalar(rate)
    gradient_scale = beta if scalar(step) > 0 else 1.0  # the first step takes the whole gradient
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs, strict=True):
        regularized = norm_coefficient * x + g
        velocity = alpha * v + gradient_scale * regularized
        direction = regularized + alpha * velocity if mode == "nesterov" else velocity
        new_x.append(x - learning_rate * direction)
        new_v.append(velocity)
    return [*new_x, *new_v]


@onnx_op("Adam")
def adam(
    rate: Tensor,
    step: Tensor,
    *tensors: Tensor,
    alpha: float = 0.9,
    beta: float = 0.999,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
    norm_coefficient_post: float = 0.0,
) -> list[Tensor]:
    xs, gs, vs, hs = groups(tensors, 4)
    count = scalar(step)
    learning_rate = scalar(rate)
    if count > 0:  # bias correction of both moving averages folded into the rate
        learning_rate = learning_rate * math.sqrt(1 - beta**count) / (1 - alpha**count)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs, strict=True):
        regularized = norm_coefficient * x + g
        first = alpha * v + (1 - alpha) * regularized
        second = beta * h + (1 - beta) * regularized * regularized
        updated = x - learning_rate * first / (second.sqrt() + epsilon)
        new_x.append((1 - norm_coefficient_post) * updated)
        new_v.append(first)
        new_h.append(second)
    return [*new_x, *new_v, *new_h]
