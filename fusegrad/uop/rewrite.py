"""The rewrite engine (`graph_rewrite`) and the recording of every rewrite for VIZ (`track_rewrites`).

`graph_rewrite(sink, pm)` rewrites every node to a fixed point with an explicit stack (no recursion, any depth) and
raises `RewriteLoopError` when rules cycle. With `TRACK_MATCH_STATS>=2` each call becomes a step of the current
group in `tracked_ctxs`, with every match; nodes are stored by number in `uop_fields`, so traces keep nothing alive.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import linecache
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from fusegrad.device import arm_viz_at_exit
from fusegrad.helpers import REWRITE_STACK_LIMIT, TRACK_MATCH_STATS, VIZ, TracingKey, colored
from fusegrad.uop.upat import PatternMatcher, UPat

if TYPE_CHECKING:
    from fusegrad.uop.ops import UOp

F = TypeVar("F", bound=Callable[..., Any])


class RewriteLoopError(RuntimeError):
    """Rules that rewrite forever. `summary` is the short reason; the message adds the pass and the nodes."""

    def __init__(self, summary: str, detail: str = "") -> None:
        super().__init__(f"{summary}: {detail}" if detail else summary)
        self.summary = summary


# *** the engine ***


class RewriteContext:
    """One graph_rewrite call: the rule tables, the user's ctx, and the memo of finished nodes."""

    def __init__(self, pm: PatternMatcher | None, bpm: PatternMatcher | None, ctx: Any, name: str | None,
                 step: TrackedGraphRewrite | None) -> None:  # fmt: skip
        self.pm, self.bpm, self.ctx, self.name, self.step = pm, bpm, ctx, name, step
        self.replace: dict[UOp, UOp] = {}

    def apply(self, pm: PatternMatcher, x: UOp) -> UOp | None:
        if self.step is None and not TRACK_MATCH_STATS.value:
            return pm.rewrite(x, self.ctx)
        return _rewrite_tracked(pm, x, self.ctx, self.step)

    def fixed_point(self, pm: PatternMatcher, x: UOp) -> UOp:
        """Apply `pm` to `x` until nothing matches."""
        seen: set[UOp] = set()
        new: UOp | None = x
        last = x
        limit = REWRITE_STACK_LIMIT.value
        while new is not None:
            if new in seen:
                raise RewriteLoopError("infinite loop in fixed_point_rewrite", self._describe(list(seen)))
            if len(seen) > limit:  # rules that keep building new nodes never repeat one
                raise RewriteLoopError("infinite loop in fixed_point_rewrite (too many steps)", self._describe([x]))
            seen.add(new)
            last, new = new, self.apply(pm, new)
        return last

    def _describe(self, nodes: list[UOp]) -> str:
        ops = ", ".join(sorted({n.op.name for n in nodes}))
        return f"pass {self.name or '<unnamed>'!r} keeps rewriting nodes of {ops}"

    def rewrite(self, root: UOp) -> UOp:
        """Rewrite `root` and everything below it. Stage 0 visits sources, 1 rebuilds and rewrites, 2 links results."""
        replace, limit = self.replace, REWRITE_STACK_LIMIT.value
        in_progress: set[UOp] = set()
        stack: list[tuple[UOp, int, UOp]] = [(root, 0, root)]
        while stack:
            if len(stack) > limit:
                raise RewriteLoopError("infinite loop in graph_rewrite (stack too big)", self._describe([root]))
            n, stage, new_n = stack.pop()
            if n in replace:
                continue
            if stage == 0:
                if n in in_progress:  # n's result depends on itself: the rules cycle
                    raise RewriteLoopError("infinite loop in graph_rewrite", self._describe([n, new_n]))
                in_progress.add(n)
                if self.bpm is not None:
                    new_n = self.fixed_point(self.bpm, new_n)
                stack.append((n, 1, new_n))
                stack.extend((s, 0, s) for s in reversed(new_n.src) if s not in replace)
            elif stage == 1:
                new_src = tuple(replace[s] for s in new_n.src)
                if new_src == new_n.src:
                    rewritten = self.apply(self.pm, new_n) if self.pm is not None else None
                    if rewritten is None:
                        replace[n] = new_n
                        in_progress.discard(n)
                        continue
                else:
                    rewritten = new_n.replace(src=new_src)
                    _keep_label(new_n, rewritten)
                stack.append((n, 2, rewritten))
                stack.append((rewritten, 0, rewritten))
            else:
                replace[n] = replace[new_n]
                in_progress.discard(n)
        return replace[root]


