"""A fuzz program: JSON-able inputs and steps, run with fusegrad (in a worker child) and with numpy (the reference).

A program is `{"inputs": [{"dtype", "shape", "values"}], "steps": [[op, [value ids], params]]}`. Values are numbered
inputs first, then one per step; the last value is the result. Every op has a fusegrad meaning and, where numpy
defines the same operation, a numpy one (`None` for a step means "no numpy reference for this program").
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from fusegrad.dtype import DType, _to_np_dtype, dtypes, truncate
from fusegrad.uop.alu import float_to_int

Program = dict[str, Any]  # Any: JSON values
Step = list[Any]

DTYPE_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
               "float64")  # fmt: skip
FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def fg_dtype(name: str) -> DType:
    return getattr(dtypes, name)  # type: ignore[no-any-return]  # dtypes' attributes are DTypes


def is_float(name: str) -> bool:
    return name in FLOATS


def is_int(name: str) -> bool:
    return name in INTS


# *** numpy reference, with fusegrad's definitions where numpy has a choice of its own ***


def np_cast(x: np.ndarray, name: str) -> np.ndarray:
    """x.astype(name); float -> int by alu.float_to_int, which is numpy's scalar loop (its SIMD loop differs)."""
    if is_int(name) and x.dtype.kind == "f":
        dt = fg_dtype(name)
        return np.array([float_to_int(float(v), dt) for v in x.ravel()], dtype=name).reshape(x.shape)
    return x.astype(name)


def _true_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fusegrad's (and the reference's) float division: a * (1 / b), two roundings (x / x may be 1 - ulp)."""
    return a * np.divide(b.dtype.type(1), b)


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":  # fusegrad: floor(a / b) (numpy's divmod-based // differs, e.g. 1 // 0.1 is 9)
        return np.floor(_true_div(a, b))
    return np.floor_divide(a, b)


def _floor_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":  # fusegrad: a - floor(a / b) * b
        return a - np.floor(_true_div(a, b)) * b
    return np.remainder(a, b)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's truncating division on ints, with numpy's x // 0 == 0 and INT_MIN // -1 == INT_MIN."""
    q = np.floor_divide(a, b)
    inexact = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return np.where(inexact, q + np.array(1, dtype=q.dtype), q)


_NP_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _true_div, "floordiv": _floor_div,
    "mod": _floor_mod, "maximum": np.maximum, "minimum": np.minimum, "lt": np.less, "eq": np.equal,
    "ne": np.not_equal, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "lshift": np.left_shift,
    "rshift": np.right_shift, "idiv": _trunc_div, "pow": np.power}  # fmt: skip


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


_NP_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs, "invert": np.invert, "exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": _sigmoid,
    "neg": np.negative, "sqrt": np.sqrt, "exp2": np.exp2, "log2": np.log2, "sin": np.sin, "trunc": np.trunc,
    "floor": np.floor, "ceil": np.ceil, "reciprocal": lambda x: np.divide(x.dtype.type(1), x)}  # fmt: skip
_NP_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "cumsum": np.cumsum, "mean": np.mean}

# *** fusegrad ***

_FG_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b), "lt": operator.lt, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "and": operator.and_, "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift,
    "rshift": operator.rshift, "idiv": lambda a, b: a.idiv(b), "pow": operator.pow}  # fmt: skip
UNARY_OPS = tuple(_NP_UNARY)
FLOAT_UNARY = ("sqrt", "exp2", "log2", "sin", "trunc", "floor", "ceil", "reciprocal", "exp", "log", "tanh", "sigmoid")
BINARY_OPS = tuple(_FG_BINARY)
REDUCE_OPS = tuple(_NP_REDUCE)


def np_name(dt: DType) -> str:
    """numpy's name of a fusegrad dtype (fusegrad's own names are C's: "half", "int", "char")."""
    return np.dtype(_to_np_dtype(dt)).name


def _const(value: Any, dtype_name: str) -> Any:
    """A Python scalar of the operand's kind (fusegrad gives a Python int the int tensor's dtype)."""
    if dtype_name == "bool":
        return bool(value)
    return float(value) if is_float(dtype_name) else int(value)


def _np_const(value: Any, like: np.ndarray) -> np.ndarray:
    """A Python constant as fusegrad reads it beside `like`: an int wraps to like's width."""
    if like.dtype.kind in "iu":
        return np.array(truncate[fg_dtype(like.dtype.name)](int(value)), dtype=like.dtype)
    return np.array(value, dtype=like.dtype)


def _np_array(params: dict[str, Any], dtype: np.dtype[Any]) -> np.ndarray:
    """A setitem's tensor value (flat "tensor" values, "shape") in `dtype`, ints wrapped to its width."""
    like = np.empty(0, dtype=dtype)
    return np.array([_np_const(v, like) for v in params["tensor"]], dtype=dtype).reshape(params["shape"])


