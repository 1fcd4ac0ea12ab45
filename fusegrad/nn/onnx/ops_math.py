"""ONNX elementwise math, comparisons, logic, casts, activations, softmax and reductions on fusegrad Tensors.

Registered into `registry.ONNX_OPS` on import. ONNX semantics that differ from the Tensor defaults are spelled out:
integer Div truncates, Mod follows the divisor's sign unless fmod=1, Round rounds half to even,
Pow keeps the base dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.proto import dtype_of
from fusegrad.nn.onnx.registry import is_float, normalize_axis, onnx_op
from fusegrad.tensor import Tensor

# *** unary elementwise: op type -> Tensor method ***

UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "Abs": Tensor.abs,
    "Neg": Tensor.neg,
    "Exp": Tensor.exp,
    "Log": Tensor.log,
    "Sqrt": Tensor.sqrt,
    "Reciprocal": Tensor.reciprocal,
    "Floor": Tensor.floor,
    "Ceil": Tensor.ceil,
    "Sign": Tensor.sign,
    "Sin": Tensor.sin,
    "Cos": Tensor.cos,
    "Tan": Tensor.tan,
    "Asin": Tensor.asin,
    "Acos": Tensor.acos,
    "Atan": Tensor.atan,
    "Sinh": Tensor.sinh,
    "Cosh": Tensor.cosh,
    "Asinh": Tensor.asinh,
    "Acosh": Tensor.acosh,
    "Atanh": Tensor.atanh,
    "Tanh": Tensor.tanh,
    "Erf": Tensor.erf,
    "Relu": Tensor.relu,
    "Sigmoid": Tensor.sigmoid,
    "Softplus": Tensor.softplus,
    "Softsign": Tensor.softsign,
    "Mish": Tensor.mish,
    "HardSwish": Tensor.hardswish,
    "Not": Tensor.logical_not,
    "BitwiseNot": Tensor.bitwise_not,
    "IsNaN": Tensor.isnan,
}


def register_unary(name: str, fn: Callable[[Tensor], Tensor]) -> None:
    """Register a one-input, attribute-free op."""
    onnx_op(name)(lambda x: fn(x))


for _name, _fn in UNARY.items():
    register_unary(_name, _fn)


@onnx_op("Identity")
def identity(x: Tensor) -> Tensor:
    return x


@onnx_op("Round")
def round_half_even(x: Tensor) -> Tensor:
    return x.round()  # Tensor.round rounds half to even, as ONNX does


@onnx_op("IsInf")
def isinf(x: Tensor, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
    return x.isinf(detect_positive=bool(detect_positive), detect_negative=bool(detect_negative))


# *** binary elementwise (numpy broadcasting) ***


@onnx_op("Add")
def add(x: Tensor, y: Tensor) -> Tensor:
    return x + y


@onnx_op("Sub")
def sub(x: Tensor, y: Tensor) -> Tensor:
    return x - y


@onnx_op("Mul")
def mul(x: Tensor, y: Tensor) -> Tensor:
    return x * y


@onnx_op("Div")
def div(x: Tensor, y: Tensor) -> Tensor:
    # integer division truncates toward zero (C), not floor
    return x.div(y, rounding_mode="trunc") if not is_float(x.dtype) else x / y


def c_fmod(x: Tensor, y: Tensor) -> Tensor:
    """C fmod for floats: the remainder takes x's sign, and a finite x over an infinite y stays x."""
    # Tensor.fmod gives NaN for an infinite divisor, where C (and ONNX) keep x
    return (y.isinf() & x.isfinite()).where(x, x.fmod(y))


@onnx_op("Mod")
def mod(x: Tensor, y: Tensor, fmod: int = 0) -> Tensor:
    if not is_float(x.dtype):
        return x.fmod(y) if fmod else x.mod(y)
    remainder = c_fmod(x, y)
    if fmod:
        return remainder
    # Python's mod takes the divisor's sign: move a nonzero remainder of the other sign by one divisor
    other_sign = (remainder != 0) & ((remainder < 0) != (y < 0))
    return other_sign.where(remainder + y, remainder)


@onnx_op("Pow")
def power(x: Tensor, y: Tensor) -> Tensor:
    if is_float(x.dtype):
        return x.pow(y.cast(x.dtype))
    # integer base: compute in float64 and round back, the result keeps the base dtype
    return x.cast(dtypes.float64).pow(y.cast(dtypes.float64)).round().cast(x.dtype)


@onnx_op("BitShift")
def bit_shift(x: Tensor, y: Tensor, direction: str) -> Tensor:
    return x.lshift(y) if direction == "LEFT" else x.rshift(y)


@onnx_op("BitwiseAnd")
def bitwise_and(x: Tensor, y: Tensor) -> Tensor:
    return x.bitwise_and(y)


@onnx_op("BitwiseOr")
def bitwise_or(x: Tensor, y: Tensor) -> Tensor:
    return x.bitwise_or(y)


