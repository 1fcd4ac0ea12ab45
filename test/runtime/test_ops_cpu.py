"""Tests for fusegrad/runtime/ops_cpu.py and runtime/support/compiler_cpu.py: compiling hand-written C with the system
compiler, running it on buffers, compile errors, a missing compiler, and the on-disk compile cache."""

from __future__ import annotations

import ctypes
import os
import pathlib
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fusegrad import diskcache
from fusegrad.device import Buffer, CompileError, Device
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context, ProfileRangeEvent, cpu_events, mv_address
from fusegrad.runtime.ops_cpu import CPUProgram, host_address
from fusegrad.runtime.support.compiler_cpu import ClangCompiler

ADD_SRC = """void add(float* restrict out, const float* restrict a, const float* restrict b) {
  for (int i = 0; i < 4; i++) out[i] = a[i] + b[i];
}
"""


def float_buffer(values: list[float]) -> Buffer:
    return Buffer("CPU", len(values), dtypes.float32, initial_value=np.array(values, dtype=np.float32).tobytes())


def test_compile_and_run_add() -> None:
    lib = Device["CPU"].compiler.compile(ADD_SRC)
    assert lib[:4] == b"\x7fELF"
    prg = Device["CPU"].runtime("add", lib)
    out, a, b = Buffer("CPU", 4, dtypes.float32).allocate(), float_buffer([1, 2, 3, 4]), float_buffer([10, 20, 30, 0.5])
    assert prg(out._buf, a._buf, b._buf) is None
    np.testing.assert_equal(out.numpy(), [11, 22, 33, 4.5])
    elapsed = prg(out._buf, a._buf, b._buf, wait=True)
    assert isinstance(elapsed, float)
    assert elapsed >= 0


def test_variables_are_passed_as_int64() -> None:
    src = (
        "void fill(long long* restrict out, long long n, long long v) { for (long long i = 0; i < n; i++) out[i] = v; }"
    )
    prg = Device["CPU"].runtime("fill", Device["CPU"].compiler.compile(src))
    out = Buffer("CPU", 4, dtypes.int64, initial_value=bytes(32))  # zeroed: a reused allocation holds old bytes
    prg(out._buf, vals=(3, 2**40))
    assert out.numpy().tolist() == [2**40] * 3 + [0]


def test_raw_addresses_work_too() -> None:
    prg = Device["CPU"].runtime("add", Device["CPU"].compiler.compile(ADD_SRC))
    out, a = (ctypes.c_float * 4)(), (ctypes.c_float * 4)(1, 2, 3, 4)
    prg(ctypes.addressof(out), ctypes.addressof(a), ctypes.addressof(a))
    assert list(out) == [2, 4, 6, 8]


def test_missing_function_is_reported() -> None:
    with pytest.raises(ValueError, match="no function 'sub' in the compiled library"):
        CPUProgram(Device["CPU"], "sub", Device["CPU"].compiler.compile(ADD_SRC))


def test_profile_records_a_range_event() -> None:
    prg = Device["CPU"].runtime("add", Device["CPU"].compiler.compile(ADD_SRC))
    out = Buffer("CPU", 4, dtypes.float32).allocate()
    cpu_events.clear()
    with Context(PROFILE=1):
        prg(out._buf, out._buf, out._buf)
    with Context(PROFILE=0):
        prg(out._buf, out._buf, out._buf)
    assert [(e.device, e.name) for e in cpu_events if isinstance(e, ProfileRangeEvent)] == [("CPU", "add")]
    cpu_events.clear()


def test_compile_error_shows_source_and_compiler_output() -> None:
    src = "void broken(float* out) { out[0] = undefined_name; }\n"
    with pytest.raises(
        CompileError, match=r"(?s)failed \(exit code \d+\).*undefined_name.*kernel source:.*1 \| void broken"
    ) as info:
        Device["CPU"].compiler.compile(src)
    assert info.value.src == src
    assert "undefined_name" in info.value.stderr
    assert isinstance(info.value, RuntimeError)


