"""Profile events as a Chrome / Perfetto trace (the JSON trace-event format), for `--export-trace out.json`.

`chrome_trace(events)` returns the document: one process per device track, "X" events for kernels and copies, "i"
for markers, "C" counters for each device's memory in use; `export_chrome_trace(events, path)` writes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from fusegrad.helpers import ProfileEvent, ProfilePointEvent
from fusegrad.viz.profile import RangeKind, clock_offsets, collect_spans
from fusegrad.viz.trace_file import write_atomic

_CATEGORIES = {RangeKind.KERNEL: "kernel", RangeKind.COPY: "copy", RangeKind.GRAPH: "graph"}
MARKERS_PID = 0  # markers belong to no device: a process of their own, first in the list


def _memory_counters(
    points: Sequence[ProfilePointEvent], pid_of: dict[str, int], start: Decimal
) -> list[dict[str, Any]]:
    """A "C" event per allocation and free with the bytes then in use on that device."""
    live: dict[Any, tuple[str, int]] = {}
    in_use: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for e in sorted((e for e in points if e.name in ("alloc", "free")), key=lambda e: e.ts):
        if e.name == "alloc":
            device, size = e.device, int(e.arg["sz"]) * int(getattr(e.arg["dtype"], "itemsize", 1))
            live[e.key] = (device, size)
            in_use[device] = in_use.get(device, 0) + size
        elif (entry := live.pop(e.key, None)) is not None:
            device, size = entry
            in_use[device] -= size
        else:
            continue  # freed but allocated before profiling started: its size is unknown
        track = f"{device} Memory"
        pid = pid_of.setdefault(track, len(pid_of) + 1)
        out.append({"name": "memory", "ph": "C", "pid": pid, "tid": 0, "ts": float(e.ts - start),
                    "args": {"bytes": in_use[device]}})  # fmt: skip
    return out


def chrome_trace(events: Sequence[ProfileEvent]) -> dict[str, Any]:
    """The trace-event document; times in microseconds since the earliest event, device clocks moved to the host's."""
    spans = collect_spans(events, clock_offsets(events))
    points = [e for e in events if isinstance(e, ProfilePointEvent)]
    times = [t for s in spans for t in (s.st, s.en)] + [e.ts for e in points]
    start = min(times, default=Decimal(0))
    pid_of: dict[str, int] = {}
    trace: list[dict[str, Any]] = []
    for s in spans:
        pid = pid_of.setdefault(s.track, len(pid_of) + 1)
        trace.append({"name": s.name, "cat": _CATEGORIES[s.kind], "ph": "X", "pid": pid, "tid": int(s.kind),
                      "ts": float(s.st - start), "dur": float(s.en - s.st)})  # fmt: skip
    trace += _memory_counters(points, pid_of, start)
    for e in points:
        if e.name == "marker":
            trace.append({"name": str(e.arg.get("name", "marker")), "ph": "i", "s": "g", "pid": MARKERS_PID, "tid": 0,
                          "ts": float(e.ts - start)})  # fmt: skip
    names = {MARKERS_PID: "Markers", **{pid: track for track, pid in pid_of.items()}}
    meta = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}} for pid, name in names.items()
    ]
    meta += [
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}} for pid in names
    ]
    return {"traceEvents": meta + trace, "displayTimeUnit": "ms", "otherData": {"producer": "fusegrad.viz"}}


def export_chrome_trace(events: Sequence[ProfileEvent], path: str | Path) -> Path:
    """Write `chrome_trace(events)` to `path` crash-safe (open it in Perfetto or chrome://tracing)."""
    return write_atomic(path, json.dumps(chrome_trace(events), separators=(",", ":")).encode())
