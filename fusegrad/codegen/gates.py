"""Codegen pass on gated accesses (`INDEX(buf, idx, valid)`): each index simplified knowing its gate holds, gates
that always hold dropped, loads whose gate never holds folded to 0. Run after `sym`, before lowering reductions.
"""

from __future__ import annotations

from fusegrad.dtype import dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat
from fusegrad.uop.symbolic import pm_simplify_valid, uop_given_valid


def simplify_gated_index(x: UOp, buf: UOp, idx: UOp, valid: UOp) -> UOp | None:
    """INDEX(buf, idx, valid) -> INDEX(buf, idx', valid), idx' = idx simplified given valid (None: unchanged)."""
    new = uop_given_valid(valid, idx)
    return None if new is None or new is idx else x.replace(src=(buf, new, valid))


def fold_never_valid(x: UOp, idx: UOp) -> UOp | None:
    """LOAD(INDEX(buf, idx, valid)) -> 0 when valid can never hold."""
    valid = idx.src[2]
    never = (valid.op is Ops.CONST and not valid.arg) or uop_given_valid(valid, idx.src[1]) is None
    return x.const_like(0) if never else None


# exact: a gated load reads 0 where its gate is false (KERNEL_IR.md §1), so only the gated cases change.
# Used by codegen's "simplify gates" pass; the AND rule of pm_simplify_valid first tightens multi-clause gates.
pm_simplify_gates = pm_simplify_valid + PatternMatcher([
    (UPat(Ops.INDEX, src=(UPat.var("buf"), UPat.var("idx"), UPat.const(dtypes.bool, True))),
     lambda buf, idx: buf.index(idx)),  # INDEX(buf, idx, True) -> INDEX(buf, idx)
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, src=(UPat(), UPat(), UPat()), name="idx"),), name="x"),
     fold_never_valid),  # LOAD(INDEX(buf, idx, never)) -> 0
    (UPat(Ops.INDEX, src=(UPat.var("buf"), UPat.var("idx"), UPat.var("valid")), name="x"),
     simplify_gated_index),  # INDEX(buf, idx, valid) -> INDEX(buf, idx | valid, valid)
])  # fmt: skip
