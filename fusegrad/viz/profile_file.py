"""The streaming profile file: events appended in compressed columnar chunks while the run goes, so memory stays
bounded and a crash keeps every chunk already written. `ProfileWriter(path).write(events)` / `.close()`;
`read_profile_file(path)` reads it back (trace_file.load_saved_profile picks it by its magic bytes).

Layout (little-endian), version 2:
    magic b"FGPROF" + version byte + b"\\n", then records `<IB` (payload length, kind) + payload:
    HEAD (JSON {"format", "version", "run_id"}), CHUNK (zlib: see `encode_chunk`), END (JSON {"events": total}).
A file without END was cut short (the run crashed or is still going): its complete chunks are read, a torn last one
is dropped. Strings (devices, names, point keys and args as JSON) are interned once per file across chunks.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from fusegrad.helpers import ProfileEvent, ProfilePointEvent, ProfileRangeEvent, TracingKey
from fusegrad.viz.trace_file import PROFILE_FORMAT, TraceFileError, decode, encode, event_from_json, event_json

MAGIC, FILE_VERSION = b"FGPROF", 2
HEADER = MAGIC + bytes([FILE_VERSION]) + b"\n"
_RECORD = struct.Struct("<IB")
_ID_TYPES, _TIME_TYPES = ("B", "H", "I", "Q"), ("b", "h", "i", "q")  # the narrowest array type a column fits
# past this many interned strings the writer starts a fresh table (a chunk marked "reset"), so a run whose points all
# differ (buffers never reused) keeps the writer's memory bounded too
MAX_STRINGS = 200_000
_ID_COLUMNS = (1, 2, 6, 7, 8, 9)  # the columns that hold string ids


class RecordKind(IntEnum):
    HEAD = 0
    CHUNK = 1
    END = 2


class EventKind(IntEnum):
    """One byte per event in a chunk: which columns hold it."""

    RANGE = 0
    POINT = 1
    OTHER = 2  # device clocks, graph batches, odd timestamps: a JSON row, as the JSON file stores them


def is_profile_file(data: bytes) -> bool:
    return data[: len(MAGIC)] == MAGIC


def _ns(t: Decimal) -> int | None:
    """`t` (microseconds) as integer nanoseconds, None when that is not exact (the event then goes as JSON)."""
    ns = t * 1000
    return int(ns) if ns == ns.to_integral_value() else None


def _column(values: Sequence[int], types: tuple[str, ...]) -> bytes:
    """Typecode byte, `<I` count, then the values in the narrowest array type holding them all (ids and deltas are
    small, so most columns are one or two bytes a value before compression)."""
    lo, hi = (min(values), max(values)) if values else (0, 0)
    for code in types:
        bits = array(code).itemsize * 8
        if (lo >= 0 and hi < 1 << bits) if code.isupper() else (-(1 << (bits - 1)) <= lo and hi < 1 << (bits - 1)):
            column = array(code, values)
            if sys.byteorder == "big":
                column.byteswap()  # the file is little-endian wherever it was written
            return code.encode() + struct.pack("<I", len(values)) + column.tobytes()
    raise OverflowError(f"profile column value out of range: {lo}..{hi}")


def _name(x: str | TracingKey) -> str:
    return x.display_name if isinstance(x, TracingKey) else str(x)


def _json_text(v: object) -> str:
    return json.dumps(encode(v), separators=(",", ":"))


_NESTED = {list, tuple, dict, bool, float}


def _freeze(v: object) -> object:
    """A hashable stand-in for `v` that tells apart what `encode` tells apart (list/tuple, 1/1.0/True). Runs for every
    recorded point, so the common shapes (a dict of flat lists and scalars) take no recursion. A subclass of a
    container is kept as itself: unhashable ones raise TypeError and are encoded without the cache."""
    kind = type(v)
    if kind is dict:
        return (dict, *[(k, _freeze(x) if type(x) in _NESTED else x) for k, x in v.items()])  # type: ignore[attr-defined]
    if kind is list or kind is tuple:
        for x in v:  # type: ignore[attr-defined]  # a list or tuple
            if type(x) in _NESTED:
                return (kind, *map(_freeze, v))  # type: ignore[call-overload]  # a list or tuple
        return (kind, *v)  # type: ignore[misc]  # flat (buffer numbers, metadata): the common case
    if kind is bool or kind is float:
        return (kind, v)
    return v


@dataclass
class Columns:
    """One chunk's events split by kind into integer columns (before compression)."""

    kinds: list[int] = field(default_factory=list)
    range_cols: tuple[list[int], ...] = field(default_factory=lambda: ([], [], [], [], []))  # device name st dur copy
    point_cols: tuple[list[int], ...] = field(default_factory=lambda: ([], [], [], [], []))  # device name key arg ts
    others: list[Any] = field(default_factory=list)


