"""The terminal view of saved VIZ traces (works over SSH, no browser): `python -m fusegrad.viz.cli COMMAND`.

Commands: `groups` (groups and steps with match counts), `graph CTX STEP [--match K]` (a step's graph as indented
text), `source CTX` (a kernel's code), `kernels [--top N]` (kernels by total time), `markers`, `between A B` (events
between two markers, by name or number). `--json` prints machine-readable output; files default to VIZ=1's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from fusegrad.helpers import ProfilePointEvent
from fusegrad.viz.profile import RangeKind, Span, clock_offsets, collect_spans
from fusegrad.viz.rewrites import get_full_rewrite
from fusegrad.viz.session import VizSession, open_session
from fusegrad.viz.trace_file import TraceFileError

HOST_TRACK = "TINY"  # host-side ranges (compiles, markers): not kernels


def graph_text(graph: Mapping[int, Mapping[str, Any]], max_lines: int = 2000) -> list[str]:
    """A `uop_to_json` graph as an indented tree from its sink(s); a node seen before prints as `^%n`."""
    used = {s for v in graph.values() for _, s in v["src"]}
    stack: list[tuple[int, int, int | None]] = [(n, 0, None) for n in reversed(list(graph)) if n not in used]
    stack.reverse()  # the last sink (the step's own) comes first
    number: dict[int, int] = {}
    lines: list[str] = []
    while stack and len(lines) < max_lines:
        n, depth, index = stack.pop()
        prefix = "  " * depth + ("" if index is None else f"{index}: ")
        if n in number:
            lines.append(f"{prefix}^%{number[n]}")
            continue
        number[n] = len(number)
        lines.append(f"{prefix}%{number[n]} " + " | ".join(str(graph[n]["label"]).split("\n")))
        stack.extend((s, depth + 1, i) for i, s in reversed(graph[n]["src"]) if s in graph)
    if stack:
        lines.append(f"... cut at {max_lines} lines (--max-lines)")
    return lines


def spans_of(session: VizSession) -> list[Span]:
    events = session.profile_events()
    return collect_spans(events, clock_offsets(events))


def markers_of(session: VizSession) -> list[ProfilePointEvent]:
    points = [e for e in session.profile_events() if isinstance(e, ProfilePointEvent) and e.name == "marker"]
    return sorted(points, key=lambda e: e.ts)


def top_kernels(session: VizSession, top: int) -> list[dict[str, Any]]:
    """Kernels (device ranges, not host work) by total time: runs, total/mean/max us, GFLOPS when the ops are known."""
    by_name: dict[str, dict[str, Any]] = {}
    info = session.profile_info()["kernels"]
    for s in spans_of(session):
        if s.kind is RangeKind.GRAPH or s.track == HOST_TRACK:
            continue
        row = by_name.setdefault(s.name, {"name": s.name, "device": s.track, "runs": 0, "total_us": 0.0, "max_us": 0.0})
        dur = float(s.en - s.st)
        row["runs"] += 1
        row["total_us"] += dur
        row["max_us"] = max(row["max_us"], dur)
    rows = sorted(by_name.values(), key=lambda r: -r["total_us"])[:top]
    for r in rows:
        r["mean_us"] = r["total_us"] / r["runs"]
        ops = info.get(r["name"], {}).get("ops")
        r["gflops"] = ops * r["runs"] / r["total_us"] * 1e-3 if ops and r["total_us"] > 0 else None
    return rows


def find_marker(markers: Sequence[ProfilePointEvent], which: str, after: Decimal | None = None) -> ProfilePointEvent:
    """A marker by number (0-based) or by name (the first with that name, after `after` when given)."""
    if which.isdigit():
        if int(which) >= len(markers):
            raise ValueError(f"no marker number {which}: there are {len(markers)}")
        return markers[int(which)]
    for m in markers:
        if m.arg.get("name") == which and (after is None or m.ts >= after):
            return m
    raise ValueError(f"no marker named {which!r}: markers are {[m.arg.get('name') for m in markers]}")


def events_between(session: VizSession, first: str, last: str) -> list[dict[str, Any]]:
    """Ranges starting between two markers, with start times relative to the first."""
    markers = markers_of(session)
    a = find_marker(markers, first)
    b = find_marker(markers, last, after=a.ts)
    out = []
    for s in sorted(spans_of(session), key=lambda s: s.st):
        if a.ts <= s.st <= b.ts:
            out.append(
                {"device": s.track, "name": s.name, "start_us": float(s.st - a.ts), "dur_us": float(s.en - s.st)}
            )
    return out


def run_command(session: VizSession, args: argparse.Namespace) -> tuple[Any, list[str]]:
    """(JSON value, text lines) of one command."""
    match args.command:
        case "groups":
            groups = session.groups()
            lines = []
            for i, g in enumerate(groups):
                lines.append(f"[{i}] {g['name']}" + (" (kernel)" if g["kernel"] else ""))
                lines += [f"  {'  ' * s['depth']}[{j}] {s['name']}  {s['match_count']} matches"
                          for j, s in enumerate(g["steps"])]  # fmt: skip
            return groups, lines
        case "graph":
            step = session.step(args.ctx, args.step)
            assert session.trace is not None, "step() checked the trace"
            if not 0 <= args.match <= len(step.matches):
                raise IndexError(f"no match {args.match} in group {args.ctx} step {args.step}: --match goes from 0 "
                                 f"(the input graph) to {len(step.matches)}")  # fmt: skip
            graphs = get_full_rewrite(step, session.trace.uop_fields, session.trace.keys)
            try:
                replay = next(itertools.islice(graphs, args.match, None))
            finally:
                graphs.close()  # now: closing restores the tracking flag the replay turned off
            return replay["graph"], graph_text(replay["graph"], args.max_lines)
        case "source":
            kernel = session.kernel(args.ctx)
            return kernel, str(kernel["src"]).splitlines()
        case "kernels":
            rows = top_kernels(session, args.top)
            lines = [f"{'total us':>12} {'runs':>6} {'mean us':>10} {'max us':>10} {'GFLOPS':>8}  device  name"]
            lines += [f"{r['total_us']:12.1f} {r['runs']:6d} {r['mean_us']:10.2f} {r['max_us']:10.2f} "
                      f"{'' if r['gflops'] is None else format(r['gflops'], '8.2f'):>8}  {r['device']:6s}  {r['name']}"
                      for r in rows]  # fmt: skip
            return rows, lines
        case "markers":
            markers = markers_of(session)
            start = markers[0].ts if markers else Decimal(0)
            rows = [
                {"number": i, "name": m.arg.get("name"), "ts_us": float(m.ts - start)} for i, m in enumerate(markers)
            ]
            return rows, [f"[{r['number']}] {r['ts_us']:12.1f} us  {r['name']}" for r in rows]
        case _:
            rows = events_between(session, args.first, args.last)
            lines = [f"{r['start_us']:12.1f} us {r['dur_us']:10.2f} us  {r['device']:8s} {r['name']}" for r in rows]
            return rows, lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fusegrad.viz.cli", description=__doc__.split("\n", 1)[0])
    p.add_argument("--rewrites", metavar="FILE", help="rewrite trace (default: the one VIZ=1 saved)")
    p.add_argument("--profile", metavar="FILE", help="profile (default: the one VIZ=1 saved)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    commands = p.add_subparsers(dest="command", required=True)
    commands.add_parser("groups", help="groups and their steps with match counts")
    graph = commands.add_parser("graph", help="a step's graph as indented text")
    graph.add_argument("ctx", type=int, help="group number (from `groups`)")
    graph.add_argument("step", type=int, help="step number within the group")
    graph.add_argument("--match", type=int, default=0, help="the graph after this many matches (default 0: input)")
    graph.add_argument("--max-lines", type=int, default=2000, help="cut the tree after this many lines")
    commands.add_parser("source", help="a kernel group's source").add_argument("ctx", type=int, help="group number")
    commands.add_parser("kernels", help="kernels by total time").add_argument("--top", type=int, default=20)
    commands.add_parser("markers", help="user markers (profile_marker) in time order")
    between = commands.add_parser("between", help="events between two markers")
    between.add_argument("first", help="marker number or name")
    between.add_argument("last", help="marker number or name (the first such after FIRST)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        session = open_session(args.rewrites, args.profile)
        value, lines = run_command(session, args)
    except (TraceFileError, ValueError, IndexError) as e:
        print(f"viz: {e}", file=sys.stderr)
        return 2
    text = json.dumps(value, default=str, indent=1) if args.json else "\n".join(lines)
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # the reader stopped early (`| head`): that is its choice, not an error. Point stdout at devnull so the
        # interpreter's own flush at exit doesn't fail again and print a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
