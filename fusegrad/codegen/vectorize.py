"""Explicit SIMD, after the kernel opts and before reduce lowering: the innermost UPCAST loop becomes vector values
on renderers with vector types (`Renderer.supports_float4`; the C renderer spells them with GCC vector extensions).

Loads and stores contiguous in the loop move whole vectors, values that don't depend on it are broadcast, and a reduce
of a vector value keeps a vector accumulator, so a register tile of `rows x vectors` accumulators needs no scalar
code. Each lane computes what its iteration of the loop did, in the same order, so results are bit for bit the same.
In a kernel with a vector reduce, work outside the reduce loops with no vector form (a silu's compare, select and exp2
on the accumulators; the store of a tile of channel vectors, whose lanes lie a channel plane apart in NCHW) runs once
per lane on the lanes' scalars (`GEP`), so a fused epilogue or a strided output doesn't keep the reduce scalar.
Entry point: `vectorize_upcast`; anything else it can't express (gates, strided or computed indexes, other ops inside a
reduce) leaves the kernel as it was.
"""

from __future__ import annotations

import functools

from fusegrad.codegen.linearize import dependents, is_partials, is_row_buffer, range_key
from fusegrad.dtype import DType, PtrDType, dtypes
from fusegrad.helpers import cpu_family, cpu_flags
from fusegrad.uop import REDUCE_AXES, AxisType, GroupOp, Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import split_uop, sym

__all__ = ["VECTOR_BYTES", "VECTOR_DTYPES", "host_vector_bytes", "vector_sizes", "vectorize_upcast"]

VECTOR_BYTES = 32  # one AVX2 register: every x86-64 CPU the C renderer targets in practice, and GPU vector loads
WIDE_VECTOR_BYTES = 64  # one AVX-512 register, where the host has them
# float ops a vector spells like a scalar (MAX, comparisons and selects need lane masks the C renderer doesn't have)
VECTOR_ALU = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV})
VECTOR_REDUCES = frozenset({Ops.ADD, Ops.MUL})  # and, with lane masks (the CPU), a float32 MAX (`max_reduce`)
# on the CPU (GCC vectors) float32 work after a vector reduce also has vector forms: compares give lane masks (a vector
# of int, all bits set where true), a select picks by mask, max is a compare and a select, and the math ops call
# glibc's vector variants (a fused silu or gelu epilogue was ~80% of its matmul's time lane by lane)
MASK_ALU = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
SELECT_ALU = frozenset({Ops.NEG, Ops.RECIPROCAL, Ops.MAX, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.WHERE}) | MASK_ALU
VECTOR_DTYPES = (dtypes.float32, dtypes.float64)
# ops that may run once per lane after a vector reduce (loads and stores too: their addresses are lane by lane)
LANE_OPS = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.LOAD, Ops.STORE, Ops.INDEX}


class _NoVectorFormError(Exception):
    """A node that depends on the lane loop has no vector form: the kernel stays scalar."""


@functools.cache
def host_vector_bytes() -> int:
    """The C renderer's vector size: 64 bytes where the CPU has AVX-512F (the kernels compile with -march=native, so
    a 64-byte GCC vector is one register; matmul tiles run ~25% faster than with 32), else 32."""
    return WIDE_VECTOR_BYTES if "avx512f" in cpu_flags() else VECTOR_BYTES


def vector_exp2() -> bool:
    """Whether the C renderer's exp2 of a whole float32 vector is vector code: AVX-512 (`fg_exp2_float16`, inline) or
    AVX2 (libmvec's 8-lane call where glibc has it, else the scalar helper lane by lane, which GCC vectorises)."""
    return host_vector_bytes() == WIDE_VECTOR_BYTES or "avx2" in cpu_flags()


def split_wide_vectors() -> bool:
    """Whether the host runs its 64-byte vectors on 32-byte units, each AVX-512 op as two halves: AMD's family 25
    (0x19) with AVX-512F, i.e. Zen 4 (Zen 3 has no AVX-512; Zen 5, family 26, and Intel's AVX-512 cores have
    full-width units). Register tiles there hold one vector per row (opt._tile_vectors)."""
    return host_vector_bytes() == WIDE_VECTOR_BYTES and cpu_family() == ("AuthenticAMD", 25)


