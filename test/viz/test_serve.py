"""Tests for fusegrad/viz/serve.py: what a VIZ=1 program does at exit (save both traces, then serve them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.request import urlopen

from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context, ProfilePointEvent
from fusegrad.viz.serve import ProfileStream
from fusegrad.viz.trace_file import load_profile, load_rewrites

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """import numpy as np
from fusegrad import Tensor
from fusegrad.helpers import profile_marker
from fusegrad.viz.serve import register_at_exit

register_at_exit()  # what fusegrad does when it finds VIZ set
register_at_exit()  # idempotent
x = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device="CPU")
profile_marker("before")
print((x * 2.71875 - 1).max(axis=0).numpy())
"""


def run_program(tmp_path: Path, viz: str, ci: bool, profile: Path | None = None, **flags: str) -> subprocess.Popen[str]:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "DISPLAY", "WAYLAND_DISPLAY", "VIZ", "PROFILE")}
    profile = profile or tmp_path / "fusegrad_profile.json"
    env |= {"PYTHONPATH": str(REPO), "VIZ": viz, "PROFILEPATH": str(profile), **flags}
    if ci:
        env["CI"] = "true"
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)  # fmt: skip


def check_saved(tmp_path: Path) -> None:
    saved = load_rewrites(tmp_path / "fusegrad_profile.rewrites.json.gz")
    assert any(k.ret is not None for k in saved.trace.keys), "the kernel's codegen group was saved"
    events = load_profile(tmp_path / "fusegrad_profile.json")
    assert any(getattr(e, "name", None) == "marker" for e in events)


def test_save_only_modes_exit_at_once(tmp_path: Path) -> None:
    for viz, ci in (("-1", False), ("1", True)):
        proc = run_program(tmp_path, viz, ci)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        # where the traces go is said once, on stderr, as recording starts; nothing at exit
        assert err.count("VIZ: recording to ") == 1, err
        assert "python -m fusegrad.viz --rewrites" in err
        assert "serving on" not in out
        assert "VIZ" not in out
        check_saved(tmp_path)


def test_viz_1_serves_the_traces_until_interrupted(tmp_path: Path) -> None:
    proc = run_program(tmp_path, "1", ci=False)
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if "serving on " in line:
                url = line.split("serving on ", 1)[1].split()[0]
                break
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        with urlopen(url + "ctxs", timeout=30) as res:
            groups = json.load(res)
        assert any(g["kernel"] for g in groups)
        with urlopen(url + "get_profile", timeout=30) as res:
            assert len(res.read()) > 20
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert "stopped" in out
        check_saved(tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_missing_output_folder_is_created(tmp_path: Path) -> None:
    folder = tmp_path / "not" / "yet"
    proc = run_program(tmp_path, "-1", ci=False, profile=folder / "fusegrad_profile.json")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Exception ignored" not in err
    check_saved(folder)


def test_an_unwritable_output_folder_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("a file where the folder should be")
    for viz, extra in (("-1", {}), ("0", {"PROFILE": "1"})):
        proc = run_program(tmp_path, viz, ci=False, profile=tmp_path / "a_file" / "fusegrad_profile.json", **extra)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, err
        assert "VIZ: could not save the trace" in err
        assert "a_file" in err
        assert "PROFILEPATH" in err
        assert "Exception ignored" not in err
        assert "Traceback" not in err


def test_the_stream_drains_buffer_events_and_trace_numbers_stay_unique(tmp_path: Path) -> None:
    """Recording holds at most a chunk of buffer lifetimes: each drain empties Buffer.profile_events into the file,
    and buffers made after a drain still get numbers no earlier buffer had (they no longer count the list)."""
    stream, keys = ProfileStream(tmp_path / "run.fgprof"), []
    Buffer.profile_events.clear()  # what earlier tests in this process recorded
    with Context(PROFILE=1):
        for _ in range(3):
            for _ in range(4):
                buf = Buffer("NULL", 8, dtypes.float32).allocate()
                keys.append(buf.trace_num)
                buf.deallocate()
            stream.drain()
            assert Buffer.profile_events == []
    stream.close()
    assert len(set(keys)) == len(keys)
    points = [e for e in load_profile(tmp_path / "run.fgprof") if isinstance(e, ProfilePointEvent)]
    assert [(e.name, e.key) for e in points if e.name in ("alloc", "free")] == [
        (name, key) for key in keys for name in ("alloc", "free")
    ]
