"""Interpreter exit with live fusegrad state prints nothing and exits 0: buffers on every host device, a DISK file just
written, a sharded tensor, lazy graphs and a TinyJit function that is running when the process exits (it calls
sys.exit while its capture is under way). With VIZ=-1 the trace is written at exit, silently: where it goes is said on
stderr when recording starts, before the program's own output.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = """
import atexit, os, sys
import numpy as np
from fusegrad import Tensor, TinyJit

if os.environ.get("CHILD_SENTINEL"):  # registered first, so it runs after every fusegrad exit hook
    atexit.register(lambda: print("exit hooks done", flush=True))

keep = [
    Tensor([1.0, 2.0]).realize(),
    (Tensor([1.0, 2.0], device="CPU:1") + 1).realize(),
    (Tensor([1.0, 2.0], device="PYTHON") * 3).realize(),
    Tensor(np.arange(4.0)),  # NPY memory, copied to CPU only when used
    Tensor(np.arange(4.0), device="NPY"),
    Tensor.ones(4, device="NULL").contiguous().realize(),
    Tensor.ones(4, 2).contiguous().shard(("CPU:1", "CPU:2"), 0).realize(),
    Tensor.ones(3) + 1,  # never realized
]
disk = Tensor.empty(4, device="DISK:" + sys.argv[1])
disk.assign(Tensor([1.0, 2.0, 3.0, 4.0]).to(disk.device)).realize()
keep.append(disk)
keep.append(disk[1:3])  # a view of the open file

w = Tensor.ones(4, 4).contiguous().realize()
for _ in range(4):  # a hot schedule: its intermediates stay allocated for the next replay (engine/cache.py)
    out = (Tensor.ones(4, 4).contiguous().realize() @ w).relu().T.sum(axis=1)
    w.assign(w * 0.5 + out.reshape(1, 4).expand(4, 4).flip(1))
    Tensor.realize(out, w)

calls = []

@TinyJit
def step(x):
    calls.append(x.sum())  # a lazy graph kept alive
    if len(calls) == 2:  # the second call is the capture: leave from inside it
        sys.exit(0)
    return (x * 2).realize()

for _ in range(4):
    step(Tensor.ones(4).contiguous().realize())
print("unreachable: the jitted function exits")
"""


def run_child(tmp_path: pathlib.Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("VIZ", "PROFILE", "DEBUG", "TRACK_MATCH_STATS")}
    environ["PYTHONPATH"] = str(ROOT)
    environ.update(env)
    disk_file = tmp_path / "weights.bin"
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(disk_file)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


@pytest.mark.slow  # two fresh interpreters that compile a few kernels: about 5 s
def test_exit_with_live_state_prints_nothing(tmp_path: pathlib.Path) -> None:
    done = run_child(tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert (tmp_path / "weights.bin").read_bytes() == b"".join(
        x.to_bytes(4, "little") for x in (0x3F800000, 0x40000000, 0x40400000, 0x40800000)
    )  # 1.0, 2.0, 3.0, 4.0 as float32: written and flushed before exit


@pytest.mark.slow
def test_exit_while_saving_a_viz_trace_prints_nothing_at_exit(tmp_path: pathlib.Path) -> None:
    profile = tmp_path / "trace" / "profile.json"  # the JSON form: written whole at exit, the busiest exit there is
    done = run_child(tmp_path, VIZ="-1", PROFILEPATH=str(profile), CHILD_SENTINEL="1")
    assert done.returncode == 0
    rewrites = tmp_path / "trace" / "profile.rewrites.json.gz"
    # the one announcement, from when recording started; the sentinel printed by an atexit hook registered before any
    # device opened runs last, so anything the exit printed (a report, match stats, errors) would come before it
    assert done.stderr == (f"VIZ: recording to {rewrites} and {profile}; view with: python -m fusegrad.viz "
                           f"--rewrites {rewrites} --profile {profile}\n")  # fmt: skip
    assert done.stdout == "exit hooks done\n"
    assert profile.exists()
    assert rewrites.exists()


@pytest.mark.slow
def test_profile_alone_announces_its_path_once_and_exits_quietly(tmp_path: pathlib.Path) -> None:
    profile = tmp_path / "profile.fgprof"
    done = run_child(tmp_path, PROFILE="1", PROFILEPATH=str(profile), CHILD_SENTINEL="1")
    assert done.returncode == 0
    assert done.stderr == f"PROFILE: recording to {profile}; view with: python -m fusegrad.viz --profile {profile}\n"
    assert done.stdout == "exit hooks done\n"
    assert profile.stat().st_size > 0
