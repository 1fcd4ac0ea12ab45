"""ONNX ops of newer opsets and signal helpers on fusegrad Tensors: RotaryEmbedding, SwiGLU, Hann/Hamming/Blackman
windows, FlexAttention. Registered into `registry.ONNX_OPS` on import."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.proto import dtype_of
from fusegrad.nn.onnx.registry import Value, onnx_op, scalar
from fusegrad.tensor import Tensor

RunGraph = Callable[[Any, dict[str, Value]], list[Value]]


@onnx_op("RotaryEmbedding")
def rotary_embedding(
    x: Tensor,
    cos_cache: Tensor,
    sin_cache: Tensor,
    position_ids: Tensor | None = None,
    interleaved: int = 0,
    num_heads: int = 0,
    rotary_embedding_dim: int = 0,
) -> Tensor:
    # work in (B, S, heads, D): 4-d inputs come as (B, heads, S, D), 3-d as (B, S, heads * D)
    work = x.transpose(1, 2) if x.ndim == 4 else x.reshape(x.shape[0], x.shape[1], num_heads, -1)
    dim = rotary_embedding_dim or work.shape[-1]
    rotate, keep = work[..., :dim], work[..., dim:]
    if position_ids is not None:  # caches (max positions, D/2) -> (B, S, D/2)
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)  # (B, S, 1, D/2)
    if interleaved:
        first, second = rotate[..., 0::2], rotate[..., 1::2]
    else:
        first, second = rotate[..., : dim // 2], rotate[..., dim // 2 :]
    real = cos * first - sin * second
    imaginary = sin * first + cos * second
    if interleaved:  # (..., D/2, 2) -> (..., D): real and imaginary parts alternate again
        rotated = real.unsqueeze(-1).cat(imaginary.unsqueeze(-1), dim=-1).reshape(rotate.shape)
    else:
        rotated = real.cat(imaginary, dim=-1)
    out = rotated.cat(keep, dim=-1)
    return out.transpose(1, 2) if x.ndim == 4 else out.reshape(x.shape)


@onnx_op("SwiGLU")
def swiglu(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    return a * (alpha * a).sigmoid() * b


def cosine_window(size: Tensor, periodic: int, output_datatype: int, coefficients: list[float]) -> Tensor:
    """sum_k (-1)^k c_k cos(2 pi k n / d) for n in [0, size); d = size when periodic, else size - 1."""
    count = int(scalar(size))
    denominator = count if periodic else count - 1
    n = Tensor.arange(count, dtype=dtypes.float64)
    out = Tensor.zeros(count, dtype=dtypes.float64)
    for k, c in enumerate(coefficients):
        out = out + (-1) ** k * c * (2 * math.pi * k * n / denominator).cos()
    return out.cast(dtype_of(output_datatype, "window"))


@onnx_op("HannWindow")
def hann_window(size: Tensor, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return cosine_window(size, periodic, output_datatype, [0.5, 0.5])


@onnx_op("HammingWindow")
def hamming_window(size: Tensor, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return cosine_window(size, periodic, output_datatype, [25 / 46, 21 / 46])


@onnx_op("BlackmanWindow")
def blackman_window(size: Tensor, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    return cosine_window(size, periodic, output_datatype, [0.42, 0.5, 0.08])


@onnx_op("CausalConvWithState")
def causal_conv_with_state(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, past_state: Tensor | None = None, activation: str = "none"
) -> list[Tensor]:
    # depthwise causal conv over (batch, channels, length): the k-1 steps before the input come from past_state
    batch, channels, _ = x.shape
    kernel = weight.shape[2]
    past = past_state if past_state is not None else Tensor.zeros(batch, channels, kernel - 1, dtype=x.dtype)
    padded = past.cat(x, dim=2)
    # accumulate in float32 and round once, as the reference does for float16
    wide_bias = bias.cast(dtypes.float32) if bias is not None else None
    out = padded.cast(dtypes.float32).conv2d(weight.cast(dtypes.float32), wide_bias, groups=channels).cast(x.dtype)
    if activation in ("silu", "swish"):
        out = (out.cast(dtypes.float32) * out.cast(dtypes.float32).sigmoid()).cast(x.dtype)
    elif activation != "none":
        raise ValueError(f"CausalConvWithState: activation {activation!r} is not one of none, silu, swish")
    return [out, padded[:, :, padded.shape[2] - (kernel - 1) :]]


def fourier_matrices(rows: int, columns: int, length: int) -> tuple[Tensor, Tensor]:
    """cos and sin of 2 pi j k / length for j < rows (time), k < columns (frequency), in float64."""
    angle = Tensor.arange(rows, dtype=dtypes.float64).reshape(rows, 1) * Tensor.arange(columns, dtype=dtypes.float64)
    angle = angle * (2 * math.pi / length)
    return angle.cos(), angle.sin()


def fit_length(t: Tensor, length: int) -> Tensor:
    """t's last axis cut or zero-padded to length."""
    if t.shape[-1] >= length:
        return t[..., :length]
    return t.pad([(0, 0)] * (t.ndim - 1) + [(0, length - t.shape[-1])])


