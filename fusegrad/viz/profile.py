"""The profiler's packed timeline: range events, graph batches, buffer lifetimes and markers as one bytes blob for VIZ.

Entry point `get_profile(events) -> bytes`; the layout is described above `get_profile`. Device and graph events
(from fusegrad/device.py) are matched by class name, so this module imports nothing from the runtime side.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum
from typing import Protocol, cast

from fusegrad.helpers import ProfileEvent, ProfilePointEvent, ProfileRangeEvent, TracingKey

__all__ = ["get_profile"]


class TrackKind(IntEnum):
    """The byte after a track's name: how its events are packed."""

    RANGE = 0
    MEMORY = 1


class RangeKind(IntEnum):
    """What a range event timed; stored as its `key` field (1 + kind)."""

    KERNEL = 0
    COPY = 1
    GRAPH = 2


class UserMode(IntEnum):
    """How a kernel run touched a buffer; the last byte of a user record."""

    READ = 0
    WRITE = 1
    READ_WRITE = 2


# duck types of fusegrad.device's ProfileDeviceEvent / ProfileGraphEntry / ProfileGraphEvent (matched by class name)
class DeviceClockLike(Protocol):
    @property
    def device(self) -> str: ...


class GraphEntryLike(Protocol):
    @property
    def device(self) -> str: ...
    @property
    def name(self) -> str | TracingKey: ...
    @property
    def st_id(self) -> int: ...
    @property
    def en_id(self) -> int: ...
    @property
    def is_copy(self) -> bool: ...


class GraphBatchLike(Protocol):
    @property
    def ents(self) -> Sequence[GraphEntryLike]: ...
    @property
    def sigs(self) -> Sequence[Decimal]: ...


_RANGE_RECORD = struct.Struct("<IIIIfI")  # name, ref, key, start, duration, spare: 24 bytes per range event
_USER_RECORD = struct.Struct("<IIBB")  # run index on the device, kernel name, argument position, mode
_POINT_ORDER = {"alloc": 0, "exec": 1, "free": 2}  # at equal timestamps a buffer is allocated, used, then freed


@dataclass(frozen=True, slots=True)
class Span:
    """A range event on the host clock: device offsets applied, names resolved."""

    track: str
    name: str
    st: Decimal
    en: Decimal
    kind: RangeKind


@dataclass(slots=True)
class StringTable:
    """Interns every string the binary part refers to; `strings` goes into the JSON index."""

    strings: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def intern(self, text: str) -> int:
        if (found := self.index.get(text)) is not None:
            return found
        self.index[text] = len(self.strings)
        self.strings.append(text)
        return self.index[text]


def display_name(name: str | TracingKey) -> str:
    return name.display_name if isinstance(name, TracingKey) else name


def key_name(key: object) -> str:
    """The kernel name an exec point carries as its key ("" when it has none)."""
    if isinstance(key, TracingKey):
        return key.display_name
    return "" if key is None else str(key)


def clock_offsets(events: Iterable[ProfileEvent]) -> dict[str, tuple[Decimal, Decimal]]:
    """Per device, the (compute, copy) offsets that move its timestamps onto the host clock."""
    offsets: dict[str, tuple[Decimal, Decimal]] = {}
    for e in events:
        if type(e).__name__ != "ProfileDeviceEvent":
            continue
        comp = Decimal(getattr(e, "comp_tdiff", getattr(e, "tdiff", 0)) or 0)
        copy = getattr(e, "copy_tdiff", None)
        offsets[cast(DeviceClockLike, e).device] = (comp, comp if copy is None else Decimal(copy))
    return offsets


def offset_of(offsets: Mapping[str, tuple[Decimal, Decimal]], device: str, is_copy: bool) -> Decimal:
    return offsets.get(device, (Decimal(0), Decimal(0)))[1 if is_copy else 0]


