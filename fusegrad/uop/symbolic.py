"""The algebra of UOps as rule tables: constant folding, identities, like terms, div/mod/compare folding by bounds.

Stage 3 of the pipeline. `symbolic_simple` ⊂ `symbolic` ⊂ `sym` (each is the previous plus more tables); index math is
simplified with `graph_rewrite(x, sym)`. Codegen also uses `split_uop`, `pm_simplify_valid`, `pm_drop_and_clauses`.
Every rule is exact under C semantics (division truncates toward zero) for every value inside the sources' bounds,
except `sym`'s pm_logistic (uop/logistic.py), which trades NaN and lost digits for a few-ulp result.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from typing import Any

from fusegrad.dtype import ConstType, DType, Invalid, InvalidType, can_safe_cast, dtypes, truncate
from fusegrad.helpers import cdiv, cmod
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.alu import exec_alu, float_to_int, python_alu
from fusegrad.uop.logistic import pm_logistic
from fusegrad.uop.ops import UOp
from fusegrad.uop.rewrite import graph_rewrite
from fusegrad.uop.upat import PatternMatcher, UPat

# index first: pattern dtype checks test membership in order, and index math is what runs through here most
INTS = (dtypes.index, *dtypes.sints, *dtypes.uints)
INTS_BOOL = (*INTS, dtypes.bool)
_CONSTS = (Ops.CONST, Ops.VCONST)


def _c(name: str) -> UPat:
    """A scalar constant pattern: the single op lets PatternMatcher skip the rule when no CONST source is there."""
    return UPat.cvar(name, vec=False)


_TRUE, _FALSE = UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False)
_INVALID = UPat.const(dtypes.index, Invalid).named("i")


# *** helpers other passes use too ***


def split_uop(x: UOp, sep: Ops) -> Iterator[UOp]:
    """The operands of a chain of `sep` ops, left to right: split_uop(a+b+c, Ops.ADD) yields a, b, c."""
    stack = [x]
    while stack:
        u = stack.pop()
        if u.op is sep:
            stack.extend(reversed(u.src))
        else:
            yield u


def _bool_like(x: UOp, value: bool) -> UOp:
    """A bool constant with as many lanes as `x`: what a comparison of `x` folds to."""
    return UOp.const(dtypes.bool.vec(x.dtype.count), value)


def _fits(value: int, dt: DType) -> bool:
    return dt.scalar() == dtypes.index or bool(dtypes.min(dt) <= value <= dtypes.max(dt))


# *** constant folding ***


def _lanes(u: UOp) -> Any:
    """The value of a constant operand: a scalar, a tuple for VCONST, or None for a non-constant."""
    if u.op is Ops.VECTORIZE:
        return tuple(s.arg for s in u.src) if all(s.op is Ops.CONST for s in u.src) else None
    return u.arg if u.op in _CONSTS else None


def _values(arg: Any) -> tuple[Any, ...]:
    return arg if isinstance(arg, tuple) else (arg,)


def fold_constants(x: UOp) -> UOp | None:
    """op(c0, c1, ...) -> c, computed as the kernel would (wrapping, truncating; x // 0 and x % 0 are 0, alu.py)."""
    if x.op not in python_alu:
        return None
    args = tuple(_lanes(s) for s in x.src)
    if any(a is None for a in args):
        return None
    if any(isinstance(v, InvalidType) for a in args for v in _values(a)):
        return None
    return x.const_like(exec_alu(x.op, x.dtype, args))


def fold_cast_const(x: UOp, c: UOp) -> UOp | None:
    """cast(c) -> c converted as a kernel converts it: a float into an int by `float_to_int`, an int wraps."""
    value, dt = c.arg, x.dtype.scalar()
    if isinstance(value, InvalidType) or x.dtype.count != 1:
        return None
    if dtypes.is_int(dt):
        if isinstance(value, float):
            return UOp.const(dt, float_to_int(value, dt))
        return UOp.const(dt, truncate[dt](int(value)))
    if dt == dtypes.bool:
        return UOp.const(dt, bool(value))
    if dtypes.is_float(dt) and abs(value) < 2**1000:
        return UOp.const(dt, truncate[dt](float(value)))
    return None


def fold_cast_chain(x: UOp, a: UOp, b: UOp) -> UOp | None:
    """x.cast(a).cast(b) -> x.cast(b) when a holds every value of x (C casts convert values: the middle is a no-op).
    An int through a float into an int also needs b to hold x: an out-of-range float -> int conversion is not the wrap
    of int -> int (alu.float_to_int: uint32 4294967294 -> float64 -> int8 is 0, but uint32 -> int8 wraps to -2)."""
    if not can_safe_cast(x.dtype, a.dtype):
        return None
    if dtypes.is_int(x.dtype) and dtypes.is_float(a.dtype) and dtypes.is_int(b.dtype):
        return x.cast(b.dtype) if can_safe_cast(x.dtype, b.dtype) else None
    return x.cast(b.dtype)


def drop_noop_cast(x: UOp) -> UOp | None:
    """x.cast(x.dtype) -> x (a CAST or BITCAST built directly, bypassing UOp.cast)."""
    return x.src[0] if x.dtype == x.src[0].dtype else None


def fold_self_div(x: UOp) -> UOp | None:
    """x // x -> 1 when x is never 0 (0 // 0 is undefined)."""
    return x.const_like(1) if x.vmin > 0 or x.vmax < 0 else None


# an ALU op on constants -> its value; the first table of every symbolic pass. VCONST and VECTORIZE-of-CONST operands
# fold lane by lane, with the defined results of alu.py where C has none (x // 0 is 0, wide shifts give 0 or -1).
pm_fold_constants = PatternMatcher([
    (UPat(GroupOp.ALU, name="x", custom_early_reject={Ops.CONST}), fold_constants),  # op(c0, c1, ...) -> c
    (UPat(GroupOp.ALU, name="x", custom_early_reject={Ops.VCONST}), fold_constants),  # the same, lane by lane
    (UPat(GroupOp.ALU, name="x", custom_early_reject={Ops.VECTORIZE}), fold_constants),  # lanes of vectorize(c, ..)
    (UPat(Ops.CAST, src=(_c("c"),), name="x"), fold_cast_const),  # cast(c) -> c'
])  # fmt: skip

# neutral elements and self-cancelling operands; sound for every dtype unless the comment says otherwise. First after
# constant folding because they match most often and cost nothing.
pm_identities = PatternMatcher([
    (UPat.var("x") + 0, lambda x: x),  # x + 0 -> x
    (UPat.var("x") * 1, lambda x: x),  # x * 1 -> x
    (UPat.var("x", INTS) * 0, lambda x: x.const_like(0)),  # x * 0 -> 0 (ints only: a float x may be NaN or inf)
    (UPat.var("x") // 1, lambda x: x),  # x // 1 -> x
    (UPat.var("x", INTS) // 0, lambda x: x.const_like(0)),  # x // 0 -> 0 (defined so, alu.py; C would trap)
    (UPat.var("x", INTS) % 0, lambda x: x.const_like(0)),  # x % 0 -> 0 (defined so, alu.py)
    (UPat.var("x") // -1, lambda x: -x),  # x // -1 -> -x
    (UPat.var("x", INTS) % 1, lambda x: x.const_like(0)),  # x % 1 -> 0
    (UPat.var("x", INTS) % -1, lambda x: x.const_like(0)),  # x % -1 -> 0
    (UPat.var("x") // UPat.var("x"), fold_self_div),  # x // x -> 1 when x is never 0
    (UPat.var("x", INTS) % UPat.var("x"), lambda x: x.const_like(0)),  # x % x -> 0
    ((UPat.var() % UPat.var("y")).named("m") % UPat.var("y"), lambda m, y: m),  # (x % y) % y -> x % y
    (UPat.var("x", INTS_BOOL) ^ 0, lambda x: x),  # x ^ 0 -> x, x ^ False -> x
    (UPat.var("x", INTS) | 0, lambda x: x),  # x | 0 -> x
    (UPat.var("x", INTS) & 0, lambda x: x.const_like(0)),  # x & 0 -> 0
    (UPat.var("x") < UPat.var("x"), lambda x: _bool_like(x, False)),  # x < x -> False (NaN < NaN is False too)
    (UPat.var("x", INTS_BOOL).ne(UPat.var("x")), lambda x: _bool_like(x, False)),  # x != x -> False (not floats: NaN)
    (UPat.var("x", INTS_BOOL).eq(UPat.var("x")), lambda x: _bool_like(x, True)),  # x == x -> True (not floats: NaN)
    (UPat(GroupOp.Idempotent, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),  # x & x, x | x, max(x, x) -> x
])  # fmt: skip

# boolean algebra on bool-typed nodes; bool ADD/MUL/MAX become OR/AND/OR first so the int rules never see them
pm_bool_algebra = PatternMatcher([
    (UPat.var("x", dtypes.bool) & _c("c"), lambda x, c: x if c.arg else c),  # x & True -> x, x & False -> False
    (UPat.var("x", dtypes.bool) | _c("c"), lambda x, c: c if c.arg else x),  # x | True -> True, x | False -> x
    (UPat.var("x", dtypes.bool).ne(False), lambda x: x),  # x != False -> x
    (UPat.var("x", dtypes.bool).eq(True), lambda x: x),  # x == True -> x
    (UPat.var("x", dtypes.bool).ne(True).ne(True), lambda x: x),  # !!x -> x
    (UPat(Ops.MUL, dtypes.bool, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x & y),  # x * y -> x & y (bools)
    (UPat(Ops.ADD, dtypes.bool, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x | y),  # x + y -> x | y (bools)
    (UPat(Ops.MAX, dtypes.bool, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x | y),  # max(x, y) -> x | y (bools)
])  # fmt: skip

# WHERE with a known condition or equal branches, and CASTs that change nothing
pm_where_cast = PatternMatcher([
    (_c("c").where(UPat.var("x"), UPat.var("y")), lambda c, x, y: x if c.arg else y),  # where(True, x, y) -> x
    (UPat.var().where(UPat.var("x"), UPat.var("x")), lambda x: x),  # where(c, x, x) -> x
    (UPat.var("c", dtypes.bool).where(_TRUE, _FALSE), lambda c: c),  # where(c, True, False) -> c
    (UPat.var("c", dtypes.bool).where(_FALSE, _TRUE), lambda c: c.ne(True)),  # where(c, False, True) -> !c
    (UPat((Ops.CAST, Ops.BITCAST), name="x"), drop_noop_cast),  # x.cast(x.dtype) -> x
    (UPat.var("x").cast(name="a").cast(name="b"), fold_cast_chain),  # x.cast(a).cast(b) -> x.cast(b) when x fits in a
])  # fmt: skip

symbolic_simple = pm_fold_constants + pm_identities + pm_bool_algebra + pm_where_cast


# *** canonical order and like terms ***


def _arg_key(arg: Any) -> tuple[int, Any]:
    """A sort key for an arg that never compares unlike types (numbers, names, tuples of those, anything else)."""
    if arg is None:
        return (0, 0)
    if isinstance(arg, (int, float)):
        return (1, arg)
    if isinstance(arg, str):
        return (2, arg)
    if isinstance(arg, tuple) and all(isinstance(a, (int, float, str)) for a in arg):
        return (3, tuple((isinstance(a, str), a) for a in arg))
    return (4, repr(arg))


def _node_order(u: UOp) -> tuple[Any, ...]:
    return (u.op.value, _arg_key(u.arg), u.dtype.priority, u.dtype.count, *(s.__dict__["_order"] for s in u.src))


def order_key(u: UOp) -> tuple[Any, ...]:
    """A content-based order of nodes, stable across runs: by op (so constants, the last Ops, go last), arg, sources."""
    return u._cached("_order", _node_order)  # type: ignore[no-any-return]  # _node_order returns a tuple


def flip_commutative(x: UOp) -> UOp | None:
    """x op y -> y op x when y orders first: constants move right and equal terms sit side by side."""
    a, b = x.src
    if a.dtype is not dtypes.index:
        return None  # index math only: flipping vector lanes one by one would stop them merging later
    if a.op is not b.op:  # the common case: the op decides, no need for the full key
        return x.replace(src=(b, a)) if b.op.value < a.op.value else None
    return x.replace(src=(b, a)) if order_key(b) < order_key(a) else None


def _scaled(u: UOp) -> tuple[UOp, UOp | None]:
    """A term as (base, constant factor or None for 1): x*3 -> (x, 3), x -> (x, None)."""
    if u.op is Ops.MUL:
        if u.src[1].op in _CONSTS:
            return u.src[0], u.src[1]
        if u.src[0].op in _CONSTS:
            return u.src[1], u.src[0]
    return u, None


def _merge(base: UOp, f0: UOp | None, f1: UOp | None) -> UOp:
    """base*f0 + base*f1 -> base*(f0+f1), a missing factor being 1."""
    one = base.const_like(1)
    return base * ((one if f0 is None else f0) + (one if f1 is None else f1))


def _can_merge(dt: DType, f0: UOp | None, f1: UOp | None) -> bool:
    """Whether x*c0 + x*c1 may become x*(c0+c1): always for ints; for floats only when both factors have one sign or
    cancel exactly, so x = ±inf keeps its value (inf*2 + inf*-1 is NaN, not inf*1; inf*0 + inf is NaN, not inf)."""
    if not dtypes.is_float(dt):
        return True
    c0, c1 = (1.0 if f is None else f.arg for f in (f0, f1))
    if not isinstance(c0, (int, float)) or not isinstance(c1, (int, float)):
        return False  # vector constants: leave them
    return (c0 > 0 and c1 > 0) or (c0 < 0 and c1 < 0) or (c0 != 0 and c0 + c1 == 0)


def combine_like_terms(x: UOp) -> UOp | None:
    """x*c0 + x*c1 -> x*(c0+c1), also with the first term one level down: (y + x*c0) + x*c1 -> y + x*(c0+c1) (not for
    floats: (1 + 2**-53) + 2**-53 is 1 in float64, 1 + 2**-53*2 is not)."""
    if x.dtype.scalar() is dtypes.bool:
        return None
    (left_base, left_f), (right_base, right_f) = _scaled(x.src[0]), _scaled(x.src[1])
    if left_base is right_base and left_base.op not in _CONSTS:
        return _merge(left_base, left_f, right_f) if _can_merge(x.dtype, left_f, right_f) else None
    if dtypes.is_float(x.dtype):
        return None  # regrouping floats changes overflow too: (max + -max) + -max is -max, max + -max*2 is -inf
    for side, base, f in ((x.src[0], right_base, right_f), (x.src[1], left_base, left_f)):
        if side.op is Ops.ADD and base.op not in _CONSTS:  # constants fold, they don't combine
            for y, other in (side.src, side.src[::-1]):
                if (term := _scaled(other))[0] is base and _can_merge(x.dtype, term[1], f):
                    return y + _merge(base, term[1], f)
    return None


def fold_constant_pair(x: UOp) -> UOp | None:
    """(y op c0) op c1 -> y op (c0 op c1) for an associative op, the constants on either side.

    Not for float + and *: rounding makes them non-associative ((1 + 1e-10) - 1 is 0 in float32, 1e-10 regrouped).
    """
    if x.op in (Ops.ADD, Ops.MUL) and dtypes.is_float(x.dtype):
        return None
    inner, c1 = x.src if x.src[1].op is Ops.CONST else x.src[::-1]
    if c1.op is not Ops.CONST or inner.op is not x.op:
        return None
    y, c0 = inner.src if inner.src[1].op is Ops.CONST else inner.src[::-1]
    return y.alu(x.op, c0.alu(x.op, c1)) if c0.op is Ops.CONST else None


def move_constant_out(x: UOp) -> UOp | None:
    """(y + c) + z -> (y + z) + c, and the same for *: constants bubble up to meet and fold (not for floats)."""
    if dtypes.is_float(x.dtype):
        return None
    for inner, z in (x.src, x.src[::-1]):
        if inner.op is x.op and z.op not in _CONSTS:
            y, c = inner.src if inner.src[1].op is Ops.CONST else inner.src[::-1]
            if c.op is Ops.CONST and y.op is not Ops.CONST:
                return y.alu(x.op, z).alu(x.op, c)
    return None


def distribute_constant(x: UOp) -> UOp | None:
    """(y + z) * c -> y*c + z*c in index math, so like terms meet across the product."""
    s, c = x.src if x.src[1].op is Ops.CONST else x.src[::-1]
    if c.op is not Ops.CONST or s.op is not Ops.ADD or x.dtype is not dtypes.index:
        return None
    return s.src[0] * c + s.src[1] * c


# canonical order and like terms: sums and products keep their value exactly for ints (wrap-around arithmetic is a ring)
# and up to rounding for floats. Used by `symbolic`; the flip relies on CONST sorting last, which the moves preserve.
# The hot ADD/MUL rules are single callbacks on a bare pattern: one cheap match instead of many source permutations.
pm_combine_terms = PatternMatcher([
    (UPat(Ops.ADD, name="x", custom_early_reject={Ops.ADD}), move_constant_out),  # (y + c) + z -> (y + z) + c
    (UPat(Ops.MUL, name="x", custom_early_reject={Ops.MUL}), move_constant_out),  # (y * c) * z -> (y * z) * c
    (UPat(GroupOp.Associative, name="x", custom_early_reject={Ops.CONST}), fold_constant_pair),  # (y op c0) op c1
    (UPat(Ops.MUL, name="x", custom_early_reject={Ops.ADD, Ops.CONST}), distribute_constant),  # (y + z)*c -> y*c + z*c
    (UPat(GroupOp.Commutative, name="x"), flip_commutative),  # y op x -> x op y (index math, by order_key)
    (UPat(Ops.ADD, name="x"), combine_like_terms),  # x*c0 + x*c1 -> x*(c0+c1), (y + x*c0) + x*c1 -> y + x*(c0+c1)
    (UPat.var("x") % _c("c") + (UPat.var("x") // _c("c")) * _c("c"), lambda x, c: x),  # x%c + (x//c)*c -> x
])  # fmt: skip


# *** folding by bounds ***


def fold_by_bounds(x: UOp) -> UOp | None:
    """x -> c when vmin == vmax == c, for ints and bools (comparisons decided by bounds land here)."""
    if dtypes.is_float(x.dtype):
        return None  # float bounds are never a point here, and NaN would break the rule
    lo, hi = x._min_max
    return x.const_like(lo) if lo == hi and x.dtype is not dtypes.void else None


def fold_max(x: UOp, y: UOp) -> UOp | None:
    """max(x, y) -> x when x >= y everywhere (y when y >= x); ints and bools only (a float may be NaN)."""
    if dtypes.is_float(x.dtype):
        return None
    if x.vmin >= y.vmax:
        return x
    return y if y.vmin >= x.vmax else None


def cancel_div_mod(r: UOp, x: UOp, y: UOp) -> UOp | None:
    """x // y -> q and x % y -> x - q*y when x // y is q at every corner of the bounds (y never 0)."""
    if not dtypes.is_int(r.dtype) or y.vmin <= 0 <= y.vmax:
        return None
    corners = {cdiv(int(a), int(b)) for a in (x.vmin, x.vmax) for b in (y.vmin, y.vmax)}
    if len(corners) != 1:
        return None  # C division by a fixed-sign divisor is monotone in each operand, so corners bound it
    q = corners.pop()
    if not _fits(q, r.dtype):
        return None  # INT_MIN // -1: the quotient wraps
    if r.op is Ops.IDIV:
        return r.const_like(q)
    return x if q == 0 else x - y * q


# folds that read bounds (vmin/vmax): exact for every value inside them, wrap-around included, since bounds widen to
# the dtype's range on overflow. Used by `symbolic`, before the div/mod algebra, which it makes cheaper.
pm_fold_bounds = PatternMatcher([
    (UPat(GroupOp.ALU | {Ops.DEFINE_VAR}, name="x"), fold_by_bounds),  # x -> c when vmin == vmax == c
    (UPat.var("x").maximum(UPat.var("y")), fold_max),  # max(x, y) -> x when x.vmin >= y.vmax
    (UPat((Ops.IDIV, Ops.MOD), src=(UPat.var("x"), UPat.var("y")), name="r"), cancel_div_mod),  # x // y -> q when fixed
])  # fmt: skip


# *** division and modulo by a constant (index math) ***

Terms = list[tuple[int, UOp]]


def _factor(u: UOp) -> tuple[int, UOp]:
    """A term as (constant factor, the rest): x*4 -> (4, x), x -> (1, x)."""
    if u.op is Ops.MUL:
        if u.src[1].op is Ops.CONST:
            return int(u.src[1].arg), u.src[0]
        if u.src[0].op is Ops.CONST:
            return int(u.src[0].arg), u.src[1]
    return 1, u


def _linear(x: UOp) -> tuple[Terms, int]:
    """x as a sum of factor*node terms plus a constant: a*4 + b + 3 -> ([(4, a), (1, b)], 3)."""
    terms: Terms = []
    const = 0
    for u in split_uop(x, Ops.ADD):
        if u.op is Ops.CONST:
            const += int(u.arg)
        else:
            terms.append(_factor(u))
    return terms, const


def _term_bounds(f: int, v: UOp) -> tuple[int, int]:
    a, b = f * int(v.vmin), f * int(v.vmax)
    return (a, b) if a <= b else (b, a)


def _build(terms: Terms, const: int, like: UOp) -> UOp:
    """sum(f*v) + const as a node of `like`'s dtype; zero factors drop out."""
    ret: UOp | None = None
    for f, v in terms:
        if f != 0:
            term = v if f == 1 else v * f
            ret = term if ret is None else ret + term
    if ret is None:
        return like.const_like(const)
    return ret + const if const else ret


def _strip_mods(terms: Terms, c: int) -> tuple[Terms, bool]:
    """Inside `% c`, (y % m) with c | m is congruent to y: drop the inner mod."""
    ret, changed = [], False
    for f, v in terms:
        if v.op is Ops.MOD and v.src[1].op is Ops.CONST and v.src[1].arg != 0 and v.src[1].arg % c == 0:
            v, changed = v.src[0], True
        ret.append((f, v))
    return ret, changed


def _fold_window(terms: Terms, const: int, c: int, op: Ops, like: UOp) -> UOp | None:
    """With x >= 0: if the remainder part sum(r*v) + const spans less than c, x // c and x % c are linear."""
    reps = [min(f % c, f % c - c, key=abs) for f, _ in terms]
    spans = [_term_bounds(r, v) for r, (_, v) in zip(reps, terms, strict=True)]
    lo, hi = const + sum(s[0] for s in spans), const + sum(s[1] for s in spans)
    m = lo // c
    if hi - m * c >= c:
        return None
    if op is Ops.MOD:
        return _build([(r, v) for r, (_, v) in zip(reps, terms, strict=True)], const - m * c, like)
    return _build([((f - r) // c, v) for r, (f, v) in zip(reps, terms, strict=True)], m, like)


def _fold_split_div(terms: Terms, const: int, c: int, like: UOp) -> UOp | None:
    """With x >= 0: (c*A + R) // c -> A + (R/g) // (c/g) when the rest R >= 0 and g = gcd(c, R's factors)."""
    quotient = [(f // c, v) for f, v in terms if f % c == 0]
    rest = [(f, v) for f, v in terms if f % c != 0]
    q, r = divmod(const, c)
    if r + sum(_term_bounds(f, v)[0] for f, v in rest) < 0:
        return None
    g = math.gcd(c, *(f for f, _ in rest))
    if not quotient and q == 0 and g == 1:
        return None
    return _build(quotient, q, like) + _build([(f // g, v) for f, v in rest], r // g, like) // (c // g)


def _fold_split_mod(terms: Terms, const: int, c: int, like: UOp, changed: bool) -> UOp | None:
    """With x >= 0: x % c -> g*((R/g) % (c/g)) + const%g for the congruent rest R >= 0 and g = gcd(c, R's factors)."""
    rest = [(f % c, v) for f, v in terms if f % c != 0]
    r = const % c
    if r + sum(_term_bounds(f, v)[0] for f, v in rest) < 0:
        return None
    g = math.gcd(c, *(f for f, _ in rest))
    if not (changed or g > 1 or r != const or rest != terms):
        return None
    inner = _build([(f // g, v) for f, v in rest], r // g, like) % (c // g)
    return inner if g == 1 else inner * g + r % g


def _fold_nonneg(terms: Terms, const: int, c: int, op: Ops, like: UOp, split: bool) -> UOp | None:
    """x // c or x % c for x >= 0, where C's truncation is floor division. `split`: a smaller div/mod may remain."""
    changed = False
    if op is Ops.MOD:
        terms, changed = _strip_mods(terms, c)
    if (ret := _fold_window(terms, const, c, op, like)) is not None or not split:
        return ret
    if op is Ops.MOD:
        return _fold_split_mod(terms, const, c, like, changed)
    return _fold_split_div(terms, const, c, like)


def _fold_two_values(terms: Terms, const: int, c: int, op: Ops) -> UOp | None:
    """x = f*v + const with v in {a, a+1}: x // c and x % c are the line through their two values (any sign)."""
    if len(terms) != 1 or (v := terms[0][1]).vmax - v.vmin != 1:
        return None
    f, a = terms[0][0], int(v.vmin)
    fn = cdiv if op is Ops.IDIV else cmod
    y0, y1 = fn(f * a + const, c), fn(f * (a + 1) + const, c)
    return _build([(y1 - y0, v)], y0 - (y1 - y0) * a, v)


def _fold_linear(x: UOp, terms: Terms, const: int, c: int, op: Ops, split: bool = True) -> UOp | None:
    """x // c or x % c (c > 0) from x's linear form; None when no rule is exact for every x within bounds."""
    if all(f % c == 0 for f, _ in terms) and const % c == 0:
        return _build([(f // c, v) for f, v in terms], const // c, x) if op is Ops.IDIV else x.const_like(0)
    if (ret := _fold_two_values(terms, const, c, op)) is not None:
        return ret
    if x.vmin >= 0:
        ret = _fold_nonneg(terms, const, c, op, x, split)
    elif x.vmax <= 0:  # C division is odd: x // c == -((-x) // c), x % c == -((-x) % c)
        ret = _fold_nonneg([(-f, v) for f, v in terms], -const, c, op, x, split)
        ret = None if ret is None else ret * -1
    if ret is None and op is Ops.IDIV:  # x // c == (x // f) // (c // f) for a factor f of c that folds away
        for f in sorted({f for f, _ in terms if 1 < f < c and c % f == 0}):
            if (inner := _fold_linear(x, terms, const, f, Ops.IDIV, split=False)) is not None:
                return inner // (c // f)
    return ret


def fold_div_mod(r: UOp, x: UOp, c: UOp) -> UOp | None:
    """x // c and x % c for a constant c != 0 in index math."""
    d = int(c.arg)
    if d == 0 or r.dtype is not dtypes.index:
        return None
    if d < 0:  # C: x // -d == -(x // d), x % -d == x % d
        return (x // -d) * -1 if r.op is Ops.IDIV else x % -d
    terms, const = _linear(x)
    return _fold_linear(x, terms, const, d, r.op)


def fold_nested_mod(x: UOp, c0: UOp, c1: UOp) -> UOp | None:
    """(x % c0) % c1 -> x % c1 when c1 divides c0: x % c0 keeps x's sign and residue mod c1 (any int dtype)."""
    return x % c1 if c1.arg != 0 and c0.arg != 0 and c0.arg % c1.arg == 0 else None


def fold_nested_div(x: UOp, c0: UOp, c1: UOp) -> UOp | None:
    """(x // c0) // c1 -> x // (c0*c1) for c0, c1 > 0 (truncation composes); ints."""
    c = int(c0.arg) * int(c1.arg)
    return x // c if c0.arg > 0 and c1.arg > 0 and _fits(c, x.dtype) else None


# div and mod algebra. The const-divisor folds are for index math only (no wrap-around); the nested ones hold for any
# int dtype under C truncation, signs included. Used by `symbolic` after pm_fold_bounds.
pm_div_mod = PatternMatcher([
    (UPat((Ops.IDIV, Ops.MOD), src=(UPat.var("x"), _c("c")), name="r"), fold_div_mod),  # x // c, x % c (_fold_linear)
    ((UPat.var("x", INTS) // _c("c0")) // _c("c1"), fold_nested_div),  # (x//c0)//c1 -> x//(c0*c1)
    ((UPat.var("x", INTS) % _c("c0")) % _c("c1"), fold_nested_mod),  # (x%c0)%c1 -> x%c1 when c1 | c0
])  # fmt: skip


# *** comparisons (index math) ***


def fold_mul_lt(x: UOp, c: UOp, d: UOp) -> UOp | None:
    """x*c < d -> x < ceil(d/c) for c > 0; (x*-1) < ceil(d/-c) for c < -1."""
    if c.arg > 0:
        return x < -(-int(d.arg) // int(c.arg))
    return (x * -1) < -(-int(d.arg) // -int(c.arg)) if c.arg < -1 else None


def fold_div_lt(x: UOp, c: UOp, d: UOp) -> UOp | None:
    """x // c < d -> x < d*c when d > 0, x < (d-1)*c + 1 when d <= 0 (truncation toward zero), c > 0."""
    if c.arg <= 0:
        return None
    return x < int(d.arg * c.arg if d.arg > 0 else (d.arg - 1) * c.arg + 1)


def fold_lt_common_factor(x: UOp, d: UOp) -> UOp | None:
    """sum(f*v) + p < d -> sum(f/g*v) < d/g when g divides every f and d and the unit terms p lie in [0, g)."""
    terms = [_factor(u) for u in split_uop(x, Ops.ADD)]
    big, unit = [t for t in terms if abs(t[0]) != 1], [t for t in terms if abs(t[0]) == 1]
    if not big or len(terms) < 2 or any(v.op is Ops.CONST for _, v in terms):
        return None
    if not unit:  # sum(f*v) < d <-> sum(f/g*v) < ceil(d/g)
        g = math.gcd(*(f for f, _ in big))
        return _build([(f // g, v) for f, v in big], 0, x) < -(-int(d.arg) // g) if g > 1 else None
    g = math.gcd(int(d.arg), *(f for f, _ in big))
    spans = [_term_bounds(f, v) for f, v in unit]
    if g <= 1 or sum(s[0] for s in spans) < 0 or sum(s[1] for s in spans) >= g:
        return None
    return _build([(f // g, v) for f, v in big], 0, x) < int(d.arg) // g


def fold_add_ne(r: UOp, x: UOp, c: UOp, d: UOp) -> UOp | None:
    """x+c != d -> x != d-c (x+c == d likewise)."""
    return x.alu(r.op, x.const_like(d.arg - c.arg))


def fold_mul_ne(r: UOp, x: UOp, c: UOp, d: UOp) -> UOp | None:
    """x*c != d -> x != d/c when c | d, else True (x*c == d likewise, with False)."""
    if c.arg == 0:
        return None
    if d.arg % c.arg:
        return _bool_like(r, r.op is Ops.CMPNE)
    return x.alu(r.op, x.const_like(d.arg // c.arg))


_EQ_NE = (Ops.CMPNE, Ops.CMPEQ)

# comparisons of index math against constants, moved onto the bare variable; exact since index never wraps.
# Used by `symbolic`; the bounds table folds any comparison these leave decided.
pm_compare = PatternMatcher([
    ((UPat.var("x", dtypes.index) + _c("c")) < _c("d"), lambda x, c, d: x < int(d.arg - c.arg)),  # x+c < d -> x < d-c
    ((UPat.var("x", dtypes.index) * _c("c")) < _c("d"), fold_mul_lt),  # x*c < d -> x < ceil(d/c)
    ((UPat.var("x", dtypes.index) // _c("c")) < _c("d"), fold_div_lt),  # x//c < d -> x < d*c
    (UPat(Ops.ADD, dtypes.index, name="x") < _c("d"), fold_lt_common_factor),  # 4a + 8b < 12 -> a + 2b < 3
    (UPat.var("x", dtypes.index) * -1 < UPat.var("y") * -1, lambda x, y: y < x),  # -x < -y -> y < x
    (UPat(_EQ_NE, src=[UPat.var("x", dtypes.index) + _c("c"), _c("d")], name="r"), fold_add_ne),  # x+c != d -> x != d-c
    (UPat(_EQ_NE, src=[UPat.var("x", dtypes.index) * _c("c"), _c("d")], name="r"), fold_mul_ne),  # x*c != d -> x != d/c
])  # fmt: skip

# the algebra every index expression gets. Order: cheap local folds (symbolic_simple), canonical order and like terms,
# bounds, then div/mod and comparisons, which read the canonical forms the earlier tables produce.
symbolic = symbolic_simple + pm_combine_terms + pm_fold_bounds + pm_div_mod + pm_compare + PatternMatcher([
    (UPat.var("c", dtypes.bool).ne(True).where(UPat.var("x"), UPat.var("y")),
     lambda c, x, y: c.where(y, x)),  # !c ? x : y -> c ? y : x
    (UPat.var("x", dtypes.bool) | (UPat.var("x") & UPat.var()), lambda x: x),  # x | (x & y) -> x
])  # fmt: skip


# *** sym: validity gates and vector lanes ***


def gep_through_vectorize(g: UOp, v: UOp) -> UOp | None:
    """vectorize(x0, x1, ...).gep(i) -> xi (a tuple of lanes picks a smaller vectorize)."""
    if any(s.dtype.count != 1 for s in v.src):
        return None
    picked = tuple(v.src[i] for i in g.arg)
    return picked[0] if len(picked) == 1 else UOp(Ops.VECTORIZE, g.dtype, picked)


def gep_of_gep(g: UOp, inner: UOp) -> UOp:
    """x.gep(i).gep(j) -> x.gep(i[j])."""
    return inner.src[0].gep(tuple(inner.arg[i] for i in g.arg))


def gep_of_vconst(g: UOp, c: UOp) -> UOp:
    """vconst(c0, c1, ..).gep(i) -> ci (a tuple of lanes picks a smaller vconst)."""
    lanes = tuple(c.arg[i] for i in g.arg)
    return UOp.const(g.dtype, lanes if len(lanes) > 1 else lanes[0])


def _same_gate(c: UOp, x: UOp, y: UOp) -> UOp:
    return c.where(x, y)


def _and_gates(a: UOp, b: UOp, x: UOp, y: UOp) -> UOp:
    return (a & b).where(x, y)


def gep_all_lanes(g: UOp, x: UOp) -> UOp | None:
    """x.gep(0, 1, .., n-1) -> x for an x of n lanes."""
    return x if g.arg == tuple(range(x.dtype.count)) else None


def vectorize_of_geps(v: UOp) -> UOp | None:
    """vectorize(x.gep(0), x.gep(1), ..., x.gep(n-1)) -> x, for an x of n lanes."""
    x = v.src[0].src[0]
    if x.dtype.count != len(v.src) or any(g.src[0] is not x or g.arg != (i,) for i, g in enumerate(v.src)):
        return None
    return x


def vectorize_constants(v: UOp) -> UOp | None:
    """vectorize(c0, c1, ...) -> VCONST(c0, c1, ...) unless every lane is the same (the canonical broadcast)."""
    values = tuple(s.arg for s in v.src)
    return None if all(x == values[0] for x in values) else UOp.const(v.dtype, values)


# WHERE chains over the same gate, complements, and trivial lane shuffles; what index validity and vectorized
# index math need on top of `symbolic`. Used by `sym`, order-independent.
pm_gates_lanes = PatternMatcher([
    (UPat.var("c").where(UPat.var("x"), UPat.var("c").where(UPat.var(), UPat.var("y"))),
     _same_gate),  # c ? x : (c ? _ : y) -> c ? x : y
    (UPat.var("c").where(UPat.var("c").where(UPat.var("x"), UPat.var()), UPat.var("y")),
     _same_gate),  # c ? (c ? x : _) : y -> c ? x : y
    (UPat.var("a").where(UPat.var("b").where(UPat.var("x"), UPat.var("y")), UPat.var("y")),
     _and_gates),  # a ? (b ? x : y) : y -> (a & b) ? x : y
    (UPat.var("x", dtypes.bool) & UPat.var("x").ne(True), lambda x: x.const_like(False)),  # x & !x -> False
    (UPat.var("x", dtypes.bool) | UPat.var("x").ne(True), lambda x: x.const_like(True)),  # x | !x -> True
    (UPat(Ops.GEP, src=(UPat(Ops.VECTORIZE, name="v"),), name="g"), gep_through_vectorize),  # vec(x0, ..).gep(i) -> xi
    (UPat(Ops.GEP, src=(UPat(Ops.GEP, name="inner"),), name="g"), gep_of_gep),  # x.gep(i).gep(j) -> x.gep(i[j])
    (UPat(Ops.GEP, src=(UPat(Ops.VCONST, name="c"),), name="g"), gep_of_vconst),  # vconst(c0, c1, ..).gep(i) -> ci
    (UPat(Ops.GEP, src=(UPat.var("x"),), name="g"), gep_all_lanes),  # x.gep(0, 1, .., n-1) -> x
    (UPat(Ops.VECTORIZE, src=UPat(Ops.GEP), name="v"), vectorize_of_geps),  # vectorize(x.gep(0), .., x.gep(n-1)) -> x
    (UPat(Ops.VECTORIZE, src=UPat(Ops.CONST), name="v"), vectorize_constants),  # vectorize(c0, c1, ..) -> VCONST
])  # fmt: skip

# pm_logistic: float rules for e/(1+e) of an exponential and its gradient (uop/logistic.py)
sym = symbolic + pm_gates_lanes + pm_logistic


# *** index validity: simplifying under a gate ***


def parse_valid(clause: UOp) -> tuple[UOp, bool, int] | None:
    """A gate clause as a bound on an index expression: x < c -> (x, upper, c-1); !(x < c) -> (x, lower, c)."""
    if clause.op is Ops.CMPNE and clause.src[1].op is Ops.CONST and clause.src[1].arg is True:
        lt = clause.src[0]
        if lt.op is Ops.CMPLT and lt.src[1].op is Ops.CONST and dtypes.is_int(lt.src[0].dtype):
            return lt.src[0], False, int(lt.src[1].arg)
    if clause.op is Ops.CMPLT and dtypes.is_int(clause.src[0].dtype):
        if clause.src[1].op is Ops.CONST:
            return clause.src[0], True, int(clause.src[1].arg) - 1
        if clause.src[0].op is Ops.CONST:
            return clause.src[1], False, int(clause.src[0].arg) + 1
    return None


def uop_given_valid(valid: UOp, uop: UOp) -> UOp | None:
    """`uop` simplified knowing `valid` holds; None when `valid` can never hold.

    Each bounded expression becomes a fresh variable with the narrowed range, `sym` runs, and the expression comes back.
    """
    bounds: dict[UOp, tuple[ConstType, ConstType]] = {}
    for clause in split_uop(valid, Ops.AND):
        if (parsed := parse_valid(clause)) is None:
            continue
        expr, is_upper, c = parsed
        lo, hi = bounds.get(expr, (expr.vmin, expr.vmax))
        lo, hi = (lo, min(hi, c)) if is_upper else (max(lo, c), hi)
        if lo > hi:
            return None
        bounds[expr] = (lo, hi)
    fakes = {expr: UOp(Ops.DEFINE_VAR, expr.dtype, arg=(f"valid{i}", lo, hi), tag="given_valid")
             for i, (expr, (lo, hi)) in enumerate(bounds.items()) if (lo, hi) != (expr.vmin, expr.vmax)}  # fmt: skip
    if not fakes:
        return uop
    new = graph_rewrite(uop.substitute(fakes), sym, name="uop_given_valid")
    return new.substitute({fake: expr for expr, fake in fakes.items()})


def simplify_valid(valid: UOp) -> UOp | None:
    """An AND of gate clauses with each clause simplified given the ones before it; None when nothing changes."""
    clauses = list(split_uop(valid, Ops.AND))
    if len(clauses) < 2:
        return None
    kept: list[UOp] = []
    for clause in clauses:
        new = uop_given_valid(functools.reduce(lambda a, b: a & b, kept), clause) if kept else clause
        if new is None or (new.op is Ops.CONST and not new.arg):
            return valid.const_like(False)  # the clauses contradict each other
        if new.op is not Ops.CONST:
            kept.append(new)
    if kept == clauses:
        return None
    return functools.reduce(lambda a, b: a & b, kept) if kept else valid.const_like(True)


def simplify_index_given_valid(cond: UOp, x: UOp, i: UOp) -> UOp | None:
    """where(cond, x, Invalid) -> where(cond, x', Invalid) with x simplified knowing cond holds."""
    if (new := uop_given_valid(cond, x)) is None:
        return i  # cond never holds: the index is always invalid
    return None if new is x else cond.where(new, i)


# gates simplified by what they guarantee: each AND clause given the others, and a gated index given its gate.
# Used by codegen after `sym` (not part of it: each match runs a nested rewrite).
pm_simplify_valid = PatternMatcher([
    (UPat(Ops.AND, dtypes.bool, name="valid"), simplify_valid),  # a & b -> a & b' with b simplified given a
    (UPat.var("cond", dtypes.bool).where(UPat.var("x", dtypes.index), _INVALID),
     simplify_index_given_valid),  # c ? x : Invalid -> c ? x' : Invalid
])  # fmt: skip


def _ranges(u: UOp) -> set[UOp]:
    return {n for n in u.toposort() if n.op is Ops.RANGE}


def drop_and_clauses(cond: UOp, x: UOp, i: UOp) -> UOp | None:
    """where(c0 & c1, x, Invalid) -> where(c0, x, Invalid) when c1 uses no RANGE that x uses."""
    ranges = _ranges(x)
    clauses = list(split_uop(cond, Ops.AND))
    kept = [c for c in clauses if _ranges(c) & ranges]
    if len(kept) == len(clauses):
        return None
    return (functools.reduce(lambda a, b: a & b, kept) if kept else UOp.const(dtypes.bool, True)).where(x, i)


# gate clauses that don't touch the index's loops are dropped; the load they guard is decided elsewhere. Used by
# codegen once gates are final.
pm_drop_and_clauses = PatternMatcher([
    (UPat.var("cond", dtypes.bool).where(UPat.var("x", dtypes.index), _INVALID),
     drop_and_clauses),  # (c0 & c1) ? x : Invalid -> c0 ? x : Invalid
])  # fmt: skip
