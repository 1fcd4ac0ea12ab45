"""Tensor graph -> kernel ASTs, by ranges (SCHEDULER.md): `build_kernel` emits the AST of one realized node.

Every realized node gets a loop variable (RANGE) per output axis; walking down from it, each node is computed at the
index its consumer reads it (movement ops only change the index). Which nodes are realized, and why, is fusion.py's
policy (kernelize.find_realizes walks every kernel with `note_reads` to decide it). Entry point: `build_kernel`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from fusegrad.helpers import TRACK_MATCH_STATS, prod
from fusegrad.schedule.fusion import ReadPolicy, Reads
from fusegrad.schedule.fusion import is_kernelized as is_kernelized  # engine/schedule.py reads it here
from fusegrad.schedule.indexing import Index, idx_const, linearize_index, simplify_index, source_index
from fusegrad.schedule.merge import merge_loops, split_loops
from fusegrad.schedule.multi import (
    DeviceIndexing,
    Placement,
    devices_of,
    multi_buffer,
    multi_range,
    register_multi_buffer,
)
from fusegrad.schedule.windows import find_unwindow, merge_sums, unwindow_index
from fusegrad.uop import AxisType, GroupOp, Ops
from fusegrad.uop.ops import UOp
from fusegrad.uop.rewrite import graph_rewrite
from fusegrad.uop.symbolic import sym
from fusegrad.uop.symbolic_shape import max_size


@dataclass(frozen=True)
class Kernel:
    """The arg of a KERNEL node: the kernel's AST, the tensor metadata of what it computes and the values of the
    variables its AST uses (symbolic_shape.py: the AST holds variables, so one compile serves every value)."""

    ast: UOp
    metadata: tuple[Any, ...] = ()
    var_vals: tuple[tuple[str, int], ...] = ()

    def __repr__(self) -> str:
        return f"<Kernel {len(self.ast.src)} store(s)>"


@dataclass
class KernelBuilder(ReadPolicy):
    """Builds one kernel's value expression from a realized root; its reads go through the fusion policy
    (fusion.ReadPolicy.note_read), which flags the nodes that need a kernel of their own."""

    out_buf: UOp | None = None  # the BUFFER this kernel writes: reading it again uses slot 0, not a second pointer
    loads: dict[UOp, int] = field(default_factory=dict)  # stored node -> global slot (1, 2, ...)
    ranges: itertools.count[int] = field(default_factory=itertools.count)
    memo: dict[tuple[Any, ...], UOp] = field(default_factory=dict)
    # keyed like memo, validity included: a source's children carry the validity they were read under
    memo_children: dict[tuple[UOp, Index, UOp | None], list[tuple[Any, ...]]] = field(default_factory=dict)
    multi: DeviceIndexing | None = None  # set for a kernel described once for several devices (multi.py)

    # a reads-only walk (find_realizes): no AST is built; reduces it computes inline (not as a load) are noted in
    # `inlined`, so a reduce realized afterwards tells which walks would now differ
    reads_only: bool = False
    inlined: set[UOp] | None = None

    def new_range(self, size: int, axis_type: AxisType) -> UOp:
        return idx_const(0) if size == 1 else UOp.range(idx_const(size), next(self.ranges), axis_type)

    def load(self, stored: UOp, node: UOp, idx: Index, valid: UOp | None) -> UOp:
        if self.reads_only:
            return _UNBUILT
        buf = stored.src[0] if is_kernelized(stored) else stored.src[0] if stored.op is Ops.ASSIGN else stored
        slot = 0 if buf is self.out_buf else self.loads.setdefault(stored, len(self.loads) + 1)
        size = buf.arg if buf.op is Ops.BUFFER else max_size(prod(node.shape))
        shape = (size,) if (buf.op is Ops.BUFFER and node.op is Ops.BUFFER) or is_kernelized(node) else node.shape
        if self.multi is not None:
            flat, size = self.multi.local_index(buf, node, idx, shape, valid)
        else:
            flat = linearize_index(idx, shape)
        glob = UOp(Ops.DEFINE_GLOBAL, node.dtype.ptr(size), arg=slot)
        if valid is not None and isinstance(size, int) and flat.vmin >= 0 and flat.vmax < size:
            valid = None  # in bounds everywhere: the PAD or window above masks the value, the load needs no gate
        index = glob.index(flat, valid) if valid is not None else glob.index(flat)
        return index.load(dtype=node.dtype)

    def reduce_range(self, node: UOp, axis: int, size: int) -> UOp:
        """The loop a reduce runs over `axis`: over this device's block when the source is sharded along it."""
        if self.multi is not None and self.multi.placements.get(node.src[0], Placement()).axis == axis:
            s = self.multi.block(size)
            return self.multi.device_index * s + self.new_range(s, AxisType.REDUCE)
        return self.new_range(size, AxisType.REDUCE)

    def children(self, node: UOp, idx: Index, valid: UOp | None, ctx: frozenset[UOp]) -> list[tuple[Any, ...]]:
        """(source, index, valid, active ranges) for each source `node` reads while computed at `idx`."""
        if node.op in GroupOp.Movement:
            src_idx, src_valid = source_index(node, idx, valid)
            return [(node.src[0], src_idx, src_valid, ctx)]
        if node.op is Ops.REDUCE_AXIS and self.multi is None and (w := find_unwindow(node)) is not None:
            window = self.new_range(w.k, AxisType.REDUCE)  # a window gradient: read its source directly (windows.py)
            src_idx, inside = unwindow_index(w, idx, window)
            loops = {window} if window.op is Ops.RANGE else set()
            return [(w.source, simplify_index(src_idx), inside if valid is None else valid & inside, ctx | loops)]
        if node.op is Ops.REDUCE_AXIS:
            axes = node.arg[1]
            new = tuple(self.reduce_range(node, i, s) if i in axes else r
                        for i, (r, s) in enumerate(zip(idx, node.src[0].shape, strict=True)))  # fmt: skip
            loops = {r for r in new if r.op is Ops.RANGE} | {r for i in axes for r in _loops(new[i])}
            # computed inside only the loops its index uses (the linearizer hoists it out of the others)
            return [(node.src[0], new, valid, (ctx & self.ranges_in(idx)) | loops)]
        if node.op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD):
            return [(node.src[0], idx, valid, ctx)]
        if node.op is Ops.ASSIGN:
            return [(node.src[1], idx, valid, ctx)]
        return [(s, idx, valid, ctx) for s in node.src]

    def combine(self, node: UOp, srcs: list[UOp], idx: Index, valid: UOp | None) -> UOp:
        if self.reads_only:
            if node.op is Ops.REDUCE_AXIS and node is not self.root and self.inlined is not None:
                self.inlined.add(node)
            return _UNBUILT
        if node.op in GroupOp.Movement:
            return srcs[0]  # the index already moved; PAD's validity is applied by emit
        match node.op:
            case Ops.REDUCE_AXIS:
                _, src_idx, src_valid, _ = self.memo_children[(node, idx, valid)][0]
                loops = [r for a in node.arg[1] for r in _loops(src_idx[a])]
                rngs = tuple(r for r in loops if r.arg[1] is AxisType.REDUCE and r not in idx)
                if src_valid is not None and src_valid is not valid:  # a window gradient's positions outside it
                    return merge_sums(src_valid, srcs[0], rngs)
                return UOp(Ops.REDUCE, node.dtype, (srcs[0], *rngs), node.arg[0]) if rngs else srcs[0]
            case Ops.CONTIGUOUS | Ops.DETACH | Ops.CONTIGUOUS_BACKWARD | Ops.ASSIGN:
                return srcs[0]
            case Ops.CAST | Ops.BITCAST:
                return UOp(node.op, node.dtype, (srcs[0],))
            case Ops.DEFINE_VAR:  # a symbolic size used as a value (symbolic_shape.py): a kernel argument
                return node
        if node.op in GroupOp.ALU:
            return UOp(node.op, node.dtype, tuple(srcs))
        raise NotImplementedError(f"schedule: cannot compute {node.op} inside a kernel")

    def emit(self, node: UOp, idx: Index, valid: UOp | None, ctx: frozenset[UOp]) -> UOp:
        """The scalar value of `node` at `idx` (explicit stack: graphs are arbitrarily deep)."""
        stack: list[tuple[UOp, Index, UOp | None, frozenset[UOp], bool]] = [(node, idx, valid, ctx, False)]
        reads_only = self.reads_only
        while stack:
            n, i, v, c, expanded = stack.pop()
            key = (n, i, v)
            # the fusion policy sees each read in find_realizes' walks; a build walks the same reads after those
            # walks settled (every node they flag is realized, so loaded before `flagged` is asked), and its own
            # records would be thrown away: it skips them
            if reads_only and not expanded:
                self.note_read(n, i, v, c)
            if key in self.memo:
                continue
            # an empty tensor is never read: any value will do (a symbolic size is a UOp, never equal to 0)
            if (shape := n._shape) is not None and 0 in shape:
                self.memo[key] = UOp.const(n.dtype, 0)
                continue
            if (stored := self.stored_node(n)) is not None:
                self.memo[key] = self.load(stored, n, i, v)
                continue
            if n in self.flagged and n is not self.root:  # it will get its own kernel: read it, don't inline it
                self.memo[key] = self.load(n, n, i, v)
                continue
            if n.op is Ops.CONST:
                self.memo[key] = UOp.const(n.dtype, n.arg)
                continue
            if n.op is Ops.IOTA:
                self.memo[key] = i[0].cast(n.dtype)
                continue
            kids = self.memo_children.get(key)
            if kids is None:
                kids = self.memo_children[key] = self.children(n, i, v, c)
            if not expanded:
                stack.append((n, i, v, c, True))
                stack.extend(
                    (k[0], k[1], k[2], k[3], False) for k in reversed(kids) if (k[0], k[1], k[2]) not in self.memo
                )
                continue
            value = self.combine(n, [self.memo[(k[0], k[1], k[2])] for k in kids], i, v)
            if n.op is Ops.PAD and kids[0][2] is not None and kids[0][2] is not v and not self.reads_only:
                value = kids[0][2].where(value, value.const_like(0))
            self.memo[key] = value
        return self.memo[(node, idx, valid)]


