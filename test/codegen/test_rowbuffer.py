"""Row buffers (codegen/rowbuffer.py, the KEEP opt) and max lanes (codegen/linearize.max_lanes) of a fused row op's
kernel: the heuristic picks KEEP for softmax, the C computes one exp per element, and the kernel with them gives the
plain kernel's bits on CPU and PYTHON (hypothesis over row sizes, values and which later loops read the value)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Device, Tensor
from fusegrad.codegen import KernelInfo, kernel_names, to_program, vectorize
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.codegen.rowbuffer import keep_row_value
from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.engine.realize import CompiledRunner
from fusegrad.helpers import Context
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp
from fusegrad.uop.rewrite import graph_rewrite
from fusegrad.uop.symbolic import sym


@pytest.fixture(autouse=True)
def _fresh_kernel_names() -> None:
    kernel_names.clear()


EXP_CALL = re.compile(r"fg_exp2(f|_float16)\(\(")


def exp_calls(src: str) -> int:
    """Calls of the float exp2 (scalar or vector) in the kernel's body."""
    return len(EXP_CALL.findall(src[src.index("void r_") :]))


def _glob(slot: int, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), arg=slot)


def softmax_ast(rows: int, cols: int, backward: bool = False, masked: bool = False) -> UOp:
    """out[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max), as the scheduler fuses it; with
    `backward`, out = e * (g / s - sum_k g[i, k] * e[i, k] / s^2) (softmax's gradient, one more pass over the row).
    `masked`: a causal mask (k <= i kept) as mixin/nn.py's _masked_softmax writes it, e = where(m, exp(where(m, y, 0)),
    0), whose gradient reads the bare exp(where(m, y, 0)) in the output loop."""
    i, j = UOp.range(rows, 0, AxisType.LOOP), UOp.range(cols, 1, AxisType.LOOP)
    r_max, r_sum, r_g = (UOp.range(cols, axis, AxisType.REDUCE) for axis in (2, 3, 4))
    x, g = _glob(1, rows * cols), _glob(2, rows * cols)

    def kept(r: UOp) -> UOp:
        return (r < i + 1) if masked else UOp.const(dtypes.bool, True)

    def masked_by(r: UOp, value: UOp, other: float) -> UOp:
        return kept(r).where(value, value.const_like(other)) if masked else value

    top = masked_by(r_max, x.index(i * cols + r_max).load(), -np.inf).reduce(r_max, arg=Ops.MAX)

    def bare_exp_at(r: UOp) -> UOp:
        return (masked_by(r, x.index(i * cols + r).load() - top, 0.0) * 1.4426950408889634).exp2()

    def exp_at(r: UOp) -> UOp:
        return masked_by(r, bare_exp_at(r), 0.0)

    total = exp_at(r_sum).reduce(r_sum, arg=Ops.ADD)
    value = exp_at(j) * total.reciprocal()
    if backward:
        dot = (g.index(i * cols + r_g).load() * exp_at(r_g)).reduce(r_g, arg=Ops.ADD) * (total * total).reciprocal()
        value = masked_by(j, bare_exp_at(j) * (g.index(i * cols + j).load() * total.reciprocal() - dot), 0.0)
    return graph_rewrite(UOp.sink(_glob(0, rows * cols).index(i * cols + j).store(value)), sym)


def run(ast: UOp, inputs: list[np.ndarray], device: str, opts: tuple[Opt, ...] | None) -> np.ndarray:
    sink = ast if opts is None else ast.replace(arg=KernelInfo(opts_to_apply=opts))
    prg = to_program(sink, Device[device].renderer)
    out = Buffer(device, inputs[0].size, dtypes.float32).allocate()
    bufs = [Buffer(device, a.size, dtypes.float32).allocate().copyin(memoryview(a.ravel())) for a in inputs]
    CompiledRunner(prg)([out, *bufs], {}, wait=True)
    return out.numpy().copy()


def test_the_heuristic_keeps_softmax_exp_in_a_row_buffer() -> None:
    ast = softmax_ast(4, 64)
    assert hand_coded_opts(ast) == [Opt(OptOps.KEEP, 3, 64)]  # the sum's loop fills it (32-byte vectors: conftest)
    src = to_program(ast, Device["CPU"].renderer).src
    assert exp_calls(src) == 1  # the output loop loads what the sum's loop stored
    assert "float acc0[64] __attribute__((aligned(32)));" in src


