"""Triangular loops (#12): a reduce's loop clipped to the steps whose terms can change its result.

Runs on an optimised kernel (after codegen/opt.py's opts and "simplify gates", before vectorize); entry point
`clip_reduce_loops`.
- Identity tails: a REDUCE whose term is the reduce's identity wherever a comparison of loop indices says so (a causal
  softmax's where(j <= i, x, -inf) under its max, the exp of it under its sum) ends its loop where every later step's
  term, on every lane of the upcasts, is the identity: j < i+1 instead of j < T. The where stays, so the steps kept see
  their own mask and the result is bit for bit the unclipped one (x max -inf = x; x + 0 = x, since an accumulator that
  starts at +0 is never -0).
- Dead reduces: a REDUCE whose value is only read under where(c, ..., ...)'s other branch (a causal score kernel storing
  where(j <= i, s, -inf)) runs its loop 0 times where c holds on every lane of the tile: its value is never read there.
- Peeled tiles: a register tile's masked sum runs the steps unmasked on every lane without the select (acc + a*b stays
  one FMA), then the masked ones: one reassociation of the sum.
The bound comes from comparisons of affine index expressions (`_affine`): any such mask, strict or not, either way
round.
"""

from __future__ import annotations

import itertools

from fusegrad.codegen.linearize import reduce_identity
from fusegrad.dtype import AddrSpace, dtypes
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym

# an affine index expression: coefficient per RANGE or per range-free atom (a variable), None -> the constant term
Affine = dict[UOp | None, int]
# a region of the index space in disjunctive normal form: OR of ANDs of half-spaces `expr < 0`
Region = list[list[Affine]]
_LANES = (AxisType.UPCAST, AxisType.UNROLL)
_WIDE_INTS = (dtypes.int32, dtypes.int64, dtypes.index)  # signed, no index math near their limits: no wrapping
_MAX_CONJUNCTIONS = 16  # a region built from many masks is not worth a bound
# a loop with no lanes of its own ends on whole vectors (omp simd's simdlen and max lanes; renderer/cstyle, linearize)
_GRANULES = (16, 8)


def clip_reduce_loops(sink: UOp) -> UOp:
    """The kernel with each REDUCE loop ended where its remaining terms are its identity or its value is unread."""
    done: set[tuple[object, ...]] = set()
    while True:  # a clip replaces the reduces around and inside the clipped one: find them again
        guards = _reduce_guards(sink)
        todo = [u for u in sink.toposort() if u.op is Ops.REDUCE and tuple(r.arg for r in u.src[1:]) not in done]
        if not todo:
            return sink
        done.add(tuple(r.arg for r in todo[0].src[1:]))
        sink = _clip_reduce(sink, todo[0], guards.get(todo[0], frozenset()))


def _clip_reduce(sink: UOp, red: UOp, guard: frozenset[tuple[UOp, bool]]) -> UOp:
    """`sink` with `red`'s outermost plain reduce loop given its clipped end (unchanged when nothing is proven)."""
    rng = next((r for r in red.src[1:] if r.arg[1] is AxisType.REDUCE and r.src[0].op is Ops.CONST), None)
    if rng is None or not _only_reduce_uses(sink, red, rng):
        return sink
    if any(u.op is Ops.BARRIER for u in red.src[0].toposort()):
        return sink  # a GPU thread whose loop ends early would skip barriers the rest of its work-group waits at
    size = int(rng.src[0].arg)
    stores = _row_stores(sink, rng)
    end = _tail_end(red, rng, size)
    if stores and (end is None or any(s.src[1] is not red.src[0] for s in stores)):
        return sink  # a row buffer of values past the end is only known when it holds the terms themselves
    if not stores and (dead := _dead_condition(guard, _open_ranges(red))) is not None:
        end = dead.where(UOp.const(dtypes.index, 0), UOp.const(dtypes.index, size) if end is None else end)
    if end is None:
        return sink
    end = graph_rewrite(end, sym, name="clipped loop end")
    if not stores and (peeled := _peel_live_prefix(sink, red, rng, end)) is not None:
        return sink.substitute({red: peeled})
    identity = UOp.const(red.dtype, reduce_identity(red.arg, red.src[0]))
    sink = sink.substitute(
        {load: (load.src[0].src[1] < end).where(load, identity) for load in _row_loads(sink, stores)}
    )
    return sink.substitute({rng: UOp.range(end, *rng.arg)})


