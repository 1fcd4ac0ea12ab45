"""Tests of bench/train.py: its argument checks, the loss-agreement verdict, the kernel clock behind the overhead
figure, and (slow) a whole run with tiny models against torch."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from test.shared import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench" / "train.py"
TINY = ["--dim", "16", "--heads", "2", "--layers", "1", "--context", "8", "--batch", "2", "--conv-batch", "4",
        "--width", "2", "--steps", "2", "--warmup", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script(BENCH, "bench_train")


BAD_ARGS = [["--warmup", "1"], ["--steps", "0"], ["--dim", "10", "--heads", "4"], ["--cases", "resnet"],
            ["--peers", "jax"], ["--kernels", "-1"], ["--kernel-reps", "0"]]  # fmt: skip


@pytest.mark.parametrize("argv", BAD_ARGS)
def test_bad_arguments_are_refused(bench: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_quick_shortens_the_run(bench: ModuleType) -> None:
    args = bench.parse_args(["--quick", "--cases", "gpt", "--peers", ""])
    assert (args.steps, args.warmup, args.cases, args.peers) == (1, 2, ["gpt"], [])


def test_loss_agreement_flags_a_different_computation(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    torch_losses = [4.0, 3.5, 3.0, 2.0]
    runs = {
        "fusegrad": bench.Run(losses=[4.0, 3.5 * (1 + 2e-3), 3.0, 9.0]),  # step 2 off by 2e-3; step 4 is not checked
        "torch": bench.Run(losses=torch_losses),
        "tinygrad": bench.Run(losses=[4.0, 3.5 * (1 + 1e-4), 3.0, 2.0]),
        "other": None,  # a failed peer is left out
    }
    assert bench.print_losses(runs, 3) == ["fusegrad"]
    out = capsys.readouterr().out
    assert "fusegrad vs torch: max relative difference 2.00e-03 (MISMATCH" in out
    assert "tinygrad vs torch: max relative difference 1.00e-04 (ok" in out
    runs["fusegrad"] = bench.Run(losses=[4.0, 3.5, float("nan"), 2.0])
    assert bench.print_losses(runs, 3) == ["fusegrad"], "a NaN loss must not pass the check"
    assert bench.print_losses({"fusegrad": runs["fusegrad"]}, 3) == []
    assert "no torch run" in capsys.readouterr().out


def test_turns_split_the_timed_steps(bench: ModuleType) -> None:
    assert bench.turns_of(15, 5) == [3, 3, 3, 3, 3]
    assert bench.turns_of(4, 3) == [2, 1, 1]
    assert bench.turns_of(2, 5) == [1, 1], "no empty turn"
    assert bench.turns_of(3, 0) == [3], "at least one turn"


def test_peers_take_turns_and_a_failing_peer_is_left_out(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "SETTLE", 0.0)
    order: list[tuple[str, int]] = []

    def trainer(name: str, fail_at: int = -1) -> Any:
        def step(batch: int) -> Any:
            if batch == fail_at:
                raise RuntimeError("out of memory")
            order.append((name, batch))
            return SimpleNamespace(item=lambda: float(batch))

        return bench.Trainer(prepare=lambda b: b, step=step)

    case = SimpleNamespace(batches=list(range(6)))
    args = SimpleNamespace(warmup=2, turns=2)
    runs = bench.train({"fusegrad": trainer("fusegrad"), "torch": trainer("torch"), "tinygrad": trainer("tinygrad", 4)},
                       case, args)  # fmt: skip
    assert order == [("fusegrad", 0), ("fusegrad", 1), ("torch", 0), ("torch", 1), ("tinygrad", 0), ("tinygrad", 1),
                     ("fusegrad", 2), ("fusegrad", 3), ("torch", 2), ("torch", 3), ("tinygrad", 2), ("tinygrad", 3),
                     ("fusegrad", 4), ("fusegrad", 5), ("torch", 4), ("torch", 5)]  # fmt: skip
    assert runs["tinygrad"] is None
    assert "tinygrad: failed (RuntimeError: out of memory)" in capsys.readouterr().out
    assert runs["fusegrad"].losses == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert len(runs["torch"].seconds) == 6


def test_kernel_clock_times_each_c_call_and_restores(bench: ModuleType) -> None:
    def kernel(*args: Any) -> None:
        time.sleep(0.01)

    kernel.argtypes = None  # type: ignore[attr-defined]  # stands for a ctypes function's attribute
    program = SimpleNamespace(fxn=kernel)
    items = [SimpleNamespace(prg=SimpleNamespace(_prg=program)) for _ in range(2)]  # two items share one program
    with bench.kernel_clock(items) as spent:
        assert program.fxn.argtypes is None, "the wrapper reads the function's attributes"
        program.fxn.argtypes = ["c_void_p"]
        program.fxn()
        program.fxn()
    assert kernel.argtypes == ["c_void_p"], "the wrapper writes the function's attributes"  # type: ignore[attr-defined]
    assert len(spent) == 2, "a program shared by two items must be wrapped once"
    assert all(seconds >= 0.009 for seconds in spent)
    assert program.fxn is kernel
    overhead = bench.replay_overhead(0.05, spent, 2)
    assert overhead.kernels == 2
    assert overhead.seconds == pytest.approx(0.05 - sum(spent))
    with pytest.raises(RuntimeError, match="got 1, expected 2"):
        bench.replay_overhead(0.05, spent[:1], 2)
    with (
        pytest.raises(ValueError, match="cannot time a SimpleNamespace runner"),
        bench.kernel_clock([SimpleNamespace(prg=SimpleNamespace())]),
    ):
        pass


def test_wrapper_cost_is_small_and_positive(bench: ModuleType) -> None:
    cost = bench.wrapper_cost(calls=500, rounds=3)
    assert 0 <= cost < 50e-6, "a Python call and two clock reads cost about a microsecond"


def test_inline_convnet_matches_the_example(bench: ModuleType) -> None:
    from fusegrad import Tensor
    from fusegrad.examples.mnist import ConvNet
    from fusegrad.nn.state import get_state_dict

    inline, example = get_state_dict(bench.InlineConvNet(4)), get_state_dict(ConvNet(4))
    assert {k: v.shape for k, v in inline.items()} == {k: v.shape for k, v in example.items()}
    assert bench.InlineConvNet(4)(Tensor.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert bench.fusegrad_convnet() == (ConvNet, "fusegrad.examples.mnist.ConvNet")


@pytest.mark.slow
def test_tiny_run_against_torch(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main([*TINY, "--peers", "torch"]) == 0
    out = capsys.readouterr().out
    for unit in ("tokens/s", "images/s"):
        assert unit in out
    assert out.count("fusegrad vs torch: max relative difference") == 2
    assert "MISMATCH" not in out
    overheads = [line for line in out.splitlines() if line.startswith("fusegrad Python overhead per replayed step")]
    assert len(overheads) == 2
    for line in overheads:
        per_kernel = float(line.split(" = ")[1].split()[0])
        assert 0 <= per_kernel < 10_000, line  # microseconds: not negative, and far below a whole step
        assert "less the timing wrapper's" in line


def test_kernel_ranking_times_every_kernel_of_the_step(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """--kernels N: each captured kernel of the tiny GPT's step runs alone, the step's own inputs filled in (the
    embedding's gather reads the token ids), and the N slowest are printed in order with their share."""
    assert bench.main([*TINY, "--cases", "gpt", "--kernels", "3", "--kernel-reps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(line for line in lines if "kernels timed alone" in line)
    assert "0 items not timed" in head
    ranked = [line.split() for line in lines if line.strip().endswith(tuple("0123456789")) and " ms " in line]
    assert len(ranked) == 3
    times = [float(r[0]) for r in ranked]
    assert times == sorted(times, reverse=True)
    assert all(t > 0 for t in times)


def test_timed_steps_replay_through_graph_runners(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rate is what a user gets: fusegrad's timed replays run graphed; only the extra overhead steps run without
    graph runners (each kernel's C call timed), one per batch after the warm-up."""
    from fusegrad.engine.graph import GraphRunner

    args = bench.parse_args([*TINY, "--cases", "gpt", "--peers", ""])
    case = bench.make_cases(args)[0]
    trainer, _ = bench.MAKERS["gpt"]["fusegrad"](case)
    graphed: list[bool] = []
    plain_step = bench.step_once

    def watched(trainer_: Any, run: Any, inputs: Any) -> None:
        plain_step(trainer_, run, inputs)
        cache = trainer_.jit.captured._jit_cache if trainer_.jit.captured is not None else []
        graphed.append(any(isinstance(ei.prg, GraphRunner) for ei in cache))

    monkeypatch.setattr(bench, "step_once", watched)
    run = bench.train({"fusegrad": trainer}, case, args)["fusegrad"]
    assert graphed[args.warmup :] == [True] * (len(graphed) - args.warmup)
    assert len(run.overheads) == len(case.batches) - args.warmup