def vector_sizes(widest: int | None = None) -> tuple[int, ...]:
    """Vector sizes in bytes the C renderer uses, widest first (`widest`, else the host's): a loop too short for the
    widest takes the next."""
    return tuple(sorted({host_vector_bytes() if widest is None else widest, VECTOR_BYTES}, reverse=True))


def stream_vector_bytes() -> int:
    """The vector size of a full reduction's lanes (a sum of a whole buffer, read once from memory): 32 bytes where
    the host splits 64-byte vectors (split_wide_vectors), else the host's. On Zen 4 a sum of 64 MB on 2 threads with
    4 accumulators of 32 bytes ran ~4% faster than with 4 of 64 bytes (median of 100-120 back-to-back pairs; it won 73
    and 77 of 100), and ~4% ahead of torch where the 64-byte one was ~5% behind."""
    return VECTOR_BYTES if split_wide_vectors() else host_vector_bytes()


def _is_full_reduction(sink: UOp) -> bool:
    """Whether each of the kernel's global stores writes one element outside every loop (a sum to a scalar)."""
    stores = [u for u in sink.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
    stores = [u for u in stores if u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    return bool(stores) and not any(x.op is Ops.RANGE for s in stores for x in s.src[0].toposort())


def vectorize_upcast(sink: UOp, masks: bool = False) -> UOp:
    """`sink` with its innermost UPCAST loop as vector lanes (split into an upcast loop of whole vectors when longer
    than one), or `sink` unchanged when that loop's work doesn't fit the vector forms above. `masks`: the renderer
    spells SELECT_ALU's forms on float32 vectors (the C renderer; the GPU dialects don't yet)."""
    ret = _vectorize_lane(sink, _lane_loop(sink), masks)
    # LANES's partials of other reduces (a layernorm's mean and then its variance, each over its own loop over the
    # row): each loop its own vectors, as none of them depends on another's lanes
    for lane in _partials_lanes(ret):
        ret = _vectorize_lane(ret, lane, masks)
    return ret


def _partials_lanes(sink: UOp) -> list[UOp]:
    """The upcast loops still scalar that only fill LANES partials: each one a plain register index of their store."""
    indexes = [s.src[0] for u in sink.toposort() if is_partials(u) for s in u.src[1:] if s.op is Ops.STORE]
    lanes = [x.src[1] for x in indexes if x.op is Ops.INDEX]
    scalar = (r for r in lanes if r.op is Ops.RANGE and r.arg[1] is AxisType.UPCAST and r.src[0].op is Ops.CONST)
    return list(dict.fromkeys(scalar))


def _vectorize_lane(sink: UOp, lane: UOp | None, masks: bool) -> UOp:
    """`sink` with upcast loop `lane` as vector lanes (see vectorize_upcast), or unchanged."""
    if lane is None:
        return sink
    dtype = _lane_dtype(sink, lane, masks)
    if dtype is None:
        return sink
    size = int(lane.src[0].arg)
    # a GPU kernel (launch dimensions or work-group loops) keeps 32-byte vectors: the host CPU says nothing of GPUs
    if _is_gpu_kernel(sink):
        sizes: tuple[int, ...] = (VECTOR_BYTES,)
    elif _is_full_reduction(sink):  # its input streams from memory once
        sizes = vector_sizes(stream_vector_bytes())
    else:
        sizes = vector_sizes()
    widths = [n // dtype.itemsize for n in sizes if size % (n // dtype.itemsize) == 0]
    if not widths:
        return sink
    width = widths[0]
    split = sink
    if size > width:  # lane -> whole * width + lane': a loop over vectors around the lanes of one
        axis = max(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE) + 1
        whole = UOp.range(size // width, axis, AxisType.UPCAST)
        lane_in = UOp.range(width, axis + 1, AxisType.UPCAST)
        split = graph_rewrite(sink.substitute({lane: whole * width + lane_in}), sym, name="split vector loop")
        lane = lane_in
    if size == width and (filled := _fill_in_lanes(split, lane)) is not split:
        try:  # the moved fill only stands with the lanes as one vector: unvectorized, it would wrap the reduce's loop
            return _Vectorizer(lane, dtype.vec(width), masks).run(filled)
        except _NoVectorFormError:
            pass
    try:
        return _Vectorizer(lane, dtype.vec(width), masks).run(split)
    except _NoVectorFormError:
        return sink


def _fill_in_lanes(sink: UOp, lane: UOp) -> UOp:
    """A row buffer (rowbuffer.keep_row_value) filled in its own loop r with a value a LANES sum computes in its
    steps and `lane` (the value at r = step * lanes + lane): the fill moved into those steps, storing the sum's own
    vector of values (softmax's exps, computed once). Only for a lane loop that becomes one vector, so the fill runs
    in the step loop itself; unchanged where no fill's value is the sum's."""
    nodes = sink.toposort()
    fills = [u for u in nodes if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and len(u.src[0].src) == 2]
    fills = [u for u in fills if u.src[0].src[0].op is Ops.DEFINE_REG and u.src[0].src[1].op is Ops.RANGE]
    if not fills:  # no row buffer: the common case, nothing to look for
        return sink
    present, lanes = set(nodes), int(lane.src[0].arg)
    steps = [u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE and u.src[0].op is Ops.CONST]
    moves: dict[UOp, UOp] = {}
    for store in fills:
        rng = store.src[0].src[1]
        if rng.arg[1] is not AxisType.REDUCE:
            continue
        for step in (s for s in steps if s is not rng and int(s.src[0].arg) * lanes == rng.src[0].arg):
            moved = graph_rewrite(store.substitute({rng: step * lanes + lane}), sym, name="fill in lanes")
            if moved.src[1] in present:
                moves[store] = moved
                break
    return sink.substitute(moves) if moves else sink


GPU_AXES = frozenset({AxisType.GLOBAL, AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.THREAD, AxisType.WARP})


def _is_gpu_kernel(sink: UOp) -> bool:
    return any(u.op is Ops.SPECIAL or (u.op is Ops.RANGE and u.arg[1] in GPU_AXES) for u in sink.toposort())


def _lane_loop(sink: UOp) -> UOp | None:
    """The upcast loop that would be innermost (linearize.range_key), if its size is a constant."""
    upcasts = [u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.UPCAST]
    if not upcasts:
        return None
    lane = max(upcasts, key=range_key)
    return lane if lane.src[0].op is Ops.CONST else None


def _lane_dtype(sink: UOp, lane: UOp, masks: bool = False) -> DType | None:
    """The one float dtype of the values (not index math) that depend on `lane`, or where a reduce does, of the
    reduces and the values inside them (the work after them may run lane by lane); None for none or several. With
    `masks`, compares of float32 lanes are lane masks, not values of their own: their bools don't count."""
    dependent = [u for u in dependents(sink, lane, past_partials=False) if u.op not in (Ops.STORE, Ops.INDEX, Ops.SINK)]
    if any(u.op is Ops.REDUCE for u in dependent):
        dependent = [u for u in dependent if u.op is Ops.REDUCE or is_inside_reduce(u)]
    found = {u.dtype for u in dependent}
    found.discard(dtypes.index)
    if masks and dtypes.float32 in found:
        found.discard(dtypes.bool)
    if len(found) != 1 or (dtype := found.pop()) not in VECTOR_DTYPES:
        return None
    return dtype


def is_inside_reduce(u: UOp) -> bool:
    """Whether `u` runs inside a reduce loop: it depends on a reduce range other than through a REDUCE closing it."""
    nodes = u.toposort(gate=lambda x: x.op is not Ops.REDUCE or x is u)
    return any(x.op is Ops.RANGE and x.arg[1] in REDUCE_AXES for x in nodes)


_WIDE_INTS = (dtypes.int32, dtypes.int64, dtypes.index)  # index math cast between these keeps its value


def _strip_int_casts(x: UOp) -> UOp:
    """x without the casts between wide signed integer types around it (index math cast to int32 for a compare)."""
    while x.op is Ops.CAST and x.dtype in _WIDE_INTS and x.src[0].dtype in _WIDE_INTS:
        x = x.src[0]
    return x


def _as_index(x: UOp) -> UOp:
    return x if x.dtype == dtypes.index else x.cast(dtypes.index)


def vector_offset(idx: UOp, lane: UOp) -> UOp | None:
    """`idx - lane` when `idx` is `lane` plus terms that don't depend on it (a contiguous run of lanes), else None."""
    terms = list(split_uop(idx, Ops.ADD))
    if sum(t is lane for t in terms) != 1:
        return None
    rest = [t for t in terms if t is not lane]
    if any(lane in t.toposort() for t in rest):
        return None
    if not rest:
        return UOp.const(dtypes.index, 0)
    ret = rest[0]
    for t in rest[1:]:
        ret = ret + t
    return ret


class _Vectorizer:
    """One rewrite of a kernel: every node that depends on `lane` becomes its vector form (dtype `vec`)."""

    def __init__(self, lane: UOp, vec: DType, masks: bool = False) -> None:
        self.lane, self.vec = lane, vec
        self.masks = masks and vec.scalar() == dtypes.float32  # SELECT_ALU's forms: the C renderer, float32 lanes
        self.new: dict[UOp, UOp] = {}
        self.lanes: dict[UOp, tuple[UOp, ...]] = {}  # nodes computed once per lane, after a vector reduce
        self.vector_index: set[UOp] = set()  # new INDEX nodes addressing a vector's first element

    def run(self, sink: UOp) -> UOp:
        dependent = dependents(sink, self.lane, past_partials=False)
        has_vector_reduce = False
        for u in sink.toposort():
            if u is sink:
                # lane by lane only beside a vector reduce: inside one, or with none, scalar code is as good
                if self.lanes and not has_vector_reduce:
                    raise _NoVectorFormError("lane-by-lane work in a kernel with no vector reduce")
                stores = [self.lanes.get(s, (self.new.get(s, s),)) for s in sink.src]
                ret = sink.replace(src=tuple(x for lanes in stores for x in lanes))
                return ret.substitute(filled) if (filled := self.filled(sink)) else ret
            if u not in dependent or u is self.lane or u.dtype == dtypes.index:
                continue
            try:
                self.new[u] = self.convert(u)
                has_vector_reduce |= u.op is Ops.REDUCE
            except _NoVectorFormError:
                # outside the reduce loops, a node with no vector form runs once per lane: the output's address when
                # the lanes store apart (channel vectors in NCHW), a strided epilogue load. The toposort may put such
                # an address before the reduce whose value it stores, so the reduce is checked for at the sink.
                if u.op not in LANE_OPS or is_inside_reduce(u):
                    raise
                self.lanes[u] = tuple(self.lane_node(u, i) for i in range(self.vec.count))
        raise AssertionError("vectorize: the sink is the last node of its toposort")

    def filled(self, sink: UOp) -> dict[UOp, UOp]:
        """Each lane-partials AFTER (`is_partials`) or row buffer the lanes fill -> the same AFTER of the array's vector
        writes."""
        registers = (u for u in sink.toposort() if is_partials(u) or is_row_buffer(u))
        after = [u for u in registers if any(s in self.new for s in u.src)]
        return {u: u.replace(src=tuple(self.new.get(s, s) for s in u.src)) for u in after}

    def lane_node(self, u: UOp, i: int) -> UOp:
        """`u` as lane `i` computes it: a scalar op on each source's lane."""
        return u.replace(src=tuple(self.lane_source(s, i) for s in u.src))

    def lane_source(self, s: UOp, i: int) -> UOp:
        if s is self.lane:
            return UOp.const(dtypes.index, i)
        if (vector := self.new.get(s)) is not None:
            return vector.gep(i)
        if (lanes := self.lanes.get(s)) is not None:
            return lanes[i]
        # index math or a value the lane doesn't change
        return s.substitute({self.lane: UOp.const(dtypes.index, i)}) if self.lane in s.toposort() else s

    def operand(self, s: UOp) -> UOp:
        """A source of a vector op: its vector form, its lanes gathered, or the scalar broadcast to every lane."""
        if (ret := self.new.get(s)) is not None:
            return ret
        if (lanes := self.lanes.get(s)) is not None and s.dtype == self.vec.scalar():
            return UOp(Ops.VECTORIZE, self.vec, lanes)
        if self.lane in s.toposort():  # the lane's index math used as a value (an arange), or a node not converted
            raise _NoVectorFormError(f"{s.op} depends on the lane loop but has no vector form")
        return s.broadcast(self.vec.count)

    def convert(self, u: UOp) -> UOp:
        match u.op:
            case Ops.INDEX:
                return self.convert_index(u)
            case Ops.LOAD if u.src[0] in self.new and self.new[u.src[0]] in self.vector_index:
                return UOp(Ops.LOAD, self.vec, (self.new[u.src[0]],))
            case Ops.STORE if u.src[0] in self.new and self.new[u.src[0]] in self.vector_index:
                return UOp(Ops.STORE, dtypes.void, (self.new[u.src[0]], self.operand(u.src[1])))
            case Ops.REDUCE if u.dtype == self.vec.scalar() and (u.arg in VECTOR_REDUCES or self.max_reduce(u)):
                return UOp(Ops.REDUCE, self.vec, (self.operand(u.src[0]), *u.src[1:]), u.arg)
            case op if op in VECTOR_ALU and u.dtype == self.vec.scalar():
                return UOp(op, self.vec, tuple(self.operand(s) for s in u.src))
            case op if self.masks and op in SELECT_ALU:
                return self.convert_select(u)
        raise _NoVectorFormError(f"{u.op} of {u.dtype}")

    def max_reduce(self, u: UOp) -> bool:
        """A max reduce of float32 lanes on the CPU: its accumulator updates are the vector max (a compare and a
        select that keep NaN, the scalar form's order), one register per vector of LANES."""
        return self.masks and u.arg is Ops.MAX

    def convert_select(self, u: UOp) -> UOp:
        """Compares as lane masks (bool vectors), selects by a mask or by a scalar condition, max and math ops."""
        if u.op in MASK_ALU and u.src[0].dtype == self.vec.scalar():
            return UOp(u.op, dtypes.bool.vec(self.vec.count), tuple(self.operand(s) for s in u.src))
        if u.op is Ops.CMPLT and (mask := self.lane_threshold_mask(u)) is not None:
            return mask
        if u.dtype != self.vec.scalar():
            raise _NoVectorFormError(f"{u.op} of {u.dtype}")
        if u.op is not Ops.WHERE:
            return UOp(u.op, self.vec, tuple(self.operand(s) for s in u.src))
        cond = u.src[0]
        if (mask := self.new.get(cond)) is None and self.lane in cond.toposort():
            raise _NoVectorFormError("a select whose condition is computed lane by lane")
        values = (self.operand(u.src[1]), self.operand(u.src[2]))
        return UOp(Ops.WHERE, self.vec, (cond if mask is None else mask, *values))

    def lane_threshold_mask(self, u: UOp) -> UOp | None:
        """An integer compare of the lane's index with a value the lane doesn't change (a causal mask's j < i in a
        tile's epilogue: i < lane + base <=> lane > i - base) as a float compare of the lanes' numbers with that
        threshold clamped to [-1, lanes]: exact in float32, and a lane mask instead of a compare per lane."""
        left, right = (_strip_int_casts(s) for s in u.src)
        if left.dtype not in _WIDE_INTS or right.dtype not in _WIDE_INTS:
            return None
        lanes = self.vec.count
        iota = UOp(Ops.VECTORIZE, self.vec, tuple(UOp.const(dtypes.float32, i) for i in range(lanes)))
        if (offset := vector_offset(right, self.lane)) is not None and self.lane not in left.toposort():
            threshold, lane_first = _as_index(left) - _as_index(offset), False  # left < lane + offset <=> t < lane
        elif (offset := vector_offset(left, self.lane)) is not None and self.lane not in right.toposort():
            threshold, lane_first = _as_index(right) - _as_index(offset), True  # lane + offset < right <=> lane < t
        else:
            return None
        clamped = threshold.maximum(-1)
        clamped = (clamped < lanes).where(clamped, UOp.const(dtypes.index, lanes)).cast(dtypes.float32)
        pair = (iota, clamped.broadcast(lanes)) if lane_first else (clamped.broadcast(lanes), iota)
        return UOp(Ops.CMPLT, dtypes.bool.vec(lanes), pair)

    def convert_index(self, u: UOp) -> UOp:
        """buf[base + lane] -> the address of buf[base], read or written as one vector (ungated; global buffers and
        opt.PACK's panels)."""
        buf, idx = u.src[0], u.src[1]
        base = buf.src[0] if buf.op is Ops.AFTER else buf
        is_array = base.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_REG) and isinstance(buf.dtype, PtrDType)
        if not is_array or buf.dtype.base != self.vec.scalar() or len(u.src) > 2:
            raise _NoVectorFormError(f"INDEX into {buf.op} with {len(u.src) - 1} sources")
        if (offset := vector_offset(idx, self.lane)) is None:
            raise _NoVectorFormError(f"index {idx.render()} is not contiguous in the lane loop")
        ret = UOp(Ops.INDEX, u.dtype, (buf, offset))
        self.vector_index.add(ret)
        return ret
