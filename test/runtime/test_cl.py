"""The CL runtime (runtime/ops_cl.py) on whatever OpenCL driver is installed (PoCL on CI): buffers, copies, builds
with their error log, launches with launch sizes, event timing, and kernels checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.device import Buffer, CompileError, Device
from fusegrad.dtype import dtypes
from test.shared import cl_unavailable

pytestmark = pytest.mark.skipif((why := cl_unavailable()) is not None, reason=f"no OpenCL device: {why}")


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

    out = Tensor.arange(8192, device="CL").reshape(64, 128).float() * 2  # threads: 64 x 4 of it a work-group
    ast = out.schedule()[-1].ast
    spec = to_program(ast, Device["CL"].renderer)
    assert "get_group_id(0)" in spec.src
    assert "for (" not in spec.src
    assert spec.global_size is not None
    assert spec.local_size is not None
    assert int(np.prod([int(s) for s in spec.global_size])) * int(np.prod([int(s) for s in spec.local_size])) == 8192
    np.testing.assert_allclose(out.numpy(), np.arange(8192).reshape(64, 128) * 2)


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


# *** vectors: contiguous upcast lanes as float8 / double4 (vload / vstore at any element offset) ***


def test_vector_elementwise_is_exact_at_any_offset() -> None:
    # views start at elements 1 and 3: vload8 needs only element alignment; FP_CONTRACT OFF keeps a*b+1 two roundings
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((33, 67)).astype(np.float32), rng.standard_normal((33, 67)).astype(np.float32)
    ta, tb = Tensor(a, device="CL").realize(), Tensor(b, device="CL").realize()
    out = ta[1:, 3:35] * tb[:-1, 1:33] + 1
    src = _source(out)
    assert "vload8(" in src
    assert "vstore8(" in src
    np.testing.assert_array_equal(out.numpy(), a[1:, 3:35] * b[:-1, 1:33] + 1)
    d = rng.standard_normal((16, 24))
    out = Tensor(d, device="CL").realize() * 3 - 0.5
    assert "double4" in _source(out)
    np.testing.assert_array_equal(out.numpy(), d * 3 - 0.5)


def _source(out: Tensor) -> str:
    from fusegrad.codegen import to_program

    return to_program(out.schedule()[-1].ast, Device["CL"].renderer).src


def test_vector_accumulators_match_numpy() -> None:
    from fusegrad.codegen.opt import Opt, OptOps
    from fusegrad.uop import AxisType, Ops

    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((40, 32)).astype(np.float32)
    t = Tensor(a, device="CL").realize()
    # 8 lanes: codegen/vectorize.py may take 16 where the host has AVX-512, and 8 doesn't divide by 16
    src, got = _run_with_opts(t.sum(0), (Opt(OptOps.UPCAST, _axis_of(t.sum(0), "LOOP"), 8),))
    assert "float8 acc0;" in src
    np.testing.assert_allclose(got, a.sum(0), rtol=1e-5, atol=1e-5)
    out = t[:, :40] @ Tensor(b, device="CL").realize()
    ast = out.schedule()[-1].ast
    rows, columns = sorted(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP)
    opts = (Opt(OptOps.UPCAST, rows, 4), Opt(OptOps.UPCAST, columns, 8), Opt(OptOps.LOCAL, columns, 4))
    src, got = _run_with_opts(out, opts)
    assert "float8 acc0[4];" in src
    np.testing.assert_allclose(got.reshape(64, 32), a[:, :40] @ b, rtol=1e-4, atol=1e-4)


# *** BEAM on CL: GPU actions, candidates timed by the CL runtime's profiling events ***


def test_gpu_actions_are_local_and_group_without_pack() -> None:
    from fusegrad.codegen.opt import Opt, OptOps
    from fusegrad.codegen.search import actions, extensions
    from fusegrad.dtype import dtypes
    from fusegrad.uop import AxisType, Ops
    from fusegrad.uop.ops import UOp

    r0, r1, r2 = UOp.range(4, 0, AxisType.LOOP), UOp.range(32, 1, AxisType.LOOP), UOp.range(16, 2, AxisType.REDUCE)
    a, b, out = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(512), arg=i) for i in (1, 2, 0))
    value = (a.index(r0 * 16 + r2).load() * b.index(r2 * 32 + r1).load()).reduce(r2, arg=Ops.ADD)
    sink = UOp.sink(out.index(r0 * 32 + r1).store(value))
    found = actions(sink, has_local=True)
    assert {o.op for o in found} == {OptOps.UPCAST, OptOps.LOCAL, OptOps.GROUP}
    assert Opt(OptOps.LOCAL, 1, 32) in found
    assert [o.arg for o in found if o.op is OptOps.GROUP] == [8, 16]
    # a work-group of 32 x 8 threads is the most: LOCAL 32 then GROUP 8 fits, GROUP 16 does not
    after = [o[-1] for o in extensions(sink, (Opt(OptOps.LOCAL, 1, 32),), has_local=True)]
    assert Opt(OptOps.GROUP, 2, 8) in after
    assert Opt(OptOps.GROUP, 2, 16) not in after


def test_beam_searches_on_cl(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from fusegrad.codegen import search
    from fusegrad.codegen.opt import OptOps
    from fusegrad.engine.realize import CompiledRunner, method_cache
    from fusegrad.helpers import Context

    monkeypatch.setattr(search, "MAX_ROUNDS", 1)  # one round of one-action extensions: enough to see each kind
    benches: list[search.Bench] = []
    monkeypatch.setattr(search.Bench, "of", _recording(search.Bench.of, benches))
    a = np.random.default_rng(7).standard_normal((8, 64)).astype(np.float32)
    item = Tensor(a, device="CL").realize().sum(1).schedule()[-1]
    method_cache.clear()
    with Context(BEAM=1, IGNORE_BEAM_CACHE=1, CACHEDB=f"{tmp_path}/cache.db", CACHELEVEL=2):
        prg = item.lower().prg
    assert isinstance(prg, CompiledRunner)
    (bench,) = benches
    kinds = {opts[-1].op for opts in bench.timed if opts}
    assert {OptOps.LOCAL, OptOps.GROUP, OptOps.UPCAST} <= kinds
    times = list(bench.timed.values())
    assert all(t is not None and 0 < t < 1 for t in times), bench.timed  # every candidate ran, right, timed by events
    chosen = bench.timed[tuple(prg.p.uops[-1].arg.applied_opts)]
    assert chosen is not None
    assert chosen * search.MIN_GAIN <= min(t for t in times if t is not None)  # the fastest, up to timing noise
    item.run()
    np.testing.assert_allclose(item.bufs[0].numpy(), a.sum(1), rtol=1e-5, atol=1e-5)  # type: ignore[union-attr]
    method_cache.clear()


def _recording(of: object, into: list[object]) -> object:
    def record(ast: object, device: str, reference: tuple[object, ...] = ()) -> object:
        bench = of(ast, device, reference)  # type: ignore[operator]
        into.append(bench)
        return bench

    return staticmethod(record)


@pytest.mark.parametrize(("m", "k", "n"), [(64, 96, 128), (8, 16, 32), (36, 40, 64)])
def test_heuristic_register_tiles_match_numpy(m: int, k: int, n: int) -> None:
    # the GPU heuristic's tile: 4 rows x a vector of 8 columns a thread, work-groups over rows and columns
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    out = Tensor(a, device="CL").realize() @ Tensor(b, device="CL").realize()
    assert "float8 acc0[4];" in _source(out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    grad = Tensor(a, device="CL", requires_grad=True)
    (grad @ Tensor(b, device="CL")).relu().sum().backward()
    assert grad.grad is not None
    np.testing.assert_allclose(grad.grad.numpy(), ((a @ b) > 0) @ b.T, rtol=1e-4, atol=1e-4)


def test_fused_matmul_gives_the_python_devices_bits() -> None:
    """The GPU heuristic's tile (4 rows x a vector of 8 columns a thread) accumulates with OpenCL's fma, in k order:
    the PYTHON device's fused kernel, bit for bit, on data where a rounded product before each add would differ."""
    from fusegrad.renderer.cstyle import host_has_fma

    if not host_has_fma():
        pytest.skip("PYTHON fuses as the host CPU does: no FMA here")
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((8, 37)).astype(np.float32), rng.standard_normal((37, 32)).astype(np.float32)
    out = Tensor(a, device="CL").realize() @ Tensor(b, device="CL").realize()
    assert "= fma(" in _source(out)
    expected = (Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")).numpy()
    np.testing.assert_array_equal(out.numpy(), expected)
