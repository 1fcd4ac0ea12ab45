"""Hypothesis strategies for fuzz programs (test/fuzz/program.py): small tensors of edge values (0, -1, +-1, each
int type's min and max, NaN, +-inf, -0.0, denormals, values near each int type's overflow) and 1-5 steps of
elementwise ops, casts between every pair of dtypes, reductions, movement, indexing (out-of-range and negative
indices included) and setitem.

Entry point: `programs()`. The generator tracks each value's shape and (approximate) dtype to pick valid steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from test.fuzz.program import (
    BINARY_OPS,
    DTYPE_NAMES,
    FLOAT_UNARY,
    FLOATS,
    Program,
    is_float,
    is_int,
)

MAX_ELEMENTS = 256


def int_edges(name: str) -> list[int]:
    info = np.iinfo(name)
    lo, hi = int(info.min), int(info.max)
    near = [1, -1, 2, 3, -7, 100, 127, 128, 255, 256, -129, 2**15, 2**16 + 1, 2**31 - 1, -(2**31), 2**31, 2**32 - 1]
    return sorted({v for v in [0, lo, hi, lo + 1, hi - 1, hi // 2 + 1, *near] if lo <= v <= hi})


def float_edges(name: str) -> list[float]:
    info = np.finfo(name)
    tiny, big = float(info.smallest_subnormal), float(info.max)
    overflow = [127.5, 128.0, -128.5, 255.9, 256.0, 32767.5, -32768.9, 65535.5, 65536.0, 2.0**31, -(2.0**31),
                2.0**31 - 128, 2.0**32, -(2.0**32) - 4096, 2.0**63, -(2.0**63), 2.0**64, 1e19, -1e20]  # fmt: skip
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.7, math.nan, math.inf, -math.inf, tiny, -tiny, big, -big, *overflow]
    with np.errstate(over="ignore"):
        return [float(np.array(v, dtype=name)) for v in values]  # rounded to the dtype (may overflow to inf)


def edge_values(name: str) -> st.SearchStrategy[Any]:
    if name == "bool":
        return st.booleans()
    if is_int(name):
        info = np.iinfo(name)
        return st.sampled_from(int_edges(name)) | st.integers(int(info.min), int(info.max))
    width = {"float16": 16, "float32": 32, "float64": 64}[name]
    return st.sampled_from(float_edges(name)) | st.floats(width=width, allow_nan=True)  # type: ignore[arg-type]


@dataclass
class Value:
    shape: tuple[int, ...]
    dtype: str


def _sum_dtype(name: str) -> str:
    return {"bool": "int32", "int8": "int32", "int16": "int32", "uint8": "uint32", "uint16": "uint32"}.get(name, name)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


class Builder:
    """Appends steps to a program, tracking each value's shape and dtype."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw, self.values, self.program = draw, [], {"inputs": [], "steps": []}
        self.values: list[Value]

    def add_input(self, shape: tuple[int, ...], dtype: str) -> int:
        assert not self.program["steps"], "fuzz: inputs come before steps (values are numbered inputs first)"
        n = math.prod(shape)
        values = self.draw(st.lists(edge_values(dtype), min_size=n, max_size=n))
        self.program["inputs"].append({"dtype": dtype, "shape": list(shape), "values": values})
        self.values.append(Value(shape, dtype))
        return len(self.values) - 1

    def step(self, op: str, refs: list[int], params: dict[str, Any], out: Value) -> int:
        self.program["steps"].append([op, refs, params])
        self.values.append(out)
        return len(self.values) - 1

    def cast_to(self, ref: int, dtype: str) -> int:
        v = self.values[ref]
        return ref if v.dtype == dtype else self.step("cast", [ref], {"dtype": dtype}, Value(v.shape, dtype))


def _binary_ops(dtype: str) -> list[str]:
    """The ops for this operand dtype, those C leaves partly undefined first (hypothesis favours early choices)."""
    if dtype == "bool":
        return ["add", "mul", "maximum", "minimum", "lt", "eq", "ne", "and", "or", "xor"]
    risky = ["floordiv", "mod", "div", "pow"] if is_float(dtype) else ["floordiv", "mod", "idiv", "lshift", "rshift"]
    rest = [op for op in BINARY_OPS if op not in risky and op not in ("div", "lshift", "rshift", "idiv")]
    return risky + [op for op in rest if is_int(dtype) or op not in ("and", "or", "xor")]