def _peel_live_prefix(sink: UOp, red: UOp, rng: UOp, end: UOp) -> UOp | None:
    """A register tile's reduce (its term has lanes) of where(c, x, identity) over one loop, clipped at `end`, as the
    reduce of x alone over the steps where c holds on every lane, then of the masked term over the rest (to `end`):
    a select per vector op in the tile's inner loop costs as much as the op and keeps acc + a*b from fusing (a causal
    PV product). The sum is reassociated once (two accumulators added), as a GROUP split does; a max stays exact."""
    term = red.src[0]
    if red.arg not in (Ops.ADD, Ops.MAX) or red.src[1:] != (rng,) or term.op is not Ops.WHERE:
        return None
    if not any(u.op is Ops.RANGE and u.arg[1] in _LANES for u in term.toposort()):
        return None
    identity = reduce_identity(red.arg, term)
    cond, yes, no = term.src
    if no.op is Ops.CONST and no.arg == identity:
        live, region = yes, _truth_region(cond, True)
    elif yes.op is Ops.CONST and yes.arg == identity:
        live, region = no, _truth_region(cond, False)
    else:
        return None
    if len(region) != 1 or (split := _prefix_end(region[0], rng, _inner_ranges(red, rng), int(rng.src[0].arg))) is None:
        return None
    split = graph_rewrite((split < end).where(split, end), sym, name="peeled loop end")
    axis = max(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE) + 1
    clean, rest = UOp.range(split, axis, AxisType.REDUCE), UOp.range(end - split, axis + 1, AxisType.REDUCE)
    first = live.substitute({rng: clean}).reduce(clean, arg=red.arg)
    return first.alu(red.arg, term.substitute({rng: rest + split}).reduce(rest, arg=red.arg))


def _prefix_end(conj: list[Affine], rng: UOp, inner: set[UOp], size: int) -> UOp | None:
    """The first step of `rng` from which some half-space of `conj` may fail on some inner lane (every one holds on
    every lane before it); None when no step is proven."""
    split: UOp | None = None
    for half in conj:
        coef = half.get(rng, 0)
        rest = {k: v for k, v in half.items() if k is not rng}
        top = _extreme(rest, inner, upper=True)
        if coef < 0:
            return None
        if coef == 0:  # on every step or on none
            step = (top < 0).where(UOp.const(dtypes.index, size), UOp.const(dtypes.index, 0))
        else:  # coef * r + max rest < 0 <=> r <= (-max rest - 1) // coef: the first failing step, numerator >= 0
            step = (-top + (coef - 1)).maximum(0) // coef
        split = step if split is None else (step < split).where(step, split)
    return split


# *** where the terms are the identity ***


def _tail_end(red: UOp, rng: UOp, size: int) -> UOp | None:
    """The loop's end past which every term of `red` is its identity on every lane: min(size, suffix start) rounded up
    to whole vectors when the loop has no lanes of its own; None when no suffix is proven."""
    if red.dtype.count != 1:
        return None
    identity = reduce_identity(red.arg, red.src[0])
    region = _constant_region(red.src[0], identity)
    inner = _inner_ranges(red, rng)
    starts = [s for conj in region if (s := _suffix_start(conj, rng, inner, size)) is not None]
    if not starts:
        return None
    start = starts[0]
    for other in starts[1:]:
        start = (other < start).where(other, start)  # the union's suffix: the earliest start
    has_lanes = any(u.op is Ops.RANGE and u.arg[1] in _LANES for u in red.src[0].toposort())
    granule = 1 if has_lanes else next((g for g in _GRANULES if size % g == 0), 1)
    chunks = (start.maximum(0) + (granule - 1)) // granule
    whole = size // granule
    return (chunks < whole).where(chunks, UOp.const(dtypes.index, whole)) * granule


def _suffix_start(conj: list[Affine], rng: UOp, inner: set[UOp], size: int) -> UOp | None:
    """The first step of `rng` from which every half-space of `conj` holds on every inner lane (it may be < 0 or
    past the loop); None when some half-space only holds before a step (a prefix)."""
    start: UOp | None = None
    for half in conj:
        coef = half.get(rng, 0)
        if coef > 0:
            return None
        rest = {k: v for k, v in half.items() if k is not rng}
        if coef == 0:  # holds on every step or on none: all or nothing, per outer loop
            step = (_extreme(rest, inner, upper=True) < 0).where(
                UOp.const(dtypes.index, 0), UOp.const(dtypes.index, size)
            )
        else:  # coef * r + rest < 0 on all lanes <=> r >= (max rest + |coef|) // |coef| (the numerator clamped: floor)
            step = (_extreme(rest, inner, upper=True) - coef).maximum(0) // -coef
        start = step if start is None else (start < step).where(step, start)
    return start


