"""Saved VIZ traces: the rewrite trace and the profile events as JSON files (gzip-compressed when the name ends in
`.gz`), never pickle, so opening a trace runs no code from it.

`save_rewrites` / `load_rewrites` and `save_profile` / `load_profile`. Values JSON lacks (tuples, enums, dtypes,
Decimals, metadata) are tagged objects `{"$": tag, ...}`; anything else is kept as its repr with its type name and
loads as a `ReprArg`. A missing, truncated, foreign or newer file raises `TraceFileError` naming the file.
The JSON profile is the export form: `load_profile` also reads the streaming profile file (profile_file.py).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import linecache
import math
import os
import re
import tempfile
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import Enum
from pathlib import Path
from typing import Any, cast

from fusegrad.device import ProfileDeviceEvent, ProfileGraphEntry, ProfileGraphEvent
from fusegrad.dtype import AddrSpace, DType, Invalid, InvalidType, PtrDType, dtypes
from fusegrad.helpers import PROFILEPATH, Metadata, ProfileEvent, ProfilePointEvent, ProfileRangeEvent, TracingKey
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp
from fusegrad.uop.rewrite import RewriteTrace, TrackedGraphRewrite, TrackedMatch, _uop_counter
from fusegrad.viz.kernels import KernelLink, SavedKernel, kernel_links, saved_kernel

REWRITES_FORMAT, PROFILE_FORMAT, VERSION = "fusegrad-viz-rewrites", "fusegrad-viz-profile", 1
_ENUMS: dict[str, type[Enum]] = {"Ops": Ops, "AxisType": AxisType, "AddrSpace": AddrSpace}
_SCALARS = {dt.name: dt for dt in (*dtypes.all, dtypes.void)}
Json = Any  # Any: a decoded JSON value (dict, list, str, int, float, bool or None)


def rewrites_path_for(profile: str | Path) -> Path:
    """The rewrites file saved with `profile`: beside it, named after it (`run.fgprof` -> `run.rewrites.json.gz`), so
    two runs writing profiles into one folder never share one."""
    profile = Path(profile)
    stem = profile.name.removesuffix(".gz").removesuffix(".json").removesuffix(".fgprof")
    return profile.with_name(f"{stem}.rewrites.json.gz")


def default_paths() -> tuple[Path, Path]:
    """(rewrites, profile) files VIZ=1 writes: the profile at PROFILEPATH, its rewrites beside it (gzip JSON)."""
    profile = Path(PROFILEPATH.value)
    return rewrites_path_for(profile), profile


def is_json_path(path: str | Path) -> bool:
    """A profile path that asks for the JSON form (written whole at exit) instead of the streaming file."""
    return Path(path).name.endswith((".json", ".json.gz"))


def new_run_id() -> str:
    """A fresh id for one run's pair of files: both carry it, and a pair whose ids differ is refused when opened."""
    return uuid.uuid4().hex


class TraceFileError(ValueError):
    """A trace file that can't be read; the message is one line: `<path>: <what is wrong>`."""


@dataclass(frozen=True, slots=True)
class ReprArg:
    """A saved value that had no JSON form: its type name and repr, which it prints as (so labels look the same)."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class KernelProgram:
    """What VIZ shows of a rendered kernel (a ProgramSpec without its live graph): source, linear UOps, estimates.

    `uops` rows are (op name, dtype, source row numbers, arg text); estimates are None where they are symbolic.
    """

    name: str
    device: str
    src: str
    uops: tuple[tuple[str, str, tuple[int, ...], str], ...] = ()
    ops: int | None = None
    lds: int | None = None
    mem: int | None = None


def kernel_program(ret: object) -> KernelProgram | None:
    """The KernelProgram of a group's result (a ProgramSpec, or one loaded from a file); None for other groups."""
    if isinstance(ret, KernelProgram) or ret is None:
        return ret
    src, uops, estimates = getattr(ret, "src", None), getattr(ret, "uops", None), getattr(ret, "estimates", None)
    if not isinstance(src, str) or not isinstance(uops, list):
        return None
    row = {id(u): i for i, u in enumerate(uops)}
    rows = tuple((u.op.name, repr(u.dtype), tuple(row.get(id(s), -1) for s in u.src), "" if u.arg is None else
                  str(u.arg)) for u in uops)  # fmt: skip
    numbers = [getattr(estimates, k, None) for k in ("ops", "lds", "mem")]
    ops, lds, mem = (n if isinstance(n, int) else None for n in numbers)
    return KernelProgram(str(getattr(ret, "name", "")), str(getattr(ret, "device", "")), src, rows, ops, lds, mem)