def _setitem_value(params: dict[str, Any], x: Any) -> Any:
    """A setitem's value for fusegrad: a Python scalar, or a tensor of x's dtype on x's device (it broadcasts)."""
    from fusegrad import Tensor

    if "tensor" not in params:
        return _const(params["value"], np_name(x.dtype))
    return Tensor(_np_array(params, np.dtype(np_name(x.dtype))), device=x.device)


def fg_step(op: str, args: list[Any], params: dict[str, Any]) -> Any:  # noqa: C901  # one case per op
    """Apply one step to fusegrad Tensors."""
    x = args[0]
    if op in _FG_BINARY:
        y = args[1] if len(args) > 1 else _const(params["const"], np_name(x.dtype))
        return _FG_BINARY[op](x, y)
    match op:
        case "neg":
            return -x
        case "invert":
            return ~x
        case "matmul":
            return x @ x.T
        case "bitcast":
            return x.bitcast(fg_dtype(params["dtype"]))
        case "abs" | "sqrt" | "exp2" | "log2" | "sin" | "trunc" | "floor" | "ceil" | "reciprocal" | "exp" | "log":
            return getattr(x, op)()
        case "tanh" | "sigmoid":
            return getattr(x, op)()
        case "cast":
            return x.cast(fg_dtype(params["dtype"]))
        case "where":
            return args[0].where(args[1], args[2])
        case "sum" | "prod" | "max" | "min" | "mean":
            return getattr(x, op)(axis=params["axis"])
        case "cumsum":
            return x.cumsum(params["axis"])
        case "contiguous":
            return x.contiguous().realize()
        case "reshape":
            return x.reshape(params["shape"])
        case "permute":
            return x.permute(params["order"])
        case "flip":
            return x.flip(params["axis"])
        case "pad":
            return x.pad(params["pads"])
        case "slice":
            return x[tuple(slice(a, b) for a, b in params["ranges"])]
        case "expand":
            return x.reshape((1, *x.shape)).expand((params["n"], *x.shape))
        case "getitem":
            return x[params["index"]]
        case "gather":
            from fusegrad import Tensor

            return x[Tensor(np.array(params["index"], dtype=np.int32), device=x.device)]
        case "setitem":  # into a clone: the step's input stays as it was for the steps that read it
            t = x.clone()
            t[params["start"] : params["stop"]] = _setitem_value(params, x)
            return t
    raise ValueError(f"fuzz: unknown op {op!r}")


def np_step(op: str, args: list[np.ndarray], params: dict[str, Any]) -> np.ndarray | None:  # noqa: C901
    """The numpy meaning of one step, or None where numpy defines something else (or nothing)."""
    x = args[0]
    if op in _NP_BINARY:
        y = args[1] if len(args) > 1 else _np_const(params["const"], x)
        with np.errstate(all="ignore"):
            return np.asarray(_NP_BINARY[op](x, y))
    match op:
        case _ if op in _NP_UNARY:
            with np.errstate(all="ignore"):
                return np.asarray(_NP_UNARY[op](x))
        case "matmul":
            with np.errstate(all="ignore"):
                return x @ x.T
        case "bitcast":
            return x.view(params["dtype"])
        case "cast":
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                return np_cast(x, params["dtype"])
        case "where":
            return np.where(args[0], args[1], args[2])
        case "contiguous":
            return x
        case "reshape":
            return x.reshape(params["shape"])
        case "permute":
            return x.transpose(params["order"])
        case "flip":
            return np.flip(x, params["axis"])
        case "pad":
            return np.pad(x, params["pads"])
        case "slice":
            return x[tuple(slice(a, b) for a, b in params["ranges"])]
        case "expand":
            return np.broadcast_to(x, (params["n"], *x.shape))
        case "getitem":
            return np.asarray(x[params["index"]]) if -x.shape[0] <= params["index"] < x.shape[0] else None
        case "gather":
            idx = np.array(params["index"], dtype=np.int32)
            return x[idx] if all(-x.shape[0] <= i < x.shape[0] for i in params["index"]) else None
        case "setitem":
            t = x.copy()
            value = _np_array(params, x.dtype) if "tensor" in params else _np_const(params["value"], x)
            t[params["start"] : params["stop"]] = value
            return t
    return None  # reductions: out dtypes are fusegrad's (see np_reduce)


def np_reduce(op: str, x: np.ndarray, axis: int | None, out_dtype: str) -> np.ndarray:
    """A reduction accumulated in fusegrad's output dtype (ints wrap there)."""
    with np.errstate(all="ignore"):
        if op in ("sum", "prod", "cumsum", "mean"):
            return np.asarray(_NP_REDUCE[op](x.astype(out_dtype), axis=axis, dtype=out_dtype))
        return np.asarray(_NP_REDUCE[op](x, axis=axis)).astype(out_dtype)


