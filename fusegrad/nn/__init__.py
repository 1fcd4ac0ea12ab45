"""Neural-network layers: plain classes that hold their parameters as Tensor attributes and call the Tensor functionals.

Constructor arguments, defaults, attribute names (so state-dict keys) and initialisation follow the reference system;
`fusegrad.nn.state.get_state_dict(layer)` finds the parameters by walking the attributes. Example: `Linear(3, 4)(x)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fusegrad.dtype import DTypeLike, dtypes
from fusegrad.helpers import prod
from fusegrad.tensor import Tensor

__all__ = [
    "BatchNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "LSTMCell",
    "LayerNorm",
    "LayerNorm2d",
    "Linear",
    "RMSNorm",
    "datasets",
    "optim",
    "state",
]


def _filled(shape: tuple[int, ...], value: float, dtype: DTypeLike | None = None) -> Tensor:
    """A parameter or buffer of its own memory holding `value` everywhere.

    A constant tensor is not enough: equal constants are one hash-consed node, so two layers' `Tensor.ones(3)` would
    share a gradient and, once realized, memory. Writing the constant into a fresh buffer gives each its own."""
    dt = dtypes.default_float if dtype is None else dtype
    return Tensor.empty(*shape, dtype=dt).assign(Tensor.full(shape, value, dtype=dt))


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    """U(-bound, bound): the reference's initialisation for weights and biases, bound = 1/sqrt(fan_in)."""
    return Tensor.uniform(*shape, low=-bound, high=bound)


def _tuple(value: int | Sequence[int], n: int) -> tuple[int, ...]:
    return (value,) * n if isinstance(value, int) else tuple(value)


def _check_padding_string(padding: int | tuple[int, ...] | str, stride: int | tuple[int, ...]) -> None:
    """ValueError for a padding string other than "same"/"valid", or "same" with a stride: its output size would
    not be the input's, which is what "same" promises."""
    if not isinstance(padding, str):
        return
    if padding not in ("same", "valid"):
        raise ValueError(f"Conv2d: invalid padding string {padding!r}: expected 'same' or 'valid'")
    if padding == "same" and any(s != 1 for s in _tuple(stride, 1)):
        raise ValueError(f"Conv2d: padding='same' is not supported for strided convolutions: got stride {stride}")


def _check_channels(op: str, x: Tensor, channels: int) -> None:
    """ValueError unless x is (N, channels, ...)."""
    if x.ndim < 2 or x.shape[1] != channels:
        got = x.shape[1] if x.ndim >= 2 else "none"
        raise ValueError(
            f"{op}: input {x.shape} has {got} channels in axis 1: got {got}, expected (N, {channels}, ...)"
        )


