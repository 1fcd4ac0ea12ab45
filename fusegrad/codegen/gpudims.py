"""GPU launch dimensions, for renderers with work-groups (`Renderer.has_local`): a kernel's output loops become global
ids (`SPECIAL` gidx0..2, the work-group index), its LOCAL and GROUP_REDUCE loops local ids (lidx0..2, the thread in the
work-group); a reduce over GROUP_REDUCE loops is finished through local memory behind a barrier.

Runs in codegen after the opts (codegen/opt.py) and before reduces become accumulators; `launch_sizes` reads the
(global, local) sizes back off the linear program for the ProgramSpec.
"""

from __future__ import annotations

import functools
import math

from fusegrad.codegen.linearize import flat_index, range_key
from fusegrad.codegen.vectorize import VECTOR_BYTES, VECTOR_DTYPES, vectorize_upcast
from fusegrad.dtype import AddrSpace, dtypes
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp, sint

__all__ = [
    "add_gpudims",
    "gpu_heuristic",
    "launch_sizes",
    "lower_group_reduces",
    "split_group",
    "split_local",
    "vector_upcast",
]

LOCAL_AXES = (AxisType.LOCAL, AxisType.GROUP_REDUCE)  # loops whose iterations are the threads of one work-group
GLOBAL_AXES = (AxisType.GLOBAL, AxisType.LOOP)  # output loops: one work-group per iteration


# *** GPU opts: LOCAL and GROUP / GROUPTOP (applied by codegen/opt.py's apply_opts) ***

GROUP_MAX = 256  # threads of a work-group sharing one reduce (a power of two up to this divides the reduce)
GROUP_MIN_REDUCE = 64  # reduce size from which splitting it over threads pays
GROUP_MAX_OUTPUTS = 4096  # outputs up to which a reduce is split: with more, work-groups alone fill the device
LOCAL_MAX = 64  # threads of a work-group along one output axis
LOCAL_THREADS = 256  # threads of a work-group the heuristic's LOCAL loops multiply to at most
TILE_ROWS = 4  # rows of a thread's register tile in a reduce: each vector loaded serves this many rows


def _split_range(sink: UOp, axis: int, amount: int, axis_type: AxisType, op: str) -> tuple[UOp, int]:
    """The RANGE with axis id `axis` and its size; raises ValueError unless it is of `axis_type` and `amount` (>= 2)
    divides its constant size."""
    found = [u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[0] == axis]
    if len(found) != 1 or found[0].arg[1] is not axis_type:
        raise ValueError(f"opt: {op} needs one {axis_type.name} axis with id {axis}: got {[u.arg for u in found]}")
    if found[0].src[0].op is not Ops.CONST or amount < 2 or int(found[0].src[0].arg) % amount:
        raise ValueError(
            f"opt: {op} by {amount} of axis {axis}: got size {found[0].src[0].render()}, expected a multiple"
        )
    return found[0], int(found[0].src[0].arg)