@onnx_op("DFT")
def dft(
    x: Tensor,
    dft_length: Tensor | None = None,
    axis_input: Tensor | None = None,
    axis: int | None = None,
    inverse: int = 0,
    onesided: int = 0,
    opset: int = 20,
) -> Tensor:
    # x (..., signal, 1 or 2): the last axis holds (real[, imaginary]); axis counts over x's axes
    chosen = int(scalar(axis_input, -2)) if opset >= 20 else (1 if axis is None else axis)
    chosen = chosen % x.ndim
    real = x[..., 0].cast(dtypes.float64).transpose(chosen, -1)
    imaginary = x[..., 1].cast(dtypes.float64).transpose(chosen, -1) if x.shape[-1] == 2 else real.zeros_like()
    size = real.shape[-1]
    length = int(scalar(dft_length)) if dft_length is not None else (2 * (size - 1) if inverse and onesided else size)
    if inverse and onesided:  # irfft: the one-sided spectrum stands for a Hermitian one, the result is real
        bins = size
        weights = Tensor([1.0 if k == 0 or 2 * k == length else 2.0 for k in range(bins)], dtype=dtypes.float64)
        cos, sin = fourier_matrices(length, bins, length)
        out_real = ((real * weights) @ cos.T - (imaginary * weights) @ sin.T) / length
        out = out_real.unsqueeze(-1)
    else:
        real, imaginary = fit_length(real, length), fit_length(imaginary, length)
        bins = length // 2 + 1 if onesided else length
        cos, sin = fourier_matrices(length, bins, length)
        sign = 1 if inverse else -1  # e^(sign i theta)
        # (a + ib)(cos + sign i sin) summed over time
        out_real = real @ cos - sign * (imaginary @ sin)
        out_imaginary = imaginary @ cos + sign * (real @ sin)
        if inverse:
            out_real, out_imaginary = out_real / length, out_imaginary / length
        out = out_real.unsqueeze(-1).cat(out_imaginary.unsqueeze(-1), dim=-1)
    # (..., frequency, 2) with the frequency axis back in place
    return out.transpose(chosen, -2).cast(x.dtype)


def heads_first(t: Tensor, heads: int) -> Tensor:
    """(B, T, heads * D) -> (B, heads, T, D) in float32."""
    batch, steps, _ = t.shape
    return t.reshape(batch, steps, heads, -1).transpose(1, 2).cast(dtypes.float32)


