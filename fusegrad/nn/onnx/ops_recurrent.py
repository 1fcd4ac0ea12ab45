"""ONNX recurrent layers (RNN, GRU, LSTM) on fusegrad Tensors, unrolled over the sequence in Python.

Shapes follow the spec with layout 0: X (seq, batch, input), W (directions, gates * hidden, input), R (directions,
gates * hidden, hidden), B (directions, 2 * gates * hidden); Y (seq, directions, batch, hidden), Y_h (directions,
batch, hidden). layout 1 puts batch first. Gate order: LSTM i, o, f, c; GRU z, r, h. Registered on import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fusegrad.nn.onnx.ops_shape import reverse_sequence
from fusegrad.nn.onnx.registry import onnx_op
from fusegrad.tensor import Tensor

Activation = Callable[[Tensor], Tensor]


def activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    """An activation function by its ONNX name, with its alpha/beta where it takes them."""
    match name.lower():
        case "tanh":
            return Tensor.tanh
        case "sigmoid":
            return Tensor.sigmoid
        case "relu":
            return Tensor.relu
        case "affine":
            return lambda x: x * (alpha or 1.0) + (beta or 0.0)
        case "leakyrelu":
            return lambda x: x.leaky_relu(0.01 if alpha is None else alpha)
        case "thresholdedrelu":
            return lambda x: (x > (1.0 if alpha is None else alpha)).where(x, 0)
        case "scaledtanh":
            return lambda x: (alpha or 1.0) * ((beta or 1.0) * x).tanh()
        case "hardsigmoid":
            return lambda x: ((0.2 if alpha is None else alpha) * x + (0.5 if beta is None else beta)).clip(0, 1)
        case "elu":
            return lambda x: x.elu(1.0 if alpha is None else alpha)
        case "softsign":
            return Tensor.softsign
        case "softplus":
            return Tensor.softplus
    raise NotImplementedError(f"recurrent layer: activation {name!r} is not supported")


@dataclass(frozen=True, slots=True)
class Recurrence:
    """What every direction of one recurrent node shares."""

    activations: list[Activation]
    seq_lens: Tensor | None


def activations_for(
    names: list[str] | None, alphas: list[float] | None, betas: list[float] | None, defaults: list[str], directions: int
) -> list[list[Activation]]:
    """Per direction, its list of activation functions (ONNX lists them all, direction after direction)."""
    chosen = names or defaults * directions
    alpha_list = list(alphas or [])
    beta_list = list(betas or [])
    functions = []
    for i, name in enumerate(chosen):
        alpha = alpha_list[i] if i < len(alpha_list) else None
        beta = beta_list[i] if i < len(beta_list) else None
        functions.append(activation(name, alpha, beta))
    per = len(defaults)
    return [functions[d * per : (d + 1) * per] for d in range(directions)]


def gate_inputs(x_t: Tensor, h: Tensor, w: Tensor, r: Tensor, b: Tensor | None, clip: float | None) -> list[Tensor]:
    """X_t W^T + H R^T + Wb + Rb, split per gate: (batch, gates * hidden) -> gates x (batch, hidden)."""
    gates = w.shape[0] // r.shape[1]
    total = x_t @ w.T + h @ r.T
    if b is not None:
        total = total + b[: w.shape[0]] + b[w.shape[0] :]
    parts = list(total.chunk(gates, dim=-1))
    return [p.clip(-clip, clip) for p in parts] if clip is not None else parts


def mask_step(new: Tensor, old: Tensor, t: int, seq_lens: Tensor | None) -> Tensor:
    """new where step t is inside the batch entry's sequence, old past its end."""
    if seq_lens is None:
        return new
    return (seq_lens.reshape(-1, 1) > t).where(new, old)


def run_direction(
    x: Tensor, h: Tensor, reverse: bool, config: Recurrence, step: Callable[[Tensor, Tensor, int], Tensor]
) -> tuple[Tensor, Tensor]:
    """Run step(x_t, h, t) over the sequence of x (seq, batch, input): (Y (seq, batch, hidden), last h)."""
    source = x
    if reverse:
        source = reverse_sequence(x, config.seq_lens, 1, 0) if config.seq_lens is not None else x.flip(0)
    outputs = []
    for t in range(x.shape[0]):
        h = mask_step(step(source[t], h, t), h, t, config.seq_lens)
        outputs.append(h if config.seq_lens is None else mask_step(h, h.zeros_like(), t, config.seq_lens))
    y = Tensor.stack(*outputs, dim=0)
    if reverse:
        y = reverse_sequence(y, config.seq_lens, 1, 0) if config.seq_lens is not None else y.flip(0)
    return y, h


def prepare(
    x: Tensor, layout: int, initial: list[Tensor | None], directions: int, hidden: int
) -> tuple[Tensor, list[Tensor]]:
    """X as (seq, batch, input) and initial states as (directions, batch, hidden) (zeros when absent)."""
    if layout:
        x = x.transpose(0, 1)
        initial = [s.transpose(0, 1) if s is not None else None for s in initial]
    batch = x.shape[1]
    states = [s if s is not None else Tensor.zeros(directions, batch, hidden, dtype=x.dtype) for s in initial]
    return x, states