def add_binary(b: Builder, ref: int) -> int:
    v = b.values[ref]
    op = b.draw(st.sampled_from(_binary_ops(v.dtype)))
    out_dtype = "bool" if op in ("lt", "eq", "ne") else v.dtype
    others = [i for i, w in enumerate(b.values) if _broadcast(v.shape, w.shape) is not None]
    if b.draw(st.booleans()) or not others:  # a Python constant operand: x // 0, x + INT_MAX, ...
        const = b.draw(edge_values(v.dtype))
        if is_float(v.dtype) and not math.isfinite(const) and op in ("lshift", "rshift"):
            const = 1.0
        return b.step(op, [ref], {"const": const}, Value(v.shape, out_dtype))
    other = b.cast_to(b.draw(st.sampled_from(others)), v.dtype)
    shape = _broadcast(v.shape, b.values[other].shape)
    assert shape is not None, "fuzz: picked operands broadcast"
    return b.step(op, [ref, other], {}, Value(shape, out_dtype))


def add_unary(b: Builder, ref: int) -> int:
    v = b.values[ref]
    if v.dtype == "bool":
        if b.draw(st.booleans()):
            return b.step("invert", [ref], {}, v)
        return b.cast_to(ref, b.draw(st.sampled_from(DTYPE_NAMES)))
    op = b.draw(st.sampled_from(["neg", "abs", *FLOAT_UNARY] if is_float(v.dtype) else ["neg", "abs", "invert"]))
    return b.step(op, [ref], {}, v)


def add_where(b: Builder, ref: int) -> int:
    v = b.values[ref]
    conds = [i for i, w in enumerate(b.values) if w.dtype == "bool" and _broadcast(v.shape, w.shape) is not None]
    if not conds:
        conds = [b.step("lt", [ref], {"const": b.draw(edge_values(v.dtype))}, Value(v.shape, "bool"))]
    cond = b.draw(st.sampled_from(conds))
    other = b.cast_to(b.draw(st.sampled_from(range(len(b.values)))), v.dtype)
    shape = _broadcast(_broadcast(v.shape, b.values[cond].shape) or (), b.values[other].shape)
    if shape is None or _broadcast(b.values[cond].shape, b.values[other].shape) is None:
        other = ref  # where(c, x, x): inputs can't be added once steps exist (values are numbered inputs first)
        shape = _broadcast(v.shape, b.values[cond].shape)
    assert shape is not None, "fuzz: where operands broadcast"
    return b.step("where", [cond, ref, other], {}, Value(shape, v.dtype))


def add_reduce(b: Builder, ref: int) -> int:
    v = b.values[ref]
    if v.shape and b.draw(st.integers(0, 3)) == 0:  # a scan, or a matmul of a matrix with its transpose
        if len(v.shape) == 2 and v.dtype != "bool" and b.draw(st.booleans()):
            return b.step("matmul", [ref], {}, Value((v.shape[0], v.shape[0]), v.dtype))
        axis = b.draw(st.integers(0, len(v.shape) - 1))
        return b.step("cumsum", [ref], {"axis": axis}, Value(v.shape, _sum_dtype(v.dtype)))
    ops = [o for o in ("sum", "prod", "max", "min") if not (o == "prod" and v.dtype == "bool")]
    op = b.draw(st.sampled_from(ops + (["mean"] if is_float(v.dtype) else [])))
    axis = b.draw(st.sampled_from([None, *range(len(v.shape))]))
    shape = () if axis is None else tuple(s for i, s in enumerate(v.shape) if i != axis)
    return b.step(op, [ref], {"axis": axis}, Value(shape, _sum_dtype(v.dtype) if op == "sum" else v.dtype))


