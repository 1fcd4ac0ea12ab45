"""The data side of the rewrite viewer: traced groups and steps as JSON-safe dicts, and the replay of a step.

`get_rewrites(trace)` lists groups and steps; `get_full_rewrite(step)` rebuilds the step's input graph from the
numbered node fields and yields the graph after every recorded match, marking the nodes each match created;
`uop_to_json(uop)` is one graph for drawing (KERNEL nodes named, and linked to their codegen group).
"""

from __future__ import annotations

import difflib
import linecache
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.helpers import TRACEMETA, Context, TracingKey
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, all_metadata, graph_rewrite, pm_substitute_fixed_point
from fusegrad.uop.rewrite import RewriteLoopError, RewriteTrace, TrackedGraphRewrite, tracked_keys, uop_fields
from fusegrad.viz.kernels import KernelLink, kernel_identity, kernel_links, kernel_stores, kernel_text

# constants and device names are drawn inside their user's label, not as nodes of their own
_FOLDED = frozenset({Ops.CONST, Ops.VCONST, Ops.DEVICE, Ops.UNIQUE})

_COLORS = {
    Ops.LOAD: "#ffc0c0", Ops.STORE: "#87CEEB", Ops.CONST: "#e0e0e0", Ops.VCONST: "#e0e0e0", Ops.REDUCE: "#FF5B5B",
    Ops.DEFINE_GLOBAL: "#ffe0b0", Ops.DEFINE_LOCAL: "#ffe0d0", Ops.DEFINE_REG: "#f0ffe0", Ops.REDUCE_AXIS: "#FF6B6B",
    Ops.RANGE: "#c8a0e0", Ops.END: "#f0e0f0", Ops.BUFFER: "#B0BDFF", Ops.COPY: "#a040a0", Ops.SINK: "#ffffff",
    Ops.KERNEL: "#3e7f55", Ops.INDEX: "#e8ffa0", Ops.WMMA: "#efefc0", Ops.ASSIGN: "#909090",
    Ops.CONTIGUOUS: "#FFC14D", Ops.BUFFERIZE: "#FF991C", Ops.DEFINE_VAR: "#ffe0b0", Ops.SPECIAL: "#c0c0ff",
    Ops.NOOP: "#ff8080",
}  # fmt: skip
_MOVEMENT_COLOR, _ALU_COLOR, _DEFAULT_COLOR = "#8DE0A0", "#ffffc0", "#ffffff"


def _arg_text(arg: Any) -> str:
    # dataclass reprs escape ANSI codes as literal "\x1b" text; turn them back into codes so labels stay colored
    text = arg if isinstance(arg, str) else str(arg)
    return text.replace("\\x1b", "\x1b")


def _op_color(op: Ops) -> str:
    if op in _COLORS:
        return _COLORS[op]
    if op in {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}:
        return _MOVEMENT_COLOR
    return _ALU_COLOR if op.name in _ALU_NAMES else _DEFAULT_COLOR


_ALU_NAMES = frozenset(
    {"ADD", "MUL", "SUB", "IDIV", "MOD", "MAX", "CMPLT", "CMPNE", "CMPEQ", "XOR", "OR", "AND", "SHL", "SHR", "WHERE",
     "EXP2", "LOG2", "SIN", "SQRT", "RECIPROCAL", "NEG", "TRUNC", "CAST", "BITCAST", "FDIV", "POW", "MULACC"}
)  # fmt: skip
_OP_COLORS = {op: _op_color(op) for op in Ops}  # looked up once per drawn node: a 7,000-node graph's replay is ~7% this


def _color(u: UOp) -> str:
    return _OP_COLORS[u.op]


def _shape_of(u: UOp) -> tuple[int, ...] | None:
    """A tensor-level node's shape; None for kernel-level nodes (and for graphs too broken to have one)."""
    if u.op in _FOLDED or u.op in (Ops.SINK, Ops.KERNEL, Ops.CUSTOM, Ops.NOOP):
        return None
    try:
        return u._shape
    except (ValueError, AssertionError, KeyError, IndexError, TypeError):
        return None


def _arg_line(u: UOp, kernel: KernelLink | None) -> str:
    if kernel is not None:
        return kernel_text(kernel.name, kernel_stores(u.arg))
    return _arg_text(u.arg)


