"""UNROLL (#12): a reduce loop split into an outer loop and an inner loop of a few steps that the C renderer unrolls.

Applied by codegen/opt.py's `apply_opts` (OptOps.UNROLL), entry point `unroll_reduce`. The reduce still visits its
steps in their order (step = outer * amount + inner, the inner loop innermost among the reduce loops), so every
accumulator sums the same terms in the same order: results are bit for bit the unsplit kernel's. What changes is the
C: the inner loop gets `#pragma GCC unroll` (renderer/cstyle.py), so one iteration of the outer loop runs several
steps of a register tile's loads and fused multiply-adds with one loop test and one pointer update between them
(matmul 1024, 4 x 4 vectors: ~5% single-thread).
"""

from __future__ import annotations

from fusegrad.uop import REDUCE_AXES, AxisType, Ops
from fusegrad.uop.ops import UOp


def unroll_reduce(sink: UOp, axis: int, amount: int, new_axis: int) -> UOp:
    """REDUCE(x[r], ..., r) -> REDUCE(x[r = outer * amount + inner], ..., outer, inner), `inner` a new UNROLL range
    with axis id `new_axis` (the largest in the kernel, so it nests right inside `outer`). Raises ValueError unless
    `axis` is a REDUCE loop of constant size, a multiple of `amount`, innermost among the kernel's reduce loops and
    closed by one reduce."""
    ranges = [u for u in sink.toposort() if u.op is Ops.RANGE]
    found = [r for r in ranges if r.arg[0] == axis]
    if len(found) != 1:
        raise ValueError(f"opt: UNROLL: no single loop with axis id {axis}: got {len(found)}, expected 1")
    rng = found[0]
    _check_unrollable(rng, amount, ranges)
    reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE and rng in u.src[1:]]
    if len(reduces) != 1:
        raise ValueError(f"opt: UNROLL of axis {axis}: got {len(reduces)} reduces over it, expected 1")
    red = reduces[0]
    size = int(rng.src[0].arg)
    inner = UOp.range(amount, new_axis, AxisType.UNROLL)
    outer = UOp.range(size // amount, axis, AxisType.REDUCE)
    step, split = (inner, (inner,)) if size == amount else (outer * amount + inner, (outer, inner))
    loops = [new for r in red.src[1:] for new in (split if r is rng else (r,))]
    ret = sink.substitute({red: red.src[0].substitute({rng: step}).reduce(*loops, arg=red.arg)})
    if rng in ret.toposort():  # the loop's index was also used outside its reduce (a kept row value): not split
        raise ValueError(f"opt: UNROLL of axis {axis}: its loop index is used outside its reduce, expected only inside")
    return ret


def _check_unrollable(rng: UOp, amount: int, ranges: list[UOp]) -> None:
    """Raises ValueError unless `rng` may be unrolled by `amount` (see `unroll_reduce`)."""
    axis = rng.arg[0]
    if rng.arg[1] is not AxisType.REDUCE:
        raise ValueError(f"opt: UNROLL needs a REDUCE axis: got axis {axis} of {rng.arg[1].name}")
    if rng.src[0].op is not Ops.CONST:
        raise ValueError(f"opt: UNROLL needs a constant axis size: got {rng.src[0].render()}")
    size = int(rng.src[0].arg)
    if amount < 2 or size % amount:
        raise ValueError(f"opt: UNROLL by {amount} of axis {axis}: got size {size}, expected a multiple")
    # a reduce loop nested inside this one would end up outside the new inner loop: the terms' order would change
    inside = [r for r in ranges if r.arg[1] in REDUCE_AXES and r.arg[0] > axis]
    if inside:
        raise ValueError(f"opt: UNROLL of axis {axis}: got reduce loops inside it ({[r.arg[0] for r in inside]}), "
                         "expected the innermost reduce loop")  # fmt: skip