def _constant_region(x: UOp, value: float) -> Region:
    """Where `x` equals the constant `value` (as a DNF of half-spaces; [] = nowhere proven, [[]] = everywhere)."""
    match x.op:
        case Ops.CONST:
            return [[]] if x.arg == value else []
        case Ops.CAST if dtypes.is_float(x.dtype) and dtypes.is_float(x.src[0].dtype):
            return _constant_region(x.src[0], value)  # 0, 1 and -inf cast to themselves
        case Ops.WHERE:
            cond, yes, no = x.src
            taken = _and(_truth_region(cond, True), _constant_region(yes, value))
            return (taken + _and(_truth_region(cond, False), _constant_region(no, value)))[:_MAX_CONJUNCTIONS]
    return []


def _truth_region(cond: UOp, want: bool) -> Region:
    """Where the bool `cond` is `want`: comparisons of affine index expressions, their negations, ANDs and ORs."""
    match cond.op:
        case Ops.CONST:
            return [[]] if bool(cond.arg) == want else []
        case Ops.CMPLT:
            a, b = (_affine(s) for s in cond.src)
            if a is None or b is None:
                return []
            return [[_minus(a, b)]] if want else [[_minus(b, a, 1)]]  # a < b <=> a-b < 0; a >= b <=> b-a-1 < 0
        case Ops.CMPNE | Ops.CMPEQ if cond.src[1].op is Ops.CONST and cond.src[1].dtype == dtypes.bool:
            same = (cond.op is Ops.CMPEQ) == bool(cond.src[1].arg)  # c == True, c != False: c itself
            return _truth_region(cond.src[0], want if same else not want)
        case Ops.AND | Ops.OR if cond.dtype == dtypes.bool:
            left, right = (_truth_region(s, want) for s in cond.src)
            return _and(left, right) if (cond.op is Ops.AND) == want else (left + right)[:_MAX_CONJUNCTIONS]
    return []


def _and(left: Region, right: Region) -> Region:
    return [a + b for a, b in itertools.product(left, right)][:_MAX_CONJUNCTIONS]


# *** affine index expressions ***


def _affine(x: UOp) -> Affine | None:
    """x as a sum of integer multiples of RANGEs and range-free atoms; None when it is not one (or may wrap)."""
    if x.dtype not in _WIDE_INTS:
        return None
    match x.op:
        case Ops.CONST:
            return {None: int(x.arg)}
        case Ops.RANGE:
            return {x: 1}
        case Ops.CAST:
            return _affine(x.src[0])  # between wide signed ints: index math keeps its value
        case Ops.ADD:
            a, b = (_affine(s) for s in x.src)
            return None if a is None or b is None else _minus(a, b, 0, -1)
        case Ops.MUL:
            a, b = (_affine(s) for s in x.src)
            if a is None or b is None:
                return None
            if set(b) == {None}:
                return {k: v * b[None] for k, v in a.items()}
            return {k: v * a[None] for k, v in b.items()} if set(a) == {None} else None
    if any(u.op in (Ops.RANGE, Ops.LOAD) for u in x.toposort()):
        return None  # a loaded value may change while the kernel runs (it may store there)
    return {x: 1}  # a variable, a launch index or other range-free index math: fixed for the loop


def _minus(a: Affine, b: Affine, const: int = 0, sign: int = 1) -> Affine:
    """a - sign*b - const (sign -1: a + b)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - sign * v
    out[None] = out.get(None, 0) - const
    return out


def _extreme(expr: Affine, inner: set[UOp], upper: bool) -> UOp:
    """The largest (`upper`) or smallest value of `expr` over the `inner` ranges, as an index expression of the rest."""
    total = UOp.const(dtypes.index, expr.get(None, 0))
    for key, coef in expr.items():
        if key is None or coef == 0:
            continue
        if key in inner:
            total = total + coef * int(key.vmax if (coef > 0) == upper else key.vmin)
        else:
            total = total + (key if key.dtype == dtypes.index else key.cast(dtypes.index)) * coef
    return total


def _open_ranges(red: UOp) -> set[UOp]:
    """The loops (and lanes) `red`'s value lives in: the term's ranges less its own and those closed inside it."""
    nodes = red.src[0].toposort()
    closed = {r for u in nodes if u.op is Ops.REDUCE for r in u.src[1:]} | set(red.src[1:])
    return {u for u in nodes if u.op is Ops.RANGE and u not in closed}


def _inner_ranges(red: UOp, rng: UOp) -> set[UOp]:
    """The ranges that vary inside one step of `rng`'s loop (or beside it): lanes, `red`'s other loops and loops
    closed inside its term. The rest of the term's ranges are loops around the reduce, fixed for its whole loop."""
    nodes = red.src[0].toposort()
    closed = {r for u in nodes if u.op is Ops.REDUCE for r in u.src[1:]}
    own = set(red.src[1:]) - {rng}
    return {u for u in nodes if u.op is Ops.RANGE and (u.arg[1] in _LANES or u in own or u in closed)}


