"""Vector tiles whose output store is strided in the lane loop (codegen/vectorize.py): a conv tiled over vectors of
output channels writes each lane a whole channel plane apart in NCHW. The reduce keeps its vector accumulators and the
store (and a strided epilogue load: a residual's skip input) runs lane by lane; a kernel with no vector reduce stays
scalar. Each is checked bit for bit against the plain kernel interpreted on PYTHON, on CPU and PYTHON."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import kernel_names, to_program
from fusegrad.codegen.opt import Opt, OptOps, apply_opts
from fusegrad.codegen.vectorize import vectorize_upcast
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import Context
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import Case, conv1d_strided, data, glob, loop, run, with_opts

UPCAST, PACK = OptOps.UPCAST, OptOps.PACK


@pytest.fixture(autouse=True)
def _fresh_kernel_names() -> None:
    kernel_names.clear()


def conv_skip_relu(batch: int, cin: int, cout: int, width: int, step: int, pad: int, dt: DType) -> Case:
    """relu(conv1d_strided(...) + skip): a residual block's epilogue, whose skip input (slot 3) is read at the
    output's address, as strided in the channel lanes as the store."""
    ast, inputs, expected = conv1d_strided(batch, cin, cout, width, step, pad, dt)
    store = ast.src[0]
    out = expected.size
    skip = glob(3, out, dt).index(store.src[0].src[1]).load()
    summed = store.src[1] + skip
    ast = UOp.sink(store.src[0].store(summed.maximum(summed.const_like(0))))
    skips = data((out,), dt, 3)
    return ast, [*inputs, skips], np.maximum(expected + skips.astype(np.float64), 0)


def transposed_scale(rows: int, cols: int, dt: DType) -> Case:
    """out (cols, rows) = 2 * x (rows, cols).T: elementwise, loads contiguous in the columns, stores strided."""
    r0, r1 = loop(rows, 0), loop(cols, 1)
    value = glob(1, rows * cols, dt).index(r0 * cols + r1).load() * 2
    ast = UOp.sink(glob(0, rows * cols, dt).index(r1 * rows + r0).store(value))
    xs = data((rows, cols), dt)
    return ast, [xs], (2 * xs.astype(np.float64)).T.ravel()


def assert_bit_for_bit(case: Case, dt: DType, opts: tuple[Opt, ...]) -> None:
    """The kernel with `opts` on CPU and PYTHON gives the plain kernel's bits on PYTHON."""
    ast, inputs, expected = case
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, dt, "PYTHON")
    np.testing.assert_allclose(plain, expected, rtol=1e-4, atol=1e-4)
    for device in ("CPU", "PYTHON"):
        np.testing.assert_array_equal(run(with_opts(ast, opts), inputs, expected.size, dt, device), plain, device)


def vectorized(ast: UOp, opts: tuple[Opt, ...]) -> tuple[UOp, UOp]:
    sink = apply_opts(graph_rewrite(ast, sym), opts)
    return sink, vectorize_upcast(sink)


CHANNEL_TILE = (Opt(UPCAST, 2, 4), Opt(UPCAST, 1, 16), Opt(PACK, 0, 2))  # the heuristic's pick for a 4-column conv


def test_a_channel_tile_keeps_vector_accumulators_and_stores_lane_by_lane() -> None:
    sink, vec = vectorized(conv1d_strided(2, 32, 32, 8, 2, 1, dtypes.float32)[0], CHANNEL_TILE)
    assert vec is not sink  # was left scalar whole: the store is 4 floats apart per channel
    assert {u.dtype for u in vec.toposort() if u.op is Ops.REDUCE} == {dtypes.float32.vec(8)}
    stores = [u for u in vec.toposort() if u.op is Ops.STORE and u.src[0].src[0] == glob(0, 2 * 32 * 4, dtypes.float32)]
    assert len(stores) == 8  # one scalar store per lane
    assert all(u.src[1].dtype == dtypes.float32 for u in stores)
    src = to_program(
        with_opts(conv1d_strided(2, 32, 32, 8, 2, 1, dtypes.float32)[0], CHANNEL_TILE), ClangRenderer()
    ).src
    assert re.search(r"float8 acc\d+\[8\];", src)  # 4 columns x 2 vectors of channels (acc0: the weights panel)
    assert "(*(float8_u*)&data0[" not in src  # no vector store to the output


def test_a_strided_epilogue_load_runs_lane_by_lane() -> None:
    sink, vec = vectorized(conv_skip_relu(2, 32, 32, 8, 2, 1, dtypes.float32)[0], CHANNEL_TILE)
    assert vec is not sink
    skips = [u for u in vec.toposort() if u.op is Ops.LOAD and u.src[0].src[0].arg == 3]
    assert len(skips) == 8  # one scalar load per lane, outside the reduce
    assert all(u.dtype == dtypes.float32 for u in skips)
    assert_bit_for_bit(conv_skip_relu(2, 32, 32, 8, 2, 1, dtypes.float32), dtypes.float32, CHANNEL_TILE)


def test_without_a_vector_reduce_a_strided_store_keeps_the_kernel_scalar() -> None:
    """Lane-by-lane stores pay only beside vector accumulators: a transposing copy stays as it was."""
    sink, vec = vectorized(transposed_scale(5, 16, dtypes.float32)[0], (Opt(UPCAST, 1, 8),))
    assert vec is sink
    assert_bit_for_bit(transposed_scale(5, 16, dtypes.float32), dtypes.float32, (Opt(UPCAST, 1, 8),))


@st.composite
def channel_tiles(draw: st.DrawFn) -> tuple[bool, tuple[int, int, int, int, int, int], tuple[Opt, ...]]:
    """(with a skip epilogue, conv sizes, opts): a tile of whole vectors of output channels (8 float32 or 4 float64
    lanes divide 8, 16 and 32), maybe several columns, maybe the weights packed outside the batch loop (without the
    panel their loads stride in the lanes inside the reduce, and the kernel stays scalar)."""
    batch, cin, cout = draw(st.integers(1, 3)), draw(st.integers(1, 12)), draw(st.sampled_from([8, 16, 32]))
    width, step, pad = draw(st.integers(3, 12)), draw(st.integers(1, 3)), draw(st.integers(0, 2))
    out = (width + 2 * pad - 3) // step + 1
    opts = [Opt(UPCAST, 1, draw(st.sampled_from([a for a in (8, 16, 32) if cout % a == 0])))]
    if (cols := draw(st.sampled_from([d for d in range(1, out + 1) if out % d == 0]))) > 1:
        opts.insert(0, Opt(UPCAST, 2, cols))
    if batch > 1 and draw(st.booleans()):
        opts.append(Opt(PACK, 0, 2))
    return draw(st.booleans()), (batch, cin, cout, width, step, pad), tuple(opts)


@settings(max_examples=25, deadline=None)
@given(channel_tiles(), st.sampled_from([dtypes.float32, dtypes.float64]))
def test_channel_tiles_with_strided_stores_are_bit_for_bit(
    case: tuple[bool, tuple[int, int, int, int, int, int], tuple[Opt, ...]], dt: DType
) -> None:
    skip, sizes, opts = case
    kernel = (conv_skip_relu if skip else conv1d_strided)(*sizes, dt)
    sink, vec = vectorized(kernel[0], opts)
    if any(o.op is PACK for o in opts):
        assert vec is not sink  # the tile keeps its vector accumulators
    assert_bit_for_bit(kernel, dt, opts)
