"""Tests for fusegrad/viz/profile.py: the packed VIZ timeline, read back with a decoder that follows the spec's."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import ProfileEvent, ProfilePointEvent, ProfileRangeEvent, TracingKey
from fusegrad.viz.serve import get_profile

try:
    from fusegrad.device import ProfileDeviceEvent, ProfileGraphEntry, ProfileGraphEvent
except ImportError:  # fusegrad/device.py not written yet: stand-ins with the same class names and fields

    @dataclass(frozen=True)
    class ProfileDeviceEvent(ProfileEvent):  # type: ignore[no-redef]  # stand-in until device.py lands
        device: str
        comp_tdiff: Decimal = Decimal(0)
        copy_tdiff: Decimal = Decimal(0)
        props: dict[str, Any] | None = None

    @dataclass(frozen=True)
    class ProfileGraphEntry:  # type: ignore[no-redef]  # stand-in until device.py lands
        device: str
        name: str
        st_id: int
        en_id: int
        is_copy: bool

    @dataclass(frozen=True)
    class ProfileGraphEvent(ProfileEvent):  # type: ignore[no-redef]  # stand-in until device.py lands
        ents: list[ProfileGraphEntry]
        deps: list[list[int]]
        sigs: list[Decimal] = field(default_factory=list)


class Reader:
    """Reads consecutive struct fields from the packed bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.offset = data, 0

    def __call__(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return values

    def take(self, n: int) -> bytes:
        self.offset += n
        return self.data[self.offset - n : self.offset]


def optional(value: int) -> int | None:
    """0 encodes None, anything else is 1 + the value."""
    return value - 1 if value else None


def read_range_events(read: Reader, count: int, strings: list[str]) -> list[dict[str, Any]]:
    events = []
    for _ in range(count):
        name, ref, key, st, dur, spare = read("<IIIIfI")
        events.append({"name": strings[name], "ref": optional(ref), "key": optional(key), "st": st, "dur": dur})
        assert spare == 0
    return events


def read_memory_events(read: Reader, count: int, strings: list[str]) -> list[dict[str, Any]]:
    events = []
    for _ in range(count):
        is_alloc, ts, key = read("<BII")
        if is_alloc:
            dtype, size = strings[read("<I")[0]], read("<Q")[0]
            events.append({"event": "alloc", "ts": ts, "key": key, "arg": {"dtype": dtype, "sz": size}})
        else:
            users = [read("<IIBB") for _ in range(read("<I")[0])]
            events.append({"event": "free", "ts": ts, "key": key, "arg": {"users": users}})
    return events


def load_profile(events: Sequence[ProfileEvent]) -> dict[str, Any]:
    """Decode get_profile's bytes into plain dicts, the way the spec's load_profile does."""
    data = get_profile(events)
    read = Reader(data)
    duration, peak, index_len, track_count = read("<IQII")
    index = json.loads(read.take(index_len))
    assert list(index) == ["strings", "dtypes", "markers"]
    layout: dict[str, dict[str, Any]] = {}
    for _ in range(track_count):
        name = read.take(read("<B")[0]).decode()
        kind, count = read("<BI")
        if kind == 0:
            layout[name] = {"events": read_range_events(read, count, index["strings"])}
        else:
            track_peak = read("<Q")[0]
            layout[name] = {"peak": track_peak, "events": read_memory_events(read, count, index["strings"])}
    assert read.offset == len(data), "trailing bytes after the last track"
    return {"dur": duration, "peak": peak, "layout": layout, "markers": index["markers"], "index": index}


def us(value: float) -> Decimal:
    return Decimal(value)


def alloc(key: int, ts: float, size: int = 1, dtype: DType = dtypes.char, device: str = "NULL") -> ProfilePointEvent:
    return ProfilePointEvent(device, "alloc", key, {"dtype": dtype, "sz": size}, ts=us(ts))


def free(key: int, ts: float, device: str = "NULL") -> ProfilePointEvent:
    return ProfilePointEvent(device, "free", key, ts=us(ts))


def run(name: str, ts: float, bufs: list[int], outputs: list[int], inputs: list[int]) -> ProfilePointEvent:
    arg = {"bufs": bufs, "outputs": outputs, "inputs": inputs}
    return ProfilePointEvent("NULL", "exec", name, arg, ts=us(ts))


def kernel(name: str, st: float, en: float, device: str = "NULL") -> ProfileRangeEvent:
    return ProfileRangeEvent(device, name, us(st), us(en))


def memory(profile: dict[str, Any], device: str = "NULL") -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = profile["layout"][f"{device} Memory"]["events"]
    return events


# *** range tracks ***


def test_node() -> None:
    prof = [kernel("E_2", 1000, 1010, "NV"), ProfileDeviceEvent("NV", comp_tdiff=us(-1000), copy_tdiff=us(-100))]
    events = load_profile(prof)["layout"]["NV"]["events"]
    assert len(events) == 1
    assert events[0]["name"] == "E_2"
    assert (events[0]["st"], events[0]["dur"], events[0]["ref"]) == (0, 10, None)
    assert events[0]["key"] == 0  # a kernel (RangeKind.KERNEL)


def test_copy_node() -> None:
    prof: list[ProfileEvent] = [
        ProfileRangeEvent("NV", "COPYxx", us(1000), us(1010), is_copy=True),
        ProfileRangeEvent("NV:2", "COPYxx", us(1000), us(1010), is_copy=True),
        ProfileDeviceEvent("NV", comp_tdiff=us(-1000), copy_tdiff=us(-100)),
        ProfileDeviceEvent("NV:2", comp_tdiff=us(-800), copy_tdiff=us(-80)),
    ]
    j = load_profile(prof)
    first, second = j["layout"]["NV"]["events"][0], j["layout"]["NV:2"]["events"][0]
    assert (first["name"], first["st"], first["dur"], first["key"]) == ("COPYxx", 0, 10, 1)
    assert second["st"] == 20  # the copy clock offset, not the compute one
    assert j["dur"] == second["st"] + second["dur"] - first["st"]


def test_graph() -> None:
    entries = [ProfileGraphEntry("NV", "E_25_4n2", 0, 1, False), ProfileGraphEntry("NV:1", "NV -> NV:1", 2, 3, True)]
    prof: list[ProfileEvent] = [
        ProfileDeviceEvent("NV", comp_tdiff=us(-1000), copy_tdiff=us(-100)),
        ProfileDeviceEvent("NV:1", comp_tdiff=us(-500), copy_tdiff=us(-50)),
        ProfileGraphEvent(entries, [[], [0]], [us(1000), us(1002), us(1004), us(1008)]),
    ]
    layout = load_profile(prof)["layout"]
    assert list(layout) == ["NV", "NV:1", "NV Graph"]
    nv, nv1, graph = (layout[name]["events"][0] for name in layout)
    assert (nv["name"], nv["st"], nv["dur"]) == ("E_25_4n2", 0, 2)
    assert (nv1["name"], nv1["st"], nv1["dur"]) == ("NV -> NV:1", 954, 4)
    assert graph["st"] == nv["st"]
    assert graph["st"] + graph["dur"] == nv1["st"] + nv1["dur"]
    assert graph["key"] == 2  # RangeKind.GRAPH


def test_bytes_per_kernel() -> None:
    n_events, step = 1_000, 10
    prof: list[ProfileEvent] = [kernel("k_test", i * step, i * step + step, "CPU") for i in range(n_events)]
    assert len(get_profile(prof)) / n_events <= 26


def test_trace_duration_overflows_uint32() -> None:
    # 72 minutes of microseconds does not fit uint32 (about 71 minutes)
    n_events, step = 1_000, 72 * 60 * 1_000_000 // 1_000
    prof: list[ProfileEvent] = [kernel("k_test", i * step, i * step + step, "CPU") for i in range(n_events)]
    with pytest.raises(struct.error):
        get_profile(prof)


def test_tracing_key_name_and_program_ref() -> None:
    prof: list[ProfileEvent] = [
        ProfileRangeEvent("CPU", TracingKey("r_4"), us(5), us(7)),
        kernel("E_3", 7, 9, "CPU"),
    ]
    events = load_profile(prof)["layout"]["CPU"]["events"]
    assert [(e["name"], e["ref"]) for e in events] == [("r_4", None), ("E_3", None)]
    data = get_profile(prof, programs={"E_3": 4})
    assert data != get_profile(prof)
    record = struct.unpack_from("<IIIIfI", data, len(data) - 24)
    assert record[1] == 5  # 1 + the program's position


def test_unfinished_range_is_a_point() -> None:
    j = load_profile([ProfileRangeEvent("CPU", "open", us(3), None), kernel("done", 1, 3, "CPU")])
    assert [(e["st"], e["dur"]) for e in j["layout"]["CPU"]["events"]] == [(2, 0), (0, 2)]
    assert j["dur"] == 2


def test_empty() -> None:
    j = load_profile([])
    assert (j["dur"], j["peak"], j["layout"], j["markers"]) == (0, 0, {}, [])


# *** markers ***


def test_markers_relative_to_first_event() -> None:
    prof: list[ProfileEvent] = [
        ProfilePointEvent("TINY", "marker", None, {"name": "before", "color": "gray"}, ts=us(100)),
        kernel("E_1", 110, 120),
        ProfilePointEvent("TINY", "marker", None, {"name": "after", "color": "red"}, ts=us(130)),
    ]
    j = load_profile(prof)
    assert j["markers"] == [{"name": "before", "ts": 0, "color": "gray"}, {"name": "after", "ts": 30, "color": "red"}]
    assert j["layout"]["NULL"]["events"][0]["st"] == 10
    assert j["dur"] == 30


# *** memory tracks ***


def test_double_alloc() -> None:
    j = load_profile([alloc(1, 10), alloc(2, 11)])
    track = j["layout"]["NULL Memory"]
    assert track["peak"] == j["peak"] == 2
    assert [e["event"] for e in track["events"]] == ["alloc", "alloc", "free", "free"]
    assert track["events"][0]["arg"] == {"dtype": dtypes.char.name, "sz": 1}
    assert j["index"]["dtypes"] == {dtypes.char.name: 1}


def test_del_once() -> None:
    j = load_profile([alloc(1, 10), free(1, 11), alloc(2, 12)])
    assert j["layout"]["NULL Memory"]["peak"] == 1
    assert [(e["event"], e["key"]) for e in memory(j)] == [("alloc", 1), ("free", 1), ("alloc", 2), ("free", 2)]


def test_alloc_free() -> None:
    j = load_profile([alloc(1, 10), alloc(2, 11), free(1, 12), alloc(3, 13)])
    assert j["layout"]["NULL Memory"]["peak"] == 2
    assert len(memory(j)) == 6


def test_peak_in_bytes_and_global_peak() -> None:
    prof = [alloc(1, 0, size=10, dtype=dtypes.float32), alloc(2, 1, size=3, dtype=dtypes.float64, device="CPU")]
    j = load_profile(prof)
    assert j["layout"]["NULL Memory"]["peak"] == 40
    assert j["layout"]["CPU Memory"]["peak"] == 24
    assert j["peak"] == 40
    assert j["index"]["dtypes"] == {dtypes.float32.name: 4, dtypes.float64.name: 8}
    assert memory(j)[0]["arg"] == {"dtype": dtypes.float32.name, "sz": 10}


def test_synthetic_free_at_timeline_end() -> None:
    j = load_profile([alloc(1, 5), kernel("E_1", 6, 50)])
    last = memory(j)[-1]
    assert (last["event"], last["key"], last["ts"]) == ("free", 1, j["dur"])
    assert j["dur"] == 45


def test_points_sorted_by_time_across_lists() -> None:
    # cpu_events and Buffer.profile_events arrive concatenated, not interleaved by time
    cpu = [run("E_1", 11, [1], outputs=[0], inputs=[])]
    buffers = [alloc(1, 10), free(1, 12)]
    events = memory(load_profile([*cpu, *buffers]))
    assert [e["event"] for e in events] == ["alloc", "free"]
    assert len(events[1]["arg"]["users"]) == 1


def test_free_without_alloc_is_skipped() -> None:
    j = load_profile([free(7, 1), alloc(1, 2)])
    assert [(e["event"], e["key"]) for e in memory(j)] == [("alloc", 1), ("free", 1)]


def test_realloc_ends_earlier_lifetime() -> None:
    j = load_profile([alloc(1, 1), alloc(1, 2), free(1, 3)])
    assert [e["event"] for e in memory(j)] == ["alloc", "free", "alloc", "free"]
    assert j["layout"]["NULL Memory"]["peak"] == 1


def test_annotate_read_write() -> None:
    # buffer 1: written by E_ones, read and written by an assign, then read
    prof = [
        alloc(1, 0, size=4, dtype=dtypes.float32),
        run("E_ones", 1, [1], outputs=[0], inputs=[]),
        alloc(2, 2, size=4, dtype=dtypes.float32),
        run("E_assign", 3, [1, 1], outputs=[0], inputs=[1]),
        run("E_add", 4, [2, 1], outputs=[0], inputs=[1]),
    ]
    j = load_profile(prof)
    users = next(e["arg"]["users"] for e in memory(j) if e["key"] == 1 and e["event"] == "free")
    strings = j["index"]["strings"]
    assert [u[3] for u in users] == [1, 2, 0]  # write, read+write, read
    assert [u[0] for u in users] == [0, 1, 2]  # run index on the device
    assert [strings[u[1]] for u in users] == ["E_ones", "E_assign", "E_add"]
    assert [u[2] for u in users] == [0, 0, 1]  # the first argument position the buffer appears at
    out = next(e["arg"]["users"] for e in memory(j) if e["key"] == 2 and e["event"] == "free")
    assert [(u[0], u[3]) for u in out] == [(2, 1)]


def test_users_only_between_alloc_and_free() -> None:
    prof = [
        run("before", 0, [1], outputs=[0], inputs=[]),
        alloc(1, 1),
        run("during", 2, [1], outputs=[], inputs=[0]),
        free(1, 3),
        run("after", 4, [1], outputs=[], inputs=[0]),
    ]
    j = load_profile(prof)
    users = memory(j)[1]["arg"]["users"]
    assert [j["index"]["strings"][u[1]] for u in users] == ["during"]
    assert users[0][0] == 1  # still the second run on NULL


def test_inflight_buf() -> None:
    n = 4
    prof: list[ProfileEvent] = [alloc(1, 0, dtype=dtypes.float32)]
    for i in range(n):
        key = 10 + i
        prof += [alloc(key, 10 * i + 1, dtype=dtypes.float32), kernel("E_1", 10 * i + 2, 10 * i + 3)]
        prof += [run("E_1", 10 * i + 2, [key, 1], outputs=[0], inputs=[1]), free(key, 10 * i + 4)]
    j = load_profile(prof)
    frees = [e for e in memory(j) if e["event"] == "free"]
    assert max(len(e["arg"]["users"]) for e in frees) == n
    input_free = frees[-1]
    assert input_free["key"] == 1
    assert all(u[3] == 0 for u in input_free["arg"]["users"])
    user_counts = [len(e["arg"]["users"]) for e in frees if e["arg"]["users"]]
    assert user_counts == [1, 1, 1, 1, 4]


def test_dedup_users() -> None:
    n = 4
    prof: list[ProfileEvent] = [alloc(1, 0)]
    for i in range(n):
        prof += [kernel("E_1", 10 * i + 1, 10 * i + 2), run("E_1", 10 * i + 1, [2, 1, 1], outputs=[0], inputs=[1, 2])]
    j = load_profile(prof)
    programs = j["layout"]["NULL"]["events"]
    users = memory(j).pop()["arg"]["users"]
    assert len(programs) == len(set(users)) == len(users) == n


def test_track_order() -> None:
    prof: list[ProfileEvent] = [alloc(1, 0, device="CPU"), kernel("E_1", 1, 2, "NV"), kernel("E_2", 2, 3, "CPU")]
    assert list(load_profile(prof)["layout"]) == ["NV", "CPU", "CPU Memory"]
