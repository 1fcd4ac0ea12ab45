"""Tests for fusegrad/runtime/ops_null.py: the NULL device stores nothing, runs nothing, and records timing events."""

from __future__ import annotations

from fusegrad.device import Buffer, Device
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context, ProfileRangeEvent, cpu_events
from fusegrad.runtime.ops_null import NullProgram


def test_null_program_records_a_range_event_when_profiling() -> None:
    cpu_events.clear()
    prg = Device["NULL"].runtime("E_4", Device["NULL"].compiler.compile_cached("void E_4() {}"))
    assert isinstance(prg, NullProgram)
    with Context(PROFILE=1):
        assert prg(None, vals=(3,), wait=True) == 1e-4
    with Context(PROFILE=0):
        assert prg() == 1e-4
    events = [e for e in cpu_events if isinstance(e, ProfileRangeEvent)]
    assert [(e.device, e.name) for e in events] == [("NULL", "E_4")]
    assert events[0].en is not None
    assert events[0].st <= events[0].en
    cpu_events.clear()


def test_numbered_null_device_names_its_events() -> None:
    cpu_events.clear()
    with Context(PROFILE=1):
        Device["null:1"].runtime("k", b"")()
    assert [e.device for e in cpu_events if isinstance(e, ProfileRangeEvent)] == ["NULL:1"]
    cpu_events.clear()


def test_null_compiler_passes_source_through() -> None:
    assert Device["NULL"].compiler.compile_cached("int x;") == b"int x;"


def test_null_buffers_store_nothing() -> None:
    buf = Buffer("NULL", 4, dtypes.int32, initial_value=bytes(range(16)))
    assert buf.is_allocated()
    assert buf._buf is None
    assert buf.as_memoryview().tobytes() == bytes(16)
    view = buf.view(2, dtypes.int32, 4).ensure_allocated()
    assert view.is_allocated()
    assert view.numpy().tolist() == [0, 0]