def split_local(sink: UOp, axis: int, amount: int, new_axis: int) -> UOp:
    """LOCAL: output axis r of size n -> n/amount work-groups of `amount` threads: r = group * amount + thread."""
    rng, size = _split_range(sink, axis, amount, AxisType.LOOP, "LOCAL")
    inner = UOp.range(amount, new_axis, AxisType.LOCAL)
    outer = UOp.range(size // amount, axis, AxisType.LOOP)
    return sink.substitute({rng: inner if size == amount else outer * amount + inner})


def split_group(sink: UOp, axis: int, amount: int, new_axis: int, top: bool) -> UOp:
    """GROUP / GROUPTOP: reduce axis r of size n -> `amount` threads (a GROUP_REDUCE loop g) each reducing n/amount
    elements q, combined through local memory (lower_group_reduces). GROUP strides (r = q * amount + g: neighbouring
    threads read neighbouring elements, coalesced on GPUs); GROUPTOP takes chunks (r = g * n/amount + q)."""
    rng, size = _split_range(sink, axis, amount, AxisType.REDUCE, "GROUPTOP" if top else "GROUP")
    group = UOp.range(amount, new_axis, AxisType.GROUP_REDUCE)
    within = UOp.range(size // amount, axis, AxisType.REDUCE)
    position = group * (size // amount) + within if top else within * amount + group
    (red,) = [u for u in sink.toposort() if u.op is Ops.REDUCE and rng in u.src[1:]]  # one REDUCE closes a range
    ranges = [x for r in red.src[1:] for x in ((group, within) if r is rng else (r,))]
    return sink.substitute({red: red.src[0].substitute({rng: position}).reduce(*ranges, arg=red.arg)})


def _largest_power_of_two(size: int, limit: int) -> int:
    ret = 1
    while ret * 2 <= limit and size % (ret * 2) == 0:
        ret *= 2
    return ret


def _vectorizes(sink: UOp, upcasts: list[tuple[UOp, int]]) -> bool:
    """Whether codegen/vectorize.py turns the last of these upcasts into vectors (it keeps, unchanged, a kernel whose
    lane-dependent work has no vector form)."""
    from fusegrad.codegen.opt import Opt, OptOps, apply_opts  # opt.py imports this module

    try:
        trial = apply_opts(sink, tuple(Opt(OptOps.UPCAST, r.arg[0], amount) for r, amount in upcasts))
    except ValueError:
        return False
    return vectorize_upcast(trial) is not trial


def vector_upcast(sink: UOp, loop: UOp) -> int | None:
    """The vector width (VECTOR_BYTES of the stored dtype) by which UPCAST of output `loop` becomes vector loads and
    stores (codegen/vectorize.py, which every GPU renderer spells), or None where vectorize would leave it scalar."""
    (store,) = [s for s in sink.src if s.op is Ops.STORE]
    if (dtype := store.src[1].dtype) not in VECTOR_DTYPES or loop.src[0].op is not Ops.CONST:
        return None
    width = VECTOR_BYTES // dtype.itemsize
    if int(loop.src[0].arg) % width:
        return None
    return width if _vectorizes(sink, [(loop, width)]) else None


def tile_rows(sink: UOp, loops: list[UOp], vector: UOp) -> UOp | None:
    """The innermost constant output loop (not `vector`) that a load inside a reduce doesn't depend on: upcast by
    TILE_ROWS, each such load (a matmul's vector of B) serves that many rows of accumulators."""
    nodes = sink.toposort()
    reduced = {r for u in nodes if u.op is Ops.REDUCE for r in u.src[1:]}
    loads = [u.toposort() for u in nodes if u.op is Ops.LOAD and reduced & set(u.toposort())]
    for rng in reversed(loops):
        if rng is not vector and int(rng.src[0].arg) % TILE_ROWS == 0 and any(rng not in x for x in loads):
            return rng
    return None


def gpu_heuristic(sink: UOp, shared_max: int) -> list[tuple[str, int, int]]:
    """(op name, axis, amount) for a one-store kernel: few outputs with a long reduce get it split over a work-group
    (GROUP); else each thread takes a vector of the innermost output axis where the loads and the store are
    contiguous in it (UPCAST), in a reduce TILE_ROWS rows of such vectors where a load is reused across rows (a
    register tile), and the two innermost output axes get threads (LOCAL, up to LOCAL_THREADS a work-group). A reduce
    inside another's loop is not split (its local array would be rewritten while slower threads still read it)."""
    if len([s for s in sink.src if s.op is Ops.STORE]) != 1:
        return []
    nodes = sink.toposort()
    loops = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP), key=range_key)
    outputs = math.prod(int(r.src[0].arg) if r.src[0].op is Ops.CONST else GROUP_MAX_OUTPUTS + 1 for r in loops)
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    nested = {x for red in reduces for x in red.src[0].toposort() if x.op is Ops.REDUCE}
    if outputs <= GROUP_MAX_OUTPUTS:
        for red in (r for r in reduces if r not in nested):
            for rng in (r for r in red.src[1:] if r.src[0].op is Ops.CONST and int(r.src[0].arg) >= GROUP_MIN_REDUCE):
                amount = _largest_power_of_two(int(rng.src[0].arg), min(GROUP_MAX, shared_max // red.dtype.itemsize))
                if amount >= 8:
                    return [("GROUP", rng.arg[0], amount)]
    sized = [r for r in loops if r.src[0].op is Ops.CONST]
    upcasts = register_tile(sink, sized) if sized else []
    ret = [("UPCAST", r.arg[0], amount) for r, amount in upcasts]
    sizes = {r: int(r.src[0].arg) // dict(upcasts).get(r, 1) for r in sized}
    thread_opts, threads = [], 1
    for rng in sized[::-1][:2]:  # size 1 left: the upcast took the whole loop
        if (amount := _largest_power_of_two(sizes[rng], min(LOCAL_MAX, LOCAL_THREADS // threads))) > 1:
            thread_opts.append(("LOCAL", rng.arg[0], amount))
            threads *= amount
    # the innermost axis's LOCAL last: the newest loop is the innermost, local id 0, whose neighbouring threads
    # then touch neighbouring vectors (coalesced)
    return ret + thread_opts[::-1]


def register_tile(sink: UOp, loops: list[UOp]) -> list[tuple[UOp, int]]:
    """(loop, amount) upcasts of a thread's tile: a vector of the innermost loop, and in a reduce TILE_ROWS rows of
    them (the vector loop last: vectorize takes the innermost upcast); none where vectorize leaves the kernel."""
    if (width := vector_upcast(sink, loops[-1])) is None:
        return []
    upcasts = [(loops[-1], width)]
    if not any(u.op is Ops.REDUCE for u in sink.toposort()) or (rows := tile_rows(sink, loops, loops[-1])) is None:
        return upcasts
    tiled = [(rows, TILE_ROWS), *upcasts]
    return tiled if _vectorizes(sink, tiled) else upcasts


# *** reduces across the threads of a work-group ***


def _group_reduce(red: UOp, local_loops: list[UOp], new_axis: int, slot: int) -> UOp:
    """REDUCE(x, g, *r) with g GROUP_REDUCE loops -> each thread's partial REDUCE(x, *r) stored at its place in a
    local array, a barrier, then the partials combined: by a tree (`_tree_combine`) where their count is a power of
    two, else every thread reduces its row of the array in order."""
    groups = sorted((r for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE), key=range_key)
    others = [r for r in red.src[1:] if r.arg[1] is not AxisType.GROUP_REDUCE]
    partial = red.src[0].reduce(*others, arg=red.arg) if others else red.src[0]
    rows = [r for r in local_loops if r.arg[1] is AxisType.LOCAL]  # each output thread of the group gets a row
    size = math.prod(int(r.src[0].arg) for r in rows + groups)
    temp = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(size, AddrSpace.LOCAL), arg=slot)
    written = temp.index(flat_index(rows + groups)).store(partial)
    ready = UOp(Ops.AFTER, temp.dtype, (temp, UOp(Ops.BARRIER, dtypes.void, (written,))))
    count = math.prod(int(r.src[0].arg) for r in groups)
    if count & (count - 1) == 0:
        return _tree_combine(ready, flat_index(rows) * count, flat_index(groups), count, red.arg)
    combine = [UOp.range(r.src[0], new_axis + i, AxisType.REDUCE) for i, r in enumerate(groups)]
    return ready.index(flat_index(rows + combine)).load().reduce(*combine, arg=red.arg)


def _tree_combine(ready: UOp, row: UOp, position: UOp, count: int, op: Ops) -> UOp:
    """The `count` partials at temp[row:row+count] combined in log2(count) halving steps, a barrier after each: in the
    step of stride s, threads at position p < s set temp[row+p] = temp[row+p] <op> temp[row+p+s]. Every thread then
    reads temp[row]. O(count) work per work-group, where each thread combining all partials in order is O(count^2)."""
    temp = ready.src[0]
    stride = count // 2
    while stride >= 1:
        active = position.alu(Ops.CMPLT, UOp.const(position.dtype, stride))
        mine = ready.index(row + position, active)
        updated = mine.load().alu(op, ready.index(row + position + stride, active).load())
        ready = UOp(Ops.AFTER, temp.dtype, (temp, UOp(Ops.BARRIER, dtypes.void, (mine.store(updated),))))
        stride //= 2
    return ready.index(row).load()


def _gate_store(store: UOp, groups: list[UOp]) -> UOp:
    """The store done by the first thread of each GROUP_REDUCE loop only (all of them hold the same value)."""
    idx = store.src[0]
    gate = functools.reduce(lambda x, y: x & y, [g.alu(Ops.CMPLT, UOp.const(g.dtype, 1)) for g in groups])
    valid = idx.src[2] & gate if len(idx.src) > 2 else gate
    return store.replace(src=(idx.replace(src=(idx.src[0], idx.src[1], valid)), *store.src[1:]))


def lower_group_reduces(sink: UOp) -> UOp:
    """Every REDUCE over GROUP_REDUCE loops finished through local memory; the stores after them gated to one thread.

    Raises ValueError where a LOCAL or GROUP_REDUCE loop has no constant size (local arrays have fixed sizes)."""
    nodes = sink.toposort()
    reduces = [u for u in nodes if u.op is Ops.REDUCE and any(r.arg[1] is AxisType.GROUP_REDUCE for r in u.src[1:])]
    if not reduces:
        return sink
    local_loops = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] in LOCAL_AXES), key=range_key)
    if any(r.src[0].op is not Ops.CONST for r in local_loops):
        raise ValueError("gpudims: LOCAL and GROUP_REDUCE loops need constant sizes: got a symbolic one")
    groups = [r for r in local_loops if r.arg[1] is AxisType.GROUP_REDUCE]
    new_axis = max(u.arg[0] for u in nodes if u.op is Ops.RANGE) + 1
    replace: dict[UOp, UOp] = {}
    for i, red in enumerate(reduces):  # toposort order: an inner reduce is replaced before the one using it
        red_now = red.substitute(replace) if replace else red
        replace[red] = _group_reduce(red_now, local_loops, new_axis + i * len(groups), i)
    sink = sink.substitute(replace)
    stores = [_gate_store(s, groups) if s.op is Ops.STORE else s for s in sink.src]
    return sink.replace(src=tuple(stores))


# *** loops -> launch indexes ***


def _specials(loops: list[UOp], prefix: str, limits: tuple[int, ...]) -> dict[UOp, UOp]:
    """Each loop -> an expression of SPECIAL ids `prefix`0..2; the innermost loop is dimension 0. More loops than
    dimensions, or a size past a dimension's limit, fold the outer ones into one id split by div and mod."""
    loops = sorted(loops, key=range_key, reverse=True)  # innermost first
    sizes = [r.src[0] for r in loops]
    fits = len(loops) <= len(limits) and all(
        s.op is not Ops.CONST or int(s.arg) <= limit for s, limit in zip(sizes, limits, strict=False)
    )
    if fits:
        return {
            r: UOp(Ops.SPECIAL, dtypes.index, (s,), f"{prefix}{d}")
            for d, (r, s) in enumerate(zip(loops, sizes, strict=True))
        }
    # fold into dimension 0: one id over every combination, innermost fastest. Constant sizes multiply as ints, so
    # every use of the id is the same node (a product left to later simplification could become two SPECIALs)
    total = _product(sizes)
    flat = UOp(Ops.SPECIAL, dtypes.index, (total,), f"{prefix}0")
    ret, stride = {}, UOp.const(dtypes.index, 1)
    for r, s in zip(loops, sizes, strict=True):
        ret[r] = (flat // stride) % s
        stride = _product([stride, s])
    return ret


def _product(sizes: list[UOp]) -> UOp:
    ret = UOp.const(dtypes.index, math.prod(int(s.arg) for s in sizes if s.op is Ops.CONST))
    for s in (s for s in sizes if s.op is not Ops.CONST):
        ret = ret * s
    return ret


def gpu_loops(sink: UOp) -> tuple[list[UOp], list[UOp]]:
    """(global, local) loops of a kernel: the output loops every store is inside, and the LOCAL/GROUP_REDUCE loops.
    An output loop only some stores are inside stays a loop in each thread."""
    stores = [s for s in sink.src if s.op is Ops.STORE]
    nodes = sink.toposort()
    inside = [{u for u in s.toposort() if u.op is Ops.RANGE} for s in stores]
    global_loops = [u for u in nodes if u.op is Ops.RANGE and u.arg[1] in GLOBAL_AXES and all(u in s for s in inside)]
    return global_loops, [u for u in nodes if u.op is Ops.RANGE and u.arg[1] in LOCAL_AXES]


def add_gpudims(sink: UOp, global_max: tuple[int, ...], local_max: tuple[int, ...]) -> UOp:
    """The kernel with its group reduces lowered and its global and local loops replaced by launch indexes."""
    sink = lower_group_reduces(sink)
    global_loops, local_loops = gpu_loops(sink)
    if not global_loops and not local_loops:
        return sink
    return sink.substitute({**_specials(global_loops, "gidx", global_max), **_specials(local_loops, "lidx", local_max)})


def _as_size(x: UOp) -> sint:
    """A SPECIAL's size as a number, or an index expression of the kernel's variables (whatever width codegen gave)."""
    if x.op is Ops.CONST:
        return int(x.arg)
    return x.replace(dtype=dtypes.index, src=tuple(_as_index(s) for s in x.src))


def _as_index(x: UOp) -> UOp:
    return x if x.dtype == dtypes.index else x.replace(dtype=dtypes.index, src=tuple(_as_index(s) for s in x.src))


def launch_sizes(uops: list[UOp]) -> tuple[list[sint], list[sint]]:
    """(global, local) sizes of a linear program, three each: work-groups per dimension and threads per work-group."""
    global_size: list[sint] = [1, 1, 1]
    local_size: list[sint] = [1, 1, 1]
    for u in uops:
        if u.op is Ops.SPECIAL:
            sizes = global_size if str(u.arg).startswith("g") else local_size
            sizes[int(str(u.arg)[-1])] = _as_size(u.src[0])
    return global_size, local_size
