"""Window gradients as direct reduces: the gradient of a sliding-window view summed over the k window positions.

`Tensor._pool` (mixin/nn.py) builds windows by laying copies of a padded axis end to end and reshaping; its gradient
sums over those copies through a pad/reshape chain, so a kernel reads the window's source at div/mod indices of the
copy and the position, and loops over every copy (a conv's input gradient took seconds). For such a reduce,
`find_unwindow` evaluates the chain on its small (copies, span) grid and checks that position p of copy c reads
source element [c, (p - offset - c*dilation) / stride] exactly; `unwindow_index` then reads the source directly,
looping over k window positions with affine indices. rangeify.KernelBuilder calls both for every REDUCE_AXIS.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from fusegrad.helpers import prod
from fusegrad.schedule.indexing import Index, idx_const, strides_for
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp

_MAX_GRID = 1 << 16  # (copies, span) grids evaluated element by element: larger reduces are left as they are


@dataclass(frozen=True, slots=True)
class Unwindow:
    """REDUCE_AXIS over `axis` of a view of `source`: out[.., 0, p, ..] = sum over j < k of
    source[.., j, (p - offset - j*dilation) / stride, ..] where that index is a whole number in 0..m-1."""

    source: UOp
    axis: int
    k: int
    m: int
    offset: int
    dilation: int
    stride: int


def unwindow_index(w: Unwindow, idx: Index, window: UOp) -> tuple[Index, UOp]:
    """The source index of `w` read at reduce output `idx` for window position `window`, and where it is valid."""
    q = idx[w.axis + 1] - (w.offset + window * w.dilation if w.dilation else w.offset)
    valid = (idx_const(-1) < q) & (q < w.m * w.stride)
    if w.stride > 1:  # only every stride-th position starts a window
        valid = valid & (q % w.stride).eq(0)
        q = q // w.stride
    return (*idx[: w.axis], window, q, *idx[w.axis + 2 :]), valid


# reduce -> its window structure (False: none); weak, so a graph's cache entry goes with the graph
_found: weakref.WeakKeyDictionary[UOp, Unwindow | bool] = weakref.WeakKeyDictionary()


def find_unwindow(reduce: UOp) -> Unwindow | None:
    """The window structure of a sum over one axis of a view, or None if its view chain is not a window gradient."""
    if (known := _found.get(reduce)) is None:
        known = _found[reduce] = _search(reduce) or False
    return known if isinstance(known, Unwindow) else None


def _search(reduce: UOp) -> Unwindow | None:
    if reduce.op is not Ops.REDUCE_AXIS or reduce.arg[0] is not Ops.ADD or len(reduce.arg[1]) != 1:
        return None
    axis, node = reduce.arg[1][0], reduce.src[0]
    if axis + 1 >= len(node.shape) or not all(isinstance(s, int) for s in node.shape):
        return None
    copies, span = node.shape[axis], node.shape[axis + 1]
    if copies * span > _MAX_GRID:
        return None
    pre, post = node.shape[:axis], node.shape[axis + 2 :]
    chain: list[UOp] = []
    best = None  # the deepest fit: below a strided window's zero-stuffing, so no loop step reads a stuffed zero
    while node.op in (Ops.RESHAPE, Ops.PAD, Ops.SHRINK) and _keeps_outer_axes(node, pre, post):
        chain.append(node)
        node = node.src[0]
        middle = node.shape[len(pre) : len(node.shape) - len(post)]
        if len(middle) == 2 and (found := _fit(chain, len(pre), len(post), copies, span)) is not None:
            best = Unwindow(node, axis, *found)
    return best


def window_crops(sink: UOp, realized: dict[UOp, str]) -> dict[UOp, UOp]:
    """Realized window gradients read only through one crop (the gradient of a padded conv input is its window
    gradient, reshaped and shrunk): realize the crop instead, so the kernel computes only the elements read."""
    candidates = [u for u in realized if u.op is Ops.REDUCE_AXIS and find_unwindow(u) is not None]
    if not candidates:
        return {}
    parents: dict[UOp, list[UOp]] = {}
    for u in sink.toposort():
        for s in u.src:
            parents.setdefault(s, []).append(u)
    crops = {}
    for reduce in candidates:
        node = reduce
        while len(up := parents.get(node, [])) == 1 and up[0].op in (Ops.RESHAPE, Ops.SHRINK) and up[0] not in realized:
            node = up[0]
        if node is not reduce and prod(node.shape) < prod(reduce.shape):
            crops[reduce] = node
    return crops


def merge_sums(valid: UOp, value: UOp, ranges: tuple[UOp, ...]) -> UOp:
    """Sum over `ranges` of `value` where `valid` holds, as one REDUCE: a sum of a masked sum (a window gradient of a
    matmul-like product) becomes a single reduce over both loops, which the optimiser tiles like any other. No
    ranges (a window of one position): just the masked value."""
    if not ranges:
        return _masked(valid, value)
    inner = value.src[1] if value.op is Ops.WHERE and value.src[2].op is Ops.CONST and value.src[2].arg == 0 else value
    if inner.op is Ops.REDUCE and inner.arg is Ops.ADD and inner.dtype == value.dtype:
        mask = valid if inner is value else valid & value.src[0]
        return UOp(Ops.REDUCE, value.dtype, (_masked(mask, inner.src[0]), *ranges, *inner.src[1:]), Ops.ADD)
    return UOp(Ops.REDUCE, value.dtype, (_masked(valid, value), *ranges), Ops.ADD)


def _masked(mask: UOp, value: UOp) -> UOp:
    """`value` where `mask` holds, else 0. In a product only the factor reading outside its memory (a gated load) is
    masked, as a padded conv input is: the loop then tiles without a select per multiply-add."""
    if value.op is Ops.MUL:
        gated = [any(u.op is Ops.INDEX and len(u.src) == 3 for u in x.toposort()) for x in value.src]
        if gated.count(True) == 1:
            x, y = value.src if gated[0] else value.src[::-1]
            return mask.where(x, x.const_like(0)) * y
    return mask.where(value, value.const_like(0))


def _keeps_outer_axes(node: UOp, pre: tuple[int, ...], post: tuple[int, ...]) -> bool:
    """Whether movement op `node` leaves the axes before and after the window's pair alone."""
    outer = len(pre) + len(post)
    for shape in (node.shape, node.src[0].shape):
        if len(shape) <= outer or shape[: len(pre)] != pre or shape[len(shape) - len(post) :] != post:
            return False
    if node.op is Ops.RESHAPE:
        return True
    inner = node.arg[: len(pre)] + node.arg[len(node.arg) - len(post) :]
    trivial = (0, 0) if node.op is Ops.PAD else None
    if node.op is Ops.SHRINK:
        return all(arg == (0, s) for arg, s in zip(inner, pre + post, strict=True))
    return all(arg == trivial for arg in inner)


