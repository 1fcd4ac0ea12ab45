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
from fusegrad.dtype import AddrSpace, dtypes
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp, sint

__all__ = ["add_gpudims", "launch_sizes", "lower_group_reduces"]

LOCAL_AXES = (AxisType.LOCAL, AxisType.GROUP_REDUCE)  # loops whose iterations are the threads of one work-group
GLOBAL_AXES = (AxisType.GLOBAL, AxisType.LOOP)  # output loops: one work-group per iteration


# *** reduces across the threads of a work-group ***


def _group_reduce(red: UOp, local_loops: list[UOp], new_axis: int, slot: int) -> UOp:
    """REDUCE(x, g, *r) with g GROUP_REDUCE loops -> each thread's partial REDUCE(x, *r) stored at its place in a
    local array, a barrier, then every thread reduces the array's row of its work-group (in the same order)."""
    groups = sorted((r for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE), key=range_key)
    others = [r for r in red.src[1:] if r.arg[1] is not AxisType.GROUP_REDUCE]
    partial = red.src[0].reduce(*others, arg=red.arg) if others else red.src[0]
    rows = [r for r in local_loops if r.arg[1] is AxisType.LOCAL]  # each output thread of the group gets a row
    size = math.prod(int(r.src[0].arg) for r in rows + groups)
    temp = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(size, AddrSpace.LOCAL), arg=slot)
    written = temp.index(flat_index(rows + groups)).store(partial)
    barrier = UOp(Ops.BARRIER, dtypes.void, (written,))
    combine = [UOp.range(r.src[0], new_axis + i, AxisType.REDUCE) for i, r in enumerate(groups)]
    ready = UOp(Ops.AFTER, temp.dtype, (temp, barrier))
    return ready.index(flat_index(rows + combine)).load().reduce(*combine, arg=red.arg)


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
