"""How bench/viz.py reads a frame's cost from a Chrome trace: the busy time of the thread that marked an input, between
its "viz-input" and "viz-frame" marks (nested slices counted once, other threads' slices not at all)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test.shared import load_script

BENCH = load_script(Path(__file__).resolve().parents[2] / "bench" / "viz.py", "bench_viz_frames")
PAGE = (1, 10)  # (pid, tid) of the page's main thread in the traces below


def mark(ts: float, message: str, thread: tuple[int, int] = PAGE) -> dict[str, Any]:
    return {"name": "TimeStamp", "ph": "I", "ts": ts, "pid": thread[0], "tid": thread[1],
            "args": {"data": {"message": message}}}  # fmt: skip


def task(ts: float, dur: float, thread: tuple[int, int] = PAGE) -> dict[str, Any]:
    return {"name": "RunTask", "ph": "X", "ts": ts, "dur": dur, "pid": thread[0], "tid": thread[1]}


def test_busy_time_between_marks() -> None:
    events = [
        mark(100, "viz-input"),
        task(90, 30),  # 100..120 inside the window: 20 us
        task(100, 10),  # nested in the one above: not counted again
        task(150, 10),  # 10 us
        task(150, 40, thread=(2, 20)),  # another thread (the compositor): not the page's work
        task(190, 60),  # 190..200 inside: 10 us
        mark(200, "viz-frame"),
        mark(300, "viz-input"),
        task(310, 5),
        mark(400, "viz-frame"),
    ]
    assert BENCH.work_per_input({"traceEvents": events}) == [0.04, 0.005]  # ms
    assert BENCH.work_per_input(events) == [0.04, 0.005]  # the bare list form of the trace format


def test_unmarked_traces_and_unpaired_marks() -> None:
    assert BENCH.work_per_input([task(0, 10)]) == []
    events = [mark(0, "viz-input"), mark(10, "viz-input"), task(10, 5), mark(20, "viz-frame"), mark(30, "viz-frame")]
    assert BENCH.work_per_input(events) == [0.005]  # only an input mark followed by its frame mark


def test_spread_reports_median_p95_and_max() -> None:
    times = [float(t) for t in range(1, 25)]  # 24 inputs: p95 is the 23rd smallest
    assert BENCH.spread(times) == "median 12.5 / p95 23.0 / max 24.0"
    assert BENCH.spread([]) == "none"
