"""renderer/stream.py: a kernel bigger than the last-level cache writes its output loops a cache line at a time with
streaming stores. The arithmetic is the same, so the outputs are the plain kernel's bits, at any output alignment."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.codegen import KernelInfo, to_program, vectorize
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.device import Buffer, Device
from fusegrad.dtype import PtrDType, dtypes
from fusegrad.engine.realize import CompiledRunner, get_runner
from fusegrad.helpers import Context
from fusegrad.renderer import stream
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp


@pytest.fixture
def small_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel counts as bigger than the cache, and every output as big enough: tests stay small."""
    monkeypatch.setattr(stream, "min_kernel_bytes", lambda: 0)
    monkeypatch.setattr(stream, "MIN_BUFFER_BYTES", 0)


def kernel_of(*outs: Tensor) -> UOp:
    (ast,) = [ei.ast for ei in Tensor.schedule(*outs) if ei.ast.op is Ops.SINK]
    return ast


def kernel_and_inputs(*outs: Tensor) -> tuple[UOp, dict[int, np.ndarray]]:
    """The one kernel computing `outs` (from realized inputs) and its inputs' values by slot."""
    (ei,) = [ei for ei in Tensor.schedule(*outs) if ei.ast.op is Ops.SINK]
    writes = {int(u.src[0].src[0].arg) for u in ei.ast.src if u.op is Ops.STORE}
    return ei.ast, {s: b.numpy() for s, b in enumerate(ei.bufs) if s not in writes and b is not None}


def source(ast: UOp) -> str:
    return to_program(ast, ClangRenderer()).src


def run(ast: UOp, inputs: dict[int, np.ndarray], offset: int = 0) -> dict[int, np.ndarray]:
    """The kernel on CPU with `inputs` by slot; each output is a view `offset` floats into a bigger buffer (an
    unaligned address for an odd offset). Returns the outputs by slot."""
    prg = to_program(ast, Device["CPU"].renderer)
    globs = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: int(u.arg))
    bufs: list[Buffer] = []
    for g in globs:
        assert isinstance(g.dtype, PtrDType)
        slot, size, dt = int(g.arg), g.dtype.size, g.dtype.base
        if slot in prg.outs:
            base = Buffer("CPU", size + offset, dt).allocate()
            bufs.append(Buffer("CPU", size, dt, base=base, offset=offset * dt.itemsize).allocate())
        else:
            bufs.append(Buffer("CPU", size, dt).allocate().copyin(memoryview(np.ascontiguousarray(inputs[slot]))))
    CompiledRunner(prg)(bufs, {}, wait=True)
    return {s: bufs[s].numpy().copy() for s in prg.outs}


def streamed_lines(src: str) -> int:
    return len(re.findall(r"fg_stream_line\(&", src))


def streamed_equals_plain(ast: UOp, inputs: dict[int, np.ndarray], offset: int, exact: bool = True) -> np.ndarray:
    """The one-output kernel streamed (STREAM_STORES=2) into a view `offset` floats in, checked bit for bit against
    the kernel without streaming stores (not `exact`: to a few units in the last place); returns the streamed
    output."""
    with Context(STREAM_STORES=2):
        assert streamed_lines(source(ast)) == 1
        (streamed,) = run(ast, inputs, offset).values()
    with Context(STREAM_STORES=0):
        (plain,) = run(ast, inputs).values()
    if exact:
        np.testing.assert_array_equal(streamed, plain)
    else:
        np.testing.assert_allclose(streamed, plain, rtol=2e-6, atol=1e-7)
    return streamed


def test_softmax_forward_and_backward_stream_both_outputs(small_caches: None) -> None:
    rng = np.random.default_rng(0)
    a, g = rng.standard_normal((64, 1024)).astype(np.float32), rng.standard_normal((64, 1024)).astype(np.float32)
    x = Tensor(a, requires_grad=True).realize()
    out = x.softmax(-1)
    (out * Tensor(g).realize()).sum().backward()
    ast, inputs = kernel_and_inputs(out, x.grad)
    src = source(ast)
    assert streamed_lines(src) == 2
    assert "fg_sfence();" in src
    streamed = run(ast, inputs)
    with Context(STREAM_STORES=0):
        assert streamed_lines(source(ast)) == 0
        plain = run(ast, inputs)
    assert len(plain) == 2
    for s in plain:
        np.testing.assert_array_equal(streamed[s], plain[s])
    Tensor.realize(out, x.grad)
    e = np.exp(a.astype(np.float64) - a.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), p * (g - (p * g).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-7)


def test_threaded_elementwise_loop_streams_in_its_own_parallel_region(small_caches: None) -> None:
    n = 1 << 20  # enough work for threads
    a, b = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)
    ast = kernel_of(Tensor(a) * 2 + Tensor(b))
    src = source(ast)
    assert streamed_lines(src) == 1
    assert re.search(r"#pragma omp parallel\n\s*\{\n\s*#pragma omp for\n", src), src
    assert re.search(r"fg_sfence\(\);\n\s*\}\n", src)  # each thread fences before the region ends


