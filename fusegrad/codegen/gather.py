"""Codegen rules for sums with at most one nonzero term, which become that term. A one-hot sum over a range,
`sum_r (x == r ? v(r) : 0)` (how indexing by a tensor and nn.Embedding are written), becomes `v(x)` read through loads
gated by `0 <= x < N`: one gated read per output instead of N compares and adds. A window sum whose windows don't
overlap, `sum_r ((x - r) % N == 0 ? v(r) : 0)` over r in [0, N) (a pool's backward with stride equal to its kernel, as
schedule/windows.py writes it), becomes `v(x % N)`. Runs in codegen's first pass ("simplify indexing"), before opts.
"""

from __future__ import annotations

import functools
import operator

from fusegrad.dtype import dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat
from fusegrad.uop.symbolic import split_uop


def _is_lossless_cast_of(node: UOp, rng: UOp) -> bool:
    """Is node the range r, or r through casts to int dtypes that each hold every value of [0, N)?"""
    bound = rng.src[0]
    while node.op is Ops.CAST:
        if bound.op is not Ops.CONST or not dtypes.is_int(node.dtype) or bound.arg - 1 > dtypes.max(node.dtype):
            return False
        node = node.src[0]
    return node is rng


def _compared_value(cond: UOp, rng: UOp) -> UOp | None:
    """For cond = (x == r) or (x == cast(r)), either way round: x, when it is an int that does not read r and the
    casts of r are lossless over the whole range (so x == r holds for at most one r)."""
    for x, other in (cond.src, cond.src[::-1]):
        if dtypes.is_int(x.dtype) and rng not in x.toposort() and _is_lossless_cast_of(other, rng):
            return x
    return None


def _gate_reads(value: UOp, position: UOp, valid: UOp) -> UOp:
    """value with every INDEX whose address uses `position` gated by valid (anded with a gate it has): no load of
    it reads memory where valid is false."""
    rebuilt: dict[UOp, UOp] = {}
    # sources first, each node rebuilt from its rebuilt sources: in a gather of a gather, the inner index's INDEX sits
    # inside the outer INDEX's address, and both need the gate (a substitute of both would keep the inner one bare)
    for u in value.toposort():
        src = tuple(rebuilt.get(s, s) for s in u.src)
        if u.op is Ops.INDEX and position in u.src[1].toposort():
            src = (src[0], src[1], valid if len(src) < 3 else src[2] & valid)
        if src != u.src:
            rebuilt[u] = u.replace(src=src)
    return rebuilt.get(value, value)


def collapse_one_hot_sum(red: UOp) -> UOp | None:
    """REDUCE(ADD, (x == r) ? v(r) : 0, r) -> (0 <= x < N) ? v(x) : 0, the reads of v gated the same way; a bare
    gated load needs no WHERE (it reads 0 where its gate is false)."""
    if red.arg is not Ops.ADD or len(red.src) != 2 or red.src[0].op is not Ops.WHERE:
        return None
    (cond, value, otherwise), rng = red.src[0].src, red.src[1]
    if rng.op is not Ops.RANGE or cond.op is not Ops.CMPEQ or otherwise.op is not Ops.CONST or otherwise.arg != 0:
        return None
    if (x := _compared_value(cond, rng)) is None:
        return None
    position = x.cast(dtypes.index)
    valid = (position >= 0) & (position < rng.src[0])
    read = _gate_reads(value.substitute({rng: position}), position, valid)
    if read.op is Ops.LOAD and read.src[0].op is Ops.INDEX and len(read.src[0].src) == 3:
        return read  # a gated load is already 0 where valid is false
    return valid.where(read, otherwise)


def _window_start(conjunct: UOp, rng: UOp, rngs: tuple[UOp, ...]) -> tuple[UOp, UOp] | None:
    """(x, x - r) for a conjunct `(x - r) % N == 0` (either way round) with N the constant size of range r, when x
    reads none of the reduce's ranges and is never negative: then r = x % N is the only r of [0, N) satisfying it."""
    if conjunct.op is not Ops.CMPEQ or rng.src[0].op is not Ops.CONST:
        return None
    mod, zero = conjunct.src if conjunct.src[1].op is Ops.CONST else conjunct.src[::-1]
    if zero.op is not Ops.CONST or zero.arg != 0 or mod.op is not Ops.MOD:
        return None
    if mod.src[1].op is not Ops.CONST or mod.src[1].arg != rng.src[0].arg:
        return None
    terms = list(split_uop(mod.src[0], Ops.ADD))
    minus_r = [t for t in terms if rng in t.toposort()]
    if len(minus_r) != 1 or minus_r[0].op is not Ops.MUL or minus_r[0].src[0] is not rng:
        return None
    if minus_r[0].src[1].op is not Ops.CONST or minus_r[0].src[1].arg != -1 or len(terms) < 2:
        return None
    x = functools.reduce(operator.add, [t for t in terms if t is not minus_r[0]])
    if x.vmin < 0 or any(r in x.toposort() for r in rngs):
        return None
    return x, mod.src[0]


def collapse_window_sum(red: UOp) -> UOp | None:
    """REDUCE(ADD, cond ? v : 0, ..., r, ...) where cond has a conjunct (x - r) % N == 0 with N the size of r: r becomes
    x % N and leaves the reduce (the conjunct always holds there), the rest of cond and v read at that r. x - r itself
    becomes (x // N) * N, so a window's position (x - r) // N and an input index r + ((x - r) // N) * N fold to x // N
    and x."""
    if red.arg is not Ops.ADD or red.src[0].op is not Ops.WHERE:
        return None
    (cond, value, otherwise), rngs = red.src[0].src, red.src[1:]
    if otherwise.op is not Ops.CONST or otherwise.arg != 0 or any(r.op is not Ops.RANGE for r in rngs):
        return None
    conjuncts, subs = list(split_uop(cond, Ops.AND)), {}
    for rng in rngs:
        for c in conjuncts:
            if (found := _window_start(c, rng, rngs)) is not None:
                x, offset = found
                subs[rng], subs[offset] = x % rng.src[0], (x // rng.src[0]) * rng.src[0]
                conjuncts = [k for k in conjuncts if k is not c]  # and its copies: an AND may repeat a conjunct
                break
    if not subs:
        return None
    body = value.substitute(subs)
    if conjuncts:
        body = functools.reduce(operator.and_, conjuncts).substitute(subs).where(body, otherwise)
    left = tuple(r for r in rngs if r not in subs)
    return red.replace(src=(body, *left)) if left else body


# exact: x equals at most one r of [0, N) (the cast of r is lossless), so the sum has at most that one nonzero term,
# v(x), and none when x is outside [0, N). Used by codegen's "simplify indexing" pass together with `sym`.
pm_collapse_one_hot_sums = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), collapse_one_hot_sum),  # sum_r (x == r ? v(r) : 0) -> 0 <= x < N ? v(x) : 0
    # exact: for x >= 0 the one r of [0, N) with (x - r) % N == 0 is x % N; the sum of one term and zeros is the term
    (UPat(Ops.REDUCE, name="red"), collapse_window_sum),  # sum_r ((x - r) % N == 0 ? v(r) : 0) -> v(x % N)
])  # fmt: skip
