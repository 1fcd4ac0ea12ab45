"""Tests for fusegrad/mixin/elementwise.py: each op against torch (CPU) on random inputs plus special values.

Every op runs on one fixed (4, 8) input per dtype, so the compile cache is reused between runs; a few ops also run on
scalars, size-0 and size-1 shapes, and the integer and rounding ops on the PYTHON device. float16 results are compared
with torch's float32 result on the same (float16) inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fusegrad import Tensor
from fusegrad.dtype import DType, dtypes
from test.shared import assert_matches as check  # the one comparison helper, named for these tables

NP_DTYPES: dict[DType, Any] = {
    dtypes.float32: np.float32,
    dtypes.float16: np.float16,
    dtypes.int32: np.int32,
    dtypes.bool: np.bool_,
    dtypes.uint8: np.uint8,
}
SHAPE = (4, 8)
SPECIALS = (0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, 1.0, -1.0, math.inf, -math.inf, math.nan)


# *** helpers ***


def floats(
    dt: DType, low: float = -3.0, high: float = 3.0, specials: tuple[float, ...] = SPECIALS, seed: int = 0
) -> np.ndarray:
    """A SHAPE array of `dt`: the special values first, then uniform random values in [low, high)."""
    values = np.random.default_rng(seed).uniform(low, high, size=math.prod(SHAPE))
    values[: len(specials)] = specials
    with np.errstate(over="ignore"):  # large specials are inf in float16
        return values.astype(NP_DTYPES[dt]).reshape(SHAPE)


def ints(low: int = -5, high: int = 5, seed: int = 0, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    return np.random.default_rng(seed).integers(low, high, size=shape, endpoint=True).astype(np.int32)


def bools(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(SHAPE) < 0.5


def torch_of(arr: np.ndarray) -> torch.Tensor:
    """The torch tensor of `arr`; float16 goes in as float32 (a more accurate reference for the same inputs)."""
    return torch.from_numpy(arr.astype(np.float32) if arr.dtype == np.float16 else arr.copy())


F = torch.nn.functional
Op = Callable[[Any], Any]

# name -> (fusegrad op, torch op, input range, special values)
INF_NAN = (math.inf, -math.inf, math.nan)
UNIT = (0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 0.999, -0.999, 1.5, math.nan)
UNARY: dict[str, tuple[Op, Op, tuple[float, float], tuple[float, ...]]] = {
    "sign": (lambda t: t.sign(), torch.sign, (-3, 3), SPECIALS),
    "ceil": (lambda t: t.ceil(), torch.ceil, (-3, 3), SPECIALS),
    "floor": (lambda t: t.floor(), torch.floor, (-3, 3), SPECIALS),
    "round": (lambda t: t.round(), torch.round, (-4, 4), (*SPECIALS, -3.5, 3.5, 0.49999997, -1.5, 4.5, 8388609.0)),
    "isnan": (lambda t: t.isnan(), torch.isnan, (-3, 3), SPECIALS),
    "isinf": (lambda t: t.isinf(), torch.isinf, (-3, 3), SPECIALS),
    "isposinf": (lambda t: t.isinf(detect_negative=False), torch.isposinf, (-3, 3), SPECIALS),
    "isneginf": (lambda t: t.isinf(detect_positive=False), torch.isneginf, (-3, 3), SPECIALS),
    "isnoinf": (lambda t: t.isinf(False, False), lambda a: torch.zeros_like(a, dtype=torch.bool), (-3, 3), SPECIALS),
    "isfinite": (lambda t: t.isfinite(), torch.isfinite, (-3, 3), SPECIALS),
    "cos": (lambda t: t.cos(), torch.cos, (-10, 10), (0.0, math.pi / 2, math.pi, 1000.0, *INF_NAN)),
    "tan": (lambda t: t.tan(), torch.tan, (-1.4, 1.4), (0.0, -0.0, 1.0, math.nan)),
    "asin": (lambda t: t.asin(), torch.asin, (-1, 1), UNIT),
    "acos": (lambda t: t.acos(), torch.acos, (-1, 1), UNIT),
    "atan": (lambda t: t.atan(), torch.atan, (-10, 10), (0.0, 0.4, 0.42, 2.4, 2.42, 1e30, *INF_NAN)),
    "sinh": (lambda t: t.sinh(), torch.sinh, (-5, 5), (0.0, 1e-4, -0.999, 1.0, 88.0, *INF_NAN)),
    "cosh": (lambda t: t.cosh(), torch.cosh, (-5, 5), (0.0, 1e-4, 88.0, *INF_NAN)),
    "atanh": (lambda t: t.atanh(), torch.atanh, (-1, 1), UNIT),
    "asinh": (lambda t: t.asinh(), torch.asinh, (-10, 10), (0.0, -0.0, 1e-5, -1e20, *INF_NAN)),
    "acosh": (lambda t: t.acosh(), torch.acosh, (1, 10), (1.0, 1.0001, 0.5, 1e20, math.inf, math.nan)),
    "erf": (lambda t: t.erf(), torch.erf, (-4, 4), (0.0, -0.0, 1e-4, 0.999, 1.0, -1.0, 10.0, *INF_NAN)),
    "rsqrt": (lambda t: t.rsqrt(), torch.rsqrt, (0.1, 5), (0.0, 1.0, -1.0, *INF_NAN)),
    "log10": (lambda t: t.log10(), torch.log10, (0.1, 100), (0.0, 1.0, 10.0, -1.0, *INF_NAN)),
    "relu6": (lambda t: t.relu6(), F.relu6, (-8, 8), (0.0, 6.0, *INF_NAN)),
    "hardtanh": (lambda t: t.hardtanh(), F.hardtanh, (-3, 3), (1.0, -1.0, *INF_NAN)),
    "hardtanh_args": (lambda t: t.hardtanh(-2, 0.5), lambda a: F.hardtanh(a, -2, 0.5), (-3, 3), INF_NAN),
    "leaky_relu": (lambda t: t.leaky_relu(), F.leaky_relu, (-3, 3), (0.0, *INF_NAN)),
    "leaky_relu_slope": (lambda t: t.leaky_relu(0.3), lambda a: F.leaky_relu(a, 0.3), (-3, 3), INF_NAN),
    "elu": (lambda t: t.elu(), F.elu, (-8, 8), (0.0, -1e-5, *INF_NAN)),
    "elu_alpha": (lambda t: t.elu(0.5), lambda a: F.elu(a, 0.5), (-8, 8), INF_NAN),
    "celu": (lambda t: t.celu(), F.celu, (-8, 8), (0.0, -1e-5, *INF_NAN)),
    "celu_alpha": (lambda t: t.celu(2.0), lambda a: F.celu(a, 2.0), (-8, 8), INF_NAN),
    "selu": (lambda t: t.selu(), F.selu, (-8, 8), (0.0, *INF_NAN)),
    "gelu": (lambda t: t.gelu(), lambda a: F.gelu(a, approximate="tanh"), (-8, 8), (0.0, -20.0, *INF_NAN)),
    # the formula, not F.gelu: torch 2.13 gives NaN at +inf where x * Phi(x) is inf
    "gelu_erf": (
        lambda t: t.gelu("none"),
        lambda x: x * 0.5 * (1 + torch.erf(x / math.sqrt(2))),
        (-8, 8),
        (0.0, 20.0, math.inf, math.nan),
    ),
    "quick_gelu": (lambda t: t.quick_gelu(), lambda a: a * torch.sigmoid(1.702 * a), (-8, 8), (0.0, math.nan)),
    "silu": (lambda t: t.silu(), F.silu, (-8, 8), (0.0, -100.0, math.inf, math.nan)),
    "swish": (lambda t: t.swish(), F.silu, (-8, 8), (0.0,)),
    "mish": (lambda t: t.mish(), F.mish, (-8, 8), (0.0, -30.0, 30.0, math.inf, math.nan)),
    "hardsigmoid": (lambda t: t.hardsigmoid(), F.hardsigmoid, (-5, 5), (3.0, -3.0, *INF_NAN)),
    "hardsigmoid_args": (lambda t: t.hardsigmoid(0.25, 0.25), lambda a: (0.25 * a + 0.25).clamp(0, 1), (-5, 5), ()),
    "hardswish": (lambda t: t.hardswish(), F.hardswish, (-5, 5), (3.0, -3.0, math.nan)),
    "softplus": (lambda t: t.softplus(), F.softplus, (-30, 30), (0.0, 100.0, -100.0, *INF_NAN)),
    "softplus_beta": (lambda t: t.softplus(2.0), lambda a: F.softplus(a, 2.0), (-30, 30), (0.0, 50.0)),
    "softsign": (lambda t: t.softsign(), F.softsign, (-5, 5), (0.0, math.nan)),
    "logsigmoid": (lambda t: t.logsigmoid(), F.logsigmoid, (-30, 30), (0.0, -100.0, 100.0, *INF_NAN)),
    "rsqrt_alias_pow": (lambda t: t**-0.5, torch.rsqrt, (0.1, 5), (0.0, 1.0)),
}
# ops defined on integer tensors too; the others promote integers to float32
INT_SAME_DTYPE = ("sign", "ceil", "floor", "round", "relu6", "hardtanh")
BOOL_OUT = ("isnan", "isinf", "isposinf", "isneginf", "isnoinf", "isfinite")


# float16 runs a representative subset: every op computes through the same float32 code after the cast
HALF_OPS = ("sign", "round", "isinf", "cos", "asin", "atan", "sinh", "erf", "rsqrt", "log10", "gelu", "mish", "elu")
UNARY_CASES = [(name, dtypes.float32) for name in UNARY] + [(name, dtypes.float16) for name in HALF_OPS]


@pytest.mark.parametrize(("name", "dtype"), UNARY_CASES, ids=[f"{n}-{d}" for n, d in UNARY_CASES])
def test_unary_float(name: str, dtype: DType) -> None:
    fg_op, torch_op, (low, high), specials = UNARY[name]
    arr = floats(dtype, low, high, specials)
    expected = dtypes.bool if name in BOOL_OUT else dtype
    check(fg_op(Tensor(arr)), torch_op(torch_of(arr)), expected)


@pytest.mark.parametrize("name", [*INT_SAME_DTYPE, *BOOL_OUT, "cos", "atan", "erf", "sinh", "softplus", "elu"])
def test_unary_int(name: str) -> None:
    fg_op, torch_op, _, _ = UNARY[name]
    arr = ints()
    expected = dtypes.int32 if name in INT_SAME_DTYPE else dtypes.bool if name in BOOL_OUT else dtypes.float32
    ref = torch_op(torch_of(arr) if expected == dtypes.int32 or name in BOOL_OUT else torch_of(arr).float())
    check(fg_op(Tensor(arr)), ref, expected)


@pytest.mark.parametrize("name", ["sign", "ceil", "floor", "round", "isnan", "isfinite"])
def test_unary_bool_keeps_bool(name: str) -> None:
    arr = bools()
    fg_op, torch_op, _, _ = UNARY[name]
    ref = torch_op(torch_of(arr)) if name in ("sign", "isnan", "isfinite") else torch_of(arr)
    check(fg_op(Tensor(arr)), ref, dtypes.bool)


@pytest.mark.parametrize("shape", [(), (0,), (1,), (2, 0, 3), (1, 1, 4)], ids=str)
@pytest.mark.parametrize("name", ["round", "isinf", "erf", "gelu", "atan"])
def test_unary_shapes(name: str, shape: tuple[int, ...]) -> None:
    fg_op, torch_op, (low, high), _ = UNARY[name]
    arr = np.random.default_rng(1).uniform(low, high, size=shape).astype(np.float32)
    check(fg_op(Tensor(arr)), torch_op(torch_of(arr)), dtypes.bool if name in BOOL_OUT else dtypes.float32)


def test_gelu_rejects_unknown_approximation() -> None:
    with pytest.raises(ValueError, match="gelu: unknown approximate='fast'"):
        Tensor([1.0]).gelu("fast")


def test_is_floating_point() -> None:
    assert Tensor([1.0]).is_floating_point()
    assert Tensor([1.0], dtype=dtypes.float16).is_floating_point()
    assert not Tensor([1]).is_floating_point()
    assert not Tensor([True]).is_floating_point()


# *** bitwise ***


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.bool], ids=str)
def test_bitwise_not(dtype: DType) -> None:
    arr = bools() if dtype == dtypes.bool else ints(0 if dtype == dtypes.uint8 else -100, 100).astype(NP_DTYPES[dtype])
    ref = torch.bitwise_not(torch_of(arr))
    check(Tensor(arr).bitwise_not(), ref, dtype)
    check(~Tensor(arr), ref, dtype)


def test_bitwise_not_rejects_floats() -> None:
    with pytest.raises(TypeError, match=r"bitwise_not: expected an integer or bool tensor, got dtypes\.float"):
        ~Tensor([1.0])


def test_shifts() -> None:
    a, amount = ints(-1000, 1000), ints(0, 7, seed=1)
    ta, tamount = torch_of(a), torch_of(amount)
    check(Tensor(a) << Tensor(amount), ta << tamount, dtypes.int32)
    check(Tensor(a) >> Tensor(amount), ta >> tamount, dtypes.int32)
    check(Tensor(a).lshift(3), ta << 3, dtypes.int32)
    check(Tensor(a).rshift(2), ta >> 2, dtypes.int32)
    check(1 << Tensor(amount), 1 << tamount, dtypes.int32)
    check(-256 >> Tensor(amount), -256 >> tamount, dtypes.int32)
    check(Tensor(a[:1]) << Tensor(amount), ta[:1] << tamount, dtypes.int32)  # broadcasting
    u = a.astype(np.uint8)
    check(Tensor(u) >> 1, torch_of(u) >> 1, dtypes.uint8)


def test_shifts_reject_floats_and_bools() -> None:
    with pytest.raises(TypeError, match=r"lshift: shifts need integer tensors, got dtypes\.float"):
        Tensor([1.0]) << 1
    with pytest.raises(TypeError, match=r"rshift: shifts need integer tensors, got dtypes\.bool"):
        Tensor([True]) >> Tensor([True])


# *** binary ops ***


def test_copysign() -> None:
    a, b = floats(dtypes.float32), floats(dtypes.float32, seed=1)[::-1].copy()
    check(Tensor(a).copysign(Tensor(b)), torch.copysign(torch_of(a), torch_of(b)), dtypes.float32)
    check(Tensor(a).copysign(-1.0), torch.copysign(torch_of(a), torch.tensor(-1.0)), dtypes.float32)
    assert math.copysign(1, Tensor([0.0]).copysign(-0.0).item()) == -1  # -0.0 has a sign
    assert math.copysign(1, Tensor([-0.0]).copysign(1.0).item()) == 1
    ia, ib = ints(), ints(seed=1)
    # two integer tensors stay integer (tinygrad's rule; torch returns float32 with the same values)
    check(Tensor(ia).copysign(Tensor(ib)), torch.copysign(torch_of(ia), torch_of(ib)), dtypes.int32)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16], ids=str)
def test_logaddexp(dtype: DType) -> None:
    a, b = floats(dtype, -20, 20), floats(dtype, -20, 20, seed=1)[:, ::-1].copy()
    b[0, :4] = [math.inf, -math.inf, 0.0, -math.inf]  # with a's inf, -inf, 0, -0 first: inf+inf, -inf+-inf, ...
    check(Tensor(a).logaddexp(Tensor(b)), torch.logaddexp(torch_of(a), torch_of(b)), dtype)
    check(Tensor(a).logaddexp(1.5), torch.logaddexp(torch_of(a), torch.tensor(1.5)), dtype)


def test_lerp() -> None:
    a, b = floats(dtypes.float32, specials=()), floats(dtypes.float32, specials=(), seed=1)
    w = np.random.default_rng(2).uniform(-0.5, 1.5, size=SHAPE).astype(np.float32)
    ta, tb = torch_of(a), torch_of(b)
    check(Tensor(a).lerp(Tensor(b), Tensor(w)), torch.lerp(ta, tb, torch_of(w)), dtypes.float32)
    for weight in (0.0, 0.3, 0.5, 1.0):
        check(Tensor(a).lerp(Tensor(b), weight), torch.lerp(ta, tb, weight), dtypes.float32)
    assert Tensor([0.1]).lerp(Tensor([0.7]), 1.0).item() == np.float32(0.7)  # weight 1 gives end exactly


def test_clamp() -> None:
    a = floats(dtypes.float32)
    lo, hi = floats(dtypes.float32, -2, 0, specials=(), seed=1), floats(dtypes.float32, 0, 2, specials=(), seed=2)
    ta = torch_of(a)
    check(Tensor(a).clamp(-1, 1.5), ta.clamp(-1, 1.5), dtypes.float32)
    check(Tensor(a).clip(-1, 1.5), ta.clip(-1, 1.5), dtypes.float32)
    check(Tensor(a).clamp(min_=0.5), ta.clamp(min=0.5), dtypes.float32)
    check(Tensor(a).clamp(max_=0.5), ta.clamp(max=0.5), dtypes.float32)
    check(Tensor(a).clamp(2, 1), ta.clamp(2, 1), dtypes.float32)  # min > max: everything is max, like torch
    check(Tensor(a).clamp(Tensor(lo), Tensor(hi)), ta.clamp(torch_of(lo), torch_of(hi)), dtypes.float32)
    i = ints()
    check(Tensor(i).clamp(-2, 3), torch_of(i).clamp(-2, 3), dtypes.int32)
    check(Tensor(i).clamp(-2.5, 3), torch_of(i).clamp(-2.5, 3), dtypes.float32)  # a float bound promotes
    with pytest.raises(ValueError, match="clamp: at least one of min_ and max_ must be given"):
        Tensor(a).clamp()


def test_isclose_allclose() -> None:
    a = floats(dtypes.float32)
    b = a.copy()
    b[1] += np.float32(1e-6) * np.arange(8, dtype=np.float32)  # some close, some not
    b[2] = -b[2]
    ta, tb = torch_of(a), torch_of(b)
    for kwargs in ({}, {"rtol": 1e-3}, {"atol": 1e-5, "rtol": 0.0}, {"equal_nan": True}):
        check(Tensor(a).isclose(Tensor(b), **kwargs), torch.isclose(ta, tb, **kwargs), dtypes.bool)
    check(Tensor(a).isclose(1.0), torch.isclose(ta, torch.ones_like(ta)), dtypes.bool)
    i = ints()
    check(Tensor(i).isclose(Tensor(i[::-1].copy())), torch.isclose(torch_of(i), torch_of(i[::-1].copy())))
    assert Tensor(a).allclose(Tensor(a), equal_nan=True).item() is True
    assert Tensor(a).allclose(Tensor(a)).item() is False  # NaN is not close to NaN by default
    assert Tensor(a[1:2, 4:]).allclose(Tensor(b[1:2, 4:]), atol=1e-5).item() is True


# *** pow ***

POW_EXPONENTS = [0, 1, 2, 3, -1, -2, 0.5, -0.5, 2.0, 1.7, -1.3, 7, 100, -0.0]


@pytest.mark.parametrize("exponent", POW_EXPONENTS, ids=str)
def test_pow_float_by_const(exponent: float) -> None:
    a = floats(dtypes.float32, specials=(*SPECIALS, 1.0001, -3.0))
    check(Tensor(a) ** exponent, torch_of(a) ** exponent, dtypes.float32, rtol=2e-5)


def test_pow_float_by_tensor() -> None:
    base = floats(dtypes.float32, -3, 3, specials=(0.0, -0.0, 0.0, -2.0, -2.0, 1.0, -1.0, math.inf, -math.inf, 2.0))
    exponent = floats(
        dtypes.float32, -3, 3, specials=(0.0, -1.0, 2.5, 3.0, 0.5, math.nan, math.inf, 3.0, 2.0, math.nan)
    )
    check(Tensor(base) ** Tensor(exponent), torch_of(base) ** torch_of(exponent), dtypes.float32, rtol=2e-5)
    check(Tensor(base).pow(Tensor(exponent)), torch.pow(torch_of(base), torch_of(exponent)), dtypes.float32, rtol=2e-5)
    check(2.0 ** Tensor(exponent), 2.0 ** torch_of(exponent), dtypes.float32)
    check(Tensor(base).pow(2.0, reverse=True), 2.0 ** torch_of(base), dtypes.float32)


def test_pow_half() -> None:
    a = floats(dtypes.float16, 0, 3, specials=(0.0, 1.0))
    check(Tensor(a) ** 2, torch_of(a) ** 2, dtypes.float16)
    check(Tensor(a) ** 2.5, torch_of(a) ** 2.5, dtypes.float16)
    check(Tensor(a) ** Tensor(a), torch_of(a) ** torch_of(a), dtypes.float16)


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 13, 31], ids=str)
def test_pow_int_by_const(exponent: int) -> None:
    a = ints(-7, 7)
    check(Tensor(a) ** exponent, torch_of(a) ** exponent, dtypes.int32)  # wraps like torch


def test_pow_int_by_tensor() -> None:
    base, exponent = ints(-4, 4), ints(-3, 20, seed=1)
    base[0, :4], exponent[0, :4] = [0, 1, -1, -1], [0, -5, -5, -4]
    check(Tensor(base) ** Tensor(exponent), torch_of(base) ** torch_of(exponent), dtypes.int32)
    check(2 ** Tensor(exponent), 2 ** torch_of(exponent), dtypes.int32)


def test_pow_dtypes() -> None:
    i = ints(0, 5)
    check(Tensor(i) ** 0.5, torch_of(i) ** 0.5, dtypes.float32)
    check(Tensor(i) ** 2.0, torch_of(i) ** 2.0, dtypes.float32)
    check(Tensor(bools()) ** 2, torch_of(bools()).int() ** 2, dtypes.int32)
    check(Tensor(i) ** Tensor(floats(dtypes.float32, 0, 2)), torch_of(i) ** torch_of(floats(dtypes.float32, 0, 2)))
    assert (Tensor([0.0]) ** 0).item() == 1.0
    assert (Tensor([0]) ** 0).item() == 1
    with pytest.raises(TypeError, match="pow: an integer tensor needs a non-negative integer exponent, got -1"):
        Tensor([2]) ** -1


def test_pow_broadcasts() -> None:
    base, exponent = floats(dtypes.float32, 0.5, 2, specials=())[:, :1], np.arange(8, dtype=np.float32) - 3
    check(Tensor(base) ** Tensor(exponent), torch_of(base) ** torch_of(exponent), dtypes.float32)
    check(Tensor(3.0) ** Tensor(exponent), 3.0 ** torch_of(exponent), dtypes.float32)


# *** division variants ***


def nonzero_ints(seed: int = 1) -> np.ndarray:
    d = ints(1, 4, seed)
    return np.where(np.random.default_rng(seed + 10).random(SHAPE) < 0.5, -d, d).astype(np.int32)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_rounding_mode(mode: str) -> None:
    a, b = ints(-20, 20), nonzero_ints()
    check(
        Tensor(a)._div_rounded(Tensor(b), rounding_mode=mode), torch.div(torch_of(a), torch_of(b), rounding_mode=mode)
    )
    fa, fb = floats(dtypes.float32, -20, 20, specials=()), floats(dtypes.float32, 0.5, 4, specials=(), seed=1)
    fb[::2] = -fb[::2]
    ref = torch.div(torch_of(fa), torch_of(fb), rounding_mode=mode)
    check(Tensor(fa)._div_rounded(Tensor(fb), rounding_mode=mode), ref, dtypes.float32)
    check(Tensor(b)._div_rounded(7, True, mode), torch.div(7, torch_of(b), rounding_mode=mode), dtypes.int32)
    check(Tensor(a)._div_rounded(Tensor(b)), torch.div(torch_of(a), torch_of(b)), dtypes.float32)


def test_mod_is_floor_mod_for_ints_and_floats() -> None:
    """Tensor.mod and % take the sign of the divisor for ints and floats, as torch.remainder and the reference."""
    a, b = [-4, 7, 5, 4, -7, 8, -9], [2, -3, 8, -2, 3, 5, -5]
    fa, fb = [float(v) + 0.25 for v in a], [float(v) for v in b]
    check(Tensor(a).mod(Tensor(b)), torch.remainder(torch.tensor(a), torch.tensor(b)), dtypes.int32)
    check(Tensor(fa).mod(Tensor(fb)), torch.remainder(torch.tensor(fa), torch.tensor(fb)), dtypes.float32)
    check(Tensor(fa) % 3.5, torch.tensor(fa) % 3.5, dtypes.float32)
    check(100.5 % Tensor(fb), 100.5 % torch.tensor(fb), dtypes.float32)


def test_div_rounding_mode_rejects_unknown_modes() -> None:
    with pytest.raises(ValueError, match="div: unknown rounding_mode 'round'"):
        Tensor([1])._div_rounded(2, rounding_mode="round")  # type: ignore[arg-type]


def test_fmod_and_floor_mod() -> None:
    a, b = ints(-20, 20), nonzero_ints()
    check(Tensor(a).fmod(Tensor(b)), torch.fmod(torch_of(a), torch_of(b)), dtypes.int32)
    check(Tensor(a)._mod_floor(Tensor(b)), torch.remainder(torch_of(a), torch_of(b)), dtypes.int32)
    check(Tensor(b)._mod_floor(7, reverse=True), torch.remainder(7, torch_of(b)), dtypes.int32)
    fa, fb = floats(dtypes.float32, -20, 20, specials=()), floats(dtypes.float32, 0.5, 4, specials=(), seed=1)
    fb[::2] = -fb[::2]
    check(Tensor(fa).fmod(Tensor(fb)), torch.fmod(torch_of(fa), torch_of(fb)), dtypes.float32, atol=1e-5)
    check(Tensor(fa)._mod_floor(Tensor(fb)), torch.remainder(torch_of(fa), torch_of(fb)), dtypes.float32, atol=1e-5)
    check(Tensor(fa).fmod(1.5), torch.fmod(torch_of(fa), 1.5), dtypes.float32, atol=1e-5)


def test_float_add_constants_are_not_reassociated() -> None:
    u = Tensor(np.array([1e-10, 3.0], dtype=np.float32))
    assert ((1 + u) - 1).tolist() == [0.0, 3.0]  # 1 + 1e-10 rounds to 1 in float32


# *** in-place operators ***


def test_inplace_operators_write_into_self() -> None:
    t = Tensor([1, 2, 3, 4]).realize()
    same = t
    t **= 2
    t |= 1
    t &= 0b1101
    t ^= 2
    t <<= 2
    t >>= 1
    assert t is same
    assert t.tolist() == [((((x**2) | 1) & 0b1101) ^ 2) << 2 >> 1 for x in (1, 2, 3, 4)]
    f = Tensor([1.0, 2.0])
    f **= 2
    assert f.tolist() == [1.0, 4.0]
    m = Tensor([-7, 7, 5]).realize()
    before = m
    m //= 2
    m %= 3
    assert m is before
    assert m.tolist() == [(-7 // 2) % 3, (7 // 2) % 3, (5 // 2) % 3]


# *** the PYTHON device (the executable spec) ***


def test_rounding_and_integer_ops_on_python_device() -> None:
    a = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.7, 2.3, math.nan], dtype=np.float32)
    t, ta = Tensor(a, device="PYTHON"), torch_of(a)
    for name in ("round", "floor", "ceil", "sign", "isnan"):
        check(UNARY[name][0](t), UNARY[name][1](ta))
    i, d = ints(-20, 20, shape=(6,)), np.array([3, -3, 2, -7, 5, -1], dtype=np.int32)
    ti, td = Tensor(i, device="PYTHON"), Tensor(d, device="PYTHON")
    check(ti << 2, torch_of(i) << 2)
    check(ti >> 1, torch_of(i) >> 1)
    check(~ti, ~torch_of(i))
    check(ti**3, torch_of(i) ** 3)
    check(
        td ** Tensor(np.array([0, 1, 2, 3, -1, 7], dtype=np.int32), device="PYTHON"),
        torch.tensor([1, -3, 4, -343, 0, -1]),
    )
    check(ti._div_rounded(td, rounding_mode="floor"), torch.div(torch_of(i), torch_of(d), rounding_mode="floor"))
    check(ti._mod_floor(td), torch.remainder(torch_of(i), torch_of(d)))
    check(ti.fmod(td), torch.fmod(torch_of(i), torch_of(d)))


# *** backward (where autograd exists) ***

needs_backward = pytest.mark.skipif(not hasattr(Tensor, "backward"), reason="Tensor.backward is not implemented yet")
BACKWARD_OPS = [name for name in UNARY if name not in BOOL_OUT]  # rounding and sign: a zero gradient, as torch


@needs_backward
@pytest.mark.parametrize("name", BACKWARD_OPS)
def test_backward_matches_torch(name: str) -> None:
    fg_op, torch_op, (low, high), _ = UNARY[name]
    margin = (high - low) / 20  # stay off the ends of the domain (asin at +-1, rsqrt at 0)
    arr = np.random.default_rng(3).uniform(low + margin, high - margin, size=SHAPE).astype(np.float32)
    upstream = np.random.default_rng(4).uniform(-1, 1, size=SHAPE).astype(np.float32)
    x = Tensor(arr, requires_grad=True)
    (fg_op(x) * Tensor(upstream)).sum().backward()
    tx = torch.from_numpy(arr.copy()).requires_grad_()
    (torch_op(tx) * torch.from_numpy(upstream)).sum().backward()
    assert x.grad is not None
    assert tx.grad is not None
    check(x.grad, tx.grad, dtypes.float32, rtol=1e-4, atol=1e-5)


# (fusegrad op, torch op) of two float tensors; `b` is bounded away from zero (a divisor)
BINARY_BACKWARD: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[Any, Any], Any]]] = {
    "copysign": (lambda a, b: a.copysign(b), torch.copysign),
    "logaddexp": (lambda a, b: a.logaddexp(b), torch.logaddexp),
    "lerp": (lambda a, b: a.lerp(b, a.sigmoid()), lambda a, b: torch.lerp(a, b, a.sigmoid())),
    "lerp_const": (lambda a, b: a.lerp(b, 0.75), lambda a, b: torch.lerp(a, b, 0.75)),
    "clamp": (lambda a, b: a.clamp(b - 1, b + 1), lambda a, b: a.clamp(b - 1, b + 1)),
    "fmod": (lambda a, b: a.fmod(b), torch.fmod),
    "floor_mod": (lambda a, b: a % b, torch.remainder),
    "maximum": (lambda a, b: a.maximum(b), torch.maximum),
    "minimum": (lambda a, b: a.minimum(b), torch.minimum),
}


@needs_backward
@pytest.mark.parametrize("name", BINARY_BACKWARD)
def test_binary_backward_matches_torch(name: str) -> None:
    fg_op, torch_op = BINARY_BACKWARD[name]
    rng = np.random.default_rng(5)
    a = rng.uniform(-3, 3, size=SHAPE).astype(np.float32)
    b = (rng.uniform(0.5, 2, size=SHAPE) * rng.choice([-1, 1], size=SHAPE)).astype(np.float32)
    upstream = rng.uniform(-1, 1, size=SHAPE).astype(np.float32)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    (fg_op(x, y) * Tensor(upstream)).sum().backward()
    tx, ty = torch.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(b.copy()).requires_grad_()
    (torch_op(tx, ty) * torch.from_numpy(upstream)).sum().backward()
    for ours, theirs in ((x, tx), (y, ty)):
        assert ours.grad is not None
        assert theirs.grad is not None
        check(ours.grad, theirs.grad, dtypes.float32, rtol=1e-4, atol=1e-5)


@needs_backward
def test_pow_backward_matches_torch() -> None:
    base = np.random.default_rng(4).uniform(0.5, 2.5, size=SHAPE).astype(np.float32)
    exponent = np.random.default_rng(5).uniform(-2, 2, size=SHAPE).astype(np.float32)
    b, e = Tensor(base, requires_grad=True), Tensor(exponent, requires_grad=True)
    (b**e + b**3).sum().backward()
    tb, te = torch.from_numpy(base.copy()).requires_grad_(), torch.from_numpy(exponent.copy()).requires_grad_()
    (tb**te + tb**3).sum().backward()
    assert b.grad is not None
    assert e.grad is not None
    check(b.grad, tb.grad, dtypes.float32, rtol=1e-4, atol=1e-5)
    check(e.grad, te.grad, dtypes.float32, rtol=1e-4, atol=1e-5)


@needs_backward
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16], ids=str)
def test_sigmoid_based_activations_have_finite_gradients_far_out(dtype: DType) -> None:
    """exp(-x) overflows far below zero; the gradient must be 0 there (torch's), not 0 * inf = NaN."""
    values = [-100.0, -30.0, -12.0, 0.0, 12.0, 30.0]
    for name in ("silu", "gelu", "quick_gelu"):
        fg_op, torch_op, _, _ = UNARY[name]
        x = Tensor(values, dtype=dtype, requires_grad=True)
        fg_op(x).sum().backward()
        tx = torch.tensor(values, requires_grad=True)
        torch_op(tx).sum().backward()
        assert x.grad is not None
        assert tx.grad is not None
        check(x.grad, tx.grad, dtype, atol=1e-3)


# inputs where a piecewise composition used to give NaN or a wrong gradient: overflow in a branch that `where` does
# not choose (0 * inf), or a kink at a tie (softplus and logaddexp at 0, pow at base 1 or exponent 0)
EDGE_GRADIENTS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Any], Any], list[float]]] = {
    "elu": (lambda t: t.elu(), F.elu, [100.0, 0.1, 0.0, -3.0]),
    "celu": (lambda t: t.celu(0.5), lambda a: F.celu(a, 0.5), [100.0, 0.1, -3.0]),
    "selu": (lambda t: t.selu(), F.selu, [100.0, -3.0]),
    "atan": (lambda t: t.atan(), torch.atan, [0.0, -0.0, 1e-3, 0.3, 1.0, 5.0, 1e30]),
    "asinh": (lambda t: t.asinh(), torch.asinh, [0.0, 1e-3, 2.0, 1e11, -1e20]),
    "acosh": (lambda t: t.acosh(), torch.acosh, [1.5, 2.0, 1e11, 1e20]),
    "erf": (lambda t: t.erf(), torch.erf, [0.0, 0.5, 3.0, 30.0, -1e20]),
    "softplus": (lambda t: t.softplus(), F.softplus, [0.0, 100.0, -100.0]),
    "logsigmoid": (lambda t: t.logsigmoid(), F.logsigmoid, [0.0, 100.0, -100.0]),
    "mish": (lambda t: t.mish(), F.mish, [0.0, 50.0, -50.0]),
    "pow_const": (lambda t: t**2.5, lambda a: a**2.5, [0.0, 1.0, 3.0]),
    "pow_tensor": (
        lambda t: t ** Tensor([2.0, 3.0, 1.0, 2.0]),
        lambda a: a ** torch.tensor([2.0, 3.0, 1.0, 2.0]),
        [0.0, -1.5, 0.0, 1.0],
    ),
    "rpow_tensor": (
        lambda t: Tensor([2.0, 0.0, 1.0, 3.0]) ** t,
        lambda a: torch.tensor([2.0, 0.0, 1.0, 3.0]) ** a,
        [0.0, 2.0, 5.0, 1.0],
    ),
    "rpow_const": (lambda t: 2.0**t, lambda a: 2.0**a, [0.0, 1.0, -3.0]),
    "logaddexp": (
        lambda t: t.logaddexp(Tensor([1.0, -math.inf, 0.0])),
        lambda a: torch.logaddexp(a, torch.tensor([1.0, -math.inf, 0.0])),
        [1.0, 0.0, -math.inf],
    ),
}