_UNBUILT = UOp(Ops.NOOP)  # the value of every node in a reads-only walk


def _loops(i: UOp) -> list[UOp]:
    """The loop RANGEs in index `i` (a range itself, or a device block's offset plus a range)."""
    if i.op is Ops.RANGE:
        return [] if i.arg[1] is AxisType.MULTI else [i]
    if i.op is Ops.CONST:
        return []
    return [u for u in i.toposort() if u.op is Ops.RANGE and u.arg[1] is not AxisType.MULTI]


def _store_index(target: UOp, idx: Index) -> tuple[UOp, UOp]:
    """Where an ASSIGN to view `target` writes element `idx`: (its BUFFER, the flat index)."""
    node, valid = target, None
    while node.op in GroupOp.Movement:
        idx, valid = source_index(node, idx, valid)
        node = node.src[0]
    if valid is not None:
        raise ValueError("assign: cannot assign into a padded view")
    while node.op is Ops.AFTER:  # memory with earlier writes pending: write the same buffer, after them
        node = node.src[0]
    buf = node.src[0] if is_kernelized(node) else node
    if buf.op is not Ops.BUFFER:
        raise ValueError(f"assign: the target must be a view of a realized buffer, got {node.op}")
    return node, linearize_index(idx, (buf.arg,))


