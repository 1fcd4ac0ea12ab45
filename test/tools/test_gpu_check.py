"""tools/gpu_check.sh, the one-command GPU check, tested without a GPU: its plan (--dry-run), a missing CUDA device
skipping every GPU step with the reason, a hanging step killed at its time limit and the rest skipped once the budget
is spent (the CL plan, on PoCL, with a python that hangs in pytest), and --prepare's copy of pytest that a machine
without pip can import."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test.shared import cl_unavailable

REPO = Path(__file__).resolve().parents[2]
STEPS = ["environment", "devices", "runtime-tests", "docs-gpu-page", "gpt-train-step", "bench-gpu", "ops-elementwise",
         "ops-reduce", "ops-movement"]  # fmt: skip


def run_check(out: Path, *args: str, **env: str) -> tuple[int, dict[str, list[str]], str]:
    """(exit status, step -> its summary line's fields, the printed text) of one gpu_check.sh run writing to `out`."""
    environ = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, **env}  # PYTHON: the venv's, unless given
    done = subprocess.run(["bash", str(REPO / "tools/gpu_check.sh"), *args], env=environ, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    lines = (out / "summary.txt").read_text().splitlines()
    return done.returncode, {line.split()[0]: line.split(maxsplit=4)[1:] for line in lines}, done.stdout


@pytest.mark.skipif(cl_unavailable() is not None, reason="no OpenCL device: the CL plan needs one to open")
def test_dry_run_plans_every_step(tmp_path: Path) -> None:
    rc, summary, printed = run_check(tmp_path, "--dry-run", GPU_CHECK_DEVICE="CL", GPU_CHECK_SECONDS="100")
    assert rc == 0
    assert list(summary) == STEPS
    assert all(fields[0] == "DRY" for fields in summary.values()), printed
    assert "would run (limit 60s)" in summary["environment"][3]
    # a step's limit is cut to what is left of the budget less 5 s (the checks before the steps took a few seconds)
    limit = int(summary["ops-movement"][3].split("(limit ")[1].split("s)")[0])
    assert 75 <= limit <= 95
    assert not (tmp_path / "logs" / "environment.log").exists()  # nothing ran


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="the NVIDIA driver is installed here")
def test_missing_cuda_skips_the_gpu_steps_with_the_reason(tmp_path: Path) -> None:
    start = time.perf_counter()
    rc, summary, printed = run_check(tmp_path)
    assert rc == 0, printed
    assert time.perf_counter() - start < 120
    assert summary["environment"][0] == "PASS"
    assert "NVRTC" in (tmp_path / "logs" / "environment.log").read_text()
    assert summary["devices"][0] == "PASS"
    for name in STEPS[2:]:
        assert summary[name][0] == "SKIP"
        assert "no CUDA device" in summary[name][3]
        assert "libcuda" in summary[name][3]


@pytest.mark.slow
@pytest.mark.skipif(cl_unavailable() is not None, reason="no OpenCL device: the CL plan needs one to run")
def test_a_hanging_step_is_killed_and_the_rest_skipped(tmp_path: Path) -> None:
    # the python the script runs hangs in pytest: the first test step is killed at its limit, what the budget then
    # leaves is too little for the others
    hanging = tmp_path / "python"
    hanging.write_text(f'#!/bin/bash\n[[ "$1 $2" == "-m pytest" ]] && sleep 1000\nexec {sys.executable} "$@"\n')
    hanging.chmod(0o755)
    start = time.perf_counter()
    rc, summary, printed = run_check(
        tmp_path / "out", GPU_CHECK_DEVICE="CL", GPU_CHECK_SECONDS="45", PYTHON=str(hanging)
    )
    assert time.perf_counter() - start < 45 + 20, printed
    assert rc == 1
    assert [summary[name][0] for name in STEPS[:3]] == ["PASS", "PASS", "TIMEOUT"], printed
    assert all(summary[name][0] == "SKIP" and "out of time" in summary[name][3] for name in STEPS[3:]), printed
    assert "runtime-tests" in (tmp_path / "out" / "gpu_check.log").read_text()


def test_prepare_copies_an_importable_pytest(tmp_path: Path) -> None:
    site = tmp_path / "site"
    environ = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_SITE": str(site)}
    command = ["bash", str(REPO / "tools/gpu_check.sh"), "--prepare"]
    done = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {"pytest", "_pytest", "pluggy", "iniconfig"} <= {p.name for p in site.iterdir()}
    # -S: no site-packages, so pytest and its dependencies can only come from the copy
    probe = "import pytest, pytest_timeout; print(pytest.__file__)"
    found = subprocess.run([sys.executable, "-S", "-c", probe], env={"PYTHONPATH": str(site)}, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith(str(site))