class OrderOverflowError(ValueError):
    """A reduction in the program overflows (or a product underflows) in some summation orders and not in others."""


def _finite_magnitudes(op: str, x: np.ndarray) -> tuple[np.ndarray, int]:
    """A reduction's terms as magnitudes in long double (wide enough that nothing here overflows), non-finite terms 0:
    inf and NaN inputs give the same inf or NaN in every order. With the axis the terms run along."""
    with np.errstate(all="ignore"):
        wide = x.astype(np.longdouble)
        if op == "matmul":  # the products: BLAS may fuse them into the sum (FMA), so they never round to inf there
            wide = wide[:, None, :] * wide[None, :, :]
        return np.where(np.isfinite(wide), np.abs(wide), 0), -1


def order_decides_overflow(op: str, x: np.ndarray, axis: int | None, out_dtype: str) -> bool:
    """Whether a float reduction (or matmul) may overflow, or a product underflow, in one order and not in another: its
    inf/-inf/NaN then depends on the order (and, for numpy's BLAS matmul, on fused multiply-adds, whose products never
    round to inf). Where it is False, every order gives the same inf/NaN and differs only by rounding."""
    if not is_float(out_dtype) or op not in ("sum", "prod", "cumsum", "mean", "matmul") or x.size == 0:
        return False
    terms, k_axis = _finite_magnitudes(op, x)
    along = k_axis if op == "matmul" else axis
    info = np.finfo(out_dtype)
    if op == "prod":  # partial products range from the product of the factors below 1 to that of those above
        high = np.prod(np.where(terms > 1, terms, 1), axis=along)
        low = np.prod(np.where((terms < 1) & (terms > 0), terms, 1), axis=along)
        # an underflow matters where a factor above 1 may scale it back up (tiny results compare absolutely)
        return bool(np.any(high > info.max) or np.any((low < info.smallest_normal) & (high > 1)))
    return bool(np.any(np.sum(terms, axis=along) > info.max))  # the largest partial sum in any order


# steps that carry a reduction's absolute rounding bound through unchanged (a constant added or subtracted, a sign),
# or scaled by |constant| (a product with a constant); data movements move it with the data (padding adds exact zeros)
_SHIFTS, _SCALES = {"add", "sub", "neg"}, {"mul"}
_MOVES = {"contiguous", "reshape", "permute", "flip", "pad", "slice", "expand", "getitem", "gather"}


def order_error_bound(op: str, x: np.ndarray, axis: int | None, out_dtype: str) -> np.ndarray | None:
    """How far a float sum, mean, cumsum or matmul may land from the exact value in any summation order: (n - 1) ulps
    of eps relative to the sum of the terms' magnitudes (the standard bound for recursive summation, which covers
    pairwise, SIMD-lane and OpenMP-split orders too). The terms, not the result, set it: where large terms cancel
    (+-9.2e18 summing to 3.6e13) two orders legitimately differ by far more than a relative tolerance of the result."""
    if not is_float(out_dtype) or op not in ("sum", "mean", "cumsum", "matmul") or x.size == 0:
        return None
    terms, k_axis = _finite_magnitudes(op, x)
    along = k_axis if op == "matmul" else axis
    n = terms.shape[along] if along is not None else terms.size
    eps = float(np.finfo(out_dtype).eps)
    with np.errstate(all="ignore"):
        total = np.cumsum(terms, axis=along) if op == "cumsum" else np.sum(terms, axis=along)
        if op == "mean":
            total = total / max(n, 1)
        return np.asarray(total * max(n - 1, 1) * eps, dtype=np.float64)


def _carried_bound(
    op: str, refs: list[int], params: dict[str, Any], bounds: dict[int, np.ndarray], values: list[np.ndarray]
) -> np.ndarray | None:
    """The bound of a step's result from its inputs' (None: the step does not carry one). Sums of bounded values add
    their bounds; a product of two bounded values a, b (true a', b') is off by at most |a||b - b'| + |b||a - a'| plus
    the product of the bounds; a where picks its branch's bound. A bound that cannot be computed (NaN, from infinite
    values) is infinite: nothing at that position is comparable."""
    if not any(r in bounds for r in refs):
        return None

    def bound_of(r: int) -> np.ndarray:
        return bounds.get(r, np.zeros(values[r].shape))

    with np.errstate(all="ignore"):
        found = _combined_bound(op, refs, params, bound_of, values)
        return None if found is None else np.where(np.isnan(found), np.inf, np.asarray(found, dtype=np.float64))


