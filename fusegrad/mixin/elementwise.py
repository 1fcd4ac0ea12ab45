"""Tensor methods: unary math, activations and binary ops beyond the core (exp, relu, ...).

Every op is composed from the core primitives (exp2, log2, sin, sqrt, reciprocal, trunc, comparisons, where, bitwise
ops), so each backend and autograd get them without new UOps. Transcendental compositions compute in float32 (float64
stays float64) and round once at the end, so float16 inputs keep float32 accuracy. A piecewise op feeds each branch of
its `where` only the inputs that branch is chosen for (others get a harmless constant): the gradient of a branch that is
not chosen is 0 times its derivative, which is NaN wherever that branch overflows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from fusegrad.dtype import ConstType, DType, dtypes, least_upper_dtype, least_upper_float
from fusegrad.errors import OpTypeError, OpValueError
from fusegrad.mixin import traced
from fusegrad.uop import Ops

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor

_LN2 = math.log(2)
_LOG2E = 1 / math.log(2)
# Taylor coefficients in z = x*x, lowest power first; each series is only used where it converges to float32 precision
# asin(x) = x * sum C(2n, n) / (4^n (2n+1)) z^n             for |x| <= 0.5 (last term used < 1e-9)
_ASIN = [math.comb(2 * n, n) / (4**n * (2 * n + 1)) for n in range(13)]
# atan(x) = x * sum (-1)^n z^n / (2n+1)                     for |x| <= tan(pi/8) (last term used < 1e-9)
_ATAN = [(-1) ** n / (2 * n + 1) for n in range(12)]
# erf(x) = x * 2/sqrt(pi) * sum (-1)^n z^n / (n! (2n+1))    for |x| < 1 (last term used < 1e-11)
_ERF = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(13)]
# sinh(x) = x * sum z^n / (2n+1)!                           for |x| < 1 (last term used < 1e-10)
_SINH = [1 / math.factorial(2 * n + 1) for n in range(7)]
# atanh(s) = s * sum z^n / (2n+1)                           for |s| <= 0.2 (last term used < 1e-10)
_ATANH = [1 / (2 * n + 1) for n in range(7)]
# expm1(x) = x * sum x^n / (n+1)!                           for |x| < 0.5 (last term used < 1e-11)
# (17 terms reach float64 precision at |x| < 0.5: tanh uses them; expm1 the first 11)
_EXPM1_LONG = [1 / math.factorial(n + 1) for n in range(17)]
_EXPM1 = _EXPM1_LONG[:11]
# erf(x) = 1 - t * P(t) * exp(-x^2), t = 1/(1 + p x), x >= 0: Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7
_ERF_P = 0.3275911
_ERF_TAIL = [0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429]


def _poly(x: Tensor, coefficients: Sequence[float]) -> Tensor:
    """sum c_n x^n by Horner's rule (coefficients lowest power first)."""
    acc = x * coefficients[-1] + coefficients[-2]
    for c in reversed(coefficients[:-2]):
        acc = acc * x + c
    return acc


def _compute_dtype(dt: DType) -> DType:
    """The float dtype a composition runs in: float32, or float64 for float64 inputs."""
    return least_upper_dtype(least_upper_float(dt), dtypes.float32)


def _in_float(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """fn(x) computed in float32 (or wider); the result has x's float dtype (ints and bools become float32)."""
    return fn(x.cast(_compute_dtype(x.dtype))).cast(least_upper_float(x.dtype))


def _log1p(u: Tensor) -> Tensor:
    """log(1 + u), accurate for small u. Near 0 a series in s = u / (2 + u): log1p(u) = 2 atanh(s); not the
    log(w) * u / (w - 1) trick, which the float-unsound fold (1 + u) - 1 -> u in the symbolic rules defeats."""
    s = u / (2 + u)
    near_zero = 2 * s * _poly(s * s, _ATANH)
    return ((u > -0.3) & (u < 0.5)).where(near_zero, (1 + u).log())


def _expm1(x: Tensor) -> Tensor:
    """exp(x) - 1, accurate for small x: a Taylor series where exp(x) - 1 would cancel."""
    return (x.abs() < 0.5).where(x * _poly(x, _EXPM1), x.exp() - 1)


def _asin_small(x: Tensor) -> Tensor:
    """asin(x) for |x| <= 0.5."""
    return x * _poly(x * x, _ASIN)


def _atan_small(x: Tensor) -> Tensor:
    """atan(x) for |x| <= tan(pi/8)."""
    return x * _poly(x * x, _ATAN)


def _softplus(y: Tensor) -> Tensor:
    """log(1 + exp(y)) without overflow and with the gradient sigmoid(y) everywhere (also at 0, where a max(y, 0)
    form gets the tie wrong): y + log1p(exp(-y)) for y > 0, log1p(exp(y)) elsewhere."""
    positive = y > 0
    above, below = positive.where(y, 0), positive.where(0, y)  # each branch sees exponents <= 0 only
    return positive.where(above + _log1p((-above).exp()), _log1p(below.exp()))


def _sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) from e = exp(-|x|) <= 1, which never overflows: Tensor.sigmoid's exp(-x) is inf below
    x = -88 (float32) or -11 (float16), and its gradient there is 0 * inf = NaN; this one's stays finite."""
    e = (x < 0).where(x, -x).exp()  # -|x| spelled out: its gradient at 0 must be -1 here, not abs's 0
    return (x < 0).where(e, 1) / (1 + e)


