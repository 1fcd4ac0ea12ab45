"""The schedule cache: a realize whose tensor graph has the structure of an earlier one reruns that one's schedule.

Structure means every node's op, dtype, arg (constants by value) and sources, with BUFFER nodes as parameters: the
same kernels run with this realize's buffers, in the same order, and the tensors are repointed the same way, without
kernelize or create_schedule. The key is built in one walk of the graph (`graph_structure`). Graphs the cache can't
express (symbolic variables, tensors sharded over several devices, storage views) are scheduled every time.
`Tensor.realize` (tensor.py's `realize_tensors`) keys its graph with `graph_structure`, runs a kept schedule with
`replay_into` (`replay` returns the map instead) and keeps a new one with `record`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusegrad.device import Buffer
from fusegrad.engine.realize import (
    CompiledRunner,
    ExecItem,
    batch_for_graph,
    capturing,
    count_run,
    run_graph,
    run_schedule,
)
from fusegrad.helpers import (
    DEBUG,
    JIT,
    PROFILE,
    SCHEDULE_CACHE,
    TRACK_MATCH_STATS,
    ContextVar,
    colored,
    cpu_profile,
)
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import LABELS, UOp, UOpMetaClass, all_metadata, buffers
from fusegrad.uop.shape import compute_device

if TYPE_CHECKING:
    from fusegrad.dtype import DType
    from fusegrad.engine.realize import Runner

CACHE_SIZE = 512  # schedules kept; the oldest goes first (a graph with a fresh random draw is a new structure)
GRAPH_AFTER_HITS = 2  # a schedule replayed this often runs its kernels through device graphs (one call per batch)
CACHE_NODES = 1_000_000  # graph nodes in all kept keys together (~100 bytes each): a few huge graphs evict the rest
# nodes whose graph the cache can't replay: symbolic values are kernel arguments bound per run, kernels built by an
# earlier kernelize() are not part of a structure
_UNCACHEABLE = frozenset({Ops.BIND, Ops.DEFINE_VAR, Ops.KERNEL})
# nodes whose arg is an identity, not a value: two CONTIGUOUS of one source are distinct nodes, whatever their ids
_ID_ARGS = frozenset({Ops.UNIQUE, Ops.CONTIGUOUS})
_CHECKED = _UNCACHEABLE | {Ops.DEVICE} | GroupOp.Movement  # the ops is_replayable can refuse


@dataclass(frozen=True, slots=True)
class Structure:
    """One walk of a graph: its key (None when the cache can't replay it), the nodes in walk order, each node's
    position, and the BUFFER nodes (the schedule's parameters) in walk order."""

    key: tuple[Any, ...] | None
    nodes: list[UOp]
    position: dict[UOp, int]
    leaves: list[UOp]


def graph_structure(sink: UOp, remember_first: bool = False) -> Structure:
    """Post-order walk of `sink`, sources in order: two graphs of one structure list their nodes alike.

    `remember_first` keeps the walk of the sink's first source in that node, and a later walk of a sink with the same
    first source starts from it (a node never changes, so neither does its walk): Tensor.gradient walks the loss's
    graph, and the realize of the loss with its gradients then walks only the gradients' nodes (or none: see
    GradientBuild)."""
    flag = _flag_id()
    first = sink.src[0] if sink.src else None
    build = None if remember_first else _take_build(sink)
    if first is not None and (kept := first.__dict__.get(_KEPT_WALK)) is not None and kept[0] == flag:
        return _walk_past_kept(sink, kept, build)
    nodes: list[UOp] = []
    leaves: list[UOp] = []
    position: dict[UOp, int] = {}
    parts: list[Any] = [flag]
    if remember_first and first is not None and first.op is not Ops.BUFFER:
        cacheable = _walk([first], nodes, position, leaves, parts, True)
        # without `first` itself: a node holding a list that holds it would be a reference cycle
        first.__dict__[_KEPT_WALK] = (flag, nodes[:-1], tuple(leaves), parts[1:], cacheable)
        stack: list[UOp | None] = [sink, _EMIT, *reversed(sink.src[1:])]
    else:
        cacheable, stack = True, [sink]
    cacheable = _walk(stack, nodes, position, leaves, parts, cacheable)
    key = tuple(parts) if cacheable else None
    return Structure(key, nodes, position, leaves)


def _walk_past_kept(sink: UOp, kept: tuple[Any, ...], build: tuple[GradientBuild, tuple[int, ...]] | None) -> Structure:
    """graph_structure of a sink whose first source kept its walk: that walk, then the rest, spliced from the
    gradient build's remembered walk when there is one (else walked, and remembered for the build's next time)."""
    flag, kept_nodes, kept_leaves, kept_parts, cacheable = kept
    first = sink.src[0]
    nodes, leaves, parts = [*kept_nodes, first], list(kept_leaves), [flag, *kept_parts]
    if build is not None and cacheable and (spliced := _splice(build, sink, nodes, leaves, parts)) is not None:
        return spliced
    start = (len(nodes), len(leaves), len(parts))
    position = dict(zip(nodes, range(len(nodes)), strict=True))
    walked = _walk([sink, _EMIT, *reversed(sink.src[1:])], nodes, position, leaves, parts, cacheable)
    if build is not None and cacheable:  # the first realize of this build's gradients: remember its walk
        _learn(build, nodes, leaves, parts, start, walked)
    return Structure(tuple(parts) if walked else None, nodes, position, leaves)


_KEPT_WALK = "_kept_walk"  # a node's __dict__ entry: (flag id, nodes, leaves, key parts, cacheable) of its graph


@dataclass(frozen=True, slots=True)
class GradientBuild:
    """Gradients just rebuilt from a GraphRecipe (Tensor.gradient), for the realize that reads them next: `made` is
    every node the recipe read or made (GraphRecipe.build_all), `outputs` each gradient's index among the recipe's
    outputs, `continuations` what walks of realizes of the loss with some of these gradients found (per recipe).

    The realize of the loss (walked already: its kept walk) with gradients of one recipe walks a graph whose
    structure is the recipe's: the same nodes of `made` in the same order, with the same key parts. So the first such
    walk is remembered as `made` indices and key parts (a Continuation), and later ones are spliced from it without
    walking the ~500 gradient nodes of a GPT step. It holds the nodes until that realize (or the next build)."""

    root: UOp
    made: list[UOp]
    outputs: dict[UOp, int]
    continuations: dict[tuple[int, ...], Continuation | None]


@dataclass(frozen=True, slots=True)
class Continuation:
    """A walk past the loss's kept walk over a gradient build (GradientBuild): the nodes it emitted after the loss and
    before the sink, as indices into the build's `made`, and the key parts it added (the sink's included)."""

    order: tuple[int, ...]
    parts: tuple[Any, ...]
    cacheable: bool


_builds: list[GradientBuild] = []  # at most one: the latest build


def note_gradient_build(build: GradientBuild) -> None:
    """Remember `build` for the next realize's walk (graph_structure), replacing any earlier one."""
    _builds.clear()
    _builds.append(build)


def _take_build(sink: UOp) -> tuple[GradientBuild, tuple[int, ...]] | None:
    """The latest gradient build (let go: one walk uses it at most) and which of its outputs the sink reads after its
    first source, when that source is the build's loss and every other one is one of its gradients."""
    if not _builds:
        return None
    build = _builds.pop()
    if not sink.src or sink.src[0] is not build.root:
        return None
    outputs = build.outputs
    read = []
    for s in sink.src[1:]:
        if (i := outputs.get(s)) is None:
            return None
        read.append(i)
    return build, tuple(read)


def _splice(
    taken: tuple[GradientBuild, tuple[int, ...]], sink: UOp, nodes: list[UOp], leaves: list[UOp], parts: list[Any]
) -> Structure | None:
    """The walk of `sink` from the loss's kept walk (nodes, parts) and the build's remembered continuation; None when
    there is none yet (or this build's nodes are not all distinct from each other and the loss's: then walk)."""
    build, read = taken
    if (continuation := build.continuations.get(read)) is None:
        return None
    made = build.made
    nodes.extend([made[i] for i in continuation.order])
    nodes.append(sink)
    position = dict(zip(nodes, range(len(nodes)), strict=True))
    if len(position) != len(nodes):
        del nodes[-len(continuation.order) - 1 :]
        return None
    parts.extend(continuation.parts)
    return Structure(tuple(parts) if continuation.cacheable else None, nodes, position, leaves)


def _learn(
    taken: tuple[GradientBuild, tuple[int, ...]],
    nodes: list[UOp],
    leaves: list[UOp],
    parts: list[Any],
    start: tuple[int, int, int],
    cacheable: bool,
) -> None:
    """Remember the walk past the loss (from `start`: node, leaf and part counts) as a Continuation of the build;
    none when it met a node the build did not make or read (a buffer, a gradient's own user-given graph)."""
    build, read = taken
    first_node, first_leaf, first_part = start
    index = {u: i for i, u in enumerate(build.made)}
    order = [index.get(u, -1) for u in nodes[first_node:-1]]  # the sink is last
    if -1 in order or len(leaves) != first_leaf:
        return
    build.continuations[read] = Continuation(tuple(order), tuple(parts[first_part:]), cacheable)


def _walk(
    stack: list[UOp | None],
    nodes: list[UOp],
    position: dict[UOp, int],
    leaves: list[UOp],
    parts: list[Any],
    cacheable: bool,
) -> bool:
    """graph_structure's walk from `stack`, adding to the rest; returns whether the graph can still be replayed."""
    # the key's items, flat: per node (op, dtype id, arg, tag) then its source positions after their count, or a
    # BUFFER's device; the op says which, so the sequence reads back one way (one tuple per graph, not one per node).
    # The hit path's walk of the graph, kept allocation-light: a node is pushed bare, and again under _EMIT once its
    # sources are on the stack above it (no (node, flag) tuples).
    # bound methods and module constants as locals: ~2,500 nodes a GPT step, each popped at least twice
    pop, push, extend = stack.pop, stack.append, stack.extend
    place, seen, add_node, add_parts = position.__getitem__, position.__contains__, nodes.append, parts.extend
    checked, id_args, buffer = _CHECKED, _ID_ARGS, Ops.BUFFER
    movement, plain_args = GroupOp.Movement, _PLAIN_MOVEMENT_ARGS
    while stack:
        node = pop()
        if node is None:  # _EMIT: every source of the node below it has its position
            node = pop()
            assert node is not None, "graph_structure: an _EMIT marker without its node"
            if seen(node):
                continue
            # the node's hash-consing key: its arg keeps -0.0 apart from 0.0, and its dtype is the interned dtype's id
            op, dtype_id, src, arg, tag = node._cache_key
            if op in checked and cacheable and not (op in movement and arg in plain_args):
                cacheable = is_replayable(node)
            position[node] = len(nodes)
            add_node(node)
            add_parts((op, dtype_id, None if op in id_args else arg, tag, len(src)))
            add_parts(map(place, src))
            continue
        if seen(node):
            continue
        if node.op is buffer:  # a parameter: its UNIQUE says which buffer, not what it is; its DEVICE is in its part
            op, dtype_id, src, arg, tag = node._cache_key
            device = src[1].arg
            cacheable = cacheable and not isinstance(device, tuple)
            leaves.append(node)
            position[node] = len(nodes)
            add_node(node)
            add_parts((op, dtype_id, arg, tag, device))
            continue
        push(node)
        push(_EMIT)
        extend(reversed(node.src))
    return cacheable


_EMIT = None  # graph_structure's stack marker


def view_structure(u: UOp) -> tuple[Any, ...] | None:
    """The structure of a realized buffer or a (non-symbolic) view of one on one device: its movement ops' (op,
    arg) and the buffer's dtype, size and device. None for anything else. Kept in the node (a function of the node
    alone): an optimiser keys every step by its ~120 inputs, most of them the same parameter and state nodes."""
    known = u.__dict__
    if (kept := known.get(_VIEW_STRUCTURE, _NOT_KEPT)) is not _NOT_KEPT:
        return kept  # type: ignore[no-any-return]  # only this function writes the entry
    known[_VIEW_STRUCTURE] = found = _view_structure(u)
    return found


_VIEW_STRUCTURE = "_view_structure"  # a node's __dict__ entry: view_structure's answer
_NOT_KEPT = object()


def _view_structure(u: UOp) -> tuple[Any, ...] | None:
    chain: list[Any] = []
    while u.op in GroupOp.Movement:
        if not is_replayable(u):
            return None
        chain.append((u.op, u.arg))
        u = u.src[0]
    if u.op is not Ops.BUFFER or isinstance(device := u.src[1].arg, tuple):
        return None
    return (*chain, u.dtype, u.arg, device)


def is_replayable(node: UOp) -> bool:
    """Not a symbolic value (a bound variable, or a movement op sized by one: symbolic_shape.py), a kernel built
    by an earlier kernelize(), or a device tuple (a sharded tensor's placements live outside the graph)."""
    if node.op in _UNCACHEABLE or (node.op is Ops.DEVICE and isinstance(node.arg, tuple)):
        return False
    if node.op not in GroupOp.Movement:
        return True
    kinds = set(map(type, node.arg))  # ints (reshape, expand, ...) or (start, end) pairs (pad, shrink): C-level scans
    if UOp in kinds or (tuple in kinds and any(UOp in map(type, x) for x in node.arg if type(x) is tuple)):
        return False
    if len(_PLAIN_MOVEMENT_ARGS) >= PLAIN_ARGS_KEPT:
        _PLAIN_MOVEMENT_ARGS.clear()
    _PLAIN_MOVEMENT_ARGS.add(node.arg)
    return True


PLAIN_ARGS_KEPT = 8192  # movement args remembered as free of symbolic sizes (emptied when full)
# movement args is_replayable found without a symbolic size: a step's walk meets the same few hundred shapes each
# time, and a movement op with one of them skips the check. None holds a node, so none keeps one alive.
_PLAIN_MOVEMENT_ARGS: set[Any] = set()


def _flag_values() -> tuple[int | str, ...]:
    """Every flag's value: a flag can change what the scheduler or the compiler makes (BEAM, FUSE_ARANGE, ...)."""
    return tuple(v.value for v in ContextVar._cache.values())


# the flags' values as a small int in the key (one int hashes faster than ~40 values): recomputed when a flag was set
_flag_ids: dict[tuple[int | str, ...], int] = {}
_flag_state: list[int] = [-1, -1]  # [ContextVar.generation it was read at, its id]


def flag_state_id() -> int:
    """A small int naming every flag's current value: two equal ids mean the same settings."""
    return _flag_id()


def _flag_id() -> int:
    if _flag_state[0] != ContextVar.generation:
        values = _flag_values()
        _flag_state[0], _flag_state[1] = ContextVar.generation, _flag_ids.setdefault(values, len(_flag_ids))
    return _flag_state[1]


# *** cached schedules ***


@dataclass(frozen=True, slots=True)
class Step:
    """One kernel of a cached schedule: its runner and, per buffer slot, the parameter it is bound to."""

    ast: UOp
    prg: Runner
    slots: tuple[int, ...]
    metadata: tuple[Any, ...] | None
    fixedvars: dict[str, int]


@dataclass(frozen=True, slots=True)
class Template:
    """A value of the becomes map as a recipe: per node, sources first, (op, dtype, dtype id, arg, key arg, tag,
    source positions, shape, device), with each BUFFER as the parameter it stands for (an int). The dtype id and key
    arg are the node's hash-consing key parts, so a node is looked up without UOp()'s work on its arguments. The
    shape and device (structural, so the same every time) are written into the node as compute_shape and
    compute_device would find them: the tensors read them next (an optimiser's checks, the next forward), and a node
    built here has neither worked out yet. Built with a realize's buffers, it is what a tensor reads afterwards. No
    UOp is kept: a kept node would outlive its graph, and with it its Tensor-call label, which a later node of the
    same value would then inherit (hash-consing)."""

    nodes: tuple[int | tuple[Any, ...], ...]

    def instantiate(self, params: Sequence[UOp] | Params) -> UOp:
        made: list[UOp] = []
        live, create = UOpMetaClass.ucache, UOpMetaClass._create
        for node in self.nodes:
            if isinstance(node, int):
                made.append(params[node])
                continue
            op, dtype, dtype_id, arg, key_arg, tag, srcs, shape, device = node
            src = tuple([made[i] for i in srcs])
            key = (op, dtype_id, src, key_arg, tag)
            if (ref := live.get(key)) is None or (u := ref()) is None:
                u = create(UOp, key, op, dtype, src, arg, tag)  # none live: no second look-up
            known = u.__dict__
            if shape is not None:
                known.setdefault("_shape", shape)
            if device is not None:
                known.setdefault("_device", device)
            made.append(u)
        return made[-1]


@dataclass(frozen=True, slots=True)
class GraphRecipe:
    """Output nodes as a recipe over leaf nodes, for frontend code that builds the same graph on other leaves of the
    same structure (an optimiser's update, a gradient): the leaves it reads (their indices), then per node, sources
    first, (op, dtype, dtype id, arg, key arg, tag, source positions, label, shape, device, and those last three as
    the node's __dict__ entries). Rebuilt on new leaves it is the graph that code would build (hash-consing returns
    live equal nodes), with the same labels where a node has none yet and the shapes and devices the recording had
    worked out (structural, so the same); a node made anew gets a copy of the recorded entries. Like Template, it
    keeps no UOp."""

    leaves: tuple[int, ...]  # made[i] = leaves[self.leaves[i]]; nodes follow
    nodes: tuple[tuple[Any, ...], ...]
    outputs: tuple[int, ...]

    @staticmethod
    def of(outputs: list[UOp], leaves: list[UOp]) -> GraphRecipe | None:
        """None when the outputs read memory that is no leaf, or hold a node that is new at every build (a
        `Tensor.contiguous()`, a unique id) or a symbolic value."""
        first: dict[UOp, int] = {}
        for i, leaf in enumerate(leaves):  # equal leaves share the first one's index
            first.setdefault(leaf, i)
        sink = UOp.sink(*outputs)
        walk = [u for u in sink.toposort(gate=lambda u: u not in first) if u is not sink]
        position: dict[UOp, int] = {}
        used: list[int] = []
        for read in (*outputs, *(s for node in walk for s in node.src)):
            if read in first and read not in position:
                position[read] = len(used)
                used.append(first[read])
        nodes: list[tuple[Any, ...]] = []
        for u in walk:
            if u.op in _NOT_REBUILT or (u.op is Ops.CONTIGUOUS and u.arg is not None):
                return None
            position[u] = len(used) + len(nodes)
            known = u.__dict__
            srcs = tuple([position[s] for s in u.src])
            op, dtype_id, _, key_arg, tag = u._cache_key  # the hash-consing key's parts: build looks nodes up by it
            label, shape, device = all_metadata.get(u), known.get("_shape"), known.get("_device")
            kept = {k: v for k, v in ((LABELS, label), ("_shape", shape), ("_device", device)) if v is not None}
            nodes.append((op, u.dtype, dtype_id, u.arg, key_arg, tag, srcs, label, shape, device, kept))
        return GraphRecipe(tuple(used), tuple(nodes), tuple(position[u] for u in outputs))

    def build(self, leaves: list[UOp]) -> list[UOp]:
        made = self.build_all(leaves)
        return [made[i] for i in self.outputs]

    def build_all(self, leaves: list[UOp]) -> list[UOp]:
        """Every node the recipe reads or makes, by its index (`outputs` index this list)."""
        made = [leaves[i] for i in self.leaves]
        live, new, ref_to = UOpMetaClass.ucache, object.__new__, weakref.ref
        # UOp(...) by its parts: the recording's key parts (float args canonical already) look the node up directly
        for op, dtype, dtype_id, arg, key_arg, tag, srcs, label, shape, device, kept in self.nodes:
            src = tuple([made[i] for i in srcs])
            key = (op, dtype_id, src, key_arg, tag)
            if (ref := live.get(key)) is None or (u := ref()) is None:
                # none live: UOpMetaClass._create's node, written here (one frame less per gradient node), its label,
                # shape and device in one copy of the recorded ones
                u = new(UOp)
                u.op, u.dtype, u.src, u.arg, u.tag, u._cache_key = op, dtype, src, arg, tag, key
                u.__dict__ = kept.copy()
                live[key] = ref_to(u)
            else:
                known = u.__dict__
                if label is not None:
                    known.setdefault(LABELS, label)  # a node keeps the first label it got
                if shape is not None:
                    known.setdefault("_shape", shape)
                if device is not None:
                    known.setdefault("_device", device)
            made.append(u)
        return made


# nodes a GraphRecipe can't rebuild: memory (a leaf or nothing), identities and symbolic values
_NOT_REBUILT = _UNCACHEABLE | {Ops.BUFFER, Ops.UNIQUE}


@dataclass(frozen=True, slots=True)
class Batch:
    """Consecutive steps run by one device-graph call (engine/graph.py) that takes every parameter's buffer."""

    runner: Runner
    kernels: int


@dataclass(slots=True)
class CachedSchedule:
    """What a realize of one structure does: the kernels, the buffers it makes (device, size, dtype) numbered after
    the graph's own, and the map of graph positions to what those tensors read afterwards. Mutable: it counts its
    hits, and a schedule hit GRAPH_AFTER_HITS times gets a `plan` that runs its kernels through device graphs."""

    steps: tuple[Step, ...]
    new_buffers: tuple[tuple[str, int, DType], ...]
    becomes: tuple[tuple[int, Template], ...]
    kernel_count: int
    nodes: int  # the size of its key
    intermediates: tuple[int, ...] = ()  # the new buffers (their index in new_buffers) that no template reads
    hits: int = 0
    plan: tuple[Step | Batch, ...] | None = None  # steps and graph batches, once built
    # a hot replay's intermediates (by index in new_buffers), allocated, for the next replay: see _keep_spares
    spares: dict[int, Buffer] | None = None


schedule_cache: dict[tuple[Any, ...], CachedSchedule] = {}  # mutated in place, never rebound: tests clear() it
# realizes by outcome: "hit" (replayed), "miss" (scheduled, then kept if it can be replayed), "off" (flag or VIZ)
cache_counts: dict[str, int] = {"hit": 0, "miss": 0, "off": 0}


def _template(value: UOp, param_of: dict[UOp, int]) -> Template | None:
    """`value` as a recipe over the parameters; None if it holds a buffer that is no parameter. A BUFFER is its
    parameter, so the nodes below it (its UNIQUE and DEVICE) are not part of the recipe."""
    if value.op is Ops.BUFFER:
        return Template((param_of[value],)) if value in param_of else None
    position: dict[UOp, int] = {}
    nodes: list[int | tuple[Any, ...]] = []
    for u in value.toposort(gate=lambda u: u.op is not Ops.BUFFER):
        if u.op in _UNCACHEABLE or u.op is Ops.UNIQUE:
            return None  # a symbolic value, or an identity outside any BUFFER: new every realize
        if (srcs := _template_sources(u, position, nodes, param_of)) is None:
            return None
        place = (u._shape, u._cached("_device", compute_device))  # None where a node has none (a DEVICE's shape)
        op, dtype_id, _, key_arg, tag = u._cache_key  # the hash-consing key's parts: instantiate looks nodes up
        nodes.append((op, u.dtype, dtype_id, u.arg, key_arg, tag, srcs, *place))
        position[u] = len(nodes) - 1
    return Template(tuple(nodes))


def _template_sources(
    u: UOp, position: dict[UOp, int], nodes: list[int | tuple[Any, ...]], param_of: dict[UOp, int]
) -> tuple[int, ...] | None:
    """The template positions of u's sources, adding each BUFFER (where the walk stopped) as its parameter on first
    use; None for a buffer that is no parameter."""
    srcs = []
    for s in u.src:
        if s not in position:
            if s.op is not Ops.BUFFER or s not in param_of:
                return None
            position[s] = len(nodes)
            nodes.append(param_of[s])
        srcs.append(position[s])
    return tuple(srcs)


def _steps(items: list[ExecItem], slot_of: dict[int, int]) -> tuple[Step, ...] | None:
    """Each ExecItem as a Step over parameters; None when one runs on memory that is no parameter (a view)."""
    steps = []
    for ei in items:
        if ei.prg is None or ei.ast.op is Ops.BUFFER_VIEW:
            return None
        slots = [slot_of.get(id(b)) for b in ei.bufs]
        if any(s is None for s in slots):
            return None
        steps.append(Step(ei.ast, ei.prg, tuple(s for s in slots if s is not None), ei.metadata, ei.fixedvars))
    return tuple(steps)


def record(structure: Structure, items: list[ExecItem], made: list[UOp], becomes: dict[UOp, UOp]) -> None:
    """Keep the schedule a realize ran: `items` (lowered), `made` (the BUFFERs its kernels write that are not in
    the graph), `becomes` (graph node -> what its tensors read now, every kernel settled)."""
    if structure.key is None:
        return
    params = [*structure.leaves, *made]
    param_of = {buf: i for i, buf in enumerate(params)}
    slot_of = {id(b): i for i, u in enumerate(params) if (b := buffers.get(u)) is not None and b._base is None}
    if (steps := _steps(items, slot_of)) is None:
        return
    templates: list[tuple[int, Template]] = []
    for old, new in becomes.items():
        if (pos := structure.position.get(old)) is None or (template := _template(new, param_of)) is None:
            return
        templates.append((pos, template))
    new_buffers = tuple((str(u.src[1].arg), int(u.arg), u.dtype) for u in made)
    read = {node for _, template in templates for node in template.nodes if isinstance(node, int)}
    intermediates = tuple(i for i in range(len(made)) if len(structure.leaves) + i not in read)
    nodes = len(structure.nodes)
    while schedule_cache and (
        len(schedule_cache) >= CACHE_SIZE or sum(e.nodes for e in schedule_cache.values()) + nodes > CACHE_NODES
    ):
        evicted = schedule_cache.pop(next(iter(schedule_cache)))  # the oldest first
        if _sparing.pop(id(evicted), None) is not None:  # its intermediates go back to the allocator now
            evicted.spares = None
    entry = CachedSchedule(steps, new_buffers, tuple(templates), len(items), nodes, intermediates)
    schedule_cache[structure.key] = entry
    for step in steps:  # kernels that ran and will run again: their linear programs only cost collections from now
        if isinstance(step.prg, CompiledRunner):
            step.prg.drop_uops()


def schedule_cache_on() -> bool:
    """Whether a realize looks its graph up in the schedule cache (off with SCHEDULE_CACHE=0, and while VIZ tracks
    rewrites: it shows the scheduler's rewrites of every realize)."""
    return bool(SCHEDULE_CACHE.value) and TRACK_MATCH_STATS.value < 2


def run_hit(entry: CachedSchedule, start: float, run: Callable[[], None]) -> None:
    """A schedule-cache hit on `entry`: counted, DEBUG's line with the time since `start` spent finding it (like the
    miss path's line; the kernels run after it), then `run` (which replays it), in a profile span under PROFILE."""
    cache_counts["hit"] += 1
    if DEBUG.value >= 1:
        took = (time.perf_counter() - start) * 1e3
        print(colored(f"scheduled {entry.kernel_count} kernels in {took:.2f} ms (schedule cache hit)", "cyan"))
    if PROFILE:
        with cpu_profile("schedule cache hit", "TINY"):
            run()
    else:
        run()


def replay(entry: CachedSchedule, structure: Structure, do_update_stats: bool) -> Becomes:
    """Run a cached schedule on this graph's buffers; returns what its graph's nodes become (the tensors to repoint)."""
    made: list[Becomes] = []
    replay_into(entry, [structure], do_update_stats, made.append)
    return made[0]


def replay_into(
    entry: CachedSchedule, held: list[Structure], do_update_stats: bool, apply: Callable[[Becomes], None]
) -> None:
    """Run a cached schedule on this graph's buffers, handing what its graph's nodes become to `apply` (which
    repoints the tensors). The structure comes in
    `held`, which this empties: on the hot path the tensors are repointed and the graph let go before the kernels
    run (run_cached's `settle`), so its nodes are freed while the cores' caches still hold them, not after kernels
    that streamed megabytes through them (a GPT step frees ~1,000 nodes here)."""
    structure = held.pop()
    leaves, templates = structure.leaves, entry.becomes

    def settle(params: Params) -> None:
        nonlocal structure
        nodes = structure.nodes
        structure = None  # type: ignore[assignment]  # the last reference but the tensors', which apply repoints
        apply(Becomes({nodes[pos]: template for pos, template in templates}, params))

    run_cached(entry, leaves, do_update_stats, settle)


class Becomes(Mapping[UOp, UOp]):
    """A replay's map of graph nodes to what they become, each node built from its template when first looked up: a
    realize repoints the few tensors that hold one (a GPT step's loss and gradients), and building the others (~150
    a step) would be wasted work."""

    __slots__ = ("_made", "_params", "_templates")

    def __init__(self, templates: dict[UOp, Template], params: Params) -> None:
        self._templates, self._params = templates, params
        self._made: dict[UOp, UOp] = {}

    def __getitem__(self, node: UOp) -> UOp:
        if (made := self._made.get(node)) is None:
            made = self._made[node] = self._templates[node].instantiate(self._params)
        return made

    def __contains__(self, node: object) -> bool:
        return node in self._templates

    def __iter__(self) -> Iterator[UOp]:
        return iter(self._templates)

    def __len__(self) -> int:
        return len(self._templates)


class Params:
    """A replay's parameters as nodes: the graph's BUFFER nodes, then the buffers the schedule made, whose BUFFER node
    is made when a template first reads it (an intermediate, which no tensor reads afterwards, never gets one)."""

    __slots__ = ("_made", "bufs", "leaves")

    def __init__(self, leaves: list[UOp], bufs: list[Buffer]) -> None:
        self.leaves, self.bufs = leaves, bufs
        self._made: dict[int, UOp] = {}

    def __getitem__(self, i: int) -> UOp:
        if i < len(self.leaves):
            return self.leaves[i]
        if (node := self._made.get(i)) is None:
            buf = self.bufs[i]
            node = self._made[i] = UOp.new_buffer(buf.device, buf.size, buf.dtype)
            buffers[node] = buf
        return node


def run_cached(
    entry: CachedSchedule, leaves: list[UOp], do_update_stats: bool, settle: Callable[[Params], None] | None = None
) -> Params:
    """Run a cached schedule with `leaves` (BUFFER nodes, in its graph's walk order) as its parameters; returns every
    parameter, the leaves and then the buffers it made, for its templates to read.

    `settle(params)` points the realize's tensors at what they become. On the hot path (device graphs) it runs once
    every buffer is allocated, before the kernels: the Python after a long graph call runs on cold caches, so work
    moved ahead of it costs less. If a kernel then fails, those tensors read buffers it did not finish (its writes
    into other buffers, a parameter's update, have happened in part either way). Elsewhere it runs after them."""
    bufs = [u.buffer for u in leaves]
    entry.hits += 1
    if len(entry.steps) == 1 and not capturing:  # one kernel (the eager op): run_schedule's bookkeeping is moot
        bufs.extend(Buffer(device, size, dtype) for device, size, dtype in entry.new_buffers)
        _run_step(entry.steps[0], bufs, do_update_stats)
    elif not _can_batch(entry):
        bufs.extend(Buffer(device, size, dtype) for device, size, dtype in entry.new_buffers)
        run_schedule([_exec_item(s, bufs) for s in entry.steps], do_update_stats=do_update_stats)
    else:
        spares, entry.spares = entry.spares or {}, None  # taken: a replay that fails midway leaves none behind
        bufs.extend(spares[i] if i in spares else Buffer(*spec) for i, spec in enumerate(entry.new_buffers))
        for b in bufs:  # a graph call allocates nothing: buffers this realize makes get their memory here
            b.ensure_allocated()
        params = Params(leaves, bufs)
        if settle is not None:
            settle(params)
        _run_plan(entry, bufs, do_update_stats)
        _keep_spares(entry, {i: bufs[len(leaves) + i] for i in entry.intermediates})
        return params
    params = Params(leaves, bufs)
    if settle is not None:
        settle(params)
    return params


SPARE_ENTRIES = 4  # hot schedules that keep their intermediates between replays (a training step has two or three)
_sparing: dict[int, CachedSchedule] = {}  # those schedules by id, the most recently replayed last


def _keep_spares(entry: CachedSchedule, spares: dict[int, Buffer]) -> None:
    """Keep a hot replay's intermediates (buffers no tensor reads afterwards: nothing else holds them) allocated for
    the entry's next replay, instead of ~100 Buffers made, allocated and freed per training step. Only replays through
    the plan do (no TinyJit capturing them, no profiler or DEBUG=2 per kernel), and only the SPARE_ENTRIES most
    recently replayed schedules keep theirs: an older one's go back to the allocator's cache."""
    entry.spares = spares
    _sparing.pop(id(entry), None)
    _sparing[id(entry)] = entry
    while len(_sparing) > SPARE_ENTRIES:
        _sparing.pop(next(iter(_sparing))).spares = None


def _run_step(step: Step, bufs: list[Buffer], do_update_stats: bool) -> None:
    """ExecItem.run of one step, without building the ExecItem where nothing reads it (the profiler's events and
    DEBUG=2's lines do)."""
    if PROFILE or DEBUG.value >= 2:
        _exec_item(step, bufs).run(do_update_stats=do_update_stats)
        return
    kernel_bufs = [bufs[i] for i in step.slots]
    for b in kernel_bufs:
        b.ensure_allocated()
    elapsed = step.prg(kernel_bufs, step.fixedvars)
    if do_update_stats:
        count_run(step.prg, step.fixedvars, elapsed)
        step.prg.first_run = False


def _exec_item(step: Step, bufs: list[Buffer]) -> ExecItem:
    return ExecItem(
        step.ast, [bufs[i] for i in step.slots], metadata=step.metadata, fixedvars=step.fixedvars, prg=step.prg
    )


def _can_batch(entry: CachedSchedule) -> bool:
    """Device graphs for a schedule that keeps coming back, unless each kernel must be seen: a TinyJit capturing
    them, the profiler's per-kernel events, DEBUG=2's per-kernel lines; JIT=2 turns graphs off here too."""
    if entry.hits < GRAPH_AFTER_HITS or len(entry.steps) < 2:
        return False
    return not capturing and not PROFILE and DEBUG.value < 2 and JIT.value < 2


def _run_plan(entry: CachedSchedule, bufs: list[Buffer], do_update_stats: bool) -> None:
    """Run the schedule's plan (built on first use): graph batches in one call each, other steps one by one. Every
    buffer is allocated already (a graph call allocates nothing)."""
    if entry.plan is None:
        entry.plan = _plan(entry.steps, bufs)
    for item in entry.plan:
        if isinstance(item, Batch):
            run_graph(item.runner, bufs, item.kernels, do_update_stats)
        else:
            _exec_item(item, bufs).run(do_update_stats=do_update_stats)


def _plan(steps: tuple[Step, ...], bufs: list[Buffer]) -> tuple[Step | Batch, ...]:
    """`steps` with each run that one device graph can batch replaced by that Batch (devices without a graph, or
    steps it can't take, stay steps)."""
    items = [_exec_item(s, bufs) for s in steps]
    step_of = {id(ei): s for ei, s in zip(items, steps, strict=True)}
    plan: list[Step | Batch] = []
    for ei in batch_for_graph(items, bufs):
        if (step := step_of.get(id(ei))) is not None:
            plan.append(step)
        else:
            assert ei.prg is not None, "schedule cache: a graph item without its runner"
            plan.append(Batch(ei.prg, len(getattr(ei.prg, "jit_cache", ()))))
    return tuple(plan)