def test_the_sums_vector_lanes_fill_the_row_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the vector exp2 is inline (AVX-512's 64-byte vectors), softmax's sum of exps takes one vector of lanes:
    each step's vector of exps is added and stored into the row buffer in the same loop (one vector exp2 a step, none
    computed again for the buffer), and the row's arrays stay private to the row's thread (declared inside the
    parallel row loop). Only the source is checked, so any host runs it."""
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    ast = softmax_ast(4096, 1024)
    assert hand_coded_opts(ast) == [Opt(OptOps.KEEP, 3, 1024), Opt(OptOps.LANES, 2, 64), Opt(OptOps.LANES, 3, 16)]
    src = to_program(ast, Device["CPU"].renderer).src
    body = src[src.index("void r_") :]
    assert body.count("fg_exp2_float16((") == 1
    assert "fg_exp2f((" not in body
    sum_loop = body[body.rindex("for", 0, body.index("fg_exp2_float16((")) :].split("}")[0]  # the exp's loop
    assert "fg_exp2_float16((" in sum_loop
    assert "(*(float16_u*)&acc0[" in sum_loop
    assert body.index("#pragma omp parallel for") < body.index("float acc0[1024]")
    assert "ridx3 < 64;" in sum_loop  # 1024 / 16 steps of a vector
    assert body.index("for (long long ridx0") < body.index("[16] __attribute__")  # the lanes' partials, per row


def test_softmax_backward_keeps_one_exp_for_three_passes() -> None:
    ast = softmax_ast(4, 64, backward=True)
    assert hand_coded_opts(ast)[0] == Opt(OptOps.KEEP, 3, 64)
    assert exp_calls(to_program(ast, Device["CPU"].renderer).src) == 1


def test_masked_softmax_backward_keeps_the_bare_exp_for_every_pass() -> None:
    """where(m, exp, 0) is read by the sum's and the dot's loops, exp alone by the output loop: keeping exp saves two
    exps per element, keeping the select one."""
    ast = softmax_ast(4, 64, backward=True, masked=True)
    assert hand_coded_opts(ast)[0] == Opt(OptOps.KEEP, 3, 64)
    assert exp_calls(to_program(ast, Device["CPU"].renderer).src) == 1
    assert exp_calls(to_program(softmax_ast(4, 64, masked=True), Device["CPU"].renderer).src) == 1


def test_keep_without_a_costly_value_raises() -> None:
    i, r = UOp.range(4, 0, AxisType.LOOP), UOp.range(8, 1, AxisType.REDUCE)
    total = _glob(1, 32).index(i * 8 + r).load().reduce(r, arg=Ops.ADD)
    ast = UOp.sink(_glob(0, 4).index(i).store(total))
    with pytest.raises(ValueError, match="KEEP of axis 1"):
        keep_row_value(ast, 1, 0)


def test_a_loop_around_the_reduce_is_not_a_later_loop() -> None:
    """A cumsum's output loop encloses its reduce (the mask j <= i reads it): a costly value of the row the kernel
    also computes at the output's index is not kept for that loop, which would read the row before the reduce's loop
    filled it (found by test.fuzz: the linear program could not order them and the kernel failed to build)."""
    x = Tensor(np.linspace(-3, 3, 16))
    shared = x.reciprocal() * 2
    c = (shared + x.reciprocal()).cast(dtypes.int8).cumsum(0)
    for item in (c < 1187).where(c, shared.cast(dtypes.int32)).schedule():
        if item.ast.op is Ops.SINK:  # the cumsum kernel raised "linearize: nodes depend on a loop they are inside"
            to_program(item.ast, Device["CPU"].renderer)
    r = 1 / np.linspace(-3, 3, 16)
    want = np.cumsum((r * 2 + r).astype(np.int8), dtype=np.int32)
    got = (c < 1187).where(c, shared.cast(dtypes.int32)).numpy()
    np.testing.assert_array_equal(got, np.where(want < 1187, want, (r * 2).astype(np.int32)))


def test_fused_softmax_tensor_kernel_keeps_its_exp() -> None:
    x = Tensor.empty(16, 256)
    (item,) = x.softmax(-1).schedule()
    assert exp_calls(to_program(item.ast, Device["CPU"].renderer).src) == 1


@settings(max_examples=20, deadline=None)
@given(
    rows=st.integers(1, 3),
    cols=st.sampled_from([1, 7, 8, 16, 40, 64]),
    backward=st.booleans(),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
    specials=st.booleans(),
)
def test_row_buffer_and_max_lanes_give_the_plain_kernels_bits(
    rows: int, cols: int, backward: bool, masked: bool, seed: int, specials: bool
) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    g = rng.standard_normal((rows, cols)).astype(np.float32)
    if specials:  # a -inf row (NaN out), a +inf, a NaN, signed zeros tied for the max
        x[0, :] = -np.inf
        x[-1, 0], x[-1, -1] = np.inf if cols > 1 else 0.0, -0.0
        if rows > 1 and cols > 2:
            x[1, 1] = np.nan
    ast = softmax_ast(rows, cols, backward, masked)
    with Context(NOOPT=1):
        plain = run(ast, [x, g], "PYTHON", None)
    opts = tuple(hand_coded_opts(ast))
    lanes = tuple(o for o in opts if o.op is OptOps.LANES)  # a sum's lanes add its terms in another order
    if lanes:
        with Context(NOOPT=1):
            plain = run(ast, [x, g], "PYTHON", lanes)
    for device in ("PYTHON", "CPU"):
        got = run(ast, [x, g], device, opts)
        if device == "PYTHON":
            np.testing.assert_array_equal(got, plain)  # same values stored and loaded, maxima exact
        else:  # the C sums in SIMD lanes (`simd reduction`), with or without the buffer
            np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-6)


def test_a_fused_row_kernel_gets_no_register_tile() -> None:
    """out[i, j] = x[j, i] - max_k x[k, i]: the loads are contiguous along i, which the max depends on; an upcast of i
    would nest innermost, inside j, and compute the max again per j (codegen/opt.py)."""
    i, j, k = UOp.range(64, 0, AxisType.LOOP), UOp.range(32, 1, AxisType.LOOP), UOp.range(32, 2, AxisType.REDUCE)
    x = _glob(1, 32 * 64)
    top = x.index(k * 64 + i).load().reduce(k, arg=Ops.MAX)
    ast = UOp.sink(_glob(0, 64 * 32).index(i * 32 + j).store(x.index(j * 64 + i).load() - top))
    assert hand_coded_opts(ast) == []


@pytest.mark.parametrize("vector_bytes", [32, 64])
@pytest.mark.parametrize(
    "opts",
    [
        (Opt(OptOps.KEEP, 3, 64), Opt(OptOps.LANES, 3, 16)),
        (Opt(OptOps.KEEP, 3, 64), Opt(OptOps.LANES, 3, 8)),
        (Opt(OptOps.KEEP, 3, 64), Opt(OptOps.LANES, 3, 32)),
        (Opt(OptOps.KEEP, 3, 64), Opt(OptOps.GROUP, 2, 2), Opt(OptOps.LANES, 3, 16)),
    ],
)
def test_a_kept_row_under_sum_lanes_keeps_the_sum(
    monkeypatch: pytest.MonkeyPatch, vector_bytes: int, opts: tuple[Opt, ...]
) -> None:
    """KEEP then LANES of the same sum, whether the lanes become one vector (the fill moves into the sum's steps:
    vectorize._fill_in_lanes), several (the fill keeps its own loop: moved, its loop would wrap the sum's and add every
    term once per vector; found by test_search's neighbour walks) or none (PYTHON): the softmax of the plain kernel."""
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vector_bytes)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((8, 64)) * 4).astype(np.float32)
    ast = softmax_ast(8, 64)
    with Context(NOOPT=1):
        plain = run(ast, [x, x], "PYTHON", None)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(plain, (e / e.sum(-1, keepdims=True)).ravel(), rtol=1e-5, atol=1e-7)
    for device in ("PYTHON", "CPU"):
        np.testing.assert_allclose(run(ast, [x, x], device, opts), plain, rtol=1e-5, atol=1e-7)