def graph_spans(batch: GraphBatchLike, offsets: Mapping[str, tuple[Decimal, Decimal]]) -> list[Span]:
    """A graph batch's entries on their own devices, then one span covering the batch on "<first device> Graph"."""
    spans: list[Span] = []
    for ent in batch.ents:
        diff = offset_of(offsets, ent.device, ent.is_copy)
        kind = RangeKind.COPY if ent.is_copy else RangeKind.KERNEL
        st, en = batch.sigs[ent.st_id] + diff, batch.sigs[ent.en_id] + diff
        spans.append(Span(ent.device, display_name(ent.name), st, en, kind))
    if spans:
        st, en = min(s.st for s in spans), max(s.en for s in spans)
        spans.append(Span(f"{batch.ents[0].device} Graph", f"batched {len(spans)}", st, en, RangeKind.GRAPH))
    return spans


def collect_spans(events: Iterable[ProfileEvent], offsets: Mapping[str, tuple[Decimal, Decimal]]) -> list[Span]:
    """Range events and graph batches in list order (which fixes the track order)."""
    spans: list[Span] = []
    for e in events:
        if isinstance(e, ProfileRangeEvent):
            diff = offset_of(offsets, e.device, e.is_copy)
            en = e.st if e.en is None else e.en  # an unfinished range shows as a point
            kind = RangeKind.COPY if e.is_copy else RangeKind.KERNEL
            spans.append(Span(e.device, display_name(e.name), e.st + diff, en + diff, kind))
        elif type(e).__name__ == "ProfileGraphEvent":
            spans.extend(graph_spans(cast(GraphBatchLike, e), offsets))
    return spans


def pack_range_track(spans: Sequence[Span], start: Decimal, strings: StringTable, programs: Mapping[str, int]) -> bytes:
    """Type-0 track body: `<BI` header then one 24-byte record per span; uint32 overflow raises struct.error."""
    records = [struct.pack("<BI", TrackKind.RANGE, len(spans))]
    for s in spans:
        ref = programs[s.name] + 1 if s.name in programs else 0
        st = int(s.st - start)
        records.append(_RANGE_RECORD.pack(strings.intern(s.name), ref, s.kind + 1, st, float(s.en - s.st), 0))
    return b"".join(records)


@dataclass(slots=True)
class LiveBuffer:
    """An allocated buffer while its lifetime is being packed; users keyed by (exec device, run index)."""

    nbytes: int
    users: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # -> [run, name, position, read|write bits]


@dataclass(slots=True)
class MemoryTrack:
    """One device's allocations and frees, and the bytes in use over time."""

    events: list[bytes] = field(default_factory=list)
    in_use: int = 0
    peak: int = 0

    def pack(self) -> bytes:
        return struct.pack("<BIQ", TrackKind.MEMORY, len(self.events), self.peak) + b"".join(self.events)


def user_mode(bits: int) -> UserMode:
    """bit 0: read, bit 1: written."""
    if bits == 2:
        return UserMode.WRITE
    return UserMode.READ_WRITE if bits == 3 else UserMode.READ


@dataclass(slots=True)
class MemoryLayout:
    """Replays alloc/exec/free points in time order into per-device memory tracks."""

    start: Decimal
    strings: StringTable
    dtypes: dict[str, int]
    tracks: dict[str, MemoryTrack] = field(default_factory=dict)
    live: dict[int, tuple[str, LiveBuffer]] = field(default_factory=dict)  # trace_num -> (device, buffer)
    runs: dict[str, int] = field(default_factory=dict)  # exec events seen per device

    def alloc(self, e: ProfilePointEvent) -> None:
        if e.key in self.live:
            self.free(e.key, e.ts)  # allocated again without a free: the earlier lifetime ends here
        dtype, size = e.arg["dtype"], int(e.arg["sz"])
        self.dtypes.setdefault(dtype.name, dtype.itemsize)
        track = self.tracks.setdefault(e.device, MemoryTrack())
        name = self.strings.intern(dtype.name)
        track.events.append(struct.pack("<BIIIQ", 1, int(e.ts - self.start), e.key, name, size))
        self.live[e.key] = (e.device, LiveBuffer(size * dtype.itemsize))
        track.in_use += size * dtype.itemsize
        track.peak = max(track.peak, track.in_use)

    def exec(self, e: ProfilePointEvent) -> None:
        run = self.runs.get(e.device, 0)
        self.runs[e.device] = run + 1
        name = self.strings.intern(key_name(e.key))
        inputs, outputs = set(e.arg.get("inputs", ())), set(e.arg.get("outputs", ()))
        for position, trace_num in enumerate(e.arg.get("bufs", ())):
            if (entry := self.live.get(trace_num)) is None:
                continue
            # a buffer passed twice to one run is one user; its read/write bits merge
            user = entry[1].users.setdefault((e.device, run), [run, name, position, 0])
            user[3] |= (position in inputs) | ((position in outputs) << 1)

    def free(self, key: int, ts: Decimal) -> None:
        if (entry := self.live.pop(key, None)) is None:
            return  # allocated before profiling started: size and users unknown
        device, buf = entry
        track = self.tracks[device]
        users = [
            _USER_RECORD.pack(run, name, position, user_mode(bits)) for run, name, position, bits in buf.users.values()
        ]
        track.events.append(struct.pack("<BIII", 0, int(ts - self.start), key, len(users)) + b"".join(users))
        track.in_use -= buf.nbytes


