"""The scheduler's entry point: `kernelize(sink)` turns a tensor graph into KERNEL nodes writing buffers.

Every realized node R becomes `ASSIGN(BUFFER, KERNEL)`: the KERNEL's AST stores R into BUFFER; its sources are the
buffers it writes and reads, so a toposort of the result is a valid run order. The returned map says what each
realized tensor node became (a view of its buffer), for Tensor to repoint live tensors.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from fusegrad.helpers import TRACK_MATCH_STATS, pluralize, prod
from fusegrad.schedule.collectives import allreduce_kernel, multi_copy_kernel
from fusegrad.schedule.fusion import (
    WINDOW_CROP,
    Reads,
    initial_realizes,
    is_kernelized,
    is_stored,
    is_view_of_stored,
    trace_fusion_decisions,
)
from fusegrad.schedule.multi import Placement, devices_of, has_multi, place_graph
from fusegrad.schedule.ordering import add_dependencies, run_order, snapshot
from fusegrad.schedule.rangeify import Kernel, build_kernel, copy_kernel, note_reads, simplify_kernel
from fusegrad.schedule.split import pm_split_reduces
from fusegrad.schedule.views import copy_then_rearrange, storage_view_kernel, storage_write_kernel
from fusegrad.schedule.windows import window_crops
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import UOp, all_metadata
from fusegrad.uop.rewrite import graph_rewrite, graph_rewrite_map, track_rewrites
from fusegrad.uop.symbolic_shape import is_symbolic, kernel_var_vals, rebind_map, unbind_graph
from fusegrad.uop.upat import PatternMatcher, UPat


@dataclass
class KernelizeResult:
    """What `kernelize` made: the old-node -> new-node map and how many kernels it built."""

    becomes: dict[UOp, UOp]
    kernels: list[UOp]

    @property
    def kernel_count(self) -> int:
        return len(self.kernels)


def _is_flat_view_of_stored(x: UOp) -> bool:
    """Memory a COPY can move as is: a buffer (or a copy's result), possibly reshaped."""
    node = x
    while node.op is Ops.RESHAPE:
        node = node.src[0]
    return is_stored(node) or node.op is Ops.COPY


def _contiguous_copy_source(c: UOp) -> UOp | None:
    """COPY moves raw memory, so its source must be a whole contiguous buffer."""
    src = c.src[0]
    if _is_flat_view_of_stored(src) or src.op is Ops.CONTIGUOUS:
        return None
    if (moved := copy_then_rearrange(c)) is not None:
        return moved  # DISK can't permute its memory: copy the bytes, rearrange them on the destination (views.py)
    return c.replace(src=(src.contiguous(), *c.src[1:]))


def _contiguous_assign_value(a: UOp) -> UOp | None:
    """An ASSIGN whose value is only a view of memory needs a kernel that computes it: make it contiguous."""
    if is_kernelized(a) or a.src[1].op is Ops.CONTIGUOUS:
        return None
    value = a.src[1]
    if is_view_of_stored(value) or _reads_target_elsewhere(a):
        return a.replace(src=(a.src[0], value.contiguous()))
    return None


def _reads_target_elsewhere(a: UOp) -> bool:
    """Does the value read the assigned buffer through a different view? Then writing in place would race.
    Reads through the target itself are at the element being written; the walk stops there, so the movement nodes
    inside the target's own view chain (a conv weight's gradient is RESHAPE(RESHAPE(BUFFER)): its reduce's shape, then
    the weight's) are not counted as other views: counted, `w.grad += g` was computed aside and copied in."""
    target_base = a.src[0].base
    others = a.src[1].toposort(gate=lambda u: u is not a.src[0])
    return any(u.op in GroupOp.Movement and u.base is target_base for u in others)


def after_written(x: UOp) -> UOp | None:
    """AFTER(B, write): once the write is kernelized or done (it became a view of memory), read that memory."""
    write = x.src[1]
    if write.op is Ops.ASSIGN and not is_kernelized(write):
        return None
    return write.base if is_stored(write.base) else None


pm_prepare_realize = PatternMatcher(
    [
        (UPat(Ops.AFTER, name="x"), after_written),  # AFTER(B, done write) -> the written memory
        (UPat(Ops.CONTIGUOUS, src=(UPat(Ops.COPY, name="c"),)), lambda c: c),  # CONTIGUOUS(COPY(x)) -> COPY(x)
        (UPat(Ops.COPY, name="c"), _contiguous_copy_source),  # COPY(view) -> COPY(CONTIGUOUS(view))
        (UPat(Ops.ASSIGN, name="a"), _contiguous_assign_value),  # ASSIGN(t, racy value) -> ASSIGN(t, CONTIGUOUS(value))
        (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), name="x"), lambda x: x.src[0]),  # gradient markers vanish
    ]
)