@dataclass
class BuiltKernel:
    root: UOp
    ast: UOp
    output: UOp  # the BUFFER written
    inputs: list[UOp]  # stored nodes read, in slot order (slot 1 onwards)


def _output_index(kb: KernelBuilder, root: UOp) -> tuple[Index, Index, tuple[int, ...]]:
    """(global index the kernel computes, its loop ranges, the shape they span): a sharded output loops over one
    device's block and offsets the shard axis by the device index."""
    if kb.multi is None or (axis := kb.multi.placements[root].axis) is None:
        loops = tuple(kb.new_range(s, AxisType.LOOP) for s in root.shape)
        return loops, loops, root.shape
    local_shape = tuple(kb.multi.block(s) if a == axis else s for a, s in enumerate(root.shape))
    loops = tuple(kb.new_range(s, AxisType.LOOP) for s in local_shape)
    offset = kb.multi.device_index * local_shape[axis]
    return tuple(offset + r if a == axis else r for a, r in enumerate(loops)), loops, local_shape


def _local_copy(root: UOp, buffer_of: dict[UOp, UOp]) -> BuiltKernel:
    """CONTIGUOUS(multi-device BUFFER) or AFTER(BUFFER, write) as a COPY kernel: each device copies its own memory
    (after the write) into a buffer placed alike."""
    from fusegrad.schedule.collectives import Move, copy_ast  # collectives builds on this module

    memory = root.src[0]
    while memory.op is Ops.AFTER:
        memory = memory.src[0]
    if root.op not in (Ops.CONTIGUOUS, Ops.AFTER) or memory.op is not Ops.BUFFER:
        raise NotImplementedError(f"multi: no placement for a {root.op} made after placing the graph")
    source = buffer_of.get(root.src[1], root.src[1]) if root.op is Ops.AFTER else memory
    buf = memory
    held = multi_buffer(buf)
    out = UOp.new_buffer(buf.device, buf.arg, buf.dtype)
    register_multi_buffer(out, held.placement, held.shape)
    moves = tuple(Move(e, 0, e, 0, held.local_size) for e in range(len(held.devices)))
    return BuiltKernel(root, copy_ast(out, moves), out, [source])