# *** values ***


def encode(v: object) -> Json:
    """A JSON value for `v`; decode(encode(v)) == v for every type VIZ traces hold, a ReprArg for the rest."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"$": "float", "v": repr(v)}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, tuple):
        return {"$": "tuple", "v": [encode(x) for x in v]}
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {"$": "dict", "v": {k: encode(x) for k, x in v.items()}}
    return _encode_object(v)


def _encode_object(v: object) -> Json:
    """The tagged form of a value JSON has no type for."""
    if isinstance(v, Enum) and _ENUMS.get(type(v).__name__) is type(v):
        return {"$": "enum", "type": type(v).__name__, "v": v.name}
    if isinstance(v, PtrDType):
        return {"$": "ptr", "base": encode(v.base), "space": v.addrspace.name, "v": v.v, "size": v.size}
    if isinstance(v, DType):
        return {"$": "dtype", "name": v.scalar().name, "count": v.count}
    if isinstance(v, Decimal):
        return {"$": "decimal", "v": str(v)}
    if isinstance(v, Metadata):
        return {"$": "metadata", "v": [v.name, v.caller, v.backward]}
    if isinstance(v, InvalidType):
        return {"$": "invalid"}
    if isinstance(v, ReprArg):
        return {"$": "repr", "type": v.type_name, "v": v.text}
    if isinstance(v, SavedKernel):
        return {"$": "kernel", "name": v.name, "ref": v.ref, "stores": v.stores}
    return {"$": "repr", "type": type(v).__name__, "v": repr(v)}


def decode(v: Json) -> Any:
    """The value `encode` wrote; raises KeyError/ValueError/TypeError on a malformed one."""
    if isinstance(v, list):
        return [decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    return _decode_tagged(v)


def _decode_tagged(v: dict[str, Json]) -> Any:
    match v["$"]:
        case "tuple":
            return tuple(decode(x) for x in v["v"])
        case "dict":
            return {str(k): decode(x) for k, x in v["v"].items()}
        case "float":
            return float(v["v"])
        case "enum":
            return _ENUMS[v["type"]][v["v"]]
        case "dtype":
            return _SCALARS[v["name"]].vec(int(v["count"]))
        case "ptr":
            return decode(v["base"]).ptr(int(v["size"]), AddrSpace[v["space"]]).vec(int(v["v"]))
        case "decimal":
            return Decimal(v["v"])
        case "metadata":
            return Metadata(str(v["v"][0]), str(v["v"][1]), bool(v["v"][2]))
        case "invalid":
            return Invalid
        case "repr":
            return ReprArg(str(v["type"]), str(v["v"]))
        case "kernel":
            name, ref = v["name"], v["ref"]
            return SavedKernel(None if name is None else str(name), None if ref is None else int(ref), int(v["stores"]))
    raise ValueError(f"unknown value tag {v['$']!r}")


# *** files ***


def write_atomic(path: str | Path, data: bytes | Iterable[bytes]) -> Path:
    """Write `data` to `path` crash-safe: a crash at any point leaves the old file or the new one, never a torn one.

    The bytes go to a unique temporary file in the same folder (os.replace is atomic only within one file system),
    are fsynced, then replace `path`; the folder is fsynced so the rename itself survives a power loss. The folder is
    created when missing; an OSError (no permission, a file where a folder should be) propagates.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in [data] if isinstance(data, bytes) else data:  # pieces: written as they come, never joined
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)
    return path


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # a folder that can't be opened (Windows): the file itself is already on disk
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on a folder
            os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: str | Path, document: dict[str, Json]) -> Path:
    """Write `document` to `path` (gzip when it ends in .gz) with `write_atomic`."""
    return write_json_pieces(path, [json.dumps(document, separators=(",", ":"), allow_nan=False)])


