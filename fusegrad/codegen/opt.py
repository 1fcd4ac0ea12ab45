"""Kernel optimisations, between the scheduler's kernel AST and reduce lowering: loop transformations (`Opt`) picked
by `hand_coded_opts` or given in `KernelInfo.opts_to_apply` (`choose_opts`), applied by `apply_opts`.

UPCAST splits an output axis into an outer loop and an inner upcast loop: a reduce's accumulator becomes an array over
the upcast loop, updated innermost (`for k: for j: acc[j] += a[k] * b[k, j]`), which the C compiler vectorises and
keeps in registers; every accumulator still sums in the reduce's own order. GROUP splits a full reduction into
partial reductions over contiguous chunks that run on all cores, then combines the partials in a fixed order; LANES
then sums each chunk into several vector accumulators (interleaved partials) instead of one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, auto
from typing import TYPE_CHECKING

from fusegrad.codegen import vectorize
from fusegrad.codegen.clip import clip_reduce_loops
from fusegrad.codegen.gates import pm_simplify_gates
from fusegrad.codegen.gpudims import gpu_heuristic, split_group, split_local
from fusegrad.codegen.linearize import dependents, flat_index, is_partials, open_loops, range_key
from fusegrad.codegen.rowbuffer import keep_row_value, kept_value
from fusegrad.codegen.unroll import unroll_reduce
from fusegrad.codegen.vectorize import VECTOR_DTYPES
from fusegrad.dtype import AddrSpace, PtrDType, dtypes
from fusegrad.helpers import NOOPT
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import REDUCE_AXES, AxisType, GroupOp, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat, graph_rewrite
from fusegrad.uop.symbolic import split_uop, sym

if TYPE_CHECKING:
    from fusegrad.renderer import Renderer

__all__ = ["Opt", "OptOps", "apply_opts", "choose_opts", "hand_coded_opts"]


class OptOps(Enum):
    """What an `Opt` does to its axis."""

    UPCAST = auto()  # output axis of size n -> an outer loop of n/arg iterations around an upcast loop of arg
    GROUP = auto()  # reduce axis of size n -> arg partial reductions of n/arg elements each, then their combination
    SWAP = auto()  # output axes `axis` and `arg` trade places in the loop nest (loop interchange)
    LOCAL = auto()  # GPUs: output axis of size n -> n/arg work-groups of arg threads (codegen/gpudims.py)
    GROUPTOP = auto()  # GPUs: reduce axis -> arg threads reducing contiguous chunks, combined in local memory
    PACK = auto()  # the reduce's loads from buffer slot `arg` read a panel copied once outside output loop `axis`
    KEEP = auto()  # a costly value the reduce over `axis` (of size arg) computes per row, kept for later loops over it
    UNROLL = auto()  # innermost reduce axis of size n -> n/arg steps of an unrolled loop of arg (codegen/unroll.py)
    SPLIT = auto()  # output axis of size n -> an outer loop of n/arg iterations and a loop of arg nested innermost
    LANES = auto()  # reduce axis of size n -> arg interleaved partial reductions (an upcast loop), then combined
    # output axis of size n -> ceil(n/arg) iterations of an upcast loop of arg (any arg < n): the last tile's lanes past
    # the end repeat index n-1, computing and storing its value again (as UPCAST where arg divides n)
    UPCAST_CLAMP = auto()


@dataclass(frozen=True, slots=True)
class Opt:
    """One loop transformation: `op` on the RANGE with axis id `axis`, by `arg` (a divisor of the axis size; for SWAP
    the other axis id)."""

    op: OptOps
    axis: int
    arg: int


# accumulator bytes an upcast may take: 64 floats, 8 AVX2 registers of the 16, leaves room for the operands
UPCAST_BYTES = 256
VECTOR_AMOUNTS = (16, 8, 4, 2)  # tried in order for the axis the loads are contiguous in (8 floats: one AVX2 register)
REUSE_AMOUNTS = (8, 4, 2)  # and for an axis some loads don't depend on (each load serves every row of it)
HOIST_MAX = 256  # iterations of an upcast loop that only stores a reduce's result (no accumulators)
GROUP_PARTS = 16  # partial reductions of a split full reduce: enough chunks for every core, summed in order
# and up to GROUP_MAX_PARTS of at least GROUP_CHUNK elements each: shorter runs of in-order adds per lane (a float32 sum
# of 16M normals in 256 chunks: rms error 3.3e-3 against 16 chunks' 8.8e-3, in a numpy model of the kernel's order)
GROUP_MAX_PARTS, GROUP_CHUNK = 256, 1 << 16
GROUP_SPLITS = tuple(1 << k for k in range(GROUP_MAX_PARTS.bit_length() - 1, 0, -1))  # 256, 128, ..., 2
GROUP_MIN_SIZE = 1 << 16  # reduce size from which the split pays for the threads
SWAP_MIN_REDUCE = 2048  # reduce size from which the vector loads' panel no longer stays cached for the next row tile
PACK_MAX_BYTES = 256 << 10  # a packed panel lives on the thread's stack and should stay in L2 (512 KiB a core)
PACK_MIN_REDUCE = 32  # reduce size from which packing pays (matmul 1024: ~2.5x; q @ k.T over 64: ~2x)
# rows of the reuse axis a packed panel serves (each packed value feeds that many accumulators): fewer, and the copy
# costs more than it saves (a strided conv's 8 output channels or 8 columns pay: 164 -> 8.5 us at 8x8 out)
PACK_MIN_ROWS = 4
PACK_MIN_REUSE = 4  # reuse tiles a panel of plain (unit-stride, ungated) loads must serve to pay for its copy
GATHER_MAX_STRIDE = 4  # a vector axis whose loads step by up to this many elements: 16 lanes span 4 cache lines
MAX_ACC_VECTORS = 14  # accumulator registers of a vector tile: AVX2 has 16, one holds a loaded vector, one a broadcast
# accumulators of row_pack_opts's tile of 64-byte vectors: AVX-512 has 32 registers; a cache line of float32 rows
ROW_PACK_ACCUMULATORS = 16
CACHE_LINE = 64  # bytes
PANEL_L1_BYTES = 32 << 10  # a panel the tile rereads per row tile stays in L1 (32-48 KiB a core on x86)
SHORT_REDUCE = 16  # reduce size up to which a kernel with no tile takes a row of lanes along its store
LANE_MAX = 16  # lanes of that row: one AVX-512 vector of float32
# and at least: gcc vectorises no shorter row (a 2x2 max pool on 5 columns ran 4x slower as a row of 5 scalars)
LANE_MIN = 8
UNROLL_STEPS, UNROLL_MIN_REDUCE = 4, 512  # a packed tile's long reduce loop: steps unrolled (unroll_opts)
# a packed tile's rows past this many bytes (per column tile: rows x reduce) stream from L3 for every column tile: the
# column tiles go in groups of up to SPLIT_TILES sharing one panel, each row tile read once per group (column_groups)
SPLIT_MIN_ROW_BYTES, SPLIT_TILES, SPLIT_MIN_GROUPS = 2 << 20, 4, 8
# a panel spanning an output loop (a group's column tiles) may take this many: read by all its tiles from L2 (2 MiB a
# core on the AVX-512 host, half of it): matmul 1024's groups of 4 tiles 155-161 -> 163 GFLOP/s single-thread over
# pairs; matmul 2048's fours (1 MiB) over pairs 154-158 -> 158-160 single-thread, 2 threads 54.5 -> 53.0-53.6 ms
PACK_GROUP_BYTES = 1 << 20
# rows x vectors of a grouped matmul's tile (wide_tile_opts) by vector bytes: on AVX-512 24 of its 32 registers; on AVX2
# 10 of its 16 (gcc 12 spills two of 6 x 2's twelve in the inner loop: matmul 1024 on a Zen 3 host 4 x 2 62-97, 6 x 2
# 95-108, 5 x 2 141-168 GFLOP/s on 2 threads)
WIDE_TILE = {64: (6, 4), 32: (5, 2)}
CHANNEL_ACCUMULATORS = 8  # of a padded conv's channel tile on AVX2 (channel_tile_opts)
SHORT_TILE = 6  # rows of 2 vectors of a packed tile over a short reduce on AVX2 (short_tile_opts)
LANE_VECTORS = 4  # vector accumulators of a split full reduce's chunk (LANES): its adds don't wait on one register


# *** applying opts ***


def _replace_node(ctx: dict[UOp, UOp], x: UOp) -> UOp | None:
    return ctx.get(x)


# every node in ctx becomes its replacement; the replacements are new nodes, so this reaches a fixed point at once
pm_replace_nodes = PatternMatcher([
    (UPat((Ops.RANGE, Ops.REDUCE), name="x"), _replace_node),  # r -> ctx[r]
])  # fmt: skip


def _find_range(sink: UOp, axis: int) -> UOp:
    found = [u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[0] == axis]
    if len(found) != 1:
        raise ValueError(f"opt: no single loop with axis id {axis}: got {len(found)}, expected 1")
    return found[0]


def _check_split(opt: Opt, rng: UOp, axis_type: AxisType) -> int:
    """The axis size; raises ValueError unless `opt` can split `rng` (a RANGE of `axis_type` with a constant end)."""
    if rng.arg[1] is not axis_type:
        raise ValueError(f"opt: {opt.op.name} needs a {axis_type.name} axis: got axis {opt.axis} of {rng.arg[1].name}")
    if rng.src[0].op is not Ops.CONST:
        raise ValueError(f"opt: {opt.op.name} needs a constant axis size: got {rng.src[0].render()}")
    size = int(rng.src[0].arg)
    if opt.arg < 2 or size % opt.arg:
        raise ValueError(f"opt: {opt.op.name} by {opt.arg} of axis {opt.axis}: got size {size}, expected a multiple")
    return size


def upcast(sink: UOp, opt: Opt, new_axis: int) -> UOp:
    """r -> outer * arg + inner, with inner a new UPCAST range of `arg` iterations (outer gone when arg is the size)."""
    rng = _find_range(sink, opt.axis)
    size = _check_split(opt, rng, AxisType.LOOP)
    # GROUP's partials and PACK's panel are written in loops named by their ranges: splitting one would leave an
    # expression where the write's AFTER needs a loop
    if any(u.op is Ops.DEFINE_REG for u in sink.toposort()):
        raise ValueError(f"opt: UPCAST of axis {opt.axis}: got a kernel with GROUP or PACK applied, expected none")
    inner = UOp.range(opt.arg, new_axis, AxisType.UPCAST)
    outer = UOp.range(size // opt.arg, opt.axis, AxisType.LOOP)
    replacement = inner if size == opt.arg else outer * opt.arg + inner
    return graph_rewrite(sink, pm_replace_nodes, ctx={rng: replacement}, name="upcast")


def upcast_clamp(sink: UOp, opt: Opt, new_axis: int) -> UOp:
    """r -> min(outer * arg + inner, n - 1): an upcast by an amount that needn't divide the axis size n (a register
    tile of 6 rows over 1024). The last tile's lanes past the end take index n - 1, so they compute that index's value
    from the same loads in the same order and store it again, bit for bit: harmless where the kernel reads no buffer
    it writes and the tile's lanes run in one thread (an upcast loop is never split across threads). Where arg
    divides n it is UPCAST."""
    rng = _find_range(sink, opt.axis)
    if rng.arg[1] is not AxisType.LOOP or rng.src[0].op is not Ops.CONST:
        raise ValueError(f"opt: UPCAST_CLAMP needs a LOOP axis of constant size: got axis {opt.axis} of "
                         f"{rng.arg[1].name}, size {rng.src[0].render()}")  # fmt: skip
    size = int(rng.src[0].arg)
    if opt.arg >= 2 and size % opt.arg == 0:
        return upcast(sink, Opt(OptOps.UPCAST, opt.axis, opt.arg), new_axis)
    if not 2 <= opt.arg < size:
        raise ValueError(f"opt: UPCAST_CLAMP by {opt.arg} of axis {opt.axis}: got size {size}, expected 2 <= arg < n")
    if any(u.op is Ops.DEFINE_REG for u in sink.toposort()):  # as upcast's
        raise ValueError(f"opt: UPCAST_CLAMP of axis {opt.axis}: got GROUP or PACK applied before it, expected neither")
    if written := _read_outputs(sink):
        raise ValueError(f"opt: UPCAST_CLAMP of axis {opt.axis}: got a kernel reading buffers it writes {written}, "
                         "expected none (a repeated lane would read its own store)")  # fmt: skip
    inner = UOp.range(opt.arg, new_axis, AxisType.UPCAST)
    outer = UOp.range(-(-size // opt.arg), opt.axis, AxisType.LOOP)
    index, last = outer * opt.arg + inner, UOp.const(rng.dtype, size - 1)
    return graph_rewrite(sink, pm_replace_nodes, ctx={rng: (index < last).where(index, last)}, name="upcast clamp")


def _global_slot(index: UOp) -> int | None:
    """The slot of the global buffer an INDEX addresses (None for registers and locals)."""
    buf = index.src[0] if index.op is Ops.INDEX else None
    return int(buf.arg) if buf is not None and buf.op is Ops.DEFINE_GLOBAL else None


def _read_outputs(sink: UOp) -> list[int]:
    """The slots of the global buffers the kernel both stores to and loads from."""
    nodes = sink.toposort()
    stored = {_global_slot(u.src[0]) for u in nodes if u.op is Ops.STORE}
    loaded = {_global_slot(u.src[0]) for u in nodes if u.op is Ops.LOAD}
    return sorted(s for s in stored & loaded if s is not None)


def group(sink: UOp, opt: Opt, new_axis: int, new_reg: int) -> UOp:
    """REDUCE(x, r) -> partial[p] = REDUCE(x[r = p * chunk + q], q) in a loop over p; then REDUCE(partial[p'], p').

    The partials live in a register array private to the kernel's output loops; the p loop writes disjoint elements,
    so it may run in parallel, and the combination reads them in order.
    """
    rng = _find_range(sink, opt.axis)
    size = _check_split(opt, rng, AxisType.REDUCE)
    red = next(u for u in sink.toposort() if u.op is Ops.REDUCE and rng in u.src[1:])  # a REDUCE range has one
    if any(u.op is Ops.DEFINE_REG for u in red.src[0].toposort()):
        raise ValueError(f"opt: GROUP of axis {opt.axis}: got the combination of partials, expected a reduce of data")
    chunk = size // opt.arg
    parts = UOp.range(opt.arg, new_axis, AxisType.LOOP)
    within = UOp.range(chunk, opt.axis, AxisType.REDUCE)
    others = [r for r in red.src[1:] if r is not rng]
    partial_value = red.src[0].substitute({rng: parts * chunk + within}).reduce(within, *others, arg=red.arg)
    partials = UOp(Ops.DEFINE_REG, red.dtype.ptr(opt.arg, AddrSpace.REG), arg=new_reg)
    outer = _enclosing_loops(sink, red)
    written = partials.index(parts).store(partial_value)
    combine = UOp.range(opt.arg, new_axis + 1, AxisType.REDUCE)
    combined = UOp(Ops.AFTER, partials.dtype, (partials, written, *outer)).index(combine).load()
    return graph_rewrite(sink, pm_replace_nodes, ctx={red: combined.reduce(combine, arg=red.arg)}, name="group")


def lanes(sink: UOp, opt: Opt, new_axis: int, new_reg: int) -> UOp:
    """REDUCE(x, r) -> part[l] = REDUCE(x[r = q * arg + l], q) with l an UPCAST loop inside the q loop; then
    REDUCE(part[l'], l').

    Unlike GROUP's contiguous chunks, the partials interleave: one step of q reads `arg` consecutive elements, one per
    accumulator, so codegen/vectorize.py holds them as arg / width independent vector accumulators (a sum's adds no
    longer wait on one register) and each sums size / arg elements (less rounding error than one accumulator).
    """
    rng = _find_range(sink, opt.axis)
    size = _check_split(opt, rng, AxisType.REDUCE)
    red = next(u for u in sink.toposort() if u.op is Ops.REDUCE and rng in u.src[1:])
    # the value may hold another row statistic (a variance's mean) computed before this loop, and read a row buffer
    # or a packed panel along it, not a reduce or an earlier opt's partials
    if any(u.op is Ops.REDUCE or (u.op is Ops.INDEX and is_partials(u.src[0])) for u in dependents(red.src[0], rng)):
        raise ValueError(f"opt: LANES of axis {opt.axis}: got a reduce of a reduce or of partials, expected of data")
    lane = UOp.range(opt.arg, new_axis, AxisType.UPCAST)
    step = UOp.range(size // opt.arg, opt.axis, AxisType.REDUCE)
    others = [r for r in red.src[1:] if r is not rng]
    part_value = red.src[0].substitute({rng: step * opt.arg + lane}).reduce(step, *others, arg=red.arg)
    parts = UOp(Ops.DEFINE_REG, red.dtype.ptr(opt.arg, AddrSpace.REG), arg=new_reg)
    written = parts.index(lane).store(part_value)
    combine = UOp.range(opt.arg, new_axis + 1, AxisType.REDUCE)
    combined = UOp(Ops.AFTER, parts.dtype, (parts, written, *_enclosing_loops(sink, red))).index(combine).load()
    return graph_rewrite(sink, pm_replace_nodes, ctx={red: combined.reduce(combine, arg=red.arg)}, name="lanes")


def _enclosing_loops(sink: UOp, red: UOp) -> list[UOp]:
    """The loops a reduce's partials live in: the value's, less those closed by this reduce or one inside it, and
    every output loop nested outside one of those (else the partials' write would sit outside a loop it is in)."""
    ret = open_loops(red)
    if ret:
        deepest = max(range_key(r) for r in ret)
        loops = [u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP]
        ret |= {r for r in loops if range_key(r) < deepest}
    return sorted(ret, key=lambda r: r.arg)


def swap(sink: UOp, opt: Opt) -> UOp:
    """Two output loops trade axis ids, so each sits where the other did (their ends and uses stay); or two loops of
    the same reduces (their terms summed in another order: a conv's input gradient over its output channels outside
    the window's loops)."""
    first, second = _find_range(sink, opt.axis), _find_range(sink, opt.arg)
    kinds = (first.arg[1], second.arg[1])
    if kinds == (AxisType.REDUCE, AxisType.REDUCE):
        if any((first in u.src[1:]) != (second in u.src[1:]) for u in sink.toposort() if u.op is Ops.REDUCE):
            raise ValueError(f"opt: SWAP of reduce axes {opt.axis} and {opt.arg}: got loops of different reduces")
    elif kinds != (AxisType.LOOP, AxisType.LOOP):
        raise ValueError(f"opt: SWAP needs two LOOP axes or two REDUCE axes: got {kinds[0].name} and {kinds[1].name}")
    # a GROUP's partials are written inside the output loops nested outside them then: a later swap could move one
    # of those inside the write's loop (and its loop over partials is no output loop to swap)
    if any(u.op is Ops.DEFINE_REG for u in sink.toposort()):
        raise ValueError(f"opt: SWAP of axes {opt.axis} and {opt.arg}: got a kernel with GROUP applied, expected none")
    # substitute, not a rewrite to a fixed point: with equal ends the two new ranges are the old ones, swapped
    return sink.substitute(
        {first: UOp.range(first.src[0], opt.arg, kinds[0]), second: UOp.range(second.src[0], opt.axis, kinds[1])}
    )


def split(sink: UOp, opt: Opt, new_axis: int) -> UOp:
    """r -> outer * arg + inner, with inner a new LOOP range of `arg` iterations: the largest axis id, so it nests
    inside the output loops there are (a group's column tiles inside its row tiles, see column_groups)."""
    rng = _find_range(sink, opt.axis)
    size = _check_split(opt, rng, AxisType.LOOP)
    if any(u.op is Ops.DEFINE_REG for u in sink.toposort()):  # as upcast: a panel's fill loops are named by ranges
        raise ValueError(f"opt: SPLIT of axis {opt.axis}: got a kernel with GROUP or PACK applied, expected none")
    inner = UOp.range(opt.arg, new_axis, AxisType.LOOP)
    outer = UOp.range(size // opt.arg, opt.axis, AxisType.LOOP)
    replacement = inner if size == opt.arg else outer * opt.arg + inner
    return graph_rewrite(sink, pm_replace_nodes, ctx={rng: replacement}, name="split")


def _packed_load(sink: UOp, opt: Opt, across: UOp) -> UOp:
    """PACK's operand: the one global load from slot `opt.arg` inside a reduce that doesn't depend on `across` (in
    `x @ x` the other load of the same buffer does); across a reduce loop, the one load of that slot."""
    loads = [ld for ld in _reduce_loads(sink.toposort()) if ld.src[0].src[0].arg == opt.arg]
    if across.arg[1] is not AxisType.REDUCE:
        loads = [ld for ld in loads if across not in ld.src[0].toposort()]
    if len(loads) != 1:
        raise ValueError(f"opt: PACK of slot {opt.arg} across axis {opt.axis}: got {len(loads)} loads of it inside "
                         "reduces that don't depend on that axis, expected 1")  # fmt: skip
    return loads[0]


def pack(sink: UOp, opt: Opt, new_axis: int, new_reg: int) -> UOp:
    """buf[f(k, j)] inside output loop `axis` -> panel[k, j], a register array filled with buf[f(k', j')] by a copy
    nest placed outside the `axis` loop (once per iteration of the loops around it that the load depends on). Across
    a reduce loop the panel is one step of it: copied inside that loop, before the reduce loops within (a reduce too
    long for one panel, blocked by its outermost loop: a conv's weight gradient, one image's panel at a time).

    The panel is the load's values in the order the reduce reads them, contiguous (no cache-set conflicts between
    rows of a power-of-two stride, vector loads from one line); a gated load copies its zeros, so the read is
    ungated. The loaded values are the same, so results are bit for bit unchanged.
    """
    across = _find_range(sink, opt.axis)
    if across.arg[1] not in (AxisType.LOOP, AxisType.REDUCE):
        raise ValueError(f"opt: PACK needs a LOOP or REDUCE axis: got axis {opt.axis} of {across.arg[1].name}")
    load = _packed_load(sink, opt, across)
    value = _packed_value(sink, load, across)
    ranges = sorted({r for r in value.toposort() if r.op is Ops.RANGE}, key=range_key)
    # the loops nested outside `across` keep their values; the rest are copied in a nest of their own
    outer = [r for r in ranges if r.arg[1] is AxisType.LOOP and range_key(r) < range_key(across)]
    outer += [across] if across.arg[1] is AxisType.REDUCE and across in ranges else []  # a step of it
    packed = [r for r in ranges if r not in outer]
    if any(r.src[0].op is not Ops.CONST for r in packed):
        raise ValueError(f"opt: PACK of slot {opt.arg}: got a loop of symbolic size, expected constant sizes")
    size = math.prod(int(r.src[0].arg) for r in packed)
    limit = PACK_GROUP_BYTES if any(r.arg[1] is AxisType.LOOP for r in packed) else PACK_MAX_BYTES
    if size * load.dtype.itemsize > limit:
        raise ValueError(f"opt: PACK of slot {opt.arg}: got a {size * load.dtype.itemsize}-byte panel, "
                         f"expected at most {limit}")  # fmt: skip
    copies = {r: UOp.range(r.src[0], new_axis + i, AxisType.LOOP) for i, r in enumerate(packed)}
    panel = UOp(Ops.DEFINE_REG, load.dtype.ptr(size, AddrSpace.REG), arg=new_reg)
    position = flat_index(packed)
    filled = panel.index(position.substitute(copies)).store(value.substitute(copies))
    read = UOp(Ops.AFTER, panel.dtype, (panel, filled, *outer)).index(position).load()
    return sink.substitute({value: read})


# what a packed value may be computed from: elementwise math on loads, none of it per accumulator
_PROLOGUE_OPS = GroupOp.ALU | {Ops.LOAD, Ops.INDEX, Ops.CONST, Ops.RANGE, Ops.DEFINE_GLOBAL, Ops.CAST, Ops.BITCAST}


def _packed_value(sink: UOp, load: UOp, across: UOp) -> UOp:
    """The load, or the select that zeroes it outside its gate (a pad's read) when that is its only user and the gate
    doesn't depend on `across`: the panel then holds the zeros and its reads need no gate. Where the load is one factor
    of the reduce's product (its other factor runs over a loop the load doesn't: a conv's weights) and that factor is
    elementwise math on loads without `across` (a fused batchnorm + relu + pad of the conv's input), the whole factor:
    the panel holds it computed once, not per accumulator row."""
    if (factor := _packed_factor(sink, load, across)) is not None:
        return factor
    users = [u for u in sink.toposort() if load in u.src]
    if len(users) != 1 or users[0].op is not Ops.WHERE or users[0].src[1] is not load:
        return load
    gate, other = users[0].src[0], users[0].src[2]
    is_zero = other.op is Ops.CONST and other.arg == 0
    return users[0] if is_zero and across not in gate.toposort() else load


def _packed_factor(sink: UOp, load: UOp, across: UOp) -> UOp | None:
    own = {r for r in load.toposort() if r.op is Ops.RANGE}
    for mul in (u for u in sink.toposort() if u.op is Ops.MUL):
        for factor, other in (mul.src, mul.src[::-1]):
            nodes = factor.toposort()
            if factor is load or load not in nodes or across in nodes or any(n.op not in _PROLOGUE_OPS for n in nodes):
                continue
            if {r for r in nodes if r.op is Ops.RANGE} <= own and any(
                r.op is Ops.RANGE and r not in own for r in other.toposort()
            ):
                return factor
    return None


def apply_opts(sink: UOp, opts: tuple[Opt, ...], has_local: bool = False) -> UOp:
    """The kernel with each of `opts` applied in order, then its indexes simplified. Raises ValueError for an opt
    that doesn't fit the kernel. With `has_local` (GPU renderers) GROUP splits a reduce over a work-group's threads."""
    for opt in opts:
        nodes = sink.toposort()
        new_axis = max((u.arg[0] for u in nodes if u.op is Ops.RANGE), default=-1) + 1
        match opt.op:
            case OptOps.UPCAST | OptOps.UPCAST_CLAMP:
                sink = (upcast if opt.op is OptOps.UPCAST else upcast_clamp)(sink, opt, new_axis)
            case OptOps.LOCAL:
                sink = split_local(sink, opt.axis, opt.arg, new_axis)
            case OptOps.GROUP | OptOps.GROUPTOP if has_local or opt.op is OptOps.GROUPTOP:
                sink = split_group(sink, opt.axis, opt.arg, new_axis, top=opt.op is OptOps.GROUPTOP)
            case OptOps.GROUP:
                sink = group(sink, opt, new_axis, _next_reg(nodes))
            case OptOps.SWAP:
                sink = swap(sink, opt)
            case OptOps.PACK:
                sink = pack(sink, opt, new_axis, _next_reg(nodes))
            case OptOps.KEEP:  # codegen/rowbuffer.py
                sink = keep_row_value(sink, opt.axis, _next_reg(nodes))
            case OptOps.UNROLL:
                sink = unroll_reduce(sink, opt.axis, opt.arg, new_axis)
            case OptOps.SPLIT:
                sink = split(sink, opt, new_axis)
            case OptOps.LANES:
                sink = lanes(sink, opt, new_axis, _next_reg(nodes))
    return graph_rewrite(sink, sym, name="simplify optimized indexing") if opts else sink


# *** the heuristic ***


def stride(idx: UOp, rng: UOp) -> int | None:
    """How far `idx` moves when `rng` steps by one: the constant c of its term `rng * c` (None: `rng` is elsewhere,
    e.g. inside a div or mod, so the step is not one constant)."""
    ret = 0
    for term in split_uop(idx, Ops.ADD):
        if term is rng:
            ret += 1
        elif term.op is Ops.MUL and term.src[0] is rng and term.src[1].op is Ops.CONST:
            ret += int(term.src[1].arg)
        elif rng in term.toposort():
            return None
    return ret


def _first_divisor(size: int, amounts: tuple[int, ...], limit: int) -> int | None:
    return next((a for a in amounts if a <= min(size, limit) and size % a == 0), None)


def _next_reg(nodes: dict[UOp, None]) -> int:
    """The first DEFINE_REG number the kernel doesn't use yet (an opt's new accumulator or buffer)."""
    return max((u.arg for u in nodes if u.op is Ops.DEFINE_REG), default=-1) + 1


def _reduce_loads(nodes: dict[UOp, None]) -> list[UOp]:
    """The global loads inside reduces: the ones an upcast can reuse or vectorise."""
    reduced = {r for u in nodes if u.op is Ops.REDUCE for r in u.src[1:]}
    loads = [u for u in nodes if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    loads = [u for u in loads if u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    return [u for u in loads if reduced & {r for r in u.src[0].toposort() if r.op is Ops.RANGE}]


def register_tile(
    vector_size: int,
    reuse_size: int,
    width: int,
    max_vectors: int = MAX_ACC_VECTORS,
    accumulators: int = MAX_ACC_VECTORS,
) -> tuple[int, int]:
    """(vector axis amount, reuse axis amount) of a tile of vector accumulators: whole vectors of `width` lanes (at
    most `max_vectors` of them) times rows, at most `accumulators` registers. The most accumulators first (each load
    serves more of them, and more independent adds hide their latency), then the fewest loads per accumulator, then
    more rows (broadcasts are cheaper than vector loads, and the packed panel narrower). (0, 0): no whole vector
    divides the axis."""
    best: tuple[tuple[int, int, int], int, int] = ((0, 0, 0), 0, 0)
    for vectors in range(1, min(max_vectors, accumulators) + 1):
        if vector_size % (vectors * width):
            continue
        for rows in range(1, accumulators // vectors + 1):
            key = (vectors * rows, -(vectors + rows), rows)
            if reuse_size % rows == 0 and key > best[0]:
                best = (key, vectors * width, rows)
    return best[1], best[2]


def vector_tile_opts(loops: list[UOp], vector: UOp, strides: dict[UOp, list[int | None]], width: int) -> list[Opt]:
    """The upcasts of a register tile (`register_tile`) over the vector axis and its best reuse axis (the one whose
    rows share the most vector loads); [] when no whole vector divides the vector axis."""
    along = [i for i, s in enumerate(strides[vector]) if s]  # contiguous, or a strided conv's gathers
    reuse = [r for r in loops if r is not vector and any(strides[r][i] == 0 for i in along)]
    reuse.sort(key=lambda r: (sum(strides[r][i] == 0 for i in along), strides[r].count(0), r.arg[0]))
    rows_axis = reuse[-1] if reuse else None
    amount, rows = register_tile(int(vector.src[0].arg), int(rows_axis.src[0].arg) if rows_axis else 1, width)
    if not amount:
        return []
    ret = [Opt(OptOps.UPCAST, vector.arg[0], amount)]
    if rows_axis is not None and rows > 1:
        ret.insert(0, Opt(OptOps.UPCAST, rows_axis.arg[0], rows))  # the vector axis innermost: it is vectorised
    return ret


def strided_tile_opts(
    loops: list[UOp],
    loads: list[UOp],
    width: int,
    max_vectors: int = MAX_ACC_VECTORS,
    accumulators: int = MAX_ACC_VECTORS,
    skip: frozenset[UOp] = frozenset(),
) -> list[Opt]:
    """A register tile whose vector axis (not one in `skip`) no load is contiguous in (a @ b.T, Linear's x @ w.T):
    the innermost output axis some loads stride along (the others don't depend on it: broadcasts), with a reuse axis
    those loads don't depend on (two of them in a fused SwiGLU's gate and up projections), of up to `accumulators`
    vectors. Only worth it with a PACK of those loads (their panels are contiguous in the vector axis); [] otherwise."""
    strides = {r: [stride(ld.src[0].src[1], r) for ld in loads] for r in loops}
    for vector in reversed(loops):
        along = [i for i, s in enumerate(strides[vector]) if s]
        if vector in skip or not along or any(s is None for s in strides[vector]):
            continue
        reuse = [r for r in loops if r is not vector and all(strides[r][i] == 0 for i in along)]
        if not reuse:
            continue
        amount, rows = register_tile(
            int(vector.src[0].arg), int(reuse[-1].src[0].arg), width, max_vectors, accumulators
        )
        if amount and rows > 1:
            return [Opt(OptOps.UPCAST, reuse[-1].arg[0], rows), Opt(OptOps.UPCAST, vector.arg[0], amount)]
    return []


def row_tile_opts(loops: list[UOp], loads: list[UOp], width: int, max_vectors: int) -> list[Opt]:
    """A one-row tile of vectors along the innermost output axis some loads stride in, for a kernel with no reuse axis
    (a conv fused into the global average pool reading it: its output channels and the image are the only output
    loops). Only worth it with a PACK (`pack_row_opts`); [] when no whole vector divides such an axis."""
    for vector in reversed(loops):
        strides = [stride(ld.src[0].src[1], vector) for ld in loads]
        if any(strides) and None not in strides:
            amount, _ = register_tile(int(vector.src[0].arg), 1, width, max_vectors)
            return [Opt(OptOps.UPCAST, vector.arg[0], amount)] if amount else []
    return []


def pack_row_opts(sink: UOp, vector: Opt, loads: list[UOp], sizes: dict[int, int]) -> list[Opt]:
    """PACK for a one-row tile (`row_tile_opts`): the loads along its vector axis that don't depend on the innermost
    output loop left, packed outside it, when their panel serves PACK_MIN_ROWS rows: that loop's iterations times those
    of the reduces around theirs that they ignore (a pool's 2x2 over a conv's weights: 2 images x 4 = 8)."""
    by_axis = {u.arg[0]: u for u in sink.toposort() if u.op is Ops.RANGE}
    left = [a for a, size in sizes.items() if a != vector.axis or size > vector.arg]
    along = [ld for ld in loads if stride(ld.src[0].src[1], by_axis[vector.axis])]
    for across in sorted(left, reverse=True):
        packed = [ld for ld in along if stride(ld.src[0].src[1], by_axis[across]) == 0]
        if not packed:
            continue
        if len(packed) < len(along):  # a load left striding along the vector axis is gathered lane by lane: a fused
            return []  # residual's row sum (x[b, t, c] + pos[t, c] over c): 128 us tiled, 28 us untiled single-thread
        used = {r for ld in packed for r in ld.src[0].toposort() if r.op is Ops.RANGE}
        reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE and any(ld in u.src[0].toposort() for ld in packed)]
        around = {r for red in reduces for r in red.src[1:] if r not in used}
        if sizes[across] * math.prod(int(r.src[0].arg) for r in around) < PACK_MIN_ROWS:
            return []
        ret = [Opt(OptOps.PACK, across, slot) for slot in sorted({ld.src[0].src[0].arg for ld in packed})]
        return ret if _opts_apply(sink, (vector, *ret)) else []
    return []


def upcast_opts(
    loops: list[UOp], loads: list[UOp], acc_bytes: int, vector_width: int = 0, store: UOp | None = None
) -> list[Opt]:
    """A vector axis (some load contiguous in it, none strided) upcast by up to 8, then a reuse axis (the vector
    loads don't depend on it, so each serves all its rows) by up to 8, within UPCAST_BYTES of accumulators.
    `store` (the kernel's output index): an axis whose loads gather is a vector axis only where it is contiguous there.

    Without a vector axis nothing: the reduce loop stays innermost (vectorised as a `simd reduction` where its loads
    are contiguous); a tile of scalar accumulators would turn its loads into gathers.
    """
    strides = {r: [stride(ld.src[0].src[1], r) for ld in loads] for r in loops}
    candidates = [r for r in loops if 1 in strides[r] and all(s in (0, 1) for s in strides[r])]
    if candidates and vector_width and (tile := vector_tile_opts(loops, candidates[-1], strides, vector_width)):
        return tile
    if not candidates and vector_width:
        # a strided conv's or pool's output axis (stride 2 reads every other input): its loads become gathers the C
        # compiler vectorises (a 3x3 stride-2 max pool 100-280 -> 20 us); not an axis the output strides in (a conv's
        # input gradient whose channels merged with its taps, loads stepping by 3: stores 143 apart, 0.26 -> 0.52 ms)
        gathered = [r for r in loops if _gathers(strides[r]) and (store is None or stride(store, r) == 1)]
        return vector_tile_opts(loops, gathered[-1], strides, vector_width) if gathered else []
    budget = UPCAST_BYTES // acc_bytes
    if not candidates or (amount := _first_divisor(int(candidates[-1].src[0].arg), VECTOR_AMOUNTS, budget)) is None:
        return []
    vector = Opt(OptOps.UPCAST, candidates[-1].arg[0], amount)
    contiguous = [i for i, s in enumerate(strides[candidates[-1]]) if s == 1]
    # best reuse axis: the most vector loads saved, then the most loads saved, then the innermost axis
    reuse = [r for r in loops if r is not candidates[-1] and any(strides[r][i] == 0 for i in contiguous)]
    reuse.sort(key=lambda r: (sum(strides[r][i] == 0 for i in contiguous), strides[r].count(0), r.arg[0]))
    for r in reversed(reuse):
        if (amount := _first_divisor(int(r.src[0].arg), REUSE_AMOUNTS, budget // vector.arg)) is not None:
            return [Opt(OptOps.UPCAST, r.arg[0], amount), vector]  # the vector axis innermost: it is vectorised
    return [vector]


def _gathers(strides: list[int | None]) -> bool:
    """Do the loads step along an axis by small constant strides, some of them more than 1? gcc 12 vectorises such a
    load as two loads and a shuffle, or, gated (a padded stride-2 conv or pool), as a masked gather at the int
    subscript the C renderer gives it (cstyle._is_strided_gather)."""
    return any(strides) and all(s is not None and 0 <= s <= GATHER_MAX_STRIDE for s in strides)


def swap_opts(opts: list[Opt], reduce_size: int, sizes: dict[int, int]) -> list[Opt]:
    """For long reduces, the vector axis's loop outside the reuse axis's: the panel of vector loads (k rows of a few
    columns, far apart) then serves every row tile while it is cached, and the rows stream (matmul 2048: ~1.5x).

    `sizes` maps axis ids to loop sizes: an upcast by a whole axis leaves no loop of it to swap (nor one worth it)."""
    if len(opts) != 2 or reduce_size < SWAP_MIN_REDUCE or opts[0].axis > opts[1].axis:
        return []
    if any(sizes[o.axis] == o.arg for o in opts):
        return []
    return [Opt(OptOps.SWAP, opts[0].axis, opts[1].axis)]


def pack_opts(sink: UOp, opts: list[Opt], loads: list[UOp], reduce_size: int, sizes: dict[int, int]) -> list[Opt]:
    """For a reuse x vector tile (the last two of `opts`) over a long enough reduce: the vector axis's loop moved
    outside the reuse axis's (SWAP) and the vector loads read from a panel packed once per vector tile (PACK), which
    then serves every reuse tile from L1/L2 with contiguous vector loads (no cache-set conflicts of a power-of-two
    row stride). Where the tile takes the whole reuse axis, the panel goes outside an output loop the packed loads don't
    depend on (a small conv's rows: its weights packed once per image). Nothing when the panel serves too few rows to
    pay for the copy or doesn't fit."""
    if len(opts) < 2 or reduce_size < PACK_MIN_REDUCE:
        return []
    reuse, vector = opts[-2], opts[-1]
    if reuse.axis not in sizes or vector.axis not in sizes:
        return []
    by_axis = {u.arg[0]: u for u in sink.toposort() if u.op is Ops.RANGE}
    # the loads along the vector axis that serve every row of the reuse axis: the operand to pack (its panel is
    # contiguous in the vector axis whatever its stride in memory: b of a @ b.T too)
    strides = [
        (stride(ld.src[0].src[1], by_axis[vector.axis]), stride(ld.src[0].src[1], by_axis[reuse.axis])) for ld in loads
    ]
    slots = {ld.src[0].src[0].arg for ld, (along, across) in zip(loads, strides, strict=True) if along and across == 0}
    if not slots:
        return []
    packed = [ld for ld in loads if ld.src[0].src[0].arg in slots]
    ret: list[Opt] = []
    across, served = reuse.axis, sizes[reuse.axis]
    amounts = {o.axis: o.arg for o in opts}
    left = [a for a, size in sizes.items() if size > amounts.get(a, 1)]  # loops the upcasts leave
    if reuse.axis in left:
        # the reuse loop goes innermost among the output loops left (they trade axis ids): a conv's rows stay outside
        if inner := [a for a in left if a > reuse.axis]:
            ret, across = [Opt(OptOps.SWAP, reuse.axis, max(inner))], max(inner)
    else:  # the tile takes the whole reuse axis (a small conv's 4 columns): the panel goes outside the innermost loop
        # left that the packed loads don't depend on (its rows), and serves each of them
        fixed = [a for a in left if all(stride(ld.src[0].src[1], by_axis[a]) == 0 for ld in packed)]
        if not fixed:
            return []
        across = max(fixed)
        served *= sizes[across]
    # unit-stride ungated loads vectorise as they are: their panel pays only where it serves PACK_MIN_REUSE row tiles;
    # gated or strided ones (a conv's padded input, its weights along output channels) are masked or gathered in every
    # tile, so theirs pays from PACK_MIN_ROWS rows. Judged on the operand's own loads: in `a @ a` its slot's other
    # load is the rows' operand
    operand = [ld for ld, (along, step) in zip(loads, strides, strict=True) if along and step == 0]
    plain = all(len(ld.src[0].src) < 3 and stride(ld.src[0].src[1], by_axis[vector.axis]) == 1 for ld in operand)
    if served < PACK_MIN_ROWS or (plain and reuse.axis in left and sizes[reuse.axis] // reuse.arg < PACK_MIN_REUSE):
        return []
    if reuse.axis not in left and (outer := _outer_pack(sink, opts, ret, slots, fixed)):
        return outer
    if not plain and vector.axis in left and (hoisted := _hoist_panel_loop(sink, opts, ret, packed, left, by_axis)):
        ret, across = hoisted
    if plain and ret and reuse.axis == min(left):
        ret += column_groups(opts, reduce_size, sizes, packed[0].dtype.itemsize)
    ret += [Opt(OptOps.PACK, across, slot) for slot in sorted(slots)]
    return ret if _opts_apply(sink, (*opts, *ret)) else []


def column_groups(opts: list[Opt], reduce_size: int, sizes: dict[int, int], itemsize: int) -> list[Opt]:
    """For pack_opts's tile with its column (vector) loop swapped outermost: where the rows a column tile reads
    (rows x reduce) pass SPLIT_MIN_ROW_BYTES, that loop split so groups of column tiles share one packed panel
    and loop inside the row tiles: each row tile then streams from L3 once per group and is reread from L1/L2 by
    the group's other tiles (on AVX-512, 8 x 2 vectors over 4096 x 2048: pairs of 32-column tiles, 512 KiB of panel
    each; wide_tile_opts' 6 x 4 over matmul 1024 and 2048: pairs of 64-column tiles, 256 and 512 KiB each). []
    otherwise. The groups stay the parallel loop (at least SPLIT_MIN_GROUPS); each accumulator keeps its order."""
    reuse, vector = opts[-2], opts[-1]
    tiles, panel = sizes[vector.axis] // vector.arg, reduce_size * vector.arg * itemsize
    if sizes[reuse.axis] * reduce_size * itemsize < SPLIT_MIN_ROW_BYTES:
        return []
    fits = [g for g in range(SPLIT_TILES, 1, -1) if tiles % g == 0 and g * panel <= PACK_GROUP_BYTES]
    group = next((g for g in fits if tiles // g >= SPLIT_MIN_GROUPS), None)
    # after pack_opts's SWAP the column loop has the reuse loop's axis id
    return [Opt(OptOps.SPLIT, reuse.axis, group)] if group is not None else []


def _hoist_panel_loop(
    sink: UOp, opts: list[Opt], ret: list[Opt], packed: list[UOp], left: list[int], by_axis: dict[int, UOp]
) -> tuple[list[Opt], int] | None:
    """pack_opts's vector loop moved outside the output loops nested just outside it that the packed loads don't
    depend on (a batched x @ w.T: the batch loop), so its gathered panel is copied once per vector tile, not once per
    tile and batch; returns the opts so far with that SWAP and the loop to pack across (the first one left inside the
    vector loop), or None where no such loop sits there. Only for a single reduce loop (a matmul's): the copy of a
    strided panel costs about what the tile's FMAs cost over one batch of 64 rows (GPT's x @ w1.T 1.05-1.09 ->
    0.69-0.75 ms single-thread); loops keep their sizes and every accumulator its order, so results are unchanged."""
    if len([u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE]) != 1:
        return None
    vector, reuse = opts[-1], opts[-2]
    # where the vector loop sits after pack_opts's SWAP of the reuse loop inward (the loops trade axis ids)
    at = reuse.axis if any(o.op is OptOps.SWAP and o.axis == reuse.axis for o in ret) else vector.axis
    outside = sorted(a for a in left if a < at)
    ignored = [a for a in outside if all(stride(ld.src[0].src[1], by_axis[a]) == 0 for ld in packed)]
    run = [a for i, a in enumerate(outside) if set(outside[i:]) <= set(ignored)]  # the ignored loops just outside
    if not run:
        return None
    swapped = [*ret, Opt(OptOps.SWAP, run[0], at)]
    return swapped, min(a for a in left if a > run[0])


def _outer_pack(sink: UOp, opts: list[Opt], ret: list[Opt], slots: set[int], fixed: list[int]) -> list[Opt]:
    """pack_opts's PACK outside the outermost of the loops `fixed` the packed loads don't depend on, where its panel
    (which then spans the loops between, a conv's output-channel tiles) stays within PANEL_L1_BYTES: fewer copies (a
    conv's weights once per image, not per image row: the convnet step's conv2 forward 472 -> 386 us); [] otherwise."""
    if len(fixed) < 2:
        return []
    outer = [*ret, *(Opt(OptOps.PACK, min(fixed), slot) for slot in sorted(slots))]
    try:
        packed = apply_opts(sink, (*opts, *outer))
    except ValueError:
        return []
    panels = [u.dtype for u in packed.toposort() if u.op is Ops.DEFINE_REG]
    return outer if sum(p.size * p.base.itemsize for p in panels if isinstance(p, PtrDType)) <= PANEL_L1_BYTES else []


def row_pack_opts(sink: UOp, upcasts: list[Opt], reduce_size: int, sizes: dict[int, int], width: int) -> list[Opt]:
    """For a rows x vector tile (`upcasts`) whose rows' operand is contiguous along the rows but strided in the reduce
    and larger than the vector loads' operand (a weight gradient x.T @ g: both reduce over the tokens, their outer
    axis): a tile of a cache line of rows, the vector loop innermost and the rows' operand packed outside it once
    per row tile, so it is read once in all; the smaller vector operand is read per row tile, a whole line per step,
    from L2. pack_opts's tile instead packs the vector operand per column tile and reads the rows' a few floats per
    cache line, again for every column tile (the GPT step's FFN weight gradient (512 x 1024) @ (1024 x 128): 2.1 ms
    -> 1.2 ms single-thread). [] where that doesn't apply."""
    if len(upcasts) != 2 or not width or reduce_size < PACK_MIN_REDUCE:
        return []
    reuse, vector = upcasts
    if reuse.axis not in sizes or vector.axis not in sizes or sizes[vector.axis] % width:
        return []
    itemsize = max(u.dtype.itemsize for u in sink.toposort() if u.op is Ops.REDUCE)
    accumulators = _row_accumulators(width, itemsize)
    rows = _first_divisor(sizes[reuse.axis], tuple(range(CACHE_LINE // itemsize, PACK_MIN_ROWS - 1, -1)), accumulators)
    if rows is None:
        return []
    vectors = _first_divisor(sizes[vector.axis] // width, tuple(range(accumulators // rows, 0, -1)), accumulators)
    if vectors is None:
        return []
    ret = [Opt(OptOps.UPCAST, reuse.axis, rows), Opt(OptOps.UPCAST, vector.axis, vectors * width)]
    rows_slots, larger = _row_operand(sink, ret)
    if not rows_slots:
        return []
    if not larger:
        return _taller_tile(sink, upcasts, reduce_size, sizes, width, accumulators)
    across = vector.axis
    if vector.axis < reuse.axis:  # the vector loop goes inside the rows' (the two trade axis ids)
        ret, across = [*ret, Opt(OptOps.SWAP, vector.axis, reuse.axis)], reuse.axis
    ret += [Opt(OptOps.PACK, across, slot) for slot in rows_slots]
    return ret if _opts_apply(sink, ret) else []


def _row_operand(sink: UOp, tile: list[Opt]) -> tuple[list[int], bool]:
    """row_pack_opts's test, on the kernel tiled by `tile` (rows, vector upcasts: a reshaped operand's div and mod
    by the rows simplify away there): the slots of the loads that step by 1 along the rows (or by no one constant)
    and don't depend on the vector lanes, strided along every reduce loop, when every other load steps by 1 along
    the lanes and not with the rows, none gated; and whether the first read the more bytes."""
    try:
        tiled = apply_opts(sink, tuple(tile))
    except ValueError:
        return [], False
    nodes = tiled.toposort()
    upcast = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.UPCAST), key=lambda r: r.arg)
    if len(upcast) != 2:
        return [], False
    loads = _reduce_loads(nodes)
    steps = [(stride(ld.src[0].src[1], upcast[1]), stride(ld.src[0].src[1], upcast[0])) for ld in loads]
    # along the rows a step of 1, or of no one constant: a reshaped operand's mod that the simplifier leaves (a qkv
    # gradient's (3, b, h, t, d) read as 384 rows: ((r + 16 * o) % 32) for 16 rows)
    rows_loads = [ld for ld, s in zip(loads, steps, strict=True) if s[0] == 0 and s[1] in (1, None)]
    vector_loads = [ld for ld, s in zip(loads, steps, strict=True) if s == (1, 0)]
    if not rows_loads or len(rows_loads) + len(vector_loads) != len(loads):
        return [], False
    if any(len(ld.src[0].src) > 2 for ld in loads):  # gated loads (a pad's) stay with pack_opts, which copies zeros
        return [], False
    for ld in rows_loads:
        reduced = [r for r in ld.src[0].src[1].toposort() if r.op is Ops.RANGE and r.arg[1] is AxisType.REDUCE]
        if not reduced or any(stride(ld.src[0].src[1], r) in (None, 0, 1) for r in reduced):
            return [], False
    larger = _operand_bytes(rows_loads) > _operand_bytes(vector_loads)
    return sorted({ld.src[0].src[0].arg for ld in rows_loads}), larger


def _packed_strided_tile(
    sink: UOp, opts: list[Opt], rest: list[UOp], loads: list[UOp], width: int, acc_bytes: int, sizes: dict[int, int]
) -> tuple[list[Opt], list[Opt]]:
    """tile_opts's strided tile and its PACK ([] when none packs). The tile rereads its panel per row tile: from L1
    where a vector's column fits (x @ w.T over 512: 8 rows x 16 columns, a 32 KiB panel, 1.65 -> 1.2 ms; 4 x 32's 64
    KiB panel streamed from L2); else the widest within PACK_MAX_BYTES that packs."""
    reduce_size = max(_reduce_size(u) for u in sink.toposort() if u.op is Ops.REDUCE)
    max_vectors = PACK_MAX_BYTES // max(reduce_size * acc_bytes * width, 1)
    in_l1 = min(max_vectors, max(1, PANEL_L1_BYTES // max(reduce_size * acc_bytes * width, 1)))
    tile: list[Opt] = []
    for limit in dict.fromkeys((in_l1, max_vectors)):
        tile = strided_tile_opts(rest, loads, width, limit)
        if packed := pack_opts(sink, opts + tile, loads, reduce_size, sizes) if tile else []:
            if not opts and width * acc_bytes >= vectorize.WIDE_VECTOR_BYTES and limit >= 2:
                return _two_vector_tile(sink, tile, packed, reduce_size, sizes, width)
            if not opts and (
                short := short_tile_opts(sink, tile + packed, loads, reduce_size, sizes, width, acc_bytes)
            ):
                return short[:2], short[2:]  # on AVX2 (q @ k.T)
            return tile, packed
    return tile, []


def _two_vector_tile(
    sink: UOp, tile: list[Opt], packed: list[Opt], reduce_size: int, sizes: dict[int, int], width: int
) -> tuple[list[Opt], list[Opt]]:
    """A strided tile (x @ w.T's, its panel packed) on AVX-512 as ROW_PACK_ACCUMULATORS // 2 rows x 2 vectors where
    they divide the axes, else `tile` and `packed` as they are: register_tile's choice of 14 accumulators (4 x 3
    vectors over 384 columns, 4 x 2 over 512) leaves AVX-512's registers idle, and 4 x 4 streams a 4-vector panel
    (GPT's qkv x @ w.T 918 -> 720 us, its FFN up 1017 -> 959 us single-thread; 4 x 64: 916 and 1246)."""
    rows, vectors = ROW_PACK_ACCUMULATORS // 2, _tile_vectors(2)
    reuse, vector = tile
    if sizes[reuse.axis] % rows or sizes[vector.axis] % (vectors * width):
        return tile, packed
    wide = [Opt(OptOps.UPCAST, reuse.axis, rows), Opt(OptOps.UPCAST, vector.axis, vectors * width)]
    if wide == tile or not (wide_packed := pack_opts(sink, wide, _reduce_loads(sink.toposort()), reduce_size, sizes)):
        return tile, packed
    return wide, wide_packed


def _tile_vectors(vectors: int) -> int:
    """A packed register tile's vectors per row: `vectors`, or one where the host splits its 64-byte vectors
    (vectorize.split_wide_vectors: Zen 4). There 8 rows x 1 vector ran faster than 8 x 2 on each packed tile tried
    (kernels in turns, 2 threads): sdpa (4, 8, 256, 64)'s q @ k.T 1.47-2.61 -> 1.35-1.83 ms, its p @ v 1.60 -> 1.51
    ms, the GPT step's x @ w.T over 384 and 512 columns 503-523 -> 467-479 us and 676-726 -> 618-642 us (16 x 1 no
    faster than 8 x 2; 4 x 2 in between on q @ k.T, slower on p @ v). Whole cases, alternating processes: bench/ops.py's
    sdpa 4.60-5.06 -> 3.44-4.12 ms, the GPT step's best 20.6-23.5 -> 19.6-21.3 ms. On Zen 5 8 x 2 is the faster
    (test_attention_tiles)."""
    return 1 if vectorize.split_wide_vectors() else vectors


def _taller_tile(
    sink: UOp, upcasts: list[Opt], reduce_size: int, sizes: dict[int, int], width: int, accumulators: int
) -> list[Opt]:
    """pack_opts's tile (the vector loads' panel per column tile) with twice the rows where `accumulators` allow (16
    on AVX-512, of its 32 registers): each panel load feeds twice the accumulators, and the rows' operand is reread
    half as often. A weight gradient x.T @ g with g the larger (row_pack_opts's other case; GPT's (128 x 1024) @
    (1024 x 512): 4 x 32 -> 8 x 32, 1.08-1.11 -> 0.91-0.94 ms single-thread), and every packed tile on AVX-512 (matmul
    1024: 164 -> 190 GFLOP/s single-thread). [] where that doesn't fit."""
    reuse, vector = upcasts
    rows = reuse.arg * 2
    if not width or vector.arg % width or sizes[reuse.axis] % rows or rows * (vector.arg // width) > accumulators:
        return []
    tile = [
        Opt(OptOps.UPCAST, reuse.axis, rows),
        Opt(OptOps.UPCAST, vector.axis, _tile_vectors(vector.arg // width) * width),
    ]
    packed = pack_opts(sink, tile, _reduce_loads(sink.toposort()), reduce_size, sizes)
    return tile + packed if packed else []


def wide_tile_opts(
    sink: UOp, tile: list[Opt], loads: list[UOp], reduce_size: int, sizes: dict[int, int], width: int, acc_bytes: int
) -> list[Opt]:
    """For a packed tile whose column tiles go in groups (column_groups: matmul 1024 and 2048): a tile of WIDE_TILE rows
    x vectors (AVX2 below; on AVX-512 6 x 4, 24 of its 32 registers) instead of 8 x 2 (or register_tile's 5 x 2 over
    1000 rows), its rows clamped at the end (6 divides neither 1024 nor 2048: UPCAST_CLAMP repeats the last row in the
    last tile). Per reduce step it loads 4 vectors and broadcasts 6 floats for 24 fmas, where 8 x 2 loads 2 and
    broadcasts 8 for 16 (10 loads per 16 fmas capped the inner loop near 85% of a core). Its accumulators are variables
    (linearize.named_accumulators), its reduce loop unrolled by 4 (unroll_opts; 2 steps 1.5% slower, 8 3%). One core,
    generated C: matmul 1024 13.2-13.3 -> 12.5-12.6 ms, 2048 109-111 -> 102-103 ms, 1000 x 1024 x 1024 14.3 -> 12.5 ms,
    1536 49.9 -> 43.1 ms, (1030 x 1024) @ (1024 x 2048) 30.3 -> 25.7 ms; the same bits. [] elsewhere (too few groups:
    768 x 768 x 768). On AVX2, 5 x 2 instead of register_tile's 4 x 2: 7 loads per 10 fmas where 4 x 2 needs 6 per 8,
    and 10 chains of fmas in flight (a Zen 3 core keeps two 4-cycle fmas a cycle going: 8 chains at least)."""
    if (shape := WIDE_TILE.get(width * acc_bytes)) is None or not any(o.op is OptOps.SPLIT for o in tile):
        return []
    rows, vectors = shape
    reuse, vector = (o for o in tile if o.op is OptOps.UPCAST)
    lanes = vectors * width
    wide = [Opt(OptOps.UPCAST_CLAMP, reuse.axis, rows), Opt(OptOps.UPCAST, vector.axis, lanes)]
    if sizes[vector.axis] % lanes or sizes[reuse.axis] < rows * PACK_MIN_REUSE:
        return []
    packed = pack_opts(sink, wide, loads, reduce_size, sizes)
    return wide + packed if any(o.op is OptOps.SPLIT for o in packed) else []


def short_tile_opts(
    sink: UOp, tile: list[Opt], loads: list[UOp], reduce_size: int, sizes: dict[int, int], width: int, acc_bytes: int
) -> list[Opt]:
    """On AVX2, a packed tile of 4 rows x 2 vectors as more rows, the last row tile clamped (as wide_tile_opts'): over a
    reduce too short to unroll (under UNROLL_MIN_REDUCE) SHORT_TILE rows, 12 of the 16 registers accumulating, 8 loads
    per 12 fmas where 4 x 2 takes 6 per 8; over an unrolled one WIDE_TILE's 5 rows (gcc 12 spills 2 of 12 there). Zen 3,
    2 threads: sdpa (4, 8, 256, 64)'s q @ k.T 2.9-3.4 -> 1.6-2.0 ms and p @ v 2.3-3.9 -> 1.6-1.7 ms (5 rows: 2.6 and
    1.6); the GPT step's (1024 x 512) @ (512 x 128) 1.35-1.6 -> 0.88-0.92 ms (6 rows not unrolled 0.90-0.94), its
    GELU backward fused after a matmul (an epilogue's selects) 1.66-1.80 -> 1.34-1.38 ms as 6 rows. [] elsewhere, and
    where a mask clips a reduce loop per row (codegen/clip.py; a clamped tile would not): `_clips`."""
    if width * acc_bytes != vectorize.VECTOR_BYTES:
        return []
    upcasts = [o for o in tile if o.op is OptOps.UPCAST]
    if len(upcasts) != 2 or upcasts[0].arg != 4 or upcasts[1].arg != 2 * width:
        return []
    reuse, vector = upcasts
    rows = SHORT_TILE if reduce_size < UNROLL_MIN_REDUCE else WIDE_TILE[vectorize.VECTOR_BYTES][0]
    if sizes[reuse.axis] < rows * PACK_MIN_REUSE or _clips(sink):  # the clip rewrite last: the costliest test
        return []
    short = [Opt(OptOps.UPCAST_CLAMP, reuse.axis, rows), vector]
    packed = pack_opts(sink, short, loads, reduce_size, sizes)
    return short + packed if packed and _opts_apply(sink, short + packed) else []


def _clips(sink: UOp) -> bool:
    """Whether codegen/clip.py ends some reduce loop of the untiled kernel early (a mask of terms or of the value
    read). A tile's lanes only narrow what it proves (a loop ends where its rest is the identity on every lane), so a
    kernel it leaves alone untiled it leaves alone tiled: an epilogue's selects, a padded input's gated loads."""
    if not any(u.op is Ops.WHERE or (u.op is Ops.INDEX and len(u.src) > 2) for u in sink.toposort()):
        return False
    gated = graph_rewrite(sink, pm_simplify_gates, name="simplify gates")
    return clip_reduce_loops(gated) is not gated


def _operand_bytes(loads: list[UOp]) -> int:
    """Bytes of the buffers the loads read (each once)."""
    bufs = {ld.src[0].src[0] for ld in loads}
    return sum(b.dtype.size * b.dtype.base.itemsize for b in bufs if isinstance(b.dtype, PtrDType))


def group_opts(sink: UOp, nodes: dict[UOp, None]) -> list[Opt]:
    """A full reduction (no output loops) of at least GROUP_MIN_SIZE elements split into GROUP_PARTS partials, or more
    for a big one (chunks of GROUP_CHUNK elements, at most GROUP_MAX_PARTS of them). With
    several reduces, the one no other holds that holds the most (a fused cross-entropy's sum over rows holds each
    row's max and sum: one step of it reads a row, so 4096 steps are worth the threads)."""
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    held = {v: _reduce_size(v) for u in reduces for v in u.src[0].toposort() if v.op is Ops.REDUCE}
    inner = {u: max((n for v, n in held.items() if v in u.src[0].toposort()), default=1) for u in reduces}
    top = max((u for u in reduces if u not in held), key=lambda u: inner[u] * _reduce_size(u), default=None)
    if top is None:
        return []
    for rng in sorted(top.src[1:], key=lambda r: r.arg):
        size = int(rng.src[0].arg) if rng.src[0].op is Ops.CONST else 0
        # a reduce of data counts all its loops: a sum over (4096, 4096) is as big as one over 16M (it ran on one
        # thread); one of reduces counts its own loop (GPT's loss over (16, 64) rows of 98 ran 1.7x slower split)
        total = size * inner[top] if inner[top] > 1 else _reduce_size(top)
        limit = min(GROUP_MAX_PARTS, max(GROUP_PARTS, total // GROUP_CHUNK))
        parts = _first_divisor(size, GROUP_SPLITS, limit)
        if total >= GROUP_MIN_SIZE and parts is not None:
            ret = [Opt(OptOps.GROUP, rng.arg[0], parts)]
            return ret + lane_opts(sink, ret, top)
    return []


def lane_opts(sink: UOp, opts: list[Opt], red: UOp) -> list[Opt]:
    """LANES along the innermost loop of a GROUP's partial reduce (float32/float64, its value with a vector form):
    LANE_VECTORS vector accumulators a chunk instead of the one `omp simd reduction` keeps. A sum of 16M floats, side
    by side: one thread 2.3-2.7% faster, 2 threads the same at the memory limit on an idle machine (~1150 us) and
    3-4% faster with the other core busy; error against float64 3.4x lower. Its vectors are the host's streaming size
    (vectorize.stream_vector_bytes: 32 bytes on Zen 4). [] for any other reduce or an innermost loop (a grouped one's
    chunk) of no whole step of lanes."""
    lanes = LANE_VECTORS * vectorize.stream_vector_bytes() // red.dtype.itemsize
    inner = max(red.src[1:], key=lambda r: r.arg)
    if red.dtype not in VECTOR_DTYPES or red.arg not in vectorize.VECTOR_REDUCES or inner.src[0].op is not Ops.CONST:
        return []
    size = int(inner.src[0].arg) // (opts[0].arg if inner.arg[0] == opts[0].axis else 1)  # a grouped loop's chunk
    if size % lanes:
        return []
    ret = [Opt(OptOps.LANES, inner.arg[0], lanes)]
    try:
        applied = apply_opts(sink, (*opts, *ret))
    except ValueError:  # a reduce of a reduce (a fused cross-entropy's sum over rows)
        return []
    return ret if vectorize.vectorize_upcast(applied) is not applied else []


def _reduce_size(red: UOp) -> int:
    """Elements a reduce combines (0 for a symbolic loop)."""
    return math.prod(int(r.src[0].arg) if r.src[0].op is Ops.CONST else 0 for r in red.src[1:])


def hand_coded_opts(sink: UOp) -> list[Opt]:
    """The opts for a kernel with one STORE and a reduce: upcasts when it has output loops, else a GROUP; for one
    without a reduce, `spread_opts`. A row kernel (its output loops kept as loops) then takes `row_lane_opts`."""
    opts = _hand_coded_opts(sink)
    return opts + row_lane_opts(sink, opts) if all(o.op is OptOps.KEEP for o in opts) else opts


ROW_LANE_STEPS = 4  # steps of LANES a row's reduce takes at least (a shorter one is mostly its partials' combination)
_TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})


def _inline_exp2(red: UOp, math: set[Ops]) -> bool:
    """Whether a sum whose terms call `math` runs them inline as vectors: float32 exp2 alone on an AVX-512 host
    (renderer/cstyle.py's fg_exp2_float16; the other vector math calls libmvec, whose call spills the registers)."""
    wide = vectorize.host_vector_bytes() == vectorize.WIDE_VECTOR_BYTES
    return math == {Ops.EXP2} and red.dtype == dtypes.float32 and wide


def row_lane_opts(sink: UOp, opts: list[Opt]) -> list[Opt]:
    """LANES for each sum over a row in a kernel whose output loops stay loops (a layernorm's mean and variance, an
    RMSNorm's sum of squares, a row sum, a norm's gradient sums): LANE_VECTORS vector accumulators instead of the one
    `omp simd reduction` keeps, whose adds wait on each other (4 cycles each, 128 a row of 1024 floats, while its loads
    come from L1). Layernorm forward at (4096, 1024), heuristic vs LANES on both sums in one process: 2 threads
    1.52 -> 1.04 ms best (1.80 -> 1.47 median), one thread 2.95 -> 2.37 ms; RMSNorm 0.94 -> 0.80 ms.

    A float32 max over a row (a softmax's) takes LANE_VECTORS vector maxima the same way: one running max per lane
    waits 5 cycles a step on its compare and select, 4 independent ones don't. A sum whose terms call exp2 (a
    softmax's, a log-softmax's) takes one vector of lanes where the vector exp2 is
    inline (`_inline_exp2`): the loop is bound by the exp, and it also fills the row buffer KEEP made, as vectors.
    Softmax forward (4096, 1024), 2 threads, best of 60 in alternating processes: 1.20-1.60 -> 0.89-0.94 ms with the
    exp sum's vector, 0.78-0.90 with the max's lanes too; log-softmax 1.23-1.31 -> 0.75-0.87. Not for other math
    (log, sin; exp2 on AVX2, a libmvec call), a loop of fewer than ROW_LANE_STEPS steps of lanes, or one the vector
    forms can't express."""
    nodes = apply_opts(sink, tuple(opts)).toposort()  # after KEEP: a sum of a row buffer's exp no longer calls exp
    if not any(u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP for u in nodes):
        return []  # a full reduction: group_opts splits it, with lane_opts
    kept = {o.axis for o in opts if o.op is OptOps.KEEP}
    ret: list[Opt] = []
    for red in (u for u in nodes if u.op is Ops.REDUCE):
        row_max = red.arg is Ops.MAX and red.dtype == dtypes.float32  # vector max: lane masks of float32 lanes
        if len(red.src) != 2 or red.dtype not in VECTOR_DTYPES or not (red.arg in vectorize.VECTOR_REDUCES or row_max):
            continue
        rng, lanes = red.src[1], LANE_VECTORS * vectorize.host_vector_bytes() // red.dtype.itemsize
        if rng.src[0].op is not Ops.CONST:  # before the walk over the sum's terms below
            continue
        if (math := {u.op for u in dependents(red.src[0], rng)} & _TRANSCENDENTAL) and not _inline_exp2(red, math):
            continue
        if math:  # bound by the exp, not the adds: one vector, whose loop also fills the kept row buffer
            lanes = vectorize.host_vector_bytes() // red.dtype.itemsize
        elif rng.arg[0] in kept:
            continue
        size = int(rng.src[0].arg)
        if size % lanes or size < ROW_LANE_STEPS * lanes:
            continue
        trial = [*ret, Opt(OptOps.LANES, rng.arg[0], lanes)]
        try:
            applied = apply_opts(sink, (*opts, *trial))
        except ValueError:  # a sum of another reduce over the row, or of partials
            continue
        if vectorize.vectorize_upcast(applied, masks=True) is not applied:  # the C renderer's forms (row ops: CPU)
            ret = trial
    return ret


def _hand_coded_opts(sink: UOp) -> list[Opt]:
    nodes = sink.toposort()
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    loops = [u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP]
    if len(stores := [u for u in sink.src if u.op is Ops.STORE]) != 1:
        return sibling_opts(sink, stores, reduces, loops)
    if not reduces:
        return spread_opts(nodes) or transpose_opts(stores[0], nodes) or exp_vector_opts(sink, stores[0], nodes)
    if not loops:
        return group_opts(sink, nodes)
    # an upcast only pays where a reduce sits inside output loops (a reduce outside them already runs once)
    inside = {r for red in reduces for r in red.src[0].toposort() if r.op is Ops.RANGE and r.arg[1] is AxisType.LOOP}
    if not inside:
        return []
    # a reduce that ignores an output loop nested inside one it uses (a fused row op's statistic) runs once per row,
    # outside that loop; upcast loops nest innermost, so an upcast of a loop it uses would move it inside (x.T's
    # softmax: 50 ms -> 3.4 s): such a kernel keeps its loops (and may keep a row buffer)
    if any(_ignores_inner_loop(red, loops) for red in reduces):
        return keep_opts(sink, reduces)
    sized = sorted((r for r in loops if r.src[0].op is Ops.CONST), key=lambda r: r.arg)
    # an output loop no reduce depends on, around one they do, would repeat them: inside all of them, they run once
    hoist = [r for r in sized if r not in inside and any(r.arg[0] < x.arg[0] for x in inside)]
    opts = [Opt(OptOps.UPCAST, r.arg[0], amount) for r in hoist if (amount := _largest_divisor(r)) is not None]
    acc_bytes = max(u.dtype.itemsize for u in reduces)
    # a tile's loops are ones every reduce depends on: upcasting a loop a reduce ignores (a fused softmax's loop over
    # the row it has reduced) would compute that reduce again per tile of the loop instead of once before it
    every = set.intersection(*({r for r in red.src[0].toposort() if r.op is Ops.RANGE} for red in reduces))
    rest = [r for r in sized if r.arg[0] not in {o.axis for o in opts} and r in every]
    # float32/float64 reduces become vector code (codegen/vectorize.py): a tile of whole vector registers, of the
    # widest vectors whose lanes divide an output axis
    widths = (
        [n // acc_bytes for n in vectorize.vector_sizes()] if {u.dtype for u in reduces} <= set(VECTOR_DTYPES) else [0]
    )
    for width in widths:
        tile = tile_opts(sink, opts, rest, width, acc_bytes)
        vector = [o for o in tile if o.op is OptOps.UPCAST]
        if width == widths[-1] or (vector and vector[-1].arg % width == 0):
            if opts or tile:
                return opts + tile + unroll_opts(sink, opts + tile)
            # a fused row op: a row buffer; a short reduce: lanes along the store, else its loop unrolled
            return keep_opts(sink, reduces) or store_lane_opts(sink, rest, reduces) or far_reduce_opts(sink, reduces)
    raise AssertionError("hand_coded_opts: the last width always returns")


def sibling_opts(sink: UOp, stores: list[UOp], reduces: list[UOp], loops: list[UOp]) -> list[Opt]:
    """For row kernels merged into one (schedule/siblings.py: several stores at one index, each a fused row op's
    output) the row op's opts: its loops kept and a row buffer where a costly value is computed again over the row
    (a softmax's exp, read by its output and by its gradient's sum: fwd+bwd at (4096, 1024) 5.9 -> 4.2 ms). []
    for any other kernel of several stores."""
    if not stores or len({s.src[0].src[1] for s in stores if s.src[0].op is Ops.INDEX}) != 1 or not reduces:
        return []
    return keep_opts(sink, reduces) if any(_ignores_inner_loop(red, loops) for red in reduces) else []


def spread_opts(nodes: dict[UOp, None]) -> list[Opt]:
    """For an elementwise kernel whose loads read its innermost output loop x as x // c, c < LANE_MIN (a max pool's
    gradient spread over its 2x2 windows, a nearest upsample): x upcast by c, so those loads index by the outer loop
    alone and each value serves c outputs, loaded and computed once (the C renderer unrolls the c outputs and
    vectorises the loop around them); the convnet's pool backward r_64_16_2_13_26_2 0.50 -> 0.30 ms single-thread
    (gathers at x // 2 before). [] otherwise."""
    loops = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP), key=range_key)
    if not loops or loops[-1].src[0].op is not Ops.CONST:
        return []
    inner, size = loops[-1], int(loops[-1].src[0].arg)
    divisors = sorted(
        int(u.src[1].arg) for u in nodes if u.op is Ops.IDIV and u.src[0] is inner and u.src[1].op is Ops.CONST
    )
    # the loop left takes the vector lanes: at least LANE_MIN of them (x of 10 by 2: 5 stayed scalar, 10% slower)
    amount = next((c for c in divisors if 2 <= c < LANE_MIN and size % c == 0 and size // c >= LANE_MIN), None)
    return [Opt(OptOps.UPCAST, inner.arg[0], amount)] if amount is not None else []


def _indexed_loads(nodes: dict[UOp, None]) -> list[UOp]:
    """The LOADs that read a buffer at an index (whose stride along a loop `stride` can tell)."""
    return [u for u in nodes if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and len(u.src[0].src) > 1]


def exp_vector_opts(sink: UOp, store: UOp, nodes: dict[UOp, None]) -> list[Opt]:
    """For an elementwise float32 kernel whose value calls exp2 (and no other math), storing along its innermost
    output loop and reading along it or not at all, on a host whose vector exp2 is vector code (`vector_exp2`): that
    loop upcast by one vector. On AVX-512 the exp then runs as the renderer's inline fg_exp2_float16 (where an `omp
    simd` loop calls libmvec's per vector) and a big kernel's output streams as whole vector lines
    (renderer/stream.py): `bench/ops.py`'s chain 4M on a Zen 4 host, C harness in turns, 1.05-1.16 -> 0.81-0.85 ms
    (the vector form without streaming stores 0.90-1.07, libmvec's exp in it 0.95-1.05). An activation with a
    compare (sigmoid, SiLU, GELU), which GCC's loop leaves scalar, takes its compare as lane masks: sigmoid on 4M,
    2.3 -> 0.9 ms on AVX-512, 3.0 -> 1.2 ms as AVX2 code (the same host, -mno-avx512f). [] otherwise, or where the
    vector forms can't express the kernel."""
    if not vectorize.vector_exp2() or store.src[1].dtype != dtypes.float32:
        return []
    lanes = vectorize.host_vector_bytes() // store.src[1].dtype.itemsize
    if {u.op for u in nodes} & _TRANSCENDENTAL != {Ops.EXP2} or store.src[0].op is not Ops.INDEX:
        return []
    loops = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP), key=range_key)
    if not loops or loops[-1].src[0].op is not Ops.CONST or int(loops[-1].src[0].arg) % lanes:
        return []
    inner = loops[-1]
    if stride(store.src[0].src[1], inner) != 1:
        return []
    if any(stride(ld.src[0].src[1], inner) not in (0, 1) for ld in _indexed_loads(nodes)):
        return []
    opts = [Opt(OptOps.UPCAST, inner.arg[0], lanes)]
    try:
        applied = apply_opts(sink, tuple(opts))
    except ValueError:
        return []
    return opts if vectorize.vectorize_upcast(applied, masks=True) is not applied else []


# rows of a transposed copy's tile: each row a store stream. 16 rows 4 KB apart (a 1024-column transpose) thrash a
# 12-way L1 (1.85 ms); 8 rows: 0.21-0.25 ms
TRANSPOSE_ROWS = 8
TRANSPOSE_MIN_STRIDE = 16  # a load stepping this far along the innermost loop reads a new cache line every step


def transpose_opts(store: UOp, nodes: dict[UOp, None]) -> list[Opt]:
    """For an ungated elementwise kernel storing along its innermost loop while some loads step far along it (a
    transposed read: x.T.contiguous(), a permute), all of them contiguous along one outer loop: that loop upcast by
    TRANSPOSE_ROWS, so those loads read whole runs of it as vectors and the stores run as that many streams (a 1024²
    transpose 2.1-2.3 -> 0.21-0.25 ms on two cores; by 4, gcc vectorised the innermost loop as gathers: 20 ms).
    `store`: the kernel's one STORE. [] otherwise."""
    loops = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP), key=range_key)
    if len(loops) < 2 or store.src[0].op is not Ops.INDEX or any(u.op is Ops.WHERE for u in nodes):
        return []
    inner = loops[-1]
    if stride(store.src[0].src[1], inner) != 1:
        return []
    steps = {ld: stride(ld.src[0].src[1], inner) for ld in _indexed_loads(nodes)}
    far = [ld for ld, s in steps.items() if s is not None and abs(s) >= TRANSPOSE_MIN_STRIDE]
    if not far or any(s not in (0, 1) for ld, s in steps.items() if ld not in far):
        return []
    across = [r for r in loops[:-1] if all(stride(ld.src[0].src[1], r) == 1 for ld in far)]
    if not across or across[-1].src[0].op is not Ops.CONST or int(across[-1].src[0].arg) % TRANSPOSE_ROWS:
        return []
    return [Opt(OptOps.UPCAST, across[-1].arg[0], TRANSPOSE_ROWS)]


def tile_opts(sink: UOp, opts: list[Opt], rest: list[UOp], width: int, acc_bytes: int) -> list[Opt]:
    """The upcasts (and SWAP or PACK) of a reduce kernel's register tile with vectors of `width` lanes (0: none)
    over the output loops `rest`, after the hoisting upcasts `opts`."""
    nodes = sink.toposort()
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    loads = _reduce_loads(nodes)
    store = next((u.src[0].src[1] for u in sink.src if u.op is Ops.STORE and u.src[0].op is Ops.INDEX), None)
    upcasts = upcast_opts(rest, loads, acc_bytes, width, store)
    reduce_size = max(_reduce_size(u) for u in reduces)
    sizes = {r.arg[0]: int(r.src[0].arg) for r in rest}
    narrow = min(vectorize.vector_sizes()) // acc_bytes  # lanes of the narrowest vector: a longer axis gets whole
    # vectors at some width (hand_coded_opts tries each), so only a shorter one turns to the strided tile
    fractional = bool(width and upcasts and upcasts[-1].arg % width)  # no whole vectors along the columns
    # a conv (a reduce over a window: several reduce loops) whose columns' tile is narrower than any vector
    scalar_conv = fractional and upcasts[-1].arg < narrow and any(len(u.src) > 2 for u in reduces)
    # on AVX2 a padded conv takes the channel tile even where whole vectors fit its columns (channel_tile_opts)
    whole = 0 < width * acc_bytes < vectorize.WIDE_VECTOR_BYTES and bool(upcasts) and upcasts[-1].arg % width == 0
    if (fractional or whole) and (
        channels := channel_tile_opts(sink, rest, loads, width, acc_bytes, ungated=scalar_conv, whole=whole)
    ):
        return channels
    if width and not (upcasts and upcasts[-1].arg % width == 0) and not (upcasts and sizes[upcasts[-1].axis] >= narrow):
        # no whole vectors along a contiguous output axis (none: a @ b.T; or a small conv's 2 or 4 columns): a tile
        # along an axis the loads stride in, with a packed panel, takes the whole vector registers (8x2 scalars ->
        # 2x4 vectors on a 2x2 conv of 64 channels) as many vectors as keep a panel of the whole reduce within
        # PACK_MAX_BYTES (fewer columns for a long one)
        max_vectors = PACK_MAX_BYTES // max(reduce_size * acc_bytes * width, 1)
        if not opts and (shared := shared_panel_opts(sink, rest, loads, width, acc_bytes, max_vectors)):
            return shared
        if not opts and not max_vectors and (blocked := reduce_panel_opts(sink, rest, loads, width, acc_bytes)):
            return blocked
        tile, packed = _packed_strided_tile(sink, opts, rest, loads, width, acc_bytes, sizes)
        if (
            not packed
            and not upcasts
            and not opts
            and reduce_size >= PACK_MIN_REDUCE
            and (row := row_tile_opts(rest, loads, width, max_vectors))
        ):
            tile, packed = row, pack_row_opts(sink, row[0], loads, sizes)
        if packed or not upcasts:
            return tile + packed if packed else []
    if not opts and (rows := row_pack_opts(sink, upcasts, reduce_size, sizes, width)):
        return rows
    if packed := pack_opts(sink, opts + upcasts, loads, reduce_size, sizes):
        # on AVX-512 twice the rows where its 32 registers allow (x @ w.T over 384: 4 x 32 -> 8 x 32, 832 -> 679 us)
        accumulators = _row_accumulators(width, acc_bytes)
        taller = _taller_tile(sink, upcasts, reduce_size, sizes, width, accumulators) if len(upcasts) == 2 else []
        if not opts and len(upcasts) == 2:
            tile = taller or upcasts + packed
            return (
                wide_tile_opts(sink, tile, loads, reduce_size, sizes, width, acc_bytes)
                or short_tile_opts(sink, tile, loads, reduce_size, sizes, width, acc_bytes)
                or tile
            )
        return upcasts + packed
    if len(upcasts) == 2 and upcasts[0].arg >= 4 and sizes.get(upcasts[0].axis) == upcasts[0].arg:
        # the rows took the whole reuse axis, so no loop is left to pack the vector loads outside: with half of it
        # the panel serves both halves and the tile reads it ungated (a 16x16 conv of 8 channels: 8x16 over masked
        # input loads 42 -> 12 us as 4x16 from a packed row); pack_opts keeps plain loads (a matmul's) unpacked
        halved = [Opt(OptOps.UPCAST, upcasts[0].axis, upcasts[0].arg // 2), upcasts[1]]
        if upcasts[0].arg % 2 == 0 and (packed := pack_opts(sink, opts + halved, loads, reduce_size, sizes)):
            return halved + packed
    return upcasts + swap_opts(upcasts, reduce_size, sizes)


def channel_tile_opts(
    sink: UOp,
    rest: list[UOp],
    loads: list[UOp],
    width: int,
    acc_bytes: int,
    ungated: bool = False,
    whole: bool = False,
) -> list[Opt]:
    """For a padded conv whose rows are no whole number of `width` lanes (56 columns of 16): the strided tile over its
    output channels (the weights' axis: a few columns of the image as rows, the input broadcast) with the weights packed
    once outside the outermost output loop they don't depend on (the batch), not a tile of narrower vectors along the
    columns over a panel of the input rows that every channel tile rereads from L2 (bench/conv.py's 8x64x56x56 forward:
    26 -> 10-15 ms single-thread). [] unless the loads along the columns are gated (a pad's), or `ungated`: a conv whose
    columns' own tile is narrower than any vector (the convnet's conv1, 26 uint8 columns: 8 channels x 2 columns of
    scalars 3.3 ms -> 13 columns x 16 channels 0.33 ms single-thread). On AVX-512 the tile takes 16 accumulators
    (`_row_accumulators`): register_tile's 4 columns x 4 vectors of channels, where 14 gave 7 x 2: each gated broadcast
    of the input feeds twice the FMAs (the 8x64x56x56 forward 14.5 -> 12.8 ms single-thread CPU time, 4% on its input
    gradient). On AVX2 it is taken where whole vectors divide the columns too (`whole`), as 4 columns x 2 vectors of
    channels (CHANNEL_ACCUMULATORS): the columns' tile of 2 channels x 7 vectors over a packed input panel folds each of
    its 7 loads into 2 fmas (16 loads per 14 fmas) and gcc 12 spills its 14 accumulators; 7 x 2 channel vectors spill
    too (Zen 3, 2 threads: the 8x64x56x56 forward 20.3-22.1 -> 15.5-17.4 ms)."""
    if not ungated and not any(len(ld.src[0].src) > 2 for ld in loads):
        return []
    if not whole:
        tile = strided_tile_opts(rest, loads, width, accumulators=_row_accumulators(width, acc_bytes))
    else:  # the channels as vectors, never the columns the gated loads stride along
        gated = [ld.src[0].src[1] for ld in loads if len(ld.src[0].src) > 2]
        columns = frozenset(r for r in rest for idx in gated if stride(idx, r))
        inner = max(columns, key=range_key, default=None)  # a strided conv keeps its packed input panel
        if inner is None or any(stride(idx, inner) not in (0, 1) for idx in gated):
            return []
        tile = strided_tile_opts(rest, loads, width, accumulators=CHANNEL_ACCUMULATORS, skip=columns)
    if len(tile) != 2:
        return []
    by_axis = {u.arg[0]: u for u in sink.toposort() if u.op is Ops.RANGE}
    rows, vector = by_axis[tile[0].axis], by_axis[tile[1].axis]
    packed = [ld for ld in loads if stride(ld.src[0].src[1], vector) and stride(ld.src[0].src[1], rows) == 0]
    if not packed or any(len(ld.src[0].src) > 2 for ld in packed):
        return []
    free = [r for r in rest if all(stride(ld.src[0].src[1], r) == 0 for ld in packed)]
    if not free:
        return []
    across = min(free, key=range_key)
    # the other padded axes: those a gate tests (an image's rows, not its batch)
    gates = [u for ld in loads if len(ld.src[0].src) > 2 for u in ld.src[0].src[2].toposort()]
    image_rows = [r for r in rest if r is not rows and r in gates]
    if whole:
        tile = _channels_outside(sink) + _square_channel_tile(tile, rows, image_rows)
    elif not ungated and (taller := _two_row_channel_tile(tile, image_rows, width)):
        tile = _channels_outside(sink) + taller
    ret = [*tile, *(Opt(OptOps.PACK, across.arg[0], slot) for slot in sorted({ld.src[0].src[0].arg for ld in packed}))]
    return ret if _opts_apply(sink, ret) else []


def _two_row_channel_tile(tile: list[Opt], image_rows: list[UOp], width: int) -> list[Opt]:
    """AVX-512's channel tile of 4 columns x 4 vectors as 2 image rows x 4 columns x 2 vectors: the same 16
    accumulators, half the weight vectors loaded per step, and two rows sharing their window's input lines (with the
    input gradient's channels summed outside its window, `_channels_outside`). Zen 5, 2 threads, 8x64x56x56 timed in
    turns: the forward 4.92-5.10 -> 4.34-4.75 ms, its input gradient 4.83-5.03 -> 4.47-4.68. [] where the channels
    take fewer than 4 vectors or no padded image row splits in 2."""
    if tile[1].arg % (4 * width) or not (splits := [r for r in image_rows if _trip_multiple_of(r, 2)]):
        return []
    columns, channels = tile
    row = max(splits, key=range_key)
    return [Opt(OptOps.UPCAST, row.arg[0], 2), columns, Opt(OptOps.UPCAST, channels.axis, channels.arg // 2)]


def _trip_multiple_of(rng: UOp, n: int) -> bool:
    return rng.src[0].op is Ops.CONST and int(rng.src[0].arg) % n == 0


def _channels_outside(sink: UOp) -> list[Opt]:
    """SWAPs that nest a conv's longest reduce loop (its channels) outside its window's, the others kept in order: an
    input gradient sums over (ky, kx, output channel), so each step's broadcasts came from another channel's plane (a
    new cache line each) and the window's planes left L1 between steps. Zen 3, 2 threads, 8x64x56x56's input gradient
    timed in turns: 19.7-22.3 -> 14.7-17.2 ms. [] where it is outermost already (a forward conv) or the reduce loops
    are not one reduce's."""
    reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or any(r.src[0].op is not Ops.CONST for r in reduces[0].src[1:]):
        return []
    loops = sorted(reduces[0].src[1:], key=range_key)
    longest = max(range(len(loops)), key=lambda i: (int(loops[i].src[0].arg), -i))
    return [Opt(OptOps.SWAP, loops[i - 1].arg[0], loops[i].arg[0]) for i in range(longest, 0, -1)]


def _square_channel_tile(tile: list[Opt], columns: UOp, image_rows: list[UOp]) -> list[Opt]:
    """AVX2's channel tile of 4 image columns as 2 image rows x 2 columns (rows first, the outer unrolled loop), where
    an image row axis (another axis the input's gates test) splits in 2: the same 8 accumulators over 4
    outputs a step, with half the columns' gates. Zen 3, 2 threads, 8x64x56x56 forward timed in turns: 16.3-16.6 ->
    13.5-14.0 ms (2 columns x 2 rows, the columns outer: 14.2-14.7)."""
    if tile[0].arg != 4:  # 4 columns upcast: their loop's size is a multiple of 4, so of 2
        return tile
    splits = [r for r in image_rows if _trip_multiple_of(r, 2)]
    if not splits:
        return tile
    outer = max(splits, key=range_key)
    return [Opt(OptOps.UPCAST, outer.arg[0], 2), Opt(OptOps.UPCAST, columns.arg[0], 2), tile[1]]


def shared_panel_opts(
    sink: UOp, rest: list[UOp], loads: list[UOp], width: int, acc_bytes: int, max_vectors: int
) -> list[Opt]:
    """A strided tile along the vector axis whose packed operand depends on the fewest output loops, where the one
    strided_tile_opts picks (the innermost) packs an operand copied at least PACK_MIN_REUSE times as often: the panel
    goes outside the outermost output loop it ignores and serves every tile inside; the rows are the reuse axis with
    the most accumulators (16 on AVX-512, as _taller_tile). A conv weight gradient dW[co, ci, kh, kw] =
    sum g[co, p] x[ci, p + shift]: g's panel per output channel tile serves every ci, kh and kw, where the padded x's
    per (ci, kh, kw) tile was copied 9 times as often (bench conv 8x64x56x56: 24 -> 13.5 ms single-thread). []
    otherwise, or where the panel doesn't fit."""
    default = strided_tile_opts(rest, loads, width, max_vectors)
    strides, candidates = _panel_candidates(rest, loads)
    if not default or not candidates:
        return []
    best = min(candidates, key=lambda v: (_panel_copies(v, rest, strides), -v.arg[0]))  # innermost on ties
    current = next(v for v in rest if v.arg[0] == default[-1].axis)
    if _panel_copies(best, rest, strides) * PACK_MIN_REUSE > _panel_copies(current, rest, strides):
        return []
    accumulators = _row_accumulators(width, acc_bytes)
    tiles = [
        (rows * vectors, rows, vectors, r)
        for vectors in range(1, min(max_vectors, 2) + 1)
        if int(best.src[0].arg) % (vectors * width) == 0
        for r in _reuse_axes(best, rest, strides)
        if (rows := _first_divisor(int(r.src[0].arg), tuple(range(accumulators // vectors, 1, -1)), accumulators))
    ]
    if not tiles:
        return []
    _, rows, vectors, rows_axis = max(tiles, key=lambda t: (*t[:3], t[3].arg[0]))  # the most accumulators, rows
    packed = [ld for ld, s in zip(loads, strides[best], strict=True) if s]
    # the loops the packed loads ignore, less one the rows take whole
    free = [r for r in rest if all(stride(ld.src[0].src[1], r) == 0 for ld in packed)]
    if not (free := [r for r in free if r is not rows_axis or int(r.src[0].arg) > rows]):
        return []
    across = min(free, key=range_key)
    ret = [Opt(OptOps.UPCAST, rows_axis.arg[0], rows), Opt(OptOps.UPCAST, best.arg[0], vectors * width)]
    ret += [Opt(OptOps.PACK, across.arg[0], slot) for slot in sorted({ld.src[0].src[0].arg for ld in packed})]
    return ret if _opts_apply(sink, ret) else []


def reduce_panel_opts(sink: UOp, rest: list[UOp], loads: list[UOp], width: int, acc_bytes: int) -> list[Opt]:
    """A strided tile whose panel over the whole reduce is past PACK_MAX_BYTES, packed one step of the outermost
    reduce loop at a time (PACK across that loop): the vector axis whose packed operand is copied least
    (`_panel_copies`), every other output loop upcast whole as rows. A conv weight gradient over few output
    channels and a long reduce over images and pixels (the convnet's conv1 dW: 16 x 3 x 3 outputs over 64 x 26 x 26):
    16 channels as lanes, the 9 taps as rows, g's panel one image (43 KiB) at a time, instead of a simd reduction per
    output over rows of 26 (2.56 -> 0.45 ms single-thread). [] otherwise."""
    reduce = max((u for u in sink.toposort() if u.op is Ops.REDUCE), key=_reduce_size)
    steps = sorted(reduce.src[1:], key=range_key)
    if len(steps) < 2 or any(r.src[0].op is not Ops.CONST for r in steps):
        return []
    step_size = _reduce_size(reduce) // int(steps[0].src[0].arg)
    strides, candidates = _panel_candidates(rest, loads)
    if not candidates:
        return []
    vector = min(candidates, key=lambda v: (_panel_copies(v, rest, strides), -v.arg[0]))
    max_vectors = PACK_MAX_BYTES // (step_size * acc_bytes * width)
    amount, _ = register_tile(int(vector.src[0].arg), 1, width, min(max_vectors, 1))
    if not amount:
        return []
    # every other output loop becomes rows, whole: a loop left around the reduce would copy the panel again per
    # iteration (the convnet's conv2 dW, 16 input channels left as a loop: 0.78 -> 1.54 ms)
    accumulators = _row_accumulators(width, acc_bytes)
    reuse = _reuse_axes(vector, rest, strides)
    rows = math.prod(int(r.src[0].arg) for r in reuse)
    if len(reuse) != len(rest) - 1 or not 2 <= rows <= accumulators:
        return []
    packed = sorted({ld.src[0].src[0].arg for ld, s in zip(loads, strides[vector], strict=True) if s})
    ret = [Opt(OptOps.UPCAST, r.arg[0], int(r.src[0].arg)) for r in sorted(reuse, key=lambda r: -r.arg[0])]
    ret += [Opt(OptOps.UPCAST, vector.arg[0], amount), *(Opt(OptOps.PACK, steps[0].arg[0], slot) for slot in packed)]
    return ret if _opts_apply(sink, ret) else []


def _row_accumulators(width: int, acc_bytes: int) -> int:
    """The accumulator vectors a register tile may hold: twice as many with 64-byte vectors (AVX-512's 32 registers)."""
    return ROW_PACK_ACCUMULATORS if width * acc_bytes >= vectorize.WIDE_VECTOR_BYTES else MAX_ACC_VECTORS


def _opts_apply(sink: UOp, opts: Sequence[Opt]) -> bool:
    """Whether `opts` apply to `sink` (PACK refuses a panel past its limit or loads shared with other uses; UNROLL a
    loop whose index is used outside its reduce)."""
    try:
        apply_opts(sink, tuple(opts))
    except ValueError:
        return False
    return True


def _panel_candidates(rest: list[UOp], loads: list[UOp]) -> tuple[dict[UOp, list[int | None]], list[UOp]]:
    """Each output loop's stride in every load, and the loops a tile's vector may run along: some load moves along
    it, every load's index is affine in it, and some other output loop reuses the loads along it (`_reuse_axes`)."""
    strides = {r: [stride(ld.src[0].src[1], r) for ld in loads] for r in rest}
    return strides, [v for v in rest if any(strides[v]) and None not in strides[v] and _reuse_axes(v, rest, strides)]


def _reuse_axes(vector: UOp, rest: list[UOp], strides: dict[UOp, list[int | None]]) -> list[UOp]:
    """The output loops that every load along `vector` ignores: a tile's rows over them reuse each panel load."""
    along = [i for i, s in enumerate(strides[vector]) if s]
    return [r for r in rest if r is not vector and all(strides[r][i] == 0 for i in along)]


def _panel_copies(vector: UOp, rest: list[UOp], strides: dict[UOp, list[int | None]]) -> int:
    """How many times a panel of the loads along `vector` is copied: the iterations of the other output loops they
    depend on."""
    along = [i for i, s in enumerate(strides[vector]) if s]
    return math.prod(int(r.src[0].arg) for r in rest if r is not vector and any(strides[r][i] != 0 for i in along))


def store_lane_opts(sink: UOp, rest: list[UOp], reduces: list[UOp]) -> list[Opt]:
    """For a short reduce (at most SHORT_REDUCE terms) that no tile fits: the output loop the store is contiguous in,
    upcast by its largest divisor up to LANE_MAX (when at least LANE_MIN), so each step of the reduce loads a row of
    lanes (gathers the C compiler vectorises, masked where gated) and the store is a vector. A max pool's 2x2 window
    on 13 columns, a col2im's sum of 3 shifted rows at a stride of 144 (its lanes are no whole vector, and a loop of
    2 or 3 gains nothing as a simd reduction): 0.91 -> 0.28 and 1.0 -> 0.44 ms single-thread in the convnet step."""
    if not all(0 < _reduce_size(u) <= SHORT_REDUCE for u in reduces):  # 0: a symbolic size
        return []
    # a load contiguous along a reduce loop of LANE_MIN or more is a vector there already (a @ b.T over 16: a simd
    # reduction, which a row of lanes would turn into gathers)
    long = [r for u in reduces for r in u.src[1:] if int(r.src[0].arg) >= LANE_MIN]
    if any(stride(ld.src[0].src[1], r) == 1 for ld in _reduce_loads(sink.toposort()) for r in long):
        return []
    store = next(u for u in sink.src if u.op is Ops.STORE)
    if store.src[0].op is not Ops.INDEX:
        return []
    along = [r for r in rest if stride(store.src[0].src[1], r) == 1]
    if not along or (amount := _largest_divisor(along[-1], LANE_MAX)) is None or amount < LANE_MIN:
        return []
    return [Opt(OptOps.UPCAST, along[-1].arg[0], amount)]


def far_reduce_opts(sink: UOp, reduces: list[UOp]) -> list[Opt]:
    """For one short reduce loop (at most SHORT_REDUCE steps) that no tile or row of lanes fits, along which every load
    that moves strides past GATHER_MAX_STRIDE elements: UNROLL by the whole loop, so its steps are scalar loads summed
    in order. Left a loop, the C renderer's `omp simd reduction` has gcc gather its lanes from that many distant
    cache lines per output (bench/ops.py's conv weight gradient, the sum of 8 per-image partials 36864 floats apart:
    139 -> 65 us single-thread). [] otherwise."""
    if len(reduces) != 1 or len(reduces[0].src) != 2 or not 2 <= _reduce_size(reduces[0]) <= SHORT_REDUCE:
        return []
    rng = reduces[0].src[1]
    steps = [stride(ld.src[0].src[1], rng) for ld in _reduce_loads(sink.toposort())]
    if not steps or any(s is None or 0 < abs(s) <= GATHER_MAX_STRIDE for s in steps) or not any(steps):
        return []
    ret = [Opt(OptOps.UNROLL, rng.arg[0], int(rng.src[0].arg))]
    return ret if _opts_apply(sink, ret) else []  # UNROLL refuses a loop whose index is used outside its reduce


def unroll_opts(sink: UOp, opts: list[Opt]) -> list[Opt]:
    """UNROLL by UNROLL_STEPS of a packed register tile's reduce loop of at least UNROLL_MIN_REDUCE steps (its innermost
    reduce loop; codegen/unroll.py): the tile's loads and fmas of several steps with one loop test between them.
    Single-thread, 8 x 32 tiles: matmul 1024 14.6 -> 13.9 ms, 2048 108 -> 97 ms, GPT's weight gradient over 1024
    tokens 1.13 -> 1.03 ms; reduces of 64-128 gain nothing (within 2%). The length is the reduce loops' product: a
    reduce over (16, 64) tokens unrolls its loop of 64 (GPT's weight gradients 0.94-1.05 -> 0.81-0.91 ms). [] for any
    other kernel."""
    if not any(o.op is OptOps.PACK for o in opts) or any(o.op in (OptOps.GROUP, OptOps.KEEP) for o in opts):
        return []
    nodes = sink.toposort()
    inner = max((u for u in nodes if u.op is Ops.RANGE and u.arg[1] in REDUCE_AXES), key=lambda r: r.arg[0])
    # the loops of the reduce that closes it (two sums over loops of 32 side by side are two short reduces)
    steps = [r for u in nodes if u.op is Ops.REDUCE and inner in u.src[1:] for r in u.src[1:]]
    if not steps or any(r.src[0].op is not Ops.CONST for r in steps) or int(inner.src[0].arg) % UNROLL_STEPS:
        return []
    # reduce loops the C renderer unrolls whole (a conv window's 3 x 3 around the tile) already repeat the tile's
    # body: they don't count (a conv input gradient's 3 x 3 x 64, its 64 unrolled by 4 into 36 bodies: 5.0 -> 4.7 ms
    # without, AVX-512 Zen 5, in turns)
    if math.prod(int(r.src[0].arg) for r in steps if int(r.src[0].arg) > ClangRenderer.unroll_reduce_max) < (
        UNROLL_MIN_REDUCE
    ):
        return []
    ret = [Opt(OptOps.UNROLL, inner.arg[0], UNROLL_STEPS)]
    try:
        apply_opts(sink, (*opts, *ret))
    except ValueError:  # the reduce loop's index is used elsewhere, or more than one reduce runs over it
        return []
    return ret


def _ignores_inner_loop(red: UOp, loops: list[UOp]) -> bool:
    """Does the reduce ignore an output loop nested inside one it depends on?"""
    used = {r for r in red.src[0].toposort() if r.op is Ops.RANGE and r.arg[1] is AxisType.LOOP}
    return any(r not in used and any(r.arg[0] > u.arg[0] for u in used) for r in loops)


def keep_opts(sink: UOp, reduces: list[UOp]) -> list[Opt]:
    """KEEP for the first reduce with a costly value the kernel computes again over its row (codegen/rowbuffer.py)."""
    for red in reduces:
        if kept_value(sink, red) is not None:
            return [Opt(OptOps.KEEP, red.src[1].arg[0], int(red.src[1].src[0].arg))]
    return []


def _largest_divisor(rng: UOp, limit: int = HOIST_MAX) -> int | None:
    """The largest divisor of the axis size up to `limit` (None: only 1)."""
    size = int(rng.src[0].arg)
    return next((d for d in range(min(size, limit), 1, -1) if size % d == 0), None)


def choose_opts(sink: UOp, given: tuple[Opt, ...] | None, renderer: Renderer) -> tuple[Opt, ...]:
    """`given` (a KernelInfo's opts_to_apply) when set, else (unless NOOPT) the heuristic's, on renderers whose loops
    stay loops (no local/group launch dimensions: the CPU and PYTHON devices)."""
    if given is not None:
        return tuple(given)
    if NOOPT.value:
        return ()
    if renderer.has_local:  # GPUs: work-group opts (codegen/gpudims.py)
        return tuple(Opt(OptOps[op], axis, arg) for op, axis, arg in gpu_heuristic(sink, renderer.shared_max))
    return tuple(hand_coded_opts(sink))
