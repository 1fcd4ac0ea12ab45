"""codegen/opt.py wide_tile_opts: on AVX-512, a matmul whose column tiles go in groups (column_groups) takes a tile of
6 rows x 4 vectors (24 accumulators, each a variable: linearize.named_accumulators), its rows clamped at the end
(UPCAST_CLAMP); other kernels keep their tiles."""

from __future__ import annotations

import re

import pytest

from fusegrad.codegen import to_program
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.device import Device
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import assert_plain_bits, matmul

F32 = dtypes.float32
WIDE = [
    Opt(OptOps.UPCAST_CLAMP, 0, 6),
    Opt(OptOps.UPCAST, 1, 64),
    Opt(OptOps.SWAP, 0, 1),
    Opt(OptOps.SPLIT, 0, 2),
    Opt(OptOps.PACK, 1, 2),
    Opt(OptOps.UNROLL, 2, 4),
]


@pytest.fixture
def wide_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)


def opts_of(ast: UOp) -> list[Opt]:
    return hand_coded_opts(graph_rewrite(ast, sym))


@pytest.mark.usefixtures("wide_host")
def test_the_big_matmuls_take_the_wide_tile() -> None:
    assert opts_of(matmul(1024, 1024, 1024, F32)[0]) == WIDE
    assert opts_of(matmul(2048, 2048, 2048, F32)[0]) == WIDE  # pairs of 64 columns: a 1 MiB panel


@pytest.mark.usefixtures("wide_host")
def test_matmuls_whose_rows_8_does_not_divide_take_it_too() -> None:
    # register_tile's 5 rows x 2 vectors over 1000 rows (10 accumulators: 14.3 -> 12.5 ms on one core as 6 x 4)
    assert opts_of(matmul(1000, 1024, 1024, F32)[0]) == WIDE
    wide = opts_of(matmul(1030, 1024, 2048, F32)[0])  # 32 column tiles of 64: fours (30.3 -> 25.7 ms)
    assert wide[:4] == [*WIDE[:3], Opt(OptOps.SPLIT, 0, 4)]


@pytest.mark.usefixtures("wide_host")
def test_matmuls_without_column_groups_keep_8_rows_by_2_vectors() -> None:
    opts = opts_of(matmul(256, 1024, 1024, F32)[0])  # 1 MiB of rows: they stay in L2, no groups
    assert opts[:2] == [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32)]
    assert Opt(OptOps.UNROLL, 2, 4) in opts
    # 768: 12 column tiles of 64 make too few groups for the threads in pairs; its 4 x 3 vectors stay
    assert opts_of(matmul(768, 768, 768, F32)[0])[:2] == [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 48)]


def test_avx2_takes_five_rows_of_two_vectors() -> None:
    # 8-lane vectors (conftest.py): 24 accumulators would not fit AVX2's 16 registers; 5 x 2 takes 10 (6 x 2's 12
    # spill in gcc 12's inner loop), the last row tile clamped as on AVX-512
    opts = opts_of(matmul(1024, 1024, 1024, F32)[0])
    assert opts[:2] == [Opt(OptOps.UPCAST_CLAMP, 0, 5), Opt(OptOps.UPCAST, 1, 16)]
    assert any(o.op is OptOps.SPLIT for o in opts)
    # 768 x 768 x 768 makes groups at 16 columns a tile (5 x 2: 99 -> 138-161 GFLOP/s on 2 Zen 3 threads); rows that
    # stay in L2 make none (256 x 1024 x 1024) and take 5 rows from short_tile_opts, not split
    assert opts_of(matmul(768, 768, 768, F32)[0])[0] == Opt(OptOps.UPCAST_CLAMP, 0, 5)
    ungrouped = opts_of(matmul(256, 1024, 1024, F32)[0])
    assert ungrouped[:2] == [Opt(OptOps.UPCAST_CLAMP, 0, 5), Opt(OptOps.UPCAST, 1, 16)]
    assert not any(o.op is OptOps.SPLIT for o in ungrouped)


@pytest.mark.usefixtures("wide_host")
def test_the_wide_tile_in_c() -> None:
    src = to_program(matmul(1024, 1024, 1024, F32)[0], Device["CPU"].renderer).src
    body = src[src.index("#pragma omp parallel for") :]
    assert " < 8; " in body.split("\n")[1]  # 8 groups of 2 column tiles of 64 in parallel
    assert "float acc0[131072] __attribute__((aligned(32)));" in body  # their panel: 1024 x 128 floats
    assert " < 171; " in body  # ceil(1024 / 6) row tiles
    assert ":1023)" in body  # rows past the end repeat row 1023
    fmas = re.findall(r"^\s*(\S+) = fg_fma_float16\(", body, flags=re.MULTILINE)
    assert len(fmas) == 24
    assert all(re.fullmatch(r"acc\d+", name) for name in fmas), fmas  # variables, not an array's elements
    assert "#pragma GCC unroll 4\n" in body


@pytest.mark.usefixtures("wide_host")
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_the_wide_tile_gives_the_plain_kernels_bits(device: str) -> None:
    # 100 rows (tiles of 6: the last one 96..99, then 99 twice), 2 column tiles of 64 in one group
    assert_plain_bits(matmul(100, 8, 128, F32), WIDE, device)
