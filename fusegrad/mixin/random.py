"""Tensor methods: random numbers from a counter-based generator on the device, and the initialisers.

Every random word is Threefry-2x32 (20 rounds; Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011)
of a counter: word 0 is the element's position (an IOTA), word 1 the call number, and the key is the seed. The values
depend only on (seed, call, position), never on how the scheduler fuses kernels.

The host knows every draw's key: it keeps the seed and, per device, the call number, so an ordinary draw's key is a
3-word uint32 buffer made from host data (seed low, seed high, call number): a draw runs no kernel, and two draws never
share or mutate memory, so the order they are realized in (or whether they are) changes nothing.

A TinyJit replay re-runs kernels and cannot ask the host, so draws inside a capture use a device state instead: one
3-word uint32 tensor per device, which each draw copies into its own key and advances with an `assign`, both kernels
that the capture records. The JIT tells the generator when a capture starts (`jit_begin`: every state is brought up to
the host's words), what the capture did (`jit_end`), and before each replay (`jit_replay`: the states are brought up
to date again and the host's call numbers advance as the replay's kernels will advance the states).
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fusegrad.device import Device, canonicalize_device
from fusegrad.dtype import DType, DTypeLike, dtypes, to_dtype
from fusegrad.engine.capture import CaptureState, register_capture_state
from fusegrad.engine.realize import capturing
from fusegrad.errors import SampleError as SampleError  # its home before errors.py
from fusegrad.helpers import argfix, ceildiv, prod
from fusegrad.uop import Ops

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor

# Threefry-2x32 rotation distances (Random123's R_32x2) and the key-schedule parity constant
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA
_ROUNDS = 20
_WORD = 0xFFFFFFFF


@dataclass(slots=True)
class _GeneratorState:
    """The generator: the seed (None until first use), per device the next call number, and the device states that
    TinyJit captures read and advance, with the (seed, call) each holds."""

    seed: int | None = None
    calls: dict[str | tuple[str, ...], int] = field(default_factory=dict)
    devices: dict[str | tuple[str, ...], Tensor] = field(default_factory=dict)
    held: dict[str | tuple[str, ...], tuple[int, int]] = field(default_factory=dict)  # what each device state holds
    reseeds: int = 0  # manual_seed calls so far: tells a capture that reseeded from one that only drew
    # the devices drawn from since the last manual_seed (their states, which outlive a reseed, are in `devices`)
    drawn: dict[str | tuple[str, ...], Tensor] = field(default_factory=dict)


_state = _GeneratorState()  # mutated in place by manual_seed and every draw


def _rotate_left(x: Tensor, r: int) -> Tensor:
    """32-bit rotation of a uint32 tensor (0 < r < 32: both shifts are defined)."""
    return (x << r) | (x >> (32 - r))


def threefry2x32(key: tuple[Tensor, Tensor], counter: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """Threefry-2x32-20 of uint32 tensors (broadcasting): two 32-bit words out per (key, counter) pair."""
    schedule = (key[0], key[1], key[0] ^ key[1] ^ _PARITY)
    x0, x1 = counter[0] + schedule[0], counter[1] + schedule[1]
    for i in range(_ROUNDS):
        x0 = x0 + x1
        x1 = _rotate_left(x1, _ROTATIONS[i % 8]) ^ x0
        if i % 4 == 3:  # key injection every 4 rounds, with the injection count added to the second word
            j = i // 4 + 1
            x0, x1 = x0 + schedule[j % 3], x1 + schedule[(j + 1) % 3] + j
    return x0, x1


def _seed_words(seed: int, call: int = 0) -> list[int]:
    """The key words (seed low, seed high, call number), each a uint32."""
    seed %= 1 << 64
    return [seed & _WORD, seed >> 32, call & _WORD]


def _device(device: str | tuple[str, ...] | None) -> str | tuple[str, ...]:
    return canonicalize_device(device) if device is not None else Device.DEFAULT


def _device_state(cls: type[Tensor], dev: str | tuple[str, ...]) -> Tensor:
    """The device's state tensor, made (holding the host's words) on first use: a buffer of host data, no kernel."""
    assert _state.seed is not None, "random: a device state before the seed was set"
    if (state := _state.devices.get(dev)) is None:
        call = _state.calls.get(dev, 0)
        state = _state.devices[dev] = cls(_seed_words(_state.seed, call), device=dev, dtype=dtypes.uint32)
        _state.held[dev] = (_state.seed, call)
    return state


def _next_key(cls: type[Tensor], device: str | tuple[str, ...] | None) -> Tensor:
    """A uint32 tensor (seed low, seed high, call number) for one draw. Outside a TinyJit capture it is host data: no
    kernel runs. Inside one, it is copied from the device state, which advances, both as kernels the capture records
    (run now, so the replays re-run them in the same order)."""
    if _state.seed is None:
        _state.seed = int(time.time())  # unseeded: a new stream per process, as in the reference
    dev = _device(device)
    call = _state.calls.get(dev, 0)
    _state.calls[dev] = call + 1
    _state.drawn[dev] = state = _device_state(cls, dev)
    if not capturing:
        return cls(_seed_words(_state.seed, call), device=dev, dtype=dtypes.uint32)
    assert _state.held[dev] == (_state.seed, call), "random: a device state was not brought up to date for a capture"
    # (3,): this draw's own copy in memory of its own (a contiguous() of a realized buffer would be that buffer)
    key = cls.empty(3, device=dev, dtype=dtypes.uint32).assign(state)
    call_word = cls.arange(3, device=dev) == 2  # (3,): 0, 0, 1
    state.assign(key + call_word.cast(dtypes.uint32))
    cls._realize_alone(key, state)  # no other tensor's graph holds them: skip the walk over every lazy tensor
    _state.held[dev] = (_state.seed, call + 1)
    return key


def _sync(dev: str | tuple[str, ...]) -> None:
    """Write the host's words into the device state where it holds others, and realize it. Never inside a capture:
    the write would be recorded, and every replay would rewind the state."""
    assert _state.seed is not None, "random: a device state before the seed was set"
    state, want = _state.devices[dev], (_state.seed, _state.calls.get(dev, 0))
    if _state.held[dev] != want:
        words = _seed_words(*want)
        if isinstance(dev, tuple) or state.uop.base.op is not Ops.BUFFER:  # a copy on every device: a kernel
            state.assign(type(state)(words, device=dev, dtype=dtypes.uint32)).realize()
        else:
            state.uop.base.buffer.ensure_allocated().copyin(memoryview(struct.pack("<3I", *words)))
        _state.held[dev] = want
    state.realize()  # a multi-device state starts as a lazy copy, which a capture must not record


@dataclass(frozen=True, slots=True)
class JitRecord:
    """What one TinyJit capture did to the generator: seed, call numbers and reseed count before and after, and the
    devices whose states existed when it ended (the ones its kernels read and write)."""

    calls0: dict[str | tuple[str, ...], int]
    reseeds0: int
    seed1: int | None = None
    calls1: dict[str | tuple[str, ...], int] = field(default_factory=dict)
    reseeds1: int = 0
    states: frozenset[str | tuple[str, ...]] = frozenset()


def jit_begin() -> JitRecord:
    """Called by TinyJit before a capture: every device state holds the host's words. Returns the generator's start."""
    if _state.seed is None:
        _state.seed = int(time.time())
    for dev in _state.devices:
        _sync(dev)
    return JitRecord(dict(_state.calls), _state.reseeds)


def jit_end(begin: JitRecord) -> JitRecord | None:
    """Called by TinyJit after a capture: `begin` with the generator as the capture left it; None when the capture
    drew nothing and did not reseed (its replays leave the generator alone)."""
    if _state.reseeds == begin.reseeds0 and all(n <= begin.calls0.get(dev, 0) for dev, n in _state.calls.items()):
        return None
    return JitRecord(
        begin.calls0, begin.reseeds0, _state.seed, dict(_state.calls), _state.reseeds, frozenset(_state.devices)
    )


def jit_replay(record: JitRecord) -> None:
    """Called by TinyJit before each replay of a capture: the device states the replay reads hold the host's words,
    then the host's seed and call numbers move as the replay's kernels will move those states."""
    assert record.seed1 is not None, "random: jit_replay of a record without its end (jit_end)"
    if record.reseeds1 != record.reseeds0:  # the function reseeds: its kernels rewrite every state it saw
        for dev in record.states:
            _sync(dev)
        _state.seed, _state.calls, _state.reseeds = record.seed1, dict(record.calls1), _state.reseeds + 1
        _state.drawn.clear()
        for dev in record.states:
            _state.held[dev] = (record.seed1, record.calls1.get(dev, 0))
        return
    for dev, end in record.calls1.items():
        if (advance := end - record.calls0.get(dev, 0)) > 0:
            _sync(dev)
            _state.calls[dev] = _state.calls.get(dev, 0) + advance
            _state.held[dev] = (_state.held[dev][0], _state.calls[dev])


register_capture_state(CaptureState(jit_begin, jit_end, jit_replay))  # TinyJit records and redoes the generator


def _random_words(cls: type[Tensor], n: int, device: str | tuple[str, ...] | None) -> tuple[Tensor, Tensor]:
    """Two uint32 words for each of n counters (one draw): (n,) and (n,)."""
    key = _next_key(cls, device)
    position = cls.arange(n, device=key.device, dtype=dtypes.uint32)
    return threefry2x32((key[0:1], key[1:2]), (position, key[2:3]))


def _random_bits(cls: type[Tensor], n: int, device: str | tuple[str, ...] | None) -> Tensor:
    """n uint32 words from ceil(n/2) counters: both output words are used."""
    x0, x1 = _random_words(cls, ceildiv(n, 2), device)
    return x0.cat(x1)[:n]


def _unit_float(bits: Tensor, dt: DType) -> Tensor:
    """uint32 words -> floats in [0, 1): the top m bits as an integer times 2**-m, with m = mantissa + 1 (<= 24).

    Every such value is exact in `dt`, so rounding never reaches 1.0 (a float32 result cast to half could).
    """
    m = min(dtypes.finfo(dt)[1] + 1, 24)
    return ((bits >> (32 - m)).cast(dtypes.float32) * 2.0**-m).cast(dt)


def _shape(shape: tuple[Any, ...], op: str) -> tuple[int, ...]:
    """`f(2, 3)` or `f((2, 3))` -> (2, 3); ValueError for negative or non-int sizes."""
    shp = tuple(argfix(*shape)) if shape else ()
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shp):
        raise ValueError(f"{op}: shape must be non-negative ints, got {shp}")
    return shp


def _float_dtype(dtype: DTypeLike | None, op: str) -> DType:
    """The requested dtype (default float); TypeError unless it is a float."""
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dtypes.is_float(dt):
        raise TypeError(f"{op}: expected a float dtype, got {dt}")
    return dt


def _finish(x: Tensor, kwargs: dict[str, Any]) -> Tensor:
    """Apply the remaining constructor keywords (requires_grad) to a result."""
    return type(x)(x.uop, **kwargs) if kwargs else x


def _fan_in(shape: tuple[int, ...]) -> int:
    """Inputs per output unit of a weight shaped (out, in, *kernel)."""
    return prod(shape[1:])


class RandomMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()
    # {device: its generator state} for the devices drawn from since the last manual_seed, under the reference's two
    # names (it keeps seeds and counters apart; here one 3-word state tensor per device holds both)
    _device_seeds: ClassVar[dict[str | tuple[str, ...], Tensor]] = _state.drawn
    _device_rng_counters: ClassVar[dict[str | tuple[str, ...], Tensor]] = _state.drawn

    @staticmethod
    def _threefry_random_bits(key: Tensor, counts0: Tensor, counts1: Tensor) -> Tensor:
        """Threefry-2x32 of the counter pairs (counts0[i], counts1[i]) under the key words (key[0], key[1]), all
        uint32: (n,), (n,) -> (2n,), every pair's first word, then every second word (JAX's layout)."""
        x0, x1 = threefry2x32((key[0:1], key[1:2]), (counts0, counts1))
        return x0.cat(x1)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed the generator and restart its call count on every device: the same seed then gives the same numbers.

        A TinyJit that draws numbers restarts the sequence too: its device states are brought up to date before each
        replay. Inside a capture the states are rewritten with kernels, so every replay reseeds.

        Args:
            seed: any int.

        Examples:
            >>> Tensor.manual_seed(42)
            >>> a = Tensor.rand(3).tolist()
            >>> Tensor.manual_seed(42)
            >>> Tensor.rand(3).tolist() == a
            True
        """
        _state.seed, _state.reseeds = int(seed), _state.reseeds + 1
        _state.calls.clear()
        _state.drawn.clear()
        if capturing:
            words = _seed_words(_state.seed)
            for dev, state in _state.devices.items():
                state.assign(type(state)(words, device=dev, dtype=dtypes.uint32)).realize()
                _state.held[dev] = (_state.seed, 0)

    @classmethod
    def rand(
        cls: type[Tensor],
        *shape: Any,
        device: str | tuple[str, ...] | None = None,
        dtype: DTypeLike | None = None,
        contiguous: bool = True,
        **kwargs: Any,
    ) -> Tensor:
        """Uniform floats in [0, 1), from a counter-based generator (threefry) seeded by `manual_seed`.

        Args:
            *shape: the shape, as ints or one tuple.
            device: where to draw (default: Device.DEFAULT).
            dtype: a float dtype (default: dtypes.default_float).
            contiguous: realize the draw into its own buffer (False keeps it fused into the consumer).
            **kwargs: passed on to the result (e.g. requires_grad).

        Returns:
            A new tensor of the shape.

        Raises:
            TypeError: a dtype that is not float.

        Examples:
            >>> x = Tensor.rand(2, 3)
            >>> x.shape, bool(((x >= 0) & (x < 1)).all().item())
            ((2, 3), True)
        """
        dt, shp = _float_dtype(dtype, "rand"), _shape(shape, "rand")
        if prod(shp) == 0:
            return _finish(cls.zeros(shp, dtype=dt, device=device), kwargs)
        out = _unit_float(_random_bits(cls, prod(shp), device), dt).reshape(shp)
        return _finish(out.contiguous() if contiguous else out, kwargs)

    @classmethod
    def randn(cls: type[Tensor], *shape: Any, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        """Standard normal floats by Box-Muller: (u1, u2) -> sqrt(-2 ln(1 - u1)) cos(2 pi u2). A non-float `dtype`
        gets the float draw cast to it, as the reference does (`Tensor.randn(3, dtype=dtypes.int)`).

        Args:
            *shape: the shape, as ints or one tuple.
            dtype: the result's dtype (default: dtypes.default_float).
            **kwargs: device, contiguous, and what is passed on to the result (e.g. requires_grad).

        Returns:
            A new tensor of the shape.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> x = Tensor.randn(10000)
            >>> abs(x.mean().item()) < 0.05, abs(x.std().item() - 1) < 0.05
            (True, True)
        """
        dt, shp = to_dtype(dtype) if dtype is not None else dtypes.default_float, _shape(shape, "randn")
        device, contiguous = kwargs.pop("device", None), kwargs.pop("contiguous", True)
        if prod(shp) == 0:
            return _finish(cls.zeros(shp, dtype=dt, device=device), kwargs)
        bits0, bits1 = _random_words(cls, prod(shp), device)
        u1, u2 = _unit_float(bits0, dtypes.float32), _unit_float(bits1, dtypes.float32)
        radius = ((1 - u1).log() * -2).sqrt()  # 1 - u1 is in (0, 1]: the log stays finite
        out = (radius * (u2 * (2 * math.pi) + math.pi / 2).sin()).cast(dt).reshape(shp)  # cos(a) = sin(a + pi/2)
        return _finish(out.contiguous() if contiguous else out, kwargs)

    @classmethod
    def randint(
        cls: type[Tensor], *shape: Any, low: int = 0, high: int = 10, dtype: DTypeLike = dtypes.int32, **kwargs: Any
    ) -> Tensor:
        """Uniform integers in [low, high): each 32-bit word w maps to low + (w * (high - low)) >> 32.

        Args:
            *shape: the shape, as ints or one tuple.
            low: the smallest value.
            high: one past the largest value (high - low <= 2**32).
            dtype: an integer dtype.
            **kwargs: device, and what is passed on to the result.

        Returns:
            A new tensor of the shape.

        Raises:
            TypeError: low or high not an int, or a dtype that is not an integer.
            ValueError: low >= high, or a range wider than 2**32.

        Examples:
            >>> x = Tensor.randint(1000, low=-3, high=3)
            >>> x.dtype, x.min().item() >= -3, x.max().item() <= 2
            (dtypes.int, True, True)
        """
        dt, shp = to_dtype(dtype), _shape(shape, "randint")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
            raise TypeError(f"randint: low and high must be ints, got {low!r} and {high!r}")
        if not dtypes.is_int(dt):
            raise TypeError(f"randint: expected an integer dtype, got {dt}")
        if not 0 < high - low <= 1 << 32:
            raise ValueError(f"randint: expected low < high with high - low <= 2**32, got low={low}, high={high}")
        device = kwargs.pop("device", None)
        if prod(shp) == 0:
            return _finish(cls.zeros(shp, dtype=dt, device=device), kwargs)
        offset = (_random_bits(cls, prod(shp), device).cast(dtypes.uint64) * (high - low)) >> 32
        return _finish((offset.cast(dtypes.int64) + low).cast(dt).reshape(shp).contiguous(), kwargs)

    @classmethod
    def uniform(
        cls: type[Tensor],
        *shape: Any,
        low: float = 0.0,
        high: float = 1.0,
        dtype: DTypeLike | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Uniform values in [low, high).

        Args:
            *shape: the shape, as ints or one tuple.
            low: the lower bound.
            high: the upper bound.
            dtype: the result's dtype (default: dtypes.default_float).
            **kwargs: device, contiguous, and what is passed on to the result.

        Returns:
            A new tensor of the shape.

        Examples:
            >>> x = Tensor.uniform(1000, low=-2.0, high=2.0)
            >>> x.min().item() >= -2.0, x.max().item() < 2.0
            (True, True)
        """
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        device, contiguous = kwargs.pop("device", None), kwargs.pop("contiguous", True)
        unit = cls.rand(*shape, device=device, dtype=dt if dtypes.is_float(dt) else None, contiguous=contiguous)
        return _finish(((high - low) * unit + low).cast(dt), kwargs)

    @classmethod
    def normal(cls: type[Tensor], *shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Tensor:
        """Normal values with the given mean and standard deviation.

        Args:
            *shape: the shape, as ints or one tuple.
            mean: the distribution's mean.
            std: its standard deviation.
            **kwargs: dtype, device, and what is passed on to the result.

        Returns:
            A new tensor of the shape.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> abs(Tensor.normal(10000, mean=5.0, std=0.1).mean().item() - 5.0) < 0.01
            True
        """
        requires_grad = kwargs.pop("requires_grad", None)
        out = std * cls.randn(*shape, **kwargs) + mean
        return _finish(out, {} if requires_grad is None else {"requires_grad": requires_grad})

    @classmethod
    def randperm(
        cls: type[Tensor],
        n: int,
        device: str | tuple[str, ...] | None = None,
        dtype: DTypeLike = dtypes.int32,
        **kwargs: Any,
    ) -> Tensor:
        """A random permutation of 0..n-1: the rank of each of n random keys (ties broken by position), O(n^2).

        Args:
            n: how many values.
            device: where to draw (default: Device.DEFAULT).
            dtype: the result's dtype.
            **kwargs: passed on to the result.

        Returns:
            A (n,) tensor holding each of 0..n-1 once.

        Raises:
            ValueError: n is not a non-negative int.

        Examples:
            >>> sorted(Tensor.randperm(6).tolist())
            [0, 1, 2, 3, 4, 5]
        """
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
        if n == 0:
            return _finish(cls.zeros(0, dtype=dtype, device=device), kwargs)
        keys = _random_bits(cls, n, device).contiguous()  # read n times per element: compute once
        position = cls.arange(n, device=keys.device)
        key_i, key_j = keys.reshape(n, 1), keys.reshape(1, n)
        before = (key_j < key_i) | ((key_j == key_i) & (position.reshape(1, n) < position.reshape(n, 1)))
        return _finish(before.sum(1).cast(dtype).contiguous(), kwargs)

    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """Indices drawn with probability proportional to the weights in the last axis: (K,) or (B, K) ->
        (num_samples,) or (B, num_samples), int32. Without replacement, num_samples <= K.

        Args:
            num_samples: how many indices to draw per row.
            replacement: whether an index may be drawn more than once.

        Returns:
            The drawn indices.

        Raises:
            SampleError: (a ValueError) weights that are not 1-d or 2-d, num_samples < 1, or more samples than
                categories without replacement.

        Examples:
            >>> Tensor([0.0, 1.0, 0.0]).multinomial(4, replacement=True).tolist()  # all weight on index 1
            [1, 1, 1, 1]
            >>> sorted(Tensor([1.0, 1.0, 1.0]).multinomial(3).tolist())
            [0, 1, 2]
        """
        if not 1 <= self.ndim <= 2:
            raise SampleError(f"multinomial: expected a 1-d or 2-d tensor of weights, got shape {self.shape}")
        if num_samples < 1 or (not replacement and num_samples > self.shape[-1]):
            raise SampleError(
                f"multinomial: cannot draw {num_samples} samples from {self.shape[-1]} categories "
                f"({'with' if replacement else 'without'} replacement)"
            )
        weights = self.reshape(-1, self.shape[-1])._as_float()
        out = _sample_with_replacement(weights, num_samples) if replacement else _sample_without(weights, num_samples)
        return out.reshape(num_samples) if self.ndim == 1 else out

    def dropout(self: Tensor, p: float = 0.5) -> Tensor:
        """Zero each element with probability p and scale the rest by 1/(1-p), only while `Tensor.training`.

        Args:
            p: the probability of zeroing an element, in [0, 1].

        Returns:
            The masked and scaled tensor in training; this tensor itself otherwise.

        Raises:
            ValueError: p outside [0, 1].

        Examples:
            >>> x = Tensor.ones(1000)
            >>> x.dropout(0.5) is x  # not training: unchanged
            True
            >>> with Tensor.train():
            ...     y = x.dropout(0.5)
            >>> sorted(set(y.tolist()))  # dropped, or kept and doubled
            [0.0, 2.0]
        """
        if not 0 <= p <= 1:
            raise ValueError(f"dropout: probability must be in [0, 1], got {p}")
        if not type(self).training or p == 0:
            return self
        if p == 1:
            return self.zeros_like()
        keep = type(self).rand(*self.shape, device=self.device, contiguous=False) >= p
        return keep.where(self, self.zeros_like()) / (1.0 - p)

    @classmethod
    def kaiming_uniform(cls: type[Tensor], *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        """He uniform init: U(-b, b) with b = sqrt(6 / ((1 + a^2) fan_in)), fan_in = prod(shape[1:]).

        Args:
            *shape: the weight's shape, (out, in, *kernel).
            a: the negative slope of the leaky ReLU that follows.
            **kwargs: dtype, device, and what is passed on to the result.

        Returns:
            A new tensor of the shape.

        Examples:
            >>> w = Tensor.kaiming_uniform(64, 6)  # bound sqrt(6 / 6) = 1
            >>> w.abs().max().item() <= 1.0
            True
        """
        shp = _shape(shape, "kaiming_uniform")
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a**2)) / math.sqrt(_fan_in(shp))
        return cls.uniform(*shp, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_normal(cls: type[Tensor], *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        """He normal init: N(0, std^2) with std = sqrt(2 / ((1 + a^2) fan_in)).

        Args:
            *shape: the weight's shape, (out, in, *kernel).
            a: the negative slope of the leaky ReLU that follows.
            **kwargs: dtype, device, and what is passed on to the result.

        Returns:
            A new tensor of the shape.

        Examples:
            >>> Tensor.manual_seed(0)
            >>> abs(Tensor.kaiming_normal(4000, 2, a=0.0).std().item() - 1.0) < 0.05  # std sqrt(2 / 2)
            True
        """
        shp = _shape(shape, "kaiming_normal")
        std = math.sqrt(2.0 / (1 + a**2)) / math.sqrt(_fan_in(shp))
        return cls.normal(*shp, mean=0.0, std=std, **kwargs)

    @classmethod
    def glorot_uniform(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
        """Glorot/Xavier uniform init: U(-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:]))).

        Args:
            *shape: the weight's shape.
            **kwargs: dtype, device, and what is passed on to the result.

        Returns:
            A new tensor of the shape.

        Examples:
            >>> Tensor.glorot_uniform(3, 3).abs().max().item() <= 1.0  # bound sqrt(6 / 6)
            True
        """
        shp = _shape(shape, "glorot_uniform")
        bound = math.sqrt(6.0 / (shp[0] + _fan_in(shp)))
        return cls.uniform(*shp, low=-bound, high=bound, **kwargs)

    @classmethod
    def scaled_uniform(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
        """U(-b, b) with b = prod(shape) ** -0.5.

        Args:
            *shape: the shape.
            **kwargs: dtype, device, and what is passed on to the result.

        Returns:
            A new tensor of the shape.

        Examples:
            >>> Tensor.scaled_uniform(2, 8).abs().max().item() <= 0.25  # bound 16 ** -0.5
            True
        """
        shp = _shape(shape, "scaled_uniform")
        bound = prod(shp) ** -0.5
        return cls.uniform(*shp, low=-bound, high=bound, **kwargs)

    def rand_like(self: Tensor, **kwargs: Any) -> Tensor:
        """`Tensor.rand` with this tensor's shape, dtype and device (each can be overridden).

        Args:
            **kwargs: dtype, device and the other arguments of `Tensor.rand`.

        Returns:
            A new tensor shaped like this one.

        Examples:
            >>> x = Tensor.zeros(2, 3, dtype=dtypes.half)
            >>> x.rand_like().shape, x.rand_like().dtype
            ((2, 3), dtypes.half)
        """
        kwargs.setdefault("dtype", self.dtype)
        kwargs.setdefault("device", self.device)
        return type(self).rand(*self.shape, **kwargs)

    def randn_like(self: Tensor, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        """`Tensor.randn` with this tensor's shape and device; its dtype when float, else the default float.

        Args:
            dtype: the result's dtype (default: as above).
            **kwargs: device and the other arguments of `Tensor.randn`.

        Returns:
            A new tensor shaped like this one.

        Examples:
            >>> Tensor([1, 2, 3]).randn_like().dtype  # an int tensor: the default float
            dtypes.float
        """
        kwargs.setdefault("device", self.device)
        dt = dtype if dtype is not None else self.dtype if dtypes.is_float(self.dtype) else None
        return type(self).randn(*self.shape, dtype=dt, **kwargs)


def _sample_with_replacement(weights: Tensor, num_samples: int) -> Tensor:
    """Inverse CDF: for u*total, count the categories whose inclusive CDF is <= it. (B, K) -> (B, S)."""
    batch, k = weights.shape
    position = type(weights).arange(k, device=weights.device)
    upto = position.reshape(1, k) <= position.reshape(k, 1)  # (i, j): j <= i
    cdf = upto.reshape(1, k, k).where(weights.reshape(batch, 1, k), 0.0).sum(2).contiguous()  # (B, K)
    u = type(weights).rand(batch, num_samples, device=weights.device)
    target = u * cdf[:, k - 1 : k]  # (B, S)
    count = (cdf.reshape(batch, 1, k) <= target.reshape(batch, num_samples, 1)).sum(2)
    # u * total can round up to total: never step past the last category with weight
    last = (weights > 0).where(position.reshape(1, k), 0).max(1, keepdim=True)
    return count.minimum(last).cast(dtypes.int32)


def _sample_without(weights: Tensor, num_samples: int) -> Tensor:
    """Exponential race: key_i = E_i / w_i with E_i ~ Exp(1); the order of the smallest keys is the order of
    sequential draws without replacement. (B, K) -> (B, S)."""
    batch, k = weights.shape
    u = type(weights).rand(batch, k, device=weights.device)
    exponential = -(1 - u).log()
    keys = (weights > 0).where(exponential / weights, math.inf).contiguous()
    position = type(weights).arange(k, device=weights.device)
    key_i, key_j = keys.reshape(batch, k, 1), keys.reshape(batch, 1, k)
    earlier = (key_j < key_i) | ((key_j == key_i) & (position.reshape(1, 1, k) < position.reshape(1, k, 1)))
    rank = earlier.sum(2).contiguous()  # (B, K): a permutation of 0..K-1 per row
    slot = type(weights).arange(num_samples, device=weights.device).reshape(1, num_samples, 1)
    hit = rank.reshape(batch, 1, k) == slot  # (B, S, K)
    return hit.where(position.reshape(1, 1, k), 0).sum(2).cast(dtypes.int32)
