"""Tests for fusegrad/device.py: the Device registry, Buffer (lazy allocation, views, copies, pickling, profile events,
GlobalCounters), the LRU allocator with its retry on MemoryError, MAX_BUFFER_SIZE and the device profile events."""

from __future__ import annotations

import gc
import mmap
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal

import numpy as np
import pytest

from fusegrad.device import (
    HUGEPAGE_BYTES,
    Allocator,
    Buffer,
    BufferSpec,
    Compiled,
    Compiler,
    Device,
    MallocAllocator,
    ProfileDeviceEvent,
    ProfileGraphEntry,
    ProfileGraphEvent,
    _Device,
    canonicalize_device,
    enumerate_devices_str,
    host_memory,
)
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context, GlobalCounters, ProfilePointEvent, mv_address, to_mv


@pytest.fixture(autouse=True)
def clean_profile() -> Iterator[None]:
    Buffer.profile_events.clear()
    yield
    Buffer.profile_events.clear()


def int_buffer(device: str, values: list[int]) -> Buffer:
    return Buffer(device, len(values), dtypes.int32, initial_value=np.array(values, dtype=np.int32).tobytes())


# *** registry ***


def test_names_are_canonicalised() -> None:
    assert Device["cpu"] is Device["CPU"] is Device["CPU:0"]
    assert Device["cpu"].device == "CPU"
    assert Device.canonicalize("disk:/tmp/Some.File") == "DISK:/tmp/Some.File"
    assert Device.canonicalize("cpu:10") == "CPU:10"


def test_numbered_devices_are_separate_instances() -> None:
    assert Device["cpu:1"] is not Device["CPU"]
    assert Device["cpu:1"].device == "CPU:1"
    assert Device["CPU:1"] is Device["cpu:1"]


def test_canonicalize_device_tuples() -> None:
    assert canonicalize_device(("cpu", "CPU:1")) == ("CPU", "CPU:1")
    assert canonicalize_device(["cpu:0"]) == "CPU"
    assert canonicalize_device("python") == "PYTHON"
    with Context(DEV="python"):
        assert canonicalize_device(None) == "PYTHON"


def test_unknown_device_lists_the_available_ones() -> None:
    expected = r"unknown device 'FOO:1': expected one of CL, CPU, CUDA, DISK, NPY, NULL, PYTHON"
    with pytest.raises(ValueError, match=expected):
        Device["foo:1"]


def test_default_comes_from_dev_and_cant_be_set() -> None:
    with Context(DEV="python"):
        assert Device.DEFAULT == "PYTHON"
        assert Device.default is Device["PYTHON"]
    with Context(DEV=""):
        assert Device.DEFAULT in ("CPU", "PYTHON")
    with pytest.raises(AttributeError, match=r"DEV=NULL.*Context\(DEV='NULL'\)"):
        Device.DEFAULT = "NULL"  # the setter exists only to raise


def test_default_falls_back_to_python_without_a_c_compiler() -> None:
    registry = _Device()  # a fresh registry, so the real one keeps its choice
    with Context(DEV="", CPU_CC="/nonexistent/cc"):
        assert registry.DEFAULT == "PYTHON"
        assert list(registry.get_available_devices()) == ["PYTHON"]
    with Context(DEV=""):
        assert _Device()._select_device() == "CPU"


def test_enumerate_devices_reports_pass_and_fail() -> None:
    lines = {line.split(":")[0].strip(" *"): line for line in enumerate_devices_str()}
    assert sorted(lines) == ["CL", "CPU", "CUDA", "NULL", "PYTHON"]
    assert all("PASS" in lines[name] for name in ("CPU", "NULL", "PYTHON")), lines
    # the GPU backends pass where their driver is, else fail with the reason (CUDA names libcuda without one)
    assert all("PASS" in lines[name] or ("FAIL" in lines[name] and "Error:" in lines[name]) for name in ("CL", "CUDA"))
    with Context(CPU_CC="/nonexistent/cc"):
        cpu_line = next(line for line in enumerate_devices_str() if " CPU " in line)
    assert "FAIL" in cpu_line
    assert "no C compiler found" in cpu_line


