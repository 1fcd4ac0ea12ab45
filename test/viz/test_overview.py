"""Tests for fusegrad/viz/overview.py: the timeline overview's bins against a brute-force count over every event."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad.viz.overview import TrackBins, overview
from fusegrad.viz.profile_file import RangeScan


def brute_force(starts: list[int], durations: list[int], span: int, bins: int) -> tuple[list[float], list[int]]:
    """Per bin: the summed overlap of every event (capped at 1) and the longest duration starting in it (-1: none)."""
    width = span / bins
    busy, longest = [], []
    for b in range(bins):
        lo, hi = b * span / bins, (b + 1) * span / bins
        busy.append(sum(max(0.0, min(hi, st + d) - max(lo, st)) for st, d in zip(starts, durations, strict=True)))
        inside = [d for st, d in zip(starts, durations, strict=True) if lo <= st < hi or (b == bins - 1 and st == span)]
        longest.append(max(inside, default=-1))
    return [round(min(x / width, 1.0), 3) for x in busy], longest


@pytest.mark.parametrize("seed", range(6))
def test_bins_match_a_brute_force_count(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, names = int(rng.integers(1, 300)), int(rng.integers(1, 9))
    starts = rng.integers(0, 10_000, n)
    durations = rng.integers(0, 400, n) * (rng.random(n) < 0.9) + rng.integers(0, 3000, n) * (rng.random(n) < 0.05)
    name_ids = rng.integers(0, names, n)
    first = int(starts.min())
    span = max(int((starts + durations).max()) - first, 1)
    track = TrackBins.of(starts, durations, name_ids, first)
    for bins in (1, 7, 64, 500):
        busy, top = track.bins(span, bins)
        want_busy, want_longest = brute_force((starts - first).tolist(), durations.tolist(), span, bins)
        assert busy == pytest.approx(want_busy, abs=2e-3)
        for b, name in enumerate(top):  # the named event is one of the bin's longest
            if want_longest[b] < 0:
                assert name == -1
                continue
            lo, hi = b * span / bins, (b + 1) * span / bins
            in_bin = [d for st, d, k in zip(starts - first, durations, name_ids, strict=True)
                      if k == name and (lo <= st < hi or (b == bins - 1 and st == span))]  # fmt: skip
            assert want_longest[b] in in_bin


def test_the_overview_keeps_its_prepared_tracks_between_calls() -> None:
    scan = RangeScan(first=100, last=1100, strings=["r_a", "r_b"])
    scan.tracks["CPU"] = [(np.array([100, 600]), np.array([400, 500]), np.array([0, 1]), np.array([0, 0]))]
    prepared = {"CPU": TrackBins.of(*scan.tracks["CPU"][0][:3], scan.first)}
    assert overview(scan, 2, prepared) == overview(scan, 2)
    assert overview(scan, 2)["tracks"] == [{"name": "CPU", "busy": [0.8, 1.0], "top": [0, 1]}]
