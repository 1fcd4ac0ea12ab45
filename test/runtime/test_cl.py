"""The CL runtime (runtime/ops_cl.py) on whatever OpenCL driver is installed (PoCL on CI): buffers, copies, builds
with their error log, launches with launch sizes, event timing, and kernels checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.device import Buffer, CompileError, Device
from fusegrad.dtype import dtypes


def _cl_available() -> str | None:
    try:
        Device["CL"]
    except Exception as err:  # any failure to open means: no OpenCL here
        return f"{type(err).__name__}: {err}"
    return None


pytestmark = pytest.mark.skipif((why := _cl_available()) is not None, reason=f"no OpenCL device: {why}")


def test_buffer_round_trip() -> None:
    data = np.arange(1000, dtype=np.float32)
    buf = Buffer("CL", 1000, dtypes.float32).ensure_allocated()
    buf.copyin(memoryview(data.tobytes()))
    out = np.empty_like(data)
    buf.copyout(memoryview(out).cast("B"))
    np.testing.assert_array_equal(out, data)


def test_build_error_has_the_log_and_source() -> None:
    src = "__kernel void broken(__global float* a) { a[0] = undefined_name; }"
    with pytest.raises(CompileError, match="undefined_name") as info:
        Device["CL"].compiler.compile(src)
    assert info.value.src == src
    assert "undefined_name" in info.value.stderr


def test_launch_sizes_and_event_time() -> None:
    dev = Device["CL"]
    # every buffer argument comes with its byte offset (runtime/ops_cl.py's CLBuffer)
    src = (
        "__kernel void ids(__global int* a, ulong o) { a[get_global_id(0)] = get_group_id(0) * 100 + get_local_id(0); }"
    )
    prg = dev.runtime("ids", dev.compiler.compile(src))
    buf = Buffer("CL", 12, dtypes.int32).ensure_allocated()
    seconds = prg(buf._buf, global_size=(3, 1, 1), local_size=(4, 1, 1), wait=True)
    assert isinstance(seconds, float)
    assert seconds >= 0
    assert buf.as_memoryview().cast("i").tolist() == [g * 100 + t for g in range(3) for t in range(4)]


def test_variables_are_passed_as_long() -> None:
    dev = Device["CL"]
    src = "__kernel void fill(__global long* a, ulong o, long v) { a[0] = v; }"
    buf = Buffer("CL", 1, dtypes.int64).ensure_allocated()
    dev.runtime("fill", dev.compiler.compile(src))(buf._buf, vals=(2**40 + 3,), wait=True)
    assert buf.as_memoryview().cast("q").tolist() == [2**40 + 3]


def test_output_loops_become_work_groups() -> None:
    from fusegrad.codegen import to_program

    out = Tensor.arange(64, device="CL").reshape(8, 8).float() * 2
    ast = out.schedule()[-1].ast
    spec = to_program(ast, Device["CL"].renderer)
    assert "get_group_id(0)" in spec.src
    assert "for (" not in spec.src
    assert spec.global_size is not None
    assert spec.local_size is not None
    assert int(np.prod([int(s) for s in spec.global_size])) * int(np.prod([int(s) for s in spec.local_size])) == 64
    np.testing.assert_allclose(out.numpy(), np.arange(64).reshape(8, 8) * 2)


@pytest.mark.parametrize("shape", [(3, 5), (64, 33), (1, 1000)])
def test_reduce_and_elementwise_match_numpy(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    ta, tb = Tensor(a, device="CL"), Tensor(b, device="CL")
    np.testing.assert_allclose(((ta * tb).sum(1) + ta.max(1)).numpy(), (a * b).sum(1) + a.max(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((ta @ tb.T).numpy(), a @ b.T, rtol=1e-4, atol=1e-4)


def test_half_is_stored_as_half() -> None:
    a = np.array([1.0, 2.5, 1000.0, 1e-3], dtype=np.float16)
    out = (Tensor(a, device="CL") * 2).numpy()
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, a * np.float16(2))


def test_copy_between_cl_and_cpu() -> None:
    a = np.arange(10, dtype=np.int32)
    np.testing.assert_array_equal((Tensor(a, device="CPU").to("CL") + 1).to("CPU").numpy(), a + 1)


def test_views_at_any_offset() -> None:
    # a view at an offset OpenCL's sub-buffers can't take (not a multiple of 128 bytes): read, computed on, copied
    a = np.arange(40, dtype=np.float32)
    base = Buffer("CL", 40, dtypes.float32, initial_value=a.tobytes())
    view = base.view(10, dtypes.float32, 12).ensure_allocated()
    np.testing.assert_array_equal(np.frombuffer(bytes(view.as_memoryview()), np.float32), a[3:13])
    t = Tensor(a, device="CL").realize()
    np.testing.assert_array_equal((t[3:13].contiguous() * 2).numpy(), a[3:13] * 2)


def test_missing_device_index_is_named() -> None:
    with pytest.raises(RuntimeError, match="no device CL:99"):
        Device["CL:99"]


# *** GPU opts: reductions through local memory (GROUP / GROUPTOP) and work-group threads (LOCAL), vs numpy ***


@pytest.mark.parametrize(
    ("shape", "axis"), [((4, 1024), 1), ((3, 96), 1), ((2048,), 0), ((64, 8, 128), 2), ((512, 6), 0)]
)
@pytest.mark.parametrize("op", ["sum", "max", "mean", "argmax"])
def test_reductions_match_numpy(shape: tuple[int, ...], axis: int, op: str) -> None:
    a = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = getattr(Tensor(a, device="CL"), op)(axis).numpy()
    np.testing.assert_allclose(got, getattr(np, op)(a, axis), rtol=1e-5, atol=1e-5)


def _run_with_opts(out: Tensor, opts: tuple[object, ...]) -> tuple[str, np.ndarray]:
    """The last kernel of `out`'s schedule compiled with `opts` forced and run on CL: (source, result)."""
    from fusegrad.codegen import KernelInfo, to_program
    from fusegrad.engine.realize import CompiledRunner, run_schedule

    *before, item = out.schedule()
    run_schedule(before)
    spec = to_program(item.ast.replace(arg=KernelInfo(opts_to_apply=opts)), Device["CL"].renderer)
    bufs = [b.ensure_allocated() for b in item.bufs if b is not None]
    CompiledRunner(spec)(bufs, {}, wait=True)
    return spec.src, np.frombuffer(bytes(bufs[0].as_memoryview()), dtype=np.float32)


