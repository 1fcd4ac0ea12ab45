"""Soundness of the symbolic rule tables: random int/bool expression trees keep their value under every rewrite.

Hypothesis builds trees (depth <= 5) over 2-3 variables whose ranges include negatives, rewrites them with
`symbolic_simple`, `symbolic` and `sym`, and evaluates original and result on assignments inside the bounds with the
interpreter below. The interpreter is written here from C's rules (truncating division, two's complement wrap-around)
and shares no code with the rules or with fusegrad/uop/alu.py. It also checks vmin <= value <= vmax for every node.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fusegrad.dtype import DType, dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym, symbolic, symbolic_simple

INDEX_LIMIT = 2**62  # index math runs as int64 on devices: trees whose values leave this are skipped


class DivByZeroError(Exception):
    """A division or modulo by zero: undefined in C."""


class OutOfRangeError(Exception):
    """An index value too large for int64."""


# *** the reference interpreter ***


def c_div(a: int, b: int) -> int:
    """C's a / b on ints: the quotient truncated toward zero."""
    if b == 0:
        raise DivByZeroError
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_rem(a: int, b: int) -> int:
    """C's a % b: the sign follows a, and a == (a/b)*b + a%b."""
    return a - b * c_div(a, b)


def wrap(value: int, dt: DType) -> int:
    """Two's complement wrap-around to dt's width; index values only get a range check."""
    if dt == dtypes.index:
        if abs(value) >= INDEX_LIMIT:
            raise OutOfRangeError
        return value
    bits = dt.bitsize
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


ARITH: dict[Ops, Callable[[int, int], int]] = {
    Ops.ADD: lambda a, b: a + b,
    Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: c_div,
    Ops.MOD: c_rem,
    Ops.MAX: max,
    Ops.AND: lambda a, b: a & b,
    Ops.OR: lambda a, b: a | b,
    Ops.XOR: lambda a, b: a ^ b,
}
COMPARE: dict[Ops, Callable[[int, int], bool]] = {
    Ops.CMPLT: lambda a, b: a < b,
    Ops.CMPNE: lambda a, b: a != b,
    Ops.CMPEQ: lambda a, b: a == b,
}


def evaluate(root: UOp, env: dict[str, int], check_bounds: bool = False) -> dict[UOp, Any]:
    """The value of every node below root for the variable values in `env` (bools as Python bools)."""
    vals: dict[UOp, Any] = {}
    for u in root.toposort():
        src = [vals[s] for s in u.src]
        if u.op is Ops.CONST:
            val: Any = u.arg
        elif u.op is Ops.DEFINE_VAR:
            val = env[u.arg[0]]
        elif u.op in COMPARE:
            val = COMPARE[u.op](src[0], src[1])
        elif u.op is Ops.WHERE:
            val = src[1] if src[0] else src[2]
        elif u.op in ARITH and u.dtype == dtypes.bool:
            val = bool(ARITH[u.op](int(src[0]), int(src[1])))
        elif u.op in ARITH:
            val = wrap(ARITH[u.op](src[0], src[1]), u.dtype)
        else:
            raise NotImplementedError(f"evaluate: no meaning for {u.op}")
        vals[u] = val
        if check_bounds:
            assert u.vmin <= val <= u.vmax, f"{u.op} = {val} is outside its bounds [{u.vmin}, {u.vmax}]"
    return vals


# *** random trees: plain tuples, built into UOps per example (cheap to shrink and to print) ***

VAR_NAMES = ("a", "b", "c")
DIVISORS = (1, 2, 3, 4, 5, 6, 8, -1, -2, -3, -4)
INT_OPS = ("add", "sub", "mul", "mulc", "divc", "modc", "div", "mod", "max", "where", "neg")
BOOL_OPS = ("and", "or", "xor", "ne", "eq", "not", "andc", "orc")
CMP_OPS = ("lt", "ne", "eq", "ltc")


