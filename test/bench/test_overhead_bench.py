"""Smoke tests of bench/overhead.py: its arguments, the figures its workers return for fusegrad, the GPT it times
being the example's model, and one short run of the driver printing the table."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from test.shared import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench" / "overhead.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script(BENCH, "bench_overhead")


@pytest.fixture(autouse=True)
def training_restored() -> Iterator[None]:
    """bench's load() puts Tensor in training mode for its workers' processes: undo it for the next tests."""
    from fusegrad import Tensor

    before = Tensor.training
    yield
    Tensor.training = before


def test_bad_arguments_are_refused(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--measures", "everything"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_workers_return_positive_figures(bench: ModuleType) -> None:
    fw = bench.load("fusegrad")
    figures = bench.tiny(fw, "fusegrad", 0.01) | bench.replay(fw, "fusegrad", 0.01)
    want = {
        "tiny eager µs",
        "tiny jitted µs",
        "eager launch µs/kernel",
        "replay CPU µs/kernel",
        "replay NULL µs/kernel",
    }
    assert set(figures) == want
    assert all(v > 0 for v in figures.values())
    assert figures["replay CPU µs/kernel"] < figures["tiny jitted µs"]  # a replayed kernel costs less than a call


def test_the_timed_gpt_is_the_examples_model(bench: ModuleType) -> None:
    from fusegrad.examples.gpt import GPT, GPTConfig
    from fusegrad.nn.state import get_parameters

    shape = bench.GPT_SHAPE
    example = GPT(GPTConfig(shape["vocab"], shape["context"], shape["dim"], shape["heads"], shape["layers"]))
    timed = bench.make_gpt(bench.load("fusegrad"))
    assert sorted(p.shape for p in get_parameters(timed)) == sorted(p.shape for p in get_parameters(example))


def test_a_short_run_prints_the_table() -> None:
    argv = ["--frameworks", "fusegrad", "--measures", "tiny", "import", "--seconds", "0.05", "--repeats", "1"]
    proc = subprocess.run([sys.executable, str(BENCH), *argv], capture_output=True, text=True, check=True, timeout=600)
    rows = {line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert {"tiny eager µs", "tiny jitted µs", "import ms", "import ms CPU time"} <= rows
    assert "load average" in proc.stdout


def test_import_is_timed_from_the_bytecode_cache(bench: ModuleType) -> None:
    # as a user's install imports; where the environment forbids writing bytecode, the uncached figure is shown too
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    assert set(bench.import_time("fusegrad", 1, env)) == {"import ms", "import ms CPU time"}
    figures = bench.import_time("fusegrad", 1, env | {"PYTHONDONTWRITEBYTECODE": "1"})
    assert set(figures) == {"import ms", "import ms CPU time", "import ms, no bytecode cache"}
    assert all(v > 0 for v in figures.values())


def test_ratio_gives_wall_and_cpu_time(bench: ModuleType) -> None:
    def slow() -> None:
        sum(range(20_000))

    def fast() -> None:
        sum(range(2_000))

    figures = bench.ratio(slow, fast, 0.05, "step")
    assert set(figures) == {"step eager ms", "step jitted ms", "step eager/jitted", "step eager/jitted CPU time"}
    assert figures["step eager/jitted CPU time"] > 2  # ten times the work: CPU time shows it whatever the load
    assert set(bench.ratio(slow, None, 0.05, "step")) == {"step eager ms"}


def test_ratio_times_eager_and_jitted_in_turns(bench: ModuleType) -> None:
    """One call each in turn (after one untimed warm-up call each), so drifting load falls on both alike."""
    calls: list[str] = []
    bench.ratio(lambda: calls.append("e"), lambda: calls.append("j"), 0.0, "step")
    assert "".join(calls) == "ej" * 4  # the warm-up pair and at least three timed rounds


def test_python_measure_gives_the_gpt_steps_phases_on_null() -> None:
    """The `python` measure runs on the NULL device and gives each phase's ms, their total and the collector's."""
    argv = ["--frameworks", "fusegrad", "--measures", "python", "--seconds", "0.05"]
    proc = subprocess.run([sys.executable, str(BENCH), *argv], capture_output=True, text=True, check=True, timeout=600)
    rows = {
        cells[1].strip(): float(cells[2].replace(",", ""))
        for line in proc.stdout.splitlines()
        if line.startswith("| GPT step Python") and (cells := line.split("|"))
    }
    phases = [f"GPT step Python ms, {n} (NULL)" for n in ("forward", "backward", "realize", "optimiser")]
    total, collector = "GPT step Python ms, total with GC (NULL)", "GPT step Python ms, garbage collection (NULL)"
    assert set(rows) == {*phases, total, collector}
    assert all(rows[p] > 0 for p in phases)
    assert rows[total] >= rows[collector] >= 0