def pack_memory_tracks(points: Sequence[ProfilePointEvent], layout: MemoryLayout, end: Decimal) -> dict[str, bytes]:
    """Per device "<device> Memory" track bodies; buffers still alive at the end get a free at the timeline's end."""
    for e in sorted(points, key=lambda e: (e.ts, _POINT_ORDER[e.name])):
        match e.name:
            case "alloc":
                layout.alloc(e)
            case "exec":
                layout.exec(e)
            case _:
                layout.free(e.key, e.ts)
    for key in list(layout.live):
        layout.free(key, end)
    return {f"{device} Memory": track.pack() for device, track in layout.tracks.items()}


def marker_json(e: ProfilePointEvent, start: Decimal) -> dict[str, object]:
    rest = {k: v for k, v in e.arg.items() if k != "name"}
    return {"name": str(e.arg.get("name", e.key)), "ts": int(e.ts - start), **rest}


# Layout (little-endian):
#   header `<IQII`: timeline duration in us, peak bytes over all devices, index length, track count
#   index: JSON {"strings": [...], "dtypes": {name: itemsize}, "markers": [{"name", "ts", ...}]}
#   per track: `<B` name length, name, then `<BI` kind and event count, then
#     RANGE:  `<IIIIfI` name string, ref (1 + program index, 0 none), key (1 + RangeKind), start, duration, spare 0
#     MEMORY: `<Q` peak bytes; alloc `<BII` (1, ts, trace_num) `<IQ` (dtype string, elements);
#             free `<BII` (0, ts, trace_num) `<I` user count, users `<IIBB` (run on device, kernel name, arg, mode)
# every time is in us since the earliest event; a time past uint32 (about 71 minutes) raises struct.error
def get_profile(events: Sequence[ProfileEvent], programs: Mapping[str, int] | None = None) -> bytes:
    """Pack `events` into the VIZ timeline bytes; `programs` maps a kernel name to its position in the program list.

    Raises struct.error when the timeline is longer than uint32 microseconds. Example: `get_profile(cpu_events)`.
    """
    spans = collect_spans(events, clock_offsets(events))
    points = [e for e in events if isinstance(e, ProfilePointEvent) and e.name in (*_POINT_ORDER, "marker")]
    times = [t for s in spans for t in (s.st, s.en)] + [e.ts for e in points]
    start, end = (min(times), max(times)) if times else (Decimal(0), Decimal(0))
    strings = StringTable()
    dtypes: dict[str, int] = {}
    by_track: dict[str, list[Span]] = {}
    for s in spans:
        by_track.setdefault(s.track, []).append(s)
    tracks = {name: pack_range_track(group, start, strings, programs or {}) for name, group in by_track.items()}
    layout = MemoryLayout(start, strings, dtypes)
    tracks |= pack_memory_tracks([e for e in points if e.name != "marker"], layout, end)
    markers = [marker_json(e, start) for e in points if e.name == "marker"]
    index = json.dumps({"strings": strings.strings, "dtypes": dtypes, "markers": markers}, default=str).encode()
    peak = max((t.peak for t in layout.tracks.values()), default=0)
    body = [struct.pack("<IQII", int(end - start), peak, len(index), len(tracks)), index]
    # range tracks by first appearance in `events`, then memory tracks by first allocation
    for name, track in tracks.items():
        key = name.encode()
        body += [struct.pack("<B", len(key)), key, track]
    return b"".join(body)
