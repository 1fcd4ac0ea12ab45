"""ONNX normalisations (Batch/Layer/Group/Instance/RMS/Lp/LRN), Attention and quantize/dequantize on fusegrad Tensors.

Normalisations compute in float32 at least (stash_type 1), then cast back to the input dtype.
Registered into `registry.ONNX_OPS` on import.
"""

from __future__ import annotations

import math
from typing import Any

import onnx

from fusegrad.dtype import DType, dtypes
from fusegrad.nn.onnx.casts import cast_to
from fusegrad.nn.onnx.ops_nn import conv
from fusegrad.nn.onnx.proto import SUBBYTE_INT_RANGES, dtype_of, onnx_type_of
from fusegrad.nn.onnx.registry import normalize_axis, onnx_op
from fusegrad.tensor import Tensor


def channel_shape(t: Tensor, ndim: int) -> Tensor:
    """A per-channel (C,) tensor shaped (C, 1, ...) to broadcast against (N, C, spatial...)."""
    return t.reshape(-1, *([1] * (ndim - 2)))


@onnx_op("BatchNormalization")
def batch_norm(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    mean: Tensor,
    var: Tensor,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    training_mode: int = 0,
) -> list[Tensor]:
    if training_mode:
        axes = tuple(i for i in range(x.ndim) if i != 1)
        batch_mean, batch_var = x.mean(axes), x.var(axes, correction=0)
        y = (x - channel_shape(batch_mean, x.ndim)) * channel_shape((batch_var + epsilon).rsqrt() * scale, x.ndim)
        running_mean = mean * momentum + batch_mean * (1 - momentum)
        running_var = var * momentum + batch_var * (1 - momentum)
        return [y + channel_shape(bias, x.ndim), running_mean, running_var]
    invstd = (var + epsilon).rsqrt()
    return [x.batchnorm(scale, bias, mean, invstd)]


@onnx_op("LayerNormalization")
def layer_norm(
    x: Tensor, scale: Tensor, bias: Tensor | None = None, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1
) -> list[Tensor]:
    axis = normalize_axis(axis, x.ndim)
    axes = tuple(range(axis, x.ndim))
    compute = x.cast(dtypes.float32) if x.dtype != dtypes.float64 else x
    mean = compute.mean(axes, keepdim=True)
    invstd = ((compute - mean).square().mean(axes, keepdim=True) + epsilon).rsqrt()
    y = ((compute - mean) * invstd).cast(x.dtype) * scale
    return [y + bias if bias is not None else y, mean, invstd]