def _label(u: UOp, folded: set[UOp], kernel: KernelLink | None = None) -> str:
    lines = [u.op.name]
    if u.dtype != dtypes.void:
        lines.append(str(u.dtype))
    if u.arg is not None and u.op not in (Ops.CONST,):
        lines.append(_arg_line(u, kernel))
    if u.op is Ops.CONST:
        lines.append(str(u.arg))
    for i, s in enumerate(u.src):
        if s in folded:
            lines.append(f"src{i}: {s.op.name} {_arg_text(s.arg)}")
    if (shape := _shape_of(u)) is not None:
        lines.append(f"shape={shape}")
    if u.tag is not None:
        lines.append(f"tag={u.tag!r}")
    if TRACEMETA.value >= 2 and (meta := u.metadata) is not None:
        lines.append(repr(meta))
    return "\n".join(lines)


def uop_to_json(
    x: UOp, keys: Sequence[TracingKey] | None = None, memo: dict[UOp, tuple[str, str, int | None]] | None = None
) -> dict[int, dict[str, Any]]:
    """The graph below `x` for drawing: node id -> label, sources `[(index, id)]`, colour, and `ref`: for a KERNEL
    node, the group of `keys` (default: this process's trace) holding its codegen. Constants fold into users.

    `memo` keeps each node's (label, colour, ref) for the next graph drawn with the same `keys`: the graphs of one
    replay share most nodes, and a node's label depends only on the node (its folded sources are its own sources).
    """
    order = x.toposort()
    folded = {u for u in order if u.op in _FOLDED and u is not x}
    memo = {} if memo is None else memo
    ranges: dict[UOp, frozenset[int]] | None = None
    links: dict[UOp, KernelLink] | None = None
    graph: dict[int, dict[str, Any]] = {}
    for u in order:
        if u in folded:
            continue
        if (drawn := memo.get(u)) is None:
            if ranges is None:  # only when some node is new (a whole graph of known nodes needs neither)
                ranges = _loop_ranges(order)
                links = kernel_links(tracked_keys if keys is None else keys) if any(
                    v.op is Ops.KERNEL for v in order) else {}  # fmt: skip
            memo[u] = drawn = _drawn(u, folded, ranges[u], links or {})
        srcs = [(i, id(s)) for i, s in enumerate(u.src) if s not in folded]
        graph[id(u)] = {"label": drawn[0], "src": srcs, "color": drawn[1], "ref": drawn[2]}
    return graph


def _drawn(u: UOp, folded: set[UOp], rngs: frozenset[int], links: dict[UOp, KernelLink]) -> tuple[str, str, int | None]:
    """A node's label, colour and kernel group (`ref`, for a KERNEL node)."""
    kernel = kernel_identity(u.arg, links) if u.op is Ops.KERNEL else None
    label = _label(u, folded, kernel)
    if u.op is not Ops.RANGE and rngs:
        label += "\nranges=" + ",".join(str(r) for r in sorted(rngs))
    return label, _color(u), None if kernel is None else kernel.ref


def _loop_ranges(order: dict[UOp, None]) -> dict[UOp, frozenset[int]]:
    """The axis ids of the RANGE loops each kernel-level node depends on (sources first: one pass, no recursion)."""
    ret: dict[UOp, frozenset[int]] = {}
    for u in order:
        own = frozenset((u.arg[0],)) if u.op is Ops.RANGE and isinstance(u.arg, tuple) else frozenset()
        ret[u] = own.union(*(ret[s] for s in u.src)) if u.src else own
    return ret


def _code_line(loc: tuple[str, int]) -> str:
    return linecache.getline(*loc).strip()


def get_rewrites(trace: RewriteTrace) -> list[dict[str, Any]]:
    """Every traced group with its steps (name, loc, depth, match_count, call trace)."""
    groups = []
    for i, (key, steps) in enumerate(zip(trace.keys, trace.rewrites, strict=False)):
        step_dicts = [{"name": s.name if s.name is not None else "graph_rewrite", "loc": s.loc, "depth": s.depth,
                       "match_count": len(s.matches), "code_line": _code_line(s.loc), "trace": s.trace,
                       "query": f"/ctxs?ctx={i}&idx={j}"} for j, s in enumerate(steps)]  # fmt: skip
        groups.append({"name": key.display_name, "steps": step_dicts})
    return groups


