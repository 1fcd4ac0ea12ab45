"""The C of a named register tile (codegen/linearize.py named_accumulators): each accumulator a plain variable, and the
packed panel's vectors every row multiplies loaded into variables of their own ahead of the rows (cstyle.is_inline,
linearize's load order), so gcc keeps the 24 accumulators in place; other register reads stay inline."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fusegrad.codegen import KernelInfo, to_program
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.device import Device
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context
from test.codegen.test_opt import matmul, run

F32 = dtypes.float32
# 8-lane vectors (conftest.py): 6 rows x 4 vectors, the columns' loop outside the rows' and b packed across the rows
PACKED_6X4 = (Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2))


def reduce_body(src: str) -> str:
    """The text of the reduce loop over k (16 steps) up to its end."""
    start = src.index("ridx2 < 16; ridx2++) {")
    return src[start : src.index("\n      }", start)]


def test_the_panels_vectors_are_loaded_once_ahead_of_the_rows() -> None:
    src = to_program(
        matmul(12, 16, 64, F32)[0].replace(arg=KernelInfo(opts_to_apply=PACKED_6X4)), Device["CPU"].renderer
    ).src
    body = reduce_body(src)
    loads = re.findall(r"float8 (val\d+) = \(\*\(const float8_u\*\)&acc0\[", body)
    assert len(loads) == 4, body  # the 4 vectors of a step, each a variable
    first_fma = body.index("fg_fma_float8(")
    assert all(body.index(f"float8 {v} =") < first_fma for v in loads), body
    for v in loads:  # each multiplied by the 6 rows' broadcasts
        assert len(re.findall(rf"fg_fma_float8\(alu\d+,{v},acc\d+\)", body)) == 6, body
    assert "acc0[" not in body[first_fma:]  # no panel read left inline in the fmas


def test_a_register_read_once_stays_inline() -> None:
    # the tile's results read back in the store loops: one user each, written into the store
    src = to_program(
        matmul(12, 16, 64, F32)[0].replace(arg=KernelInfo(opts_to_apply=PACKED_6X4)), Device["CPU"].renderer
    ).src
    assert re.search(r"\(\*\(float8_u\*\)&data0\[.*\]\) = acc\d+\[alu\d+\+ridx\d+\];", src), src


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_the_packed_named_tile_gives_the_plain_kernels_bits(device: str) -> None:
    ast, inputs, expected = matmul(12, 16, 64, F32)
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, F32, "PYTHON")
    got = run(ast.replace(arg=KernelInfo(opts_to_apply=PACKED_6X4)), inputs, expected.size, F32, device)
    np.testing.assert_array_equal(got, plain)
