"""Tests for fusegrad/viz/profile_file.py: the streaming profile file (chunks written while the run goes)."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fusegrad.helpers import Metadata, ProfilePointEvent, ProfileRangeEvent
from fusegrad.viz import profile_file
from fusegrad.viz.profile_file import HEADER, ProfileWriter
from fusegrad.viz.trace_file import (
    TraceFileError,
    event_json,
    load_profile,
    load_rewrites,
    load_saved_profile,
    save_profile,
)

if TYPE_CHECKING:  # the fixture's type; conftest is not importable in importlib mode
    from conftest import RealTrace

REPO = Path(__file__).resolve().parents[2]


def kernel_events(count: int) -> list[ProfileRangeEvent | ProfilePointEvent]:
    """`count` kernel runs as the engine records them: an exec point then the runtime's range, steps repeating."""
    events: list[ProfileRangeEvent | ProfilePointEvent] = []
    t = Decimal("1000.125")
    names = [f"r_{i}_16_4" for i in range(40)]
    metadata = (Metadata("linear", "nn.py:95", False),)
    for i in range(count):
        name = names[i % len(names)]
        bufs = [i % len(names) * 3 + k for k in range(3)]
        arg = {"metadata": metadata, "var_vals": {}, "bufs": bufs, "inputs": [1, 2], "outputs": [0]}
        events.append(ProfilePointEvent("CPU", "exec", name, arg, t))
        events.append(ProfileRangeEvent("CPU", name, t + Decimal("0.75"), t + Decimal("12.5") + i % 7))
        t += Decimal("20.001")
    return events


def same(a: list, b: list) -> bool:  # type: ignore[type-arg]  # lists of profile events
    """Equal events (times compared as numbers: 1100.130 is 1100.13) that also save to the same JSON rows."""
    rows = [{k: v for k, v in (event_json(e) or {}).items() if k not in ("st", "en", "ts")} for e in (*a, *b)]
    return a == b and rows[: len(a)] == rows[len(a) :]


def write(path: Path, events: list, chunk: int = 1000, run_id: str | None = "run") -> Path:  # type: ignore[type-arg]
    writer = ProfileWriter(path, run_id)
    for i in range(0, len(events), chunk):
        writer.write(events[i : i + chunk])
    return writer.close()


def test_real_trace_round_trips(tmp_path: Path, real_trace: RealTrace) -> None:
    path = write(tmp_path / "p.fgprof", real_trace.events, chunk=7)
    saved = load_saved_profile(path)
    assert saved.complete
    assert saved.run_id == "run"
    # what the JSON form keeps (kernel names as text, not TracingKeys), the streaming file keeps too
    assert same(saved.events, load_profile(save_profile(real_trace.events, tmp_path / "p.json")))


def test_odd_values_round_trip(tmp_path: Path) -> None:
    """Times finer than a nanosecond go as JSON rows; 1, 1.0 and True stay apart; unfinished ranges keep en None."""
    events = [
        ProfilePointEvent("CPU", "marker", None, {"name": "a", "v": 1}, Decimal("0.0001")),
        ProfilePointEvent("CPU", "marker", None, {"name": "a", "v": 1.0}, Decimal(5)),
        ProfilePointEvent("CPU", "marker", None, {"name": "a", "v": True}, Decimal(6)),
        ProfilePointEvent("CPU", "marker", None, {"name": "a", "v": [1, (2, 3)]}, Decimal(7)),
        ProfileRangeEvent("CPU", "open", Decimal(8)),
        ProfileRangeEvent("DISK", "copy", Decimal(9), Decimal("9.5"), is_copy=True),
    ]
    loaded = load_saved_profile(write(tmp_path / "p.fgprof", events, chunk=2)).events
    assert same(loaded, events)
    assert [type(e.arg["v"]) for e in loaded[:3]] == [int, float, bool]  # type: ignore[attr-defined]


def test_kernel_events_take_at_most_16_bytes(tmp_path: Path) -> None:
    events = kernel_events(20_000)
    path = write(tmp_path / "p.fgprof", events, chunk=8192)
    assert path.stat().st_size / len(events) <= 16
    assert same(load_saved_profile(path).events, events)


def test_a_torn_file_keeps_every_whole_chunk(tmp_path: Path) -> None:
    events = kernel_events(300)
    data = write(tmp_path / "p.fgprof", events, chunk=100).read_bytes()
    counts = set()
    for cut in range(len(HEADER), len(data), 97):
        (tmp_path / "cut.fgprof").write_bytes(data[:cut])
        saved = load_saved_profile(tmp_path / "cut.fgprof")
        assert not saved.complete
        assert same(saved.events, events[: len(saved.events)])
        counts.add(len(saved.events))
    # 600 events in chunks of 100: a cut keeps the whole chunks before it, and only a file with its END is complete
    assert {0, 100, 200, 300, 400, 500} <= counts <= {0, 100, 200, 300, 400, 500, 600}