@onnx_op("RMSNormalization")
def rms_norm(x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
    axes = tuple(range(normalize_axis(axis, x.ndim), x.ndim))
    compute = x.cast(dtypes.float32) if x.dtype != dtypes.float64 else x
    return (compute * (compute.square().mean(axes, keepdim=True) + epsilon).rsqrt()).cast(x.dtype) * scale


@onnx_op("GroupNormalization")
def group_norm(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    epsilon: float = 1e-5,
    num_groups: int = 1,
    stash_type: int = 1,
    opset: int = 21,
) -> Tensor:
    n, c = x.shape[:2]
    # (N, C, ...) -> (N, G, C/G * ...) normalised per group
    grouped = x.reshape(n, num_groups, -1)
    mean = grouped.mean(-1, keepdim=True)
    normed = ((grouped - mean) * ((grouped - mean).square().mean(-1, keepdim=True) + epsilon).rsqrt()).reshape(x.shape)
    if opset < 21:  # opset 18 has one scale and bias per group
        scale, bias = scale.repeat_interleave(c // num_groups), bias.repeat_interleave(c // num_groups)
    return normed * channel_shape(scale, x.ndim) + channel_shape(bias, x.ndim)


@onnx_op("InstanceNormalization")
def instance_norm(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-5) -> Tensor:
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    normed = (x - mean) * ((x - mean).square().mean(axes, keepdim=True) + epsilon).rsqrt()
    return normed * channel_shape(scale, x.ndim) + channel_shape(bias, x.ndim)


@onnx_op("LpNormalization")
def lp_norm(x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
    return (norm == 0).where(0, x / norm)


@onnx_op("MeanVarianceNormalization")
def mean_variance_norm(x: Tensor, axes: list[int] | None = None) -> Tensor:
    chosen = tuple(axes) if axes is not None else (0, 2, 3)
    mean = x.mean(chosen, keepdim=True)
    return (x - mean) / ((x - mean).square().mean(chosen, keepdim=True).sqrt() + 1e-9)


@onnx_op("LRN")
def local_response_norm(x: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Tensor:
    # sum of squares over channels [c - (size-1)//2, c + ceil((size-1)/2)]: pad the channel axis, then a 1-d window
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    squares = x.square().pad([(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    windows = sum(squares.shrink([None, (i, i + x.shape[1])] + [None] * (x.ndim - 2)) for i in range(size))
    assert isinstance(windows, Tensor)
    return x / (bias + alpha / size * windows).pow(beta)


# *** attention (opset 23) ***


def split_heads(t: Tensor, heads: int) -> Tensor:
    """(B, S, heads * D) -> (B, heads, S, D); 4-d inputs are already split."""
    if t.ndim == 4:
        return t
    batch, seq, _ = t.shape
    return t.reshape(batch, seq, heads, -1).transpose(1, 2)


def window_mask(sq: int, skv: int, offset: int | Tensor, is_causal: int, left: int, right: int) -> Tensor | None:
    """(Sq, Skv) bool: query i (at position i + offset among the keys) may see key j; None when all may.

    A per-batch offset (B, 1, 1, 1) makes it (B, 1, Sq, Skv)."""
    if not is_causal and left < 0 and right < 0:
        return None
    position = Tensor.arange(sq).reshape(sq, 1) + offset
    key = Tensor.arange(skv).reshape(1, skv)
    allowed = (key <= position) if is_causal else Tensor.ones(sq, skv, dtype=dtypes.bool)
    if left >= 0:
        allowed = allowed & (key >= position - left)
    if right >= 0 and not is_causal:
        allowed = allowed & (key <= position + right)
    return allowed


def masked_scores(scores: Tensor, attn_mask: Tensor | None, allowed: Tensor | None) -> Tensor:
    """Scores plus the attention mask (bool: keep where True; float: added), -inf where the window forbids."""
    if attn_mask is not None:
        # a mask shorter than the keys (past + new) leaves the extra keys masked out
        extra = scores.shape[-1] - attn_mask.shape[-1]
        fill = False if attn_mask.dtype == dtypes.bool else -math.inf
        mask = attn_mask.pad([(0, 0)] * (attn_mask.ndim - 1) + [(0, extra)], value=fill)
        scores = mask.where(scores, -math.inf) if mask.dtype == dtypes.bool else scores + mask
    return scores if allowed is None else allowed.where(scores, -math.inf)


@onnx_op("Attention")
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    past_key: Tensor | None = None,
    past_value: Tensor | None = None,
    nonpad_kv_seqlen: Tensor | None = None,
    is_causal: int = 0,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
    left_window_size: int = -1,
    right_window_size: int = -1,
) -> list[Tensor]:
    was_3d = q.ndim == 3
    query, key, value = (
        split_heads(q, q_num_heads or 1),
        split_heads(k, kv_num_heads or 1),
        split_heads(v, kv_num_heads or 1),
    )
    past = 0
    if past_key is not None and past_value is not None:
        past = past_key.shape[2]
        key, value = past_key.cat(key, dim=2), past_value.cat(value, dim=2)
    present_key, present_value = key, value
    if query.shape[1] != key.shape[1]:  # grouped-query attention: each kv head serves several q heads
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    factor = scale if scale is not None else 1 / math.sqrt(query.shape[-1])
    scores = (query @ key.transpose(-1, -2)) * factor  # (B, H, Sq, Skv)
    if softcap > 0:  # before the mask, so masked scores stay -inf
        scores = softcap * (scores / softcap).tanh()
    sq, skv = scores.shape[-2:]
    offset: int | Tensor = past
    valid_keys = None
    if nonpad_kv_seqlen is not None:  # a static cache: batch b holds nonpad_kv_seqlen[b] real keys, then padding
        lengths = nonpad_kv_seqlen.cast(dtypes.int64).reshape(-1, 1, 1, 1)
        valid_keys = Tensor.arange(skv).reshape(1, 1, 1, skv) < lengths
        offset = past if past_key is not None else lengths - sq
    allowed = window_mask(sq, skv, offset, is_causal, left_window_size, right_window_size)
    if valid_keys is not None:
        allowed = valid_keys if allowed is None else allowed & valid_keys
    biased = masked_scores(scores, attn_mask, allowed)
    weights = biased.cast(dtypes.float32).softmax(-1)
    # a fully masked row attends to nothing: zeros, not the NaN of softmax over all -inf
    weights = weights.isnan().where(0, weights).cast(q.dtype)
    out = weights @ value  # (B, H, Sq, Dv)
    if was_3d:
        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
    # modes: 0 and 1 the scaled QK product (softcapped when softcap is set), 2 with the masks added, 3 the weights
    qk_output = [scores, scores, biased, weights][qk_matmul_output_mode]
    return [out, present_key, present_value, qk_output]


# *** quantisation ***


def per_axis(param: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
    """A scale or zero point broadcast against x: scalar, per-axis (1-d) or blocked along axis."""
    if param.ndim == 0 or (param.numel() == 1 and block_size == 0):
        return param.reshape(())
    axis = normalize_axis(axis, x.ndim)
    if block_size:
        return param.repeat_interleave(block_size, dim=axis).shrink([(0, s) for s in x.shape])
    return param.reshape([-1 if i == axis else 1 for i in range(x.ndim)])


def saturate_round(y: Tensor, dtype: DType, code: int = 0) -> Tensor:
    """Round half to even, clamp to the range of dtype (or of ONNX type `code` where it is a sub-byte int held in
    dtype), cast."""
    low, high = SUBBYTE_INT_RANGES.get(code, (dtypes.min(dtype), dtypes.max(dtype)))
    return y.round().clip(low, high).cast(dtype)


@onnx_op("QuantizeLinear")
def quantize_linear(
    x: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor | None = None,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    precision: int = 0,
    saturate: int = 1,
    input_types: tuple[int, ...] = (),
) -> Tensor:
    code = quantized_type(y_zero_point, output_dtype, input_types)
    out_dtype = dtype_of(code, "QuantizeLinear")
    compute = dtypes.float32 if x.dtype != dtypes.float64 else dtypes.float64
    scaled = x.cast(compute) / per_axis(y_scale, x, axis, block_size).cast(compute)
    zero = per_axis(y_zero_point, x, axis, block_size).cast(compute) if y_zero_point is not None else 0
    if dtypes.is_float(out_dtype):  # float8 / float4 outputs: the float cast rounds (and saturates unless told not to)
        return cast_to(scaled + zero, code, bool(saturate))
    return saturate_round(scaled.round() + zero, out_dtype, code)


def quantized_type(zero_point: Tensor | None, output_dtype: int, input_types: tuple[int, ...]) -> int:
    """QuantizeLinear's output ONNX type: output_dtype, else the zero point's (as the graph declares it, since a
    container dtype holds several types), else UINT8."""
    if output_dtype:
        return output_dtype
    if zero_point is None:
        return int(onnx.TensorProto.UINT8)
    return input_types[2] if len(input_types) > 2 and input_types[2] else onnx_type_of(zero_point.dtype)


@onnx_op("DequantizeLinear")
def dequantize_linear(
    x: Tensor,
    x_scale: Tensor,
    x_zero_point: Tensor | None = None,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> Tensor:
    out_dtype = dtype_of(output_dtype, "DequantizeLinear") if output_dtype else x_scale.dtype
    shifted = x.cast(dtypes.float32)
    if x_zero_point is not None:
        shifted = shifted - per_axis(x_zero_point, x, axis, block_size).cast(dtypes.float32)
    return (shifted * per_axis(x_scale, x, axis, block_size).cast(dtypes.float32)).cast(out_dtype)


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(x: Tensor) -> list[Tensor]:
    # the range always includes 0, so 0 is exactly representable
    low, high = x.min().minimum(0), x.max().maximum(0)
    scale = (high - low) / 255
    zero_point = saturate_round(-low / scale, dtypes.uint8)
    y = saturate_round((x / scale).round() + zero_point.cast(x.dtype), dtypes.uint8)
    return [y, scale, zero_point]


@onnx_op("QLinearMatMul")
def qlinear_matmul(
    a: Tensor,
    a_scale: Tensor,
    a_zero_point: Tensor,
    b: Tensor,
    b_scale: Tensor,
    b_zero_point: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor,
) -> Tensor:
    product = dequantize_linear(a, a_scale, a_zero_point, axis=-1) @ dequantize_linear(
        b, b_scale, b_zero_point, axis=-1
    )
    return quantize_linear(product, y_scale, y_zero_point, axis=-1)


@onnx_op("QLinearConv")
def qlinear_conv(
    x: Tensor,
    x_scale: Tensor,
    x_zero_point: Tensor,
    w: Tensor,
    w_scale: Tensor,
    w_zero_point: Tensor,
    y_scale: Tensor,
    y_zero_point: Tensor,
    b: Tensor | None = None,
    **conv_attributes: Any,
) -> Tensor:
    # dequantize, convolve in float, add the int32 bias (scale x_scale * w_scale per output channel), quantize
    real_x = dequantize_linear(x, x_scale, x_zero_point)
    real_w = dequantize_linear(w, w_scale, w_zero_point, axis=0)
    bias = None
    if b is not None:
        bias = b.cast(dtypes.float32) * (x_scale.cast(dtypes.float32) * w_scale.cast(dtypes.float32)).reshape(-1)
    out = conv(real_x, real_w, bias, **conv_attributes)
    return quantize_linear(out, y_scale, y_zero_point)
