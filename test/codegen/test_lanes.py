"""codegen/opt.py LANES (lane_opts): a split full sum keeps several vector accumulators per chunk, reading
consecutive elements into interleaved partials (codegen/vectorize.py makes them vectors), then combines them; the C
renderer still runs the chunks on threads. A row kernel's sums take them too (row_lane_opts: a layernorm's mean and
variance, each its own vectors). The sum's order changes, so results are checked against float64."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.codegen import to_program
from fusegrad.codegen.opt import LANE_VECTORS, ROW_LANE_STEPS, Opt, OptOps, hand_coded_opts
from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import Case, check, data, full_sum, glob, loop, red, run, with_opts

DEVICES = ["CPU", "PYTHON"]
LANES = LANE_VECTORS * 8  # float32 lanes of 32-byte vectors (test/codegen/conftest.py)


def positive_sum(size: int) -> Case:
    """A sum of values in [0, 1): every partial grows, so its rounding error does too (no cancellation)."""
    ast, _, _ = full_sum(size, dtypes.float32)
    a = np.random.default_rng(0).random(size, dtype=np.float32)
    return ast, [a], a.astype(np.float64).sum().reshape(1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.int32], ids=str)
@pytest.mark.parametrize(
    "opts",
    [(Opt(OptOps.GROUP, 0, 4), Opt(OptOps.LANES, 0, 32)), (Opt(OptOps.LANES, 0, 64),), (Opt(OptOps.LANES, 0, 2),)],
    ids=["group then lanes", "lanes", "two lanes"],
)
def test_lanes_sum_matches_numpy(opts: tuple[Opt, ...], dt: DType, device: str) -> None:
    check(full_sum(1024, dt), dt, device, opts)


@pytest.mark.parametrize("device", DEVICES)
def test_lanes_of_a_product_sum_and_a_product(device: str) -> None:
    r0 = red(256, 0)
    x, y = glob(1, 256, dtypes.float32).index(r0).load(), glob(2, 256, dtypes.float32).index(r0).load()
    a, b = data((256,), dtypes.float32), data((256,), dtypes.float32, 1) * 0.1 + 1
    out = glob(0, 1, dtypes.float32).index(UOp.const(dtypes.index, 0))
    dot = (UOp.sink(out.store((x * y).reduce(r0, arg=Ops.ADD))), [a, b], np.array([a.astype(np.float64) @ b]))
    check(dot, dtypes.float32, device, (Opt(OptOps.LANES, 0, 32),))
    prod = (UOp.sink(out.store(y.reduce(r0, arg=Ops.MUL))), [a, b], np.array([b.astype(np.float64).prod()]))
    check(prod, dtypes.float32, device, (Opt(OptOps.LANES, 0, 16),))


def sum_2d(rows: int, cols: int) -> Case:
    r0, r1 = red(rows, 0), red(cols, 1)
    value = glob(1, rows * cols, dtypes.float32).index(r0 * cols + r1).load().reduce(r0, r1, arg=Ops.ADD)
    a = data((rows, cols), dtypes.float32)
    out = glob(0, 1, dtypes.float32).index(UOp.const(dtypes.index, 0))
    return UOp.sink(out.store(value)), [a], a.astype(np.float64).sum().reshape(1)


def test_heuristic_splits_a_full_reduce_over_several_loops_by_its_whole_size() -> None:
    # (4096, 4096): no loop of 65536 alone, yet as big a sum as 16M floats (it ran on one thread); lanes go along
    # the rows, the innermost loop
    ast = sum_2d(4096, 4096)[0]
    assert hand_coded_opts(ast) == [Opt(OptOps.GROUP, 0, 256), Opt(OptOps.LANES, 1, LANES)]  # chunks of 65536
    src = to_program(ast, ClangRenderer()).src
    assert src.count("#pragma omp parallel for") == 1
    assert re.search(rf"float8 acc\d+\[{LANE_VECTORS}\];", src)
    assert hand_coded_opts(sum_2d(128, 1000)[0]) == [Opt(OptOps.GROUP, 0, 16)]  # rows of no whole step of lanes
    assert hand_coded_opts(sum_2d(16, 1024)[0]) == []  # 16384 elements: too small for threads


def test_heuristic_sums_a_big_full_reduce_in_lanes() -> None:
    assert hand_coded_opts(full_sum(1 << 20, dtypes.float32)[0]) == [Opt(OptOps.GROUP, 0, 16), Opt(OptOps.LANES, 0, 32)]
    # float64: as many vectors of half the lanes
    assert hand_coded_opts(full_sum(1 << 20, dtypes.float64)[0])[1:] == [Opt(OptOps.LANES, 0, 16)]
    # half and int sums have no vector accumulators; a chunk of 65537 no whole step of lanes
    assert hand_coded_opts(full_sum(1 << 20, dtypes.float16)[0]) == [Opt(OptOps.GROUP, 0, 16)]
    assert hand_coded_opts(full_sum(1 << 20, dtypes.int32)[0]) == [Opt(OptOps.GROUP, 0, 16)]
    assert hand_coded_opts(full_sum(16 * 65537, dtypes.float32)[0]) == [Opt(OptOps.GROUP, 0, 16)]


def test_a_big_full_sum_takes_more_chunks() -> None:
    # chunks of GROUP_CHUNK elements, 16 to 256 of them: a lane adds fewer elements in order (a float32 sum of 16M
    # normals: rms error 8.7e-3 -> 3.2e-3 against float64)
    for size, parts in ((1 << 20, 16), (1 << 22, 64), (1 << 24, 256), (1 << 26, 256), (3 << 22, 128)):
        assert hand_coded_opts(full_sum(size, dtypes.float32)[0])[0] == Opt(OptOps.GROUP, 0, parts), size
    ast = full_sum(1 << 24, dtypes.float32)[0]
    many = with_opts(ast, tuple(hand_coded_opts(ast)))
    few = with_opts(ast, (Opt(OptOps.GROUP, 0, 16), Opt(OptOps.LANES, 0, LANES)))
    rng, errors = np.random.default_rng(0), []
    for _ in range(4):
        a = rng.standard_normal(1 << 24, dtype=np.float32)
        exact = a.astype(np.float64).sum()
        errors.append([float(run(k, [a], 1, dtypes.float32, "CPU")[0]) - exact for k in (many, few)])
    rms = np.sqrt(np.mean(np.square(errors), axis=0))
    assert rms[0] < 0.6 * rms[1], rms


def test_lanes_kernel_keeps_vector_accumulators_on_threads() -> None:
    # the 16M-float sum's form: each of 16 chunks (one `parallel for`) adds whole vectors into LANE_VECTORS
    # accumulators, unrolled so they stay in registers, instead of one `omp simd reduction` scalar
    ast = full_sum(1 << 20, dtypes.float32)[0]
    src = to_program(ast, ClangRenderer()).src
    assert src.count("#pragma omp parallel for") == 1
    assert re.search(rf"float8 (acc\d+)\[{LANE_VECTORS}\];", src)
    assert f"#pragma GCC unroll {LANE_VECTORS}" in src
    assert re.search(r"acc\d+\[ridx\d+\] = \(acc\d+\[ridx\d+\]\+val0\);", src)


def test_lanes_sum_has_less_error_than_one_accumulator() -> None:
    # PYTHON runs the linear program in order (the C's `omp simd` picks its own): each of 2 chunks of 65536 positive
    # floats summed by one accumulator, against LANES's 32 per chunk of 2048 each, against float64
    ast, inputs, expected = positive_sum(1 << 17)
    group = (Opt(OptOps.GROUP, 0, 2),)
    errors = [abs(float(run(with_opts(ast, opts), inputs, 1, dtypes.float32, "PYTHON")[0]) - expected[0])
              for opts in (group, (*group, Opt(OptOps.LANES, 0, 32)))]  # fmt: skip
    assert errors[1] < errors[0] / 4, errors


def normalized_rows(rows: int, width: int, exp: bool = False) -> Case:
    """out (rows, width) = (x - mean) / sqrt(var + 1e-5) over each row of x, mean and var summed over the row in one
    kernel (a layernorm's forward; the variance's sum holds the mean's); with `exp`, exp(x - mean) / the sum of it (a
    softmax of x less its mean: a sum whose terms call exp2)."""
    r, c, k1, k2 = loop(rows, 0), loop(width, 1), red(width, 2), red(width, 3)
    x = glob(1, rows * width, dtypes.float32)
    mean = x.index(r * width + k1).load().reduce(k1, arg=Ops.ADD) * (1 / width)
    a = data((rows, width), dtypes.float32)
    centred = a.astype(np.float64) - a.astype(np.float64).mean(-1, keepdims=True)
    if exp:
        total = ((x.index(r * width + k2).load() - mean) * math.log2(math.e)).exp2().reduce(k2, arg=Ops.ADD)
        value = ((x.index(r * width + c).load() - mean) * math.log2(math.e)).exp2() * total.reciprocal()
        expected = np.exp(centred) / np.exp(centred).sum(-1, keepdims=True)
    else:
        d = x.index(r * width + k2).load() - mean
        var = (d * d).reduce(k2, arg=Ops.ADD) * (1 / width)
        value = (x.index(r * width + c).load() - mean) * (var + 1e-5).sqrt().reciprocal()
        expected = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)
    ast = UOp.sink(glob(0, rows * width, dtypes.float32).index(r * width + c).store(value))
    return ast, [a], expected.ravel()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("case", "opts"),
    [("sum 2d", (Opt(OptOps.GROUP, 0, 3), Opt(OptOps.LANES, 1, 32))), ("sum 2d", (Opt(OptOps.LANES, 1, 16),)),
     ("sum 2d", (Opt(OptOps.LANES, 0, 2),)),
     # a row's variance holds its mean, a reduce closed before its loop: LANES of either or both
     ("rows", (Opt(OptOps.LANES, 2, 32), Opt(OptOps.LANES, 3, 32))), ("rows", (Opt(OptOps.LANES, 3, 16),)),
     ("rows", (Opt(OptOps.LANES, 2, 8),))],
    ids=["group rows then lanes", "lanes of columns", "lanes of rows", "mean and variance", "variance", "mean"],
)  # fmt: skip
def test_lanes_of_sums_over_two_loops(case: str, opts: tuple[Opt, ...], device: str) -> None:
    """A sum over two loops (6, 64) and a layernorm's two sums over rows of 128 (normalized_rows)."""
    check(sum_2d(6, 64) if case == "sum 2d" else normalized_rows(6, 128), dtypes.float32, device, opts)