def test_small_kernels_store_as_usual() -> None:
    # the real thresholds: a 256 KB output of a 768 KB kernel stays in cache for whatever reads it next
    n = 1 << 16
    assert streamed_lines(source(kernel_of(Tensor(np.ones(n, np.float32)) * 2 + Tensor(np.ones(n, np.float32))))) == 0


@pytest.mark.parametrize(("limit", "lines"), [(3 << 20, 1), ((3 << 20) + 4, 0)])
def test_a_kernel_streams_from_the_size_of_the_last_level_cache(
    limit: int, lines: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "min_kernel_bytes", lambda: limit)
    n = 1 << 18  # three buffers of 1 MB: 3 MB in all
    ast = kernel_of(Tensor(np.ones(n, np.float32)) * 2 + Tensor(np.ones(n, np.float32)))
    assert streamed_lines(source(ast)) == lines


def test_forced_streaming_ignores_the_sizes() -> None:
    n = 1 << 12  # 48 KB in all
    ast = kernel_of(Tensor(np.ones(n, np.float32)) * 5 + Tensor(np.ones(n, np.float32)))
    assert streamed_lines(source(ast)) == 0
    with Context(STREAM_STORES=2):
        assert streamed_lines(source(ast)) == 1


def test_last_level_cache_size_read_from_sysfs() -> None:
    size = stream.last_level_cache_bytes()
    assert size >= 1 << 20
    assert size % 1024 == 0


def kernel_cases() -> dict[str, Callable[[], tuple[Tensor, ...]]]:
    rng = np.random.default_rng(1)
    # 15 rows of 41 (one loop of 615 once merged, schedule/merge.py): not whole cache lines
    a = Tensor(rng.standard_normal((15, 41)).astype(np.float32))
    b = Tensor(rng.standard_normal((16, 64)).astype(np.float32))
    return {
        "rows not a multiple of a line": lambda: (a * 2 + 1,),
        "half precision": lambda: (b.cast(dtypes.float16) * 2,),
        "row statistic": lambda: (b.sum(-1),),
    }


@pytest.mark.parametrize("case", list(kernel_cases()))
def test_stores_that_cannot_stream(case: str, small_caches: None) -> None:
    src = source(kernel_of(*kernel_cases()[case]()))
    assert streamed_lines(src) == 0, src


def test_in_place_update_does_not_stream(small_caches: None) -> None:
    t = Tensor(np.ones(4096, np.float32)).contiguous().realize()
    t.assign(t * 2 + 1)
    assert streamed_lines(source(kernel_of(t))) == 0
    t.realize()
    np.testing.assert_array_equal(t.numpy(), np.full(4096, 3, np.float32))


OPS: list[Callable[[Tensor, Tensor], Tensor]] = [
    lambda x, y: x + y,
    lambda x, y: x * y,
    lambda x, y: x - y * 0.5,
    lambda x, y: x.maximum(y),
    lambda x, y: (x > y).where(x, y * 2),
]


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 5),
    lines=st.integers(1, 4),
    ops=st.lists(st.integers(0, len(OPS) - 1), min_size=1, max_size=4),
    offset=st.integers(0, 17),
    seed=st.integers(0, 2**16),
)
def test_streamed_kernel_matches_plain_kernel(rows: int, lines: int, ops: list[int], offset: int, seed: int) -> None:
    """Random elementwise kernels over whole lines: CPU with streaming stores (forced) at a random output offset gives
    the bits of CPU without them and of PYTHON (these ops round alike everywhere)."""
    rng = np.random.default_rng(seed)
    shape = (rows, stream.LINE * lines)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))

    def expression(device: str) -> Tensor:
        x, y = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
        out = x
        for i in ops:
            out = OPS[i](out, y)
        return out

    ast, inputs = kernel_and_inputs(expression("CPU"))
    streamed = streamed_equals_plain(ast, inputs, offset)
    np.testing.assert_array_equal(streamed.reshape(shape), expression("PYTHON").numpy())


def exp_vector_kernel(monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...]) -> tuple[UOp, dict[int, np.ndarray]]:
    """An elementwise exp on a faked AVX-512 host: codegen's exp_vector_opts makes it vector code of whole lines."""
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.standard_normal(shape).astype(np.float32)).realize() for _ in range(2))
    return kernel_and_inputs((a * 0.5 + 1).exp() * b)


@pytest.mark.parametrize("offset", [0, 1, 16])
def test_vector_lines_stream_as_they_are(monkeypatch: pytest.MonkeyPatch, small_caches: None, offset: int) -> None:
    """A store of a whole line as one vector streams without a line array; its loop is fenced inside its own parallel
    region; at any output offset (an unaligned one stores plainly) the bits are the plain kernel's."""
    ast, inputs = exp_vector_kernel(monkeypatch, (1 << 20,))  # enough work for threads
    src = source(ast)
    assert "fg_vline" in src, src
    assert "fg_line0" not in src
    assert re.search(r"#pragma omp parallel\n\s*\{\n\s*#pragma omp for\n", src), src
    assert re.search(r"fg_sfence\(\);\n\s*\}\n", src), src
    streamed = streamed_equals_plain(ast, inputs, offset)
    expected = np.exp(inputs[1].astype(np.float64) * 0.5 + 1) * inputs[2]
    np.testing.assert_allclose(streamed, expected, rtol=2e-6)


