"""Explicit SIMD (fusegrad/codegen/vectorize.py): the innermost upcast loop as vector values on the CPU renderer,
bit for bit the plain kernel on PYTHON; kernels it can't express stay scalar and right."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import kernel_names, to_program, vectorize
from fusegrad.codegen.opt import Opt, OptOps, apply_opts, hand_coded_opts
from fusegrad.codegen.vectorize import vector_offset, vectorize_upcast
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import Context
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import check, conv1d, loop, matmul, matmul_transposed, max_columns, run, with_opts

UPCAST, SWAP, PACK = OptOps.UPCAST, OptOps.SWAP, OptOps.PACK


@pytest.fixture(autouse=True)
def _fresh_kernel_names() -> None:
    kernel_names.clear()


def source(ast: UOp, opts: tuple[Opt, ...]) -> str:
    src = to_program(with_opts(ast, opts), ClangRenderer()).src
    return src[src.index("void") :]


TILES = [
    (Opt(UPCAST, 1, 8),),  # one vector
    (Opt(UPCAST, 1, 32),),  # a loop of 4 vectors
    (Opt(UPCAST, 0, 3), Opt(UPCAST, 1, 16)),  # 3 rows x 2 vectors
    (Opt(UPCAST, 0, 2), Opt(UPCAST, 1, 8), Opt(SWAP, 0, 1), Opt(PACK, 1, 2)),  # a packed panel of b
]


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=str)
@pytest.mark.parametrize("opts", TILES, ids=lambda opts: "-".join(f"{o.op.name}{o.axis}.{o.arg}" for o in opts))
def test_vector_matmul_is_bit_for_bit(opts: tuple[Opt, ...], dt: DType) -> None:
    """Each lane does its iteration's multiply and add in order (no FMA contraction): the plain kernel's bits."""
    check(matmul(6, 7, 64, dt), dt, "CPU", opts, exact=True)
    width = 8 if dt == dtypes.float32 else 4
    assert f"(*(const {dt.name}{width}_u*)&" in source(matmul(6, 7, 64, dt)[0], opts)


def test_vector_accumulators_and_stores() -> None:
    body = source(matmul(6, 7, 64, dtypes.float32)[0], (Opt(UPCAST, 0, 3), Opt(UPCAST, 1, 16)))
    assert "float8 acc0[6];" in body  # 3 rows x 2 vectors
    assert "(*(float8_u*)&data0[" in body  # the result written as vectors
    assert "((float8){val" in body  # a's value broadcast to every lane


@pytest.mark.parametrize(
    ("name", "ast", "opts"),
    [("max of float64: lane masks are float32's", max_columns(7, 16, dtypes.float64)[0], (Opt(UPCAST, 0, 4),)),
     ("a gated load", conv1d(2, 3, 4, 8, dtypes.float32)[0], (Opt(UPCAST, 2, 8),)),
     ("strided loads", matmul_transposed(4, 3, 16, dtypes.float32)[0], (Opt(UPCAST, 1, 8),)),
     ("ints", matmul(4, 3, 16, dtypes.int32)[0], (Opt(UPCAST, 1, 8),)),
     ("not a multiple of a vector", matmul(4, 3, 12, dtypes.float32)[0], (Opt(UPCAST, 1, 12),))],
)  # fmt: skip
def test_what_it_cannot_express_stays_scalar(name: str, ast: UOp, opts: tuple[Opt, ...]) -> None:
    sink = apply_opts(graph_rewrite(ast, sym), opts)
    assert vectorize_upcast(sink) is sink, name
    assert "typedef" not in to_program(with_opts(ast, opts), ClangRenderer()).src


@pytest.mark.parametrize(
    ("case", "opts"),
    [(conv1d(2, 3, 4, 8, dtypes.float32), (Opt(UPCAST, 2, 8),)),
     (matmul_transposed(4, 3, 16, dtypes.float32), (Opt(UPCAST, 1, 8),))],
    ids=["conv", "transposed"],
)  # fmt: skip
def test_scalar_fallbacks_still_compute_right(
    case: tuple[UOp, list[np.ndarray], np.ndarray], opts: tuple[Opt, ...]
) -> None:
    check(case, dtypes.float32, "CPU", opts, exact=True)


def test_a_float32_max_keeps_vector_accumulators_and_its_nans() -> None:
    """On the CPU (lane masks) a float32 max reduce is a vector max per accumulator: a compare and a select that keep
    the scalar form's order (NaN wins, whichever side it is on), so the kernel is the plain one's bits, NaNs and
    infinities included."""
    ast, (a,), _ = max_columns(7, 16, dtypes.float32)
    a[2, 3], a[0, 5], a[6, 5], a[4, 9], a[1, 12] = np.nan, np.nan, np.inf, -np.inf, np.inf
    with np.errstate(invalid="ignore"):
        case = (ast, [a], a.max(0).astype(np.float64))
    sink = apply_opts(graph_rewrite(ast, sym), (Opt(UPCAST, 0, 8),))
    reduces = [u for u in vectorize_upcast(sink, masks=True).toposort() if u.op is Ops.REDUCE]
    assert [u.dtype for u in reduces] == [dtypes.float32.vec(8)]
    assert vectorize_upcast(sink) is sink  # without masks (GPU dialects): no vector max
    got = run(with_opts(ast, (Opt(UPCAST, 0, 8),)), [a], 16, dtypes.float32, "CPU")
    with Context(NOOPT=1):
        plain = run(ast, [a], 16, dtypes.float32, "PYTHON")
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))
    np.testing.assert_array_equal(got, case[2].astype(np.float32))


def test_the_reduce_becomes_a_vector_reduce() -> None:
    sink = apply_opts(graph_rewrite(matmul(4, 3, 16, dtypes.float32)[0], sym), (Opt(UPCAST, 1, 16),))
    vectorized = vectorize_upcast(sink)
    reduces = [u for u in vectorized.toposort() if u.op is Ops.REDUCE]
    assert [u.dtype for u in reduces] == [dtypes.float32.vec(8)]
    assert not any(u.op is Ops.RANGE and u.src[0].arg == 16 for u in vectorized.toposort())  # split: 2 x 8 lanes


def test_vector_offset() -> None:
    lane, r0, r1 = loop(8, 5), loop(4, 0), loop(3, 1)
    assert vector_offset(r0 * 24 + lane + r1 * 8, lane) is not None
    assert vector_offset(r0 * 24 + r1 * 8, lane) is None  # no lane term
    assert vector_offset(lane * 2 + r0, lane) is None  # strided
    assert vector_offset((lane + r0) // 2, lane) is None  # inside a division


def test_python_device_never_sees_vectors() -> None:
    ast, inputs, expected = matmul(4, 5, 16, dtypes.float32)
    opts = (Opt(UPCAST, 0, 2), Opt(UPCAST, 1, 16))
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, dtypes.float32, "PYTHON")
    np.testing.assert_array_equal(run(with_opts(ast, opts), inputs, expected.size, dtypes.float32, "PYTHON"), plain)
    np.testing.assert_array_equal(run(with_opts(ast, opts), inputs, expected.size, dtypes.float32, "CPU"), plain)


# *** work after a vector reduce that has no vector form runs lane by lane ***


def silu(x: UOp) -> UOp:
    return x * (1 + (x * -1.4426950408889634).exp2()).reciprocal()


# libm's exp2 and Python's may differ in the last bit: those epilogues match PYTHON to an ulp on the CPU
TRANSCENDENTAL = {"silu"}
EPILOGUES = {
    "silu": silu,  # exp2 and a reciprocal: vector forms in float32 (libmvec's exp2), lane by lane in float64
    "relu": lambda x: (x < 0).where(0, x),  # a compare and a select
    "max": lambda x: x.maximum(x * 0.5),
    "sqrt of square": lambda x: (x * x).sqrt() + x,  # vector ops around a lane-by-lane one
}


def matmul_then(epilogue: str, m: int, k: int, n: int, dt: DType) -> tuple[UOp, list[np.ndarray]]:
    """out (m, n) = f(a (m, k) @ b (k, n)) with f from EPILOGUES."""
    ast, inputs, _ = matmul(m, k, n, dt)
    store = ast.src[0]
    return UOp.sink(store.src[0].store(EPILOGUES[epilogue](store.src[1]))), inputs


@st.composite
def epilogue_tiles(draw: st.DrawFn) -> tuple[str, tuple[int, int, int], tuple[Opt, ...]]:
    """An epilogue, a small matmul and a tile whose column upcast is whole vectors (maybe rows, swap and a pack)."""
    m, k, n = draw(st.integers(1, 6)), draw(st.integers(1, 9)), draw(st.sampled_from([8, 16, 24, 32]))
    opts = [Opt(UPCAST, 1, draw(st.sampled_from([a for a in (8, 16, 24, 32) if n % a == 0])))]
    if m > 1 and (rows := draw(st.sampled_from([1, *(d for d in range(2, m + 1) if m % d == 0)]))) > 1:
        opts.insert(0, Opt(UPCAST, 0, rows))
    left = {0: m // (opts[0].arg if len(opts) == 2 else 1), 1: n // opts[-1].arg}
    if left[0] > 1 and left[1] > 1 and k > 1 and draw(st.booleans()):  # the rows loop, axis 1 once swapped
        opts += [Opt(SWAP, 0, 1), Opt(PACK, 1, 2)]
    return draw(st.sampled_from(sorted(EPILOGUES))), (m, k, n), tuple(opts)


@settings(max_examples=30, deadline=None)
@given(epilogue_tiles())
def test_lane_by_lane_epilogues_are_bit_for_bit(case: tuple[str, tuple[int, int, int], tuple[Opt, ...]]) -> None:
    """The reduce as vectors, the epilogue once per lane: CPU and PYTHON with the opts give the plain kernel's bits
    on PYTHON (to an ulp where the CPU's libm computes the epilogue)."""
    epilogue, sizes, opts = case
    for dt in (dtypes.float32, dtypes.float64):
        ast, inputs = matmul_then(epilogue, *sizes, dt)
        size = sizes[0] * sizes[2]
        with Context(NOOPT=1):
            plain = run(ast, inputs, size, dt, "PYTHON")
        np.testing.assert_array_equal(run(with_opts(ast, opts), inputs, size, dt, "PYTHON"), plain)
        got = run(with_opts(ast, opts), inputs, size, dt, "CPU")
        if epilogue in TRANSCENDENTAL:
            np.testing.assert_allclose(got, plain, rtol=4 * np.finfo(got.dtype).eps, atol=0)
        else:
            np.testing.assert_array_equal(got, plain)


def test_a_float32_epilogue_runs_as_vectors() -> None:
    """After a float32 vector reduce, silu's exp2 is one vector call and its reciprocal a vector division; relu's
    compare is a lane mask and its select bitwise; nothing runs lane by lane."""
    tile = (Opt(UPCAST, 0, 2), Opt(UPCAST, 1, 16))
    silu_body = source(matmul_then("silu", 4, 5, 16, dtypes.float32)[0], tile)
    assert "float8 acc0[4];" in silu_body  # the reduce kept vector accumulators
    assert silu_body.count("fg_exp2_float8(") == 1
    assert "__builtin_exp2f(" not in silu_body
    relu_body = source(matmul_then("relu", 4, 5, 16, dtypes.float32)[0], tile)
    assert "(fg_mask8)" in relu_body  # the compare inline as the mask of a bitwise select
    assert "&~(" in relu_body
    assert "[7]" not in silu_body + relu_body  # no lane subscripts


@pytest.mark.parametrize("epilogue", ["relu", "max"])
def test_vector_masks_keep_nan_and_inf_lanes(epilogue: str) -> None:
    """A vector compare and select give the scalar kernel's bits where the accumulators hold NaN, +-inf and -0."""
    ast, inputs = matmul_then(epilogue, 2, 3, 16, dtypes.float32)
    a, b = inputs
    a[0, :] = [np.inf, 1.0, 0.0]
    b[:, 3] = [1.0, np.nan, 2.0]  # row 0 gets inf + nan*1 -> nan, row 1 nan
    b[:, 5] = [-1.0, 0.0, 0.0]  # row 0: -inf
    b[:, 6] = [0.0, -0.0, -0.0]  # row 0: 0*inf -> nan
    a[1, :] = [-0.0, 0.0, -0.0]
    tile = (Opt(UPCAST, 0, 2), Opt(UPCAST, 1, 16))
    assert "&~" in source(ast, tile)
    with Context(NOOPT=1):
        plain = run(ast, [a, b], 32, dtypes.float32, "PYTHON")
    np.testing.assert_array_equal(run(with_opts(ast, tile), [a, b], 32, dtypes.float32, "CPU"), plain)


def test_a_float64_epilogue_reads_the_vector_accumulators_lane_by_lane() -> None:
    """Masks are float32-wide: a double epilogue's compare and select run once per lane on the vector's lanes."""
    ast, _ = matmul_then("silu", 4, 5, 8, dtypes.float64)
    body = source(ast, (Opt(UPCAST, 0, 2), Opt(UPCAST, 1, 8)))
    assert "double4 acc0[4];" in body
    assert "__builtin_exp2(alu11[3])" in body  # lane 3 of a vector, read for its exp2
    assert body.count("__builtin_exp2(") == 4  # once per lane, in the loop over whole vectors


def test_lanes_stay_out_of_reduce_loops() -> None:
    """A strided load inside the reduce has no vector form: the kernel stays scalar (no gather lane by lane)."""
    sink = apply_opts(graph_rewrite(matmul_transposed(4, 3, 16, dtypes.float32)[0], sym), (Opt(UPCAST, 1, 8),))
    assert vectorize_upcast(sink) is sink


# *** AVX-512 hosts: 64-byte vectors, 32-byte ones where an axis has no whole 64-byte vector ***


@pytest.fixture
def _avx512(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: 64)


@pytest.mark.usefixtures("_avx512")
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=str)
def test_wide_vectors_where_the_host_has_them(dt: DType) -> None:
    """The heuristic's tile and the vector code use 64-byte vectors (16 floats, 8 doubles), bit for bit."""
    case = matmul(8, 7, 64, dt)
    opts = tuple(hand_coded_opts(graph_rewrite(case[0], sym)))
    width = 64 // dt.itemsize
    assert opts[-1].op is UPCAST, opts
    assert opts[-1].arg % width == 0, opts
    assert f"{dt.name}{width} acc0[" in source(case[0], opts)
    check(case, dt, "CPU", opts, exact=True)


@pytest.mark.usefixtures("_avx512")
def test_an_axis_without_whole_wide_vectors_takes_narrow_ones() -> None:
    case = matmul(4, 5, 24, dtypes.float32)  # 24 columns: one and a half 16-float vectors, three 8-float ones
    opts = tuple(hand_coded_opts(graph_rewrite(case[0], sym)))
    assert opts[-1] == Opt(UPCAST, 1, 24), opts
    body = source(case[0], opts)
    assert "float8 acc0[" in body
    assert "float16" not in body
    check(case, dtypes.float32, "CPU", opts, exact=True)


def test_the_host_probe_gives_32_or_64_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real probe, not conftest's 32
    assert vectorize.host_vector_bytes() in (32, 64)
    assert vectorize.vector_sizes()[-1] == 32  # the narrow size is always there to fall back to