def test_heuristic_sums_a_rows_mean_and_variance_in_lanes() -> None:
    ast = normalized_rows(64, 1024)[0]
    assert hand_coded_opts(ast) == [Opt(OptOps.LANES, 2, LANES), Opt(OptOps.LANES, 3, LANES)]
    src = to_program(ast, ClangRenderer()).src
    # each sum its own vector accumulators, in turn, over the row
    assert len(re.findall(rf"float8 acc\d+\[{LANE_VECTORS}\];", src)) == 2
    assert "simd reduction(+:acc" in src  # only the partials' combination: 32 per sum, not 1024
    check(normalized_rows(4, 128), dtypes.float32, "CPU", None)
    # a row of fewer than ROW_LANE_STEPS steps of lanes keeps its one accumulator
    assert hand_coded_opts(normalized_rows(4, (ROW_LANE_STEPS - 1) * LANES)[0]) == []
    # a sum of exp is bound by the exp: its loop and its row buffer (KEEP) stay as they were; the mean's sum takes lanes
    keep = Opt(OptOps.KEEP, 3, 1024)
    assert hand_coded_opts(normalized_rows(64, 1024, exp=True)[0]) == [keep, Opt(OptOps.LANES, 2, LANES)]
    check(normalized_rows(4, 128, exp=True), dtypes.float32, "CPU", None)


