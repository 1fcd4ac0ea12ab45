"""Merging and splitting loops (#12): two nested loops of one kind that every index walks as one become one loop; a
loop read through a division and a modulo becomes two.

A batchnorm's per-channel sums over a (64, 16, 26, 26) tensor reduce over (64, 26, 26); the two 26s are one
contiguous run of 676 floats in every buffer the kernel reads, yet as two loops the vectorised inner loop has 26
iterations (one vector, a tail and a horizontal sum per row). As one loop of 676 it runs whole vectors.

`merge_loops` runs where the scheduler finishes a kernel's AST (rangeify.simplify_kernel), so the heuristic, BEAM and
opts given by hand all see the merged loops. Two loops merge when, in the preferred nesting
(linearize.range_key), the inner one comes right after the outer one, both are output loops or both are reduce loops
of the same reduces, their sizes are constants, and, once the outer is `r // B` and the inner `r % B` (B the inner
size), the simplified kernel has no division or modulo of `r` left: every index, mask and value reads the pair as
`outer * B + inner`, so nothing costs more and the iteration order (and a reduce's order of terms) is unchanged. The
merged loop keeps the outer one's axis id.

`split_loops` is the converse, run first: an output loop r that the kernel reads as `r // c` and `r % c` (a reshape of
an output that the inputs lay out otherwise: a fused qkv projection's bias gradient sums a (3, B, heads, T, head)
gradient into 384 = 3 x 4 x 32 biases) becomes two loops, r // c outside and r % c inside (a new axis id right after
r's), where that leaves no division or modulo of the inner one and fewer in all. Their strides are then constants,
which the heuristic needs to find the contiguous axis (that bias gradient: no opts, 0.25-0.44 ms -> a vector tile,
0.03 ms). A reduce loop stays whole (see split_loops).
"""

from __future__ import annotations

import itertools

from fusegrad.codegen.linearize import range_key
from fusegrad.codegen.opt import stride
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat, graph_rewrite
from fusegrad.uop.symbolic import split_uop, sym

__all__ = ["merge_loops", "split_loops"]

_MERGED = (AxisType.LOOP, AxisType.REDUCE)


def merge_loops(sink: UOp) -> UOp:
    """The kernel with every adjacent pair of loops that its indices walk as one merged into one loop."""
    while True:
        nodes = sink.toposort()
        ranges = sorted((u for u in nodes if u.op is Ops.RANGE), key=range_key)
        reduces = [u for u in nodes if u.op is Ops.REDUCE]
        indices = [u.src[1] for u in nodes if u.op is Ops.INDEX and len(u.src) > 1]
        for outer, inner in itertools.pairwise(ranges):
            if _pairable(outer, inner, reduces, indices) and (merged := _merged(sink, outer, inner)) is not None:
                sink = merged
                break
        else:
            return sink


def split_loops(sink: UOp) -> UOp:
    """The kernel with every loop read through divisions and moduli by constants split where that removes them."""
    while (split := _first_split(sink)) is not None:
        sink = split
    return sink


def _first_split(sink: UOp) -> UOp | None:
    """`sink` with its first splittable output loop split (in nesting order, smallest divisor first), or None."""
    nodes = sink.toposort()
    if not (div_mods := _div_mods(nodes)):  # most kernels: nothing to split
        return None
    for rng in sorted((u for u in nodes if u.op is Ops.RANGE), key=range_key):
        # output loops only: a reduce loop split in two changes its register tile (an attention output read as
        # (B, T, 4 x 32) by the next projection: 0.23 -> 0.35 ms with its reduce as 4 x 32)
        if rng.arg[1] is not AxisType.LOOP or rng.src[0].op is not Ops.CONST:
            continue
        for c in _divisors(div_mods, rng):
            if (split := _split(sink, nodes, len(div_mods), rng, c)) is not None:
                return split
    return None


def _divisors(div_mods: list[UOp], rng: UOp) -> list[int]:
    """The constants that divide loop `rng`'s size and that the kernel divides it by or takes it modulo (`div_mods`:
    its IDIV and MOD nodes), smallest first."""
    size = int(rng.src[0].arg)
    consts = {int(u.src[1].arg) for u in div_mods if u.src[0] is rng and u.src[1].op is Ops.CONST}
    return sorted(c for c in consts if 1 < c < size and size % c == 0)


def _div_mods(nodes: dict[UOp, None]) -> list[UOp]:
    return [u for u in nodes if u.op in (Ops.IDIV, Ops.MOD)]


