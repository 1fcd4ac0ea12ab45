"""Long contractions in two kernels: a sum over several axes of a product of two broadcast operands (a conv's weight
gradient: over batch and both spatial axes) first sums each slice of its outermost reduced axis into a partial
buffer, then sums the partials.

One kernel over the whole reduce gets no register tile: its operand panel would not fit in L2 (codegen/opt.py
PACK_MAX_BYTES), so each output element ran a scalar dot product (a 64-channel 3x3 conv's weight gradient on
8x56x56: 1.5 s). Each partial's reduce is short enough to tile. `pm_split_reduces` runs in kernelize's prepare pass;
SPLIT_REDUCEOP=0 turns it off.
"""

from __future__ import annotations

from fusegrad.helpers import SPLIT_REDUCEOP, prod
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import UOp
from fusegrad.uop.upat import PatternMatcher, UPat

SPLIT_MIN_REDUCE = 8192  # reduce sizes from which a tile's packed panel (16 floats a step) outgrows L2
SPLIT_MAX_PARTIAL = 1 << 22  # elements of the partial buffer, at most (16 MiB of float32)
SPLIT_MIN_OUTPUT = 256  # smaller outputs have no tile to gain; a full reduce is split by GROUP in codegen


def _is_broadcast(x: UOp) -> bool:
    """A view that repeats its source along some axis (an operand of an outer product)."""
    while x.op is Ops.CAST:
        x = x.src[0]
    while x.op in GroupOp.Movement:
        if x.op is Ops.EXPAND:
            return True
        x = x.src[0]
    return False


def split_contraction(r: UOp) -> UOp | None:
    """sum over axes (a, *rest) of x*y -> sum over a of CONTIGUOUS(sum over rest of x*y), for long contractions."""
    op, axes = r.arg
    src = r.src[0]
    if not SPLIT_REDUCEOP or op is not Ops.ADD or len(axes) < 2 or not all(isinstance(s, int) for s in src.shape):
        return None
    if src.op is not Ops.MUL or not all(_is_broadcast(x) for x in src.src):
        return None
    outer, rest = axes[0], axes[1:]
    output = prod(r.shape)
    if prod(src.shape[a] for a in rest) * src.shape[outer] < SPLIT_MIN_REDUCE or output < SPLIT_MIN_OUTPUT:
        return None
    if src.shape[outer] < 2 or output * src.shape[outer] > SPLIT_MAX_PARTIAL:
        return None
    return src.r(Ops.ADD, rest).contiguous().r(Ops.ADD, (outer,))


# runs with kernelize's prepare rules; a partial sum is split again only while it is still long
pm_split_reduces = PatternMatcher(
    [
        (UPat(Ops.REDUCE_AXIS, name="r"), split_contraction),  # sum_(a,rest)(x*y) -> sum_a(CONTIGUOUS(sum_rest(x*y)))
    ]
)