def _keep_label(old: UOp, new: UOp) -> None:
    """A node rebuilt only because its sources were rewritten is the same computation: it keeps the old node's
    Tensor-call label (kernel names and VIZ read them; removing a DETACH rebuilt every node above it unlabelled, and
    kernels then showed only the labels of shared constant views, whichever call made those first)."""
    if (meta := old.metadata) is not None and new.metadata is None:
        from fusegrad.uop.ops import all_metadata  # ops imports this module; imported only when a label moves

        all_metadata[new] = meta


def _check_args(sink: Any, pm: Any, fn: str) -> None:
    from fusegrad.uop.ops import UOp  # ops imports this module

    if not isinstance(sink, UOp):
        raise TypeError(f"{fn}: expected a UOp to rewrite, got {type(sink).__name__}: {sink!r:.80}")
    if not isinstance(pm, PatternMatcher):
        raise TypeError(f"{fn}: expected a PatternMatcher, got {type(pm).__name__}")


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None,
                  bpm: PatternMatcher | None = None) -> UOp:  # fmt: skip
    """Rewrite every node below `sink` with `pm` to a fixed point and return the new sink.

    Top-down (default): sources are rewritten before their users. `bottom_up=True` applies `pm` to a node before
    visiting its sources. `bpm` adds a bottom-up table to a top-down pass. `name` is what VIZ shows for the step.
    Raises TypeError for a non-UOp sink or non-PatternMatcher pm, RewriteLoopError when the rules cycle.
    """
    _check_args(sink, pm, "graph_rewrite")
    step = _begin_step(sink, name, sys._getframe(1), bottom_up) if TRACK_MATCH_STATS.value >= 2 else None
    try:
        rctx = RewriteContext(None if bottom_up else pm, pm if bottom_up else bpm, ctx, name, step)
        return rctx.rewrite(sink)
    finally:
        if step is not None:
            active_rewrites.pop()


def graph_rewrite_map(
    sink: UOp,
    pm: PatternMatcher,
    ctx: Any = None,
    bottom_up: bool = False,
    name: str | None = None,
    bpm: PatternMatcher | None = None,
    input_map: dict[UOp, UOp] | None = None,
) -> dict[UOp, UOp]:
    """Like graph_rewrite, but return what every node below `sink` became. `input_map` composes with an earlier map."""
    _check_args(sink, pm, "graph_rewrite_map")
    step = _begin_step(sink, name, sys._getframe(1), bottom_up) if TRACK_MATCH_STATS.value >= 2 else None
    try:
        rctx = RewriteContext(None if bottom_up else pm, pm if bottom_up else bpm, ctx, name, step)
        rctx.rewrite(sink)
    finally:
        if step is not None:
            active_rewrites.pop()
    new_map = {k: rctx.replace[k] for k in sink.toposort()}
    if input_map is None:
        return new_map
    return {k: new_map.get(v, v) for k, v in input_map.items()}


# *** tracing: numbered nodes, groups of steps, matches ***


@dataclass(frozen=True, slots=True)
class TrackedMatch:
    """One rule firing: node numbers before and after (None when the rule raised), the rule and its cost."""

    before: int
    after: int | None
    rule_loc: tuple[str, int]
    rule_src: str
    duration: float
    error: str | None = None


@dataclass
class TrackedGraphRewrite:
    """One graph_rewrite call (a step): where it was called, on which sink, how deeply nested, and its matches."""

    loc: tuple[str, int]
    sink: int
    depth: int
    bottom_up: bool
    name: str | None
    matches: list[TrackedMatch] = field(default_factory=list)
    trace: list[tuple[str, int, str, str]] = field(default_factory=list)


@dataclass
class RewriteTrace:
    """Everything VIZ needs: group keys, each group's steps, and the fields of every numbered node."""

    keys: list[TracingKey]
    rewrites: list[list[TrackedGraphRewrite]]
    uop_fields: dict[int, tuple[Any, ...]]


# module-level containers: tests and VIZ clear them in place, so they are never rebound
tracked_keys: list[TracingKey] = []
tracked_ctxs: list[list[TrackedGraphRewrite]] = []
active_rewrites: list[TrackedGraphRewrite] = []
_name_cnt: dict[str, int] = {}
uop_fields: dict[int, tuple[Any, ...]] = {}
# per rule: [matches, attempts, seconds spent in matching rules, seconds spent in all tries]
match_stats: dict[UPat, list[float]] = {}

