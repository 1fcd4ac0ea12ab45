"""The differential fuzzer in every test run: a few hundred random programs on CPU and PYTHON, default opts and
NOOPT=1, must not crash or hang and must agree with each other and with numpy. Also tests the pool itself: a dying or
hanging child is a failing example, and the pool carries on.

Long runs: `python -m test.fuzz --minutes N`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fusegrad import Tensor
from test.fuzz.__main__ import load_programs, replay
from test.fuzz.pool import Pool, _numpy, _same, _tolerance, report
from test.fuzz.program import (
    OrderOverflowError,
    Program,
    fg_dtype,
    np_cast,
    order_decides_overflow,
    order_error_bound,
    run_numpy,
    run_numpy_bounded,
)
from test.fuzz.strategies import float_edges, int_edges, programs

EXAMPLES = 200  # ~40 s alone on 2 cores (5 programs/s), ~70 s beside another fuzz run
# CI runs a fixed set of programs (derandomize: a red run is reproducible and never a roll of the dice); new ones are
# explored by `python -m test.fuzz --minutes N`, whose findings become regression tests or recorded xfails here.


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    p = Pool(timeout=120)
    yield p
    p.close()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(program=programs())
def test_random_programs_agree(pool: Pool, program: Program) -> None:
    problems = pool.check(program)
    assert not problems, report(program, problems)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about 200-300 s at 4-5 programs/s
@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(program=programs(max_steps=8))
def test_longer_programs_agree(pool: Pool, program: Program) -> None:
    problems = pool.check(program)
    assert not problems, report(program, problems)


# *** fuzz findings, fixed: each on both devices (PYTHON checks every memory access, so it also catches a read out of
# bounds that CPU would do silently) ***

DEVICES = ("CPU", "PYTHON")


def _ints(values: list[int], device: str) -> Tensor:
    return Tensor(np.array(values, dtype=np.int32), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_clone_then_setitem_leaves_the_original_alone(device: str) -> None:
    # Tensor(ndarray) is a lazy COPY; the clone was CONTIGUOUS(COPY), which the scheduler stored in the COPY's buffer
    original = _ints([2, 2, 2, 7], device)
    copy = original.clone()
    copy[0:2] = 9
    assert copy.tolist() == [9, 9, 2, 7]
    assert original.tolist() == [2, 2, 2, 7]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda d: _ints([2, 2, 2, 7], d), id="copy"),
        pytest.param(lambda d: _ints([2, 2, 2, 7], d).clone(), id="clone"),
        pytest.param(lambda d: _ints([2, 2, 2, 7], "NPY").to(d), id="to"),
        pytest.param(lambda d: _ints([2, 2, 2, 7], d).realize(), id="realized"),
        pytest.param(lambda d: _ints([1, 1, 1, 6], d) + 1, id="lazy"),
        pytest.param(lambda d: _ints([7, 2, 2, 2], d).realize().flip(0), id="view"),
    ],
)
def test_clone_has_a_buffer_of_its_own(make: Any, device: str) -> None:
    """Writes to the clone or to the original, after realizing either or neither, never show in the other."""
    original = make(device)
    copy = original.clone()
    copy[0] = 1
    assert (copy.tolist(), original.tolist()) == ([1, 2, 2, 7], [2, 2, 2, 7])
    original[3] = 5
    assert (copy.tolist(), original.tolist()) == ([1, 2, 2, 7], [2, 2, 2, 5])
    second = make(device)
    third = second.clone().clone()
    second[1] = 0
    assert (third.tolist(), second.tolist()) == ([2, 2, 2, 7], [2, 0, 2, 7])


def test_a_sharded_clone_is_sharded_the_same_way() -> None:
    from fusegrad.schedule.multi import multi_buffer

    original = Tensor(np.arange(8, dtype=np.int32).reshape(4, 2)).shard(("CPU:0", "CPU:1"), axis=1)
    copy = original.clone()
    copy[0] = 9
    assert copy.tolist() == [[9, 9], [2, 3], [4, 5], [6, 7]]
    assert original.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert multi_buffer(copy.uop.base).placement.axis == 1


def test_clone_to_another_device_keeps_values_and_gradient() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.clone("PYTHON")
    assert y.device == "PYTHON"
    (y * y).sum().backward()
    assert x.grad is not None
    assert x.grad.tolist() == [2.0, 4.0, 6.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("index", "value"),
    [
        (np.s_[3:1], 5),  # stop before start
        (np.s_[2:2], 5),
        (np.s_[5:9], 5),  # past the end
        (np.s_[-1:-3], 5),
        (np.s_[1:3:-1], 5),
        (np.s_[2:2], np.zeros((0, 3), dtype=np.int32)),  # a value of the selection's shape
        (np.s_[2:2], np.array([7], dtype=np.int32)),  # broadcast to the empty selection
        (np.s_[:, 1:1], np.array([[7]], dtype=np.int32)),
        (np.s_[1, 2:2], 5),
        (np.s_[0:0, 1], np.array(7, dtype=np.int32)),
    ],
)
def test_setitem_of_an_empty_slice_changes_nothing(device: str, index: Any, value: Any) -> None:
    base = np.arange(12, dtype=np.int32).reshape(4, 3)
    expected = base.copy()
    expected[index] = value  # numpy: a no-op
    for t in (Tensor(base, device=device), Tensor(base, device=device).realize(), Tensor(base, device=device) + 0):
        t[index] = value if isinstance(value, int) else Tensor(value, device=device)
        np.testing.assert_equal(t.numpy(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_setitem_of_an_empty_slice_still_checks_the_value(device: str) -> None:
    t = _ints([1, 2, 3, 4], device)
    with pytest.raises(ValueError, match="setitem: cannot broadcast"):
        t[2:2] = _ints([7, 8], device)
    with pytest.raises(TypeError, match="setitem: value dtype"):
        t[2:2] = Tensor([1.5], device=device)
    view = t[1:1]
    assert view.assign(_ints([], device)) is view
    assert t.tolist() == [1, 2, 3, 4]


def _one_hot_take(x: np.ndarray, index: list[int]) -> np.ndarray:
    """x[index] with the defined meaning of an out-of-range index (outside [-n, n)): a row of zeros."""
    n, rows = x.shape[0], []
    for i in index:
        rows.append(x[i] if -n <= i < n else np.zeros_like(x[0]))
    return np.stack(rows)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_of_a_gather_with_an_out_of_range_index_stays_in_bounds(device: str) -> None:
    # the inner gather's index load sat inside the outer one's address ungated: C read idx[-2], PYTHON raised
    x = Tensor(np.arange(12, dtype=np.int32).reshape(3, 4), device=device)
    inner = x[_ints([-5, 1, -1], device)]
    assert inner[_ints([-5], device)].tolist() == [[0, 0, 0, 0]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("noopt", [0, 1])
@pytest.mark.parametrize(
    "indices",
    [[[2, 1, 0], [-4, 1, 0], [5]], [[-5, 1, -1], [2, -4], [-3]], [[1, 0, -1], [2, 1], [7]], [[1, 0, -1], [0, 7], [1]]],
)
def test_gathers_nested_three_deep_read_only_in_bounds(device: str, noopt: int, indices: list[list[int]]) -> None:
    from fusegrad.helpers import Context

    data = np.arange(12, dtype=np.int32).reshape(3, 4)  # small: the gathers fuse into one kernel
    expected = data
    with Context(NOOPT=noopt):
        t = Tensor(data, device=device)
        for index in indices:
            t, expected = t[_ints(index, device)], _one_hot_take(expected, index)
        np.testing.assert_equal(t.numpy(), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("source", "middle", "target"),
    [("uint32", "float64", "int8"), ("uint32", "float64", "int32"), ("uint32", "float64", "uint16"),
     ("int32", "float64", "int8"), ("int16", "float32", "uint8"), ("uint64", "float64", "int64")],
)  # fmt: skip
def test_an_int_through_a_float_into_an_int_converts_like_the_float(
    device: str, source: str, middle: str, target: str
) -> None:
    # the cast-chain fold made uint32 -> float64 -> int8 a wrapping uint32 -> int8 (-2 for 4294967294, not 0)
    values = np.array(int_edges(source), dtype=source)
    got = Tensor(values, device=device).cast(fg_dtype(middle)).cast(fg_dtype(target)).numpy()
    np.testing.assert_equal(got, np_cast(values.astype(middle), target))


F64_MAX = float(np.finfo(np.float64).max)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_float_sums_are_not_regrouped_to_combine_like_terms(device: str, dt: str) -> None:
    """(y + x) + x became y + x*2 for floats: x % 1.0 + x (y = -floor(x)) gave -inf at x = -max, and (1 + u) + u
    with u half an ulp of 1 gave 1 + 2u where each addition rounds back to 1 (fuzz run 3, program 7679)."""
    big, half_ulp = float(np.finfo(dt).max), float(np.finfo(dt).eps) / 2
    x = np.array([-big, -5.5, 3.25], dtype=dt)
    got = (Tensor(x, device=device) % 1.0 + Tensor(x, device=device)).numpy()
    np.testing.assert_array_equal(got, (x - np.floor(x)) + x)
    one, u = Tensor(np.ones(4, dtype=dt), device=device), Tensor(np.full(4, half_ulp, dtype=dt), device=device)
    np.testing.assert_array_equal(((one + u) + u).numpy(), np.ones(4, dtype=dt))
    np.testing.assert_array_equal((one + (u + u)).numpy(), np.full(4, 1 + 2 * half_ulp, dtype=dt))


@pytest.mark.parametrize("device", DEVICES)
def test_a_shift_by_a_huge_count_is_zero_without_building_the_number(device: str) -> None:
    """x << 70549176937 on a uint64: the value bounds computed hi << count as a Python int, 8.8 GB, and the worker was
    killed for memory (fuzz, seed 4242). A count past the width gives the defined 0."""
    x = Tensor(np.array([5, 2**63], dtype=np.uint64), device=device)
    np.testing.assert_array_equal((x << 70549176937).numpy(), [0, 0])
    np.testing.assert_array_equal((x >> 70549176937).numpy(), [0, 0])
    np.testing.assert_array_equal((x << 1).numpy(), [10, 0])


# a 32-minute fuzz run's finding (program 5493, seed 5005), int64 (17, 8): see the cancelling program below
CANCELLING_INT64 = (
    "9223372036854775807 -218564 200 -7 -1087 107 2147483648 -2147483648 9672725 190 -36564817707648 2147483647 "
    "-64235486789 255 -9223372036854775808 2147483647 -250497962 65537 -1 -1 -9223372036854775807 "
    "4611686018427387904 -4619888405200 -1066590 69536 -87404 170767961369930208 -22821900428212 126 "
    "-41310480348005608 3743582 9223372036854775807 39916801 9223372036854775807 32768 61578395591 450350 1000000 "
    "-2147483648 -7 -1 1401615 -7 2147483648 -20867 -2147483648 2147483648 2147483647 54 2147483647 "
    "-9223372036854775807 1 2 -21387 65537 1615 -9223372036854775807 2368 -9223372036854775808 -9223372036854775807 "
    "127 2147483647 9223372036854775806 20414499 597 256 -218791176298 128 -355687428096000 -9223372036854775808 "
    "4844289 2838 26861265 -21362015 -839140665634 4294967295 0 255 -1 9223372036854775806 14 255 128 256 "
    "-116794659192 -1 -129 -42488527 837 255 23016738538074 3 0 3 4677870 128 127 100 -1486154343043 1 848 "
    "-9223372036854775807 3 195191 -192714 128330 65537 -391 2147483647 -7 -963 1 2 32768 127 8440232 1 128 100 "
    "9223372036854775806 -202 37917716744 255 -2147483648 4294967295 3831 -17592186044416 -9388 -1735505 "
    "-9223372036854775808 9223372036854775807 127 256 9223372036854775807 2147483648 -2128387630 "
)


def test_the_recorded_findings_agree_on_every_configuration(pool: Pool) -> None:
    """The fuzz programs behind the fixes above, run as the fuzzer runs them (CPU and PYTHON, NOOPT=0/1, numpy)."""
    grid = {"dtype": "int32", "shape": [3, 4], "values": list(range(12))}
    row = {"dtype": "uint8", "shape": [4], "values": [1, 2, 3, 4]}
    seven = {"value": 5, "tensor": [7], "shape": [1]}  # a tensor value, broadcast
    big = {"dtype": "uint32", "shape": [32], "values": [0] * 31 + [4294967294]}
    edge = {"dtype": "float64", "shape": [1, 4], "values": [-F64_MAX, -2.8e-85, 65535.5, F64_MAX]}
    overflowing = {"dtype": "float64", "shape": [2, 2], "values": [math.inf, -F64_MAX, -F64_MAX, -F64_MAX]}
    cancelling = {"dtype": "int64", "shape": [17, 8], "values": [int(v) for v in CANCELLING_INT64.split()]}
    findings = [
        {"inputs": [grid], "steps": [["gather", [0], {"index": [-5, 1, -1]}], ["gather", [1], {"index": [-5]}]]},
        {"inputs": [row], "steps": [["setitem", [0], {"start": 3, "stop": 1, "value": 5}]]},
        {"inputs": [row], "steps": [["setitem", [0], {"start": 2, "stop": 2, **seven}]]},
        {"inputs": [row], "steps": [["setitem", [0], {"start": 0, "stop": 2, "value": 9}], ["add", [0, 1], {}]]},
        {"inputs": [big], "steps": [["cast", [0], {"dtype": "float64"}], ["cast", [1], {"dtype": "int8"}]]},
        {"inputs": [edge], "steps": [["mod", [0], {"const": 1.0}], ["add", [1, 0], {}]]},
        # numpy's BLAS gives -inf at [0, 1] (a fused multiply-add keeps max*max finite), fusegrad inf + -inf = NaN
        {"inputs": [overflowing], "steps": [["matmul", [0], {}], ["cumsum", [1], {"axis": 0}]]},
        # +-9.2e18 cancelling in a float32 row sum (abs of int64 min stays negative): CPU's SIMD order and numpy's
        # pairwise one differ by 4e9 in a result of 3.6e13, far inside the terms' rounding (5.5e11 an ulp)
        {
            "inputs": [cancelling],
            "steps": [
                ["abs", [0], {}],
                ["reshape", [1], {"shape": [8, 17]}],
                ["cast", [2], {"dtype": "float32"}],
                ["gather", [3], {"index": [2, 5, -7, -8]}],
                ["add", [4], {"const": -1.401298464324817e-45}],
                ["sum", [5], {"axis": 1}],
            ],
        },
    ]
    for program in findings:
        problems = pool.check(program)
        assert not problems, report(program, problems)


# *** the pool ***


def test_a_dying_child_is_a_problem_and_is_restarted(pool: Pool) -> None:
    results = pool.run({"abort": True})
    assert all("SIGABRT" in r["crash"] for r in results)
    program = {"inputs": [{"dtype": "int32", "shape": [2], "values": [7, -7]}], "steps": [["mod", [0], {"const": 0}]]}
    assert pool.check(program) == []


def test_the_hang_limit_stretches_with_the_load_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    p = Pool(timeout=10)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    for load, limit in ((0.3, 10), (2.0, 10), (5.0, 25), (40.0, 40)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert p.hang_limit() == limit


def test_a_hanging_child_is_a_problem_and_is_restarted() -> None:
    p = Pool(timeout=0.5)
    try:
        big = {"inputs": [{"dtype": "float32", "shape": [1], "values": [1.0]}], "steps": [["expand", [0], {"n": 3}]]}
        p.run(big)  # start the children (imports take longer than the limit)
        slow = p.run({"sleep": 30})  # past the limit however loaded the machine (at most 4 x 0.5 s)
        assert all("hang" in r for r in slow)
        assert all(c.proc is None for c in p.children)
    finally:
        p.close()


def test_crash_reports_show_the_kernel_source() -> None:
    p = Pool(timeout=60)
    try:
        program = {
            "inputs": [{"dtype": "int32", "shape": [2], "values": [1, 2]}],
            "steps": [["add", [0], {"const": 1}]],
        }
        assert p.check(program) == []
        assert "CRASH_REPORT: running" in p.children[0].stderr_tail()
    finally:
        p.close()


def test_replay_reads_json_programs_and_fuzz_logs(
    pool: Pool, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    program = {"inputs": [{"dtype": "int8", "shape": [2], "values": [5, -7]}], "steps": [["neg", [0], {}]]}
    (one := tmp_path / "one.json").write_text(json.dumps(program))
    log = tmp_path / "fuzz.log"
    log.write_text(f"=== failure 1 (program 3)\n{report(program, ['CPU: crash'])}\n200 programs, 1 failures\n")
    assert load_programs(one) == load_programs(log) == [program]
    assert replay(pool, [one, log]) == 0
    assert capsys.readouterr().out.count("agrees (compared, checked against numpy)") == 2
    (empty := tmp_path / "empty.log").write_text("200 programs, 0 failures\n")
    with pytest.raises(ValueError, match="no JSON program"):
        load_programs(empty)


def test_report_names_the_problem_and_the_program() -> None:
    program = {"inputs": [{"dtype": "int8", "shape": [1], "values": [5]}], "steps": [["neg", [0], {}]]}
    text = report(program, ["CPU: crash: the child died (SIGSEGV)"])
    assert "SIGSEGV" in text
    assert "v1 = neg(v0)" in text


# *** comparing results ***


def test_ints_must_match_bit_for_bit() -> None:
    assert _same(np.array([1, 2], dtype=np.int32), np.array([1, 2], dtype=np.int32), None)
    assert not _same(np.array([1, 2], dtype=np.int32), np.array([1, 3], dtype=np.int32), 1.0)
    assert not _same(np.array([1], dtype=np.int32), np.array([1], dtype=np.int64), None)


def test_floats_compare_nan_aware_and_within_tolerance() -> None:
    a = np.array([1.0, math.nan, -0.0, math.inf], dtype=np.float32)
    assert _same(a, np.array([1.0, math.nan, 0.0, math.inf], dtype=np.float32), None)
    assert not _same(a, np.array([1.0, 0.0, 0.0, math.inf], dtype=np.float32), None)
    assert not _same(a, np.array([1.00001, math.nan, 0.0, math.inf], dtype=np.float32), None)
    assert _same(a, np.array([1.00001, math.nan, 0.0, math.inf], dtype=np.float32), 1e-4)


def test_inexact_float_steps_relax_the_comparison() -> None:
    inputs = [{"dtype": "float32", "shape": [2], "values": [1.0, 2.0]}]
    exact = {"inputs": inputs, "steps": [["add", [0], {"const": 1.0}]]}
    libm = {"inputs": inputs, "steps": [["sin", [0], {}]]}
    libm_then_cast = {"inputs": inputs, "steps": [["sin", [0], {}], ["cast", [1], {"dtype": "int32"}]]}
    assert _tolerance(exact, ["float32", "float32"]) is None
    assert _tolerance(libm, ["float32", "float32"]) == 1e-4
    assert _tolerance(libm_then_cast, ["float32", "float32", "int32"]) == math.inf


def test_numpy_reference_uses_the_defined_semantics() -> None:
    inputs = [
        {"dtype": "int32", "shape": [3], "values": [7, -(2**31), 5]},
        {"dtype": "int32", "shape": [3], "values": [0, -1, 2]},
    ]
    program = {"inputs": inputs, "steps": [["floordiv", [0, 1], {}]]}
    out = run_numpy(program, ["int32", "int32", "int32"])
    assert out is not None
    assert out.tolist() == [0, -(2**31), 2]


def test_edge_values_cover_each_types_limits() -> None:
    assert {-128, 127, 0, -1, 1} <= set(int_edges("int8"))
    assert {0, 2**64 - 1, 2**31} <= set(int_edges("uint64"))
    f32 = float_edges("float32")
    assert any(math.isnan(v) for v in f32)
    assert -0.0 in f32
    assert any(v != 0 and abs(v) < 1e-38 for v in f32)  # a denormal


def test_numpy_is_no_reference_where_the_order_decides_an_overflow() -> None:
    """Where a reduction's partial sums (or products) may overflow in one order and not another, numpy's result is no
    reference (its BLAS matmul fuses multiply-adds, its sum is pairwise, fusegrad's CPU sums in SIMD lanes); inf and NaN
    inputs alone give the same result in every order and are still compared."""
    m = F64_MAX
    assert order_decides_overflow("matmul", np.array([[math.inf, -m], [-m, -m]]), None, "float64")
    assert order_decides_overflow("sum", np.array([m, m, -m]), None, "float64")
    assert order_decides_overflow("cumsum", np.array([[m, 1.0], [m, 1.0]]), 0, "float64")
    assert order_decides_overflow("prod", np.array([1e300, 1e300, 1e-300]), None, "float64")
    assert order_decides_overflow("prod", np.array([1e-200, 1e-200, 1e300]), None, "float64")  # 0 * 1e300 or 1e-100
    assert not order_decides_overflow("sum", np.array([m, math.inf, -math.inf, math.nan]), None, "float64")
    assert order_decides_overflow("sum", np.array([3e38, 3e38], dtype=np.float32), None, "float32")
    assert not order_decides_overflow("sum", np.array([3e38, 3e38], dtype=np.float32), None, "float64")
    assert not order_decides_overflow("cumsum", np.array([[m, 1.0], [m, 1.0]]), 1, "float64")
    assert not order_decides_overflow("prod", np.array([1e-200, 1e-200, 0.5]), None, "float64")  # tiny either way
    assert not order_decides_overflow("sum", np.array([2**62, 2**62], dtype=np.int64), None, "int64")  # ints wrap
    program = {
        "inputs": [{"dtype": "float64", "shape": [3], "values": [m, m, -m]}],
        "steps": [["sum", [0], {"axis": None}]],
    }
    with pytest.raises(OrderOverflowError):
        run_numpy(program, ["float64", "float64"])


def test_a_sums_rounding_bound_comes_from_its_terms_not_its_result() -> None:
    """Large terms cancelling leave a small result whose error is set by the terms: two summation orders may differ by
    (n - 1) eps times the sum of magnitudes, far beyond a relative tolerance of the result. The bound carries through
    a constant added or multiplied, not through other steps; a wrong value outside it still fails."""
    terms = np.array([[9.2e18, -9.2e18, 3.6e13, 1.0]], dtype=np.float32)
    bound = order_error_bound("sum", terms, 1, "float32")
    assert bound is not None
    assert bound.shape == (1,)
    assert bound[0] == pytest.approx(3 * 1.84e19 * 2.0**-23, rel=1e-3)
    got, other = np.array([3.6284135e13], np.float32), np.array([3.6288179e13], np.float32)  # 4e9 apart
    assert not _same(got, other, 1e-4)
    assert _same(got, other, 1e-4, bound=bound)
    assert not _same(got, np.array([9e12], np.float32), 1e-4, bound=bound)  # 2.7e13 off: beyond 2 * 6.6e12
    assert order_error_bound("sum", np.array([[7, -7, 1]], np.int32), 1, "int32") is None  # ints are exact
    assert order_error_bound("max", terms, 1, "float32") is None  # order-free
    program = {"inputs": [{"dtype": "float32", "shape": [1, 4], "values": terms.tolist()[0]}], "steps": []}
    steps_and_scale = [([["add", [1], {"const": 5.0}]], 1.0), ([["mul", [1], {"const": -2.0}]], 2.0),
                       ([["sqrt", [1], {}]], None)]  # fmt: skip
    for after, scale in steps_and_scale:
        program["steps"] = [["sum", [0], {"axis": 1}], *[[op, [1], p] for op, _, p in after]]
        _, carried = run_numpy_bounded(program, ["float32"] * (1 + len(program["steps"])))
        assert (carried is None) if scale is None else carried == pytest.approx(bound * scale)


def test_the_bound_carries_through_sums_products_wheres_and_moves_of_bounded_values() -> None:
    """A cumsum whose terms cancel, then multiplied by a tensor, expanded and multiplied again: every position after
    the large terms depends on the order, so the bound must reach the result; positions before them stay tight."""
    m = 1e300
    values = [1.0, 2.0, m, 0.5, -m, 3.0]
    program: dict[str, Any] = {"inputs": [{"dtype": "float64", "shape": [6], "values": values}],
               "steps": [["cumsum", [0], {"axis": 0}], ["mul", [1, 0], {}], ["expand", [2], {"n": 2}],
                         ["add", [3, 0], {}], ["flip", [4], {"axis": [1]}]]}  # fmt: skip
    _, bound = run_numpy_bounded(program, ["float64"] * 6)
    assert bound is not None
    assert bound.shape == (2, 6)
    eps = np.finfo(np.float64).eps
    assert bound[0, 5] == pytest.approx(5 * 1 * eps * 1.0, rel=1e-6)  # flipped: position 0's cumsum bound times |1.0|
    assert np.all(bound[:, :2] > 5 * eps * 2 * m * 0.5)  # the cancelled positions: m-sized bounds
    exact, approx = np.array([[1, 2, 3, 4, 5, 6.0]] * 2), np.array([[1, 2, 3, 4, 5 + 1e-9, 6.0]] * 2)
    assert not _same(exact, approx, 1e-12, bound=bound)  # a position before the large terms stays exact
    program["steps"].append(["where", [5, 5, 5], {}])
    assert run_numpy_bounded(program, ["float64"] * 7)[1] is not None


def test_an_order_dependent_overflow_still_bounds_what_cancelled_terms_absorbed() -> None:
    """+-max float64 in a cumsum: the partial sums overflow in some orders (no numpy reference), and the finite
    positions after them differ between orders by up to the absorbed terms: the configurations compare within the
    bound (a fuzz report of session 6: CPU 0.5 vs PYTHON 0.0 after -1.8e308 + 1.8e308)."""
    big = np.finfo(np.float64).max
    program = {"inputs": [{"dtype": "float64", "shape": [6], "values": [1.0, big, 0.5, -big, 2.0, 3.0]}],
               "steps": [["cumsum", [0], {"axis": 0}], ["mul", [1, 0], {}]]}  # fmt: skip
    expected, overflow_order, bound = _numpy(program, ["float64"] * 3)
    assert expected is None
    assert overflow_order
    assert bound is not None
    assert bound.shape == (6,)
    cpu, python = np.array([1.0, np.inf, np.inf, -np.inf, 3.5 * 2, 6.5 * 3]), np.array([1, np.inf, np.inf, 0, 4, 15.0])
    assert not _same(cpu, python, 1e-9, finite_only=True)
    assert _same(cpu, python, 1e-9, finite_only=True, bound=bound)
    assert not _same(np.array([1.5]), np.array([1.0]), 1e-9, finite_only=True, bound=bound[:1])  # before them: tight


def test_an_order_dependent_overflow_compares_configurations_where_finite() -> None:
    a = np.array([1.0, math.inf, math.nan, 2.0])
    assert _same(a, np.array([1.0, math.nan, -math.inf, 2.0]), 1e-9, finite_only=True)
    assert not _same(a, np.array([1.0, math.nan, -math.inf, 2.5]), 1e-9, finite_only=True)
    assert not _same(a, np.array([1.0, math.nan, -math.inf, 2.0]), 1e-9)