def write_json_pieces(path: str | Path, pieces: Iterable[str]) -> Path:
    """Write JSON text made piece by piece to `path` (gzip when it ends in .gz) with `write_atomic`: only one piece and
    the compressor's window are in memory at a time, so saving a long run's trace does not double its memory."""
    encoded = (piece.encode() for piece in pieces)
    return write_atomic(path, _gzip_pieces(encoded) if Path(path).suffix == ".gz" else encoded)


def _gzip_pieces(pieces: Iterable[bytes]) -> Iterable[bytes]:
    """The gzip stream of the concatenated pieces, as it is produced."""
    out = bytearray()
    with gzip.GzipFile(fileobj=_Sink(out), mode="wb", compresslevel=6) as gz:
        for piece in pieces:
            gz.write(piece)
            if len(out) >= 1 << 16:
                yield bytes(out)
                out.clear()
    yield bytes(out)


class _Sink:
    """A write-only file object over a bytearray (what GzipFile writes its compressed output to)."""

    def __init__(self, out: bytearray) -> None:
        self.out = out

    def write(self, data: bytes) -> int:
        self.out += data
        return len(data)

    def flush(self) -> None:
        pass


def read_json(path: str | Path, expected_format: str) -> dict[str, Json]:
    """The checked top-level object of a trace file; TraceFileError with a one-line reason otherwise."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TraceFileError(f"{path}: can't read the trace file: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceFileError(f"{path}: truncated or corrupt gzip data ({e})") from None
    try:
        document = json.loads(data)
    except UnicodeDecodeError:
        raise TraceFileError(f"{path}: binary data, not a JSON trace (pickled traces are never loaded)") from None
    except json.JSONDecodeError as e:
        raise TraceFileError(
            f"{path}: not valid JSON, truncated? ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None
    found = document.get("format") if isinstance(document, dict) else None
    if found != expected_format:
        what = f"a {found} file" if isinstance(found, str) else "not a fusegrad VIZ trace"
        raise TraceFileError(f"{path}: {what}, expected a {expected_format} file")
    if document.get("version") != VERSION:
        raise TraceFileError(f"{path}: {expected_format} version {document.get('version')!r} is not supported: "
                             f"expected version {VERSION}")  # fmt: skip
    return cast(dict[str, Json], document)


def _malformed(path: str | Path, what: str, e: Exception) -> TraceFileError:
    return TraceFileError(f"{path}: malformed {what}: {type(e).__name__}: {e}")


# *** the rewrite trace ***


@dataclass
class SavedRewrites:
    """A loaded rewrite trace, and the source lines of its steps and rules as they were when it was saved."""

    trace: RewriteTrace
    lines: dict[tuple[str, int], str] = field(default_factory=dict)
    run_id: str | None = None  # the id the run gave its pair of files (None: saved without one)


def reachable_nodes(trace: RewriteTrace) -> list[int]:
    """Numbers of every node a step or match refers to, with their sources, in ascending (sources-first) order."""
    todo = [n for steps in trace.rewrites for s in steps for n in (s.sink, *(m.before for m in s.matches))]
    todo += [m.after for steps in trace.rewrites for s in steps for m in s.matches if m.after is not None]
    seen: set[int] = set()
    while todo:
        n = todo.pop()
        if n not in seen and n in trace.uop_fields:
            seen.add(n)
            todo.extend(trace.uop_fields[n][2])
    return sorted(seen)


def _step_json(s: TrackedGraphRewrite) -> dict[str, Json]:
    matches = [[m.before, m.after, list(m.rule_loc), m.rule_src, m.duration, m.error] for m in s.matches]
    return {"loc": list(s.loc), "sink": s.sink, "depth": s.depth, "bottom_up": s.bottom_up, "name": s.name,
            "trace": [list(t) for t in s.trace], "matches": matches}  # fmt: skip


def _source_lines(trace: RewriteTrace) -> dict[str, str]:
    locs = {s.loc for steps in trace.rewrites for s in steps}
    locs |= {m.rule_loc for steps in trace.rewrites for s in steps for m in s.matches}
    found = {f"{file}:{line}": linecache.getline(file, line).strip() for file, line in locs}
    return {k: text for k, text in found.items() if text}


def save_rewrites(trace: RewriteTrace, path: str | Path, run_id: str | None = None) -> Path:
    """Write the rewrite trace (groups, steps, matches, the nodes they refer to, source lines) to `path`.

    `run_id` (see `new_run_id`) ties the file to the profile saved with the same id. The file is written as it is
    encoded (`write_json_pieces`): a group or a batch of nodes at a time, never the whole text at once."""
    head = {"format": REWRITES_FORMAT, "version": VERSION, "run_id": run_id}
    return write_json_pieces(path, _rewrites_pieces(trace, _dumps(head)[:-1]))


def _dumps(value: Json) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _rewrites_pieces(trace: RewriteTrace, head: str) -> Iterable[str]:
    """The rewrites document's text in pieces: `head` (the object's opening fields), then keys, groups, nodes, lines."""
    yield head + ',"keys":['
    for i, key in enumerate(trace.keys):
        entry: dict[str, Json] = {"name": key.display_name, "program": None}
        if (program := kernel_program(key.ret)) is not None:
            entry["program"] = {**{k: getattr(program, k) for k in ("name", "device", "src", "ops", "lds", "mem")},
                                "uops": [[op, dt, list(srcs), arg] for op, dt, srcs, arg in program.uops]}  # fmt: skip
        yield ("," if i else "") + _dumps(entry)
    yield '],"groups":['
    for i, steps in enumerate(trace.rewrites):
        yield ("," if i else "") + _dumps([_step_json(s) for s in steps])
    yield '],"nodes":['
    links, nodes = kernel_links(trace.keys), reachable_nodes(trace)
    for start in range(0, len(nodes), NODES_PER_PIECE):
        rows: list[Json] = [_node_json(n, trace.uop_fields[n], links) for n in nodes[start : start + NODES_PER_PIECE]]
        yield ("," if start else "") + _dumps(rows)[1:-1]  # the rows without their brackets: one list in the file
    yield '],"lines":' + _dumps(_source_lines(trace)) + "}"


NODES_PER_PIECE = 2048


def _node_json(n: int, fields: tuple[Any, ...], links: dict[UOp, KernelLink]) -> Json:
    op, dtype, srcs, arg, tag, *rest = fields
    if op is Ops.KERNEL:
        arg = saved_kernel(arg, links)  # the kernel's name and codegen group, not its live AST
    return [n, op.name, encode(dtype), list(srcs), encode(arg), encode(tag), encode(rest[0] if rest else None)]


def _decode_nodes(rows: Iterable[Json]) -> tuple[dict[int, tuple[Any, ...]], dict[int, int]]:
    """Fields by fresh trace numbers (so nodes of another process never meet this one's), and the renumbering."""
    fields: dict[int, tuple[Any, ...]] = {}
    renumber: dict[int, int] = {}
    for num, op, dtype, srcs, arg, tag, metadata in rows:
        missing = [s for s in srcs if s not in renumber]
        if missing:
            raise ValueError(f"node {num} refers to unknown nodes {missing[:5]}")
        renumber[int(num)] = new = next(_uop_counter)
        fields[new] = (Ops[op], decode(dtype), tuple(renumber[s] for s in srcs), decode(arg), decode(tag),
                       decode(metadata))  # fmt: skip
    return fields, renumber


def _decode_step(s: dict[str, Json], renumber: dict[int, int]) -> TrackedGraphRewrite:
    matches = [TrackedMatch(renumber[before], None if after is None else renumber[after], (str(loc[0]), int(loc[1])),
                            str(src), float(duration), error) for before, after, loc, src, duration, error in
               s["matches"]]  # fmt: skip
    trace = [(str(f), int(line), str(name), str(text)) for f, line, name, text in s["trace"]]
    return TrackedGraphRewrite((str(s["loc"][0]), int(s["loc"][1])), renumber[s["sink"]], int(s["depth"]),
                               bool(s["bottom_up"]), s["name"], matches, trace)  # fmt: skip


def _decode_key(k: dict[str, Json]) -> TracingKey:
    p = k["program"]
    if p is None:
        return TracingKey(str(k["name"]))
    uops = tuple((str(op), str(dt), tuple(int(s) for s in srcs), str(arg)) for op, dt, srcs, arg in p["uops"])
    program = KernelProgram(str(p["name"]), str(p["device"]), str(p["src"]), uops, p["ops"], p["lds"], p["mem"])
    return TracingKey(str(k["name"]), (program.name,), program)


_REWRITES_HEAD = re.compile(rb'\{"format":"fusegrad-viz-rewrites","version":1,"run_id":(?:null|"([0-9a-f]*)")')


def peek_run_id(path: str | Path) -> str | None:
    """A rewrites file's run id ("" for none) from its first bytes alone, when they are what `save_rewrites` writes;
    None when they are not, or can't be read (load_rewrites then says exactly what is wrong)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
        with gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb") as f:
            found = _REWRITES_HEAD.match(f.read(200))
    except (OSError, EOFError, zlib.error):
        return None
    return None if found is None else (found.group(1) or b"").decode()


def load_rewrites(path: str | Path) -> SavedRewrites:
    """The rewrite trace saved in `path`; raises TraceFileError naming the file and the problem."""
    document = read_json(path, REWRITES_FORMAT)
    try:
        fields, renumber = _decode_nodes(document["nodes"])
        groups = [[_decode_step(s, renumber) for s in steps] for steps in document["groups"]]
        keys = [_decode_key(k) for k in document["keys"]]
        if len(keys) != len(groups):
            raise ValueError(f"{len(keys)} group names for {len(groups)} groups")
        lines = {(file, int(line)): str(text) for loc, text in document["lines"].items() for file, line in
                 [loc.rsplit(":", 1)]}  # fmt: skip
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
        raise _malformed(path, "rewrite trace", e) from None
    return SavedRewrites(RewriteTrace(keys, groups, fields), lines, _run_id(path, document))


# *** profile events ***


def event_json(e: ProfileEvent) -> dict[str, Json] | None:
    def name(x: str | TracingKey) -> str:
        return x.display_name if isinstance(x, TracingKey) else str(x)

    match e:
        case ProfileRangeEvent():
            return {"type": "range", "device": e.device, "name": name(e.name), "st": str(e.st),
                    "en": None if e.en is None else str(e.en), "is_copy": e.is_copy}  # fmt: skip
        case ProfilePointEvent():
            key = name(e.key) if isinstance(e.key, TracingKey) else e.key
            return {"type": "point", "device": e.device, "name": e.name, "key": encode(key), "arg": encode(e.arg),
                    "ts": str(e.ts)}  # fmt: skip
        case ProfileDeviceEvent():
            return {"type": "device", "device": e.device, "comp_tdiff": str(e.comp_tdiff),
                    "copy_tdiff": str(e.copy_tdiff), "props": encode(e.props)}  # fmt: skip
        case ProfileGraphEvent():
            ents = [[x.device, name(x.name), x.st_id, x.en_id, x.is_copy] for x in e.ents]
            return {"type": "graph", "ents": ents, "deps": e.deps, "sigs": [str(s) for s in e.sigs]}
    return None  # program binaries and other device-specific events are not part of the viewer's trace


def save_profile(events: Sequence[ProfileEvent], path: str | Path, run_id: str | None = None) -> Path:
    """Write the profile events VIZ draws (ranges, points, device clocks, graph batches) to `path`.

    `run_id` (see `new_run_id`) ties the file to the rewrite trace saved with the same id."""
    rows = [j for e in events if (j := event_json(e)) is not None]
    return write_json(path, {"format": PROFILE_FORMAT, "version": VERSION, "run_id": run_id, "events": rows})


def event_from_json(e: dict[str, Json]) -> ProfileEvent:
    match e["type"]:
        case "range":
            en = None if e["en"] is None else Decimal(e["en"])
            return ProfileRangeEvent(str(e["device"]), str(e["name"]), Decimal(e["st"]), en, bool(e["is_copy"]))
        case "point":
            return ProfilePointEvent(str(e["device"]), str(e["name"]), decode(e["key"]), decode(e["arg"]),
                                     Decimal(e["ts"]))  # fmt: skip
        case "device":
            return ProfileDeviceEvent(str(e["device"]), Decimal(e["comp_tdiff"]), Decimal(e["copy_tdiff"]),
                                      decode(e["props"]))  # fmt: skip
        case "graph":
            ents = [ProfileGraphEntry(str(d), str(n), int(st), int(en), bool(c)) for d, n, st, en, c in e["ents"]]
            return ProfileGraphEvent(ents, [[int(x) for x in deps] for deps in e["deps"]],
                                     [Decimal(s) for s in e["sigs"]])  # fmt: skip
    raise ValueError(f"unknown event type {e['type']!r}")


@dataclass
class SavedProfile:
    """A loaded profile: its events, and the id of the run that saved it (None: saved without one)."""

    events: list[ProfileEvent]
    run_id: str | None = None
    complete: bool = True  # False: a streaming file without its END record (the run crashed or is still going)


def load_saved_profile(path: str | Path) -> SavedProfile:
    """The profile saved in `path` (a streaming profile file, or the JSON form) with its run id; raises TraceFileError
    naming the file and the problem. A streaming file cut short by a crash loads what it holds (`complete` False)."""
    from fusegrad.viz.profile_file import is_profile_file, read_profile_file  # it builds on this module

    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise TraceFileError(f"{path}: can't read the trace file: {e.strerror or e}") from None
    if is_profile_file(head):
        read = read_profile_file(path, Path(path).read_bytes())
        return SavedProfile(read.events, read.run_id, read.complete)
    document = read_json(path, PROFILE_FORMAT)
    try:
        events = [event_from_json(e) for e in document["events"]]
    except (KeyError, ValueError, TypeError, IndexError, InvalidOperation) as e:
        raise _malformed(path, "profile", e) from None
    return SavedProfile(events, _run_id(path, document))


def load_profile(path: str | Path) -> list[ProfileEvent]:
    """The profile events saved in `path`; raises TraceFileError naming the file and the problem."""
    return load_saved_profile(path).events


def _run_id(path: str | Path, document: dict[str, Json]) -> str | None:
    run_id = document.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        raise TraceFileError(f"{path}: malformed run_id {run_id!r}: expected a string")
    return run_id


def check_same_run(rewrites: str | Path, rewrites_id: str | None, profile: str | Path, profile_id: str | None) -> None:
    """Refuse a rewrite trace and a profile that two different runs saved (files without an id can't be checked)."""
    if rewrites_id is not None and profile_id is not None and rewrites_id != profile_id:
        raise TraceFileError(f"{rewrites} and {profile} come from different runs (run ids {rewrites_id[:12]} and "
                             f"{profile_id[:12]}): open the rewrites file saved with this profile, "
                             f"{rewrites_path_for(profile).name}, or pass only one of them")  # fmt: skip
