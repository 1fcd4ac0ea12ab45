"""The heuristic's tiles for bench/ops.py's attention at (4, 8, 256, 64) on an AVX-512 host: the causal PV product
(probabilities @ V, its reduce ended at the diagonal by codegen/clip.py) keeps the 8 rows x 32 columns tile of the plain
one. BEAM=2 had once kept 8 x 16 for it (a stale cache entry); fresh searches keep 8 x 32, and side by side it runs
11-17% faster than 8 x 16 on one thread and on two (1015 vs 1185 us single-thread, 477 vs 561 us on two, load 2.4)."""

from __future__ import annotations

import pytest

from fusegrad import Tensor
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym

SHAPE = (4, 8, 256, 64)
PV_TILE = [Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.UPCAST, 3, 32), Opt(OptOps.SWAP, 2, 3), Opt(OptOps.PACK, 3, 2)]


def pv_kernel(causal: bool) -> UOp:
    """The last kernel of attention's schedule: probabilities @ V, one output per (batch, head, row, column)."""
    q, k, v = (Tensor.empty(*SHAPE) for _ in range(3))
    asts = [ei.ast for ei in q.scaled_dot_product_attention(k, v, is_causal=causal).schedule() if ei.ast.op is Ops.SINK]
    ast = graph_rewrite(asts[-1], sym)
    (reduce,) = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    assert [int(r.src[0].arg) for r in reduce.src[1:]] == [SHAPE[2]]  # a sum over the keys
    return ast


@pytest.mark.parametrize("causal", [False, True])
def test_attention_pv_takes_8_rows_by_32_columns(monkeypatch: pytest.MonkeyPatch, causal: bool) -> None:
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    assert hand_coded_opts(pv_kernel(causal)) == PV_TILE