@dataclass
class StringIds:
    """Interning shared by every chunk of one file; `fresh` holds the strings the next chunk must define."""

    ids: dict[str, int] = field(default_factory=dict)
    fresh: list[str] = field(default_factory=list)

    def __call__(self, text: str) -> int:
        if (found := self.ids.get(text)) is not None:
            return found
        self.ids[text] = len(self.ids)
        self.fresh.append(text)
        return self.ids[text]


@dataclass
class ChunkEncoder:
    """Turns batches of events into CHUNK payloads; times are deltas from the previous event of the same kind."""

    strings: StringIds = field(default_factory=StringIds)
    last_range: int = 0
    last_point: int = 0
    # a point's arg is interned as JSON text; exec args repeat every step, so the text is cached by the arg's value
    arg_texts: dict[object, str] = field(default_factory=dict)
    reset: bool = False  # this chunk's string ids start from 0 again

    def arg_text(self, arg: object) -> str:
        try:
            frozen = _freeze(arg)
            if (text := self.arg_texts.get(frozen)) is None:
                text = self.arg_texts[frozen] = _json_text(arg)
            return text
        except TypeError:  # something unhashable inside: encoded every time
            return _json_text(arg)

    def add_range(self, cols: Columns, e: ProfileRangeEvent) -> bool:
        st, en = _ns(e.st), None if e.en is None else _ns(e.en)
        if st is None or (e.en is not None and en is None):
            return False
        device, name, start, duration, copy = cols.range_cols
        device.append(self.strings(e.device))
        name.append(self.strings(_name(e.name)))
        start.append(st - self.last_range)
        duration.append(-1 if en is None else en - st)
        copy.append(int(e.is_copy))
        self.last_range = st
        return True

    def add_point(self, cols: Columns, e: ProfilePointEvent) -> bool:
        if (ts := _ns(e.ts)) is None:
            return False
        key = _name(e.key) if isinstance(e.key, TracingKey) else e.key
        device, name, keys, args, times = cols.point_cols
        device.append(self.strings(e.device))
        name.append(self.strings(e.name))
        keys.append(self.strings(str(key) if type(key) is int else _json_text(key)))
        args.append(self.strings(self.arg_text(e.arg)))
        times.append(ts - self.last_point)
        self.last_point = ts
        return True

    def encode_chunk(self, events: Iterable[ProfileEvent]) -> bytes | None:
        """zlib of: `<I` JSON length, JSON {"strings": new strings, "others": rows, "reset": whether the ids start again
        from 0}, then columns (`_column`): kinds,
        range device/name/start delta/duration (-1: unfinished)/is_copy, point device/name/key/arg/time delta.
        None when `events` holds nothing to write."""
        cols = Columns()
        for e in events:
            if isinstance(e, ProfileRangeEvent) and self.add_range(cols, e):
                cols.kinds.append(EventKind.RANGE)
            elif isinstance(e, ProfilePointEvent) and self.add_point(cols, e):
                cols.kinds.append(EventKind.POINT)
            elif (row := event_json(e)) is not None:
                cols.kinds.append(EventKind.OTHER)
                cols.others.append(row)
        if not cols.kinds:
            return None
        meta = json.dumps({"strings": self.strings.fresh, "others": cols.others, "reset": self.reset},
                          separators=(",", ":")).encode()  # fmt: skip
        self.strings.fresh, self.reset = [], False
        if len(self.strings.ids) > MAX_STRINGS:  # the next chunk starts a fresh table
            self.strings, self.reset = StringIds(), True
            self.arg_texts.clear()
        parts = [struct.pack("<I", len(meta)), meta, _column(cols.kinds, _ID_TYPES)]
        for i, values in enumerate((*cols.range_cols, *cols.point_cols)):
            parts.append(_column(values, _TIME_TYPES if i in (2, 3, 9) else _ID_TYPES))
        return zlib.compress(b"".join(parts), 6)


class ProfileWriter:
    """Appends events to a streaming profile file: each `write` is one compressed chunk, flushed to the OS at once."""

    def __init__(self, path: str | Path, run_id: str | None = None) -> None:
        self.path, self.run_id, self.count = Path(path), run_id, 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.encoder = ChunkEncoder()
        self.file: IO[bytes] | None = open(self.path, "wb")  # noqa: SIM115  # open across many writes, closed by close()
        self.file.write(HEADER)
        self._record(RecordKind.HEAD, json.dumps({"format": PROFILE_FORMAT, "version": FILE_VERSION,
                                                  "run_id": run_id}).encode())  # fmt: skip

    def _record(self, kind: RecordKind, payload: bytes) -> None:
        if self.file is None:
            raise ValueError(f"{self.path}: the profile file is already closed")
        self.file.write(_RECORD.pack(len(payload), kind) + payload)
        self.file.flush()  # in the OS's hands: a crash of this process after here keeps the chunk

    def write(self, events: Sequence[ProfileEvent]) -> None:
        """Append `events` as one chunk (nothing for an empty batch)."""
        if (payload := self.encoder.encode_chunk(events)) is not None:
            self._record(RecordKind.CHUNK, payload)
            self.count += len(events)

    def close(self) -> Path:
        """Write the END record, sync the file to disk and close it; returns the path."""
        if self.file is not None:
            self._record(RecordKind.END, json.dumps({"events": self.count}).encode())
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None
        return self.path


