"""codegen/opt.py _hoist_panel_loop: a batched x @ w.T tile whose gathered panel of w is packed once per column
tile, its vector loop moved outside the batch loop the panel doesn't depend on (GPT's Linear layers)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import KernelInfo, to_program
from fusegrad.codegen import opt as opt_module
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import Context
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import Case, data, glob, loop, red, run

F32 = dtypes.float32


def batched_linear(batch: int, m: int, k: int, n: int, dt: DType, transposed: bool = True) -> Case:
    """out (batch, m, n) = x (batch, m, k) @ w (n, k).T (`transposed`, Linear's layout) or @ w (k, n)."""
    b, i, j, r = loop(batch, 0), loop(m, 1), loop(n, 2), red(k, 3)
    x = glob(1, batch * m * k, dt).index(b * (m * k) + i * k + r).load()
    w = glob(2, n * k, dt).index(j * k + r if transposed else r * n + j).load()
    ast = UOp.sink(glob(0, batch * m * n, dt).index(b * (m * n) + i * n + j).store((x * w).reduce(r, arg=Ops.ADD)))
    xs, ws = data((batch, m, k), dt), data((n, k) if transposed else (k, n), dt, 1)
    wt = ws.astype(np.float64).T if transposed else ws.astype(np.float64)
    return ast, [xs, ws], (xs.astype(np.float64) @ wt).ravel()


def wide_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)


def heuristic(case: Case) -> list[Opt]:
    return hand_coded_opts(graph_rewrite(case[0], sym))


GPT_TILE = [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 2, 32), Opt(OptOps.SWAP, 1, 2)]


def test_a_batched_transposed_matmul_packs_its_panel_outside_the_batch_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPT's x @ w1.T, (16, 64, 128) @ (512, 128).T: w's panel (32 columns x 128) was gathered per batch and column
    # tile, 16 times over; now the column loop is outermost and the panel serves all 16 x 64 rows
    wide_host(monkeypatch)
    case = batched_linear(16, 64, 128, 512, F32)
    assert heuristic(case) == [*GPT_TILE, Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2)]
    monkeypatch.setattr(opt_module, "_hoist_panel_loop", lambda *args: None)
    assert heuristic(case) == [*GPT_TILE, Opt(OptOps.PACK, 2, 2)]  # the tile without the rule


def test_the_panel_is_filled_outside_the_batch_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    wide_host(monkeypatch)
    case = batched_linear(16, 64, 128, 256, F32)
    src = to_program(case[0], Device["CPU"].renderer).src
    body = src[src.index("#pragma omp parallel for") :]
    # the copy (the panel's store of data2's values) comes before the batch loop, the only one of 16 iterations (8
    # column tiles, 8 row tiles, 128 steps of the reduce and the copy, 32 columns)
    fill, batch = body.index("= val0;"), body.index(" < 16; ")
    assert fill < batch, body[:1500]


def test_plain_and_unbatched_panels_keep_their_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    # x @ w (w contiguous along the columns: a cheap copy, the reorder measured 0.95-1.05x) and an unbatched x @ w.T
    # (no loop to move) are left as they were
    wide_host(monkeypatch)
    for case in (batched_linear(16, 64, 512, 128, F32, transposed=False), batched_linear(1, 1024, 128, 512, F32)):
        with_rule = heuristic(case)
        monkeypatch.setattr(opt_module, "_hoist_panel_loop", lambda *args: None)
        assert heuristic(case) == with_rule
        monkeypatch.undo()
        wide_host(monkeypatch)


def test_the_hoisted_tile_matches_numpy_and_the_tile_without_it_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    wide_host(monkeypatch)
    case = batched_linear(4, 64, 128, 96, F32)
    opts = heuristic(case)
    assert Opt(OptOps.SWAP, 0, 1) in opts
    got = run(case[0].replace(arg=KernelInfo(opts_to_apply=tuple(opts))), case[1], case[2].size, F32, "CPU")
    np.testing.assert_allclose(got, case[2], rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(opt_module, "_hoist_panel_loop", lambda *args: None)
    before = heuristic(case)
    assert before != opts
    plain = run(case[0].replace(arg=KernelInfo(opts_to_apply=tuple(before))), case[1], case[2].size, F32, "CPU")
    np.testing.assert_array_equal(got, plain)  # same accumulators in the same order


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(2, 3),
    rows=st.sampled_from([2, 4]),
    row_tiles=st.integers(2, 3),
    lanes=st.sampled_from([2, 4, 8]),
    col_tiles=st.integers(2, 3),
    k=st.integers(2, 9),
    transposed=st.booleans(),
)
def test_any_hoisted_panel_matches_the_plain_kernel_on_cpu_and_python(
    batch: int, rows: int, row_tiles: int, lanes: int, col_tiles: int, k: int, transposed: bool
) -> None:
    # the rule's opts given outright, any sizes (loops of 2 or more, so each opt finds its loop): bit for bit the
    # kernel without opts, interpreted one op at a time
    ast, inputs, expected = batched_linear(batch, rows * row_tiles, k, lanes * col_tiles, F32, transposed)
    opts = (
        Opt(OptOps.UPCAST, 1, rows),
        Opt(OptOps.UPCAST, 2, lanes),
        Opt(OptOps.SWAP, 1, 2),
        Opt(OptOps.SWAP, 0, 1),
        Opt(OptOps.PACK, 1, 2),
    )
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, F32, "PYTHON")
    for device in ("CPU", "PYTHON"):
        got = run(ast.replace(arg=KernelInfo(opts_to_apply=opts)), inputs, expected.size, F32, device)
        np.testing.assert_array_equal(got, plain)