def add_movement(b: Builder, ref: int) -> int:
    v = b.values[ref]
    n, nd = math.prod(v.shape), len(v.shape)
    choices = ["contiguous", "reshape", "expand"] + (["flip", "pad", "slice"] if nd else [])
    choices += ["permute"] if nd >= 2 else []
    if math.prod(v.shape) * 3 > MAX_ELEMENTS:
        choices = [c for c in choices if c not in ("expand", "pad")]
    match b.draw(st.sampled_from(choices)):
        case "contiguous":  # realized here: the next steps read it from memory in a kernel of their own
            return b.step("contiguous", [ref], {}, v)
        case "reshape":
            shape = b.draw(st.sampled_from([(n,), (1, *v.shape), (*v.shape, 1), tuple(reversed(v.shape))]))
            return b.step("reshape", [ref], {"shape": list(shape)}, Value(shape, v.dtype))
        case "expand":
            k = b.draw(st.integers(1, 3))
            return b.step("expand", [ref], {"n": k}, Value((k, *v.shape), v.dtype))
        case "flip":
            return b.step("flip", [ref], {"axis": b.draw(st.integers(0, nd - 1))}, v)
        case "pad":
            pads = [[b.draw(st.integers(0, 2)), b.draw(st.integers(0, 2))] for _ in v.shape]
            return b.step(
                "pad",
                [ref],
                {"pads": pads},
                Value(tuple(s + p + q for s, (p, q) in zip(v.shape, pads, strict=True)), v.dtype),
            )
        case "slice":
            ranges = [sorted(b.draw(st.lists(st.integers(0, s), min_size=2, max_size=2, unique=True))) for s in v.shape]
            return b.step("slice", [ref], {"ranges": ranges}, Value(tuple(hi - lo for lo, hi in ranges), v.dtype))
    order = b.draw(st.permutations(range(nd)))
    return b.step("permute", [ref], {"order": list(order)}, Value(tuple(v.shape[i] for i in order), v.dtype))


def add_indexing(b: Builder, ref: int) -> int:
    v = b.values[ref]
    if not v.shape or v.shape[0] == 0:
        return add_movement(b, ref)
    n = v.shape[0]
    kind = b.draw(st.sampled_from(["getitem", "gather", "setitem"]))
    if kind == "getitem":
        return b.step("getitem", [ref], {"index": b.draw(st.integers(-n - 2, n + 1))}, Value(v.shape[1:], v.dtype))
    if kind == "gather":
        index = b.draw(st.lists(st.integers(-n - 3, n + 2), min_size=1, max_size=4))
        return b.step("gather", [ref], {"index": index}, Value((len(index), *v.shape[1:]), v.dtype))
    start, stop = b.draw(st.integers(-n - 1, n + 1)), b.draw(st.integers(-n - 1, n + 1))
    params: dict[str, Any] = {"start": start, "stop": stop, "value": b.draw(edge_values(v.dtype))}
    if b.draw(st.booleans()):  # a tensor value: one row broadcast over the selection, or one row per selected row
        rows = len(range(*slice(start, stop).indices(n)))  # 0 for an empty selection
        shape = b.draw(st.sampled_from([v.shape[1:], (1, *v.shape[1:]), (rows, *v.shape[1:])]))
        values = b.draw(st.lists(edge_values(v.dtype), min_size=math.prod(shape), max_size=math.prod(shape)))
        params.update(tensor=values, shape=list(shape))
    return b.step("setitem", [ref], params, v)


def add_cast(b: Builder, ref: int) -> int:
    v = b.values[ref]
    if is_int(v.dtype) and b.draw(st.integers(0, 3)) == 0:  # the same bits as the other signedness
        other = v.dtype[1:] if v.dtype.startswith("u") else "u" + v.dtype
        return b.step("bitcast", [ref], {"dtype": other}, Value(v.shape, other))
    return b.cast_to(ref, b.draw(st.sampled_from(DTYPE_NAMES)))


_KINDS = {"binary": add_binary, "unary": add_unary, "where": add_where, "reduce": add_reduce,
          "movement": add_movement, "indexing": add_indexing, "cast": add_cast}  # fmt: skip


@st.composite
def programs(draw: st.DrawFn, max_steps: int = 5) -> Program:
    """A random fuzz program over one or two inputs of edge values."""
    b = Builder(draw)
    # mostly tiny; sometimes big enough for the kernel opts (UPCAST, GROUP) to apply
    sizes = st.integers(1, 4) | st.sampled_from([8, 16, 17, 32])
    shape = tuple(draw(st.lists(sizes, min_size=0, max_size=2)))
    if math.prod(shape) > MAX_ELEMENTS:
        shape = shape[:1]
    first = b.add_input(shape, draw(st.sampled_from(DTYPE_NAMES)))
    if draw(st.booleans()):
        other_shape = draw(st.sampled_from([shape, shape[-1:], ()]))
        b.add_input(other_shape, draw(st.sampled_from(DTYPE_NAMES)))
    ref = first
    for _ in range(draw(st.integers(min(2, max_steps), max_steps))):
        ref = _KINDS[draw(st.sampled_from(sorted(_KINDS)))](b, ref)
        if math.prod(b.values[ref].shape) > MAX_ELEMENTS:
            ref = add_reduce(b, ref)
    return b.program


__all__ = ["FLOATS", "programs"]