class Linear:
    """y = x @ weight.T + bias: (..., in_features) -> (..., out_features).

    weight (out_features, in_features) and bias (out_features,) start U(-1/sqrt(in_features), 1/sqrt(in_features)).

    Args:
        in_features: the size of x's last axis.
        out_features: the size of the output's last axis.
        bias: whether to add a bias.

    Raises:
        ValueError: (when called) the last axis of x is not in_features.

    Examples:
        >>> layer = Linear(3, 4)
        >>> layer(Tensor.ones(2, 3)).shape, layer.weight.shape
        ((2, 4), (4, 3))
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        bound = 1 / math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.weight.shape[1]:
            raise ValueError(
                f"Linear: input {x.shape} does not fit weight {self.weight.shape}: "
                f"got last axis {x.shape[-1] if x.ndim else 'none'}, expected {self.weight.shape[1]}"
            )
        return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
    """Convolution over len(kernel_size) spatial axes (2 for an int): (N, C_in, *in) -> (N, C_out, *out).

    weight (C_out, C_in/groups, *kernel_size), bias (C_out,), both U(-b, b) with b = 1/sqrt(C_in * prod(kernel_size))
    (the reference does not divide C_in by groups). padding: an int, one per axis, 2 per axis (F.pad order) or
    "same"/"valid".

    Args:
        in_channels: C_in, the size of x's axis 1.
        out_channels: C_out.
        kernel_size: an int (2 spatial axes) or one size per spatial axis.
        stride: an int or one per axis.
        padding: an int, one per axis, 2 per axis (F.pad order), or "same"/"valid".
        dilation: an int or one per axis.
        groups: split the channels into this many independent groups (divides C_in and C_out).
        bias: whether to add a bias.

    Raises:
        ValueError: groups that do not divide the channels, another padding string, or "same" with a stride other
            than 1; when called, a channel or rank mismatch.

    Examples:
        >>> Conv2d(1, 4, 3)(Tensor.ones(1, 1, 5, 5)).shape
        (1, 4, 3, 3)
        >>> Conv2d(2, 4, 3, padding="same", groups=2)(Tensor.ones(1, 2, 5, 5)).shape
        (1, 4, 5, 5)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, ...] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"Conv2d: groups must divide both channel counts: got groups={groups}, "
                f"in_channels={in_channels}, out_channels={out_channels}"
            )
        self.kernel_size = _tuple(kernel_size, 2)
        _check_padding_string(padding, stride)
        self.stride, self.dilation, self.groups, self.padding = stride, dilation, groups, padding
        bound = 1 / math.sqrt(in_channels * prod(self.kernel_size))
        self.weight = _uniform(self._weight_shape(in_channels, out_channels, groups), bound)
        self.bias = _uniform((out_channels,), bound) if bias else None

    def _weight_shape(self, in_channels: int, out_channels: int, groups: int) -> tuple[int, ...]:
        return (out_channels, in_channels // groups, *self.kernel_size)

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


def Conv1d(  # noqa: N802  # the reference spells this factory like a class
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    stride: int = 1,
    padding: int | str = 0,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = True,
) -> Conv2d:
    """A Conv2d with one spatial axis: (N, C_in, L) -> (N, C_out, L_out); weight (C_out, C_in/groups, kernel_size).

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel_size: the kernel's length.
        stride: the step between outputs.
        padding: zeros added at both ends, or "same"/"valid".
        dilation: the spacing of the kernel's taps.
        groups: independent channel groups.
        bias: whether to add a bias.

    Returns:
        The layer (a Conv2d over one spatial axis).

    Examples:
        >>> Conv1d(2, 3, 5)(Tensor.ones(1, 2, 10)).shape
        (1, 3, 6)
    """
    return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


class ConvTranspose2d(Conv2d):
    """Transposed convolution: (N, C_in, *in) -> (N, C_out, *out), out = (in-1)*stride - 2*padding
    + dilation*(k-1) + output_padding + 1.

    weight (C_in, C_out/groups, *kernel_size), bias (C_out,), both U(-b, b) with b = 1/sqrt(C_in * prod(kernel_size)).

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel_size: an int (2 spatial axes) or one size per spatial axis.
        stride: an int or one per axis.
        padding: an int or one per axis, taken off the output's borders.
        output_padding: added to one side of the output (picks among the sizes a stride allows).
        dilation: an int or one per axis.
        groups: independent channel groups.
        bias: whether to add a bias.

    Raises:
        ValueError: like `Conv2d`.

    Examples:
        >>> ConvTranspose2d(4, 2, 3, stride=2)(Tensor.ones(1, 4, 5, 5)).shape
        (1, 2, 11, 11)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] = 0,
        output_padding: int | tuple[int, ...] = 0,
        dilation: int | tuple[int, ...] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        self.output_padding = output_padding

    def _weight_shape(self, in_channels: int, out_channels: int, groups: int) -> tuple[int, ...]:
        return (in_channels, out_channels // groups, *self.kernel_size)  # transposed: input channels lead

    def __call__(self, x: Tensor) -> Tensor:
        if isinstance(self.padding, str):
            raise ValueError(f"ConvTranspose2d: padding must be an int or ints: got {self.padding!r}, expected ints")
        return x.conv_transpose2d(
            self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding, self.output_padding
        )


def ConvTranspose1d(  # noqa: N802  # the reference spells this factory like a class
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = True,
) -> ConvTranspose2d:
    """A ConvTranspose2d with one spatial axis: (N, C_in, L) -> (N, C_out, L_out).

    Args:
        in_channels: C_in.
        out_channels: C_out.
        kernel_size: the kernel's length.
        stride: the upsampling step.
        padding: taken off both ends of the output.
        output_padding: added to the output's end.
        dilation: the spacing of the kernel's taps.
        groups: independent channel groups.
        bias: whether to add a bias.

    Returns:
        The layer (a ConvTranspose2d over one spatial axis).

    Examples:
        >>> ConvTranspose1d(2, 3, 4, stride=2)(Tensor.ones(1, 2, 5)).shape
        (1, 3, 12)
    """
    return ConvTranspose2d(
        in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias
    )


class BatchNorm:
    """Batch normalisation over every axis but 1: (N, C, *) -> (N, C, *), for any number of trailing axes.

    While `Tensor.training` it normalises with the batch's mean and biased variance and, if track_running_stats,
    moves running_mean/running_var toward them by `momentum` (the variance unbiased, as torch) and counts
    num_batches_tracked. Otherwise it uses the running statistics (or the batch's, without track_running_stats).
    weight (C,) starts at 1, bias (C,) at 0 (both None without affine).

    Args:
        sz: C, the number of channels (axis 1).
        eps: added to the variance.
        affine: learn a per-channel scale and shift.
        track_running_stats: keep running_mean/running_var for evaluation.
        momentum: how far each training batch moves the running statistics.

    Raises:
        ValueError: (when called) axis 1 is not C, or in training a channel has only one value.

    Examples:
        >>> norm = BatchNorm(2)
        >>> with Tensor.train():
        ...     y = norm(Tensor([[1.0, 10.0], [3.0, 30.0]]))
        >>> y.numpy().round(3).tolist(), norm.running_mean.tolist()  # batch mean (2, 20), momentum 0.1
        ([[-1.0, -1.0], [1.0, 1.0]], [0.2..., 2.0])
    """

    def __init__(
        self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1
    ) -> None:
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        self.weight: Tensor | None = _filled((sz,), 1.0) if affine else None
        self.bias: Tensor | None = _filled((sz,), 0.0) if affine else None
        self.num_batches_tracked = _filled((), 0, dtypes.int64).requires_grad_(False)
        self.running_mean: Tensor | None = None
        self.running_var: Tensor | None = None
        if track_running_stats:
            self.running_mean = _filled((sz,), 0.0).requires_grad_(False)
            self.running_var = _filled((sz,), 1.0).requires_grad_(False)
        self.sz = sz

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The batch's per-channel mean and biased variance, each (C,).

        Args:
            x: a batch (N, C, *).

        Returns:
            (mean, variance), each (C,).

        Examples:
            >>> mean, var = BatchNorm(2).calc_stats(Tensor([[1.0, 10.0], [3.0, 30.0]]))
            >>> mean.tolist(), var.tolist()
            ([2.0, 20.0], [1.0, 100.0])
        """
        axes = (0, *range(2, x.ndim))
        mean = x.mean(axes)
        # the centring uses the detached mean: d var/d mean = -2 * mean(x - mean) = 0, so this only prunes the graph
        centred = x - mean.detach().reshape(1, -1, *[1] * (x.ndim - 2))
        return mean, (centred * centred).mean(axes)

    def __call__(self, x: Tensor) -> Tensor:
        _check_channels("BatchNorm", x, self.sz)
        if self.running_mean is not None and self.running_var is not None and not Tensor.training:
            mean, var = self.running_mean, self.running_var
        else:
            mean, var = self.calc_stats(x)
            if Tensor.training and self.running_mean is not None and self.running_var is not None:
                self._update_running_stats(x, mean, var)
        return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())

    def _update_running_stats(self, x: Tensor, mean: Tensor, var: Tensor) -> None:
        assert self.running_mean is not None, "called only when running stats are tracked"
        assert self.running_var is not None, "called only when running stats are tracked"
        n = x.numel() // x.shape[1]
        if n < 2:
            raise ValueError(f"BatchNorm: training needs more than one value per channel: got input {x.shape}")
        m = self.momentum
        self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
        self.running_var.assign((1 - m) * self.running_var + m * (n / (n - 1)) * var.detach())
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalise over the trailing axes given by normalized_shape, then scale and shift: shape kept.

    weight starts at 1, bias at 0, both shaped normalized_shape (None without elementwise_affine).

    Args:
        normalized_shape: the trailing axes to normalise over (an int for the last one).
        eps: added to the variance.
        elementwise_affine: learn a scale and shift of shape normalized_shape.

    Raises:
        ValueError: (when called) x's trailing axes differ from normalized_shape.

    Examples:
        >>> LayerNorm(2)(Tensor([[1.0, 3.0], [0.0, 10.0]])).numpy().round(3).tolist()
        [[-1.0, 1.0], [-1.0, 1.0]]
    """

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
        self.normalized_shape = _tuple(normalized_shape, 1)
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps = eps
        self.weight = _filled(self.normalized_shape, 1.0) if elementwise_affine else None
        self.bias = _filled(self.normalized_shape, 0.0) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.ndim < n or x.shape[x.ndim - n :] != self.normalized_shape:
            raise ValueError(
                f"{type(self).__name__}: input {x.shape} does not end in normalized_shape: "
                f"got {x.shape}, expected (..., {', '.join(map(str, self.normalized_shape))})"
            )
        x = x.layernorm(self.axis, self.eps)
        if self.weight is None or self.bias is None:
            return x
        return x * self.weight + self.bias


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels of (N, C, H, W) at each position: normalized_shape is C.

    Args:
        normalized_shape: C, the number of channels.
        eps: added to the variance.
        elementwise_affine: learn a per-channel scale and shift.

    Raises:
        ValueError: (when called) x is not 4-d, or its axis 1 is not C.

    Examples:
        >>> LayerNorm2d(3)(Tensor.randn(2, 3, 4, 4)).shape
        (2, 3, 4, 4)
    """

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ValueError(f"LayerNorm2d: expected a 4-d (N, C, H, W) input: got {x.shape}")
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class RMSNorm:
    """x / sqrt(mean(x^2 over the last axis) + eps) * weight, computed in float32 and cast back: shape kept.

    weight (dim,) starts at 1 (None without elementwise_affine).

    Args:
        dim: the size of the last axis.
        eps: added to the mean square.
        elementwise_affine: learn a scale of shape (dim,).

    Raises:
        ValueError: (when called) the last axis of x is not dim.

    Examples:
        >>> RMSNorm(2)(Tensor([[3.0, 4.0]])).tolist()  # x / 3.536 (the root mean square)
        [[0.848..., 1.131...]]
    """

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        self.eps = eps
        self.weight = _filled((dim,), 1.0) if elementwise_affine else None
        self.dim = dim

    def _norm(self, x: Tensor) -> Tensor:
        return x * ((x * x).mean(-1, keepdim=True) + self.eps).rsqrt()

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.dim:
            raise ValueError(f"RMSNorm: input does not fit the last axis: got {x.shape}, expected (..., {self.dim})")
        out = self._norm(x.float()).cast(x.dtype)
        return out if self.weight is None else out * self.weight


class GroupNorm:
    """Normalise each sample of (N, C, *) in num_groups groups, then scale and shift per channel. weight (C,) starts
    at 1, bias (C,) at 0 (None without affine).

    As in the reference (0.14), a sample's C*prod(*) values, flattened channel-major, are cut into num_groups equal
    runs and each run is normalised on its own. When num_groups divides C a run is C/num_groups whole channels
    (torch's GroupNorm); otherwise a run may split a channel or span several, e.g. GroupNorm(32, 16) on
    (N, 16, 4, 4) normalises each half channel.

    Args:
        num_groups: how many groups to normalise separately (>= 1).
        num_channels: C.
        eps: added to the variance.
        affine: learn a per-channel scale and shift.

    Raises:
        ValueError: num_groups < 1; when called, num_groups does not divide a sample's C*prod(*) values, or (with
            affine) axis 1 of x is not C.

    Examples:
        >>> GroupNorm(2, 4)(Tensor.randn(3, 4, 5)).shape
        (3, 4, 5)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_groups < 1:
            raise ValueError(f"GroupNorm: num_groups must be positive: got {num_groups}, expected at least 1")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = _filled((num_channels,), 1.0) if affine else None
        self.bias = _filled((num_channels,), 0.0) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if self.weight is not None or self.bias is not None:
            # only the per-channel affine needs C channels; without it the reference groups any (N, *) input
            _check_channels("GroupNorm", x, self.num_channels)
        self._check_groups(x)
        # (N, *) -> (N, groups, prod(*)/groups) -> normalise the last axis -> (N, *)
        x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
        return _affine_channels(x, self.weight, self.bias)

    def _check_groups(self, x: Tensor) -> None:
        """ValueError unless each sample's values split into num_groups equal runs (symbolic sizes pass through)."""
        if x.ndim < 1:
            raise ValueError(f"GroupNorm: input must have a batch axis: got shape {x.shape}, expected (N, C, ...)")
        per_sample = prod(x.shape[1:])
        if isinstance(per_sample, int) and per_sample % self.num_groups:
            raise ValueError(
                f"GroupNorm: {per_sample} values per sample of input {x.shape} do not split into "
                f"{self.num_groups} groups: got {self.num_groups} groups, expected a divisor of {per_sample}"
            )


class InstanceNorm:
    """Normalise each (sample, channel) of (N, C, *) over its spatial axes, then scale and shift per channel.
    weight (C,) starts at 1, bias (C,) at 0 (None without affine; the reference's default is affine=True, torch's
    False).

    Args:
        num_features: C.
        eps: added to the variance.
        affine: learn a per-channel scale and shift.

    Raises:
        ValueError: (when called) axis 1 of x is not C.

    Examples:
        >>> InstanceNorm(1)(Tensor([[[1.0, 3.0]]])).numpy().round(3).tolist()
        [[[-1.0, 1.0]]]
    """

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
        self.num_features, self.eps = num_features, eps
        self.weight = _filled((num_features,), 1.0) if affine else None
        self.bias = _filled((num_features,), 0.0) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        _check_channels("InstanceNorm", x, self.num_features)
        x = x.reshape(x.shape[0], x.shape[1], -1).layernorm(eps=self.eps).reshape(x.shape)
        return _affine_channels(x, self.weight, self.bias)


def _affine_channels(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """x * weight + bias with (C,) parameters laid along axis 1 of (N, C, *)."""
    shape = (1, x.shape[1], *[1] * (x.ndim - 2))
    if weight is not None:
        x = x * weight.reshape(shape)
    return x if bias is None else x + bias.reshape(shape)


class Embedding:
    """Look up rows of weight: int indices (*) -> (*, embed_size).

    weight (vocab_size, embed_size) starts Glorot-uniform. As in the reference, an index outside [0, vocab_size) gives
    a row of zeros (checking would read the indices back from the device).

    Args:
        vocab_size: how many rows (valid indices 0..vocab_size-1).
        embed_size: the length of each row.

    Raises:
        TypeError: (when called) indices that are not integers.

    Examples:
        >>> embedding = Embedding(10, 4)
        >>> out = embedding(Tensor([[1, 2]]))
        >>> out.shape, out[0, 1].tolist() == embedding.weight[2].tolist()
        ((1, 2, 4), True)
    """

    def __init__(self, vocab_size: int, embed_size: int) -> None:
        self.vocab_sz, self.embed_sz = vocab_size, embed_size
        self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

    def __call__(self, idx: Tensor) -> Tensor:
        if not dtypes.is_int(idx.dtype):
            raise TypeError(f"Embedding: indices must be integers: got {idx.dtype}, expected an int dtype")
        # (*, 1) == (vocab,) -> one-hot (*, vocab, 1); selecting rows of (vocab, embed) and summing -> (*, embed)
        hits = idx.unsqueeze(-1) == Tensor.arange(self.vocab_sz, device=self.weight.device)
        return hits.unsqueeze(-1).where(self.weight, 0).sum(-2).cast(self.weight.dtype)


class LSTMCell:
    """One LSTM step: x (B, input_size), (h, c) each (B, hidden_size) -> (h', c'); zeros when hc is None.

    Gates in torch's order (input, forget, cell, output); weight_ih (4H, input_size) and weight_hh (4H, H) start
    U(-1/sqrt(H), 1/sqrt(H)), bias_ih and bias_hh (4H,) at 0 as in the reference (None without bias).
    Args:
        input_size: the size of x's last axis.
        hidden_size: H, the size of h and c.
        bias: whether to add the two biases.

    Raises:
        ValueError: (when called) mis-shaped x, h or c.

    Examples:
        >>> h, c = LSTMCell(3, 5)(Tensor.randn(2, 3))
        >>> h.shape, c.shape
        ((2, 5), (2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((hidden_size * 4, input_size), bound)
        self.weight_hh = _uniform((hidden_size * 4, hidden_size), bound)
        self.bias_ih = _filled((hidden_size * 4,), 0.0) if bias else None
        self.bias_hh = _filled((hidden_size * 4,), 0.0) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        hidden, input_size = self.weight_hh.shape[1], self.weight_ih.shape[1]
        if x.ndim != 2 or x.shape[1] != input_size:
            raise ValueError(f"LSTMCell: input x is mis-shaped: got {x.shape}, expected (B, {input_size})")
        if hc is None:
            zeros = Tensor.zeros(x.shape[0], hidden, dtype=x.dtype, device=x.device)
            hc = (zeros, zeros)
        for name, t in zip(("h", "c"), hc, strict=True):
            if t.shape != (x.shape[0], hidden):
                raise ValueError(
                    f"LSTMCell: state {name} is mis-shaped: got {t.shape}, expected ({x.shape[0]}, {hidden})"
                )
        h, c = hc
        # (B, in) @ (in, 4H) + (B, H) @ (H, 4H) -> (B, 4H) -> four (B, H) gates
        gates = x.linear(self.weight_ih.transpose(), self.bias_ih) + h.linear(self.weight_hh.transpose(), self.bias_hh)
        i, f, g, o = gates.chunk(4, 1)
        new_c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        new_h = o.sigmoid() * new_c.tanh()
        return new_h.contiguous(), new_c.contiguous()


# the reference's layout: `from fusegrad.nn import optim, state, datasets` next to the layers (imported last: the
# submodules import the layers above)
from fusegrad.nn import datasets, optim, state  # noqa: E402
