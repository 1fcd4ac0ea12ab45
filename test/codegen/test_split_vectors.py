"""Packed register tiles on a host that runs 64-byte vectors on 32-byte units (AMD Zen 4): 8 rows x 1 vector where a
full-width AVX-512 host (Zen 5, Intel) takes 8 x 2 (opt._tile_vectors). The host is faked either way, so these run the
same on every machine."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fusegrad import Tensor, helpers
from fusegrad.codegen import to_program, vectorize
from fusegrad.codegen.opt import LANE_VECTORS, Opt, OptOps, hand_coded_opts
from fusegrad.dtype import dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_lanes import normalized_rows
from test.codegen.test_opt import check, full_sum

SHAPE = (4, 8, 256, 64)
ZEN4 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nflags\t\t: fpu avx2 avx512f\n"


def attention_kernels() -> list[UOp]:
    """sdpa's q @ k.T (the first kernel) and p @ v (the last), as hand_coded_opts sees them."""
    q, k, v = (Tensor.empty(*SHAPE) for _ in range(3))
    asts = [ei.ast for ei in q.scaled_dot_product_attention(k, v).schedule() if ei.ast.op is Ops.SINK]
    return [graph_rewrite(asts[0], sym), graph_rewrite(asts[-1], sym)]


def _host(monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    monkeypatch.setattr(vectorize, "split_wide_vectors", lambda: split)


@pytest.mark.parametrize(("split", "columns"), [(False, 32), (True, 16)])
def test_attention_tiles_hold_one_vector_per_row_on_split_units(
    monkeypatch: pytest.MonkeyPatch, split: bool, columns: int
) -> None:
    _host(monkeypatch, split)
    for ast in attention_kernels():
        tile = [o for o in hand_coded_opts(ast) if o.op is OptOps.UPCAST]
        assert tile == [Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.UPCAST, 3, columns)]


def test_split_tiles_compute_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    _host(monkeypatch, True)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(SHAPE, dtype=np.float32) for _ in range(3))
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)).numpy()
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(SHAPE[-1])
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (probs / probs.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("split", "vector", "lanes"), [(False, "float16", 16), (True, "float8", 8)])
def test_a_full_sum_streams_in_32_byte_vectors_on_split_units(
    monkeypatch: pytest.MonkeyPatch, split: bool, vector: str, lanes: int
) -> None:
    # a sum of a whole buffer reads it once from memory: on Zen 4 its accumulators are 32-byte vectors (ymm loads ran a
    # 64 MB sum ~4% faster than zmm ones); a row kernel's sums (L1-resident rows) keep the host's 64-byte vectors
    _host(monkeypatch, split)
    ast = full_sum(1 << 20, dtypes.float32)[0]
    assert hand_coded_opts(ast) == [Opt(OptOps.GROUP, 0, 16), Opt(OptOps.LANES, 0, LANE_VECTORS * lanes)]
    src = to_program(ast, ClangRenderer()).src
    assert re.search(rf"{vector} acc\d+\[{LANE_VECTORS}\];", src)
    check(full_sum(1 << 17, dtypes.float32), dtypes.float32, "CPU", None)
    row = normalized_rows(64, 1024)[0]
    assert [o.arg for o in hand_coded_opts(row)] == [LANE_VECTORS * 16] * 2
    assert len(re.findall(rf"float16 acc\d+\[{LANE_VECTORS}\];", to_program(row, ClangRenderer()).src)) == 2


SPLIT_WIDE_VECTORS = vectorize.split_wide_vectors  # the real predicate: the conftest fakes the module's name per test


@pytest.mark.parametrize(
    ("cpuinfo", "vector_bytes", "split"),
    [
        (ZEN4, 64, True),
        (ZEN4.replace("family\t: 25", "family\t: 26"), 64, False),  # Zen 5: full-width units
        (ZEN4.replace("AuthenticAMD", "GenuineIntel").replace("family\t: 25", "family\t: 6"), 64, False),
        (ZEN4, 32, False),  # 32-byte vectors in use
        ("", 64, False),  # no /proc/cpuinfo
    ],
)
def test_split_units_are_zen4s(monkeypatch: pytest.MonkeyPatch, cpuinfo: str, vector_bytes: int, split: bool) -> None:
    monkeypatch.setattr(helpers, "_cpuinfo", lambda: cpuinfo)
    monkeypatch.setattr(vectorize, "cpu_family", helpers.cpu_family.__wrapped__)  # uncached: reads the fake text
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vector_bytes)
    assert SPLIT_WIDE_VECTORS() is split


def test_cpu_family_reads_vendor_and_family(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "_cpuinfo", lambda: ZEN4)
    assert helpers.cpu_family.__wrapped__() == ("AuthenticAMD", 25)
    assert helpers.cpu_flags.__wrapped__() == frozenset({"fpu", "avx2", "avx512f"})
    monkeypatch.setattr(helpers, "_cpuinfo", lambda: "")
    assert helpers.cpu_family.__wrapped__() == ("", 0)
    assert helpers.cpu_flags.__wrapped__() == frozenset()
