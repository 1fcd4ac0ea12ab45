"""Smoke test of bench/viz.py at its small size (10k events): every figure is printed and within sane bounds; the page
figures come too where playwright and /usr/bin/chromium are there."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from test.shared import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench" / "viz.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script(BENCH, "bench_viz")


def has_browser(bench: ModuleType) -> bool:
    return importlib.util.find_spec("playwright") is not None and Path(bench.CHROMIUM).exists()


def test_the_small_size_runs(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    rows = bench.main(["--sizes", "10000", *([] if has_browser(bench) else ["--no-browser"])])
    out = capsys.readouterr().out
    size = rows[0]
    assert "10,000 events:" in out
    assert 0 < size["bytes_per_event"] <= 16  # the target for kernel events
    assert size["rss_on_mb"] > 0
    assert size["rss_off_mb"] > 0
    assert size["ready_ms"] > 0
    if has_browser(bench):
        assert size["first_paint_s"] > 0
        assert size["frame_max_ms"] >= size["frame_median_ms"] >= 0
        assert rows[1]["graph_first_s"] > 0
        assert rows[1]["graph_at_once_s"] > 0
        assert len(rows[1]["step_ms"]) == 8
        assert "7,000-node graph: first paint" in out
        for frames in (size["inputs"], rows[1]["graph_inputs"]):  # zoom and pan, event to frame
            assert [len(frames["zoom"]), len(frames["pan"])] == [24, 24]
            assert min(frames["zoom"] + frames["pan"]) > 0


def test_the_synthetic_step_replays(bench: ModuleType) -> None:
    from fusegrad.viz.session import VizSession

    messages = list(VizSession(bench.synthetic_step(300, 3)).step_stream(0, 0))
    assert [m["kind"] for m in messages] == ["step", "graph", "graph", "graph", "graph", "done"]
    assert len(messages[1]["graph"]) > 200  # no repeated subgraphs: the layout folds nothing away
    assert len(messages[1]["order"]) == len(messages[1]["graph"])


def test_a_saved_trace_is_measured(bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--profile FILE: the figures of a saved run's profile (here a 2,000-event streamed one, without a page)."""
    path = tmp_path / "run.fgprof"
    bench.record(2000, path, True)
    [row] = bench.main(["--profile", str(path), "--no-browser"])
    assert row["events"] >= 2000  # the kernel events, and the markers between steps
    assert row["bytes_per_event"] == row["profile_bytes"] / row["events"]
    assert 0 < row["ready_ms"] <= row["groups_ms"]
    assert f"{path}: " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["--rewrites", str(path)])  # a rewrites file alone is not a run's trace
