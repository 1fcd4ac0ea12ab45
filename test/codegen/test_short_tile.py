"""codegen/opt.py short_tile_opts: on AVX2 (conftest's 8 lanes), a packed tile of 4 rows x 2 vectors over a reduce too
short to unroll takes 6 rows, one unrolled 5, the last row tile clamped (UPCAST_CLAMP); rows 5 divide and a kernel whose
mask clips its loops per row keep register_tile's tile."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.dtype import dtypes
from fusegrad.uop import Ops
from test.codegen.test_opt import assert_plain_bits, matmul
from test.codegen.test_wide_tile import opts_of

F32 = dtypes.float32
SHORT = [Opt(OptOps.UPCAST_CLAMP, 0, 6), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2)]


def test_short_reduces_take_six_rows() -> None:
    assert opts_of(matmul(256, 64, 256, F32)[0]) == SHORT  # sdpa's q @ k.T over 64
    assert opts_of(matmul(256, 256, 64, F32)[0]) == SHORT  # and its p @ v over 256


def test_long_reduces_take_five_rows_and_exact_rows_keep_their_tile() -> None:
    # a reduce of 1024 is unrolled (unroll_opts): 12 accumulators spill there, so 5 rows (wide_tile_opts' AVX2 tile)
    assert opts_of(matmul(256, 1024, 256, F32)[0])[:2] == [Opt(OptOps.UPCAST_CLAMP, 0, 5), Opt(OptOps.UPCAST, 1, 16)]
    assert Opt(OptOps.UNROLL, 2, 4) in opts_of(matmul(256, 1024, 256, F32)[0])
    # 100 rows: register_tile's 5 rows divide them (no 4 x 2 to widen)
    assert opts_of(matmul(100, 64, 32, F32)[0])[0] == Opt(OptOps.UPCAST, 0, 5)


def _tiles(out: Tensor) -> list[tuple[bool, tuple[Opt, ...]]]:
    """(whether it holds a mask, the heuristic's opts) of each kernel of `out`."""
    from fusegrad.codegen import sym
    from fusegrad.codegen.opt import hand_coded_opts
    from fusegrad.uop.ops import graph_rewrite

    kernels = [graph_rewrite(k.ast, sym) for k in out.schedule() if k.ast.op is Ops.SINK]
    return [(any(u.op is Ops.WHERE for u in k.toposort()), tuple(hand_coded_opts(k))) for k in kernels]


def test_a_causal_mask_keeps_rows_clipped() -> None:
    # the causal p @ v ends its loop at each row's diagonal (codegen/clip.py): a clamped tile would not clip; its
    # score kernel q @ k.T computes every score (no mask) and takes 6 rows as the plain one's
    q, k, v = (Tensor.rand(1, 2, 64, 32).realize() for _ in range(3))
    clamped = [
        any(o.op is OptOps.UPCAST_CLAMP for o in opts) for _, opts in _tiles(q.scaled_dot_product_attention(k, v))
    ]
    assert clamped.count(True) == 2  # q @ k.T and p @ v
    causal = _tiles(q.scaled_dot_product_attention(k, v, is_causal=True))
    masked = [opts for mask, opts in causal if mask and any(o.op is OptOps.PACK for o in opts)]
    assert masked
    assert not any(o.op is OptOps.UPCAST_CLAMP for opts in masked for o in opts)
    assert any(not mask and any(o.op is OptOps.UPCAST_CLAMP for o in opts) for mask, opts in causal)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_the_short_tile_gives_the_plain_kernels_bits(device: str) -> None:
    # 100 rows in tiles of 6: the last one 96..99, then row 99 twice more
    assert_plain_bits(matmul(100, 64, 32, F32), SHORT, device)


def test_an_epilogues_select_takes_the_short_tile() -> None:
    # a select after the reduce (GELU's backward fused after a matmul) clips no loop: the tile is the plain matmul's
    x, w, g = Tensor.rand(256, 64).realize(), Tensor.rand(64, 256).realize(), Tensor.rand(256, 256).realize()
    y = x @ w
    ((mask, opts),) = _tiles((y > 0.5).where(g * y, -y))
    assert mask
    assert list(opts) == SHORT


def test_an_epilogues_select_under_the_short_tile_is_right() -> None:
    rng = np.random.default_rng(0)
    x, w, g = (rng.standard_normal(s).astype(np.float32) for s in ((268, 64), (64, 256), (268, 256)))
    y = Tensor(x) @ Tensor(w)
    out = (y > 0.5).where(Tensor(g) * y, -y)
    assert _tiles(out)[0][1][0] == Opt(OptOps.UPCAST_CLAMP, 0, 6)  # 268 rows: the last tile clamped
    np.testing.assert_allclose(out.numpy(), np.where(x @ w > 0.5, g * (x @ w), -(x @ w)), rtol=1e-5, atol=1e-5)
