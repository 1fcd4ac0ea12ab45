"""Tests of bench/ops.py and bench/peak.py: arguments and --quick, the peak loops compile and report figures, every
system's case computes what torch's float64 yardstick does (numpy's causal attention and im2col conv included), and
the target column's verdicts. No timing is asserted: the bench prints ratios."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from test.shared import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ops.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script(BENCH, "bench_ops")


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--timeout", "0"], ["--beam-budget", "-1"]])
def test_bad_arguments_are_refused(bench: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_quick_keeps_the_issues_forward_cases(bench: ModuleType) -> None:
    args = bench.parse_args(["--quick"])
    assert (args.reps, args.beam_budget) == (2, 10.0)
    assert bench.parse_args([]).beam_budget == 30.0
    assert bench.case_names(args) == ["matmul 1024", "conv2d fwd", "sdpa", "sdpa causal", "softmax fwd",
                                      "layernorm fwd", "sum 16M", "chain 4M"]  # fmt: skip
    assert "fusegrad eager" not in bench.peer_makers(quick=True)
    assert bench.case_names(bench.parse_args(["--cases", "layernorm"])) == ["layernorm fwd", "layernorm fwd+bwd"]


def test_peak_loops_report_positive_figures(bench: ModuleType) -> None:
    peak = bench.load_peak_module().measure_peak(threads=1, sizes=(1 << 20,))
    assert peak.fma_gflops > 0
    assert set(peak.copy_gbs) == {1 << 20}
    assert peak.copy_gbs[1 << 20] > 0


# numpy's own attention mask and im2col conv; fusegrad's backward cases under TinyJit (the jit replays a backward)
CHECKED = {"numpy": ["sdpa causal", "conv2d fwd"], "fusegrad": ["softmax fwd+bwd", "layernorm fwd+bwd", "chain 4M"]}


@pytest.mark.slow  # ~30 s: full-size inputs, torch's float64 conv
def test_the_cases_match_torch_float64(bench: ModuleType) -> None:
    inp = bench.make_inputs(np.random.default_rng(0))
    ref = bench.reference(inp, [name for names in CHECKED.values() for name in names])
    systems = {
        "numpy": bench.cases_numpy(inp, CHECKED["numpy"]),
        "fusegrad": bench.cases_fusegrad(inp, CHECKED["fusegrad"]),
    }
    for system, cases in systems.items():
        for name, fn in cases.items():
            for _ in range(3):  # TinyJit: run, capture, replay: the replay's result is checked
                got = bench.as_numpy(fn())
            scale = max(float(np.abs(r).max()) for r in ref[name])
            assert bench.max_abs_err(got, ref[name]) <= 1e-5 * scale, (system, name)


def _run_with(bench: ModuleType, seconds: dict[str, float]) -> object:
    """A bench run that timed matmul 1024 on these peers."""
    return bench.Run({peer: {"matmul 1024": bench.Timing(t, 1)} for peer, t in seconds.items()}, {}, {})


def test_target_verdicts(bench: ModuleType) -> None:
    peak = bench.load_peak_module().Peak(fma_gflops=100.0, copy_gbs={1: 10.0}, threads=2)
    flops = bench.CASES["matmul 1024"].flops
    at_peak = flops / 100e9  # seconds for 100 GFLOP/s: 100% of the FMA peak
    run = _run_with(bench, {"fusegrad": at_peak, "numpy": at_peak})
    assert bench.target("matmul 1024", run, peak) == (">=0.9x numpy, >=75% FMA peak", "met")
    run = _run_with(bench, {"fusegrad": at_peak / 0.7, "numpy": at_peak * 10})  # 70% of peak: short of 75%
    assert bench.target("matmul 1024", run, peak)[1] == "not met"
    run = _run_with(bench, {"fusegrad": at_peak, "numpy": at_peak * 0.5})  # numpy twice as fast
    assert bench.target("matmul 1024", run, peak)[1] == "not met"
    assert bench.target("matmul 1024", _run_with(bench, {"fusegrad": at_peak}), peak)[1] == "n/a"  # no numpy


def test_memory_bound_cases_are_held_to_the_copy_timed_beside_them(bench: ModuleType) -> None:
    peak = bench.load_peak_module().Peak(fma_gflops=100.0, copy_gbs={1: 1000.0, 2: 5.0}, threads=2)
    at_copy = bench.CASES["sum 16M"].bytes / 10e9  # seconds at 10 GB/s

    def run_with(seconds: dict[str, float]) -> object:
        return bench.Run({peer: {"sum 16M": bench.Timing(t, 1)} for peer, t in seconds.items()}, {}, {})

    run = run_with({"fusegrad": at_copy / 0.85, "torch": at_copy, "copy": at_copy})  # 85% of the copy beside it
    assert bench.peak_rate("sum 16M", run, peak) == pytest.approx(10.0)
    assert bench.target("sum 16M", run, peak)[1] == "not met", "slower than torch"
    run = run_with({"fusegrad": at_copy / 0.85, "torch": at_copy * 2, "copy": at_copy})
    assert bench.target("sum 16M", run, peak) == (">=1x torch, >=80% copy peak", "met")
    run = run_with({"fusegrad": at_copy / 0.75, "torch": at_copy * 2, "copy": at_copy})  # 75%: short of 80%
    assert bench.target("sum 16M", run, peak)[1] == "not met"
    # without the copy's turns: the measured peak's figure at the bench's working set (the smaller size)
    assert bench.peak_rate("sum 16M", run_with({"fusegrad": at_copy}), peak) == 1000.0


def test_the_copy_peer_copies_each_memory_bound_case(bench: ModuleType) -> None:
    cases = bench.cases_copy({}, ["sum 16M", "matmul 1024", "transpose 2048"])
    assert list(cases) == ["sum 16M"], "flop-bound cases and cases without a target get no copy"
    copy = cases["sum 16M"]
    dst, src = copy.args
    assert src.nbytes + dst.nbytes == bench.CASES["sum 16M"].bytes
    copy()
    assert np.array_equal(dst, src)
    with pytest.raises(ValueError, match="two float32 arrays of one shape"):
        copy.func(dst[:-1], src)


def test_heuristics_vs_beam_sums_the_cases_kernels(bench: ModuleType) -> None:
    from fusegrad.codegen.search import SearchResult

    def kernel(heuristic_s: float, best_s: float) -> SearchResult:
        return SearchResult("k", 2, (), best_s, (), heuristic_s, 1.0, 3, False)

    run = bench.Run({}, {}, {"sdpa": [kernel(3.0, 1.0), kernel(1.0, 1.0), kernel(float("nan"), 5.0)]})
    assert bench.heuristics_vs_beam(run, "sdpa") == 0.5  # (1 + 1) / (3 + 1); a failed heuristic is left out
    assert bench.heuristics_vs_beam(run, "chain 4M") is None


def test_a_turn_runs_short_kernels_for_its_minimum_time_and_long_ones_three_times(bench: ModuleType) -> None:
    """A 1 ms case runs back to back until TURN_S has passed (a short kernel is at its steady speed only after a few
    runs, as bench/peak.c's loops are); a case longer than TURN_S runs RUNS_PER_TURN times."""
    calls: list[int] = []

    def short() -> None:
        calls.append(1)
        time.sleep(0.001)

    got = bench.turn(short)
    assert len(got) == len(calls) >= bench.TURN_S / 0.002  # sleep(0.001) may take up to about twice that
    assert sum(got) >= bench.TURN_S
    assert len(bench.turn(lambda: time.sleep(bench.TURN_S))) == bench.RUNS_PER_TURN


def test_per_kernel_table_keeps_each_cases_kernels(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """Causal sdpa's kernels carry plain sdpa's names (a name is the kernel's shape, not its mask): the per-kernel
    table shows both cases' rows; a kernel repeated within one case is shown once."""
    from fusegrad.codegen.search import SearchResult

    def kernel(name: str, heuristic_s: float) -> SearchResult:
        return SearchResult(name, 2, (), heuristic_s, (), heuristic_s, 1.0, 3, False)

    plain, causal = [kernel("r_4_8_256_64", 2e-6), kernel("E_4_8_256", 3e-6)], [kernel("r_4_8_256_64", 4e-6)] * 2
    bench.print_kernels(bench.Run({}, {}, {"sdpa": plain, "sdpa causal": causal}))
    rows = [(line[:20].strip(), *line[20:].split()[:2]) for line in capsys.readouterr().out.splitlines()[3:]]
    assert rows == [("sdpa", "r_4_8_256_64", "2.0"), ("sdpa", "E_4_8_256", "3.0"),
                    ("sdpa causal", "r_4_8_256_64", "4.0")]  # fmt: skip