# *** dead reduces ***


def _reduce_guards(sink: UOp) -> dict[UOp, frozenset[tuple[UOp, bool]]]:
    """Per REDUCE, the (condition, value) pairs of WHEREs that every path from the kernel's stores to it passes
    through in that branch: the reduce's value is only read where each condition has that value. One pass from the
    sink down (users before sources): a node's pairs are the meet of its users' (what every path through each user
    holds, plus that edge's branch), so shared subgraphs cost once, not once per path."""
    order = sink.toposort()
    if not any(u.op is Ops.REDUCE for u in order):
        return {}
    held: dict[UOp, frozenset[tuple[UOp, bool]]] = {sink: frozenset()}
    for node in reversed(order):
        here = held.get(node, frozenset())
        if node.op is Ops.REDUCE:
            here = frozenset()  # its own term is read on every step of its loops
        if node.op is Ops.WHERE and node.dtype != dtypes.bool:
            cond, yes, no = node.src
            edges = [(cond, here), (yes, here | {(cond, True)}), (no, here | {(cond, False)})]
        else:
            edges = [(s, here) for s in node.src]
        for src, pairs in edges:
            held[src] = held[src] & pairs if src in held else pairs
    return {u: held.get(u, frozenset()) for u in order if u.op is Ops.REDUCE}


def _dead_condition(guard: frozenset[tuple[UOp, bool]], scope: set[UOp]) -> UOp | None:
    """A condition of the loops around the reduce (`scope`) under which its value is unread on every lane; None if
    unknown. A condition on another loop would move the reduce's loop into that one."""
    dead: UOp | None = None
    for cond, needed in guard:
        for conj in _truth_region(cond, not needed):
            ranges = {u for half in conj for u in half if u is not None and u.op is Ops.RANGE}
            if not ranges <= scope:
                continue
            inner = {u for u in ranges if u.arg[1] in _LANES}
            holds = UOp.const(dtypes.bool, True)
            for half in conj:
                holds = holds & (_extreme(half, inner, upper=True) < 0)
            dead = holds if dead is None else dead | holds
    return dead


# *** what else the loop touches ***


def _only_reduce_uses(sink: UOp, red: UOp, rng: UOp) -> bool:
    """Is `rng` read only by `red`, its term, row-buffer stores of its loop and the AFTERs that order them?"""
    term = set(red.src[0].toposort())
    for node in sink.toposort():
        if rng not in node.src or node is red or node in term or node.op is Ops.AFTER:
            continue
        if node.op is Ops.INDEX and node.src[0].op is Ops.DEFINE_REG and node.src[1:] == (rng,):
            continue
        return False
    return True


def _row_stores(sink: UOp, rng: UOp) -> list[UOp]:
    """STOREs into a register row indexed by the loop itself (codegen/rowbuffer.py's KEEP)."""
    return [
        u
        for u in sink.toposort()
        if u.op is Ops.STORE
        and u.src[0].op is Ops.INDEX
        and u.src[0].src[1:] == (rng,)
        and _is_register(u.src[0].src[0])
    ]


def _is_register(buf: UOp) -> bool:
    return buf.op is Ops.DEFINE_REG and getattr(buf.dtype, "addrspace", None) is AddrSpace.REG


def _row_loads(sink: UOp, stores: list[UOp]) -> list[UOp]:
    """LOADs of the rows `stores` fill (through the AFTER that orders them after the filling loop)."""
    return [
        u
        for u in sink.toposort()
        if u.op is Ops.LOAD
        and u.src[0].op is Ops.INDEX
        and len(u.src[0].src) == 2
        and u.src[0].src[0].op is Ops.AFTER
        and any(s in u.src[0].src[0].src for s in stores)
    ]