@needs_backward
@pytest.mark.parametrize("name", EDGE_GRADIENTS)
def test_gradients_at_edge_inputs_match_torch(name: str) -> None:
    fg_op, torch_op, values = EDGE_GRADIENTS[name]
    x = Tensor(values, requires_grad=True)
    out = fg_op(x)
    out.sum().backward()
    tx = torch.tensor(values, requires_grad=True)
    want = torch_op(tx)
    want.sum().backward()
    assert x.grad is not None
    assert tx.grad is not None
    check(out, want.detach(), dtypes.float32, rtol=1e-5, atol=1e-6)
    check(x.grad, tx.grad, dtypes.float32, rtol=1e-4, atol=1e-6)


_NAN_EDGES = [math.nan, -math.inf, -1.0, -0.0, 0.0, 1.0, math.inf]


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("op", ["lt", "gt", "le", "ge", "eq", "ne"])
def test_compare_with_nan_is_ieee(device: str, op: str) -> None:
    """NaN compares false with everything (ne: true), both ways and against Python scalars; >= and <= once read
    not(<), which called NaN >= 1 true."""
    a, b = np.array(np.meshgrid(_NAN_EDGES, _NAN_EDGES), dtype=np.float32).reshape(2, -1)
    fn = {"lt": np.less, "gt": np.greater, "le": np.less_equal, "ge": np.greater_equal, "eq": np.equal,
          "ne": np.not_equal}[op]  # fmt: skip
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal(getattr(ta, op)(tb).numpy(), fn(a, b))
    np.testing.assert_array_equal(getattr(ta, op)(1.0).numpy(), fn(a, np.float32(1.0)))
    dunder = {"lt": "__lt__", "gt": "__gt__", "le": "__le__", "ge": "__ge__", "eq": "__eq__", "ne": "__ne__"}[op]
    np.testing.assert_array_equal(getattr(ta, dunder)(tb).numpy(), fn(a, b))


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_int_le_ge_unchanged(device: str) -> None:
    a = np.array([-(2**31), -1, 0, 1, 2**31 - 1], dtype=np.int32)
    t = Tensor(a, device=device)
    np.testing.assert_array_equal((t >= 0).numpy(), a >= 0)
    np.testing.assert_array_equal((t <= 0).numpy(), a <= 0)
    np.testing.assert_array_equal((0 >= t).numpy(), 0 >= a)  # noqa: SIM300  # the reflected form on purpose