def build_kernel(root: UOp, realized: dict[UOp, str], buffer_of: dict[UOp, UOp], device_buffer: UOp | None,
                 placements: dict[UOp, Placement] | None = None) -> BuiltKernel:  # fmt: skip
    """The kernel computing realized node `root` into `device_buffer` (a fresh BUFFER when None).

    With `placements` (a graph on several devices), the kernel is described once: its device index is a MULTI range.
    The fusion decisions are made (find_realizes): the build notes no reads and flags nothing."""
    kb = KernelBuilder(root, realized, buffer_of, {}, {})
    if placements is not None and (devices := devices_of(root)) is not None:
        if root not in placements or root.op is Ops.AFTER:  # a snapshot (ordering.py) or memory after a write
            return _local_copy(root, buffer_of)
        kb.multi = DeviceIndexing(placements, multi_range(len(devices)))
    out_idx, loops, loop_shape = _output_index(kb, root)
    ctx = frozenset(r for r in loops if r.op is Ops.RANGE)
    if root.op is Ops.ASSIGN:
        target_node, flat = _store_index(root.src[0], out_idx)
        out_buf = kb.out_buf = target_node.src[0] if is_kernelized(target_node) else target_node
        if kb.multi is not None:
            masked = kb.multi.placements[root].masked
            flat, _ = kb.multi.local_index(out_buf, out_buf, (flat,), (out_buf.arg,), None, gate=masked)
        value = kb.emit(root.src[1], out_idx, None, ctx)
    else:
        size = max_size(prod(root.shape))  # a symbolic size: room for its largest value
        out_buf = device_buffer if device_buffer is not None else UOp.new_buffer(root.device, size, root.dtype)
        if kb.multi is not None:
            register_multi_buffer(out_buf, kb.multi.placements[root], root.shape)
        flat = linearize_index(loops, loop_shape)
        value = kb.emit(root, out_idx, None, ctx)
    out_size = multi_buffer(out_buf).capacity if kb.multi is not None else out_buf.arg
    glob = UOp(Ops.DEFINE_GLOBAL, out_buf.dtype.ptr(out_size), arg=0)
    gate = kb.multi.store_gate if kb.multi is not None else None
    index = glob.index(flat) if gate is None else glob.index(flat, gate)
    ast = UOp.sink(index.store(value))
    inputs = sorted(kb.loads, key=lambda u: kb.loads[u])
    return BuiltKernel(root, ast, out_buf, inputs)


