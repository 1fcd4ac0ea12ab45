"""Codegen pass on gated accesses (`INDEX(buf, idx, valid)`): each gate's clauses tightened by the ones before it,
each index simplified knowing its gate holds, gates that always hold dropped, loads whose gate never holds folded to 0.
Run after `sym`, before lowering reductions.
"""

from __future__ import annotations

from fusegrad.dtype import Invalid, dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat
from fusegrad.uop.symbolic import simplify_index_given_valid, simplify_valid, uop_given_valid


def reads_memory(u: UOp) -> bool:
    """Does computing u load from memory (an index or gate that depends on data, as a gather's does)?"""
    return any(n.op is Ops.LOAD for n in u.toposort())


def simplify_gated_index(x: UOp, buf: UOp, idx: UOp, valid: UOp) -> UOp | None:
    """INDEX(buf, idx, valid) -> INDEX(buf, idx', valid'): valid's clauses each simplified given the ones before it
    (a multi-clause gate), else idx simplified given valid (None: unchanged).

    Not when idx or valid loads from memory: C computes a gated access's address and every clause whatever the gate
    says, so a load inside them must keep its own gate (simplifying it away given the outer gate read out of bounds)."""
    if reads_memory(idx) or reads_memory(valid):
        return None
    if valid.op is Ops.AND and (tighter := simplify_valid(valid)) is not None:
        return x.replace(src=(buf, idx, tighter))
    new = uop_given_valid(valid, idx)
    return None if new is None or new is idx else x.replace(src=(buf, new, valid))


def fold_never_valid(x: UOp, idx: UOp) -> UOp | None:
    """LOAD(INDEX(buf, idx, valid)) -> 0 when valid can never hold."""
    valid = idx.src[2]
    never = (valid.op is Ops.CONST and not valid.arg) or uop_given_valid(valid, idx.src[1]) is None
    return x.const_like(0) if never else None


# exact: a gated load reads 0 where its gate is false (KERNEL_IR.md §1), so only the gated cases change. Used by
# codegen's "simplify gates" pass. Only gates are simplified given their own clauses, never an AND computed as a value:
# `(r < 7) & (a[r] < b[r])` with gated loads would have the loads' gates rewritten both ways, forever.
pm_simplify_gates = PatternMatcher([
    (UPat(Ops.INDEX, src=(UPat.var("buf"), UPat.var("idx"), UPat.const(dtypes.bool, True))),
     lambda buf, idx: buf.index(idx)),  # INDEX(buf, idx, True) -> INDEX(buf, idx)
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, src=(UPat(), UPat(), UPat()), name="idx"),), name="x"),
     fold_never_valid),  # LOAD(INDEX(buf, idx, never)) -> 0
    (UPat(Ops.INDEX, src=(UPat.var("buf"), UPat.var("idx"), UPat.var("valid")), name="x"),
     simplify_gated_index),  # INDEX(buf, idx, a & b) -> INDEX(buf, idx | a & b', a & b') with b' given a
    (UPat.var("cond", dtypes.bool).where(UPat.var("x", dtypes.index), UPat.const(dtypes.index, Invalid).named("i")),
     simplify_index_given_valid),  # c ? x : Invalid -> c ? x' : Invalid
])  # fmt: skip