def find_realizes(sink: UOp, placements: dict[UOp, Placement] | None = None) -> dict[UOp, str]:
    """Grow the initial realize set until no kernel would recompute a reduce or read a node at two places; each
    realized node maps to the reason it got its own kernel (fusion.REASONS).

    Each round walks every kernel (reads only, note_reads) with fresh read records. A reduce found to need its own
    kernel is realized and walked in the same round; the round is walked again only if an earlier walk had computed
    that reduce inline, since every other walk would go exactly as it went (same order, same reads)."""
    realized = {u: r for u, r in initial_realizes(sink).items() if prod(u.shape) != 0}  # empty results need no kernel
    while True:
        reads: Reads = {}
        flagged: dict[UOp, str] = {}
        inlined: set[UOp] = set()
        whole_reads: set[UOp] = set()
        added: list[UOp] = []
        roots = list(realized)
        for root in roots:  # grows while we walk: a reduce that needs its own kernel is walked in this same pass
            if root.op is Ops.COPY:
                continue
            seen = len(flagged)
            note_reads(root, realized, reads, flagged, inlined, placements, whole_reads)
            # flagged only grows within a round: the newest entries are the ones this walk added
            for u in reversed([*itertools.islice(reversed(flagged), len(flagged) - seen)]):
                if u.op is Ops.REDUCE_AXIS and u not in realized and prod(u.shape) != 0:
                    realized[u] = flagged[u]
                    roots.append(u)
                    added.append(u)
        if any(u in inlined for u in added):
            continue  # a kernel walked before that reduce was split off computed it inline: walk again
        new = [u for u in flagged if u not in realized and prod(u.shape) != 0]
        crops = window_crops(sink, realized) if not new and placements is None else {}
        if not new and not crops:
            return realized
        if not new:  # realize what is read of a window gradient, not the whole padded axis (windows.py)
            realized = {crops.get(u, u): WINDOW_CROP if u in crops else r for u, r in realized.items()}
            continue
        realized.update({u: flagged[u] for u in new})


def _kernel_name(result: Any) -> str:
    return f"Schedule {pluralize('Kernel', result.kernel_count)}"