def _combined_bound(
    op: str, refs: list[int], params: dict[str, Any], bound_of: Callable[[int], np.ndarray], values: list[np.ndarray]
) -> np.ndarray | None:
    if op in _MOVES:
        return np_step(op, [bound_of(refs[0])], params)
    if len(refs) == 1 and op in _SHIFTS:
        return bound_of(refs[0])
    if len(refs) == 1 and op in _SCALES and "const" in params and isinstance(params["const"], int | float):
        return bound_of(refs[0]) * abs(float(params["const"]))
    if len(refs) == 2 and op in ("add", "sub"):
        return bound_of(refs[0]) + bound_of(refs[1])
    if len(refs) == 2 and op == "mul":
        (a, b), (ba, bb) = (np.abs(values[r].astype(np.float64)) for r in refs), (bound_of(r) for r in refs)
        return ba * b + bb * a + ba * bb
    if op == "where":
        return np.where(values[refs[0]], bound_of(refs[1]), bound_of(refs[2]))
    return None


def run_numpy_bounded(
    program: Program, out_dtypes: list[str], overflow_ok: bool = False
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """`run_numpy`, with the result's absolute rounding bound when it comes from a float reduction whose summation
    order is free (see order_error_bound), through steps that keep the bound meaningful; None otherwise.
    overflow_ok: a reduction whose overflow depends on the order does not raise; numpy's value (one order's) then
    carries on, only the bound is meant for use: where large terms cancel, the values after them depend on the order
    too (+-1.8e308 absorbs every smaller term in one order and not in another)."""
    bounds: dict[int, np.ndarray] = {}
    values: list[np.ndarray] = [np.array(i["values"], dtype=i["dtype"]).reshape(i["shape"]) for i in program["inputs"]]
    for k, (op, refs, params) in enumerate(program["steps"]):
        ret = _run_step(program, out_dtypes, values, k, check_overflow=not overflow_ok)
        if ret is None:
            return None, None
        at = len(values)
        values.append(ret)
        out = out_dtypes[at]
        found = order_error_bound(op, values[refs[0]], params.get("axis"), out) if refs else None
        if found is None:
            found = _carried_bound(op, refs, params, bounds, values)
        if found is not None and _fits(found.shape, ret.shape):
            bounds[at] = np.broadcast_to(found, ret.shape)
    return values[-1], bounds.get(len(values) - 1)


def _fits(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _run_step(
    program: Program, out_dtypes: list[str], values: list[np.ndarray], k: int, check_overflow: bool = True
) -> np.ndarray | None:
    """Step k of the program by numpy, its inputs in `values` (see run_numpy for the errors it raises)."""
    op, refs, params = program["steps"][k]
    args = [values[r] for r in refs]
    out = out_dtypes[len(program["inputs"]) + k]
    order_checked = check_overflow and op in ("matmul", *_NP_REDUCE)
    if order_checked and order_decides_overflow(op, args[0], params.get("axis"), out):
        raise OrderOverflowError(f"step {k} ({op}) overflows in some orders")
    if op == "matmul":
        with np.errstate(all="ignore"):
            return np.asarray(args[0].astype(out) @ args[0].astype(out).T)
    if op in _NP_REDUCE:
        if op == "prod" and args[0].dtype.kind == "b":
            return None
        return np_reduce(op, args[0], params["axis"], out)
    ret = np_step(op, args, params)
    return None if ret is None else np.asarray(ret)


def run_numpy(program: Program, out_dtypes: list[str]) -> np.ndarray | None:
    """The program's result by numpy; `out_dtypes` are the dtypes fusegrad gave each value (for reductions). None:
    numpy defines a step differently (or not at all). Raises OrderOverflowError where numpy's order is no reference:
    neither is any one order of fusegrad's (the C renderer lets OpenMP split a sum into SIMD lanes, PYTHON adds in
    loop order), so the configurations then agree only where their results are finite."""
    return run_numpy_bounded(program, out_dtypes)[0]


def run_fusegrad(program: Program, device: str) -> tuple[Any, list[str]]:
    """The program's result Tensor, realized to numpy, and every value's dtype name."""
    from fusegrad import Tensor

    values = []
    for i in program["inputs"]:
        values.append(Tensor(np.array(i["values"], dtype=i["dtype"]).reshape(i["shape"]), device=device))
    for op, refs, params in program["steps"]:
        values.append(fg_step(op, [values[r] for r in refs], params))
    return values[-1].numpy(), [np_name(v.dtype) for v in values]


def describe(program: Program) -> str:
    """The program as readable Python, to reproduce a failing example by hand."""
    lines = []
    for i, inp in enumerate(program["inputs"]):
        lines.append(f"v{i} = Tensor(np.array({inp['values']!r}, dtype={inp['dtype']!r}).reshape({inp['shape']}))")
    base = len(program["inputs"])
    for k, (op, refs, params) in enumerate(program["steps"]):
        lines.append(f"v{base + k} = {op}({', '.join(f'v{r}' for r in refs)}{', ' if params else ''}{params or ''})")
    return "\n".join(lines)