_uop_numbers: weakref.WeakKeyDictionary[UOp, int] = weakref.WeakKeyDictionary()
_uop_counter = itertools.count()


def track_uop(u: UOp) -> int:
    """The trace number of `u`, numbering it and every unnumbered node below it (fields go to `uop_fields`)."""
    if (num := _uop_numbers.get(u)) is not None and num in uop_fields:
        return num
    from fusegrad.uop.ops import all_metadata  # ops imports this module

    for node in u.toposort(gate=lambda x: _uop_numbers.get(x) not in uop_fields):
        num = next(_uop_counter)
        _uop_numbers[node] = num
        srcs = tuple(_uop_numbers[s] for s in node.src)
        uop_fields[num] = (node.op, node.dtype, srcs, node.arg, node.tag, all_metadata.get(node))
    return _uop_numbers[u]


# call traces repeat (each training step schedules from the same lines): frames and whole traces are interned, so a
# long run keeps each distinct trace once (steps share the list: nothing mutates it) and reads each source line once
_trace_frames: dict[tuple[str, int, str], tuple[str, int, str, str]] = {}
_call_traces: dict[tuple[tuple[str, int, str, str], ...], list[tuple[str, int, str, str]]] = {}
CALL_TRACE_LIMIT = 40  # frames kept, innermost first (as traceback.extract_stack's limit)


def _call_trace(frame: Any) -> list[tuple[str, int, str, str]]:
    """The stack at `frame` as (file, line, function, source line), outermost first, at most CALL_TRACE_LIMIT."""
    frames: list[tuple[str, int, str, str]] = []
    while frame is not None and len(frames) < CALL_TRACE_LIMIT:
        where = (frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name)
        if (entry := _trace_frames.get(where)) is None:
            entry = _trace_frames[where] = (*where, linecache.getline(where[0], where[1]).strip())
        frames.append(entry)
        frame = frame.f_back
    frames.reverse()
    return _call_traces.setdefault(tuple(frames), frames)


def _current_group() -> list[TrackedGraphRewrite]:
    # rewrites outside any tracked function go to a default group, or join the last group if one exists
    if not tracked_ctxs:
        if VIZ.value:  # the first traced rewrite of a VIZ=1 program: save (and serve) the trace at exit
            arm_viz_at_exit()
        tracked_keys.append(TracingKey("default graph_rewrite"))
        tracked_ctxs.append([])
    return tracked_ctxs[-1]


def _begin_step(sink: UOp, name: str | None, frame: Any, bottom_up: bool) -> TrackedGraphRewrite:
    step = TrackedGraphRewrite((frame.f_code.co_filename, frame.f_lineno), track_uop(sink), len(active_rewrites),
                               bottom_up, name, trace=_call_trace(frame))  # fmt: skip
    _current_group().append(step)
    active_rewrites.append(step)
    return step


def _record(pm_rule: UPat, matched: bool, seconds: float) -> None:
    if not match_stats:
        atexit.register(print_match_stats)
    entry = match_stats.setdefault(pm_rule, [0, 0, 0.0, 0.0])
    entry[1] += 1
    entry[3] += seconds
    if matched:
        entry[0] += 1
        entry[2] += seconds


def _rewrite_tracked(pm: PatternMatcher, uop: UOp, ctx: Any, step: TrackedGraphRewrite | None) -> UOp | None:
    """PatternMatcher.rewrite, also counting every try and recording every match into `step`."""
    src_ops = {s.op for s in uop.src}
    for rule in pm.pdict.get(uop.op, ()):
        start = time.perf_counter()
        if not rule.early_reject <= src_ops:
            _record(rule.pattern, False, time.perf_counter() - start)
            continue
        for captures in rule.pattern.match(uop, {}):
            try:
                ret = rule.fn(ctx=ctx, **captures) if rule.wants_ctx else rule.fn(**captures)
            except Exception as e:
                if step is not None:
                    step.matches.append(TrackedMatch(track_uop(uop), None, rule.pattern.location,
                                                     rule.pattern.printable(), time.perf_counter() - start,
                                                     f"{type(e).__name__}: {e}"))  # fmt: skip
                raise
            if ret is not None and ret is not uop:
                seconds = time.perf_counter() - start
                _record(rule.pattern, True, seconds)
                if step is not None:
                    step.matches.append(TrackedMatch(track_uop(uop), track_uop(ret), rule.pattern.location,
                                                     rule.pattern.printable(), seconds))  # fmt: skip
                return ret
        _record(rule.pattern, False, time.perf_counter() - start)
    return None