def test_missing_compiler_says_what_was_looked_for() -> None:
    with Context(CPU_CC="/nonexistent/cc"):
        with pytest.raises(
            RuntimeError, match=r"no C compiler found: looked for CPU_CC=/nonexistent/cc.*apt-get install gcc"
        ):
            ClangCompiler().compile(ADD_SRC)
        with pytest.raises(RuntimeError, match="no C compiler found"):
            Device["CPU"].check_usable()


@pytest.fixture
def count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every compiler subprocess run, by argv."""
    calls: list[list[str]] = []
    real_run: Callable[..., Any] = subprocess.run

    def counting_run(args: list[str], *rest: Any, **kwargs: Any) -> Any:
        calls.append(list(args))
        return real_run(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting_run)
    return calls


def unique_add_src() -> str:
    return f"// {uuid.uuid4()}\n{ADD_SRC}"  # a key no earlier run cached


def test_compile_cache_hits_on_the_second_compile(tmp_path: pathlib.Path, count_compiles: list[list[str]]) -> None:
    src, compiler = unique_add_src(), ClangCompiler()
    with Context(CACHEDB=str(tmp_path / "cache.db"), CACHELEVEL=2, CCACHE=1):
        first = compiler.compile_cached(src)
        second = compiler.compile_cached(src)
    assert first == second
    assert len(count_compiles) == 1
    assert "-ffp-contract=off" in count_compiles[0]
    assert "-fopenmp" in count_compiles[0]
    with Context(CACHEDB=str(tmp_path / "cache.db"), CACHELEVEL=2, CCACHE=0):
        compiler.compile_cached(src)
    assert len(count_compiles) == 2


def test_cache_key_holds_compiler_and_flags() -> None:
    key = ClangCompiler().cache_key("x")
    assert isinstance(key, tuple)
    assert key[0] == "x"
    assert isinstance(key[2], list)
    assert "-O2" in key[2]
    assert "-fwrapv" in key[2]  # signed overflow wraps: KERNEL_IR.md §5 relies on it
    with Context(CPU_CC="/nonexistent/cc"):
        assert ClangCompiler().cache_key("x") != key


def test_compile_cache_survives_a_truncated_db(tmp_path: pathlib.Path, count_compiles: list[list[str]]) -> None:
    db, src, compiler = tmp_path / "cache.db", unique_add_src(), ClangCompiler()
    with Context(CACHEDB=str(db), CACHELEVEL=2, CCACHE=1):
        for i in range(5):  # some pages for the truncation to cut
            compiler.compile_cached(f"{src}// {i}\n")
        diskcache.close_all()  # checkpoints the WAL into the file
        db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
        lib = compiler.compile_cached(src)  # the corrupt file is moved aside: a miss, so a recompile
        assert compiler.compile_cached(src) == lib
    assert len(count_compiles) == 6
    assert list(tmp_path.glob("cache.db.corrupt-*"))
    prg = Device["CPU"].runtime("add", lib)
    out, a = Buffer("CPU", 4, dtypes.float32).allocate(), float_buffer([1, 2, 3, 4])
    prg(out._buf, a._buf, a._buf)
    np.testing.assert_equal(out.numpy(), [2, 4, 6, 8])
    diskcache.close_all()


# *** CRASH_REPORT: the last kernel before a crash is on stderr ***

CRASHING_KERNEL = """void crash_here(int* restrict out) {
  volatile int* nowhere = 0;
  out[0] = *nowhere;
}
"""


def test_crash_report_names_the_kernel_that_crashed() -> None:
    code = (
        "import numpy as np\nfrom fusegrad.device import Buffer, Device\nfrom fusegrad.dtype import dtypes\n"
        "dev = Device['CPU']\nprg = dev.runtime('crash_here', dev.compiler.compile_cached(SRC))\n"
        "out = Buffer('CPU', 1, dtypes.int32).allocate()\nprg(out._buf)\n"
    )
    env = {**os.environ, "CRASH_REPORT": "1", "CACHELEVEL": "0"}
    proc = subprocess.run([sys.executable, "-c", f"SRC = {CRASHING_KERNEL!r}\n{code}"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    assert "CRASH_REPORT: source of crash_here:" in proc.stderr
    assert "out[0] = *nowhere;" in proc.stderr
    assert proc.stderr.rstrip().endswith("CRASH_REPORT: running crash_here")


def test_crash_report_prints_source_once_and_names_every_run() -> None:
    code = "from fusegrad import Tensor\nt = Tensor([1, 2])\nprint((t + 1).tolist(), (t + 1).tolist())"
    env = {**os.environ, "CRASH_REPORT": "1", "DEV": "CPU"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[2, 3] [2, 3]"
    assert proc.stderr.count("CRASH_REPORT: source of E_2:") == 1
    assert proc.stderr.count("CRASH_REPORT: running E_2") == 2
    assert "void E_2(" in proc.stderr


def test_crash_report_is_off_by_default() -> None:
    code = "from fusegrad import Tensor\nprint((Tensor([1, 2]) + 1).tolist())"
    env = {k: v for k, v in os.environ.items() if k != "CRASH_REPORT"} | {"DEV": "CPU"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "CRASH_REPORT" not in proc.stderr


def test_crash_report_prints_sources_from_a_warm_cache_and_joined_builds(tmp_path: pathlib.Path) -> None:
    # the second run reads binaries from the disk cache; kernels compiled together share one joined binary
    code = "from fusegrad import Tensor\nt = (Tensor([1, 2, 3]) + 1).contiguous()\nprint((t * t).sum().tolist())"
    env = {**os.environ, "CRASH_REPORT": "1", "DEV": "CPU", "CACHEDB": str(tmp_path / "cache.db")}
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "29"
        names = [line.removeprefix("CRASH_REPORT: running ") for line in proc.stderr.splitlines()
                 if line.startswith("CRASH_REPORT: running ")]  # fmt: skip
        assert len(names) >= 2
        for name in names:
            assert f"CRASH_REPORT: source of {name}:\n" in proc.stderr
            assert f"void {name}(" in proc.stderr


def test_buffers_sit_inside_readable_guard_bytes() -> None:
    # gcc may read up to a vector past a pad's valid lanes (ops_cpu.GUARD_BYTES): every CPU buffer has that many mapped
    # bytes on each side, and stays 64-byte aligned
    from fusegrad.helpers import mv_address
    from fusegrad.runtime.ops_cpu import GUARD_BYTES

    for size in (1, 100, 1024, 4096 // 4):  # 4096 bytes: without the guard the mapping would end right after it
        buf = Buffer("CPU", size, dtypes.float32).allocate()
        view = buf._buf
        mapping = view.obj
        base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
        assert mv_address(view) - base == GUARD_BYTES
        assert mv_address(view) % 64 == 0
        assert len(mapping) >= size * 4 + 2 * GUARD_BYTES
        assert ctypes.string_at(mv_address(view) + size * 4, GUARD_BYTES) == bytes(GUARD_BYTES)  # readable


def test_user_memory_gets_no_guard() -> None:
    data = (ctypes.c_float * 4)(1, 2, 3, 4)
    buf = Buffer("CPU", 4, dtypes.float32).allocate(external_ptr=ctypes.addressof(data))
    from fusegrad.helpers import mv_address

    assert mv_address(buf._buf) == ctypes.addressof(data)  # the user's address as given: no offset
    assert np.frombuffer(buf.as_memoryview(), np.float32).tolist() == [1, 2, 3, 4]


def test_host_address_is_kept_per_allocation() -> None:
    buf = Buffer("CPU", 4, dtypes.float32)
    first = host_address(buf)  # allocates
    assert first == mv_address(buf._buf)
    assert buf._storage is not None
    assert buf._storage.address == first  # kept: later calls read it
    buf.deallocate()
    taker = Buffer("CPU", 4, dtypes.float32).allocate()  # takes the freed memory (the allocator's reuse cache)
    assert host_address(taker) == first
    moved = host_address(buf)  # allocated again, elsewhere
    assert moved == mv_address(buf._buf)
    assert moved != first  # its own address, not the one kept for the old allocation
    view = Buffer("CPU", 2, dtypes.float32, base=buf, offset=8)
    assert host_address(view) == moved + 8
    assert host_address(Buffer("CPU", 0, dtypes.float32)) == 0  # empty: no memory
