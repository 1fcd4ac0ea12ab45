"""Sibling kernels as one kernel with several outputs (#12): the AST side of engine/schedule.py's merge.

Two kernels of row ops over the same output loops (a layernorm's or softmax's forward and its backward, realized
together) each read their rows from memory and each compute the rows' statistics. Run as one kernel, the outer loops
are shared: the rows are read from memory once and each statistic (a REDUCE of the same expression) is computed once.
Elementwise kernels over the same loops merge alike (Adam's two moment updates read the gradient once). Entry points:
`sibling_signature` (may this kernel take a sibling, and which output loops must one share?) and `merge_kernels`.
"""

from __future__ import annotations

from collections.abc import Mapping

from fusegrad.uop import AxisType, GroupOp, Ops
from fusegrad.uop.ops import UOp

# what a row kernel's AST may hold at schedule time; anything else (variables, a multi-device range) is left alone
_ROW_OPS = GroupOp.Elementwise | {
    Ops.SINK,
    Ops.STORE,
    Ops.INDEX,
    Ops.LOAD,
    Ops.DEFINE_GLOBAL,
    Ops.RANGE,
    Ops.REDUCE,
    Ops.CONST,
}


def sibling_signature(ast: UOp) -> UOp | None:
    """The output index every store of `ast` writes at, when `ast` is an elementwise kernel or a kernel of row ops: a
    SINK of STOREs at one index over LOOP ranges, whose every REDUCE (if any) is broadcast along some output loop (its
    value depends on a strict subset of the output loops: a contraction such as a matmul, whose every output has its
    own reduce, is not a row op). None for anything else. Two kernels with the same (hash-consed) index, both
    elementwise or both of row ops, may be merged."""
    if ast.op is not Ops.SINK or not ast.src or ast.arg is not None:  # an arg: opts chosen for this kernel
        return None
    index: UOp | None = None
    for store in ast.src:
        if store.op is not Ops.STORE or store.src[0].op is not Ops.INDEX or len(store.src[0].src) != 2:
            return None
        if index is not None and store.src[0].src[1] is not index:
            return None
        index = store.src[0].src[1]
    assert index is not None
    outer = {u for u in index.toposort() if u.op is Ops.RANGE}
    nodes = ast.toposort()
    if not outer or any(u.op not in _ROW_OPS for u in nodes):
        return None
    for u in nodes:
        if u.op is Ops.RANGE and (u.arg[1] not in (AxisType.LOOP, AxisType.REDUCE) or u.src[0].op is not Ops.CONST):
            return None
        if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP and u not in outer:
            return None
    if any(outer <= set(r.toposort()) for r in nodes if r.op is Ops.REDUCE):
        return None
    return index


def has_reduce(ast: UOp) -> bool:
    """A kernel of row ops (else elementwise): kernels merge only with their own kind."""
    return any(u.op is Ops.REDUCE for u in ast.toposort())


def merge_kernels(first: UOp, second: UOp, slots: Mapping[int, int]) -> UOp:
    """One AST computing the stores of `first` and then those of `second`, whose buffer slot s becomes `slots[s]`
    (slots the two kernels share keep one DEFINE_GLOBAL). Both have the same `sibling_signature`. The second's reduce
    loops are renumbered past the first's, and each of its reduces that computes what one of the first's does over
    loops of the same sizes takes that reduce's loops, so both read the same REDUCE node (computed once)."""
    next_id = 1 + max(u.arg[0] for ast in (first, second) for u in ast.toposort() if u.op is Ops.RANGE)
    renamed: dict[UOp, UOp] = {}
    for u in second.toposort():
        if u.op is Ops.DEFINE_GLOBAL:
            renamed[u] = u.replace(arg=slots[int(u.arg)])
        elif u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE:
            renamed[u] = u.replace(arg=(next_id, AxisType.REDUCE))
            next_id += 1
    shared = _share_reduces(first, second.substitute(renamed))
    return UOp(Ops.SINK, first.dtype, (*first.src, *shared.src))


def _share_reduces(first: UOp, second: UOp) -> UOp:
    """`second` with each REDUCE that equals one of `first`'s up to its own loops rewritten onto that one's loops,
    innermost first (a variance's mean is shared before the variance can be). Loops used outside the reduce that
    closes them are left alone: renaming them would change other expressions."""
    known = first.toposort()
    candidates: dict[tuple[object, ...], list[UOp]] = {}
    for u in known:
        if u.op is Ops.REDUCE:
            candidates.setdefault(_reduce_kind(u), []).append(u)
    done: set[UOp] = set()
    while todo := [u for u in second.toposort() if u.op is Ops.REDUCE and u not in known and u not in done]:
        reduce = todo[0]
        done.add(reduce)
        for other in candidates.get(_reduce_kind(reduce), []):
            loops = dict(zip(reduce.src[1:], other.src[1:], strict=True))
            if reduce.substitute(loops) is other and _loops_private(second, reduce):
                second = second.substitute(loops)
                break
    return second


def _reduce_kind(reduce: UOp) -> tuple[object, ...]:
    """What two reduces must agree on to be one: op, dtype and the sizes of their loops."""
    return (reduce.arg, reduce.dtype, tuple(r.src[0].arg for r in reduce.src[1:]))


def _loops_private(ast: UOp, reduce: UOp) -> bool:
    """Are `reduce`'s loops used only inside it (so renaming them changes nothing else)?"""
    inside = set(reduce.toposort())
    loops = set(reduce.src[1:])
    return all(u in inside for u in ast.toposort() if any(s in loops for s in u.src))