class TrackedPatternMatcher(PatternMatcher):
    """A PatternMatcher whose every match is counted in `match_stats` (and recorded when tracing)."""

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        step = active_rewrites[-1] if active_rewrites and TRACK_MATCH_STATS.value >= 2 else None
        return _rewrite_tracked(self, uop, ctx, step)


def _group_name(fn: Callable[..., Any], name: Any, args: tuple[Any, ...], kwargs: dict[str, Any], ret: Any,
                count: int) -> TracingKey:  # fmt: skip
    if callable(name) and ret is not None:
        got = name(*args, ret=ret, **kwargs)
        if isinstance(got, TracingKey):
            return got  # a TracingKey names its group exactly: no call counter
        return TracingKey(f"{got} n{count}", (fn.__name__,))
    # the result is not kept: a trace must never keep graphs (and the buffers they own) alive
    return TracingKey(f"{fn.__name__} n{count}", (fn.__name__,))


def track_rewrites(name: bool | Callable[..., str | TracingKey] = True) -> Callable[[F], F]:
    """Decorator: with TRACK_MATCH_STATS>=2 every call opens a new group `"<name> n<k>"` of rewrite steps.

    `name` may be a function of the call's arguments and `ret=` result returning a str or a TracingKey.
    """

    def decorator(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if TRACK_MATCH_STATS.value < 2:
                return fn(*args, **kwargs)
            count = _name_cnt[fn.__name__] = _name_cnt.get(fn.__name__, 0) + 1
            group_idx = len(tracked_keys)
            tracked_keys.append(TracingKey(f"{fn.__name__} n{count}", (fn.__name__,)))
            tracked_ctxs.append([])
            ret = fn(*args, **kwargs)
            tracked_keys[group_idx] = _group_name(fn, name, args, kwargs, ret, count)
            return ret

        return wrapper  # type: ignore[return-value]  # same signature as fn

    return decorator


def profile_matches(fn: F) -> F:
    """Decorator: a function of a UOp shows as one step (its name) with its own rewrites nested below it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if TRACK_MATCH_STATS.value < 2:
            return fn(*args, **kwargs)
        from fusegrad.uop.ops import UOp  # ops imports this module

        if not args or not isinstance(args[0], UOp):
            raise AssertionError(
                f"invalid match tracing input: {fn.__name__} got {type(args[0]).__name__ if args else 'nothing'}"
            )
        caller = sys._getframe(1)
        step = TrackedGraphRewrite((caller.f_code.co_filename, caller.f_lineno), track_uop(args[0]),
                                   len(active_rewrites), False, fn.__name__, trace=_call_trace(caller))  # fmt: skip
        _current_group().append(step)
        active_rewrites.append(step)
        try:
            return fn(*args, **kwargs)
        finally:
            active_rewrites.pop()

    return wrapper  # type: ignore[return-value]  # same signature as fn


def print_match_stats() -> None:
    """The TRACK_MATCH_STATS=2 report: rules by total time, with match counts and where they were written. Not with
    VIZ (as in the reference): there the stats go to the saved trace, and the exit stays quiet."""
    if TRACK_MATCH_STATS.value < 2 or not match_stats or VIZ.value:
        return
    total = sum(v[3] for v in match_stats.values())
    print(f"{'matches':>8} {'tries':>8} {'match ms':>10} {'total ms':>10}  rule")
    for pat, (matches, tries, match_s, total_s) in sorted(match_stats.items(), key=lambda kv: -kv[1][3])[:60]:
        loc = f"{pat.location[0].split('/')[-1]}:{pat.location[1]}"
        counts = f"{int(matches):8d} {int(tries):8d} {match_s * 1e3:10.2f} {total_s * 1e3:10.2f}"
        line = f"{counts}  {loc:24s} {pat.printable()}"
        print(colored(line, "green" if matches else None))
    print(f"{'':8} {sum(int(v[1]) for v in match_stats.values()):8d} {'':10} {total * 1e3:10.2f}  total")