@track_rewrites(name=lambda *args, ret, **kwargs: _kernel_name(ret))
def kernelize(sink: UOp) -> KernelizeResult:
    """Build the kernels for every node `sink` needs realized; see the module docstring."""
    unbound, var_vals = unbind_graph(sink)  # kernels see variables, not their values: one kernel for every value
    sink = unbound.get(sink, sink)
    prepare_map = graph_rewrite_map(sink, pm_prepare_realize + pm_split_reduces, name="prepare for realize")
    prepared = prepare_map[sink]
    topo = prepared.toposort()
    placements: dict[UOp, Placement] | None = None
    if has_multi(topo):  # several devices: give every node a placement, insert the communication (multi.py)
        prepared, multi_map, placements = place_graph(prepared)
        prepare_map = {old: multi_map.get(new, new) for old, new in prepare_map.items()}
        topo = prepared.toposort()
    realized = find_realizes(prepared, placements)
    run = run_order(topo, realized)
    if TRACK_MATCH_STATS.value >= 2:  # VIZ: a step tagging each realized node with why it got a kernel (fusion.py)
        made = [snapshot(w)[1] for w in run.after]
        trace_fusion_decisions(prepare_map, prepared, realized, made, placements is not None)
    buffer_of: dict[UOp, UOp] = {}
    kernels: list[UOp] = []
    snapshots: dict[UOp, UOp] = {}  # write -> the kernel copying what it overwrites, for reads that can't precede it
    redirected: list[UOp] = []  # buffers whose old contents later kernels read from that copy
    for write in run.after:
        buf, snap = snapshot(write)
        buffer_of[buf] = snapshots[write] = _kernel_for(snap, realized, buffer_of, placements, var_vals)
        redirected.append(buf)
        kernels.append(snapshots[write])
    for root in run.roots:
        stored = _kernel_for(root, realized, buffer_of, placements, var_vals)
        deps = [buffer_of[r] for r in run.before.get(root, ())]
        if root in snapshots:
            deps.append(snapshots[root])
        stored = add_dependencies(stored, deps)
        buffer_of[root] = stored
        kernels.append(stored)
    for buf in redirected:  # the redirect was for building kernels; the buffer itself stays what tensors hold
        del buffer_of[buf]
    becomes = rebind_map(_becomes_map(sink, prepare_map, buffer_of), unbound, var_vals)
    if TRACK_MATCH_STATS.value >= 2 and kernels:  # a step showing the kernel graph: VIZ links each KERNEL to its code
        graph_rewrite(UOp.sink(*kernels), _pm_nothing, name="kernel graph")
    return KernelizeResult(becomes, kernels)


_pm_nothing = PatternMatcher([])


def _kernel_for(
    root: UOp,
    realized: dict[UOp, str],
    buffer_of: dict[UOp, UOp],
    placements: dict[UOp, Placement] | None,
    var_vals: dict[str, int],
) -> UOp:
    metadata = _fused_metadata(root, realized)
    if root.op is Ops.COPY:
        src = root.src[0]
        node = src
        while node.op is Ops.RESHAPE:
            node = node.src[0]
        stored = buffer_of.get(node, node)
        if placements is not None and (devices_of(root) is not None or devices_of(node) is not None):
            held = placements.get(node)
            if held is not None and held.partial is not None:
                return allreduce_kernel(root, stored, held.partial, metadata)
            return multi_copy_kernel(root, stored, placements.get(root), metadata)
        out = UOp.new_buffer(root.device, prod(root.shape), root.dtype)
        kernel = UOp(Ops.KERNEL, src=(out, stored), arg=Kernel(copy_kernel(root), metadata))
        return UOp(Ops.ASSIGN, out.dtype, (out, kernel))
    if (write := storage_write_kernel(root, buffer_of)) is not None:
        return write  # an assign into DISK memory: the copy writes the bytes in place (views.py)
    if (view := storage_view_kernel(root, buffer_of)) is not None:
        return view  # DISK and NPY run no kernels: a view of their memory is a Buffer view (views.py)
    built = build_kernel(root, realized, buffer_of, None, placements)
    deps: tuple[UOp, ...] = ()
    if root.op is Ops.ASSIGN:
        target = root.src[0].base
        earlier = buffer_of.get(target.src[1]) if target.op is Ops.AFTER else target if is_kernelized(target) else None
        if earlier is not None and earlier not in built.inputs:
            deps = (earlier,)  # an earlier write to the same buffer must run first
    ast = simplify_kernel(built.ast)
    info = Kernel(ast, metadata, kernel_var_vals(ast, var_vals))
    kernel = UOp(Ops.KERNEL, src=(built.output, *built.inputs, *deps), arg=info)
    return UOp(Ops.ASSIGN, built.output.dtype, (built.output, kernel))