# *** reading ***


def _read_column(data: bytes, pos: int) -> tuple[npt.NDArray[Any], int]:
    """One `_column` at `pos` as a (read-only, little-endian) array, and the position after it."""
    dtype = np.dtype(chr(data[pos])).newbyteorder("<")
    (count,) = struct.unpack_from("<I", data, pos + 1)
    return np.frombuffer(data, dtype, count, pos + 5), pos + 5 + count * dtype.itemsize


def _running(deltas: list[int], last: int) -> list[int]:
    """Times from deltas, continuing from `last` (Python ints: exact past 2**63 ns sums too)."""
    return list(itertools.accumulate(deltas, initial=last))[1:]


@dataclass
class ChunkDecoder:
    """The reading side of ChunkEncoder: the strings so far, the last times, decoded key/arg values by string id."""

    strings: list[str] = field(default_factory=list)
    last_range: int = 0
    last_point: int = 0
    values: dict[int, Any] = field(default_factory=dict)
    base: int = 0  # where the writer's current string table starts in `strings` (it restarts at a "reset" chunk)

    def value(self, sid: int) -> Any:
        """The key or arg stored as string `sid`, decoded once (events that share it share the object: read-only)."""
        if sid not in self.values:
            self.values[sid] = decode(json.loads(self.strings[sid]))
        return self.values[sid]

    def columns(self, payload: bytes) -> tuple[dict[str, Any], list[npt.NDArray[Any]]]:
        """A chunk's JSON part (its new strings are taken in) and its 11 integer columns, times still as deltas."""
        data = zlib.decompress(payload)
        (meta_len,) = struct.unpack_from("<I", data)
        meta = json.loads(data[4 : 4 + meta_len])
        if meta.get("reset"):
            self.base = len(self.strings)
        self.strings.extend(meta["strings"])
        pos, cols = 4 + meta_len, []
        for _ in range(11):
            column, pos = _read_column(data, pos)
            cols.append(column)
        for i in _ID_COLUMNS if self.base else ():
            cols[i] = cols[i].astype(np.int64) + self.base
        return meta, cols

    def decode_chunk(self, payload: bytes) -> list[ProfileEvent]:
        meta, arrays = self.columns(payload)
        cols = [a.tolist() for a in arrays]
        return self.assemble(cols[0], cols[1:6], cols[6:11], iter(meta["others"]))

    def scan_chunk(self, payload: bytes, scan: RangeScan) -> None:
        """Only the range and point times of a chunk, into `scan` (no event objects: fast enough for a first paint)."""
        _, cols = self.columns(payload)
        devices, names = cols[1], cols[2]
        starts = np.cumsum(cols[3], dtype=np.int64) + self.last_range
        durations = np.maximum(cols[4].astype(np.int64), 0)  # -1: unfinished, drawn as a point
        times = np.cumsum(cols[10], dtype=np.int64) + self.last_point
        if len(starts):
            self.last_range = int(starts[-1])
            scan.first, scan.last = min(scan.first, int(starts.min())), max(scan.last, int((starts + durations).max()))
        if len(times):
            self.last_point = int(times[-1])
            scan.first, scan.last = min(scan.first, int(times.min())), max(scan.last, int(times.max()))
        for device in np.unique(devices).tolist():
            mask = devices == device
            piece = (starts[mask], durations[mask], names[mask], cols[5][mask])  # cols[5]: 1 for a copy
            scan.tracks.setdefault(self.strings[device], []).append(piece)
        if "marker" in self.strings:  # markers: the point name "marker"; their label is in the arg's JSON
            marks = cols[7] == self.strings.index("marker")
            for ts, arg in zip(times[marks].tolist(), cols[9][marks].tolist(), strict=True):
                scan.markers.append((ts, str(self.value(arg).get("name", ""))))

    def assemble(self, kinds: list[int], ranges: list[list[int]], points: list[list[int]],
                 others: Iterable[Any]) -> list[ProfileEvent]:  # fmt: skip
        """Events in their written order from the kind column and the decoded columns."""
        s, thousand = self.strings, Decimal(1000)
        starts = _running(ranges[2], self.last_range)
        times = _running(points[4], self.last_point)
        self.last_range, self.last_point = (starts or [self.last_range])[-1], (times or [self.last_point])[-1]
        range_events = iter([ProfileRangeEvent(s[d], s[n], Decimal(st) / thousand,
                                               None if dur < 0 else Decimal(st + dur) / thousand, bool(c))
                             for d, n, st, dur, c in zip(ranges[0], ranges[1], starts, ranges[3], ranges[4],
                                                         strict=True)])  # fmt: skip
        point_events = iter([ProfilePointEvent(s[d], s[n], self.value(k), self.value(a), Decimal(t) / thousand)
                             for d, n, k, a, t in zip(*points[:4], times, strict=True)])  # fmt: skip
        rest = iter(others)
        by_kind = {EventKind.RANGE: range_events, EventKind.POINT: point_events}
        return [next(by_kind[EventKind(k)]) if k != EventKind.OTHER else event_from_json(next(rest)) for k in kinds]


