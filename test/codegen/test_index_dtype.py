"""The "lower index dtype" pass (fusegrad/codegen/index_dtype.py): int32 index math exactly where every index value
fits int32 (also at the 2**31 boundary and with symbolic sizes), int64 otherwise; the kernels it lowers compute the
same values on CPU (C) and PYTHON (wrapping int32) as numpy, and their estimates are those of the unlowered kernel."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad.codegen as codegen
from fusegrad import Tensor
from fusegrad.codegen import full_rewrite, to_program
from fusegrad.codegen.index_dtype import index_dtype_for, lower_index_dtype
from fusegrad.dtype import DType, dtypes
from fusegrad.engine.realize import CompiledRunner
from fusegrad.renderer import Estimates
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp

CLANG = ClangRenderer()


def kernel_asts(t: Tensor) -> list[UOp]:
    sched, _ = t.schedule_with_vars()
    return [s.ast for s in sched if s.ast.op is Ops.SINK]


def index_dtypes(t: Tensor) -> set[DType]:
    """Dtypes of every INDEX's address in the kernels of `t`, rendered without running them."""
    ret: set[DType] = set()
    for ast in kernel_asts(t):
        uops = full_rewrite(ast, CLANG)
        assert not [u for u in uops if u.dtype == dtypes.index], "no node is left typed index"
        ret |= {u.src[1].dtype for u in uops if u.op is Ops.INDEX}
    return ret


# *** the choice ***


@pytest.mark.parametrize(
    ("rows", "cols", "expected"),
    [
        (2**16 - 1, 2**15, dtypes.int32),  # 2**31 - 2**15 elements
        (2**16, 2**15, dtypes.int32),  # exactly 2**31: the last index is 2**31 - 1
        (2**16 + 1, 2**15, dtypes.int64),  # 2**31 + 2**15
        (2**11 * 2**11, 2**11, dtypes.int64),  # 2**33
    ],
)
def test_expand_at_the_int32_boundary(rows: int, cols: int, expected: DType) -> None:
    assert index_dtypes(Tensor.empty(rows, 1).expand(-1, cols).contiguous()) == {expected}


def test_loop_end_must_fit_too() -> None:
    """One loop of 2**31 iterations: every index fits, but its end (and the counter's last ++) does not."""
    assert index_dtypes(Tensor.empty(1).expand(2**31).contiguous()) == {dtypes.int64}
    assert index_dtypes(Tensor.empty(1).expand(2**31 - 1).contiguous()) == {dtypes.int32}


@pytest.mark.parametrize(("vmax", "expected"), [(64, dtypes.int32), (2048, dtypes.int64)])
def test_symbolic_size_uses_the_variables_range(vmax: int, expected: DType) -> None:
    """2048 * 2048 * dim3 fits int32 only while dim3 <= 512: the bound value (32) does not decide, the range does."""
    dim3 = UOp.variable("dim3", 1, vmax).bind(32)
    assert index_dtypes(Tensor.empty(2048, 2048, 1).expand(-1, -1, dim3).contiguous()) == {expected}


def test_variable_alone_decides() -> None:
    r = UOp.range(UOp.variable("n", 1, 2**31 - 1), 0, AxisType.LOOP)
    assert index_dtype_for(UOp.sink(r)) == dtypes.int32
    r = UOp.range(UOp.variable("n", 1, 2**31), 0, AxisType.LOOP)
    assert index_dtype_for(UOp.sink(r)) == dtypes.int64


def test_unknown_bounds_keep_int64() -> None:
    """An index computed from data (a gather's cast) has no bounds: int64, as before the pass."""
    x = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), arg=1)
    position = x.index(UOp.const(dtypes.index, 0)).load().cast(dtypes.index)
    assert index_dtype_for(UOp.sink(position)) == dtypes.int64


def test_lowering_retypes_every_index_node() -> None:
    r0, r1 = UOp.range(4, 0, AxisType.LOOP), UOp.range(UOp.variable("n", 1, 8), 1, AxisType.LOOP)
    sink = UOp.sink(r0 * 8 + r1)
    lowered = lower_index_dtype(sink)
    assert {u.dtype for u in lowered.toposort() if u.op is not Ops.SINK} == {dtypes.int32}


# *** what the C says ***


class NarrowClang(ClangRenderer):
    """C whose index math takes its IR width (what a dialect without -fwrapv's cost would do)."""

    index_c_type = None


def test_clang_keeps_index_math_64_bit() -> None:
    """Under -fwrapv int32 address sums must wrap, which makes gcc gather contiguous loads: ClangRenderer declares
    int32 index math (loop counters, hoisted offsets) as long long, so its C is what it was before the lowering."""
    # (16, 12) transposed: loads 12 apart along the columns, no transposed-copy tile (codegen/opt.py transpose_opts)
    src = to_program(kernel_asts(Tensor.empty(16, 12).permute(1, 0).contiguous())[0], CLANG).src
    assert "for (long long ridx0 = 0; ridx0 < 12;" in src
    assert "int " not in src.split("#endif")[1]


def test_narrow_c_loops_and_variables() -> None:
    """With index_c_type None, loop counters take the IR's index type; a variable stays a long long argument (what
    the CPU runtime passes) and is narrowed where it is used."""
    dim3 = UOp.variable("dim3", 1, 64).bind(32)
    src = to_program(kernel_asts(Tensor.empty(16, 1).expand(-1, dim3).contiguous())[0], NarrowClang()).src
    assert "long long dim3)" in src
    assert "for (int ridx0 = 0; ridx0 < 16;" in src
    assert "(int)dim3" in src
    assert "long long ridx" not in src
    src = to_program(kernel_asts(Tensor.empty(2**16 + 1, 1).expand(-1, 2**15).contiguous())[0], NarrowClang()).src
    assert "for (long long ridx0" in src
    assert "for (int " not in src


