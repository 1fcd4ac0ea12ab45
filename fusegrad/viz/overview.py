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


@dataclass(frozen=True, slots=True)
class TrackBins:
    """One track's range events prepared once for binning at any resolution (each request is then a few binary
    searches and one pass in numpy, not a sort): starts and ends sorted with their prefix sums, in ns from the run's
    first event, and per event by start order a key whose maximum over a slice names the slice's longest event."""

    starts: npt.NDArray[np.float64]
    start_sums: npt.NDArray[np.float64]  # start_sums[k]: the sum of the first k starts
    ends: npt.NDArray[np.float64]
    end_sums: npt.NDArray[np.float64]
    longest: npt.NDArray[np.int64]  # duration * name_count + name id (durations clipped so this cannot overflow)
    name_count: int

    @classmethod
    def of(
        cls, starts: npt.NDArray[Any], durations: npt.NDArray[Any], names: npt.NDArray[Any], first: int
    ) -> TrackBins:
        order = np.argsort(starts, kind="stable")
        starts, durations, names = (starts[order] - first).astype(np.float64), durations[order], names[order]
        ends = np.sort(starts + durations)
        name_count = int(names.max(initial=0)) + 1
        clipped = np.minimum(durations, (1 << 62) // name_count)  # a longer event still wins its bin
        sums = [np.concatenate(([0.0], np.cumsum(x))) for x in (starts, ends)]
        return cls(starts, sums[0], ends, sums[1], clipped * name_count + names, name_count)

    def busy_before(self, at: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Busy time before each time in `at`: what started before it, less what ended before it (overlaps add)."""
        k_start, k_end = np.searchsorted(self.starts, at), np.searchsorted(self.ends, at)
        return (k_start * at - self.start_sums[k_start]) - (k_end * at - self.end_sums[k_end])

    def bins(self, span: int, bins: int) -> tuple[list[float], list[int]]:
        """Per bin, the busy fraction (capped at 1) and the name id of the longest event starting in it (-1: none)."""
        width = span / bins
        edges = np.arange(bins + 1, dtype=np.float64) * width
        busy = np.diff(self.busy_before(edges)) / width  # the run ends with its last event: nothing lies past it
        first = np.searchsorted(self.starts, edges[:-1])  # bin b holds the starts in [edge b, edge b + 1)
        count = np.diff(np.r_[first, len(self.starts)])
        top = np.full(bins, -1, dtype=np.int64)
        if len(self.starts):
            filled = count > 0  # reduceat over the filled bins' first events: each slice ends where the next begins
            top[filled] = np.maximum.reduceat(self.longest, first[filled]) % self.name_count
        return np.round(np.minimum(busy, 1.0), 3).tolist(), top.tolist()


def prepare_tracks(scan: RangeScan) -> dict[str, TrackBins]:
    """Each track's TrackBins: the one sort an overview needs, done once per scan."""
    tracks = {}
    for name, pieces in scan.tracks.items():
        starts, durations, names = (np.concatenate([p[i] for p in pieces]).astype(np.int64) for i in range(3))
        tracks[name] = TrackBins.of(starts, durations, names, scan.first)
    return tracks


def overview(scan: RangeScan, bins: int, tracks: dict[str, TrackBins] | None = None) -> dict[str, Any]:
    """{"duration_us", "bins", "strings", "tracks": [{"name", "busy", "top"}]} for `bins` bins over the whole run; times
    count from the earliest event, as the packed timeline's do. `tracks`: the scan's `prepare_tracks`, when kept from
    an earlier call. ValueError for a bin count outside 1..MAX_BINS."""
    if not 1 <= bins <= MAX_BINS:
        raise ValueError(f"timeline_overview: bins must be 1..{MAX_BINS}: got {bins}")
    if not scan.tracks:
        return {"duration_us": 0, "bins": bins, "strings": [], "tracks": []}
    span = max(scan.last - scan.first, 1)
    tracks = prepare_tracks(scan) if tracks is None else tracks
    rows = []
    for name, track in tracks.items():
        busy, top = track.bins(span, bins)
        rows.append({"name": name, "busy": busy, "top": top})
    return {"duration_us": span / 1000, "bins": bins, "strings": scan.strings, "tracks": rows}


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
