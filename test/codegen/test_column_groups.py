"""codegen/opt.py SPLIT and column_groups: a packed matmul tile whose rows pass SPLIT_MIN_ROW_BYTES takes its column
tiles in groups that share one panel and loop inside the row tiles, so each row tile streams from L3 once a group."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import KernelInfo, to_program
from fusegrad.codegen.opt import Opt, OptOps, apply_opts, hand_coded_opts
from fusegrad.device import Device
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context
from fusegrad.uop.ops import graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import matmul, run, self_matmul

F32 = dtypes.float32
TILE = [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1)]  # AVX-512's 8 x 2 vectors
WIDE = [Opt(OptOps.UPCAST_CLAMP, 0, 6), Opt(OptOps.UPCAST, 1, 64), Opt(OptOps.SWAP, 0, 1)]  # and 6 x 4 (wide_tile_opts)


def wide_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)


def tile_of(m: int, k: int, n: int) -> list[Opt]:
    return [o for o in hand_coded_opts(graph_rewrite(matmul(m, k, n, F32)[0], sym)) if o.op is not OptOps.UNROLL]


def test_a_matmul_whose_rows_pass_l2_groups_its_column_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    # matmul 1024: a's 4 MiB of rows streamed from L3 once per column tile of 32; in fours, the 512 KiB panel of the
    # group serves its tiles from one pass over the rows; matmul 2048's 256 KiB panels go in fours too (1 MiB: within
    # PACK_GROUP_BYTES, where a budget of 512 KiB took pairs)
    # (both now take opt.wide_tile_opts' 6 x 4 vectors, in pairs: test_wide_tile.py)
    wide_host(monkeypatch)
    assert tile_of(1024, 1024, 1024) == [*WIDE, Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.PACK, 1, 2)]
    assert tile_of(2048, 2048, 2048) == [*WIDE, Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.PACK, 1, 2)]
    assert tile_of(4096, 4096, 2048) == [*TILE, Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.PACK, 1, 2)]  # 512 KiB a tile


def test_a_self_matmul_groups_its_column_tiles_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # a @ a: the packed operand's slot also holds the rows' load (strided along the columns); the panel is still a plain
    # copy of the columns' operand, so its tile groups as a @ b's does
    wide_host(monkeypatch)
    opts = [o for o in hand_coded_opts(graph_rewrite(self_matmul(1024, F32)[0], sym)) if o.op is not OptOps.UNROLL]
    assert opts == [*WIDE, Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.PACK, 1, 1)]


def test_a_self_matmul_grouped_matches_the_plain_kernel_bit_for_bit() -> None:
    ast, inputs, expected = self_matmul(64, F32)
    tile = (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.SWAP, 0, 1))
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, F32, "PYTHON")
    for device in ("CPU", "PYTHON"):
        got = run(ast.replace(arg=KernelInfo(opts_to_apply=(*tile, Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.PACK, 1, 1)))),
                  inputs, expected.size, F32, device)  # fmt: skip
        np.testing.assert_array_equal(got, plain)


def test_small_rows_and_few_groups_keep_the_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    wide_host(monkeypatch)
    plain = [*TILE, Opt(OptOps.PACK, 1, 2)]
    assert tile_of(256, 1024, 1024) == plain  # 1 MiB of rows: they stay in L2
    assert tile_of(2048, 1024, 256) == plain  # 8 column tiles: pairs would leave 4 groups for the threads


def test_the_group_loops_inside_the_row_tiles_around_one_panel(monkeypatch: pytest.MonkeyPatch) -> None:
    wide_host(monkeypatch)
    src = to_program(matmul(1024, 1024, 1024, F32)[0], Device["CPU"].renderer).src
    body = src[src.index("#pragma omp parallel for") :]
    # 8 groups in parallel; the panel of the group's 2 tiles of 64 (131072 floats) filled first, then 171 row tiles
    # of 6, each running the group's 2 column tiles
    assert " < 8; " in body.split("\n")[1], body[:400]
    fill, rows = body.index("= val0;"), body.index(" < 171; ")
    group, steps = body.index(" < 2; ", rows), body.index(" < 256; ", rows)  # then the reduce's 1024 steps, by 4
    assert "float acc0[131072] __attribute__((aligned(32)));" in body
    assert fill < rows < group < steps, body[:2000]


def test_split_needs_a_loop_it_divides_and_no_panel_yet() -> None:
    ast = graph_rewrite(matmul(64, 16, 64, F32)[0], sym)
    with pytest.raises(ValueError, match="SPLIT by 3 of axis 1"):
        apply_opts(ast, (Opt(OptOps.SPLIT, 1, 3),))
    with pytest.raises(ValueError, match="SPLIT needs a LOOP axis"):
        apply_opts(ast, (Opt(OptOps.SPLIT, 2, 2),))
    with pytest.raises(ValueError, match="SPLIT of axis 0: got a kernel with GROUP or PACK"):
        apply_opts(ast, (Opt(OptOps.PACK, 0, 2), Opt(OptOps.SPLIT, 0, 2)))


def test_a_panel_spanning_a_group_may_take_pack_group_bytes() -> None:
    # one column tile's panel stays within PACK_MAX_BYTES (256 KiB); a group's (over the SPLIT's loop) within
    # PACK_GROUP_BYTES (1 MiB)
    ast = graph_rewrite(matmul(64, 1024, 1024, F32)[0], sym)
    tile = (Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1))
    apply_opts(ast, (*tile, Opt(OptOps.SPLIT, 0, 8), Opt(OptOps.PACK, 1, 2)))  # 8 x 128 KiB
    with pytest.raises(ValueError, match="got a 2097152-byte panel, expected at most 1048576"):
        apply_opts(ast, (*tile, Opt(OptOps.SPLIT, 0, 16), Opt(OptOps.PACK, 1, 2)))
    with pytest.raises(ValueError, match="got a 524288-byte panel, expected at most 262144"):
        apply_opts(ast, (Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 128), Opt(OptOps.SWAP, 0, 1),
                         Opt(OptOps.PACK, 1, 2)))  # fmt: skip


def test_the_grouped_tile_matches_numpy_and_the_tile_without_groups_bit_for_bit() -> None:
    ast, inputs, expected = matmul(64, 96, 128, F32)
    tile = (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.SWAP, 0, 1))
    grouped = (*tile, Opt(OptOps.SPLIT, 0, 4), Opt(OptOps.PACK, 1, 2))
    got = run(ast.replace(arg=KernelInfo(opts_to_apply=grouped)), inputs, expected.size, F32, "CPU")
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
    plain = run(
        ast.replace(arg=KernelInfo(opts_to_apply=(*tile, Opt(OptOps.PACK, 1, 2)))), inputs, got.size, F32, "CPU"
    )
    np.testing.assert_array_equal(got, plain)  # same accumulators, same order


@settings(max_examples=25, deadline=None)
@given(
    rows=st.sampled_from([1, 2, 4]),
    row_tiles=st.integers(2, 3),
    lanes=st.sampled_from([2, 4, 8]),
    group=st.integers(1, 3),
    groups=st.integers(1, 3),
    k=st.integers(2, 9),
    swap=st.booleans(),
    pack=st.booleans(),
)
def test_any_split_matches_the_plain_kernel_on_cpu_and_python(
    rows: int, row_tiles: int, lanes: int, group: int, groups: int, k: int, swap: bool, pack: bool
) -> None:
    # the rule's opts given outright at any sizes (a split of the whole loop too): bit for bit the kernel without
    # opts, interpreted one op at a time
    n = lanes * group * groups
    ast, inputs, expected = matmul(rows * row_tiles, k, n, F32)
    opts: list[Opt] = [Opt(OptOps.UPCAST, 0, rows)] if rows > 1 else []
    opts += [Opt(OptOps.UPCAST, 1, lanes)]  # always one: the C of a plain reduce loop may reorder its sum
    swap = swap and group * groups > 1  # a column loop is left to swap
    opts += [Opt(OptOps.SWAP, 0, 1)] if swap else []
    opts += [Opt(OptOps.SPLIT, 0 if swap else 1, group)] if group > 1 else []
    opts += [Opt(OptOps.PACK, 1 if swap else 0, 2)] if pack and rows * row_tiles > rows else []
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, F32, "PYTHON")
    for device in ("CPU", "PYTHON"):
        got = run(ast.replace(arg=KernelInfo(opts_to_apply=tuple(opts))), inputs, expected.size, F32, device)
        np.testing.assert_array_equal(got, plain)
