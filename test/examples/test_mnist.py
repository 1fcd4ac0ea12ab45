"""Tests for fusegrad/examples/mnist.py: flags, the offline fallback, the model's shapes, and short training runs
(with and without VIZ) on the scikit-learn digits."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import urllib.error

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.examples import mnist as example
from fusegrad.nn import datasets

REPO = pathlib.Path(__file__).resolve().parents[2]


def run_example(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-m", "fusegrad.examples.mnist", *args], capture_output=True, text=True,
                          env=full_env, cwd=REPO, timeout=600)  # fmt: skip


def test_help_lists_the_flags() -> None:
    proc = run_example("--help")
    assert proc.returncode == 0, proc.stderr
    for flag in ("--steps", "--batch-size", "--lr", "--device", "--seed", "--data {auto,mnist,digits}", "--width"):
        assert flag in proc.stdout


def test_bad_flags_are_refused() -> None:
    proc = run_example("--steps", "0")
    assert proc.returncode == 2
    assert "--steps and --width must be at least 1" in proc.stderr
    proc = run_example("--data", "cifar")
    assert proc.returncode == 2
    assert "invalid choice: 'cifar'" in proc.stderr


def offline(*args: object, **kwargs: object) -> tuple[np.ndarray, ...]:
    raise urllib.error.URLError("no network here")


def test_auto_falls_back_to_digits_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "load_mnist_arrays", offline)
    what, data = example.load_data("auto")
    assert what.startswith("scikit-learn digits, 8x8 upscaled to 28x28 (1438 train / 359 test images")
    assert "MNIST unavailable: <urlopen error no network here>" in what
    assert [a.shape for a in data] == [(1438, 28, 28), (1438,), (359, 28, 28), (359,)]
    what, _ = example.load_data("digits")
    assert "chosen with --data digits" in what


def test_mnist_choice_offline_says_how_to_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "load_mnist_arrays", offline)
    with pytest.raises(SystemExit, match=r"mnist: cannot download MNIST .*no network here.*; --data digits trains"):
        example.load_data("mnist")


def test_auto_prefers_mnist(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = (
        np.zeros((4, 28, 28), np.uint8),
        np.zeros(4, np.uint8),
        np.zeros((2, 28, 28), np.uint8),
        np.ones(2, np.uint8),
    )
    monkeypatch.setattr(datasets, "load_mnist_arrays", lambda: fake)
    what, data = example.load_data("auto")
    assert what.startswith("MNIST")
    assert data is fake


def test_convnet_shapes() -> None:
    model = example.ConvNet(width=3)
    assert model(Tensor.zeros(5, 1, 28, 28)).shape == (5, 10)
    assert model.head.weight.shape == (10, 6 * 5 * 5)


def accuracy_of(stdout: str) -> float:
    match = re.search(r"^test accuracy: ([0-9.]+)% on 359 test images$", stdout, re.MULTILINE)
    assert match is not None, stdout
    return float(match.group(1))


@pytest.mark.slow
def test_trains_on_digits() -> None:
    proc = run_example("--data", "digits", "--steps", "25", "--batch-size", "32", "--width", "4", "--lr", "1e-2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("data: scikit-learn digits, 8x8 upscaled to 28x28 (1438 train / 359 test images")
    assert "25 steps of batch 32 in " in proc.stdout
    assert accuracy_of(proc.stdout) > 50  # chance is 10%; 25 steps reach 70-85% for seeds 0 and 1
    assert "25/25" in proc.stderr  # the progress bar
    assert "loss=" in proc.stderr


@pytest.mark.slow
def test_viz_records_a_training_run(tmp_path: pathlib.Path) -> None:
    profile = tmp_path / "profile.json"
    proc = run_example("--data", "digits", "--steps", "3", "--batch-size", "8", "--width", "2", VIZ="-1",
                       PROFILEPATH=str(profile))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert 0 <= accuracy_of(proc.stdout) <= 100
    assert f"VIZ: recording to {tmp_path / 'profile.rewrites.json.gz'} and {profile}" in proc.stderr
    assert "VIZ" not in proc.stdout  # nothing printed at exit
    assert profile.stat().st_size > 0
    assert (tmp_path / "profile.rewrites.json.gz").stat().st_size > 0


def test_auto_falls_back_when_a_checksum_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def tampered(*args: object, **kwargs: object) -> tuple[np.ndarray, ...]:
        raise ValueError("fetch: checksum mismatch for x.gz (3 bytes): got sha256 00, expected 11")

    monkeypatch.setattr(datasets, "load_mnist_arrays", tampered)
    assert "MNIST unavailable: fetch: checksum mismatch for x.gz" in example.load_data("auto")[0]
    with pytest.raises(SystemExit, match=r"mnist: cannot download MNIST \(fetch: checksum mismatch"):
        example.load_data("mnist")