def _axis_of(out: Tensor, axis_type: str) -> int:
    from fusegrad.uop import AxisType, Ops

    ast = out.schedule()[-1].ast
    return next(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType[axis_type])


# powers of two combine by a tree of halving steps; 3 partials are combined by each thread in order
@pytest.mark.parametrize(("op", "amount"), [("GROUP", 32), ("GROUPTOP", 16), ("GROUP", 256), ("GROUP", 3)])
def test_forced_group_matches_numpy(op: str, amount: int) -> None:
    from fusegrad.codegen.opt import Opt, OptOps

    a = np.random.default_rng(2).standard_normal((6, 768)).astype(np.float32)
    t = Tensor(a, device="CL").realize()
    src, got = _run_with_opts(t.sum(1), (Opt(OptOps[op], _axis_of(t.sum(1), "REDUCE"), amount),))
    assert "barrier(CLK_LOCAL_MEM_FENCE)" in src
    assert f"__local float temp0[{amount}]" in src
    np.testing.assert_allclose(got, a.sum(1), rtol=1e-5, atol=1e-4)


def test_forced_local_and_group_together() -> None:
    from fusegrad.codegen.opt import Opt, OptOps

    a = np.random.default_rng(3).standard_normal((16, 256)).astype(np.float32)
    t = Tensor(a, device="CL").realize()
    out = (t * t).sum(1)
    opts = (Opt(OptOps.LOCAL, _axis_of(out, "LOOP"), 4), Opt(OptOps.GROUP, _axis_of(out, "REDUCE"), 8))
    src, got = _run_with_opts(out, opts)
    assert "get_local_id(1)" in src
    assert "__local float temp0[32]" in src
    np.testing.assert_allclose(got, (a * a).sum(1), rtol=1e-5, atol=1e-4)


def test_heuristic_groups_a_long_reduce() -> None:
    from fusegrad.codegen import to_program

    out = Tensor.ones(8, 4096, device="CL").contiguous().realize().sum(1)
    spec = to_program(out.schedule()[-1].ast, Device["CL"].renderer)
    assert "barrier" in spec.src
    assert spec.local_size is not None
    assert int(spec.local_size[0]) > 1
    np.testing.assert_array_equal(out.numpy(), np.full(8, 4096.0, np.float32))


@pytest.mark.parametrize("second", ["LOCAL", "GROUP"])
def test_upcast_with_gpu_opts(second: str) -> None:
    # UPCAST keeps a loop in each thread; a GROUP's partials, barriers and combine then run once per upcast lane
    from fusegrad.codegen.opt import Opt, OptOps

    a = np.random.default_rng(4).standard_normal((16, 64)).astype(np.float32)
    t = Tensor(a, device="CL").realize()
    out = (t * t).sum(1)
    loop, red = _axis_of(out, "LOOP"), _axis_of(out, "REDUCE")
    opts = (
        Opt(OptOps.UPCAST, loop, 4),
        Opt(OptOps[second], loop if second == "LOCAL" else red, 2 if second == "LOCAL" else 8),
    )
    _, got = _run_with_opts(out, opts)
    np.testing.assert_allclose(got, (a * a).sum(1), rtol=1e-5, atol=1e-4)


def test_profile_records_device_time() -> None:
    from fusegrad.helpers import Context, ProfileRangeEvent, cpu_events

    t = Tensor(np.arange(256, dtype=np.float32), device="CL").realize()
    before = len(cpu_events)
    with Context(PROFILE=1):
        (t * 3).realize()
    ranges = [e for e in cpu_events[before:] if isinstance(e, ProfileRangeEvent) and e.device == "CL"]
    assert ranges, "no CL kernel on the profile"
    assert all(e.en is not None and e.en >= e.st for e in ranges)
    del cpu_events[before:]
