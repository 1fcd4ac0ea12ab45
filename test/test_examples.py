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


def run_module(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", f"fusegrad.examples.{name}", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)  # fmt: skip


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


GPT_TINY = ("--batch-size", "2", "--context", "8", "--dim", "16", "--heads", "2", "--layers", "1",
            "--corpus-bytes", "60000", "--eval-batches", "1", "--sample", "12")  # fmt: skip


@pytest.mark.slow
def test_gpt_trains_saves_and_resumes(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "gpt.safetensors")
    proc = run_module("gpt", *GPT_TINY, "--steps", "4", "--checkpoint", checkpoint, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "held-out loss" in proc.stdout
    assert "unigram baseline" in proc.stdout
    assert "sample:" in proc.stdout
    assert "(step 4)" in proc.stdout
    proc = run_module("gpt", *GPT_TINY, "--steps", "2", "--checkpoint", checkpoint, "--resume", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "(step 6)" in proc.stdout


def test_gpt_rejects_heads_that_do_not_divide_the_width() -> None:
    proc = run_module("gpt", "--dim", "10", "--heads", "3")
    assert proc.returncode == 2
    assert "must be a multiple of --heads" in proc.stderr


def test_gpt_resume_without_a_checkpoint_says_so(tmp_path: Path) -> None:
    proc = run_module("gpt", "--resume", "--checkpoint", str(tmp_path / "missing.safetensors"), "--steps", "1")
    assert proc.returncode != 0
    assert "missing.safetensors" in proc.stderr