def _tanh(x: Tensor) -> Tensor:
    """tanh(x) = sign(x) * -m / (2 + m) with m = expm1(-2|x|): 2 * sigmoid(2x) - 1 cancels near 0 (it is 0 for
    |x| below ~1e-17 in float64, where tanh(x) = x), and pow(tanh(x), y) turned that into 0 or inf. m comes from a
    Taylor series where |2x| < 0.5, summed to the dtype's precision, and from exp elsewhere; each branch only sees
    the inputs it is chosen for, so neither gradient meets an overflow."""
    a = _magnitude(x)
    small = a < 0.25
    u = -2 * small.where(a, 0)
    terms = 17 if x.dtype == dtypes.float64 else 9  # u^n / (n+1)! at |u| = 0.5 below a tenth of the dtype's epsilon
    m = small.where(u * _poly(u, _EXPM1_LONG[:terms]), (-2 * a).exp() - 1)
    t = -m / (2 + m)
    return (x < 0).where(-t, t)


def _magnitude(x: Tensor) -> Tensor:
    """|x| with gradient 1 at 0 (abs's is 0, as torch's): odd functions built as f(|x|) with the sign put back
    (atan, atanh, asinh) need the slope of f at 0 to come through."""
    return (x < 0).where(-x, x)


def _is_negative(x: Tensor) -> Tensor:
    """The sign bit of a float: True for negative values and -0.0 (1/-0.0 is -inf)."""
    return (x < 0) | ((x == 0) & (x.reciprocal() < 0))


def _shift(x: Tensor, op: Ops, y: Tensor | int, name: str, reverse: bool) -> Tensor:
    a, b = x._broadcasted(y, name, reverse)
    if not dtypes.is_int(a.dtype):
        raise TypeError(f"{name}: shifts need integer tensors, got {a.dtype}")
    return type(x)(a.uop.alu(op, b.uop))


def _int_pow(base: Tensor, exponent: Tensor) -> Tensor:
    """base ** exponent for integer tensors by binary exponentiation over every exponent bit; wraps like torch.
    Negative exponents give the truncated integer 1 / base**-e: 1 for base 1, +-1 for base -1, else 0."""
    result, power = base.ones_like(), base
    # every exponent bit: a signed exponent's sign bit is the negative branch below, an unsigned one's top bit counts
    for bit in range(base.dtype.itemsize * 8 - (0 if dtypes.is_unsigned(base.dtype) else 1)):
        result = ((exponent >> bit) & 1).where(result * power, result)
        power = power * power
    if dtypes.is_unsigned(base.dtype):
        return result
    minus_one = (exponent & 1).where(-1, 1).cast(base.dtype)
    negative = (base == 1).where(1, (base == -1).where(minus_one, 0)).cast(base.dtype)
    return (exponent < 0).where(negative, result)


def _float_pow(base: Tensor, exponent: Tensor) -> Tensor:
    """base ** exponent for float tensors of one shape and dtype: the POW primitive, C's pow with its special cases
    (0 ** 0 = 1, 1 ** nan = 1, a negative base to a non-integer power is NaN). Its gradients are torch's (gradient.py):
    e * b ** (e - 1) and b ** e * ln(b), so inf at a zero base under 0 < e < 1 and NaN in e for a negative base."""
    return type(base)(base.uop.alu(Ops.POW, exponent.uop))


def _const_pow(base: Tensor, exponent: float) -> Tensor:
    """base ** a Python number: exact repeated squaring for small integer powers, sqrt for +-0.5."""
    if exponent == 0.5:
        return base.sqrt()
    if exponent == -0.5:
        return base.sqrt().reciprocal()
    n = abs(int(exponent)) if float(exponent).is_integer() else -1
    if n < 0 or (n > 64 and not dtypes.is_int(base.dtype)):  # an int tensor stays int (wrapping) at any power
        return _in_float(base, lambda b: _float_pow(b, b.full_like(exponent)))
    result: Tensor | None = None
    power = base
    while n:
        if n & 1:
            result = power if result is None else result * power
        n >>= 1
        power = power * power if n else power
    if result is None:  # x ** 0: 1 everywhere (NaN and inf too, as C's pow), built on base so its gradient is 0
        ones = base.ones_like()
        return (base != base).where(ones, ones)
    return result.reciprocal() if exponent < 0 else result


class ElementwiseMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()

    # *** rounding and sign ***

    @traced
    def sign(self: Tensor) -> Tensor:
        """-1, 0 or 1 in self's dtype; NaN gives 0, like torch (tinygrad gives 1).

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([-2.0, 0.0, 3.0]).sign().tolist()
            [-1.0, 0.0, 1.0]
        """
        if self.dtype == dtypes.bool:
            return self
        return (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype)

    @traced
    def ceil(self: Tensor) -> Tensor:
        """Round toward +inf; integer and bool tensors are returned as they are.

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([-1.5, 1.2]).ceil().tolist()
            [-1.0, 2.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    @traced
    def floor(self: Tensor) -> Tensor:
        """Round toward -inf; integer and bool tensors are returned as they are.

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([-1.5, 1.2]).floor().tolist()
            [-2.0, 1.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    @traced
    def round(self: Tensor) -> Tensor:
        """Round half to even, like torch and numpy; integer and bool tensors are returned as they are.

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist()
            [0.0, 2.0, 2.0, -0.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        frac = (self - t).abs()  # exact; NaN for +-inf, which then fails every test below and keeps t
        t_is_odd = (t * 0.5).trunc() != t * 0.5
        away = (frac > 0.5) | ((frac == 0.5) & t_is_odd)  # not floor(x + 0.5): x + 0.5 rounds up for 0.49999997
        return away.where((self > 0).where(t + 1, t - 1), t)

    # *** classification ***

    @traced
    def isnan(self: Tensor) -> Tensor:
        """True where self is NaN (a bool tensor of self's shape).

        Returns:
            A bool tensor of self's shape.

        Examples:
            >>> Tensor([1.0, float("nan")]).isnan().tolist()
            [False, True]
        """
        return self != self

    @traced
    def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """True where self is +inf (if `detect_positive`) or -inf (if `detect_negative`).

        Args:
            detect_positive: count +inf.
            detect_negative: count -inf.

        Returns:
            A bool tensor of self's shape.

        Examples:
            >>> Tensor([float("inf"), float("-inf"), 1.0]).isinf(detect_negative=False).tolist()
            [True, False, False]
        """
        ret = self.full_like(False, dtype=dtypes.bool)
        if not dtypes.is_float(self.dtype):
            return ret
        if detect_positive:
            ret = ret | (self == math.inf)
        if detect_negative:
            ret = ret | (self == -math.inf)
        return ret

    @traced
    def isfinite(self: Tensor) -> Tensor:
        """True where self is neither inf nor NaN.

        Returns:
            A bool tensor of self's shape.

        Examples:
            >>> Tensor([1.0, float("inf"), float("nan")]).isfinite().tolist()
            [True, False, False]
        """
        if not dtypes.is_float(self.dtype):
            return self.full_like(True, dtype=dtypes.bool)
        return self.abs() < math.inf  # NaN compares False

    @traced
    def isclose(
        self: Tensor, other: Tensor | ConstType, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> Tensor:
        """|self - other| <= atol + rtol * |other| elementwise (infs are close only to themselves), broadcasting.

        Args:
            other: a tensor or number, broadcast with self.
            rtol: the relative tolerance.
            atol: the absolute tolerance.
            equal_nan: count NaN as close to NaN.

        Returns:
            A bool tensor of the broadcast shape.

        Examples:
            >>> Tensor([1.0, 2.0]).isclose(Tensor([1.0 + 1e-7, 2.1])).tolist()
            [True, False]
        """
        a, b = self._broadcasted(other, "isclose")
        if a.dtype == dtypes.bool:
            return a == b
        a, b = a.cast(_compute_dtype(a.dtype)), b.cast(_compute_dtype(a.dtype))
        close = (a == b) | (a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs()))
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    @traced
    def allclose(
        self: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> Tensor:
        """True (a 0-d bool tensor, like tinygrad) if every element is close; see `isclose`.

        Args:
            other: a tensor, broadcast with self.
            rtol: the relative tolerance.
            atol: the absolute tolerance.
            equal_nan: count NaN as close to NaN.

        Returns:
            A 0-d bool tensor.

        Examples:
            >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-6])).item()
            True
        """
        return self.isclose(other, rtol=rtol, atol=atol, equal_nan=equal_nan).all()

    def is_floating_point(self: Tensor) -> bool:
        """True for float dtypes.

        Returns:
            Whether self's dtype is a float dtype (a Python bool).

        Examples:
            >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
            (True, False)
        """
        return dtypes.is_float(self.dtype)

    # *** bitwise ***

    @traced
    def bitwise_not(self: Tensor) -> Tensor:
        """~self for integer tensors, logical not for bools; `~t` calls it. Raises OpTypeError (a TypeError and
        RuntimeError) for floats.

        Returns:
            A tensor of self's shape and dtype.

        Raises:
            OpTypeError: (a TypeError and RuntimeError) a float tensor.

        Examples:
            >>> Tensor([0, -3]).bitwise_not().tolist(), Tensor([True, False]).bitwise_not().tolist()
            ([-1, 2], [False, True])
        """
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if not dtypes.is_int(self.dtype):
            raise OpTypeError(f"bitwise_not: expected an integer or bool tensor, got {self.dtype}")
        return self ^ (dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1)

    @traced
    def lshift(self: Tensor, x: Tensor | int, reverse: bool = False) -> Tensor:
        """self << x for integer tensors (shifts by the bit width or more are undefined). Raises TypeError for floats
        and bools.

        Args:
            x: the shift, a tensor or int.
            reverse: compute x << self instead.

        Returns:
            An integer tensor.

        Examples:
            >>> Tensor([1, 3]).lshift(2).tolist()
            [4, 12]
        """
        return _shift(self, Ops.SHL, x, "lshift", reverse)

    @traced
    def rshift(self: Tensor, x: Tensor | int, reverse: bool = False) -> Tensor:
        """self >> x for integer tensors, arithmetic for signed ones. Raises TypeError for floats and bools.

        Args:
            x: the shift, a tensor or int.
            reverse: compute x >> self instead.

        Returns:
            An integer tensor.

        Examples:
            >>> Tensor([-8, 13]).rshift(2).tolist()
            [-2, 3]
        """
        return _shift(self, Ops.SHR, x, "rshift", reverse)

    def __invert__(self: Tensor) -> Tensor:
        return self.bitwise_not()

    # *** trigonometric and hyperbolic ***

    @traced
    def cos(self: Tensor) -> Tensor:
        """Cosine, as 1 - 2 sin(x/2)^2: halving is exact, so large arguments stay accurate.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 3.14159265]).cos().tolist()]
            [1.0, -1.0]
        """
        return _in_float(self, lambda x: 1 - 2 * (x * 0.5).sin().square())

    @traced
    def tan(self: Tensor) -> Tensor:
        """Tangent.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.78539816]).tan().tolist()]
            [0.0, 1.0]
        """
        return _in_float(self, lambda x: x.sin() / x.cos())

    @traced
    def asin(self: Tensor) -> Tensor:
        """Arcsine in [-pi/2, pi/2]; NaN outside [-1, 1].

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).asin().tolist()]
            [1.5708]
        """

        def asin(x: Tensor) -> Tensor:
            a = _magnitude(x)
            big = math.pi / 2 - 2 * _asin_small(((1 - a) * 0.5).sqrt())  # asin(a) = pi/2 - 2 asin(sqrt((1-a)/2))
            return (a <= 0.5).where(_asin_small(x), (x < 0).where(-big, big))

        return _in_float(self, asin)

    @traced
    def acos(self: Tensor) -> Tensor:
        """Arccosine in [0, pi]; NaN outside [-1, 1].

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0]).acos().tolist()]
            [3.1416]
        """

        def acos(x: Tensor) -> Tensor:
            near_one = 2 * _asin_small(((1 - x.abs()) * 0.5).sqrt())  # acos(|x|) without cancellation near |x| = 1
            far = (x < 0).where(math.pi - near_one, near_one)
            return (x.abs() <= 0.5).where(math.pi / 2 - _asin_small(x), far)

        return _in_float(self, acos)

    @traced
    def atan(self: Tensor) -> Tensor:
        """Arctangent in (-pi/2, pi/2).

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).atan().tolist()]
            [0.7854]
        """

        def atan(x: Tensor) -> Tensor:
            a = _magnitude(x)
            is_small, not_big = a <= math.tan(math.pi / 8), a <= math.tan(3 * math.pi / 8)
            # reduce to |t| <= tan(pi/8): atan(a) = pi/4 + atan((a-1)/(a+1)) = pi/2 - atan(1/a); each branch gets
            # only its own inputs (1/a and the series overflow elsewhere)
            a_mid = (not_big & is_small.logical_not()).where(a, 1)
            mid = math.pi / 4 + _atan_small((a_mid - 1) / (a_mid + 1))
            big = math.pi / 2 - _atan_small(not_big.where(1, a).reciprocal())  # also NaN for NaN
            ret = is_small.where(_atan_small(is_small.where(a, 0)), not_big.where(mid, big))
            return (x < 0).where(-ret, ret)

        return _in_float(self, atan)

    @traced
    def sinh(self: Tensor) -> Tensor:
        """Hyperbolic sine.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).sinh().tolist()]
            [1.1752]
        """

        def sinh(x: Tensor) -> Tensor:
            h = (x.abs() * _LOG2E - 1).exp2()  # e^|x| / 2 without overflowing before the result does
            big = h - 0.25 / h
            return (x.abs() < 1).where(x * _poly(x * x, _SINH), (x < 0).where(-big, big))

        return _in_float(self, sinh)

    @traced
    def cosh(self: Tensor) -> Tensor:
        """Hyperbolic cosine.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).cosh().tolist()]
            [1.0, 1.5431]
        """

        def cosh(x: Tensor) -> Tensor:
            h = (x.abs() * _LOG2E - 1).exp2()
            return h + 0.25 / h

        return _in_float(self, cosh)

    @traced
    def atanh(self: Tensor) -> Tensor:
        """Inverse hyperbolic tangent; +-inf at +-1, NaN outside.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.5]).atanh().tolist()]
            [0.5493]
        """

        def atanh(x: Tensor) -> Tensor:
            a = _magnitude(x)  # on |x|: 2x / (1 - x) loses every digit near x = -1
            ret = 0.5 * _log1p(2 * a / (1 - a))
            return (x < 0).where(-ret, ret)

        return _in_float(self, atanh)

    @traced
    def asinh(self: Tensor) -> Tensor:
        """Inverse hyperbolic sine.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).asinh().tolist()]
            [0.8814]
        """

        def asinh(x: Tensor) -> Tensor:
            a = _magnitude(x)
            huge = a > 1e10  # a^2 overflows; asinh(a) = log(2a) to float precision
            s = huge.where(0, a)
            small = _log1p(s + s * s / (1 + (s * s + 1).sqrt()))  # log(a + sqrt(a^2+1)) without cancellation
            ret = huge.where(huge.where(a, 1).log() + _LN2, small)
            return (x < 0).where(-ret, ret)

        return _in_float(self, asinh)

    @traced
    def acosh(self: Tensor) -> Tensor:
        """Inverse hyperbolic cosine; NaN below 1.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([2.0]).acosh().tolist()]
            [1.317]
        """

        def acosh(x: Tensor) -> Tensor:
            huge = x > 1e10
            s = huge.where(2, x)  # 2: not 1, where the sqrt's gradient is inf
            small = _log1p((s - 1) + ((s - 1) * (s + 1)).sqrt())  # x - 1 is exact near 1
            return huge.where(huge.where(x, 2).log() + _LN2, small)

        return _in_float(self, acosh)

    # *** exponential family ***

    @traced
    def rsqrt(self: Tensor) -> Tensor:
        """1 / sqrt(self).

        Returns:
            A tensor of self's shape.

        Examples:
            >>> Tensor([4.0]).rsqrt().tolist()
            [0.5]
        """
        return self.sqrt().reciprocal()

    @traced
    def log10(self: Tensor) -> Tensor:
        """Base-10 logarithm.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([100.0]).log10().tolist()]
            [2.0]
        """
        return self.log2() * math.log10(2)

    @traced
    def erf(self: Tensor) -> Tensor:
        """The error function.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).erf().tolist()]
            [0.0, 0.8427]
        """

        def erf(x: Tensor) -> Tensor:
            a = x.abs()
            t = (1 + _ERF_P * a).reciprocal()
            tail = 1 - t * _poly(t, _ERF_TAIL) * (-a * a).exp()
            near = (a < 1).where(x, 0)  # the series overflows far out
            return (a < 1).where(near * _poly(near * near, _ERF), (x < 0).where(-tail, tail))

        return _in_float(self, erf)

    @traced
    def copysign(self: Tensor, other: Tensor | ConstType) -> Tensor:
        """The magnitude of self with the sign of `other` (including -0.0); the dtype follows broadcasting, so two
        integer tensors give an integer result (torch always returns float).

        Args:
            other: the signs, a tensor or number.

        Returns:
            A tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 2]).copysign(-1).tolist()
            [-1, -2]
        """
        a, b = self._broadcasted(other, "copysign")
        negative = _is_negative(b) if dtypes.is_float(b.dtype) else b < 0
        magnitude = a.abs()  # differentiable: d|a| = sign(a), so the gradient is sign(a) * sign(other), as torch's
        if dtypes.is_float(a.dtype):  # abs() keeps -0.0 and the sign of NaN: there, clear the sign bit instead
            bits = dtypes.fields()[f"int{a.dtype.itemsize * 8}"]
            cleared = (a.bitcast(bits) & dtypes.max(bits)).bitcast(a.dtype)
            magnitude = ((a == 0) | a.isnan()).where(cleared, magnitude)
        return negative.where(-magnitude, magnitude)

    @traced
    def logaddexp(self: Tensor, other: Tensor | ConstType) -> Tensor:
        """log(exp(self) + exp(other)) without overflow.

        Args:
            other: a tensor or number.

        Returns:
            A tensor of the broadcast shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0]).logaddexp(0.0).tolist()]
            [0.6931]
        """
        a, b = self._broadcasted(other, "logaddexp")

        def logaddexp(x: Tensor) -> Tensor:
            y = b.cast(x.dtype)
            # the larger plus softplus(smaller - larger): smooth, so a tie gives each side half the gradient
            ret = (x >= y).where(x + _softplus(y - x), y + _softplus(x - y))
            return (x.isinf() & (x == y)).where(x, ret)  # equal infinities: inf - inf would be nan

        return _in_float(a, logaddexp)

    @traced
    def lerp(self: Tensor, end: Tensor, weight: Tensor | ConstType) -> Tensor:
        """self + weight * (end - self); weight 1 gives `end` exactly, like torch.

        Args:
            end: the other end point.
            weight: how far toward end (a tensor or number).

        Returns:
            A tensor of the broadcast shape.

        Examples:
            >>> Tensor([1.0]).lerp(Tensor([3.0]), 0.5).tolist()
            [2.0]
        """
        if isinstance(weight, (int, float)):
            return self + (end - self) * weight if weight < 0.5 else end - (end - self) * (1 - weight)
        from_start = self + (end - self) * weight
        from_end = end - (end - self) * (1 - weight)
        return (weight < 0.5).where(from_start, from_end)

    # *** power ***

    @traced
    def pow(self: Tensor, x: Tensor | ConstType, reverse: bool = False) -> Tensor:
        """self ** x (or x ** self with `reverse`). Integer tensors stay integer (wrapping like torch) and need
        non-negative Python exponents (OpTypeError, a TypeError and RuntimeError, otherwise); a negative float base
        needs an integer exponent (else NaN); 0 ** 0 is 1.

        Args:
            x: the exponent (or the base with reverse), a tensor or number.
            reverse: compute x ** self instead.

        Returns:
            A tensor of the broadcast shape.

        Raises:
            OpTypeError: (a TypeError and RuntimeError) an integer tensor with a negative or non-integer exponent.

        Examples:
            >>> Tensor([-2.0, 3.0]).pow(2).tolist(), Tensor([2]).pow(3, reverse=True).tolist()
            ([4.0, 9.0], [9])
        """
        if not reverse and isinstance(x, (int, float)):
            exponent = int(x) if isinstance(x, bool) else x
            dt = least_upper_dtype(self.dtype, self._to_tensor_like(exponent).dtype)
            if not dtypes.is_float(dt) and exponent < 0:
                raise OpTypeError(f"pow: an integer tensor needs a non-negative integer exponent, got {exponent}")
            return _const_pow(self.cast(dtypes.int32 if dt == dtypes.bool else dt), exponent)
        base, power = self._broadcasted(x, "pow", reverse)
        if base.dtype == dtypes.bool:
            base, power = base.cast(dtypes.int32), power.cast(dtypes.int32)
        if not dtypes.is_float(base.dtype):
            return _int_pow(base, power)
        return _in_float(base, lambda b: _float_pow(b, power.cast(b.dtype)))

    def __pow__(self: Tensor, x: Tensor | ConstType) -> Tensor:
        return self.pow(x)

    def __rpow__(self: Tensor, x: Tensor | ConstType) -> Tensor:
        return self.pow(x, True)

    # *** clamping ***

    @traced
    def clamp(self: Tensor, min_: Tensor | ConstType | None = None, max_: Tensor | ConstType | None = None) -> Tensor:
        """Limit values to [min_, max_] (either may be None, not both: OpValueError); NaN stays NaN.

        Args:
            min_: the lower bound (a tensor or number), or None.
            max_: the upper bound (a tensor or number), or None.

        Returns:
            A tensor of the broadcast shape.

        Raises:
            OpValueError: (a ValueError) both bounds None.

        Examples:
            >>> Tensor([-2.0, 0.5, 3.0]).clamp(-1, 1).tolist()
            [-1.0, 0.5, 1.0]
        """
        if min_ is None and max_ is None:
            raise OpValueError("clamp: at least one of min_ and max_ must be given, got None for both")
        ret = self if min_ is None else (self < min_).where(min_, self)
        return ret if max_ is None else (ret > max_).where(max_, ret)

    @traced
    def clip(self: Tensor, min_: Tensor | ConstType | None = None, max_: Tensor | ConstType | None = None) -> Tensor:
        """Alias of `clamp`.

        Args:
            min_: the lower bound, or None.
            max_: the upper bound, or None.

        Returns:
            A tensor of the broadcast shape.

        Examples:
            >>> Tensor([-2.0, 0.5, 3.0]).clip(max_=0).tolist()
            [-2.0, 0.0, 0.0]
        """
        return self.clamp(min_, max_)

    # *** division variants ***

    def _div_rounded(
        self: Tensor,
        y: Tensor | ConstType,
        reverse: bool = False,
        rounding_mode: Literal["trunc", "floor"] | None = None,
    ) -> Tensor:
        """div with torch's `rounding_mode`: "trunc" rounds toward zero, "floor" toward -inf; integer tensors stay
        integer, others divide as floats then round. Raises OpValueError (a ValueError and RuntimeError) for other
        modes."""
        if rounding_mode is None:
            return self.div(y, reverse)
        if rounding_mode not in ("trunc", "floor"):
            raise OpValueError(f"div: unknown rounding_mode {rounding_mode!r}, expected 'trunc', 'floor' or None")
        a, b = self._broadcasted(y, "div", reverse)
        if dtypes.is_int(a.dtype):
            q = a.idiv(b)
            return q if rounding_mode == "trunc" else ((a._mod_trunc(b) != 0) & ((a < 0) != (b < 0))).where(q - 1, q)
        q = a.div(b)
        return q.trunc() if rounding_mode == "trunc" else q.floor()

    def _mod_floor(self: Tensor, y: Tensor | ConstType, reverse: bool = False) -> Tensor:
        """Python/torch remainder (sign of the divisor), for integers and floats: self - floor(self / y) * y."""
        a, b = self._broadcasted(y, "mod", reverse)
        if dtypes.is_int(a.dtype):
            r = a._mod_trunc(b)
            return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
        return a - a._div_rounded(b, rounding_mode="floor") * b

    @traced
    def fmod(self: Tensor, x: Tensor | ConstType) -> Tensor:
        """C remainder (the sign of the dividend), for integers and floats.

        Args:
            x: the divisor, a tensor or number.

        Returns:
            A tensor of the broadcast shape.

        Examples:
            >>> Tensor([-7, 7]).fmod(3).tolist()
            [-1, 1]
        """
        a, b = self._broadcasted(x, "fmod")
        if dtypes.is_int(a.dtype):
            return a._mod_trunc(b)
        return a - a._div_rounded(b, rounding_mode="trunc") * b

    # *** activations ***

    @traced
    def relu6(self: Tensor) -> Tensor:
        """min(max(self, 0), 6).

        Returns:
            A tensor of self's shape.

        Examples:
            >>> Tensor([-1.0, 3.0, 9.0]).relu6().tolist()
            [0.0, 3.0, 6.0]
        """
        return self.hardtanh(0, 6)

    @traced
    def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:
        """Clamp to [min_val, max_val] with zero gradient at the bounds, like torch; NaN stays NaN.

        Args:
            min_val: the lower bound.
            max_val: the upper bound.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> Tensor([-2.0, 0.5]).hardtanh().tolist()
            [-1.0, 0.5]
        """
        at_min = (self < min_val) | (self == min_val)  # not <=: Tensor.le is `not >`, True for NaN
        at_max = (self > max_val) | (self == max_val)
        return at_min.where(min_val, at_max.where(max_val, self))

    @traced
    def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:
        """self where positive, neg_slope * self elsewhere.

        Args:
            neg_slope: the slope below zero.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([-2.0, 2.0]).leaky_relu().tolist()]
            [-0.02, 2.0]
        """
        return (self > 0).where(self, self * neg_slope)

    @traced
    def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
        """self where positive, alpha * (exp(self) - 1) elsewhere.

        Args:
            alpha: the scale of the negative part.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).elu().tolist()]
            [-0.6321, 2.0]
        """
        negative = (self > 0).where(0, self)  # exp of a large positive input would overflow (NaN gradient)
        return (self > 0).where(self, alpha * _in_float(negative, _expm1))

    @traced
    def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
        """self where positive, alpha * (exp(self / alpha) - 1) elsewhere.

        Args:
            alpha: the scale of the negative part.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([-1.0]).celu().tolist()]
            [-0.6321]
        """
        negative = (self > 0).where(0, self)
        return (self > 0).where(self, alpha * _in_float(negative / alpha, _expm1))

    @traced
    def selu(self: Tensor, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor:
        """gamma * elu(self, alpha).

        Args:
            alpha: elu's alpha.
            gamma: the overall scale.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).selu().tolist()]
            [1.0507]
        """
        return gamma * self.elu(alpha)

    @traced
    def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
        """GELU; `approximate="tanh"` (the default, as in tinygrad) or `"none"` (exact, with erf).

        Args:
            approximate: "tanh" or "none".

        Returns:
            A tensor of self's shape.

        Raises:
            ValueError: another approximate.

        Examples:
            >>> [round(Tensor([1.0]).gelu(approximate=a).item(), 4) for a in ("tanh", "none")]
            [0.8412, 0.8413]
        """
        if approximate == "tanh":
            # 0.5 * (1 + tanh(u)) == sigmoid(2u): no cancellation for negative inputs
            inner = (2 * math.sqrt(2 / math.pi)) * (self + 0.044715 * self * self * self)
            return self * _sigmoid(inner)
        if approximate == "none":
            return self * 0.5 * (1 + (self * (1 / math.sqrt(2))).erf())
        raise ValueError(f"gelu: unknown approximate={approximate!r}, expected 'tanh' or 'none'")

    @traced
    def quick_gelu(self: Tensor) -> Tensor:
        """self * sigmoid(1.702 * self).

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).quick_gelu().tolist()]
            [0.8458]
        """
        return self * _sigmoid(self * 1.702)

    @traced
    def silu(self: Tensor) -> Tensor:
        """self * sigmoid(self).

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).silu().tolist()]
            [0.7311]
        """
        return self * _sigmoid(self._as_float())

    @traced
    def swish(self: Tensor) -> Tensor:
        """Alias of `silu`.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> Tensor([1.0]).swish().tolist() == Tensor([1.0]).silu().tolist()
            True
        """
        return self.silu()

    @traced
    def mish(self: Tensor) -> Tensor:
        """self * tanh(softplus(self)).

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).mish().tolist()]
            [0.8651]
        """

        def mish(x: Tensor) -> Tensor:
            m = _expm1(-2 * x.softplus())  # tanh(s) = -expm1(-2s) / (2 + expm1(-2s)), exact for small s >= 0
            return x * (-m / (2 + m))

        return _in_float(self, mish)

    @traced
    def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        """clamp(alpha * self + beta, 0, 1).

        Args:
            alpha: the slope.
            beta: the value at 0.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> Tensor([0.0, 6.0]).hardsigmoid().tolist()
            [0.5, 1.0]
        """
        return (alpha * self + beta).hardtanh(0, 1)

    @traced
    def hardswish(self: Tensor) -> Tensor:
        """self * relu6(self + 3) / 6.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([1.0]).hardswish().tolist()]
            [0.6667]
        """
        return self * (self + 3).relu6() * (1 / 6)

    @traced
    def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
        """log(1 + exp(beta * self)) / beta without overflow.

        Args:
            beta: the sharpness.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 100.0]).softplus().tolist()]
            [0.6931, 100.0]
        """

        return _in_float(self, lambda x: _softplus(x * beta) * (1 / beta))

    @traced
    def softsign(self: Tensor) -> Tensor:
        """self / (1 + |self|).

        Returns:
            A tensor of self's shape.

        Examples:
            >>> Tensor([1.0, -3.0]).softsign().tolist()
            [0.5, -0.75]
        """
        return self / (1 + self.abs())

    @traced
    def logsigmoid(self: Tensor) -> Tensor:
        """log(sigmoid(self)) without overflow.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, -100.0]).logsigmoid().tolist()]
            [-0.6931, -100.0]
        """
        return _in_float(self, lambda x: -_softplus(-x))

    # *** in-place operators (write into self like tinygrad; see Tensor.assign) ***

    def __ipow__(self: Tensor, x: Tensor | ConstType) -> Tensor:
        return self.assign(self.pow(x))

    def __iand__(self: Tensor, x: Tensor | ConstType) -> Tensor:
        return self.assign(self.bitwise_and(x))

    def __ior__(self: Tensor, x: Tensor | ConstType) -> Tensor:
        return self.assign(self.bitwise_or(x))

    def __ixor__(self: Tensor, x: Tensor | ConstType) -> Tensor:
        return self.assign(self.bitwise_xor(x))

    def __ilshift__(self: Tensor, x: Tensor | int) -> Tensor:
        return self.assign(self.lshift(x))

    def __irshift__(self: Tensor, x: Tensor | int) -> Tensor:
        return self.assign(self.rshift(x))

    def __ifloordiv__(self: Tensor, x: Tensor | ConstType) -> Tensor:
        return self.assign(self // x)

    def __imod__(self: Tensor, x: Tensor | ConstType) -> Tensor:
        return self.assign(self % x)