def test_softmax_gradient_sums_its_kept_row_in_lanes() -> None:
    # softmax forward and backward merged in one kernel: the row max takes vector lanes; the exp sum fills the row
    # buffer (KEEP) and keeps its one accumulator (bound by the exp; 32-byte vectors here, conftest: no inline vector
    # exp); the gradient's sum of g * softmax reads that buffer along its loop, so it takes lanes (a read of a row
    # buffer is data, not an earlier opt's partials)
    rng = np.random.default_rng(0)
    a, g = rng.standard_normal((8, 1024)).astype(np.float32), rng.standard_normal((8, 1024)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    out = x.softmax(-1)
    (out * Tensor(g)).sum().backward()
    (kernel,) = [ei.ast for ei in Tensor.schedule(out, x.grad) if ei.ast.op is Ops.SINK]
    opts = hand_coded_opts(graph_rewrite(kernel, sym))
    keep = [o for o in opts if o.op is OptOps.KEEP]
    assert len(keep) == 1
    assert [o.op for o in opts] == [OptOps.KEEP, OptOps.LANES, OptOps.LANES]
    assert all(o.axis != keep[0].axis for o in opts[1:])
    Tensor.realize(out, x.grad)
    e = np.exp(a.astype(np.float64) - a.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), p * (g - (p * g).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(
    ("ast", "opts", "match"),
    [(full_sum(96, dtypes.float32)[0], (Opt(OptOps.LANES, 0, 64),), "LANES by 64 of axis 0: got size 96"),
     (full_sum(96, dtypes.float32)[0], (Opt(OptOps.GROUP, 0, 2), Opt(OptOps.LANES, 2, 2)),
      "LANES of axis 2: got a reduce of a reduce or of partials, expected of data"),
     (UOp.sink(glob(0, 4, dtypes.float32).index(loop(4, 0)).store(
         glob(1, 32, dtypes.float32).index(loop(4, 0) * 8 + red(8, 1)).load().reduce(red(8, 1), arg=Ops.ADD))),
      (Opt(OptOps.LANES, 0, 2),), "LANES needs a REDUCE axis: got axis 0 of LOOP")],
)  # fmt: skip
def test_bad_lanes_are_errors(ast: UOp, opts: tuple[Opt, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        to_program(with_opts(ast, opts), ClangRenderer())
