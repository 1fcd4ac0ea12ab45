"""Row buffers (#12): the KEEP opt (codegen/opt.py) of a fused row op's kernel.

A costly value that a reduce computes for each element of a row and that the kernel computes again in a later loop
over the same row (softmax's exp(x - max): in its sum, then in the output) is stored into a buffer private to the row
by the reduce's loop and loaded by the later loops: one exp per element instead of one per pass. The loaded values
are the stored ones, so results are bit for bit those of the kernel without it. Entry points: `kept_value` (is there
such a value?) and `keep_row_value` (the rewrite).
"""

from __future__ import annotations

from fusegrad.codegen.linearize import open_loops
from fusegrad.dtype import AddrSpace
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp

ROW_BUFFER_BYTES = 32 << 10  # the buffer lives on the thread's stack beside the row it caches (in L1 with it)
# operations worth a store and a load to compute once (transcendentals and divisions)
_COSTLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV, Ops.POW})


def _row_loop(rng: UOp) -> bool:
    """A plain loop of constant size (not an upcast's or a split's lane)."""
    return rng.op is Ops.RANGE and rng.arg[1] in (AxisType.LOOP, AxisType.REDUCE) and rng.src[0].op is Ops.CONST


def _is_costly_in(value: UOp, rng: UOp) -> bool:
    """Does computing `value` run a costly operation per step of `rng`?"""
    return _costly_count(value, rng) > 0


def _costly_count(value: UOp, rng: UOp) -> int:
    """How many costly operations computing `value` runs per step of `rng`."""
    return sum(u.op in _COSTLY and rng in u.toposort() for u in value.toposort())


def kept_value(sink: UOp, red: UOp) -> tuple[UOp, list[UOp]] | None:
    """(value, loops): the costly value the reduce `red` computes per step of its one loop that saves the most costly
    operations when kept, because the kernel computes it again, with that loop's index replaced, in `loops` (of the
    same size); None when there is none. Of values that save as many, the largest: a masked softmax's backward reads
    where(mask, exp(y), 0) in one loop and exp(y) alone in another, so exp(y) is kept for both.

    The value may only depend on that loop and on output loops around it (the buffer is one row), and `red` must not
    depend on any of its other uses: they read the buffer after the reduce's loop has filled it."""
    if len(red.src) != 2 or not _row_loop(rng := red.src[1]) or rng.arg[1] is not AxisType.REDUCE:
        return None
    if not _is_costly_in(red.src[0], rng):
        return None
    size = int(rng.src[0].arg)
    nodes = sink.toposort()
    # a loop around the reduce (a cumsum's output loop, whose mask the reduce reads) is no later loop: it would read the
    # row before the reduce's loop has filled it, and the linear program could not order the two
    around = open_loops(red)
    same_size = [r for r in nodes if r is not rng and r not in around and _row_loop(r) and r.src[0].arg == size]
    before = red.toposort()
    best: tuple[UOp, list[UOp]] | None = None
    best_saved = 0
    stack, seen = [red.src[0]], {red.src[0]}
    while stack:  # widest first: the value itself, then its sources
        value = stack.pop(0)
        ranges = open_loops(value)
        if rng in ranges and value.dtype.count == 1 and size * value.dtype.itemsize <= ROW_BUFFER_BYTES:
            outer = ranges - {rng}
            if all(r.arg[1] is AxisType.LOOP for r in outer) and (costly := _costly_count(value, rng)):
                copies = {r: copy for r in same_size if (copy := value.substitute({rng: r})) in nodes}
                if copies and not any(copy in before for copy in copies.values()) and costly * len(copies) > best_saved:
                    best, best_saved = (value, list(copies)), costly * len(copies)
        for s in value.src:
            if s not in seen and rng in s.toposort():
                seen.add(s)
                stack.append(s)
    return best


def keep_row_value(sink: UOp, axis: int, new_reg: int) -> UOp:
    """The kernel with the value `kept_value` finds for the reduce over loop `axis` stored per row by that loop and
    loaded where the kernel computed it again. Raises ValueError when there is no such value."""
    reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE and any(r.arg[0] == axis for r in u.src[1:])]
    found = kept_value(sink, reduces[0]) if len(reduces) == 1 else None
    if found is None:
        raise ValueError(f"opt: KEEP of axis {axis}: got no costly value of its reduce computed again over its row")
    value, again = found
    rng = reduces[0].src[1]
    size = int(rng.src[0].arg)
    row = UOp(Ops.DEFINE_REG, value.dtype.ptr(size, AddrSpace.REG), arg=new_reg)
    outer = sorted(open_loops(value) - {rng}, key=lambda r: r.arg)
    filled = row.index(rng).store(value)  # in the reduce's own loop: the value is computed there anyway
    kept = UOp(Ops.AFTER, row.dtype, (row, filled, *outer))
    return sink.substitute({value.substitute({rng: r}): kept.index(r).load() for r in again})