def test_unthreaded_vector_loop_is_fenced_after_it(monkeypatch: pytest.MonkeyPatch, small_caches: None) -> None:
    ast, inputs = exp_vector_kernel(monkeypatch, (4, stream.LINE))  # too little work for threads
    src = source(ast)
    assert "omp parallel" not in src
    assert "fg_vline" in src
    assert re.search(r"\}\n\s*fg_sfence\(\);\n\}", src), src  # after the loop, at the kernel's end
    streamed_equals_plain(ast, inputs, 3)


def test_vectors_of_a_longer_upcast_are_fenced_once_per_thread(
    monkeypatch: pytest.MonkeyPatch, small_caches: None
) -> None:
    """An upcast of two vectors (BEAM may pick it) stores in a short loop inside the threaded one: the fence comes
    after the threaded loop, not after each pair of lines."""
    ast, inputs = exp_vector_kernel(monkeypatch, (1 << 20,))
    two = ast.replace(arg=KernelInfo(opts_to_apply=(Opt(OptOps.UPCAST, 0, 2 * stream.LINE),)))
    src = source(two)
    assert src.count("fg_vline =") == 1, src
    assert src.count("fg_sfence();") == 1, src
    assert re.search(r"fg_sfence\(\);\n\s*\}\n\}", src), src  # the region's last statement, at the kernel's end
    streamed_equals_plain(two, inputs, 0)


def test_small_vector_kernels_store_as_usual(monkeypatch: pytest.MonkeyPatch) -> None:
    ast, _ = exp_vector_kernel(monkeypatch, (1 << 12,))
    src = source(ast)
    assert "float16" in src
    assert "fg_stream_line" not in src
    assert "fg_sfence" not in src


def test_flag_compiles_its_own_runner(small_caches: None) -> None:
    # the runner cache keys kernels by the flags that change their source: turning STREAM_STORES off in a Context
    # takes effect for a kernel already compiled with it on
    n = 1 << 12
    ast = kernel_of(Tensor(np.ones(n, np.float32)) * 3 + Tensor(np.ones(n, np.float32)))
    on = get_runner("CPU", ast)
    with Context(STREAM_STORES=0):
        off = get_runner("CPU", ast)
    assert streamed_lines(on.p.src) == 1
    assert streamed_lines(off.p.src) == 0


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_stream_helpers_compile_with_gcc_and_clang(compiler: str, tmp_path: Path) -> None:
    # GCC spells the x86 streaming store as its builtin, Clang has only the generic non-temporal store (CPU_CC=clang)
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    src = stream.render_stream_helpers() + "void f(float* p, const float* v) { fg_stream_line(p, v); fg_sfence(); }\n"
    (tmp_path / "k.c").write_text(src)
    x86 = platform.machine() in ("x86_64", "AMD64")
    for flags in (["-march=native"], [], *([["-march=x86-64-v3"]] if x86 else [])):  # AVX-512, SSE2, AVX2
        cmd = [compiler, "-O2", "-Werror=implicit-function-declaration", *flags, "-c", "k.c", "-o", "k.o"]
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


ROW_OPS: list[Callable[[Tensor], Tensor]] = [
    lambda x: x.softmax(-1),
    lambda x: x - x.mean(-1, keepdim=True),
    lambda x: x.layernorm(-1),
    lambda x: x * x.square().sum(-1, keepdim=True).rsqrt(),
]


@settings(max_examples=20, deadline=None)
@given(
    rows=st.integers(1, 6),
    lines=st.integers(1, 8),
    op=st.integers(0, len(ROW_OPS) - 1),
    offset=st.integers(0, 17),
    seed=st.integers(0, 2**16),
)
def test_streamed_row_kernel_matches_plain_kernel(rows: int, lines: int, op: int, offset: int, seed: int) -> None:
    """Row kernels (a statistic, then the row written): the streamed kernel gives the plain kernel's values and
    PYTHON's to rounding. Not the plain kernel's bits: a row's LANES partials are summed by an `omp simd reduction`
    loop, whose order GCC may choose differently in the two functions (2 rows of 128 on AVX-512: 25 of 256 outputs a
    unit in the last place apart, the same source loop in both)."""
    rng = np.random.default_rng(seed)
    shape = (rows, stream.LINE * lines)
    a = rng.standard_normal(shape).astype(np.float32)
    ast, inputs = kernel_and_inputs(ROW_OPS[op](Tensor(a).realize()))
    streamed = streamed_equals_plain(ast, inputs, offset, exact=False)
    expected = ROW_OPS[op](Tensor(a, device="PYTHON")).numpy()
    np.testing.assert_allclose(streamed.reshape(shape), expected, rtol=1e-4, atol=1e-5)