def note_reads(
    root: UOp,
    realized: dict[UOp, str],
    reads: Reads,
    flagged: dict[UOp, str],
    inlined: set[UOp],
    placements: dict[UOp, Placement] | None = None,
    whole_reads: set[UOp] | None = None,
) -> None:
    """Walk the kernel of `root` as build_kernel does, recording its reads in `reads` and the nodes they force to
    be realized in `flagged`, without building an AST (find_realizes walks every kernel this way, often twice)."""
    kb = KernelBuilder(root, realized, {}, reads, flagged, reads_only=True, inlined=inlined)
    if whole_reads is not None:  # shared by the round's walks: reduces some kernel reads other than per row
        kb.whole_reads = whole_reads
    if placements is not None and (devices := devices_of(root)) is not None:
        if root not in placements or root.op is Ops.AFTER:
            return  # a copy of memory on each device (_local_copy): it reads nothing that could be fused
        kb.multi = DeviceIndexing(placements, multi_range(len(devices)))
    out_idx, loops, _ = _output_index(kb, root)
    ctx = frozenset(r for r in loops if r.op is Ops.RANGE)
    if root.op is Ops.ASSIGN:
        _store_index(root.src[0], out_idx)  # a bad target raises here, as when the kernel is built
        kb.emit(root.src[1], out_idx, None, ctx)
    else:
        kb.emit(root, out_idx, None, ctx)


_SIMPLIFIED_MAX = 4096  # kernel ASTs whose simplified form is kept (the oldest goes first)
# AST's content key -> simplified AST: a layer repeated n times is one AST, simplified once. Keyed by the bytes, so an
# AST that is no longer among the few below (~20k tracked objects over a GPT run, if all were kept) dies with its
# schedule and is not walked by the collector's full collections while the cache keeps its simplified form
_simplified: dict[bytes, UOp] = {}
# the latest ASTs themselves, in front of it: a repeated layer builds its kernel again while the last one's AST lives
# (held here), so hash-consing returns that very node and the look-up needs no content key (which walks and hashes
# every node of an AST built anew: the 1,000-layer chain's scheduling 1.48-1.62 -> 1.10-1.30 s CPU). Only a few: with
# the collector's full collections rare (helpers.raise_gc_threshold) they cost it little
_SIMPLIFIED_NODES_MAX = 256
_simplified_nodes: dict[UOp, UOp] = {}


def simplify_kernel(ast: UOp) -> UOp:
    if TRACK_MATCH_STATS.value >= 2:  # VIZ shows every kernel's simplification
        return merge_loops(split_loops(graph_rewrite(ast, sym, name="simplify kernel indices")))
    if (done := _simplified_nodes.get(ast)) is not None:
        return done
    if len(_simplified_nodes) >= _SIMPLIFIED_NODES_MAX:
        del _simplified_nodes[next(iter(_simplified_nodes))]
    _simplified_nodes[ast] = done = _simplify_by_content(ast)
    return done


def _simplify_by_content(ast: UOp) -> UOp:
    if (done := _simplified.get(key := ast.key)) is not None:
        return done
    if len(_simplified) >= _SIMPLIFIED_MAX:
        del _simplified[next(iter(_simplified))]
    _simplified[key] = done = merge_loops(split_loops(graph_rewrite(ast, sym, name="simplify kernel indices")))
    return done


def copy_kernel(root: UOp) -> UOp:
    """The AST of a COPY: a single COPY node naming the destination device."""
    return UOp(Ops.COPY, root.dtype, (UOp(Ops.DEVICE, arg=root.device),), prod(root.shape) * root.dtype.itemsize)