@st.composite
def int_tree(draw: st.DrawFn, depth: int) -> tuple[Any, ...]:
    """An int expression of at most `depth` levels: ("op", children...) with ("var", i) and ("const", v) leaves."""
    if depth <= 1 or draw(st.integers(0, 3)) == 0:
        return ("var", draw(st.integers(0, 2))) if draw(st.booleans()) else ("const", draw(st.integers(-9, 9)))
    op = draw(st.sampled_from(INT_OPS))
    if op in ("mulc", "divc", "modc"):
        c = draw(st.sampled_from(DIVISORS) if op != "mulc" else st.integers(-9, 9))
        return (op, draw(int_tree(depth - 1)), c)
    if op == "neg":
        return (op, draw(int_tree(depth - 1)))
    if op == "where":
        return (op, draw(bool_tree(depth - 1)), draw(int_tree(depth - 1)), draw(int_tree(depth - 1)))
    return (op, draw(int_tree(depth - 1)), draw(int_tree(depth - 1)))


@st.composite
def bool_tree(draw: st.DrawFn, depth: int) -> tuple[Any, ...]:
    """A bool expression: comparisons of int expressions joined by & | ^ != == and not."""
    if depth <= 2 or draw(st.integers(0, 2)) == 0:
        op = draw(st.sampled_from(CMP_OPS))
        rhs = ("const", draw(st.integers(-12, 12))) if op == "ltc" else draw(int_tree(depth - 1))
        return ("cmp_" + op.removesuffix("c"), draw(int_tree(depth - 1)), rhs)
    op = draw(st.sampled_from(BOOL_OPS))
    if op == "not":
        return (op, draw(bool_tree(depth - 1)))
    if op in ("andc", "orc"):
        return (op, draw(bool_tree(depth - 1)), draw(st.booleans()))
    return (op, draw(bool_tree(depth - 1)), draw(bool_tree(depth - 1)))


BUILD: dict[str, Callable[..., UOp]] = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x // y,
    "mod": lambda x, y: x % y, "max": lambda x, y: x.maximum(y), "neg": lambda x: -x,
    "where": lambda c, x, y: c.where(x, y),
    "cmp_lt": lambda x, y: x < y, "cmp_ne": lambda x, y: x.ne(y), "cmp_eq": lambda x, y: x.eq(y),
    "and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y, "ne": lambda x, y: x.ne(y),
    "eq": lambda x, y: x.eq(y), "not": lambda x: x.logical_not(),
}  # fmt: skip


