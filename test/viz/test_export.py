"""Tests for fusegrad/viz/export.py: the Chrome/Perfetto trace-event JSON written by `--export-trace`."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusegrad.device import ProfileDeviceEvent
from fusegrad.dtype import dtypes
from fusegrad.helpers import ProfilePointEvent, ProfileRangeEvent
from fusegrad.viz.export import chrome_trace, export_chrome_trace
from fusegrad.viz.trace_file import save_profile

if TYPE_CHECKING:  # the fixture's type; conftest is not importable in importlib mode
    from conftest import RealTrace

REPO = Path(__file__).resolve().parents[2]


def check_structure(doc: dict[str, Any]) -> None:
    """What Perfetto's JSON importer needs: traceEvents of known phases with numeric pid/tid/ts (dur on "X")."""
    assert isinstance(doc["traceEvents"], list)
    for e in doc["traceEvents"]:
        assert e["ph"] in {"X", "i", "C", "M"}, e
        assert isinstance(e["name"], str), e
        assert isinstance(e["pid"], int), e
        assert isinstance(e["tid"], int), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], float), e
            assert e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], float), e
            assert e["dur"] >= 0, e
        if e["ph"] == "C":
            assert all(isinstance(v, int) for v in e["args"].values()), e
        if e["ph"] == "i":
            assert e["s"] in {"g", "p", "t"}, e


def us(x: float) -> Decimal:
    return Decimal(x)


def test_synthetic_events() -> None:
    events = [
        ProfileDeviceEvent("GPU", us(-100), us(-50)),
        ProfileRangeEvent("GPU", "E_4", us(1100), us(1110)),
        ProfileRangeEvent("GPU", "GPU -> CPU", us(1100), us(1120), is_copy=True),
        ProfileRangeEvent("CPU", "r_8", us(1005), us(1007)),
        ProfilePointEvent("CPU", "alloc", 1, {"dtype": dtypes.float32, "sz": 4}, ts=us(1000)),
        ProfilePointEvent("CPU", "alloc", 2, {"dtype": dtypes.int8, "sz": 3}, ts=us(1001)),
        ProfilePointEvent("CPU", "free", 1, ts=us(1030)),
        ProfilePointEvent("CPU", "free", 99, ts=us(1031)),  # allocated before profiling: no counter
        ProfilePointEvent("TINY", "marker", None, {"name": "epoch 1", "color": "red"}, ts=us(1004)),
    ]
    doc = json.loads(json.dumps(chrome_trace(events)))
    check_structure(doc)
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for e in doc["traceEvents"]:
        by_phase.setdefault(e["ph"], []).append(e)
    processes = {e["pid"]: e["args"]["name"] for e in by_phase["M"] if e["name"] == "process_name"}
    assert sorted(processes.values()) == ["CPU", "CPU Memory", "GPU", "Markers"]
    kernel, copy = (e for e in by_phase["X"] if processes[e["pid"]] == "GPU")
    assert (kernel["name"], kernel["ts"], kernel["dur"], kernel["cat"]) == ("E_4", 0.0, 10.0, "kernel")  # 1100-100
    assert (copy["ts"], copy["dur"], copy["cat"]) == (50.0, 20.0, "copy")  # the copy queue has its own offset
    assert [e["args"]["bytes"] for e in by_phase["C"]] == [16, 19, 3]
    (marker,) = by_phase["i"]
    assert (marker["name"], marker["ts"], processes[marker["pid"]]) == ("epoch 1", 4.0, "Markers")


def test_real_profile_round_trips_through_a_file(real_trace: RealTrace, tmp_path: Path) -> None:
    path = export_chrome_trace(real_trace.events, tmp_path / "out.json")
    doc = json.loads(path.read_text())
    check_structure(doc)
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert {"r_7_3", "r_3_3_7"} & names
    assert len([e for e in doc["traceEvents"] if e["ph"] == "i"]) == 3  # start, middle, end


def test_export_trace_flag(real_trace: RealTrace, tmp_path: Path) -> None:
    profile = save_profile(real_trace.events, tmp_path / "p.json.gz")
    out = tmp_path / "chrome.json"
    proc = subprocess.run([sys.executable, "-m", "fusegrad.viz", "--profile", str(profile), "--export-trace", str(out)],
                          capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stdout
    check_structure(json.loads(out.read_text()))


def test_empty_profile() -> None:
    doc = chrome_trace([])
    check_structure(doc)
    assert [e["ph"] for e in doc["traceEvents"]] == ["M", "M"]  # only the markers process