def _read_row(chain: list[UOp], lead: int, trail: int, c: int, span: int) -> list[int]:
    """For each position of copy `c` of the chain's top, the flat (j, t) element of its bottom read, or -1 (a pad)."""
    bottom = chain[-1].src[0].shape
    bottom_strides = strides_for(bottom[lead : len(bottom) - trail])
    row = []
    for p in range(span):
        pos: tuple[int, ...] | None = (c, p)
        for node in chain:
            assert pos is not None, "_read_row: walked past a pad"
            pos = _source_position(node, lead, trail, pos)
            if pos is None:
                break
        row.append(-1 if pos is None else sum(i * s for i, s in zip(pos, bottom_strides, strict=True)))
    return row


def _source_position(node: UOp, lead: int, trail: int, pos: tuple[int, ...]) -> tuple[int, ...] | None:
    """Where movement op `node` read at middle position `pos` reads its source (None: in the padding)."""
    out_mid = node.shape[lead : len(node.shape) - trail]
    in_mid = node.src[0].shape[lead : len(node.src[0].shape) - trail]
    if node.op is Ops.RESHAPE:
        flat = sum(i * s for i, s in zip(pos, strides_for(out_mid), strict=True))
        return tuple(flat // s % n for s, n in zip(strides_for(in_mid), in_mid, strict=True))
    args = node.arg[lead : len(node.arg) - trail]
    if node.op is Ops.SHRINK:
        return tuple(i + start for i, (start, _) in zip(pos, args, strict=True))
    moved = tuple(i - before for i, (before, _) in zip(pos, args, strict=True))
    return moved if all(0 <= i < n for i, n in zip(moved, in_mid, strict=True)) else None


def _fit(chain: list[UOp], lead: int, trail: int, copies: int, span: int) -> tuple[int, int, int, int, int] | None:
    """(k, m, offset, dilation, stride) if copy c of the chain's top reads bottom element [c, t] exactly at positions
    p = offset + c*dilation + t*stride (and reads nothing elsewhere), else None. The parameters come from copies 0
    and 1; every copy is then checked, stopping at the first difference (most chains differ in copy 0)."""
    bottom = chain[-1].src[0].shape
    k, m = bottom[lead], bottom[lead + 1]
    if not isinstance(k, int) or not isinstance(m, int) or k > copies or k * m == 0:
        return None
    if not any(node.op is Ops.PAD for node in chain):  # copies laid end to end are always padded first
        return None
    row0 = [(p, v) for p, v in enumerate(_read_row(chain, lead, trail, 0, span)) if v >= 0]
    if not row0 or any(v >= m for _, v in row0):  # copy 0 reads only source row 0
        return None
    (p0, t0), stride = row0[0], 1
    if (later := next(((p, t) for p, t in row0 if t != t0), None)) is not None:
        stride = (later[0] - p0) // (later[1] - t0)
    offset, dilation = p0 - t0 * stride, 0
    if k > 1:
        row1 = [(p, v - m) for p, v in enumerate(_read_row(chain, lead, trail, 1, span)) if v >= 0]
        dilation = row1[0][0] - offset - row1[0][1] * stride if row1 else 0
    if stride < 1:
        return None
    for c in range(copies):
        expected = []
        for p in range(span):
            q = p - offset - c * dilation
            hit = c < k and 0 <= q < m * stride and q % stride == 0
            expected.append(c * m + q // stride if hit else -1)
        if _read_row(chain, lead, trail, c, span) != expected:
            return None
    return k, m, offset, dilation, stride