def test_narrow_c_runs() -> None:
    """int32 C (loop counters, a narrowed variable) computes what numpy does."""
    data = np.arange(48, dtype=np.float32).reshape(4, 12)
    v = UOp.variable("v", 1, 12).bind(7)
    out = Tensor(data).realize().permute(1, 0).flip(0).shrink(((0, v), (0, 4))).sum(0)
    items = [ei for ei in out.schedule() if ei.ast.op is Ops.SINK]
    for ei in items:
        for buf in ei.bufs:
            buf.ensure_allocated()
        src = to_program(ei.ast, NarrowClang())
        assert "for (int " in src.src
        CompiledRunner(src)(ei.bufs, {"v": 7}, wait=True)
    got = items[-1].bufs[0].numpy()
    np.testing.assert_allclose(got, data[:, ::-1][:, :7].sum(1))


# *** values: lowered kernels against numpy, on C and on the PYTHON interpreter (int32 wraps there) ***


@st.composite
def movement_reduce(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[str, object]]]:
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    steps: list[tuple[str, object]] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["permute", "flip", "pad", "shrink", "expand", "sum", "max"]))
        steps.append((kind, draw(st.integers(0, 2**16))))
    return shape, steps


def apply_step(x: Tensor | np.ndarray, kind: str, seed: int) -> Tensor | np.ndarray:
    """One movement or reduce op picked by `seed`, the same on a Tensor and on an ndarray."""
    nd = len(x.shape)
    axis = seed % nd
    if kind == "permute":
        order = tuple(np.random.default_rng(seed).permutation(nd).tolist())
        return x.permute(order) if isinstance(x, Tensor) else x.transpose(order)
    if kind == "flip":
        return x.flip(axis) if isinstance(x, Tensor) else np.flip(x, axis)
    if kind == "pad":
        width = [(0, 0)] * nd
        width[axis] = (seed % 3, seed // 3 % 2)
        return x.pad(tuple(width)) if isinstance(x, Tensor) else np.pad(x, width)
    if kind == "shrink" and x.shape[axis] > 1:
        bounds = [(0, s) for s in x.shape]
        bounds[axis] = (1, x.shape[axis])
        return x.shrink(tuple(bounds)) if isinstance(x, Tensor) else x[tuple(slice(lo, hi) for lo, hi in bounds)]
    if kind == "expand":
        if isinstance(x, Tensor):
            return x.unsqueeze(axis).expand(*x.shape[:axis], 3, *x.shape[axis:])
        return np.broadcast_to(np.expand_dims(x, axis), (*x.shape[:axis], 3, *x.shape[axis:]))
    if kind in ("sum", "max") and nd > 1:
        if isinstance(x, Tensor):
            return x.sum(axis) if kind == "sum" else x.max(axis)
        return x.sum(axis) if kind == "sum" else x.max(axis)
    return x


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@settings(max_examples=15, deadline=None)
@given(case=movement_reduce())
def test_lowered_kernels_match_numpy(device: str, case: tuple[tuple[int, ...], list[tuple[str, object]]]) -> None:
    shape, steps = case
    data = np.random.default_rng(len(steps)).integers(-50, 50, size=shape).astype(np.float32)
    t: Tensor | np.ndarray = Tensor(data, device=device)
    expected: Tensor | np.ndarray = data
    for kind, seed in steps:
        t, expected = apply_step(t, kind, int(seed)), apply_step(expected, kind, int(seed))  # type: ignore[arg-type]
    assert isinstance(t, Tensor)
    out = (t + 0).contiguous()
    assert index_dtypes(out) <= {dtypes.int32}
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_symbolic_kernel_values(device: str) -> None:
    n = UOp.variable("n", 1, 10).bind(7)
    x = Tensor(np.arange(10, dtype=np.float32), device=device)
    out = (x.shrink(((0, n),)) * 2 + Tensor.arange(10, device=device).shrink(((0, n),))).contiguous()
    np.testing.assert_allclose(out.shrink(((0, 7),)).numpy(), np.arange(7) * 3)


# *** estimates count the same ops as before lowering ***


def estimate_pairs(t: Tensor, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Estimates, Estimates]]:
    ret = []
    for ast in kernel_asts(t):
        lowered = to_program(ast, CLANG).estimates
        with monkeypatch.context() as m:
            m.setattr(codegen, "lower_index_dtype", lambda sink: sink)
            ret.append((lowered, to_program(ast, CLANG).estimates))
    return ret


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tensor.empty(8, 16).permute(1, 0).pad(((1, 1), (0, 2))).sum(1),
        lambda: Tensor.arange(100) * 3 + 1,
        lambda: Tensor.arange(100).reshape(10, 10).permute(1, 0) + 1,  # index math (r1*10+r0) that is data
        lambda: Tensor.arange(100, dtype=dtypes.int32) * 3 + Tensor.empty(100, dtype=dtypes.int32),  # int data ops
        lambda: Tensor.empty(5, 7)[Tensor.empty(3, dtype=dtypes.int32)],  # data that is an index (gather)
        lambda: Tensor.empty(10, 10)[: UOp.variable("n", 1, 10).bind(4)].sum(0),  # symbolic loop end
        lambda: Tensor.empty(64, 64) @ Tensor.empty(64, 64),
    ],
)
def test_estimates_do_not_change(make, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    for lowered, unlowered in estimate_pairs(make().contiguous(), monkeypatch):
        assert lowered == unlowered