@onnx_op("BitwiseXor")
def bitwise_xor(x: Tensor, y: Tensor) -> Tensor:
    return x.bitwise_xor(y)


@onnx_op("And")
def logical_and(x: Tensor, y: Tensor) -> Tensor:
    return x.bitwise_and(y)


@onnx_op("Or")
def logical_or(x: Tensor, y: Tensor) -> Tensor:
    return x.bitwise_or(y)


@onnx_op("Xor")
def logical_xor(x: Tensor, y: Tensor) -> Tensor:
    return x.bitwise_xor(y)


@onnx_op("Equal")
def equal(x: Tensor, y: Tensor) -> Tensor:
    return x.eq(y)


@onnx_op("Less")
def less(x: Tensor, y: Tensor) -> Tensor:
    return x < y


@onnx_op("LessOrEqual")
def less_equal(x: Tensor, y: Tensor) -> Tensor:
    return x <= y


@onnx_op("Greater")
def greater(x: Tensor, y: Tensor) -> Tensor:
    return x > y


@onnx_op("GreaterOrEqual")
def greater_equal(x: Tensor, y: Tensor) -> Tensor:
    return x >= y


@onnx_op("Where")
def where(condition: Tensor, x: Tensor, y: Tensor) -> Tensor:
    return condition.where(x, y)


# *** variadic elementwise ***


@onnx_op("Max")
def maximum(*xs: Tensor) -> Tensor:
    out = xs[0]
    for x in xs[1:]:
        out = out.maximum(x)
    return out


@onnx_op("Min")
def minimum(*xs: Tensor) -> Tensor:
    out = xs[0]
    for x in xs[1:]:
        out = out.minimum(x)
    return out


@onnx_op("Sum")
def total(*xs: Tensor) -> Tensor:
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


@onnx_op("Mean")
def mean(*xs: Tensor) -> Tensor:
    return total(*xs) / len(xs)


# *** casts ***


@onnx_op("BitCast")
def bit_cast(x: Tensor, to: int) -> Tensor:
    return x.bitcast(dtype_of(to, "BitCast"))


# *** activations with attributes ***


@onnx_op("LeakyRelu")
def leaky_relu(x: Tensor, alpha: float = 0.01) -> Tensor:
    return x.leaky_relu(alpha)


@onnx_op("Elu")
def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return x.elu(alpha)


@onnx_op("Celu")
def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return x.celu(alpha)


@onnx_op("Selu")
def selu(x: Tensor, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> Tensor:
    return gamma * (x > 0).where(x, alpha * (x.exp() - 1))


@onnx_op("HardSigmoid")
def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    return (alpha * x + beta).clip(0, 1)


@onnx_op("ThresholdedRelu")
def thresholded_relu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return (x > alpha).where(x, 0)


@onnx_op("Shrink")
def shrink(x: Tensor, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)


@onnx_op("PRelu")
def prelu(x: Tensor, slope: Tensor) -> Tensor:
    return (x < 0).where(x * slope, x)


@onnx_op("Gelu")
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        return x.gelu()  # Tensor.gelu is the tanh approximation
    return 0.5 * x * (1 + (x / math.sqrt(2)).erf())


@onnx_op("Swish")
def swish(x: Tensor, alpha: float = 1.0) -> Tensor:
    return x * (alpha * x).sigmoid()


@onnx_op("Clip")
def clip(
    x: Tensor,
    low: Tensor | None = None,
    high: Tensor | None = None,
    min: float | None = None,  # noqa: A002  (ONNX's attribute name)
    max: float | None = None,  # noqa: A002
) -> Tensor:
    # opset >= 11 passes the bounds as inputs, older opsets as attributes
    lower = low if low is not None else min
    upper = high if high is not None else max
    out = x if lower is None else x.maximum(lower)
    return out if upper is None else out.minimum(upper)


@onnx_op("Softmax")
def softmax(x: Tensor, axis: int = -1, opset: int = 13) -> Tensor:
    if opset < 13:  # older opsets flatten to 2-d at axis
        return x.reshape(math.prod(x.shape[:axis]), -1).softmax(-1).reshape(x.shape)
    return x.softmax(axis)


@onnx_op("LogSoftmax")
def log_softmax(x: Tensor, axis: int = -1, opset: int = 13) -> Tensor:
    if opset < 13:
        return x.reshape(math.prod(x.shape[:axis]), -1).log_softmax(-1).reshape(x.shape)
    return x.log_softmax(axis)


@onnx_op("Hardmax")
def hardmax(x: Tensor, axis: int = -1) -> Tensor:
    axis = normalize_axis(axis, x.ndim)
    hot = x.argmax(axis).one_hot(x.shape[axis])  # the class axis comes last: move it back to `axis`
    return hot.permute(*range(axis), x.ndim - 1, *range(axis, x.ndim - 1)).cast(x.dtype)