def finish(ys: list[Tensor], states: list[list[Tensor]], layout: int) -> list[Tensor]:
    """Y (seq, directions, batch, hidden) and the stacked final states, in the node's layout."""
    y = Tensor.stack(*ys, dim=1)
    finals = [Tensor.stack(*per_direction, dim=0) for per_direction in states]
    if layout:  # (batch, seq, directions, hidden) and (batch, directions, hidden)
        return [y.permute(2, 0, 1, 3), *[f.transpose(0, 1) for f in finals]]
    return [y, *finals]


def direction_flags(direction: str) -> list[bool]:
    """Whether each direction runs reversed."""
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]


@onnx_op("RNN")
def rnn(
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    seq_lens: Tensor | None = None,
    initial_h: Tensor | None = None,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int = 0,
    layout: int = 0,
) -> list[Tensor]:
    flags = direction_flags(direction)
    hidden = hidden_size or r.shape[-1]
    x, (h0,) = prepare(x, layout, [initial_h], len(flags), hidden)
    functions = activations_for(activations, activation_alpha, activation_beta, ["Tanh"], len(flags))
    ys, finals = [], []
    for d, reverse in enumerate(flags):
        config = Recurrence(functions[d], seq_lens)
        bias = b[d] if b is not None else None
        (f,) = config.activations

        def step(x_t: Tensor, h: Tensor, t: int, d: int = d, bias: Tensor | None = bias, f: Activation = f) -> Tensor:
            return f(gate_inputs(x_t, h, w[d], r[d], bias, clip)[0])

        y, h = run_direction(x, h0[d], reverse, config, step)
        ys.append(y)
        finals.append(h)
    return finish(ys, [finals], layout)


@onnx_op("GRU")
def gru(
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    seq_lens: Tensor | None = None,
    initial_h: Tensor | None = None,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int = 0,
    layout: int = 0,
    linear_before_reset: int = 0,
) -> list[Tensor]:
    flags = direction_flags(direction)
    hidden = hidden_size or r.shape[-1]
    x, (h0,) = prepare(x, layout, [initial_h], len(flags), hidden)
    functions = activations_for(activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh"], len(flags))
    ys, finals = [], []
    for d, reverse in enumerate(flags):
        config = Recurrence(functions[d], seq_lens)
        w_d, r_d = w[d], r[d]
        bias = b[d] if b is not None else Tensor.zeros(6 * hidden, dtype=x.dtype)
        f, g = config.activations

        def step(
            x_t: Tensor,
            h: Tensor,
            t: int,
            w_d: Tensor = w_d,
            r_d: Tensor = r_d,
            bias: Tensor = bias,
            f: Activation = f,
            g: Activation = g,
        ) -> Tensor:
            # z and r gates as usual; the candidate h uses the reset gate before or after R_h
            x_z, x_r, x_h = (x_t @ w_d.T + bias[: 3 * hidden]).chunk(3, dim=-1)
            r_z, r_r, r_h = r_d.chunk(3, dim=0)
            rb_z, rb_r, rb_h = bias[3 * hidden :].chunk(3)
            z = f(x_z + h @ r_z.T + rb_z)
            reset = f(x_r + h @ r_r.T + rb_r)
            if linear_before_reset:
                candidate = g(x_h + reset * (h @ r_h.T + rb_h))
            else:
                candidate = g(x_h + (reset * h) @ r_h.T + rb_h)
            return (1 - z) * candidate + z * h

        y, h = run_direction(x, h0[d], reverse, config, step)
        ys.append(y)
        finals.append(h)
    return finish(ys, [finals], layout)


@onnx_op("LSTM")
def lstm(
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    seq_lens: Tensor | None = None,
    initial_h: Tensor | None = None,
    initial_c: Tensor | None = None,
    p: Tensor | None = None,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int = 0,
    input_forget: int = 0,
    layout: int = 0,
) -> list[Tensor]:
    flags = direction_flags(direction)
    hidden = hidden_size or r.shape[-1]
    x, (h0, c0) = prepare(x, layout, [initial_h, initial_c], len(flags), hidden)
    functions = activations_for(activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh", "Tanh"], len(flags))
    ys, h_finals, c_finals = [], [], []
    for d, reverse in enumerate(flags):
        config = Recurrence(functions[d], seq_lens)
        peephole = p[d] if p is not None else Tensor.zeros(3 * hidden, dtype=x.dtype)
        bias = b[d] if b is not None else None
        cell = [c0[d]]  # the cell state, carried beside h through the steps
        f, g, h_act = config.activations

        def step(
            x_t: Tensor,
            h: Tensor,
            t: int,
            d: int = d,
            peephole: Tensor = peephole,
            bias: Tensor | None = bias,
            cell: list[Tensor] = cell,
            f: Activation = f,
            g: Activation = g,
            h_act: Activation = h_act,
        ) -> Tensor:
            i_in, o_in, f_in, c_in = gate_inputs(x_t, h, w[d], r[d], bias, clip)
            p_i, p_o, p_f = peephole.chunk(3)
            c_prev = cell[0]
            i = f(i_in + p_i * c_prev)
            forget = (1 - i) if input_forget else f(f_in + p_f * c_prev)
            c_new = mask_step(forget * c_prev + i * g(c_in), c_prev, t, seq_lens)
            cell[0] = c_new
            return f(o_in + p_o * c_new) * h_act(c_new)

        y, h = run_direction(x, h0[d], reverse, config, step)
        ys.append(y)
        h_finals.append(h)
        c_finals.append(cell[0])
    return finish(ys, [h_finals, c_finals], layout)