def test_python_dash_m_lists_devices() -> None:
    proc = subprocess.run([sys.executable, "-m", "fusegrad.device"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    names = [line.split(":")[0].strip(" *") for line in proc.stdout.splitlines()]
    assert names == ["CL", "CPU", "CUDA", "NULL", "PYTHON"]
    assert proc.stdout.count("PASS") + proc.stdout.count("FAIL") == 5


def test_compiled_without_parts_raises() -> None:
    bare = Compiled("BARE", MallocAllocator(Device["CPU"]), None, None, None)
    with pytest.raises(RuntimeError, match="BARE: this device has no renderer"):
        _ = bare.renderer
    with pytest.raises(RuntimeError, match="BARE: this device has no compiler"):
        _ = bare.compiler
    with pytest.raises(RuntimeError, match="BARE: this device can't run programs"):
        bare.runtime("f", b"")


def test_default_compiler_passes_source_through() -> None:
    assert Compiler().compile_cached("int x;") == b"int x;"


# *** Buffer: allocation ***


def test_buffer_is_lazy_and_counts_memory() -> None:
    used, on_cpu = GlobalCounters.mem_used, GlobalCounters.mem_used_per_device["CPU"]
    buf = Buffer("cpu", 4, dtypes.float32)
    assert buf.device == "CPU"
    assert buf.nbytes == 16
    assert not buf.is_allocated()
    assert GlobalCounters.mem_used == used
    assert buf.ensure_allocated() is buf
    assert buf.is_allocated()
    assert GlobalCounters.mem_used == used + 16
    assert GlobalCounters.mem_used_per_device["CPU"] == on_cpu + 16
    with pytest.raises(RuntimeError, match="already allocated"):
        buf.allocate()
    buf.deallocate()
    assert not buf.is_allocated()
    assert GlobalCounters.mem_used == used
    with pytest.raises(RuntimeError, match="not allocated"):
        buf.deallocate()


def test_del_frees_the_buffer() -> None:
    used = GlobalCounters.mem_used
    buf = Buffer("CPU", 10, dtypes.int64).allocate()
    assert GlobalCounters.mem_used == used + 80
    del buf
    assert GlobalCounters.mem_used == used


def test_buffer_finalizer_raises_outside_shutdown_and_opens_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = Buffer("CPU", 2, dtypes.int32)
    assert buf._allocator is None  # the allocator (and its device) is looked up on first allocation
    buf.allocate()
    assert buf.allocator is Device["CPU"].allocator

    def broken(self: Buffer) -> None:
        raise OSError("free failed")

    monkeypatch.setattr(Buffer, "deallocate", broken)
    with pytest.raises(OSError, match="free failed"):  # only interpreter shutdown silences a finalizer's error
        buf.__del__()
    monkeypatch.undo()
    buf.deallocate()


def test_buffer_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="dtype must be a DType"):
        Buffer("CPU", 4, "float32")  # type: ignore[arg-type]  # the wrong type is the point
    with pytest.raises(ValueError, match="size must be >= 0"):
        Buffer("CPU", -1, dtypes.float32)
    with pytest.raises(ValueError, match="can't have an offset"):
        Buffer("CPU", 4, dtypes.float32, offset=4)


def test_buffer_repr() -> None:
    assert repr(Buffer("CPU", 4, dtypes.float32)) == "<buf real:False device:CPU size:4 dtype:dtypes.float>"


def test_uop_buffers_are_collected() -> None:
    from fusegrad.uop.ops import UOp

    def count() -> int:
        gc.collect()
        # issubclass(type(x)): isinstance reads x.__class__, which warns on torch's deprecated module proxies
        return sum(issubclass(type(x), Buffer) for x in gc.get_objects())

    before = count()
    node = UOp.new_buffer("NULL", 10, dtypes.char)
    node.buffer.allocate()
    del node
    assert count() == before


# *** Buffer: data ***


def test_copyin_copyout_numpy() -> None:
    buf = Buffer("CPU", 4, dtypes.float32).allocate()
    buf.copyin(np.array([1, 2, 3, 4], dtype=np.float32).data)
    np.testing.assert_equal(buf.numpy(), [1, 2, 3, 4])
    out = bytearray(16)
    assert buf.copyout(memoryview(out)).tobytes() == np.array([1, 2, 3, 4], dtype=np.float32).tobytes()
    with pytest.raises(ValueError, match=r"copyin: size mismatch: got 8 bytes, expected 16 \(4 x dtypes.float\)"):
        buf.copyin(memoryview(bytes(8)))
    with pytest.raises(RuntimeError, match="copyin: buffer is not allocated"):
        Buffer("CPU", 2, dtypes.int8).copyin(memoryview(bytes(2)))


def test_as_memoryview_copies_unless_zero_copy() -> None:
    buf = int_buffer("CPU", [1, 2, 3])
    copy, shared = buf.as_memoryview(), buf.as_memoryview(allow_zero_copy=True)
    shared.cast("i")[0] = 7
    assert copy.cast("i").tolist() == [1, 2, 3]
    assert buf.numpy().tolist() == [7, 2, 3]


def test_numpy_needs_a_numpy_dtype() -> None:
    with pytest.raises(TypeError, match=r"no numpy dtype for dtypes\.bfloat16"):
        Buffer("CPU", 2, dtypes.bfloat16).allocate().numpy()


def test_opaque_numpy_memory_is_adopted() -> None:
    array = np.arange(4, dtype=np.int32)
    buf = Buffer("CPU", 4, dtypes.int32, opaque=array)
    assert buf.options.nolru
    assert buf.numpy().tolist() == [0, 1, 2, 3]
    buf.copyin(np.full(4, 9, dtype=np.int32).data)
    assert array.tolist() == [9, 9, 9, 9]  # the same memory


def test_copy_from_across_devices() -> None:
    src = int_buffer("CPU", [5, 6, 7])
    dest = Buffer("PYTHON", 3, dtypes.int32).allocate().copy_from(src)
    assert dest.numpy().tolist() == [5, 6, 7]
    with pytest.raises(ValueError, match="copy_from: size mismatch"):
        dest.copy_from(int_buffer("CPU", [1]))


# *** Buffer: views ***


def test_views_share_the_base_memory() -> None:
    base = int_buffer("CPU", [0, 1, 2, 3, 4, 5])
    view = base.view(2, dtypes.int32, 8)
    assert view.base is base
    assert view.offset == 8
    assert not view.is_allocated()
    view.ensure_allocated()
    assert view.numpy().tolist() == [2, 3]
    assert base.allocated_views == 1
    view.copyin(np.array([20, 30], dtype=np.int32).data)
    assert base.numpy().tolist() == [0, 1, 20, 30, 4, 5]
    inner = view.view(1, dtypes.int32, 4)  # a view of a view is a view of the base
    assert inner.base is base
    assert inner.offset == 12
    assert inner.ensure_allocated().numpy().tolist() == [30]


def test_view_follows_its_base_reallocation() -> None:
    base = Buffer("CPU", 4, dtypes.int32)
    view = base.view(2, dtypes.int32, 4).ensure_allocated()  # allocating a view allocates its base
    assert base.is_allocated()
    assert view.is_allocated()
    base.deallocate()
    assert not view.is_allocated()
    base.allocate()
    assert not view.is_allocated()  # carved from the old memory: must be carved again
    view.ensure_allocated()
    assert view.is_allocated()
    assert base.allocated_views == 1


def test_view_bounds_are_checked() -> None:
    base = Buffer("CPU", 4, dtypes.int32)
    with pytest.raises(ValueError, match="offset 16 out of range"):
        base.view(1, dtypes.int32, 16)
    with pytest.raises(ValueError, match="view of 8 bytes at offset 12 is outside its 16-byte base"):
        base.view(2, dtypes.int32, 12)
    with pytest.raises(ValueError, match="on its base's device"):
        Buffer("PYTHON", 1, dtypes.int32, base=base, offset=0)


# *** Buffer: pickling ***


def test_pickle_keeps_contents() -> None:
    buf = int_buffer("CPU", [3, 1, 4])
    copy = pickle.loads(pickle.dumps(buf))
    assert copy is not buf
    assert copy.device == "CPU"
    assert copy.numpy().tolist() == [3, 1, 4]
    empty = pickle.loads(pickle.dumps(Buffer("PYTHON", 2, dtypes.float32)))
    assert not empty.is_allocated()
    assert empty.size == 2
    assert empty.dtype == dtypes.float32


def test_pickle_view() -> None:
    view = int_buffer("CPU", [3, 1, 4]).view(1, dtypes.int32, 8).ensure_allocated()
    copy = pickle.loads(pickle.dumps(view))
    assert copy.offset == 8
    assert copy.is_allocated()
    assert copy.numpy().tolist() == [4]


# *** Buffer: profile events and limits ***


def test_profile_events_on_alloc_and_free() -> None:
    with Context(PROFILE=1):
        buf = Buffer("NULL", 10, dtypes.char).allocate()
        buf.view(2, dtypes.char, 4).ensure_allocated()  # views log nothing
        key = buf.trace_num
        del buf
    events = [e for e in Buffer.profile_events if isinstance(e, ProfilePointEvent)]
    assert [(e.device, e.name, e.key) for e in events] == [("NULL", "alloc", key), ("NULL", "free", key)]
    assert events[0].arg == {"dtype": dtypes.char, "sz": 10}
    assert events[0].ts <= events[1].ts
    with Context(PROFILE=0):
        Buffer("NULL", 10, dtypes.char).allocate()
    assert len(Buffer.profile_events) == 2


def test_max_buffer_size() -> None:
    with Context(MAX_BUFFER_SIZE=10):
        Buffer("CPU", 10, dtypes.int8).allocate()
        with pytest.raises(
            RuntimeError, match=r"11 elements \(44 bytes\) of dtypes.int on CPU exceeds MAX_BUFFER_SIZE=10"
        ):
            Buffer("CPU", 11, dtypes.int32).allocate()
        Buffer("NULL", 11, dtypes.int32).allocate()  # NULL stores nothing: no limit


# *** allocator: LRU cache and retry ***


@pytest.fixture
def allocator() -> MallocAllocator:
    return MallocAllocator(Device["CPU"])


def test_lru_reuses_freed_memory() -> None:
    first = Buffer("CPU", 123, dtypes.uint8).allocate()
    address = mv_address(first._buf)
    first.deallocate()
    second = Buffer("CPU", 123, dtypes.uint8).allocate()
    assert mv_address(second._buf) == address


def test_lru_cache_keys_and_opt_outs(allocator: MallocAllocator) -> None:
    handle = allocator.alloc(64)
    allocator.free(handle, 64)
    assert allocator.alloc(64) is handle
    assert allocator.alloc(64) is not handle  # the cached one is taken
    allocator.free(handle, 64, BufferSpec(nolru=True))
    allocator.free(handle, 64, BufferSpec(zero=True))
    with Context(LRU=0):
        allocator.free(handle, 64)
    assert sum(len(v) for v in allocator.cache.values()) == 0
    with pytest.raises(ValueError, match="size must be positive: got 0 bytes on CPU"):
        allocator.alloc(0)


def test_memory_error_frees_the_cache_and_retries(allocator: MallocAllocator, monkeypatch: pytest.MonkeyPatch) -> None:
    allocator.free(allocator.alloc(32), 32)
    calls: list[int] = []
    real_alloc = allocator._alloc

    def fail_once(size: int, options: BufferSpec) -> memoryview:
        calls.append(size)
        if len(calls) == 1:
            raise MemoryError("out of memory")
        return real_alloc(size, options)

    monkeypatch.setattr(allocator, "_alloc", fail_once)
    assert len(allocator.alloc(100)) == 100
    assert calls == [100, 100]
    assert sum(len(v) for v in allocator.cache.values()) == 0


def test_memory_error_twice_names_size_device_and_cache(
    allocator: MallocAllocator, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocator.free(allocator.alloc(32), 32)
    allocator.free(allocator.alloc(16), 16)

    def always_fail(size: int, options: BufferSpec) -> memoryview:
        raise MemoryError("out of memory")

    monkeypatch.setattr(allocator, "_alloc", always_fail)
    with pytest.raises(MemoryError, match=r"out of memory on CPU: 100 bytes requested.*\(2 cached buffers, 48 bytes\)"):
        allocator.alloc(100)


def smaps_entry(address: int) -> tuple[str, list[str]]:
    """The permissions and VmFlags of the mapping holding `address`, from /proc/self/smaps."""
    perms, flags, inside = "", [], False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                start, end = (int(x, 16) for x in head[0].split("-"))
                inside, perms = start <= address < end, head[1]
            elif inside and head[0] == "VmFlags:":
                flags = head[1:]
                break
    assert flags, f"no mapping holds {address:#x}"
    return perms, flags


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the mapping from /proc/self/smaps")
@pytest.mark.parametrize("size", [4096 * 3 + 5, 4 << 20])
def test_host_memory_is_private_zeroed_and_advised_huge(allocator: MallocAllocator, size: int) -> None:
    mem = allocator.alloc(size)
    address = mv_address(mem)
    assert address % mmap.PAGESIZE == 0
    assert len(mem) == size
    assert not any(mem)
    perms, flags = smaps_entry(address)
    assert perms == "rw-p", f"host memory should be a private read-write mapping, got {perms}"
    assert "sh" not in flags
    thp = hasattr(mmap, "MADV_HUGEPAGE") and os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")
    assert ("hg" in flags) == (thp and size >= HUGEPAGE_BYTES), f"VmFlags {flags}"


@pytest.mark.parametrize("size", [HUGEPAGE_BYTES, 3 * HUGEPAGE_BYTES + 12])
def test_large_host_memory_starts_on_a_huge_page(size: int) -> None:
    """A large allocation's data starts on a huge-page boundary (so 2 MB multiples fill whole huge pages), the CPU
    allocator's too, whose data sits GUARD_BYTES into its allocation; the guard after it is mapped and readable."""
    from fusegrad.runtime.ops_cpu import GUARD_BYTES, CPUAllocator

    for lead in (0, 64, 4096 + 8):
        mem = host_memory(size + lead, lead)
        assert (mv_address(mem) + lead) % HUGEPAGE_BYTES == 0, lead
        assert len(mem) == size + lead
        assert not any(mem[:: 4096 - 1])
        mem[-1] = 7  # writable to its last byte
    data = CPUAllocator(Device["CPU"]).alloc(size)
    address = mv_address(data)
    assert address % HUGEPAGE_BYTES == 0
    assert to_mv(address + size, GUARD_BYTES).tobytes() == bytes(GUARD_BYTES), "the guard after the data reads zeros"
    small = host_memory(4096 + 1, 64)
    assert mv_address(small) % mmap.PAGESIZE == 0, "below a huge page: the mapping itself, page-aligned"


def test_allocator_base_needs_a_runtime() -> None:
    with pytest.raises(NotImplementedError, match="_alloc is not implemented"):
        Allocator[int](Device["CPU"]).alloc(8)


# *** profile events of devices ***


def test_profile_device_event_forms() -> None:
    new = ProfileDeviceEvent(device="NV", comp_tdiff=Decimal(-1000), copy_tdiff=Decimal(-100))
    assert (new.comp_tdiff, new.copy_tdiff, new.tdiff, new.props) == (
        Decimal(-1000),
        Decimal(-100),
        Decimal(-1000),
        None,
    )
    old = ProfileDeviceEvent("NV", Decimal(5), {"arch": "sm_90"})  # type: ignore[arg-type]  # the (device, tdiff, props) form
    assert (old.comp_tdiff, old.copy_tdiff, old.props) == (Decimal(5), Decimal(5), {"arch": "sm_90"})
    assert ProfileDeviceEvent("CPU").tdiff == 0


def test_profile_graph_event() -> None:
    entry = ProfileGraphEntry(device="NV:1", name="NV -> NV:1", st_id=2, en_id=3, is_copy=True)
    event = ProfileGraphEvent(ents=[entry], deps=[[]], sigs=[Decimal(1), Decimal(2)])
    assert event.ents[0].is_copy
    assert not ProfileGraphEntry("NV", "E_2", 0, 1).is_copy


def test_buffer_spec_hash_follows_its_fields() -> None:
    import dataclasses

    a, b = BufferSpec(), BufferSpec()
    assert a == b
    assert hash(a) == hash(b)
    c = dataclasses.replace(a, nolru=True)
    assert c != a
    assert {a: 1}.get(c) is None
    assert {a: 1}[b] == 1
    assert hash(dataclasses.replace(c, nolru=False)) == hash(a)
    assert hash(BufferSpec(external_ptr=64)) == hash(BufferSpec(external_ptr=64))
    assert "_hash" not in repr(a)


def test_buffer_nbytes_is_its_size_in_bytes() -> None:
    assert Buffer("CPU", 5, dtypes.float16).nbytes == 10
    base = Buffer("CPU", 8, dtypes.int32)
    assert Buffer("CPU", 2, dtypes.int32, base=base, offset=8).nbytes == 8
