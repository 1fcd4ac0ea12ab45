"""Tensor methods: neural-network functionals: conv, pooling, normalisation, attention, losses.

Everything here is composed from the core's movement, elementwise and reduce ops, so the scheduler sees one graph and
fuses it: a convolution is a windowed view of the padded input (`_pool`, movement ops only) times the weight, summed
over (channels, *kernel) in a single reduce kernel. Spatial ops work on any number of trailing spatial axes.
"""

# ^ methods annotate `self: Tensor` (a subclass of this mixin), which mypy reports as [misc]; nothing else here is misc

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from fusegrad.dtype import DTypeLike, dtypes, least_upper_dtype
from fusegrad.errors import OpValueError
from fusegrad.helpers import ceildiv, prod
from fusegrad.mixin import traced

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor

ReductionStr = Literal["mean", "sum", "none"]
Padding = int | Sequence[int]


class NNMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()

    # *** windows ***

    def _pool(
        self: Tensor, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1
    ) -> Tensor:
        """Sliding windows over the last len(k_) axes, as a view: (..., *in) -> (..., *out, *k_).

        out = ceil((in - dilation*(k-1)) / stride); window element [o, j] is input[o*stride + j*dilation].
        """
        n = len(k_)
        s_, d_ = _per_axis("pool", stride, n, "stride"), _per_axis("pool", dilation, n, "dilation")
        if self.ndim < n:
            raise ValueError(f"pool: kernel {k_} needs at least {n} axes, got shape {self.shape}")
        x, lead = self, self.ndim - n
        for j, (k, s, d) in enumerate(zip(k_, s_, d_, strict=True)):
            # each spatial axis becomes a (k, out) pair in place, so axis lead+j lands at lead+2*j
            x = x._window_axis(lead + 2 * j, k, s, d)
        outs = [lead + 2 * j + 1 for j in range(n)]
        kernels = [lead + 2 * j for j in range(n)]
        return x.permute(*range(lead), *outs, *kernels)

    def _window_axis(self: Tensor, axis: int, k: int, s: int, d: int) -> Tensor:
        """One axis of `_pool`: (.., in, ..) -> (.., k, out, ..) by laying copies of the axis end to end.

        With the axis padded to `span` (>= in) and copies read in rows of span+d, row j starts j*d later: element
        [j, t] is x[(j*(span+d) + t) mod span] = x[j*d + t], since j*d + t < in for every valid window.
        """
        size = self.shape[axis]
        if k < 1 or s < 1 or d < 1 or d * (k - 1) + 1 > size:
            raise OpValueError(f"pool: kernel {k} (stride {s}, dilation {d}) does not fit an axis of size {size}")
        out = ceildiv(size - d * (k - 1), s)
        span = max(size, out * s)
        copies = ceildiv(k * (span + d), span)
        before, after = self.shape[:axis], self.shape[axis + 1 :]
        x = self.pad(_on_axis(self.ndim, axis, (0, span - size)))
        x = x.reshape(*before, 1, span, *after).expand(*before, copies, span, *after).reshape(*before, -1, *after)
        x = x.shrink(_on_axis(x.ndim, axis, (0, k * (span + d)))).reshape(*before, k, span + d, *after)
        # keep every s-th start: (k, out*s) -> (k, out, s) -> (k, out, 1)
        x = x.shrink(_on_axis(x.ndim, axis + 1, (0, out * s))).reshape(*before, k, out, s, *after)
        return x.shrink(_on_axis(x.ndim, axis + 2, (0, 1))).reshape(*before, k, out, *after)

    def _zero_stuff(self: Tensor, stride: tuple[int, ...], pads: list[tuple[int, int]]) -> Tensor:
        """Insert stride-1 zeros between neighbours of the trailing axes, then pad (or crop, if negative) by `pads`:
        in -> before + (in-1)*stride + 1 + after.

        The padding is applied to the input before the zeros go in and the rest is cropped afterwards, so every index
        stays non-negative and the kernel's div/mod index arithmetic simplifies.
        """
        lead = self.ndim - len(stride)
        front = [ceildiv(max(b, 0), s) for s, (b, _) in zip(stride, pads, strict=True)]
        back = [ceildiv(max(a, 0), s) for s, (_, a) in zip(stride, pads, strict=True)]
        x = self.pad([*[None] * lead, *zip(front, back, strict=True)])
        for j, s in enumerate(stride):
            if s == 1:
                continue
            axis = lead + j
            # (.., n, ..) -> (.., n, 1, ..) -> (.., n, s, ..) zero-padded -> (.., n*s, ..)
            x = x.reshape(*x.shape[: axis + 1], 1, *x.shape[axis + 1 :])
            x = x.pad(_on_axis(x.ndim, axis + 1, (0, s - 1))).reshape(*x.shape[:axis], -1, *x.shape[axis + 2 :])
        crops = []
        for size, s, f, (b, a) in zip(self.shape[lead:], stride, front, pads, strict=True):
            start = f * s - b
            crops.append((start, start + b + (size - 1) * s + 1 + a))
        return x.shrink([*[None] * lead, *crops])

    # *** convolution ***

    @traced
    def conv2d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | tuple[int, ...] = 1,
        dilation: int | tuple[int, ...] = 1,
        padding: Padding | str = 0,
        dtype: DTypeLike | None = None,
    ) -> Tensor:
        """Convolution (cross-correlation, as torch) over any number of spatial axes.

        (B, C_in, *in) with weight (C_out, C_in/groups, *k) -> (B, C_out, *out); bias (C_out,). `padding` is an int,
        one int per spatial axis, 2 per axis ordered (left, right, top, bottom, ...) as F.pad, or "valid"/"same".
        `dtype` is the accumulation dtype.

        Args:
            weight: (C_out, C_in/groups, *k).
            bias: (C_out,), or None.
            groups: independent channel groups.
            stride: an int or one per spatial axis.
            dilation: an int or one per spatial axis.
            padding: an int, one per axis, 2 per axis (F.pad order), or "valid"/"same".
            dtype: the accumulation dtype (default: the inputs').

        Returns:
            (B, C_out, *out).

        Raises:
            ValueError: the channels or ranks don't match.

        Examples:
            >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()  # each output sums a 2x2 window
            [[[[4.0, 4.0], [4.0, 4.0]]]]
        """
        _check_conv("conv2d", self, weight, bias, groups, transposed=False)
        k_ = weight.shape[2:]
        if isinstance(padding, str):
            pads = _named_pads(
                padding,
                k_,
                _per_axis("conv2d", stride, len(k_), "stride"),
                _per_axis("conv2d", dilation, len(k_), "dilation"),
            )
        else:
            pads = _spatial_pads("conv2d", padding, len(k_))
        return self._conv(weight, bias, groups, stride, dilation, pads, dtype)

    def _conv(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        groups: int,
        stride: int | tuple[int, ...],
        dilation: int | tuple[int, ...],
        pads: list[tuple[int, int]],
        dtype: DTypeLike | None,
    ) -> Tensor:
        """conv2d after argument checks; pads may be negative (conv_transpose2d crops with them)."""
        B = self.shape[0]
        c_out, c_group, *k = weight.shape
        n = len(k)
        x = self.pad([None, None, *pads])._pool(tuple(k), stride, dilation)  # (B, C_in, *out, *k)
        out = x.shape[2 : 2 + n]
        # (B, groups*C_group, *out, *k) -> (B, groups, 1, *out, C_group, *k): channels join the reduced window axes
        x = x.reshape(B, groups, c_group, 1, *out, *k)
        x = x.permute(0, 1, 3, *range(4, 4 + n), 2, *range(4 + n, 4 + 2 * n))
        w = weight.reshape(1, groups, c_out // groups, *[1] * n, c_group, *k)
        ret = (x * w).sum(tuple(range(-1 - n, 0)), dtype=dtype).reshape(B, c_out, *out)  # (B, C_out, *out)
        return ret if bias is None else ret + bias.reshape(1, c_out, *[1] * n)

    @traced
    def conv_transpose2d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | tuple[int, ...] = 1,
        dilation: int | tuple[int, ...] = 1,
        padding: Padding = 0,
        output_padding: int | tuple[int, ...] = 0,
    ) -> Tensor:
        """Transposed convolution (the gradient of conv2d w.r.t. its input) over any number of spatial axes.

        (B, C_in, *in) with weight (C_in, C_out/groups, *k) -> (B, C_out, *out),
        out = (in-1)*stride - pad_before - pad_after + dilation*(k-1) + output_padding + 1.

        Args:
            weight: (C_in, C_out/groups, *k).
            bias: (C_out,), or None.
            groups: independent channel groups.
            stride: an int or one per spatial axis.
            dilation: an int or one per spatial axis.
            padding: taken off the output's borders (an int, one per axis or 2 per axis).
            output_padding: added to the output's far side.

        Returns:
            (B, C_out, *out).

        Examples:
            >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2)).tolist()
            [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
        """
        _check_conv("conv_transpose2d", self, weight, bias, groups, transposed=True)
        c_in, c_group_out, *k = weight.shape
        n = len(k)
        s_, d_ = (
            _per_axis("conv_transpose2d", stride, n, "stride"),
            _per_axis("conv_transpose2d", dilation, n, "dilation"),
        )
        extra = _per_axis("conv_transpose2d", output_padding, n, "output_padding")
        pads = _spatial_pads("conv_transpose2d", padding, n)
        # the equivalent conv: weight (C_in, C_out/g, *k) -> (g*C_out/g, C_in/g, *k), flipped in space
        w = weight.reshape(groups, c_in // groups, c_group_out, *k).transpose(1, 2)
        w = w.reshape(groups * c_group_out, c_in // groups, *k).flip(tuple(range(2, 2 + n)))
        conv_pads = [
            (d * (kk - 1) - b, d * (kk - 1) - a + e) for kk, d, (b, a), e in zip(k, d_, pads, extra, strict=True)
        ]
        no_pads = [(0, 0)] * n
        return self._zero_stuff(s_, conv_pads)._conv(w, bias, groups, 1, d_, no_pads, None)

    # *** pooling ***

    @traced
    def avg_pool2d(
        self: Tensor,
        kernel_size: int | tuple[int, ...] = (2, 2),
        stride: int | tuple[int, ...] | None = None,
        dilation: int | tuple[int, ...] = 1,
        padding: Padding = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """Average over windows of the trailing len(kernel_size) axes (an int kernel means 2 axes); stride defaults
        to the kernel. Zero padding counts toward the average when count_include_pad; windows that ceil_mode adds past
        the padding never do.

        Args:
            kernel_size: the window, an int (2 axes) or one size per axis.
            stride: the step between windows (default: the kernel).
            dilation: the spacing of a window's taps.
            padding: zeros added around (an int, one per axis or 2 per axis).
            ceil_mode: add a last, partial window where the input does not divide evenly.
            count_include_pad: count padding zeros in the average.

        Returns:
            The pooled tensor.

        Examples:
            >>> Tensor.arange(16).reshape(1, 1, 4, 4).float().avg_pool2d().tolist()
            [[[[2.5, 4.5], [10.5, 12.5]]]]
        """
        k_, s_, d_, user, pads = self._pool_args("avg_pool2d", kernel_size, stride, dilation, padding, ceil_mode)
        axes = tuple(range(-len(k_), 0))
        windows = self.pad([*[None] * (self.ndim - len(k_)), *pads])._pool(k_, s_, d_)
        if count_include_pad and not ceil_mode:
            return windows.mean(axes)
        # the divisor counts window positions inside the input (plus the user's padding when it counts)
        counted = user if count_include_pad else [(0, 0)] * len(k_)
        spatial = [size + b + a for size, (b, a) in zip(self.shape[-len(k_) :], counted, strict=True)]
        dt = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
        ones = type(self).ones(*spatial, dtype=dt, device=self.device)
        ones = ones.pad([(b - cb, a - ca) for (b, a), (cb, ca) in zip(pads, counted, strict=True)])
        return windows.sum(axes) / ones._pool(k_, s_, d_).sum(axes)

    @traced
    def max_pool2d(
        self: Tensor,
        kernel_size: int | tuple[int, ...] = (2, 2),
        stride: int | tuple[int, ...] | None = None,
        dilation: int | tuple[int, ...] = 1,
        padding: Padding = 0,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Maximum over windows of the trailing len(kernel_size) axes (an int kernel means 2 axes).

        With return_indices, also the int32 flat index of each maximum within its input plane (the first one on ties),
        as torch's max_pool2d.

        Args:
            kernel_size: the window, an int (2 axes) or one size per axis.
            stride: the step between windows (default: the kernel).
            dilation: the spacing of a window's taps.
            padding: -inf added around (an int, one per axis or 2 per axis).
            ceil_mode: add a last, partial window where the input does not divide evenly.
            return_indices: also return where each maximum came from.

        Returns:
            The pooled tensor, or (pooled, indices) with return_indices.

        Examples:
            >>> x = Tensor.arange(16).reshape(1, 1, 4, 4).float()
            >>> x.max_pool2d().tolist()
            [[[[5.0, 7.0], [13.0, 15.0]]]]
            >>> x.max_pool2d(return_indices=True)[1].tolist()
            [[[[5, 7], [13, 15]]]]
        """
        k_, s_, d_, _, pads = self._pool_args("max_pool2d", kernel_size, stride, dilation, padding, ceil_mode)
        axes, lead = tuple(range(-len(k_), 0)), [None] * (self.ndim - len(k_))
        windows = self.pad([*lead, *pads], value=dtypes.min(self.dtype))._pool(k_, s_, d_)
        best = windows.max(axes, keepdim=True)
        if not return_indices:
            return best.reshape(best.shape[: -len(k_)])
        spatial = self.shape[-len(k_) :]
        plane = prod(spatial)
        # every window position's flat index; padding gets `plane`, larger than any real index
        flat = type(self).arange(plane, device=self.device).reshape(*spatial).pad(pads, value=plane)._pool(k_, s_, d_)
        indices = (windows == best).where(flat, plane).min(axes)
        return best.reshape(best.shape[: -len(k_)]), indices

    @traced
    def max_unpool2d(
        self: Tensor,
        indices: Tensor,
        kernel_size: int | tuple[int, ...] = (2, 2),
        stride: int | tuple[int, ...] | None = None,
        dilation: int | tuple[int, ...] = 1,
        padding: Padding = 0,
        output_size: Sequence[int] | None = None,
    ) -> Tensor:
        """The partial inverse of max_pool2d: (B, C, *pooled) values scattered to their `indices`, zeros elsewhere.

        The output size is the pooling's input size (or the trailing entries of `output_size`).

        Args:
            indices: max_pool2d's indices (return_indices=True).
            kernel_size: the pooling's window.
            stride: the pooling's stride (default: the kernel).
            dilation: the pooling's dilation.
            padding: the pooling's padding.
            output_size: the size to restore (default: computed from the pooling's arguments).

        Returns:
            (B, C, *unpooled).

        Raises:
            TypeError: indices that are not integers.
            ValueError: indices or output_size whose shape does not fit.

        Examples:
            >>> pooled, indices = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(return_indices=True)
            >>> pooled.max_unpool2d(indices).tolist()
            [[[[0.0, 0.0], [0.0, 4.0]]]]
        """
        if indices.shape != self.shape:
            raise ValueError(f"max_unpool2d: indices shape {indices.shape} does not match values shape {self.shape}")
        if not dtypes.is_int(indices.dtype):
            raise TypeError(f"max_unpool2d: indices must be an integer tensor, got {indices.dtype}")
        B, C, *pooled = self.shape
        if output_size is None:
            n = len(pooled)
            k_ = _per_axis("max_unpool2d", kernel_size, n, "kernel_size")
            s_ = k_ if stride is None else _per_axis("max_unpool2d", stride, n, "stride")
            d_ = _per_axis("max_unpool2d", dilation, n, "dilation")
            pads = _spatial_pads("max_unpool2d", padding, n)
            sizes = [
                (i - 1) * s - b - a + d * (k - 1) + 1
                for i, k, s, d, (b, a) in zip(pooled, k_, s_, d_, pads, strict=True)
            ]
        else:
            sizes = list(output_size)[-len(pooled) :]
        plane = prod(sizes)
        # (B, C, P, 1) == (plane,) -> one-hot (B, C, P, plane); summing over P puts each value at its index
        hits = indices.reshape(B, C, -1, 1) == type(self).arange(plane, device=self.device)
        return hits.where(self.reshape(B, C, -1, 1), 0).sum(2).cast(self.dtype).reshape(B, C, *sizes)

    def _pool_args(
        self: Tensor,
        op: str,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, ...] | None,
        dilation: int | tuple[int, ...],
        padding: Padding,
        ceil_mode: bool,
    ) -> _PoolArgs:
        """(kernel, stride, dilation, user pads, effective pads): effective pads yield exactly torch's output size."""
        k_ = _per_axis(op, kernel_size, 2 if isinstance(kernel_size, int) else len(kernel_size), "kernel_size")
        n = len(k_)
        if self.ndim < n:
            raise ValueError(f"{op}: kernel {k_} needs at least {n} axes, got shape {self.shape}")
        s_ = k_ if stride is None else _per_axis(op, stride, n, "stride")
        d_ = _per_axis(op, dilation, n, "dilation")
        user = _spatial_pads(op, padding, n)
        pads = []
        for size, k, s, d, (b, a) in zip(self.shape[-n:], k_, s_, d_, user, strict=True):
            starts = size + b + a - d * (k - 1) - 1  # the last position a window can start at
            if starts < 0:
                raise OpValueError(f"{op}: kernel {k_} (dilation {d_}) is larger than the padded input {self.shape}")
            out = (ceildiv(starts, s) if ceil_mode else starts // s) + 1
            if ceil_mode and (out - 1) * s >= size + b:
                out -= 1  # as torch: the last window must start inside the input or the leading padding
            pads.append((b, (out - 1) * s + d * (k - 1) + 1 - size - b))
        return k_, s_, d_, user, pads

    # *** resampling ***

    @traced
    def interpolate(self: Tensor, size: tuple[int, ...], mode: str = "linear", align_corners: bool = False) -> Tensor:
        """Resample the trailing len(size) axes to `size`: mode "linear" (bilinear, trilinear for 2 or 3 axes),
        "nearest" or "nearest-exact", as torch's F.interpolate.

        Args:
            size: the new sizes of the trailing axes.
            mode: "linear", "nearest" or "nearest-exact".
            align_corners: (linear) map the corner samples onto each other.

        Returns:
            The resampled tensor.

        Raises:
            ValueError: a size longer than the tensor's rank, or an unknown mode.

        Examples:
            >>> Tensor([[1.0, 3.0]]).interpolate((4,)).tolist()
            [[1.0, 1.5, 2.5, 3.0]]
        """
        if (
            not isinstance(size, (tuple, list))
            or not 0 < len(size) <= self.ndim
            or not all(isinstance(s, int) and s > 0 for s in size)
        ):
            raise ValueError(f"interpolate: size must be 1..{self.ndim} positive ints, got {size}")
        if mode not in ("linear", "nearest", "nearest-exact"):
            raise ValueError(f"interpolate: mode must be linear, nearest or nearest-exact, got {mode!r}")
        if align_corners and mode != "linear":
            raise ValueError(f"interpolate: align_corners needs mode 'linear', got {mode!r}")
        x = self
        if mode == "linear" and not align_corners and self.dtype == dtypes.uint8:  # torch's fixed-point path
            for axis, out in reversed(list(zip(range(self.ndim - len(size), self.ndim), size, strict=True))):
                x = x._linear_axis_uint8(axis, out)
            return x
        for axis, out in zip(range(self.ndim - len(size), self.ndim), size, strict=True):
            x = x._linear_axis(axis, out, align_corners) if mode == "linear" else x._nearest_axis(axis, out, mode)
        return x.cast(self.dtype)

    def _nearest_axis(self: Tensor, axis: int, out: int, mode: str) -> Tensor:
        """Nearest neighbour along one axis: source = floor(o * in/out) (or (o + 0.5) * in/out for nearest-exact)."""
        size = self.shape[axis]
        positions = type(self).arange(out, device=self.device).float()
        if mode == "nearest-exact":
            positions = positions + 0.5
        return self._take_axis(axis, (positions * (size / out)).cast(dtypes.int32).minimum(size - 1))

    def _linear_axis(self: Tensor, axis: int, out: int, align_corners: bool) -> Tensor:
        """Linear interpolation along one axis: a contraction with an (out, in) matrix holding the two weights per
        output; the source position num/den is kept as exact integers."""
        size = self.shape[axis]
        positions = type(self).arange(out, device=self.device)
        if align_corners:
            num, den = positions * (size - 1), max(out - 1, 1)
        else:
            # source = (o + 0.5) * size/out - 0.5, clamped to the first and last sample
            num, den = (positions * 2 + 1) * size - out, 2 * out
        num = num.maximum(0).minimum((size - 1) * den).reshape(out, 1)
        frac = (num % den).float() / den
        sources = type(self).arange(size, device=self.device).reshape(1, size)
        # (out, in): 1-frac at floor(source), frac at ceil(source) (their sum where both are the same sample)
        weights = (sources == num // den).where(1 - frac, 0) + (sources == (num + den - 1) // den).where(frac, 0)
        weights = weights.reshape(out, size, *[1] * (self.ndim - axis - 1))
        return (self.unsqueeze(axis) * weights).sum(axis + 1)

    def _linear_axis_uint8(self: Tensor, axis: int, out: int) -> Tensor:
        """Linear interpolation of a uint8 tensor along one axis as torch computes it: integer weights with
        `precision` fraction bits, the sum rounded and clamped back to uint8. torch runs the last axis first and
        rounds after each axis; `interpolate` does the same, so every value matches torch's."""
        size = self.shape[axis]
        starts, firsts, seconds, precision = _uint8_linear_taps(size, out)
        tensor, device = type(self), self.device
        start = tensor(starts, dtype=dtypes.int32, device=device).reshape(out, 1)
        sources = tensor.arange(size, device=device).reshape(1, size)
        first = tensor(firsts, dtype=dtypes.int32, device=device).reshape(out, 1)
        second = tensor(seconds, dtype=dtypes.int32, device=device).reshape(out, 1)
        # (out, in): the two taps' weights at start and start + 1
        weights = (sources == start).where(first, 0) + (sources == start + 1).where(second, 0)
        weights = weights.reshape(out, size, *[1] * (self.ndim - axis - 1))
        total = (self.cast(dtypes.int32).unsqueeze(axis) * weights).sum(axis + 1, dtype=dtypes.int32)
        return ((total + (1 << (precision - 1))) >> precision).clamp(0, 255).cast(dtypes.uint8)

    def _take_axis(self: Tensor, axis: int, index: Tensor) -> Tensor:
        """Elements at the 1-d int `index` (length m) along `axis`: (.., n, ..) -> (.., m, ..), a one-hot select."""
        m, n = index.shape[0], self.shape[axis]
        hits = index.reshape(m, 1) == type(self).arange(n, device=self.device).reshape(1, n)
        hits = hits.reshape(m, n, *[1] * (self.ndim - axis - 1))
        return hits.where(self.unsqueeze(axis), 0).sum(axis + 1).cast(self.dtype)

    # *** normalisation and attention ***

    @traced
    def layernorm(self: Tensor, axis: int | tuple[int, ...] = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over `axis` (biased variance), without weight or bias.

        Args:
            axis: the axes to normalise over.
            eps: added to the variance.

        Returns:
            A tensor of the same shape.

        Examples:
            >>> Tensor([[1.0, 3.0]]).layernorm().tolist()
            [[-0.99999..., 0.99999...]]
        """
        centred = self - self.mean(axis, keepdim=True)
        return centred * ((centred * centred).mean(axis, keepdim=True) + eps).sqrt().reciprocal()

    @traced
    def batchnorm(
        self: Tensor,
        weight: Tensor | None,
        bias: Tensor | None,
        mean: Tensor,
        invstd: Tensor,
        axis: int | tuple[int, ...] = 1,
    ) -> Tensor:
        """(x - mean) * weight * invstd + bias, the statistics laid along `axis` (channels of NCHW by default).

        Args:
            weight: the per-channel scale, or None.
            bias: the per-channel shift, or None.
            mean: the per-channel mean.
            invstd: the per-channel 1 / sqrt(var + eps).
            axis: the axis (or axes) the statistics lie along.

        Returns:
            A tensor of the same shape.

        Examples:
            >>> x = Tensor([[1.0, 10.0], [3.0, 30.0]])  # (N, C)
            >>> x.batchnorm(None, None, Tensor([2.0, 20.0]), Tensor([1.0, 0.1])).tolist()
            [[-1.0, -1.0], [1.0, 1.0]]
        """
        axes = self._resolve_axes(axis, "batchnorm")
        shape = tuple(s if a in axes else 1 for a, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        x = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return x if bias is None else x + bias.reshape(shape)

    @traced
    def scaled_dot_product_attention(
        self: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        enable_gqa: bool = False,
    ) -> Tensor:
        """softmax(self @ key^T / sqrt(E) + mask) @ value; self (..., L, E), key (..., S, E), value (..., S, Ev).

        A bool mask keeps True; a float mask is added. is_causal masks the upper triangle (not with attn_mask); outside
        training the softmax and the product with value end their loops at the diagonal: values past it are never read.
        enable_gqa repeats the key/value heads (axis -3) to the query's. Scores accumulate in at least float32.

        Args:
            key: (..., S, E).
            value: (..., S, Ev).
            attn_mask: a bool mask (True keeps) or a float mask (added), broadcast to (..., L, S).
            dropout_p: the dropout probability of the attention weights (in training).
            is_causal: mask the upper triangle (position i attends to 0..i).
            enable_gqa: allow fewer key/value heads than query heads.

        Returns:
            (..., L, Ev).

        Raises:
            OpValueError: (a ValueError) is_causal together with attn_mask.
            ValueError: shapes that do not fit (heads, E, S).

        Examples:
            >>> q = Tensor.ones(1, 2, 4)
            >>> v = Tensor([[[1.0, 0, 0, 0], [0, 1.0, 0, 0]]])
            >>> q.scaled_dot_product_attention(q, v, is_causal=True).tolist()  # row 0 sees only position 0
            [[[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]]]
        """
        if not 0.0 <= dropout_p <= 1.0:
            raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1], got {dropout_p}")
        if enable_gqa:
            key, value = _repeat_heads(key, self.shape[-3]), _repeat_heads(value, self.shape[-3])
        acc = least_upper_dtype(self.dtype, key.dtype, dtypes.float32)
        scores = self.cast(acc).dot(key.cast(acc).transpose(-2, -1)) / math.sqrt(self.shape[-1])  # (..., L, S)
        if is_causal:
            if attn_mask is not None:
                raise OpValueError("scaled_dot_product_attention: attn_mask and is_causal=True cannot both be set")
            rows, cols = scores.shape[-2:]
            attn_mask = type(self).arange(rows, device=self.device).reshape(rows, 1) >= type(self).arange(
                cols, device=self.device
            )
        # outside training, masked products are never computed: the softmax's and PV's kernels end their loops at the
        # diagonal and values past it are never read (the score kernel computes every score: forcing the mask into it
        # with a contiguous saved ~6% but made a realized intermediate, and a forward read before backward then cut
        # q's and k's gradients; test_clip's realized_first case). In training the plain forms stay: the masks would
        # reach the gradient kernels (a select per multiply-add in dV = P^T dO), where nothing is skipped: forward and
        # backward at the GPT's (16, 4, 64, 32) took 2.8 -> 3.7 ms single-thread.
        skip_masked = is_causal and not type(self).training
        if attn_mask is None:
            probs = scores.cast(self.dtype).softmax(-1)
        elif skip_masked:  # the softmax's loops end at the diagonal (codegen/clip.py)
            masked = attn_mask.where(scores, -math.inf).cast(self.dtype)
            probs = _masked_softmax(masked, attn_mask, holds_mask=True)
        elif attn_mask.dtype == dtypes.bool:
            probs = _masked_softmax(scores.cast(self.dtype), attn_mask)
        else:  # a float mask's -inf (a causal LLM's) masks as a bool one does
            masked = (scores + attn_mask).cast(self.dtype)
            probs = _masked_softmax(masked, masked != -math.inf, holds_mask=True)
        if dropout_p > 0.0:
            probs = probs.dropout(dropout_p)  # only while Tensor.training
        if skip_masked and attn_mask is not None:
            # (..., L, 1, S) * (..., 1, Ev, S) with masked terms 0: the PV kernel's loop ends at the diagonal
            terms = probs.unsqueeze(-2) * value.transpose(-2, -1).unsqueeze(-3)
            return attn_mask.unsqueeze(-2).where(terms, 0.0).sum(-1)
        return probs.dot(value)

    # *** losses ***

    @traced
    def cross_entropy(
        self: Tensor, Y: Tensor, reduction: ReductionStr = "mean", label_smoothing: float = 0.0
    ) -> Tensor:
        """Cross entropy of logits (N, C, ...) (or (C,)) against class indices (N, ...) or probabilities (N, C, ...).

        Args:
            Y: class indices (N, ...) or probabilities (N, C, ...).
            reduction: "mean", "sum" or "none".
            label_smoothing: mix this much of the uniform distribution into the targets.

        Returns:
            The loss (a scalar, or per sample with reduction="none").

        Raises:
            OpValueError: (a ValueError and RuntimeError) Y fits neither shape.

        Examples:
            >>> round(Tensor([[1.0, 2.0]]).cross_entropy(Tensor([1])).item(), 4)  # log(1 + e^-1)
            0.3133
        """
        _check_smoothing("cross_entropy", label_smoothing)
        class_axis = 0 if self.ndim == 1 else 1
        classes = self.shape[class_axis]
        if Y.shape != self.shape:
            labels_shape = self.shape[:class_axis] + self.shape[class_axis + 1 :]
            if Y.shape != labels_shape:
                raise OpValueError(
                    f"cross_entropy: target shape {Y.shape} fits neither logits {self.shape} "
                    f"(probabilities) nor {labels_shape} (class indices)"
                )
            Y = _one_hot(Y, classes, class_axis).cast(self.dtype)
        target = Y * (1 - label_smoothing) + label_smoothing / classes
        return _reduce_loss("cross_entropy", -(self.log_softmax(class_axis) * target).sum(class_axis), reduction)

    @traced
    def sparse_categorical_crossentropy(
        self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: ReductionStr = "mean"
    ) -> Tensor:
        """Cross entropy of logits (..., C) (classes last, unlike torch) against int labels (...).

        Labels equal to ignore_index (other than the default -1) are left out of the loss and of the mean's count.

        Args:
            Y: int labels (...).
            ignore_index: a label to leave out.
            label_smoothing: mix this much of the uniform distribution into the targets.
            reduction: "mean", "sum" or "none".

        Returns:
            The loss.

        Raises:
            ValueError: an unknown reduction, or labels whose shape does not fit.

        Examples:
            >>> round(Tensor([[1.0, 2.0, 3.0]]).sparse_categorical_crossentropy(Tensor([2])).item(), 4)
            0.4076
        """
        _check_smoothing("sparse_categorical_crossentropy", label_smoothing)
        if Y.shape != self.shape[:-1]:
            raise ValueError(
                f"sparse_categorical_crossentropy: labels shape {Y.shape} does not match logits "
                f"{self.shape} without the class axis {self.shape[:-1]}"
            )
        log_probs = self.log_softmax(-1)
        keep = Y.ne(ignore_index) if ignore_index != -1 else type(self).full(Y.shape, True, device=Y.device)
        picked = (_one_hot(Y, self.shape[-1], -1) & keep.unsqueeze(-1)).where(log_probs, 0).sum(-1)
        per_item = picked * (1 - label_smoothing) + log_probs.mean(-1) * keep * label_smoothing
        if reduction == "mean":
            return -per_item.sum() / keep.sum()
        return _reduce_loss("sparse_categorical_crossentropy", -per_item, reduction)

    @traced
    def nll_loss(
        self: Tensor,
        Y: Tensor,
        weight: Tensor | None = None,
        ignore_index: int | None = None,
        reduction: ReductionStr = "mean",
    ) -> Tensor:
        """Negative log likelihood of log-probabilities (N, C, ...) (or (C,)) at int labels (N, ...), as torch.

        `weight` (C,) scales each class; labels equal to ignore_index count for nothing. "mean" divides by the total
        weight.

        Args:
            Y: int labels (N, ...).
            weight: (C,) per-class weights, or None.
            ignore_index: a label that counts for nothing, or None.
            reduction: "mean", "sum" or "none".

        Returns:
            The loss.

        Raises:
            ValueError: an unknown reduction, or shapes that do not fit.

        Examples:
            >>> Tensor([[-1.0, -2.0]]).nll_loss(Tensor([1])).item()
            2.0
        """
        class_axis = 0 if self.ndim == 1 else 1
        classes = self.shape[class_axis]
        if Y.shape != self.shape[:class_axis] + self.shape[class_axis + 1 :]:
            raise ValueError(f"nll_loss: labels shape {Y.shape} does not match log-probabilities {self.shape}")
        hits = _one_hot(Y, classes, class_axis)
        if weight is None:
            item_weight = type(self).ones(*Y.shape, dtype=self.dtype, device=self.device)
        else:
            item_weight = hits.where(weight.reshape(classes, *[1] * (Y.ndim - class_axis)), 0).sum(class_axis)
        if ignore_index is not None:
            item_weight = item_weight * Y.ne(ignore_index)
        nll = -hits.where(self, 0).sum(class_axis) * item_weight
        if reduction == "mean":
            return nll.sum() / item_weight.sum()
        return _reduce_loss("nll_loss", nll, reduction)

    @traced
    def binary_crossentropy(self: Tensor, Y: Tensor, reduction: ReductionStr = "mean") -> Tensor:
        """-(Y log p + (1-Y) log(1-p)) for probabilities p = self, as torch's BCELoss without its log clamp.

        Args:
            Y: targets in [0, 1], the same shape.
            reduction: "mean", "sum" or "none".

        Returns:
            The loss.

        Examples:
            >>> round(Tensor([0.5]).binary_crossentropy(Tensor([1.0])).item(), 4)  # log 2
            0.6931
        """
        return _reduce_loss("binary_crossentropy", -Y * self.log() - (1 - Y) * (1 - self).log(), reduction)

    @traced
    def binary_crossentropy_logits(
        self: Tensor, Y: Tensor, reduction: ReductionStr = "mean", pos_weight: Tensor | None = None
    ) -> Tensor:
        """binary_crossentropy of sigmoid(self), computed stably from the logits; pos_weight scales the Y=1 term.

        Args:
            Y: targets in [0, 1], the same shape.
            reduction: "mean", "sum" or "none".
            pos_weight: a weight for the positive term, broadcast to Y (None: 1).

        Returns:
            The loss.

        Examples:
            >>> round(Tensor([0.0, 100.0]).binary_crossentropy_logits(Tensor([1.0, 1.0]), reduction="sum").item(), 4)
            0.6931
        """
        positive = Y * self.logsigmoid()
        if pos_weight is not None:
            positive = positive * pos_weight
        return _reduce_loss("binary_crossentropy_logits", -(positive + (1 - Y) * (-self).logsigmoid()), reduction)

    # *** einsum ***

    @classmethod
    @traced
    def einsum(
        cls: type[Tensor], formula: str, *operands: Tensor | Sequence[Tensor], dtype: DTypeLike | None = None
    ) -> Tensor:
        """Einstein summation, as torch.einsum: "ij,jk->ik" is a matmul, "ii->i" a diagonal, "...ij->...ji" a batched
        transpose. Without "->" the output holds the ellipsis axes, then the letters used once, in alphabetical order.
        Letters of size 1 broadcast; operands may be passed as one list; `dtype` is the accumulation dtype.

        One fused kernel: every operand is laid out over all the formula's letters and the broadcast product is summed
        over the letters missing from the output.

        Args:
            formula: the subscripts, e.g. "ij,jk->ik".
            *operands: one tensor per operand term (or one list of them).
            dtype: the accumulation dtype.

        Returns:
            The result, with the output letters' axes.

        Raises:
            OpValueError: (a ValueError and RuntimeError) a malformed formula, a wrong operand count or rank, or sizes
                that differ for one letter.
            TypeError: an operand that is not a Tensor.

        Examples:
            >>> a, v = Tensor([[1.0, 2.0], [3.0, 4.0]]), Tensor([1.0, 1.0])
            >>> Tensor.einsum("ij,j->i", a, v).tolist(), Tensor.einsum("ii", a).item()
            ([3.0, 7.0], 5.0)
        """
        tensors = [t for op in operands for t in (op if isinstance(op, (list, tuple)) else (op,))]
        if not all(isinstance(t, cls) for t in tensors):
            raise TypeError(f"einsum: operands must be Tensors, got {[type(t).__name__ for t in tensors]}")
        inputs, output = _einsum_parse(formula, tensors)
        views = [_einsum_diagonals(t, labels, formula) for t, labels in zip(tensors, inputs, strict=True)]
        sizes = _einsum_sizes(formula, views)
        summed = [label for label in sizes if label not in output]
        order = [*output, *summed]
        # each operand: (its letters) -> permuted to `order`, with a size-1 axis for every letter it lacks
        laid_out = []
        for t, labels in views:
            x = t.permute(*sorted(range(len(labels)), key=lambda a: order.index(labels[a])))
            present = sorted(labels, key=order.index)
            laid_out.append(x.reshape(*[x.shape[present.index(c)] if c in present else 1 for c in order]))
        product = laid_out[0]
        for x in laid_out[1:]:
            product = product * x
        product = product.expand(*[sizes[c] for c in order])
        if summed:
            return product.sum(tuple(range(len(output), len(order))), dtype=dtype)
        return product if dtype is None else product.cast(dtype)

    # *** composition ***

    @traced
    def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DTypeLike | None = None) -> Tensor:
        """self @ weight + bias (weight (in, out), unlike torch's (out, in)); a 1-d weight scales elementwise.

        Args:
            weight: (in, out), or (in,) to scale elementwise.
            bias: added, or None.
            dtype: the accumulation dtype.

        Returns:
            (..., out).

        Examples:
            >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
            [[3.5]]
        """
        if dtype is not None:
            return self.cast(dtype).linear(weight.cast(dtype), None if bias is None else bias.cast(dtype))
        x = self * weight if weight.ndim == 1 else self.dot(weight)
        return x if bias is None else x + bias

    def sequential(self: Tensor, ll: list[Callable[[Tensor], Tensor]]) -> Tensor:
        """Apply each function of `ll` in turn.

        Args:
            ll: functions (or layers) from Tensor to Tensor.

        Returns:
            The last function's result.

        Examples:
            >>> Tensor([-1.0, 2.0]).sequential([lambda t: t * 2, Tensor.relu]).tolist()
            [0.0, 4.0]
        """
        x = self
        for fn in ll:
            x = fn(x)
        return x


_PoolArgs = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], list[tuple[int, int]], list[tuple[int, int]]]


# *** module helpers ***


def _per_axis(op: str, value: int | Sequence[int], n: int, name: str) -> tuple[int, ...]:
    """An int for every axis, or one per axis (ValueError otherwise)."""
    if isinstance(value, int):
        return (value,) * n
    values = tuple(value)
    if len(values) != n or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{op}: {name} must be an int or {n} ints, got {value}")
    return values


def _on_axis(ndim: int, axis: int, bounds: tuple[int, int]) -> list[tuple[int, int] | None]:
    """A pad or shrink argument that touches only `axis`."""
    return [bounds if a == axis else None for a in range(ndim)]


def _spatial_pads(op: str, padding: Padding, n: int) -> list[tuple[int, int]]:
    """(before, after) per spatial axis, in axis order, from an int, n ints (one per axis, first axis first) or 2n
    ints ordered as F.pad: (left, right, top, bottom, ...), the last axis first."""
    if isinstance(padding, int):
        return [(padding, padding)] * n
    pads = tuple(padding)
    if len(pads) == n:
        return [(p, p) for p in pads]
    if len(pads) == 2 * n:
        return [(pads[2 * j], pads[2 * j + 1]) for j in reversed(range(n))]
    raise ValueError(f"{op}: padding must be an int or a sequence of {n} or {2 * n} ints, got {padding}")


def _named_pads(padding: str, k_: tuple[int, ...], s_: tuple[int, ...], d_: tuple[int, ...]) -> list[tuple[int, int]]:
    """torch's padding="valid" (none) and "same" (output size = input size; the odd extra pad goes after)."""
    if padding == "valid":
        return [(0, 0)] * len(k_)
    if padding != "same":
        raise ValueError(f"conv2d: padding string must be 'valid' or 'same', got {padding!r}")
    if any(s != 1 for s in s_):
        raise ValueError(f"conv2d: padding='same' needs stride 1, got stride {s_}")
    return [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(k_, d_, strict=True)]


def _check_conv(op: str, x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, transposed: bool) -> None:
    """Shape checks: conv2d's weight is (C_out, C_in/groups, *k), conv_transpose2d's (C_in, C_out/groups, *k)."""
    if weight.ndim < 3 or x.ndim != weight.ndim:
        raise ValueError(f"{op}: input {x.shape} and weight {weight.shape} need the same rank, at least 3")
    c_in = weight.shape[0] if transposed else weight.shape[1] * groups
    c_out = weight.shape[1] * groups if transposed else weight.shape[0]
    if groups < 1 or x.shape[1] % groups or c_out % groups:
        raise ValueError(f"{op}: groups={groups} must divide input channels {x.shape[1]} and output channels {c_out}")
    if x.shape[1] != c_in:
        raise ValueError(
            f"{op}: input {x.shape} has {x.shape[1]} channels but weight {weight.shape} with groups={groups} "
            f"expects {c_in}"
        )
    if bias is not None and bias.shape != (c_out,):
        raise ValueError(f"{op}: bias shape {bias.shape} does not match the {c_out} output channels")


def _einsum_parse(formula: str, tensors: Sequence[Tensor]) -> tuple[list[list[str]], list[str]]:
    """The letters of each input and of the output; "..." becomes one label per broadcast axis ("...0", "...1")."""
    spec = formula.replace(" ", "")
    lhs, arrow, rhs = spec.partition("->")
    parts = lhs.split(",")
    if len(parts) != len(tensors):
        raise OpValueError(f"einsum: formula {formula!r} has {len(parts)} inputs, got {len(tensors)} operands")
    for part in [*parts, rhs]:
        letters = part.replace("...", "")
        if part.count("...") > 1 or (letters and not letters.isalpha()):
            raise OpValueError(f"einsum: subscripts must be letters (and one '...'), got {part!r} in {formula!r}")
    named = [len(p.replace("...", "")) for p in parts]
    for i, (part, n, t) in enumerate(zip(parts, named, tensors, strict=True)):
        if ("..." in part and n > t.ndim) or ("..." not in part and n != t.ndim):
            raise OpValueError(f"einsum: operand {i} has shape {t.shape}, but subscripts {part!r} name {n} axes")
    width = max((t.ndim - n for p, n, t in zip(parts, named, tensors, strict=True) if "..." in p), default=0)
    dots = [f"...{k}" for k in range(width)]
    inputs = []
    for part, n, t in zip(parts, named, tensors, strict=True):
        before, _, after = part.partition("...")
        inputs.append([*before, *dots[width - (t.ndim - n) :], *after] if "..." in part else list(part))
    if arrow:
        before, _, after = rhs.partition("...")
        output = [*before, *(dots if "..." in rhs else []), *after]
    else:
        named_letters = [c for p in parts for c in p.replace("...", "")]
        output = [*dots, *sorted(c for c in set(named_letters) if named_letters.count(c) == 1)]
    used = {c for labels in inputs for c in labels}
    if len(set(output)) != len(output) or not set(output) <= used:
        raise OpValueError(
            f"einsum: output subscripts {rhs!r} must be distinct letters used by the inputs of {formula!r}"
        )
    return inputs, output


def _einsum_diagonals(t: Tensor, labels: list[str], formula: str) -> tuple[Tensor, list[str]]:
    """A letter repeated within one operand ("ii") selects that operand's diagonal; returns (view, its letters)."""
    labels = list(labels)
    while (repeated := next((c for c in labels if labels.count(c) > 1), None)) is not None:
        a, b = (i for i, c in enumerate(labels) if c == repeated)
        if t.shape[a] != t.shape[b]:
            raise OpValueError(
                f"einsum: subscript {repeated!r} repeats in {formula!r} on axes of sizes {t.shape[a]} and {t.shape[b]}"
            )
        t = t.diagonal(0, a, b)  # the diagonal becomes the last axis
        labels = [c for i, c in enumerate(labels) if i not in (a, b)] + [repeated]
    return t, labels


def _einsum_sizes(formula: str, views: list[tuple[Tensor, list[str]]]) -> dict[str, int]:
    """The size of every letter; sizes of one letter must agree, except that 1 broadcasts."""
    sizes: dict[str, int] = {}
    for i, (t, labels) in enumerate(views):
        for c, size in zip(labels, t.shape, strict=True):
            known = sizes.get(c, 1)
            if size != 1 and known != 1 and size != known:
                name = "the ellipsis" if c.startswith("...") else f"subscript {c!r}"
                raise OpValueError(
                    f"einsum: {name} has size {known} before operand {i} of {formula!r} but {size} in it"
                )
            sizes[c] = size if size != 1 else sizes.get(c, 1)
    return sizes


def _uint8_linear_taps(size: int, out: int) -> tuple[list[int], list[int], list[int], int]:
    """torch's uint8 linear resampling of an axis of `size` to `out` (align_corners=False, no antialias): for each
    output its first source and the two weights, scaled to integers with the most fraction bits that keep the largest
    weight within int16, and that bit count. A weight is the triangle filter at the source's distance from the output's
    centre, normalised to sum to 1; a second source past the edge gets weight 0."""
    scale = size / out
    rows: list[tuple[int, list[float]]] = []
    for i in range(out):
        centre = scale * (i + 0.5)
        start, stop = max(int(centre - 0.5), 0), min(int(centre + 1.5), size)
        taps = [max(0.0, 1 - abs(j + start - centre + 0.5)) for j in range(stop - start)]
        total = sum(taps)
        rows.append((start, [w / total for w in taps] if total else taps))
    largest = max(w for _, taps in rows for w in taps)
    precision = 0
    while precision < 22 and int(0.5 + largest * (1 << (precision + 1))) < 1 << 15:
        precision += 1
    fixed = [[int(w * (1 << precision) + 0.5) for w in taps] + [0, 0] for _, taps in rows]
    return [start for start, _ in rows], [w[0] for w in fixed], [w[1] for w in fixed], precision


def _one_hot(labels: Tensor, classes: int, axis: int) -> Tensor:
    """Bool one-hot of int `labels` with a new class axis at `axis`; labels out of [0, classes) give all False."""
    at = axis if axis >= 0 else labels.ndim + 1 + axis
    return labels.unsqueeze(at) == type(labels).arange(classes, device=labels.device).reshape(
        classes, *[1] * (labels.ndim - at)
    )


def _repeat_heads(x: Tensor, heads: int) -> Tensor:
    """(..., H, S, E) -> (..., heads, S, E), each head repeated heads/H times in place (torch's repeat_interleave)."""
    *lead, H, S, E = x.shape
    if heads % H:
        raise ValueError(f"scaled_dot_product_attention: {heads} query heads are not a multiple of {H} key/value heads")
    return x.reshape(*lead, H, 1, S, E).expand(*lead, H, heads // H, S, E).reshape(*lead, heads, S, E)


def _masked_softmax(x: Tensor, mask: Tensor, holds_mask: bool = False) -> Tensor:
    """softmax(x + where(mask, 0, -inf)) along the last axis, with no exp of -inf: glibc's vector exp2f computes lanes
    past its range (-inf included) one by one with the scalar exp2f (a causal (4, 8, 256, 256) softmax 5.7 -> 2.0 ms
    single-thread), so masked lanes take exp(0) and are then set to 0. The same values, bit for bit: a fully masked
    row is NaN (0 / 0) as -inf - -inf makes it there. `holds_mask`: x is already -inf where mask is False (a float
    mask added), so its max needs no select."""
    row_max = (x if holds_mask else mask.where(x, -math.inf)).max(-1, keepdim=True).detach()  # no gradient, as softmax
    e = mask.where(mask.where(x - row_max, 0.0).exp(), 0.0)
    return e / e.sum(-1, keepdim=True)


def _check_smoothing(op: str, label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")


def _reduce_loss(op: str, loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