def chunk_error(path: str | Path, pos: int, e: Exception) -> TraceFileError:
    return TraceFileError(f"{path}: malformed profile chunk at byte {pos}: {type(e).__name__}: {e}")


@dataclass
class RangeScan:
    """Range events by track as columns (start ns, duration ns, name string id, kind: 0 kernel, 1 copy, 2 graph batch),
    in pieces; the markers; and the span of all times (ns)."""

    tracks: dict[str, list[tuple[npt.NDArray[Any], ...]]] = field(default_factory=dict)  # per chunk
    markers: list[tuple[int, str]] = field(default_factory=list)  # (ns, label)
    strings: list[str] = field(default_factory=list)
    first: int = 1 << 62
    last: int = -(1 << 62)


def scan_ranges(path: str | Path) -> RangeScan:
    """The range events of a streaming profile file as columns, for the timeline's overview: no event objects are made
    (device clock offsets and graph batches, rare JSON rows, are left out). TraceFileError for a corrupt file."""
    data, decoder, scan = Path(path).read_bytes(), ChunkDecoder(), RangeScan()
    scan.strings = decoder.strings
    pos = len(HEADER)
    while pos + _RECORD.size <= len(data):
        length, kind = _RECORD.unpack_from(data, pos)
        payload = data[pos + _RECORD.size : pos + _RECORD.size + length]
        if len(payload) < length:
            break
        pos += _RECORD.size + length
        if kind == RecordKind.CHUNK:
            try:
                decoder.scan_chunk(payload, scan)
            except (zlib.error, ValueError, KeyError, IndexError, TypeError) as e:
                raise chunk_error(path, pos, e) from None
    return scan


@dataclass
class ProfileRead:
    """What a streaming profile file held: its events, run id, and whether its END record was there."""

    events: list[ProfileEvent]
    run_id: str | None
    complete: bool


def read_profile_file(path: str | Path, data: bytes) -> ProfileRead:
    """Decode a streaming profile file's bytes; TraceFileError naming `path` for a foreign, newer or corrupt one."""
    if data[len(MAGIC)] != FILE_VERSION:
        raise TraceFileError(f"{path}: {PROFILE_FORMAT} version {data[len(MAGIC)]} is not supported: expected "
                             f"version {FILE_VERSION}")  # fmt: skip
    pos, decoder, events = len(HEADER), ChunkDecoder(), []
    run_id, complete = None, False
    while pos + _RECORD.size <= len(data):
        length, kind = _RECORD.unpack_from(data, pos)
        payload = data[pos + _RECORD.size : pos + _RECORD.size + length]
        if len(payload) < length:
            break  # a chunk torn by a crash: everything before it is kept
        pos += _RECORD.size + length
        try:
            if kind == RecordKind.HEAD:
                run_id = json.loads(payload).get("run_id")
            elif kind == RecordKind.CHUNK:
                events.extend(decoder.decode_chunk(payload))
            elif kind == RecordKind.END:
                complete = True
        except (zlib.error, ValueError, KeyError, IndexError, TypeError, StopIteration) as e:
            raise chunk_error(path, pos, e) from None
    if run_id is not None and not isinstance(run_id, str):
        raise TraceFileError(f"{path}: malformed run_id {run_id!r}: expected a string")
    return ProfileRead(events, run_id, complete)


def streaming_run_id(path: str | Path) -> str | None:
    """For a streaming profile file, its run id ("" when it has none), read from its first record alone; None for any
    other file (the JSON form). TraceFileError for a missing, unreadable or newer file."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise TraceFileError(f"{path}: can't read the trace file: {e.strerror or e}") from None
    if not is_profile_file(head):
        return None
    try:
        length = _RECORD.unpack_from(head, len(HEADER))[0]
    except struct.error:
        return ""  # cut short before its first record: nothing to check it against
    return read_profile_file(path, head[: len(HEADER) + _RECORD.size + length]).run_id or ""