# leaves shared by every method that makes the same constant or buffer: their label says nothing about this kernel
_UNLABELLED_LEAVES = (Ops.CONST, Ops.DEVICE, Ops.UNIQUE, Ops.BUFFER, Ops.DEFINE_VAR, Ops.BIND)


def _fused_metadata(root: UOp, realized: dict[UOp, str]) -> tuple[Any, ...]:
    """The Tensor-call labels of every node computed inside root's kernel (not those of kernels it reads), so a
    kernel fusing `x.relu() * y.sigmoid()` reports relu, sigmoid and __mul__; in first-seen order from the root."""
    found: dict[Any, None] = dict.fromkeys(all_metadata.get(root, ()))
    stack, seen = list(root.src), {root}
    while stack:
        node = stack.pop()
        if node in seen or node in realized:
            continue
        seen.add(node)
        if node.op not in _UNLABELLED_LEAVES and not _is_identity(node) and not _is_constant_view(node):
            found.update(dict.fromkeys(all_metadata.get(node, ())))
        stack.extend(node.src)
    return tuple(found)


def _is_constant_view(node: UOp) -> bool:
    """A view of a constant (0.5 broadcast to (3, 5)): hash-consed like the constant itself, so it is shared by every
    call that makes it and keeps the label of the first (seen with TRACEMETA=0 after a labelled gelu)."""
    return node.op in GroupOp.Movement and node.base.op is Ops.CONST


def _is_identity(node: UOp) -> bool:
    """x * 1 or x + 0 (a gradient times the implicit ones of `backward()`): the kernel folds it away, label and all."""
    unit = _UNITS.get(node.op)
    return unit is not None and any(s.base.op is Ops.CONST and s.base.arg == unit for s in node.src)


_UNITS = {Ops.MUL: 1, Ops.ADD: 0}  # the constant that leaves the other operand as it is


def _result_view(root: UOp, stored: UOp) -> UOp:
    """What a realized node reads as once its kernel has run: a view of the kernel's buffer."""
    if root.op is Ops.ASSIGN:
        target = root.src[0]
        return target.substitute({target.base: stored}) if target.base is not stored else target
    if is_symbolic(root.shape):  # the buffer holds the largest size; the result is its first prod(shape) elements
        return stored.shrink(((0, prod(root.shape)),)).reshape(root.shape)
    return stored.reshape(root.shape) if root.shape != stored.shape else stored


def _becomes_map(sink: UOp, prepare_map: dict[UOp, UOp], buffer_of: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """Original tensor node -> a view of its kernelized buffer, for every output and every write.

    Explicit materialisations (COPY, CONTIGUOUS, ASSIGN) are mapped too. Nodes the scheduler chose to store along
    the way (a reduce split off, a costly operand) are not: a live tensor whose graph passes through them keeps its
    graph, so a gradient taken after a realize (a layernorm's statistics) still reaches the leaves.
    """
    outputs = {u for out in sink.src for u in (out, out.base)}
    becomes: dict[UOp, UOp] = {}
    for old, new in prepare_map.items():
        if new in buffer_of and (old in outputs or new.op in (Ops.ASSIGN, Ops.COPY, Ops.CONTIGUOUS)):
            becomes[old] = _result_view(new, buffer_of[new])
        elif new.op is Ops.AFTER and new.src[1] in buffer_of:
            becomes[old] = buffer_of[new.src[1]]
        elif old.op is Ops.AFTER and is_stored(new):
            becomes[old] = new
        elif new is not old and new.op is not Ops.SINK and new._shape is not None and prod(new.shape) == 0:
            becomes[old] = UOp.const_tensor(new.dtype, 0, new.device, new.shape)
    for out in sink.src:  # empty outputs become constants: no memory, no kernel
        if out not in becomes and out._shape is not None and prod(out.shape) == 0 and not is_stored(out.base):
            becomes[out] = UOp.const_tensor(out.dtype, 0, out.device, out.shape)
    for out in sink.src:
        if out not in becomes and (replaced := out.substitute(becomes)) is not out:
            becomes[out] = replaced
    return becomes