def build(tree: tuple[Any, ...], vs: list[UOp], dt: DType) -> UOp:
    """The UOp graph of a tuple tree, with the UOp operators a frontend would use."""
    op, *args = tree
    if op == "var":
        return vs[args[0] % len(vs)]
    if op == "const":
        return UOp.const(dt, args[0])
    if op in ("mulc", "divc", "modc"):
        x = build(args[0], vs, dt)
        return {"mulc": x * args[1], "divc": x // args[1], "modc": x % args[1]}[op]
    if op in ("andc", "orc"):
        x = build(args[0], vs, dt)
        return x & args[1] if op == "andc" else x | args[1]
    return BUILD[op](*(build(a, vs, dt) for a in args))


@st.composite
def expressions(draw: st.DrawFn, dt: DType) -> tuple[UOp, list[UOp]]:
    """A random int or bool tree over 2-3 variables with ranges inside [-10, 18], as (root, variables)."""
    ranges = []
    for _ in range(draw(st.integers(2, 3))):
        lo = draw(st.integers(-10, 6))
        ranges.append((lo, lo + draw(st.integers(0, 12))))
    tree = draw(st.one_of(int_tree(5), bool_tree(5)))
    vs = [UOp.variable(name, lo, hi, dt) for name, (lo, hi) in zip(VAR_NAMES, ranges, strict=False)]
    return build(tree, vs, dt), vs


def assignments(vs: list[UOp], seed: int) -> list[dict[str, int]]:
    """Every assignment when there are few; else the corners and middles plus random points."""
    ranges = [range(v.arg[1], v.arg[2] + 1) for v in vs]
    combos = list(itertools.product(*ranges))
    if len(combos) > 80:
        rng = random.Random(seed)
        picks = [sorted({r[0], r[-1], r[len(r) // 2]} | ({0} if 0 in r else set())) for r in ranges]
        combos = list(itertools.product(*picks)) + rng.sample(combos, 40)
    return [{v.arg[0]: x for v, x in zip(vs, combo, strict=True)} for combo in combos]


def original_values(root: UOp, envs: list[dict[str, int]]) -> list[Any]:
    """The root's value for each assignment; skips the tree when any divisor can be zero or a value overflows."""
    out = []
    for env in envs:
        try:
            out.append(evaluate(root, env)[root])
        except (DivByZeroError, OutOfRangeError):
            assume(False)
    return out


def check_rewrite(root: UOp, vs: list[UOp], seed: int, pm_name: str, check_bounds: bool = False) -> None:
    """Rewrite with the named table; the result must equal the original on every assignment (and respect bounds)."""
    pm = {"symbolic_simple": symbolic_simple, "symbolic": symbolic, "sym": sym}[pm_name]
    envs = assignments(vs, seed)
    expected = original_values(root, envs)
    new = graph_rewrite(root, pm, name=f"test {pm_name}")
    for env, want in zip(envs, expected, strict=True):
        got = evaluate(new, env, check_bounds)[new]
        assert got == want, f"{pm_name}: {root.render(False)} -> {new.render(False)} at {env}: {got} != {want}"
        if check_bounds:
            evaluate(root, env, check_bounds)


@st.composite
def linear_forms(draw: st.DrawFn) -> tuple[UOp, list[UOp]]:
    """Index math as codegen makes it: (sum(f*v) + k) // c, % c, < d, over terms that may be mods or divs themselves."""
    ranges = []
    for _ in range(draw(st.integers(1, 3))):
        lo = draw(st.sampled_from((0, 0, 0, -3, -8, 1)))
        ranges.append((lo, lo + draw(st.integers(0, 20))))
    vs = [UOp.variable(name, lo, hi) for name, (lo, hi) in zip(VAR_NAMES, ranges, strict=False)]
    x = UOp.const(dtypes.index, draw(st.one_of(st.integers(0, 12), st.integers(-12, 12))))
    for v in vs:
        term = v
        if (wrap_op := draw(st.sampled_from(("", "", "mod", "div")))) != "":
            m = draw(st.sampled_from((2, 3, 4, 6, 8, 16)))
            term = v % m if wrap_op == "mod" else v // m
        x = x + term * draw(st.sampled_from((1, 1, 2, 3, 4, 6, 8, 12, 16, -1, -2, -4)))
    op = draw(st.sampled_from(("div", "mod", "lt", "divdiv", "modmod", "divlt")))
    c, d = (
        draw(st.sampled_from((2, 4, 8, 3, 6, 16, -4))),
        draw(st.integers(-8, 8) if op == "divlt" else st.integers(-20, 40)),
    )
    root = {"div": lambda: x // c, "mod": lambda: x % c, "lt": lambda: x < d, "divdiv": lambda: (x // c) // 2,
            "modmod": lambda: (x % c) % 2, "divlt": lambda: (x // c) < d}[op]()  # fmt: skip
    return root, vs


PROPERTY = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


@pytest.mark.parametrize("pm_name", ["symbolic_simple", "symbolic", "sym"])
@PROPERTY
@given(tree=expressions(dtypes.index), seed=st.integers(0, 2**16))
def test_rewrite_keeps_value_index(pm_name: str, tree: tuple[UOp, list[UOp]], seed: int) -> None:
    check_rewrite(*tree, seed, pm_name, check_bounds=pm_name == "sym")


@PROPERTY
@given(tree=expressions(dtypes.int32), seed=st.integers(0, 2**16))
def test_rewrite_keeps_value_int32(tree: tuple[UOp, list[UOp]], seed: int) -> None:
    check_rewrite(*tree, seed, "sym", check_bounds=True)


@PROPERTY
@given(tree=linear_forms(), seed=st.integers(0, 2**16))
def test_div_mod_compare_folding_keeps_value(tree: tuple[UOp, list[UOp]], seed: int) -> None:
    check_rewrite(*tree, seed, "sym", check_bounds=True)