@onnx_op("LinearAttention")
def linear_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    past_state: Tensor | None = None,
    decay: Tensor | None = None,
    beta: Tensor | None = None,
    chunk_size: int | None = None,  # a speed hint for chunked kernels; the result does not depend on it
    kv_num_heads: int = 1,
    q_num_heads: int = 1,
    scale: float = 0.0,
    update_rule: str = "gated_delta",
) -> list[Tensor]:
    # a recurrent state (B, H_kv, d_k, d_v) updated per step: S = S * exp(g); v -= beta (S^T k); S += k v^T
    batch, steps, _ = query.shape
    q, k, v = heads_first(query, q_num_heads), heads_first(key, kv_num_heads), heads_first(value, kv_num_heads)
    d_k, d_v = q.shape[-1], v.shape[-1]
    if decay is not None:  # per head (B, T, H_kv) or per key channel (B, T, H_kv * d_k) -> (B, H_kv, T, 1 or d_k)
        decay = heads_first(decay, kv_num_heads)
    if beta is not None:  # (B, T, H_kv or 1) -> (B, H_kv or 1, T, 1)
        beta = beta.reshape(batch, steps, beta.shape[-1], 1).transpose(1, 2).cast(dtypes.float32)
    state = past_state.cast(dtypes.float32) if past_state is not None else Tensor.zeros(batch, kv_num_heads, d_k, d_v)
    factor = scale if scale else 1 / math.sqrt(d_k)
    outputs = []
    for t in range(steps):
        k_t, v_t = k[:, :, t], v[:, :, t]
        if update_rule in ("gated", "gated_delta") and decay is not None:
            state = state * decay[:, :, t].exp().unsqueeze(-1)
        if update_rule in ("delta", "gated_delta") and beta is not None:
            v_t = beta[:, :, t] * (v_t - (state * k_t.unsqueeze(-1)).sum(-2))
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        readable = state.repeat_interleave(q_num_heads // kv_num_heads, dim=1)
        outputs.append(factor * (q[:, :, t].unsqueeze(-1) * readable).sum(-2))  # (B, H_q, d_v)
    out = Tensor.stack(*outputs, dim=2).transpose(1, 2).reshape(batch, steps, q_num_heads * d_v)
    state_dtype = past_state.dtype if past_state is not None else query.dtype
    return [out.cast(query.dtype), state.cast(state_dtype)]


@onnx_op("STFT")
def stft(
    signal: Tensor,
    frame_step: Tensor,
    window: Tensor | None = None,
    frame_length: Tensor | None = None,
    onesided: int = 1,
) -> Tensor:
    # signal (B, L, 1 or 2) -> frames (B, F, frame length, 1 or 2), windowed, each transformed: (B, F, bins, 2)
    step = int(scalar(frame_step))
    length = int(scalar(frame_length)) if frame_length is not None else window.shape[0] if window is not None else 0
    if length <= 0:
        raise ValueError("STFT: give a window or a frame_length")
    count = 1 + (signal.shape[1] - length) // step
    frames = Tensor.stack(*[signal[:, i * step : i * step + length] for i in range(count)], dim=1)
    if window is not None:
        frames = frames * window.reshape(length, 1).cast(signal.dtype)
    return dft(frames, None, Tensor(-2), onesided=onesided)


# *** FlexAttention (ai.onnx.preview): attention with optional score and probability modifier sub-graphs ***


def run_modifier(graph: Any, value: Tensor, run_graph: RunGraph, what: str) -> Tensor:
    """A modifier sub-graph's one output for its one rank-4 input."""
    result = run_graph(graph, {graph.input[0].name: value})[0]
    if not isinstance(result, Tensor) or result.shape != value.shape:
        raise ValueError(f"FlexAttention: {what} must map a {value.shape} tensor to one of the same shape")
    return result


@onnx_op("FlexAttention")
def flex_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    run_graph: RunGraph,
    scale: float | None = None,
    score_mod: Any = None,
    prob_mod: Any = None,
    softmax_precision: int = 0,
) -> Tensor:
    # q (B, Hq, Tq, D), k (B, Hkv, Tkv, D), v (B, Hkv, Tkv, Dv) -> (B, Hq, Tq, Dv); query head h uses kv head h // group
    if softmax_precision:
        compute = dtype_of(softmax_precision, "FlexAttention")
    else:
        compute = dtypes.float64 if q.dtype == dtypes.float64 else dtypes.float32
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    factor = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    scores = (q.cast(compute) @ k.cast(compute).transpose(-1, -2)) * factor  # (B, Hq, Tq, Tkv)
    if score_mod is not None:
        scores = run_modifier(score_mod, scores, run_graph, "score_mod")
    probs = scores.softmax(-1)
    if prob_mod is not None:
        probs = run_modifier(prob_mod, probs, run_graph, "prob_mod")
    return (probs @ v.cast(compute)).cast(q.dtype)
