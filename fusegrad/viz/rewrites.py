"""The data side of the rewrite viewer: traced groups and steps as JSON-safe dicts, and the replay of a step.

`get_rewrites(trace)` lists groups and steps; `get_full_rewrite(step)` rebuilds the step's input graph from the
numbered node fields and yields the graph after every recorded match; `uop_to_json(uop)` is one graph for drawing.
"""

from __future__ import annotations

import difflib
import linecache
from collections.abc import Generator
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.helpers import TRACEMETA, Context
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, all_metadata, graph_rewrite, pm_substitute_fixed_point
from fusegrad.uop.rewrite import RewriteLoopError, RewriteTrace, TrackedGraphRewrite, tracked_keys, uop_fields

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


def _color(u: UOp) -> str:
    if u.op in _COLORS:
        return _COLORS[u.op]
    if u.op in {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}:
        return _MOVEMENT_COLOR
    return _ALU_COLOR if u.op.name in _ALU_NAMES else _DEFAULT_COLOR


_ALU_NAMES = frozenset(
    {"ADD", "MUL", "SUB", "IDIV", "MOD", "MAX", "CMPLT", "CMPNE", "CMPEQ", "XOR", "OR", "AND", "SHL", "SHR", "WHERE",
     "EXP2", "LOG2", "SIN", "SQRT", "RECIPROCAL", "NEG", "TRUNC", "CAST", "BITCAST", "FDIV", "POW", "MULACC"}
)  # fmt: skip


def _shape_of(u: UOp) -> tuple[int, ...] | None:
    """A tensor-level node's shape; None for kernel-level nodes (and for graphs too broken to have one)."""
    if u.op in _FOLDED or u.op in (Ops.SINK, Ops.KERNEL, Ops.CUSTOM, Ops.NOOP):
        return None
    try:
        return u._shape
    except (ValueError, AssertionError, KeyError, IndexError, TypeError):
        return None


def _kernel_ref(u: UOp) -> int | None:
    """For a KERNEL node: the trace group of its codegen (named after the kernel), once get_program has run."""
    if u.op is not Ops.KERNEL or not hasattr(u.arg, "ast") or u.arg.ast.op is not Ops.SINK:
        return None
    from fusegrad.codegen import get_kernel_name  # codegen imports the whole IR; only KERNEL labels need it

    name = get_kernel_name(u.arg.ast)
    return next((i for i, key in enumerate(tracked_keys) if key.display_name == name), None)


def _label(u: UOp, folded: set[UOp]) -> str:
    lines = [u.op.name]
    if u.dtype != dtypes.void:
        lines.append(str(u.dtype))
    if u.arg is not None and u.op not in (Ops.CONST,):
        lines.append(_arg_text(u.arg))
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


def uop_to_json(x: UOp) -> dict[int, dict[str, Any]]:
    """The graph below `x` for drawing: node id -> label, sources `[(index, id)]`, colour. Constants fold into users."""
    order = x.toposort()
    folded = {u for u in order if u.op in _FOLDED and u is not x}
    ranges = _loop_ranges(order)
    graph: dict[int, dict[str, Any]] = {}
    for u in order:
        if u in folded:
            continue
        srcs = [(i, id(s)) for i, s in enumerate(u.src) if s not in folded]
        label = _label(u, folded)
        if u.op is not Ops.RANGE and (rngs := ranges[u]):
            label += "\nranges=" + ",".join(str(r) for r in sorted(rngs))
        graph[id(u)] = {"label": label, "src": srcs, "color": _color(u), "ref": _kernel_ref(u)}
    return graph


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


def get_full_rewrite(
    step: TrackedGraphRewrite, fields: dict[int, tuple[Any, ...]] | None = None
) -> Generator[dict[str, Any], None, None]:
    """The step's input graph, then the graph after each recorded match (a failed replay shows as a NOOP node)."""
    fields = fields if fields is not None else uop_fields
    cache = _rebuilt
    with Context(TRACK_MATCH_STATS=0):
        graph = rebuild_uop(step.sink, fields, cache)
        yield {"graph": uop_to_json(graph), "uop": str(graph), "changed_nodes": None, "diff": None, "upat": None}
        replaces: dict[UOp, UOp] = {}
        for match in step.matches:
            before = rebuild_uop(match.before, fields, cache)
            if match.after is None:
                new_graph = UOp(Ops.NOOP, arg=match.error)
                diff: list[str] = [f"- {line}" for line in str(before).splitlines()] + [f"+ {match.error}"]
            else:
                after = rebuild_uop(match.after, fields, cache)
                replaces[before] = after
                new_graph = _replay_step(graph, replaces)
                diff = list(difflib.unified_diff(str(before).splitlines(), str(after).splitlines(), lineterm=""))[2:]
            old_nodes = graph.toposort()
            changed = [id(u) for u in new_graph.toposort() if u not in old_nodes]
            yield {"graph": uop_to_json(new_graph), "uop": str(new_graph), "changed_nodes": changed, "diff": diff,
                   "upat": (match.rule_loc, match.rule_src)}  # fmt: skip
            graph = new_graph
