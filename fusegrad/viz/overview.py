"""The timeline's overview (level of detail): per track, what each of N time bins holds, so the page paints a run of
any size at once and draws every event only when the packed timeline has arrived.

`overview(scan, bins)` summarizes a `RangeScan` (read straight from a streaming file's columns, or made from events by
`scan_events`); the page asks for it as `/timeline_overview?bins=N`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fusegrad.helpers import ProfileEvent, ProfilePointEvent
from fusegrad.viz.profile import RangeKind, clock_offsets, collect_spans
from fusegrad.viz.profile_file import RangeScan

MAX_BINS = 8192


def scan_events(events: Sequence[ProfileEvent]) -> RangeScan:
    """A RangeScan of loaded events (graph batches and clock offsets included), in integer nanoseconds."""
    scan, ids, rows = RangeScan(), dict[str, int](), dict[str, list[tuple[int, int, int, int]]]()
    for s in collect_spans(events, clock_offsets(events)):
        st, en = int(s.st * 1000), int(s.en * 1000)
        rows.setdefault(s.track, []).append((st, max(en - st, 0), ids.setdefault(s.name, len(ids)), s.kind))
        scan.first, scan.last = min(scan.first, st), max(scan.last, en)
    for e in events:
        if isinstance(e, ProfilePointEvent):
            ts = int(e.ts * 1000)
            scan.first, scan.last = min(scan.first, ts), max(scan.last, ts)
            if e.name == "marker":
                scan.markers.append((ts, str(e.arg.get("name", ""))))
    for track, found in rows.items():
        columns = np.array(found, dtype=np.int64).reshape(-1, 4)
        scan.tracks[track] = [(columns[:, 0], columns[:, 1], columns[:, 2], columns[:, 3])]
    scan.strings = list(ids)
    return scan


def bin_track(starts: npt.NDArray[Any], durations: npt.NDArray[Any], names: npt.NDArray[Any], first: int, span: int,
              bins: int) -> tuple[list[float], list[int]]:  # fmt: skip
    """Per bin, the busy fraction (overlapping events add up, capped at 1) and the name id of the longest event
    starting in it (-1: none)."""
    width = span / bins
    ends = starts + durations
    b0 = np.minimum(((starts - first) / width).astype(np.int64), bins - 1)
    b1 = np.minimum(((ends - first) / width).astype(np.int64), bins - 1)
    inside = b0 == b1  # nearly every event, zoomed out: all its time goes to one bin
    busy = np.bincount(b0[inside], weights=durations[inside] / width, minlength=bins)
    for st, en, lo, hi in zip(*(a[~inside].tolist() for a in (starts, ends, b0, b1)), strict=True):
        for b in range(lo, hi + 1):  # the few events that span bins: each bin gets its share
            busy[b] += (min(en, first + (b + 1) * width) - max(st, first + b * width)) / width
    top = np.full(bins, -1, dtype=np.int64)
    order = np.lexsort((durations, b0))  # by bin, then duration: each bin's last is its longest
    last = np.r_[b0[order][1:] != b0[order][:-1], True] if len(order) else np.zeros(0, dtype=bool)
    top[b0[order][last]] = names[order][last]
    return np.round(np.minimum(busy, 1.0), 3).tolist(), top.tolist()


def overview(scan: RangeScan, bins: int) -> dict[str, Any]:
    """{"duration_us", "bins", "strings", "tracks": [{"name", "busy", "top"}]} for `bins` bins over the whole run; times
    count from the earliest event, as the packed timeline's do. ValueError for a bin count outside 1..MAX_BINS."""
    if not 1 <= bins <= MAX_BINS:
        raise ValueError(f"timeline_overview: bins must be 1..{MAX_BINS}: got {bins}")
    if not scan.tracks:
        return {"duration_us": 0, "bins": bins, "strings": [], "tracks": []}
    span = max(scan.last - scan.first, 1)
    tracks = []
    for name, pieces in scan.tracks.items():
        starts, durations, names = (np.concatenate([p[i] for p in pieces]).astype(np.int64) for i in range(3))
        busy, top = bin_track(starts, durations, names, scan.first, span, bins)
        tracks.append({"name": name, "busy": busy, "top": top})
    return {"duration_us": span / 1000, "bins": bins, "strings": scan.strings, "tracks": tracks}


# *** whole-run tables ***


@dataclass(frozen=True, slots=True)
class KernelTotals:
    """One kernel name's runs over the whole profile (microseconds; `first_us` on the timeline's clock)."""

    runs: int
    total_us: float
    first_us: float


def kernel_totals(scan: RangeScan) -> dict[str, KernelTotals]:
    """Per kernel name, its runs on device tracks (not the host's compile ranges, copies or graph batches)."""
    out: dict[str, KernelTotals] = {}
    for track, pieces in scan.tracks.items():
        if track == "TINY" or track.endswith(" Graph"):
            continue
        starts, durations, names, kinds = (np.concatenate([p[i] for p in pieces]).astype(np.int64) for i in range(4))
        keep = kinds == RangeKind.KERNEL
        starts, durations, names = starts[keep], durations[keep], names[keep]
        order = np.argsort(starts, kind="stable")
        ids, first, inverse, runs = np.unique(names[order], return_index=True, return_inverse=True, return_counts=True)
        totals = np.bincount(inverse, weights=durations[order], minlength=len(ids))
        for sid, at, n, total in zip(ids.tolist(), first.tolist(), runs.tolist(), totals.tolist(), strict=True):
            old = out.get(name := scan.strings[sid])
            first_us = (int(starts[order][at]) - scan.first) / 1000
            if old is not None:  # the same kernel on another device
                n, total, first_us = n + old.runs, total + old.total_us * 1000, min(first_us, old.first_us)
            out[name] = KernelTotals(n, total / 1000, first_us)
    return out


def step_series(markers: Sequence[tuple[int, str]]) -> dict[str, list[float]]:
    """Marker labels that repeat (trailing numbers ignored: "step 1", "step 2" are one series) -> microseconds between
    consecutive marks: the step-time series of a program that marks its steps with profile_marker."""
    times: dict[str, list[int]] = {}
    for ts, label in sorted(markers):
        times.setdefault(re.sub(r"[\s#:_-]*\d+$", "", label) or "marker", []).append(ts)
    return {name: [(b - a) / 1000 for a, b in itertools.pairwise(ts)] for name, ts in times.items() if len(ts) > 1}
