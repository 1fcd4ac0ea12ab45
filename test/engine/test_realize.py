"""Tests for fusegrad/engine/realize.py: ExecItem lowering and running (hand-written ProgramSpecs and hand-built
kernel ASTs), GlobalCounters, profile events, DEBUG=2 lines, copies, views, run_schedule, CPU vs PYTHON on one AST."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fusegrad.device import Buffer, Device
from fusegrad.dtype import DType, dtypes
from fusegrad.engine import realize
from fusegrad.engine.realize import (
    BufferCopy,
    BufferXfer,
    CompiledRunner,
    ExecItem,
    ViewOp,
    get_program,
    lower_schedule,
    run_schedule,
)
from fusegrad.helpers import Context, GlobalCounters, ProfilePointEvent, ProfileRangeEvent, cpu_events
from fusegrad.renderer import Estimates, ProgramSpec
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp, tracked_ctxs, tracked_keys

f32, i32 = dtypes.float32, dtypes.int32
ADD_SRC = """void add4(float* restrict out, const float* restrict a, const float* restrict b) {
  for (int i = 0; i < 4; i++) out[i] = a[i] + b[i];
}
"""
FILL_SRC = "void fill(int* restrict out, long long n, long long v) { for (long long i = 0; i < n; i++) out[i] = v; }"


@pytest.fixture(autouse=True)
def clean_state() -> Iterator[None]:
    cpu_events.clear()
    GlobalCounters.reset()
    yield
    cpu_events.clear()


def buffer(device: str, values: list[float] | list[int], dt: DType) -> Buffer:
    array = np.array(values, dtype=np.float32 if dt == f32 else np.int32)
    return Buffer(device, len(values), dt, initial_value=array.tobytes())


def add_program() -> ProgramSpec:
    return ProgramSpec("add4", ADD_SRC, "CPU", UOp.sink(), [], globals=[0, 1, 2], outs=[0], ins=[1, 2],
                       estimates=Estimates(ops=4, lds=48, mem=48))  # fmt: skip


def fill_program() -> ProgramSpec:
    variables = [UOp.variable("n", 0, 4), UOp.variable("v", 0, 100)]
    return ProgramSpec("fill", FILL_SRC, "CPU", UOp.sink(), [], vars=variables, globals=[0], outs=[0])


# *** running hand-written programs ***


def test_exec_item_runs_and_counts() -> None:
    runner = CompiledRunner(add_program())
    out = Buffer("CPU", 4, f32)  # allocated by run
    item = ExecItem(UOp.sink(), [out, buffer("CPU", [1, 2, 3, 4], f32), buffer("CPU", [4, 3, 2, 1.5], f32)], prg=runner)
    elapsed = item.run(wait=True)
    assert out.numpy().tolist() == [5, 5, 5, 5.5]
    assert isinstance(elapsed, float)
    assert GlobalCounters.time_sum_s == elapsed
    assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem) == (1, 4, 48)
    assert not runner.first_run
    assert runner.display_name == "add4"
    assert runner.device == "CPU"
    assert item.run() is None
    assert GlobalCounters.kernel_count == 2
    item.run(do_update_stats=False)
    assert GlobalCounters.kernel_count == 2


def test_profile_records_an_exec_event() -> None:
    bufs = [Buffer("CPU", 4, f32), buffer("CPU", [1, 2, 3, 4], f32), buffer("CPU", [1, 1, 1, 1], f32)]
    with Context(PROFILE=1):
        ExecItem(UOp.sink(), list(bufs), prg=CompiledRunner(add_program())).run()
    point = next(e for e in cpu_events if isinstance(e, ProfilePointEvent))
    assert (point.device, point.name, point.key) == ("CPU", "exec", "add4")
    assert point.arg == {"metadata": None, "var_vals": {}, "bufs": [b.trace_num for b in bufs], "inputs": [1, 2],
                         "outputs": [0]}  # fmt: skip
    assert [(e.device, e.name) for e in cpu_events if isinstance(e, ProfileRangeEvent)][-1] == ("CPU", "add4")


def test_eager_launch_calls_the_bare_kernel_once_it_has_run() -> None:
    runner = CompiledRunner(add_program())
    bufs = [Buffer("CPU", 4, f32), buffer("CPU", [1, 2, 3, 4], f32), buffer("CPU", [4, 3, 2, 1.5], f32)]
    bufs[0].ensure_allocated()
    assert runner(bufs, {}) is None
    assert isinstance(runner._direct, tuple)  # the CPU program handed out its C function
    elapsed = runner(bufs, {}, wait=True)
    assert isinstance(elapsed, float)
    assert elapsed > 0
    assert bufs[0].numpy().tolist() == [5, 5, 5, 5.5]
    fresh = Buffer("CPU", 4, f32)  # not allocated yet: the bare call's address allocates it
    runner([fresh, bufs[1], bufs[2]], {})
    assert fresh.numpy().tolist() == [5, 5, 5, 5.5]


def test_eager_launch_under_profile_keeps_the_kernel_span() -> None:
    runner = CompiledRunner(add_program())
    bufs = [Buffer("CPU", 4, f32), buffer("CPU", [1, 2, 3, 4], f32), buffer("CPU", [1, 1, 1, 1], f32)]
    ExecItem(UOp.sink(), list(bufs), prg=runner).run()  # the bare call is ready
    cpu_events.clear()
    with Context(PROFILE=1):
        ExecItem(UOp.sink(), list(bufs), prg=runner).run()
    assert [(e.device, e.name) for e in cpu_events if isinstance(e, ProfileRangeEvent)][-1] == ("CPU", "add4")


def test_eager_launch_of_a_device_without_bare_calls() -> None:
    out, a = Buffer("PYTHON", 3, f32), buffer("PYTHON", [1, 2, 3], f32)
    runner = ExecItem(double_ast(3), [out, a]).lower().prg
    assert isinstance(runner, CompiledRunner)
    runner([out.ensure_allocated(), a], {})
    assert runner._direct is False  # PYTHON's programs have no C function: the program's own call, every launch
    assert out.numpy().tolist() == [2, 4, 6]


def test_debug_2_prints_one_line_per_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    bufs = [Buffer("CPU", 4, f32), buffer("CPU", [1, 2, 3, 4], f32), buffer("CPU", [1, 1, 1, 1], f32)]
    with Context(DEBUG=2):
        ExecItem(UOp.sink(), list(bufs), prg=CompiledRunner(add_program())).run()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "*** CPU" in line
    assert "add4" in line
    assert "arg  3" in line
    assert "GFLOPS" in line
    assert "GB/s" in line


def test_variables_and_fixedvars() -> None:
    runner = CompiledRunner(fill_program())
    out = buffer("CPU", [0, 0, 0, 0], i32)
    ExecItem(UOp.sink(), [out], prg=runner, fixedvars={"v": 9}).run({"n": 2})
    assert out.numpy().tolist() == [9, 9, 0, 0]
    ExecItem(UOp.sink(), [out], prg=runner).run({"n": 3, "v": 5})
    assert out.numpy().tolist() == [5, 5, 5, 0]
    with pytest.raises(ValueError, match=r"fill: no value for variables \['v'\]: got values for \['n'\]"):
        ExecItem(UOp.sink(), [out], prg=runner).run({"n": 1})


def test_missing_buffers_and_unknown_asts_are_errors() -> None:
    with pytest.raises(ValueError, match=r"buffer slots \[1\] are None"):
        ExecItem(UOp.sink(), [Buffer("CPU", 1, f32), None]).run()
    with pytest.raises(ValueError, match=r"can't run a Ops\.CONST kernel"):
        ExecItem(UOp.const(f32, 1.0), [Buffer("CPU", 1, f32)]).lower()


def test_compiled_runner_pickles() -> None:
    import pickle

    runner = pickle.loads(pickle.dumps(CompiledRunner(add_program())))
    assert runner.lib
    assert runner.p.name == "add4"


# *** lowering kernel ASTs ***


def glob(slot: int, dt: DType, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), arg=slot)


def double_ast(n: int) -> UOp:
    """out[i] = a[i] * 2 (KERNEL_IR.md §1)."""
    rng = UOp.range(n, 0)
    return UOp.sink(glob(0, f32, n).index(rng).store(glob(1, f32, n).index(rng).load() * 2.0))


def test_lower_compiles_a_sink_once_per_device() -> None:
    ast = double_ast(3)
    out, a = Buffer("CPU", 3, f32), buffer("CPU", [1, 2, 3.5], f32)
    item = ExecItem(ast, [out, a]).lower()
    assert isinstance(item.prg, CompiledRunner)
    assert item.prg.p.device == "CPU"
    item.run()
    assert out.numpy().tolist() == [2, 4, 7]
    assert ExecItem(ast, [out, a]).lower().prg is item.prg  # the method cache
    other = ExecItem(ast, [Buffer("CPU:1", 3, f32), buffer("CPU:1", [1, 1, 1], f32)]).lower().prg
    assert isinstance(other, CompiledRunner)
    assert other is not item.prg
    assert other.p.device == "CPU:1"
    assert other.lib == item.prg.lib


def test_get_program_is_traced_under_the_kernel_name() -> None:
    ast = double_ast(5)
    start = len(tracked_keys)
    with Context(TRACK_MATCH_STATS=2):
        program = get_program(ast, Device["CPU"].renderer)
    try:
        assert program.name.startswith("E_5")
        assert "void " + program.function_name in program.src
        assert tracked_keys[start].display_name == program.name
        assert tracked_keys[start].keys == (program.function_name, ast)
    finally:
        del tracked_keys[start:], tracked_ctxs[start:]


def test_copies_between_devices_of_one_type_are_transfers() -> None:
    src, dest = buffer("CPU", [1, 2, 3], i32), Buffer("CPU:1", 3, i32)
    xfer = ExecItem(UOp(Ops.COPY), [dest, src])
    assert xfer.run(wait=True) is not None
    assert isinstance(xfer.prg, BufferXfer)
    assert "xfer" in xfer.prg.display_name
    assert dest.numpy().tolist() == [1, 2, 3]
    back = ExecItem(UOp(Ops.COPY), [Buffer("CPU", 3, i32), dest]).lower()
    assert isinstance(back.prg, BufferXfer)
    # another device type, or the same device, stays a plain copy
    assert type(ExecItem(UOp(Ops.COPY), [Buffer("PYTHON", 3, i32), src]).lower().prg) is BufferCopy
    assert type(ExecItem(UOp(Ops.COPY), [Buffer("CPU", 3, i32), src]).lower().prg) is BufferCopy


def test_lower_schedule_pops_and_lowers_each_item() -> None:
    from fusegrad import Tensor

    schedule = (Tensor([1.0, 2.0]).realize() * 3).schedule()
    pairs = list(lower_schedule(schedule))
    assert schedule == []  # popped, like run_schedule, so buffers can be freed as it goes
    assert len(pairs) == 1
    item, lowered = pairs[0]
    assert item is lowered  # a scheduled step and what runs it are one ExecItem
    assert isinstance(lowered.prg, CompiledRunner)
    assert lowered.prg.p.name == lowered.prg.display_name


def test_copy_and_view_runners() -> None:
    src, dest = buffer("CPU", [1, 2, 3], i32), Buffer("PYTHON", 3, i32)
    with Context(PROFILE=1):
        copy = ExecItem(UOp(Ops.COPY), [dest, src])
        copy.run()
    assert isinstance(copy.prg, BufferCopy)
    assert dest.numpy().tolist() == [1, 2, 3]
    assert "copy" in copy.prg.display_name
    assert "PYTHON <- CPU" in copy.prg.display_name
    point = next(e for e in cpu_events if isinstance(e, ProfilePointEvent))
    assert (point.arg["inputs"], point.arg["outputs"]) == ([1], [0])
    assert any(isinstance(e, ProfileRangeEvent) and e.is_copy and e.name == "CPU -> PYTHON" for e in cpu_events)
    with pytest.raises(ValueError, match="copy: buffer mismatch"):
        ExecItem(UOp(Ops.COPY), [Buffer("CPU", 2, i32), src]).run()
    base = buffer("CPU", [1, 2, 3], i32)
    view = ExecItem(UOp(Ops.BUFFER_VIEW), [base.view(1, i32, 4), base])
    assert view.run() is None
    assert isinstance(view.prg, ViewOp)
    with pytest.raises(RuntimeError, match="is not a view of input"):
        ExecItem(UOp(Ops.BUFFER_VIEW), [Buffer("CPU", 1, i32), base]).run()


def test_run_schedule_pops_items_and_feeds_capturing() -> None:
    out, a = Buffer("CPU", 3, f32), buffer("CPU", [1, 2, 3], f32)
    captured: list[ExecItem] = []

    class Capture:
        def add(self, ei: ExecItem) -> None:
            captured.append(ei)

    schedule = [ExecItem(double_ast(3), [out, a]), ExecItem(double_ast(3), [a, out])]
    realize.capturing.append(Capture())
    try:
        run_schedule(schedule)
    finally:
        realize.capturing.clear()
    assert schedule == []
    assert len(captured) == 2
    assert a.numpy().tolist() == [4, 8, 12]
    assert GlobalCounters.kernel_count == 2


# *** the same AST on CPU (C) and PYTHON (the interpreter) ***


def sum_ast() -> UOp:
    """out[i] = sum_j a[i*5 + j]: a REDUCE over j."""
    row, col = UOp.range(3, 0), UOp.range(5, 1, AxisType.REDUCE)
    total = glob(1, f32, 15).index(row * 5 + col).load().reduce(col, arg=Ops.ADD)
    return UOp.sink(glob(0, f32, 3).index(row).store(total))


def wrap_ast() -> UOp:
    """out[i] = a[i] * 65536 + (i < 2 ? a[i+2] : 0) on int32: a gated load, wrapping multiplication."""
    rng = UOp.range(4, 0)
    a = glob(1, i32, 4)
    gated = a.index(rng + 2, rng < 2).load()
    return UOp.sink(glob(0, i32, 4).index(rng).store(a.index(rng).load() * 65536 + gated))


def run_on(device: str, ast: UOp, out: tuple[int, DType], values: list[float] | list[int], dt: DType) -> list[float]:
    result = Buffer(device, out[0], out[1])
    ExecItem(ast, [result, buffer(device, values, dt)]).run()
    return list(result.numpy().tolist())


@pytest.mark.parametrize(
    ("ast", "out", "values", "dt"),
    [(double_ast(4), (4, f32), [0.1, -2.5, 1e30, 3.0], f32),
     (sum_ast(), (3, f32), [0.1 * i for i in range(15)], f32),
     (wrap_ast(), (4, i32), [40000, -40000, 7, 2**31 - 1], i32)],
    ids=["elementwise", "reduce", "int32-wrap-and-gate"],
)  # fmt: skip
def test_cpu_and_python_agree(ast: UOp, out: tuple[int, DType], values: list[float], dt: DType) -> None:
    cpu, python = run_on("CPU", ast, out, values, dt), run_on("PYTHON", ast, out, values, dt)
    assert cpu == python
    if dt == i32:
        with np.errstate(over="ignore"):
            a = np.array(values, np.int32)
            assert cpu == (a * np.int32(65536) + np.concatenate([a[2:], np.zeros(2, np.int32)])).tolist()


# *** compile_ahead: a schedule's new kernels built in batches, several compilers at once ***


@pytest.fixture
def compile_calls(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> Iterator[list[str]]:
    """Sources handed to the CPU compiler, with an empty compile cache and empty method cache for the test."""
    from fusegrad.runtime.support.compiler_cpu import ClangCompiler

    calls: list[str] = []
    real = ClangCompiler.compile

    def compile_and_count(self: ClangCompiler, src: str) -> bytes:
        if "fusegrad_probe" not in src:  # the toolchain probe is not a kernel
            calls.append(src)
        return real(self, src)

    monkeypatch.setattr(ClangCompiler, "compile", compile_and_count)
    monkeypatch.setattr(realize, "method_cache", {})
    with Context(CACHEDB=str(tmp_path) + "/cache.db"):
        yield calls


def _distinct_kernels(k: float) -> tuple[list[object], list[np.ndarray]]:
    from fusegrad import Tensor

    outs = [(Tensor.arange(n).float() * k + n).contiguous() for n in range(3, 9)]  # names differ: E_3 ... E_8
    return outs, [np.arange(n, dtype=np.float32) * np.float32(k) + n for n in range(3, 9)]


def test_compile_ahead_builds_new_kernels_in_batches(compile_calls: list[str]) -> None:
    from fusegrad import Tensor

    outs, want = _distinct_kernels(1.25)
    with Context(PARALLEL_COMPILE=2):
        Tensor.realize(*outs)  # type: ignore[arg-type]  # Tensors
    assert len(compile_calls) == 2  # 6 kernels in 2 batches of 3, one compiler run each
    assert all(src.count("void E_") == 3 for src in compile_calls)
    for out, expected in zip(outs, want, strict=True):
        np.testing.assert_allclose(out.numpy(), expected)  # type: ignore[attr-defined]  # a Tensor


def test_compile_ahead_can_be_off(compile_calls: list[str]) -> None:
    from fusegrad import Tensor

    outs, want = _distinct_kernels(0.75)
    with Context(PARALLEL_COMPILE=1):
        Tensor.realize(*outs)  # type: ignore[arg-type]  # Tensors
    assert len(compile_calls) == 6  # one run per kernel, as each is lowered
    np.testing.assert_allclose(outs[0].numpy(), want[0])  # type: ignore[attr-defined]  # a Tensor


def test_compile_batches_keep_same_named_kernels_apart() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from fusegrad import Tensor

    ast = (Tensor.arange(8).float() * 2.5).contiguous().schedule()[-1].ast
    program = get_program(ast, Device["CPU"].renderer)
    renamed = [program, ProgramSpec(**{**vars(program), "src": program.src.replace("2.5f", "3.5f")})]
    with ThreadPoolExecutor(2) as pool:
        batches = realize._CompileBatches(pool, 4)
        for n, p in enumerate([*renamed, renamed[0]]):
            batches.add(("CPU", type(Device["CPU"].compiler), bytes([n]), (0, 0), True), p)
        results = list(batches.results())
    assert [len(batch) for batch, _ in batches.jobs] == [1, 1, 1]  # one binary can't hold two kernels of one name
    assert [p.src for _, p, _ in results] == [p.src for p in [*renamed, renamed[0]]]


def test_compile_cached_many_falls_back_to_one_by_one(tmp_path: object) -> None:
    from fusegrad.device import CompileError
    from fusegrad.runtime.support.compiler_cpu import ClangCompiler

    good = ADD_SRC
    bad = "void broken(float* out) { out[0] = missing; }\n"
    with Context(CACHEDB=str(tmp_path) + "/cache.db"):
        compiler = ClangCompiler()
        libs = compiler.compile_cached_many([good, good.replace("add4", "add4b")])
        assert libs[0] == libs[1]  # one binary holding both kernels, cached under each source
        assert compiler.compile_cached(good) == libs[0]
        with pytest.raises(CompileError, match="missing") as err:
            compiler.compile_cached_many([good.replace("add4", "add4c"), bad])
        assert err.value.src == bad  # the error names the kernel that failed, not the joined text


def test_profile_has_schedule_and_compile_spans_on_the_host_track(compile_calls: list[str]) -> None:
    from fusegrad import Tensor

    outs, _ = _distinct_kernels(2.75)
    cpu_events.clear()
    with Context(PROFILE=1):
        Tensor.realize(*outs)  # type: ignore[arg-type]  # Tensors
    host = [str(e.name) for e in cpu_events if isinstance(e, ProfileRangeEvent) and e.device == "TINY"]
    cpu_events.clear()
    assert "create_schedule" in host
    assert any(name.startswith("compile 6 kernels") for name in host)


# *** dropped linear programs ***


def matmul_ast() -> UOp:
    """A 64x64 matmul's kernel: heuristics tile it (NOOPT renders far fewer nodes)."""
    from fusegrad import Tensor

    a, b = Tensor.ones(64, 64).contiguous().realize(), Tensor.ones(64, 64).contiguous().realize()
    return (a @ b).schedule()[-1].ast