def test_bad_files_name_the_problem(tmp_path: Path) -> None:
    data = bytearray(write(tmp_path / "p.fgprof", kernel_events(50)).read_bytes())
    newer = tmp_path / "newer.fgprof"
    newer.write_bytes(HEADER[:6] + b"\x09" + data[7:])
    with pytest.raises(TraceFileError, match=r"newer.fgprof: fusegrad-viz-profile version 9 is not supported"):
        load_saved_profile(newer)
    data[-40] ^= 0xFF  # inside the last chunk's compressed bytes
    bad = tmp_path / "bad.fgprof"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceFileError, match=r"bad.fgprof: malformed profile chunk"):
        load_saved_profile(bad)


CRASHING = """import os
import numpy as np
from fusegrad import Tensor, helpers
from fusegrad.viz.serve import register_at_exit

helpers.PROFILE_CHUNK = 16  # a chunk every 16 events, so this short run writes several before it dies
register_at_exit()
x = Tensor(np.arange(12, dtype=np.float32), device="CPU")
for i in range(40):
    x = (x * 1.5 + i).realize()
helpers.profile_marker("never written")
os._exit(3)  # a crash: no exit hooks, the stream is never closed
"""


def test_a_crashed_run_keeps_what_was_streamed(tmp_path: Path) -> None:
    (tmp_path / "program.py").write_text(CRASHING)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "VIZ", "PROFILE", "DISPLAY", "WAYLAND_DISPLAY")}
    env |= {"PYTHONPATH": str(REPO), "PROFILE": "1", "PROFILEPATH": str(tmp_path / "run.fgprof")}
    proc = subprocess.run([sys.executable, "program.py"], cwd=tmp_path, env=env, capture_output=True, timeout=300)
    assert proc.returncode == 3, proc.stderr
    saved = load_saved_profile(tmp_path / "run.fgprof")
    assert not saved.complete
    names = [getattr(e, "name", None) for e in saved.events]
    assert names.count("exec") >= 32  # 40 kernel runs; at most one chunk's worth lost with the crash
    assert "marker" not in names


VIZ_RUN = """import numpy as np
from fusegrad import Tensor
from fusegrad.helpers import profile_marker
from fusegrad.viz.serve import register_at_exit

register_at_exit()  # what fusegrad does when it finds VIZ set
x = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device="CPU")
profile_marker("before")
print((x * 2.71875 - 1).max(axis=0).numpy())
"""


def test_a_viz_run_streams_its_profile_and_pairs_it_with_its_rewrites(tmp_path: Path) -> None:
    (tmp_path / "program.py").write_text(VIZ_RUN)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "VIZ", "PROFILE", "DISPLAY", "WAYLAND_DISPLAY")}
    env |= {"PYTHONPATH": str(REPO), "VIZ": "-1", "PROFILEPATH": str(tmp_path / "run.fgprof")}
    done = subprocess.run([sys.executable, "program.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err
    assert f"VIZ: recording to {tmp_path / 'run.rewrites.json.gz'} and {tmp_path / 'run.fgprof'}" in err
    assert "VIZ" not in out  # nothing at exit
    assert (tmp_path / "run.fgprof").read_bytes().startswith(HEADER)
    saved = load_saved_profile(tmp_path / "run.fgprof")
    assert saved.complete
    assert saved.run_id == load_rewrites(tmp_path / "run.rewrites.json.gz").run_id
    assert any(getattr(e, "name", None) == "marker" for e in saved.events)
    assert any(getattr(e, "name", None) == "exec" for e in saved.events)


def test_the_string_table_restarts_when_it_grows_too_big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Points that never repeat (fresh buffers every run) restart the writer's string table; reading is the same."""
    monkeypatch.setattr(profile_file, "MAX_STRINGS", 50)
    events = [ProfilePointEvent("CPU", "alloc", i, {"sz": i}, Decimal(i)) for i in range(300)]
    events += kernel_events(100)
    events.append(ProfilePointEvent("TINY", "marker", None, {"name": "end"}, Decimal(10**7)))
    path = write(tmp_path / "p.fgprof", events, chunk=40)
    writer = ProfileWriter(tmp_path / "q.fgprof")
    writer.write(events[:40])
    assert writer.encoder.reset  # 40 allocs made 80+ strings: the next chunk starts a fresh table
    writer.close()
    assert same(load_saved_profile(path).events, events)
    scan = profile_file.scan_ranges(path)
    assert sorted({scan.strings[i] for piece in scan.tracks["CPU"] for i in piece[2].tolist()}) == sorted(
        {e.name for e in events if isinstance(e, ProfileRangeEvent)}
    )
    assert scan.markers == [(10**10, "end")]
