"""codegen/opt.py exp_vector_opts: an elementwise float32 kernel that calls exp2 is upcast by one vector along its
innermost output loop, 64 bytes on AVX-512, where the exp runs inline as vectors (renderer/cstyle.py's
fg_exp2_float16), 32 on AVX2 (libmvec's 8-lane exp2); activations with a compare (sigmoid, SiLU, GELU, ELU) take lane
masks for it (vectorize's _lane_dtype). The host is faked either way (the codegen conftest fakes 32-byte vectors
with a vector exp2), so these run the same on every machine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.codegen import KernelInfo, vectorize
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.dtype import dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import run

LANES = vectorize.WIDE_VECTOR_BYTES // 4
F32 = dtypes.float32


@pytest.fixture
def avx512(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)


def kernel(out: Tensor) -> UOp:
    """The one kernel computing `out`, as hand_coded_opts sees it."""
    (ast,) = [ei.ast for ei in out.schedule() if ei.ast.op is Ops.SINK]
    return graph_rewrite(ast, sym)


def empty(*shape: int) -> Tensor:
    return Tensor.empty(*shape)


def test_an_exp_chain_is_upcast_by_one_wide_vector(avx512: None) -> None:
    a, b = empty(1 << 12), empty(1 << 12)
    assert hand_coded_opts(kernel(((a + 1) * b - 0.5).exp() * 0.25 + a)) == [Opt(OptOps.UPCAST, 0, LANES)]
    x, row = empty(8, 64), empty(1, 64)
    assert hand_coded_opts(kernel((x - row).exp())) == [Opt(OptOps.UPCAST, 1, LANES)], "a broadcast row reads along"
    activations = [Tensor.sigmoid, Tensor.silu, Tensor.gelu, Tensor.elu, lambda x: (x > 0).where(x.exp(), b)]
    for activation in activations:  # their compares as lane masks; one at a time (a live sigmoid is a kernel's own)
        assert hand_coded_opts(kernel(activation(a))) == [Opt(OptOps.UPCAST, 0, LANES)]


def test_other_kernels_keep_the_simd_loop(avx512: None, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = empty(1 << 12), empty(1 << 12)
    assert hand_coded_opts(kernel(a * 2 + b)) == [], "no exp: the C compiler's own vectorisation"
    assert hand_coded_opts(kernel(a.exp() + b.log())) == [], "log beside it: a libmvec call either way"
    assert hand_coded_opts(kernel(empty(3, 40).exp())) == [], "120 elements: no whole vectors"
    arange = a.exp() + Tensor.arange(1 << 12).float()
    assert hand_coded_opts(kernel(arange)) == [], "a form the vector code can't express (left to the C compiler)"
    transposed = hand_coded_opts(kernel(empty(64, 64).T.exp()))
    assert transposed == [Opt(OptOps.UPCAST, 0, 8)], "a transposed read takes transpose_opts' rows, not the vector exp"
    assert hand_coded_opts(kernel(Tensor.empty(1 << 12, dtype="float16").exp())) == [], "half precision"
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.VECTOR_BYTES)
    assert hand_coded_opts(kernel(a.sigmoid())) == [Opt(OptOps.UPCAST, 0, 8)], "AVX2: one 32-byte vector"
    monkeypatch.setattr(vectorize, "vector_exp2", lambda: False)
    assert hand_coded_opts(kernel(a.sigmoid())) == [], "no vector exp2 (no AVX2): the C compiler's loop"


def test_the_vector_exp_computes_what_numpy_does(avx512: None) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 1 << 14)).astype(np.float32)
    out = (((Tensor(a) + 1) * Tensor(b) - 0.5).exp() * 0.25 + Tensor(a)).numpy()
    expected = np.exp((a.astype(np.float64) + 1) * b - 0.5) * 0.25 + a
    np.testing.assert_allclose(out, expected, rtol=2e-6, atol=1e-6)


EXPRESSIONS = [
    lambda x, y: (x * 0.5).exp(),
    lambda x, y: (x - y).exp() * y,
    lambda x, y: (x * 0.3).exp().maximum(y),  # a lane mask's select
    lambda x, y: ((x + 1) * y - 0.5).exp() * 0.25 + x,
    lambda x, y: (x > 0).where((x * 0.3).exp(), y),  # a select by a lane mask
    lambda x, y: x.sigmoid() * y,
    lambda x, y: x.gelu(),
]


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 4),
    vectors=st.integers(1, 4),
    which=st.integers(0, len(EXPRESSIONS) - 1),
    seed=st.integers(0, 2**16),
    vector_bytes=st.sampled_from([vectorize.VECTOR_BYTES, vectorize.WIDE_VECTOR_BYTES]),
)
def test_vector_exp_kernels_match_the_unoptimised_kernel(
    rows: int, vectors: int, which: int, seed: int, vector_bytes: int
) -> None:
    """The heuristic's upcast (the vector exp: inline on AVX-512, libmvec's or lane by lane as AVX2 code) on CPU
    against the same kernel with no opts on CPU (the C compiler's loop and its exp) and on PYTHON: the exps differ in
    rounding alone."""
    rng = np.random.default_rng(seed)
    shape = (rows, LANES * vectors)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    with pytest.MonkeyPatch.context() as patch:  # hypothesis runs examples outside a function-scoped fixture
        patch.setattr(vectorize, "host_vector_bytes", lambda: vector_bytes)
        (ei,) = [ei for ei in EXPRESSIONS[which](Tensor(a).realize(), Tensor(b).realize()).schedule()
                 if ei.ast.op is Ops.SINK]  # fmt: skip
        ast = graph_rewrite(ei.ast, sym)
        inputs = [buf.numpy() for buf in ei.bufs[1:]]
        opts = tuple(hand_coded_opts(ast))
        assert [(o.op, o.arg) for o in opts] == [(OptOps.UPCAST, vector_bytes // 4)]
        vector = run(ast.replace(arg=KernelInfo(opts_to_apply=opts)), inputs, a.size, F32, "CPU")
    for device in ("CPU", "PYTHON"):
        plain = run(ast.replace(arg=KernelInfo(opts_to_apply=())), inputs, a.size, F32, device)
        np.testing.assert_allclose(vector, plain, rtol=4e-6, atol=1e-7, err_msg=device)
