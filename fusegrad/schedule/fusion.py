"""Fusion policy: which tensor nodes get their own buffer (a kernel of their own), and why.

Every node that is not realized is computed inline by the kernel reading it. A node is realized for one of the
`REASONS` below; the scheduler keeps the reason as the value of its `realized` map (kernelize.find_realizes), and with
TRACK_MATCH_STATS>=2 (VIZ) the "fusion decisions" step tags each realized node with it (`trace_fusion_decisions`).
The read walk (`ReadPolicy.note_read`) is shared with the AST emitter (rangeify.KernelBuilder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fusegrad.helpers import prod
from fusegrad.schedule.indexing import Index
from fusegrad.uop import AxisType, GroupOp, Ops
from fusegrad.uop.ops import UOp
from fusegrad.uop.rewrite import graph_rewrite
from fusegrad.uop.upat import PatternMatcher, UPat

# why a node gets a kernel of its own. Held whatever fusion decides (initial_realizes):
OUTPUT = "realized by the user"  # an output of the realize (or kernelize)
CONTIGUOUS = "contiguous() asked for"  # the user's CONTIGUOUS
DEVICE_COPY = "device copy"  # a COPY: a transfer between devices is a kernel of its own
ASSIGN = "assign: a write into a buffer"  # an ASSIGN writes existing memory
# a CONTIGUOUS the scheduler put in (found only for the VIZ step: find_realizes records them as CONTIGUOUS)
COPY_SOURCE = "a copy moves whole memory: its source is made contiguous"  # COPY of a computed value or a view
ASSIGN_VALUE = "assigned value is a view of memory or reads its target elsewhere"  # else the write would race
SPLIT_REDUCE = "long contraction split in two (split.py)"  # the partial sums
MULTI_PLACEMENT = "placed on several devices (multi.py)"  # a reshard or communication buffer
# fusion's own decisions, from one kernel's reads (ReadPolicy.note_read)
REDUCE_RECOMPUTED = "reduce would be recomputed per output"  # a loop around the read, outside one it uses, repeats it
USED_BY_KERNELS = "used by several kernels"  # a reduce read by two kernels: computed once, loaded by both
READ_TWICE = "read at two different indices"  # one kernel reads it at two places (a shifted copy, a transpose)
COSTLY_IN_REDUCE = "costly value recomputed in a reduce loop"  # 3+ loads or 8+ ops, read again per output column
# a row's reduce read inside loops over that row (softmax's max, layernorm's mean) is fused into their kernel, which
# then reads the row several times: from cache only if the row fits (ROW_CACHE_BYTES), else from memory each time
ROW_UNCACHED = "row reduce read again per row element, its row too long or scattered to stay cached"
# ... or read inside a reduce that also runs over an output loop the row reduce ignores (`(x - x.mean(1)) @ w`): fused,
# it would cost that contraction its register tile over the rows (codegen/opt.py tiles loops every reduce depends on)
ROW_IN_CONTRACTION = "row reduce read inside a contraction over other outputs"
# made after them
WINDOW_CROP = "window gradient: only the crop read is realized"  # windows.py: the crop, not the padded gradient
SNAPSHOT = "old contents kept for readers of an overwritten buffer"  # ordering.py: readers that run after a write
REASONS = (OUTPUT, CONTIGUOUS, DEVICE_COPY, ASSIGN, COPY_SOURCE, ASSIGN_VALUE, SPLIT_REDUCE, MULTI_PLACEMENT,
           REDUCE_RECOMPUTED, ROW_UNCACHED, ROW_IN_CONTRACTION, USED_BY_KERNELS, READ_TWICE, COSTLY_IN_REDUCE,
           WINDOW_CROP, SNAPSHOT)  # fmt: skip

# a row read several times by one kernel stays in L2 (512 KiB a core) with room for a second operand's row
ROW_CACHE_BYTES = 128 << 10
# operations that cost several simple ones: counted 4x when deciding whether recomputing a value is dear
_COSTLY_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.POW})


def is_kernelized(u: UOp) -> bool:
    """An ASSIGN(BUFFER, KERNEL): a buffer whose kernel is already built."""
    return u.op is Ops.ASSIGN and len(u.src) == 2 and u.src[1].op is Ops.KERNEL


def is_stored(u: UOp) -> bool:
    """Memory that kernels load from without computing: buffers and kernelized buffers."""
    return u.op is Ops.BUFFER or is_kernelized(u)


def is_view_of_stored(u: UOp) -> bool:
    """A movement op over memory (or a constant): reading it computes nothing."""
    return u.op in GroupOp.Movement and (is_stored(u.base) or u.base.op is Ops.CONST)


def initial_realizes(sink: UOp) -> dict[UOp, str]:
    """Nodes that need their own kernel whatever fusion decides: outputs, CONTIGUOUS, COPY and ASSIGN."""
    ret: dict[UOp, str] = {}
    for s in sink.src:
        base = s.base
        if not is_stored(base) and base.op not in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
            ret[base] = OUTPUT
    for u in sink.toposort():  # an output that is one of these says why by its op (a key kept keeps its place)
        if u.op in (Ops.CONTIGUOUS, Ops.COPY) or (u.op is Ops.ASSIGN and not is_kernelized(u)):
            ret[u] = DEVICE_COPY if u.op is Ops.COPY else ASSIGN if u.op is Ops.ASSIGN else CONTIGUOUS
    return ret


# node -> kernel root -> the (index, validity) pairs that kernel reads the node at
Reads = dict[UOp, dict[UOp, set[tuple[Index, UOp | None]]]]


@dataclass
class ReadPolicy:
    """One kernel's read walk: every read of a node is noted in `reads`, and a node the kernel should not compute
    inline is put in `flagged` with its reason (find_realizes realizes them)."""

    root: UOp
    realized: dict[UOp, str]
    buffer_of: dict[UOp, UOp]  # realized node -> the stored node (ASSIGN(BUFFER, KERNEL)) kernels load it from
    reads: Reads
    flagged: dict[UOp, str]
    costly: dict[UOp, bool] = field(default_factory=dict)
    range_memo: dict[Index, frozenset[UOp]] = field(default_factory=dict)
    # reduces read at their own index by some kernel (not once per row element): stored if several kernels read them
    whole_reads: set[UOp] = field(default_factory=set)
    permuted: dict[UOp, bool] = field(default_factory=dict)

    def stored_node(self, u: UOp) -> UOp | None:
        """What `u` is loaded from, if it is not computed inline in this kernel."""
        if is_stored(u):
            return self.buffer_of.get(u, u)  # a buffer read through a snapshot (ordering.py) is read from the copy
        if u.op is Ops.AFTER:  # memory after an ASSIGN: read what that assign's kernel wrote
            return self.buffer_of.get(u.src[1], u.src[1])
        if u in self.realized and u is not self.root:
            return self.buffer_of.get(u, u)
        return None

    def note_read(self, node: UOp, idx: Index, valid: UOp | None, ctx: frozenset[UOp]) -> None:
        """Record that this kernel reads `node` at `idx` inside loops `ctx`; flag it when inlining would be wrong or
        dear (the first reason found is kept: flagged keeps its order for find_realizes)."""
        if (
            node is self.root
            or node.op in GroupOp.Movement
            or node.op in (Ops.CONST, Ops.IOTA, Ops.DEFINE_VAR, Ops.BIND)
            or node._shape is None  # math on kernel constants (a gradient's `e - 1`): the same at every index
            or is_stored(node)  # memory is loaded wherever it is read: realizing it again would only copy it
        ):
            return
        by_kernel = self.reads.setdefault(node, {})
        here = by_kernel.setdefault(self.root, set())
        here.add((idx, valid))
        if node.op is Ops.REDUCE_AXIS:
            if (reason := self.repeated_reduce(node, idx, ctx)) is not None:
                self.flagged.setdefault(node, reason)
            if reason is not None or not ctx - self.ranges_in(idx):
                self.whole_reads.add(node)
            # a row statistic every kernel reads per row element is computed again by each over its cached row
            if len(by_kernel) > 1 and node in self.whole_reads:
                self.flagged.setdefault(node, USED_BY_KERNELS)
            if len(here) > 1:
                self.flagged.setdefault(node, READ_TWICE)
        elif len(here) > 1 and not _is_row_reread(here):  # one kernel reads it at two places
            self.flagged.setdefault(node, READ_TWICE)
        elif self.is_recomputed_in_reduce(node, idx, ctx) and self.is_costly(node):
            self.flagged.setdefault(node, COSTLY_IN_REDUCE)

    def repeated_reduce(self, node: UOp, idx: Index, ctx: frozenset[UOp]) -> str | None:
        """Why a reduce read here would be computed more than once per value, or None.

        A loop around the read that the reduce's index ignores repeats it, unless that loop is nested inside every
        loop the index uses (a row's max read per column of the row): the linearizer computes the reduce once per
        row, outside it. Such a row is then read again by the loop: fused only when one row fits in cache, and not
        into a contraction over other outputs (the loops around a reduce's source are those its own index uses)."""
        extra = ctx - (used := self.ranges_in(idx))
        if not extra:
            return None
        if any(_nesting(m) < _nesting(r) for m in extra for r in used):
            return REDUCE_RECOMPUTED
        if len({m.arg[1] is AxisType.REDUCE for m in extra}) == 2:
            return ROW_IN_CONTRACTION
        return None if _row_bytes(node) <= ROW_CACHE_BYTES and not self.is_permuted(node.src[0]) else ROW_UNCACHED

    def is_permuted(self, node: UOp) -> bool:
        """Does computing `node` read memory through a PERMUTE (x.T's softmax)? Its rows then lie across memory, a
        cache line per element (a power-of-two stride: all in one cache set); kernels of their own tile along the
        memory's rows instead, which a fused row op's kernel does not (codegen/opt.py). x.T's softmax over (4096,
        1024) single-thread: 71 ms fused, 50 ms in three kernels."""
        if (cached := self.permuted.get(node)) is not None:
            return cached
        found, stack, seen = False, [node], {node}
        while stack and not found:
            n = stack.pop()
            found = n.op is Ops.PERMUTE
            if self.stored_node(n) is not None or n in self.flagged or n.op is Ops.REDUCE_AXIS:
                continue  # loaded, or a reduce whose value (not its layout) the row reads
            for s in n.src:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        self.permuted[node] = found
        return found

    def ranges_in(self, idx: Index) -> frozenset[UOp]:
        """The RANGEs an index uses (kept per index: a chain of kernels reads through the same ones)."""
        if (found := self.range_memo.get(idx)) is None:
            found = self.range_memo[idx] = frozenset().union(*[_ranges_below(i) for i in idx])
        return found

    def is_recomputed_in_reduce(self, node: UOp, idx: Index, ctx: frozenset[UOp]) -> bool:
        """Read inside a reduce loop by an index that ignores a loop enclosing one it uses: each value is computed
        again for every step of that loop (a matmul operand, once per output column). A value that ignores only
        loops nested inside all of its own (a row's statistic read in the reduce over that row) is computed once
        per row, outside them: the linearizer places an op by the loops it depends on."""
        if not any(r.arg[1] is AxisType.REDUCE for r in ctx):
            return False
        used = self.ranges_in(idx)
        return any(_nesting(m) < _nesting(r) for m in ctx - used for r in used)

    def is_costly(self, node: UOp) -> bool:
        """Whether computing `node` inline costs more than a load: it reads 3+ buffers or does 8+ operations.

        Cheap producers (a cast, a relu, a scale) stay fused into the reduce that reads them; costly ones are cheaper
        to store once than to recompute per output element."""
        if (cached := self.costly.get(node)) is not None:
            return cached
        loads: set[UOp] = set()
        ops, stack, seen = 0, [node], {node}
        while stack and len(loads) < 3 and ops < 8:
            n = stack.pop()
            if n is not node and (self.stored_node(n) is not None or n in self.flagged or n.op is Ops.REDUCE_AXIS):
                loads.add(n.base)
                continue
            if n.op in GroupOp.ALU:
                ops += 4 if n.op in _COSTLY_OPS else 1
            for s in n.src:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        self.costly[node] = result = len(loads) >= 3 or ops >= 8
        return result


def _ranges_below(u: UOp) -> frozenset[UOp]:
    """The RANGEs of index expression `u` (itself included), kept in the node: index nodes are hash-consed, so every
    kernel of a model's repeated layer reads through the same ones (the 1,000-layer chain walked ~22k of them)."""
    return u._cached("_ranges_below", _own_ranges)  # type: ignore[no-any-return]  # only _own_ranges writes it


def _own_ranges(u: UOp) -> frozenset[UOp]:
    below = frozenset().union(*[s.__dict__["_ranges_below"] for s in u.src])
    return below | {u} if u.op is Ops.RANGE else below


def _is_row_reread(reads: set[tuple[Index, UOp | None]]) -> bool:
    """Whether every read is the same row element for element: the indices differ only where each has a loop of
    its own (a fused row reduce's loop, or the output's loop over that row), at least one of them a reduce loop.
    Computing the value again per read then costs one more pass over a cached row, not a store and a load."""
    (first, valid), *rest = reads
    for idx, other_valid in rest:
        if other_valid is not valid or len(idx) != len(first):
            return False
        differ = [(a, b) for a, b in zip(first, idx, strict=True) if a is not b]
        for a, b in differ:
            if a.op is not Ops.RANGE or b.op is not Ops.RANGE or AxisType.REDUCE not in (a.arg[1], b.arg[1]):
                return False
            if any(a in i.toposort() or b in i.toposort() for i in (*first, *idx) if i is not a and i is not b):
                return False
    return True


def _row_bytes(node: UOp) -> int | float:
    """Bytes of one reduction's input (the row a reduce reads per value; inf when symbolic)."""
    size = prod(node.src[0].shape[a] for a in node.arg[1])
    return size * node.src[0].dtype.itemsize if isinstance(size, int) else math.inf


def _nesting(r: UOp) -> tuple[int, int]:
    """Loop order in a kernel: output loops outside reduce loops, each kind in the order the walk made them."""
    return (r.arg[1] is AxisType.REDUCE, r.arg[0])


# *** the VIZ step: only with TRACK_MATCH_STATS>=2, so scheduling itself never pays for it ***


def _inserted_reason(node: UOp, users: dict[UOp, list[UOp]], multi: bool) -> str:
    """Why kernelize's prepare pass (or multi.py's placement) put a CONTIGUOUS the user did not write."""
    ops = {u.op for u in users.get(node, ())}
    if Ops.COPY in ops:
        return COPY_SOURCE
    if Ops.ASSIGN in ops:
        return ASSIGN_VALUE
    return MULTI_PLACEMENT if multi else SPLIT_REDUCE


@dataclass
class _Tagging:
    """The "fusion decisions" rewrite's ctx: the reasons, keyed by the scheduler's nodes, and for each node the
    rewrite made (a tagged node, or a parent rebuilt over one) the scheduler's node it stands for."""

    reasons: dict[UOp, str]
    original: dict[UOp, UOp] = field(default_factory=dict)


def _tag_reason(ctx: _Tagging, x: UOp) -> UOp | None:
    if x in ctx.original:  # already tagged, or seen and not realized
        return None
    original = x.replace(src=tuple(ctx.original.get(s, s) for s in x.src))
    if (reason := ctx.reasons.get(original)) is None:
        ctx.original[x] = original
        return None
    tagged = x.rtag(reason) if x.tag is None else x.rtag((x.tag, reason))  # a multi.py shard tag stays beside it
    ctx.original[tagged] = original
    return tagged


pm_tag_reasons = PatternMatcher([(UPat(GroupOp.All, name="x"), _tag_reason)])  # realized node -> tagged with its reason


def trace_fusion_decisions(
    prepare_map: dict[UOp, UOp], prepared: UOp, realized: dict[UOp, str], snapshots: list[UOp], multi: bool
) -> None:
    """A VIZ step named "fusion decisions": each match tags one realized node (or snapshot) with the reason it got
    its own kernel (`tag='read at two different indices'`); the nodes left untagged are computed inline by their
    readers. A CONTIGUOUS that is no image of the user's (`prepare_map`) was put by kernelize's prepare pass or by
    multi.py's placement."""
    user_contiguous = {new for old, new in prepare_map.items() if old.op is Ops.CONTIGUOUS}
    topo = prepared.toposort()
    users: dict[UOp, list[UOp]] = {}
    for u in topo:
        for s in u.src:
            users.setdefault(s, []).append(u)
    reasons = {u: _inserted_reason(u, users, multi) if r == CONTIGUOUS and u not in user_contiguous else r
               for u, r in realized.items()}  # fmt: skip
    reasons.update(dict.fromkeys(snapshots, SNAPSHOT))
    graph = UOp.sink(*prepared.src, *[u for u in reasons if u not in topo])
    # top-down, as the viewer replays a step: sources are tagged first, so each node is looked up by its original
    graph_rewrite(graph, pm_tag_reasons, ctx=_Tagging(reasons), name="fusion decisions")