def test_relu_keeps_nan_like_torch() -> None:
    x = np.array([math.nan, -math.inf, -1.0, -0.0, 0.0, 2.0, math.inf], dtype=np.float32)
    t = Tensor(x, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    out, tout = t.relu(), torch.relu(tt)
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    assert t.grad is not None
    assert tt.grad is not None
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("np_dtype", [np.float64, np.float32, np.float16])
def test_tanh_keeps_relative_precision(device: str, np_dtype: Any) -> None:
    """tanh(x) ~ x near 0: 2 sigmoid(2x) - 1 gave 0 below ~1e-17 (float64), so pow(tanh(x), x) was 0 or inf where
    numpy gives 1 or NaN (found by the differential fuzzer). Within 2 ulp of float64's tanh over 640 decades."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(600) * 10.0 ** rng.uniform(-320, 3, 600)
    x = np.concatenate([x, [0.0, -0.0, 5e-324, -5e-324, 0.25, -0.25, 0.2499999, 20.0, -20.0, math.inf, -math.inf]])
    x = x.astype(np_dtype)
    got = Tensor(x, device=device).tanh().numpy()
    want = np.tanh(x.astype(np.float64)).astype(np_dtype)
    assert got.dtype == np_dtype
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 stays -0.0
    ulps = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want)).astype(np.float64)
    assert ulps.max() <= 2, (x[ulps.argmax()], got[ulps.argmax()], want[ulps.argmax()])
    xf = np.array([5e-324, -1.3e-62, 1e-30], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(Tensor(xf, device=device).tanh().pow(Tensor(xf, device=device)).numpy(),
                                      np.power(np.tanh(xf), xf))  # fmt: skip


def test_tanh_gradient_matches_torch_and_stays_finite() -> None:
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.uniform(-30, 3, 200), [0.0, 1e4, -1e30, math.inf]])
    x = x.astype(np.float32)
    t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    t.tanh().sum().backward()
    tt.tanh().sum().backward()
    assert t.grad is not None
    assert tt.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-6, atol=1e-7)
