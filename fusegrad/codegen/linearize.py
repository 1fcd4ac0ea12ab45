"""Codegen's last two steps: reductions become accumulators (`pm_reduce_to_accumulator`), then `linearize` orders the
kernel graph into the linear program of docs/KERNEL_IR.md §2, every node inside exactly the loops it depends on.

Loop placement works on *scopes*: the set of RANGEs a node depends on. A node sits in the loops of its scope, so loop
invariant work is hoisted by construction; `AFTER(x, *deps)` orders its value after `deps` without entering the loops
of the STOREs among them, which is how a reduce's result leaves its loops.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from dataclasses import dataclass, field

from fusegrad.dtype import AddrSpace, ConstType, dtypes
from fusegrad.renderer import trip_multiple
from fusegrad.uop import REDUCE_AXES, AxisType, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat

Scopes = dict[UOp, frozenset[UOp]]
_EMPTY: frozenset[UOp] = frozenset()


def range_key(rng: UOp) -> tuple[int, int]:
    """The preferred nesting: output loops outside reduce loops, each in axis_id order; upcast loops innermost (a
    reduce updates its upcast accumulators in a loop inside its own, see `reduce_to_accumulator`)."""
    axis_id, axis_type = rng.arg
    if axis_type is AxisType.UPCAST:
        return (2, axis_id)
    return (1 if axis_type in REDUCE_AXES else 0, axis_id)


def _union(sets: list[frozenset[UOp]]) -> frozenset[UOp]:
    nonempty = [s for s in sets if s]
    if not nonempty:
        return _EMPTY
    if all(s is nonempty[0] for s in nonempty):
        return nonempty[0]  # the common case: every source sits in the same loops
    return frozenset().union(*nonempty)


def loop_scopes(root: UOp, scopes: Scopes | None = None, enclosing: Scopes | None = None) -> Scopes:
    """The RANGEs every node below `root` depends on. `scopes` is filled in place (nodes already in it are kept);
    `enclosing` adds loops a RANGE must sit inside although its end does not use them."""
    ret: Scopes = {} if scopes is None else scopes
    extra = enclosing or {}
    for u in root.toposort(gate=lambda x: x not in ret):
        if u.op is Ops.RANGE:
            ret[u] = _union([ret[u.src[0]], frozenset({u}), extra.get(u, _EMPTY)])
        elif u.op is Ops.AFTER:  # STORE deps only order the value: their loops are closed before it
            ret[u] = _union([ret[u.src[0]], *(ret[d] for d in u.src[1:] if d.op is not Ops.STORE)])
        elif u.op is Ops.REDUCE:  # the reduce closes its ranges
            ret[u] = _union([ret[s] for s in u.src]) - frozenset(u.src[1:])
        else:
            ret[u] = _union([ret[s] for s in u.src])
    return ret


# *** reductions -> accumulators ***


@dataclass
class AccumulatorContext:
    """State of one `pm_reduce_to_accumulator` pass: the loop nest of the kernel before lowering (a reduce's result
    lives in the loops its value does, less its own, and a range may sit inside loops its end doesn't use), the next
    register id and the scopes seen so far."""

    enclosing: Scopes
    next_axis: int
    next_reg: int = 0
    scopes: Scopes = field(default_factory=dict)

    @staticmethod
    def of(sink: UOp) -> AccumulatorContext:
        nodes = sink.toposort()
        axes = [u.arg[0] for u in nodes if u.op is Ops.RANGE]
        registers = [int(u.arg) for u in nodes if u.op is Ops.DEFINE_REG]  # made by opts (GROUP's partials)
        return AccumulatorContext(nest_loops(sink).enclosing, max(axes, default=-1) + 1, max(registers, default=-1) + 1)

    def fresh_copies(self, ranges: list[UOp]) -> dict[UOp, UOp]:
        """A new RANGE (new axis id, same end and type) for each of `ranges`: a loop over the same values elsewhere."""
        ret = {}
        for r in ranges:
            ret[r] = UOp.range(r.src[0], self.next_axis, r.arg[1])
            self.next_axis += 1
        return ret


def reduce_identity(op: Ops, value: UOp) -> ConstType:
    """The start value of an accumulator: 0 for ADD, 1 for MUL, the dtype's minimum for MAX."""
    match op:
        case Ops.ADD:
            return 0
        case Ops.MUL:
            return 1
        case Ops.MAX:
            return dtypes.min(value.dtype)
    raise ValueError(f"reduce: no accumulator for {op}: expected Ops.ADD, Ops.MUL or Ops.MAX")


def flat_index(ranges: list[UOp]) -> UOp:
    """The row-major position of `ranges` (each 0 <= r < its constant end) in an array of all their combinations."""
    terms, stride = [], 1
    for r in reversed(ranges):
        terms.append(r * stride if stride != 1 else r)
        stride *= int(r.src[0].arg)
    return functools.reduce(lambda x, y: y + x, terms) if terms else UOp.const(dtypes.index, 0)


def reduce_to_accumulator(ctx: AccumulatorContext, red: UOp) -> UOp:
    """REDUCE(value, *ranges) -> an accumulator register set before the loops, updated in them, read after them.

    Upcast loops among the result's loops become positions in an array of accumulators instead of loops around the
    reduce: the array is set in a loop of its own, updated in a copy of the upcast loops inside the reduce's loops
    (i-k-j order: `for k: for j: acc[j] += a[k] * b[k, j]`) and read in the upcast loops themselves.
    """
    value, reduced = red.src[0], red.src[1:]
    if not reduced:
        return value
    if (lanes := max_lanes(ctx, red)) is not None:
        return lanes
    # the loops the result lives in: those of the value, less the ones this reduce closes
    scope = sorted(loop_scopes(red, ctx.scopes, ctx.enclosing)[red], key=range_key)
    outer = [r for r in scope if r.arg[1] is not AxisType.UPCAST]
    upcast = [r for r in scope if r.arg[1] is AxisType.UPCAST]
    if _is_named_tile(red, upcast):
        return named_accumulators(ctx, red, outer, upcast)
    init_ranges, update_ranges = ctx.fresh_copies(upcast), ctx.fresh_copies(upcast)
    size = math.prod(int(r.src[0].arg) for r in upcast)
    acc = UOp(Ops.DEFINE_REG, red.dtype.ptr(size, AddrSpace.REG), arg=ctx.next_reg)
    ctx.next_reg += 1
    position = flat_index(upcast)
    # reset once per iteration of the outer loops
    fresh = UOp(Ops.AFTER, acc.dtype, (acc, *outer, *init_ranges.values())) if scope else acc
    init = fresh.index(position.substitute(init_ranges)).store(UOp.const(red.dtype, reduce_identity(red.arg, value)))
    # inside every loop of the reduce
    running = UOp(Ops.AFTER, acc.dtype, (acc, init, *outer, *reduced, *update_ranges.values()))
    running = running.index(position.substitute(update_ranges))
    update = running.store(running.load().alu(red.arg, value.substitute(update_ranges)))
    return UOp(Ops.AFTER, acc.dtype, (acc, update, *outer, *upcast)).index(position).load()


# a tile of more vector accumulators than this keeps each in a variable of its own (named_accumulators)
ARRAY_TILE_MAX = 16


def _is_named_tile(red: UOp, upcast: list[UOp]) -> bool:
    """A tile of more than ARRAY_TILE_MAX vector accumulators over upcast loops of constant sizes whose value reads no
    accumulator of an inner reduce indexed by those loops (such a read must stay inside them)."""
    if red.dtype.count == 1 or not upcast or any(r.src[0].op is not Ops.CONST for r in upcast):
        return False
    if math.prod(int(r.src[0].arg) for r in upcast) <= ARRAY_TILE_MAX:
        return False
    loops = set(upcast)
    return not any(u.op is Ops.AFTER and loops.intersection(u.src) for u in red.src[0].toposort())


def named_accumulators(ctx: AccumulatorContext, red: UOp, outer: list[UOp], upcast: list[UOp]) -> UOp:
    """REDUCE(value, *ranges) over a tile of upcast positions -> one single-element accumulator per position (the C
    renderer declares it as a plain variable), each set before the reduce's loops and updated in them with `value`
    at its position; after them they are copied into an array read in the upcast loops.

    As an array of 24 vectors updated in unrolled loops, gcc 12 copied registers and spilled in the inner loop (a
    matmul's 6 x 4 tile of 16 floats: 5 vmovaps per 48 fmas); as 24 variables it copies none (matmul 1024 on one
    core 13.3 -> 12.6 ms). Each accumulator sums the same terms in the same order as the array's element."""
    value, reduced = red.src[0], red.src[1:]
    zero = UOp.const(dtypes.index, 0)
    identity = UOp.const(red.dtype, reduce_identity(red.arg, value))
    results = []
    for position in itertools.product(*(range(int(r.src[0].arg)) for r in upcast)):
        at = {r: UOp.const(r.dtype, i) for r, i in zip(upcast, position, strict=True)}
        acc = UOp(Ops.DEFINE_REG, red.dtype.ptr(1, AddrSpace.REG), arg=ctx.next_reg)
        ctx.next_reg += 1
        init = (UOp(Ops.AFTER, acc.dtype, (acc, *outer)) if outer else acc).index(zero).store(identity)
        running = UOp(Ops.AFTER, acc.dtype, (acc, init, *outer, *reduced)).index(zero)
        term = value.substitute(at).simplify()  # its index math folded
        update = running.store(running.load().alu(red.arg, term))
        results.append(UOp(Ops.AFTER, acc.dtype, (acc, update, *outer)).index(zero).load())
    tile = UOp(Ops.DEFINE_REG, red.dtype.ptr(len(results), AddrSpace.REG), arg=ctx.next_reg)
    ctx.next_reg += 1
    fresh = UOp(Ops.AFTER, tile.dtype, (tile, *outer)) if outer else tile
    copies = [fresh.index(UOp.const(dtypes.index, i)).store(x) for i, x in enumerate(results)]
    return UOp(Ops.AFTER, tile.dtype, (tile, *copies, *outer, *upcast)).index(flat_index(upcast)).load()


MAX_LANES = (16, 8)  # running maxima of a max reduce (max_lanes), the most that divide it: 2 AVX2 registers of float32


def max_lanes(ctx: AccumulatorContext, red: UOp) -> UOp | None:
    """REDUCE(MAX, x[r], r) over one loop -> the max over lanes l of (the max over q of x[q * lanes + l]).

    A max carries its accumulator from step to step (our MAX propagates NaN, so OpenMP may not reorder it): one
    running max per lane makes independent chains that the C compiler vectorises (a row max of 4096x1024 floats,
    single-thread: ~3 ms in order, 0.9 ms in 8 lanes, 0.6 ms in 16). A max is exact, so only the sign of a zero tied
    with a zero of the other sign can differ from the in-order result. None when the reduce is not one loop of a
    multiple of 8 (at least 16), or its result lives in upcast loops (already an accumulator array)."""
    if red.arg is not Ops.MAX or len(red.src) != 2 or red.dtype.count != 1:
        return None
    rng = red.src[1]
    if rng.op is not Ops.RANGE or rng.arg[1] is not AxisType.REDUCE:
        return None
    multiple, longest = trip_multiple(rng.src[0]), int(rng.src[0].vmax)
    if (lanes := next((n for n in MAX_LANES if multiple % n == 0 and longest >= 2 * n), None)) is None:
        return None
    if any(r.arg[1] is AxisType.UPCAST for r in loop_scopes(red, ctx.scopes, ctx.enclosing)[red]):
        return None
    steps = UOp.range(_divide_trip(rng.src[0], lanes), ctx.next_axis, AxisType.REDUCE)
    lane = UOp.range(lanes, ctx.next_axis + 1, AxisType.UPCAST)
    ctx.next_axis += 2
    lanewise = red.src[0].substitute({rng: steps * lanes + lane}).reduce(steps, arg=Ops.MAX)
    return reduce_to_accumulator(ctx, reduce_to_accumulator(ctx, lanewise).reduce(lane, arg=Ops.MAX))


def _divide_trip(end: UOp, lanes: int) -> UOp:
    """end // lanes for an end that `trip_multiple` says `lanes` divides."""
    if end.op is Ops.CONST:
        return end.const_like(int(end.arg) // lanes)
    factor = int(end.src[1].arg) // lanes
    return end.src[0] if factor == 1 else end.src[0] * factor


# lowers every REDUCE; sources are rewritten first, so an inner reduce is lowered before the one around it
pm_reduce_to_accumulator = PatternMatcher([
    (UPat(Ops.REDUCE, name="red"), reduce_to_accumulator),  # REDUCE(x, *r) -> acc load after the r loops
])  # fmt: skip


def is_partials(u: UOp) -> bool:
    """An AFTER of a register array filled with reduces' values (a GROUP's or LANES's partials, one per chunk or lane):
    its address doesn't depend on the loop that fills it, only its contents."""
    return bool(writes := _register_writes(u)) and all(s.src[1].op is Ops.REDUCE for s in writes)


def is_row_buffer(u: UOp) -> bool:
    """An AFTER of a row buffer (codegen/rowbuffer.py) filled by a reduce's loop: later loops read its contents."""
    return bool(writes := _register_writes(u)) and not any(s.src[1].op is Ops.REDUCE for s in writes)


def _register_writes(u: UOp) -> list[UOp]:
    """The stores an AFTER of a DEFINE_REG waits on (none for any other node)."""
    return [s for s in u.src[1:] if s.op is Ops.STORE] if u.op is Ops.AFTER and u.src[0].op is Ops.DEFINE_REG else []


def dependents(root: UOp, rng: UOp, past_partials: bool = True) -> set[UOp]:
    """`rng` and the nodes of `root` that depend on it (one pass: sources come before their users). Without
    `past_partials`, the dependence stops at partials filled along `rng` (`is_partials`): the loop combining them
    doesn't run in `rng`'s lanes."""
    ret = {rng}
    for u in root.toposort():
        if any(s in ret for s in u.src) and (past_partials or not (is_partials(u) or is_row_buffer(u))):
            ret.add(u)
    return ret


def open_loops(value: UOp) -> set[UOp]:
    """The loops `value` is computed in: the RANGEs it depends on that no node below it closes. A REDUCE closes its
    loops; a register an opt filled (an AFTER of a DEFINE_REG: partials, a row buffer, a packed panel) closes the
    loops of its writes but the ones it lists (a layernorm's variance in LANES holds its mean's combined partials,
    not the mean's lane loop)."""
    open_: dict[UOp, frozenset[UOp]] = {}
    for u in value.toposort():
        register = u.op is Ops.AFTER and u.src[0].op is Ops.DEFINE_REG
        srcs = [s for s in u.src[1:] if s.op is Ops.RANGE] if register else u.src
        here = frozenset().union(*(open_[s] for s in srcs))
        if u.op is Ops.RANGE:
            here |= {u}
        elif u.op is Ops.REDUCE:
            here -= set(u.src[1:])
        open_[u] = here
    return set(open_[value])


# *** loop nesting ***


def _closed_ranges(u: UOp, scopes: Scopes) -> frozenset[UOp]:
    """The loops that end before `u`: those of a REDUCE, or those of an AFTER's STORE deps it is not inside."""
    if u.op is Ops.REDUCE:
        return frozenset(u.src[1:])
    if u.op is Ops.AFTER:
        return _union([scopes[d] for d in u.src[1:] if d.op is Ops.STORE]) - scopes[u]
    return _EMPTY


def _rank_ranges(scopes: Scopes, order: dict[UOp, int]) -> dict[UOp, int]:
    """Each RANGE's position in the loop order: range_key, except where a loop must enclose another."""
    ranges = [u for u in scopes if u.op is Ops.RANGE]
    outer_of: dict[UOp, set[UOp]] = {r: set(scopes[r] - {r}) for r in ranges}
    for u in scopes:
        for closed in _closed_ranges(u, scopes):  # loops closed before `u` nest inside the loops `u` is in
            outer_of[closed].update(scopes[u])
    users: dict[UOp, list[UOp]] = {r: [] for r in ranges}
    for r, outs in outer_of.items():
        for o in outs:
            users[o].append(r)
    waiting = {r: len(outs) for r, outs in outer_of.items()}
    ready = [(range_key(r), order[r], r) for r in ranges if waiting[r] == 0]
    heapq.heapify(ready)
    rank: dict[UOp, int] = {}
    while ready:
        *_, r = heapq.heappop(ready)
        rank[r] = len(rank)
        for u in users[r]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (range_key(u), order[u], u))
    if len(rank) != len(ranges):
        stuck = sorted(str(r.arg[0]) for r in ranges if r not in rank)
        raise ValueError(f"linearize: loops must enclose each other: got a cycle among axes {', '.join(stuck)}")
    return rank


@dataclass(frozen=True)
class LoopNest:
    """Where loops go: `enclosing` loops each RANGE must sit inside beyond its end's, every node's `scopes` (its
    ranges, the enclosing ones included) and each RANGE's `rank` in the loop order."""

    enclosing: Scopes
    scopes: Scopes
    rank: dict[UOp, int]


def nest_loops(sink: UOp) -> LoopNest:
    """The loop nest in which every node's loops form one chain of a loop tree.

    A RANGE used by two nodes with different outer loops would have to open twice; instead it moves inside the
    union of those outer loops (which un-hoists the nodes that used it outside). Repeats until nothing moves.
    """
    order = {u: i for i, u in enumerate(sink.toposort())}
    enclosing: Scopes = {}
    while True:
        scopes = loop_scopes(sink, enclosing=enclosing)
        rank = _rank_ranges(scopes, order)
        grown = {r: set(s) for r, s in enclosing.items()}
        for scope in {scopes[u] for u in scopes if u.op is not Ops.SINK}:
            for r in scope:
                grown.setdefault(r, set()).update(x for x in scope if rank[x] < rank[r])
        frozen = {r: frozenset(s) for r, s in grown.items() if s}
        if frozen == enclosing:
            return LoopNest(enclosing, scopes, rank)
        enclosing = frozen


def _place_registers(scopes: Scopes, nodes: list[UOp]) -> None:
    """A DEFINE_REG sits in the loops all its users share: one private accumulator per iteration of those loops. An
    address into it counts where it is read or written: one vector of LANES partials is stored at the constant index
    0, an address in no loop, though the store runs once per row (the array must stay private to the row's thread)."""
    accesses: dict[UOp, frozenset[UOp]] = {}
    for u in nodes:
        for s in u.src:
            if s.op is Ops.INDEX and s.src[0].op is Ops.DEFINE_REG:
                accesses[s] = accesses[s] & scopes[u] if s in accesses else scopes[u]
    scopes.update({idx: scopes[idx] | scope for idx, scope in accesses.items()})
    shared: dict[UOp, frozenset[UOp]] = {}
    for u in nodes:
        for s in u.src:
            if s.op is Ops.DEFINE_REG:
                shared[s] = shared[s] & scopes[u] if s in shared else scopes[u]
    scopes.update(shared)


# *** ordering ***


def _priority(u: UOp, order: dict[UOp, int]) -> tuple[int, int, str, int]:
    """Among ready nodes: globals by slot, then variables by name, then the graph's own order (a loop by its RANGE's).
    The last field is unique within a level, so ties never compare UOps."""
    if u.op is Ops.DEFINE_GLOBAL:
        return (0, int(u.arg), "", order[u])
    if u.op is Ops.DEFINE_VAR:
        return (1, 0, str(u.arg[0]), order[u])
    return (2, 0, "", order[u.src[0]] if u.op is Ops.END else order[u])


@dataclass
class _LoopTree:
    """Each loop level's items: its own nodes and its child loops (as their END node), with the order between them."""

    paths: dict[UOp, tuple[UOp, ...]]
    items: dict[UOp | None, list[UOp]] = field(default_factory=dict)
    deps: dict[UOp, set[UOp]] = field(default_factory=dict)

    def item(self, u: UOp, depth: int) -> UOp:
        """What stands for `u` among the items of its level-`depth` ancestor: itself or the child loop around it."""
        path = self.paths[u]
        return u if len(path) == depth else UOp(Ops.END, dtypes.void, (path[depth],))

    def add(self, u: UOp) -> None:
        path = self.paths[u]
        if u.op is Ops.RANGE:  # the loop is an item of its parent level; the RANGE itself opens its own level
            self.items.setdefault(path[-2] if len(path) > 1 else None, []).append(self.item(u, len(path) - 1))
        else:
            self.items.setdefault(path[-1] if path else None, []).append(u)
        for s in u.src:
            ps = self.paths[s]
            depth = 0
            while depth < min(len(path), len(ps)) and path[depth] is ps[depth]:
                depth += 1
            before, after = self.item(s, depth), self.item(u, depth)
            if before is not after and not (s.op is Ops.RANGE and len(ps) == depth):
                self.deps.setdefault(after, set()).add(before)


def _emit_level(tree: _LoopTree, level: UOp | None, order: dict[UOp, int], out: list[UOp]) -> None:
    """Append the items of `level` in dependency order, each child loop as RANGE, its level, END."""
    if level is not None:
        out.append(level)
    items = tree.items.get(level, [])
    waiting = dict.fromkeys(items, 0)
    users: dict[UOp, list[UOp]] = {}
    for it in items:
        for dep in tree.deps.get(it, ()):
            if dep in waiting:
                waiting[it] += 1
                users.setdefault(dep, []).append(it)
    ready = [(_priority(it, order), it) for it in items if waiting[it] == 0]
    heapq.heapify(ready)
    done = 0
    while ready:
        _, it = heapq.heappop(ready)
        done += 1
        if it.op is Ops.END:
            _emit_level(tree, it.src[0], order, out)
        out.append(it)
        for user in users.get(it, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (_priority(user, order), user))
    if done != len(items):
        stuck = sorted({it.op.name for it in items if waiting[it]})
        raise ValueError(f"linearize: nodes depend on a loop they are inside: stuck at {', '.join(stuck)}")


def _shared_register_vectors(nodes: list[UOp]) -> list[UOp]:
    """Vector loads from registers that several nodes use: in a reduce loop, a packed panel's vector each row of a named
    tile multiplies (named_accumulators). The C renderer declares those as variables; loaded before the rows, gcc 12
    keeps the tile's 24 accumulators in place (loaded between them, it rotated registers and copied one per step:
    matmul 2048 on one core 2-3% slower)."""
    users: dict[UOp, int] = {}
    for u in nodes:
        for s in u.src:
            users[s] = users.get(s, 0) + 1
    loads = [u for u in nodes if u.op is Ops.LOAD and u.dtype.count > 1 and users.get(u, 0) > 1]
    return [u for u in loads if _base_register(u.src[0].src[0]) is not None]


def _same_loop_sources(u: UOp, paths: dict[UOp, tuple[UOp, ...]]) -> list[UOp]:
    """`u` and the nodes below it in the same loops (not through loops of their own or outside them)."""
    return list(u.toposort(gate=lambda x: paths.get(x) == paths[u] and x.op is not Ops.RANGE))


def _base_register(buf: UOp) -> UOp | None:
    while buf.op is Ops.AFTER:
        buf = buf.src[0]
    return buf if buf.op is Ops.DEFINE_REG else None


def linearize(sink: UOp) -> list[UOp]:
    """The kernel `sink` (REDUCEs already lowered) as a linear program ending with the SINK (KERNEL_IR.md §2)."""
    order = {u: i for i, u in enumerate(sink.toposort())}
    nodes = [u for u in order if u is not sink]
    nest = nest_loops(sink)
    _place_registers(nest.scopes, nodes)
    tree = _LoopTree({u: tuple(sorted(nest.scopes[u], key=nest.rank.__getitem__)) for u in nodes})
    for u in nodes:
        tree.add(u)
    # shared register vectors and the index math in their loop they need: ahead of that loop's other nodes
    shared = [u for u in _shared_register_vectors(nodes) if tree.paths[u] and tree.paths[u][-1].arg[1] in REDUCE_AXES]
    early = {x for u in shared for x in _same_loop_sources(u, tree.paths)}
    order.update({u: order[u] - len(order) for u in early})
    out: list[UOp] = []
    _emit_level(tree, None, order, out)
    return [*out, sink]
