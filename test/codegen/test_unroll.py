"""UNROLL (fusegrad/codegen/unroll.py): an unrolled reduce computes bit for bit what the kernel without it computes, on
CPU and PYTHON, after any opts; what it refuses; the C it renders; where the heuristic and BEAM take it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.codegen import full_rewrite, to_program, vectorize
from fusegrad.codegen.opt import Opt, OptOps, apply_opts, hand_coded_opts
from fusegrad.codegen.search import extensions, unroll_actions
from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import REDUCE_AXES, AxisType, Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import (
    DEVICES,
    Case,
    broadcast_sum,
    check,
    conv1d,
    data,
    full_sum,
    glob,
    loop,
    matmul,
    matmul_transposed,
    max_columns,
    nested,
    red,
    weight_gradient,
    with_opts,
)


def batched_weight_gradient(m: int, batch: int, tokens: int, n: int, dt: DType) -> Case:
    """out (m, n) = sum over (batch, tokens) of a[b, t, m] * g[b, t, n]: a Linear weight's gradient over a batch of
    sequences, two reduce loops (GPT's dW over (16, 64) tokens)."""
    i, j, b, t = loop(m, 0), loop(n, 1), red(batch, 2), red(tokens, 3)
    a = glob(1, batch * tokens * m, dt).index(b * (tokens * m) + t * m + i).load()
    g = glob(2, batch * tokens * n, dt).index(b * (tokens * n) + t * n + j).load()
    ast = UOp.sink(glob(0, m * n, dt).index(i * n + j).store((a * g).reduce(b, t, arg=Ops.ADD)))
    xs, gs = data((batch, tokens, m), dt), data((batch, tokens, n), dt, 1)
    expected = xs.astype(np.float64).reshape(-1, m).T @ gs.astype(np.float64).reshape(-1, n)
    return ast, [xs, gs], expected.ravel()


KERNELS: dict[str, Callable[[DType], Case]] = {
    "matmul": lambda dt: matmul(5, 12, 16, dt),
    "transposed": lambda dt: matmul_transposed(4, 8, 6, dt),
    "weight gradient": lambda dt: weight_gradient(8, 16, 16, dt),
    "batched weight gradient": lambda dt: batched_weight_gradient(8, 3, 8, 16, dt),
    "conv": lambda dt: conv1d(2, 4, 4, 6, dt),
    "nested": lambda dt: nested(4, 6, 5, dt),
    "broadcast": lambda dt: broadcast_sum(3, 8, 4, dt),
    "full sum": lambda dt: full_sum(48, dt),
    "max": lambda dt: max_columns(4, 16, dt),
}


def _divisors(n: int) -> list[int]:
    return [d for d in range(2, n + 1) if n % d == 0]


@st.composite
def unrolled_kernels(draw: st.DrawFn) -> tuple[str, DType, tuple[Opt, ...]]:
    """A kernel, a dtype, a walk of 0-2 of BEAM's steps from no opts or the heuristic's, then an UNROLL of the innermost
    reduce loop by any divisor of its size (all of it too)."""
    name, dt = draw(st.sampled_from(sorted(KERNELS))), draw(st.sampled_from([dtypes.float32, dtypes.int32]))
    sink = graph_rewrite(KERNELS[name](dt)[0], sym)
    opts = tuple(o for o in hand_coded_opts(sink) if o.op is not OptOps.UNROLL) if draw(st.booleans()) else ()
    for _ in range(draw(st.integers(0, 2))):
        steps = [e for e in extensions(sink, opts) if e[-1].op is not OptOps.UNROLL]
        if not steps:
            break
        opts = draw(st.sampled_from(steps))
    ranges = [u for u in apply_opts(sink, opts).toposort() if u.op is Ops.RANGE and u.arg[1] in REDUCE_AXES]
    inner = max(ranges, key=lambda r: r.arg[0])
    assume(inner.arg[1] is AxisType.REDUCE)  # a GROUP's combination loop is innermost: no loop of data to unroll
    axis, size = inner.arg[0], int(inner.src[0].arg)
    return name, dt, (*opts, Opt(OptOps.UNROLL, axis, draw(st.sampled_from(_divisors(size)))))


@settings(max_examples=30, deadline=None)
@given(unrolled_kernels())
def test_unrolled_reduce_is_bit_for_bit_the_plain_kernel(case: tuple[str, DType, tuple[Opt, ...]]) -> None:
    """float32 too: the unrolled steps run in the reduce's order, and the unrolled loop gets no `simd reduction`
    (a GROUP or LANES reorders the sum itself, and so does a SWAP of two reduce loops, e.g. the batched weight
    gradient's images and rows: a tolerance then)."""
    name, dt, opts = case
    exact = all(o.op not in (OptOps.GROUP, OptOps.SWAP, OptOps.LANES) for o in opts)
    for device in DEVICES:
        check(KERNELS[name](dt), dt, device, opts, exact=exact)


@pytest.mark.parametrize(
    ("opt", "match"),
    [(Opt(OptOps.UNROLL, 0, 2), "UNROLL needs a REDUCE axis: got axis 0 of LOOP"),
     (Opt(OptOps.UNROLL, 2, 5), "UNROLL by 5 of axis 2: got size 12, expected a multiple"),
     (Opt(OptOps.UNROLL, 2, 1), "UNROLL by 1 of axis 2"),
     (Opt(OptOps.UNROLL, 7, 2), "no single loop with axis id 7")],
)  # fmt: skip
def test_bad_unrolls_are_errors(opt: Opt, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        full_rewrite(with_opts(matmul(3, 12, 16, dtypes.float32)[0], (opt,)), ClangRenderer())


def test_only_the_innermost_reduce_loop_unrolls() -> None:
    # a conv's channel loop has its window's taps inside: split, the taps would run between its unrolled steps
    with pytest.raises(ValueError, match="UNROLL of axis 3: got reduce loops inside it"):
        full_rewrite(with_opts(conv1d(2, 4, 4, 6, dtypes.float32)[0], (Opt(OptOps.UNROLL, 3, 2),)), ClangRenderer())
    with pytest.raises(ValueError, match="UNROLL of axis 1: got reduce loops inside it"):  # a reduce in a reduce
        full_rewrite(with_opts(nested(4, 6, 5, dtypes.float32)[0], (Opt(OptOps.UNROLL, 1, 2),)), ClangRenderer())


def test_unrolled_loop_renders_under_gcc_unroll() -> None:
    src = to_program(with_opts(full_sum(48, dtypes.float32)[0], (Opt(OptOps.UNROLL, 0, 4),)), ClangRenderer()).src
    body = src[src.index("void") :]
    inner = body.index("for (long long ridx1 = 0; ridx1 < 4;")
    assert body[:inner].rstrip().endswith("#pragma GCC unroll 4")
    assert "for (long long ridx0 = 0; ridx0 < 12;" in body
    assert "simd reduction" not in body


def test_heuristic_unrolls_a_packed_tiles_long_reduce() -> None:
    unroll = Opt(OptOps.UNROLL, 2, 4)
    assert hand_coded_opts(matmul(1024, 1024, 1024, dtypes.float32)[0])[-1] == unroll
    assert hand_coded_opts(weight_gradient(128, 1024, 512, dtypes.float32)[0])[-1] == unroll
    # a short reduce (GPT's x @ w.T over 128: within 2% either way) and an unpacked tile keep their loops
    assert all(o.op is not OptOps.UNROLL for o in hand_coded_opts(matmul_transposed(1024, 128, 384, dtypes.float32)[0]))
    assert all(o.op is not OptOps.UNROLL for o in hand_coded_opts(matmul(4, 2048, 64, dtypes.float32)[0]))
    check(matmul(64, 512, 32, dtypes.float32), dtypes.float32, "CPU", None)


def test_heuristic_unrolls_a_long_reduce_split_over_two_loops() -> None:
    # GPT's weight gradients reduce over (16, 64) tokens: 1024 steps, the inner loop of 64 unrolled by 4 (0.94-1.05 ->
    # 0.81-0.91 ms single-thread); (4, 64) is 256 steps, too short, as a single loop of 256 is
    f32 = dtypes.float32
    assert hand_coded_opts(batched_weight_gradient(512, 16, 64, 128, f32)[0])[-1] == Opt(OptOps.UNROLL, 3, 4)
    assert all(o.op is not OptOps.UNROLL for o in hand_coded_opts(batched_weight_gradient(512, 4, 64, 128, f32)[0]))
    assert all(o.op is not OptOps.UNROLL for o in hand_coded_opts(weight_gradient(512, 256, 128, f32)[0]))
    check(batched_weight_gradient(64, 16, 32, 32, f32), f32, "CPU", None)


def test_search_proposes_unrolls_of_the_innermost_reduce_loop_once() -> None:
    sink = graph_rewrite(matmul(5, 16, 16, dtypes.float32)[0], sym)
    assert unroll_actions(sink) == [Opt(OptOps.UNROLL, 2, 2), Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.UNROLL, 2, 8)]
    assert unroll_actions(apply_opts(sink, (Opt(OptOps.UNROLL, 2, 4),))) == []
    assert unroll_actions(graph_rewrite(conv1d(2, 4, 4, 6, dtypes.float32)[0], sym)) == []  # 3 taps: no amount
    # after a GROUP its combination of 4 partials is the innermost reduce loop: at least 2 outer steps are left
    grouped = apply_opts(graph_rewrite(full_sum(64, dtypes.float32)[0], sym), (Opt(OptOps.GROUP, 0, 4),))
    assert unroll_actions(grouped) == [Opt(OptOps.UNROLL, 2, 2)]


def test_heuristic_leaves_a_conv_windows_tile_unrolled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # an AVX-512 conv input gradient: its packed channel tile sits in a 3 x 3 window the C renderer unrolls whole, so an
    # UNROLL of its 64 channels by 4 would make 36 tile bodies (5.0 -> 4.7 ms without it at (8, 64, 56, 56)); only the
    # loops left as loops count toward UNROLL_MIN_REDUCE, while a matmul's 1024 still unrolls
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: 64)
    x, w, g = (
        Tensor.empty(2, 64, 8, 8, requires_grad=True),
        Tensor.empty(64, 64, 3, 3, requires_grad=True),
        Tensor.empty(2, 64, 8, 8),
    )
    (x.conv2d(w, padding=1) * g).sum().backward()
    (kernel,) = [ei.ast for ei in Tensor.schedule(x.grad) if ei.ast.op is Ops.SINK]
    opts = hand_coded_opts(graph_rewrite(kernel, sym))
    assert any(o.op is OptOps.PACK for o in opts)
    assert all(o.op is not OptOps.UNROLL for o in opts)
    assert hand_coded_opts(matmul(1024, 1024, 1024, dtypes.float32)[0])[-1].op is OptOps.UNROLL