def _split(sink: UOp, nodes: dict[UOp, None], div_mods: int, rng: UOp, c: int) -> UOp | None:
    """`sink` (its nodes `nodes`, `div_mods` of them divisions or moduli) with loop `rng` as (rng // c, rng % c), or
    None where that leaves a division or modulo of the inner loop, or no fewer of them in all."""
    axis, kind = rng.arg
    ranges = [u for u in nodes if u.op is Ops.RANGE]
    new: dict[UOp, UOp] = {}
    if any(r.arg[0] == axis + 1 for r in ranges):  # the inner loop takes the id after rng's: later ids move up one
        new = {r: r.replace(arg=(r.arg[0] + 1, r.arg[1])) for r in ranges if r is not rng and r.arg[0] > axis}
    outer = UOp.range(int(rng.src[0].arg) // c, axis, kind)
    inner = UOp.range(c, axis + 1, kind)
    new[rng] = outer * c + inner
    for node in sink.toposort(gate=lambda u: u not in new):  # an output loop is in no REDUCE's loop list
        srcs = tuple(new.get(s, s) for s in node.src)
        new[node] = node if srcs == node.src else node.replace(src=srcs)
    ret = graph_rewrite(new[sink], sym, name="split loops")
    after = _div_mods(ret.toposort())
    if len(after) >= div_mods or any(inner in u.toposort() for u in after):
        return None
    return ret


def _pairable(outer: UOp, inner: UOp, reduces: list[UOp], indices: list[UOp]) -> bool:
    """May the two merge? Cheap checks first: `_merged` makes the merged kernel, and most pairs fail these."""
    kind = outer.arg[1]
    if kind not in _MERGED or inner.arg[1] is not kind:
        return False
    if outer.src[0].op is not Ops.CONST or inner.src[0].op is not Ops.CONST:
        return False
    # reduce loops: the same reduces run both (a reduce over only one of them would lose its loop)
    if not all((outer in r.src[1:]) == (inner in r.src[1:]) for r in reduces):
        return False
    # every affine index steps the outer loop as far as a whole run of the inner one (a matmul's rows and columns
    # don't: one operand steps only with the rows); indices of other forms are left to `_merged`'s check
    size = int(inner.src[0].arg)
    for idx in indices:
        if (a := stride(idx, outer)) is not None and (b := stride(idx, inner)) is not None and a != b * size:
            return False
    return True


def _merged(sink: UOp, outer: UOp, inner: UOp) -> UOp | None:
    size = int(inner.src[0].arg)
    merged = UOp.range(int(outer.src[0].arg) * size, outer.arg[0], outer.arg[1])
    div, mod = merged // size, merged % size
    new: dict[UOp, UOp] = {outer: div, inner: mod}
    for node in sink.toposort(gate=lambda u: u not in new):
        if node.op is Ops.REDUCE:  # its loop list: the merged loop where the outer was, the inner gone
            loops = tuple(merged if s is outer else s for s in node.src[1:] if s is not inner)
            new[node] = node.replace(src=(new.get(node.src[0], node.src[0]), *loops))
            continue
        srcs = tuple(new.get(s, s) for s in node.src)
        new[node] = node if srcs == node.src else node.replace(src=srcs)
    ret = graph_rewrite(new[sink], sym + pm_fold_div_mod, name="merge loops")
    if any(u.op in (Ops.IDIV, Ops.MOD) and merged in u.toposort() for u in ret.toposort()):
        return None
    return ret


def _fold_div_mod(x: UOp) -> UOp | None:
    """A sum holding (v // c) * (c * k) and (v % c) * k, anywhere in its chain: the two as v * k."""
    terms = list(split_uop(x, Ops.ADD))
    if len(terms) < 3:  # a pair alone is sym's own rule
        return None
    for i, t in enumerate(terms):
        if (split := _div_term(t)) is None:
            continue
        v, c, k = split
        for j, u in enumerate(terms):
            if j != i and _mod_term(u) == (v, c, k):
                rest = [w for n, w in enumerate(terms) if n not in (i, j)]
                total = v if k == 1 else v * k
                for w in rest:
                    total = total + w
                return total
    return None


def _div_term(t: UOp) -> tuple[UOp, int, int] | None:
    """(v, c, k) of a term (v // c) * (c * k), or of v // c times c (k = 1)."""
    if t.op is not Ops.MUL or t.src[1].op is not Ops.CONST or t.src[0].op is not Ops.IDIV:
        return None
    v, c = t.src[0].src
    if c.op is not Ops.CONST or c.arg <= 0 or t.src[1].arg % c.arg:
        return None
    return v, int(c.arg), int(t.src[1].arg) // int(c.arg)


def _mod_term(u: UOp) -> tuple[UOp, int, int] | None:
    """(v, c, k) of a term (v % c) * k, or of v % c (k = 1)."""
    k = 1
    if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
        u, k = u.src[0], int(u.src[1].arg)
    if u.op is not Ops.MOD or u.src[1].op is not Ops.CONST:
        return None
    return u.src[0], int(u.src[1].arg), k


pm_fold_div_mod = PatternMatcher([
    (UPat(Ops.ADD, name="x"), _fold_div_mod),
])  # fmt: skip