def test_dropped_uops_render_again_as_the_same_nodes() -> None:
    ast = double_ast(7)
    out, a = Buffer("CPU", 7, f32), buffer("CPU", [1, 2, 3, 4, 5, 6, 7], f32)
    runner = ExecItem(ast, [out, a]).lower().prg
    assert isinstance(runner, CompiledRunner)
    before = list(runner.p.uops)  # alive here, so equal nodes rendered again are these very nodes
    runner.drop_uops()
    assert runner.program.uops == []
    ExecItem(ast, [out, a], prg=runner).run()  # a launch needs no linear program
    assert out.numpy().tolist() == [2, 4, 6, 8, 10, 12, 14]
    assert runner.p.uops == before
    assert all(x is y for x, y in zip(runner.p.uops, before, strict=True))
    assert runner.program.uops == before  # rendered once, then held


def test_dropped_uops_render_under_the_flags_they_were_made_with() -> None:
    ast = matmul_ast()
    with Context(NOOPT=1):
        runner = CompiledRunner(get_program(ast, Device["CPU"].renderer))
        plain = list(runner.p.uops)
    assert len(get_program(ast, Device["CPU"].renderer).uops) != len(plain)  # the flag matters for this kernel
    runner.drop_uops()
    assert runner.p.uops == plain


def test_a_pickled_runner_keeps_its_uops_dropped() -> None:
    import pickle

    runner = CompiledRunner(get_program(double_ast(5), Device["CPU"].renderer))
    before = list(runner.p.uops)
    runner.drop_uops()
    again = pickle.loads(pickle.dumps(runner))
    assert again.program.uops == []
    assert again.p.uops == before


def test_viz_keeps_the_uops() -> None:
    runner = CompiledRunner(get_program(double_ast(6), Device["CPU"].renderer))
    with Context(TRACK_MATCH_STATS=2):
        runner.drop_uops()
    assert runner.program.uops


def test_kernels_compiled_ahead_have_one_runner(compile_calls: list[str]) -> None:
    from fusegrad import Tensor

    outs, want = _distinct_kernels(1.5)
    with Context(PARALLEL_COMPILE=2):
        Tensor.realize(*outs)  # type: ignore[arg-type]  # Tensors
    runners = list(realize.method_cache.values())
    assert len(runners) == 12  # each kernel under its device's key and the base key
    assert len({id(r) for r in runners}) == 6  # one runner (one load of the binary) for both
    np.testing.assert_allclose(outs[-1].numpy(), want[-1])  # type: ignore[attr-defined]  # a Tensor
