"""Smoke tests for fusegrad/examples: every example answers `--help`, and the demo runs for real."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import fusegrad.examples

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(m.name for m in pkgutil.iter_modules(fusegrad.examples.__path__) if not m.name.startswith("_"))


def run_module(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", f"fusegrad.examples.{name}", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)  # fmt: skip


def test_examples_are_found() -> None:
    assert "demo" in EXAMPLES


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_help(name: str) -> None:
    proc = run_module(name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_demo_runs() -> None:
    proc = run_module("demo")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("expressions: (((((row*16)+col)+0)*1)//16), ")
    assert "UOp(Ops.SINK" in proc.stdout  # the repr
    simplified = next(line for line in lines if line.startswith("simplified:"))
    assert simplified.startswith("simplified: row, col, ")  # (row*16+col)//16 -> row and %16 -> col
    before, after = (int(word) for word in lines[-1].split() if word.isdigit())
    assert lines[-1].startswith("nodes:")
    assert after < before


def test_demo_rejects_a_bad_width() -> None:
    proc = run_module("demo", "--width", "0")
    assert proc.returncode == 2
    assert "--width must be at least 1" in proc.stderr


def test_linreg_trains() -> None:
    proc = run_module("linreg", "--samples", "256", "--features", "8", "--steps", "60")
    assert proc.returncode == 0, proc.stderr
    losses = [float(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("step")]
    assert losses[-1] < losses[0] * 1e-3, losses
    assert "max |w - w_true|" in proc.stdout