def rebuild_uop(num: int, fields: dict[int, tuple[Any, ...]], cache: dict[int, UOp]) -> UOp:
    """The UOp with trace number `num`, rebuilt from its fields (the live node itself when it still exists)."""
    stack = [num]
    while stack:
        n = stack[-1]
        if n in cache:
            stack.pop()
            continue
        op, dtype, srcs, arg, tag = fields[n][:5]
        missing = [s for s in srcs if s not in cache]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        cache[n] = node = UOp(op, dtype, tuple(cache[s] for s in srcs), arg, tag)
        if len(fields[n]) > 5 and fields[n][5] is not None and node not in all_metadata:
            all_metadata[node] = fields[n][5]  # the original node died: its rebuilt twin carries its metadata
    return cache[num]


def _replay_step(graph: UOp, replaces: dict[UOp, UOp]) -> UOp:
    try:
        return graph_rewrite(graph, pm_substitute_fixed_point, replaces, bottom_up=True)
    except RewriteLoopError as e:
        return UOp(Ops.NOOP, arg=e.summary)
    except RuntimeError as e:
        return UOp(Ops.NOOP, arg=str(e))


# nodes rebuilt for replays stay alive while the viewer runs, so node ids stay stable between requests
_rebuilt: dict[int, UOp] = {}


def created_nodes(result: UOp, old_graph: UOp, new_graph: UOp) -> list[int]:
    """Ids of the drawn nodes a match created: its result and the nodes below it that the old graph lacked.

    The ancestors rebuilt only because a source changed are not among them. A created constant is drawn inside its
    users' labels, so the users showing it are marked instead.
    """
    old_nodes, new_nodes = old_graph.toposort(), new_graph.toposort()
    created = [u for u in result.toposort() if u in new_nodes and (u is result or u not in old_nodes)]
    marked: dict[UOp, None] = {}
    for u in created:
        if u.op not in _FOLDED or u is new_graph:
            marked[u] = None
            continue
        marked.update((user, None) for user in new_nodes if u in user.src and user.op not in _FOLDED)
    return [id(u) for u in marked]


class Replayed(Mapping[str, Any]):
    """One graph of a replay, read like a dict: "graph" (`uop_to_json`), "uop" (the graph's text), "changed_nodes",
    "diff" and "upat". The text is made on first read: the viewer never shows it, and for a big graph it costs a
    fifth of the replay. `root` is the graph's UOp."""

    def __init__(self, root: UOp, graph: dict[int, dict[str, Any]], **fields: Any) -> None:
        self.root, self._fields = root, {"graph": graph, **fields}

    def __getitem__(self, key: str) -> Any:
        if key == "uop" and key not in self._fields:
            self._fields["uop"] = str(self.root)
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(("graph", "uop", *(k for k in self._fields if k not in ("graph", "uop"))))

    def __len__(self) -> int:
        return len(self._fields) + ("uop" not in self._fields)


def get_full_rewrite(
    step: TrackedGraphRewrite, fields: dict[int, tuple[Any, ...]] | None = None,
    keys: Sequence[TracingKey] | None = None,
) -> Generator[Replayed, None, None]:  # fmt: skip
    """The step's input graph, then the graph after each recorded match (a failed replay shows as a NOOP node).

    `changed_nodes` lists what the match created (`created_nodes`); `keys` are the trace's groups, for KERNEL links.
    """
    fields = fields if fields is not None else uop_fields
    cache, memo = _rebuilt, dict[UOp, tuple[str, str, int | None]]()
    with Context(TRACK_MATCH_STATS=0):
        graph = rebuild_uop(step.sink, fields, cache)
        yield Replayed(graph, uop_to_json(graph, keys, memo), changed_nodes=None, diff=None, upat=None)
        replaces: dict[UOp, UOp] = {}
        for match in step.matches:
            before = rebuild_uop(match.before, fields, cache)
            if match.after is None:
                new_graph = result = UOp(Ops.NOOP, arg=match.error)
                diff: list[str] = [f"- {line}" for line in str(before).splitlines()] + [f"+ {match.error}"]
            else:
                result = rebuild_uop(match.after, fields, cache)
                replaces[before] = result
                new_graph = _replay_step(graph, replaces)
                diff = list(difflib.unified_diff(str(before).splitlines(), str(result).splitlines(), lineterm=""))[2:]
            if new_graph.op is Ops.NOOP and new_graph.src == ():
                result = new_graph  # the replay failed: the error node is what there is to see
            yield Replayed(
                new_graph,
                uop_to_json(new_graph, keys, memo),
                diff=diff,
                changed_nodes=created_nodes(result, graph, new_graph),
                upat=(match.rule_loc, match.rule_src),
            )
            graph = new_graph
