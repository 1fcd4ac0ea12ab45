"""Tests for fusegrad/viz/trace_file.py: saved traces are plain JSON (maybe gzip), round-trip, and fail clearly."""

from __future__ import annotations

import gzip
import json
import math
import os
import pickle
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fusegrad.dtype import AddrSpace, Invalid, dtypes
from fusegrad.helpers import Context, Metadata, ProfilePointEvent, TracingKey
from fusegrad.uop import AxisType, Ops
from fusegrad.viz import trace_file
from fusegrad.viz.profile import get_profile
from fusegrad.viz.rewrites import get_full_rewrite, get_rewrites
from fusegrad.viz.session import open_session
from fusegrad.viz.trace_file import (
    KernelProgram,
    ReprArg,
    TraceFileError,
    decode,
    default_paths,
    encode,
    load_profile,
    load_rewrites,
    new_run_id,
    rewrites_path_for,
    save_profile,
    save_rewrites,
)

if TYPE_CHECKING:  # the fixture's type; conftest is not importable in importlib mode
    from conftest import RealTrace

REPO = Path(__file__).resolve().parents[2]


class Opaque:
    def __repr__(self) -> str:
        return "Opaque(7)"


class TestValues:
    @pytest.mark.parametrize(
        "value",
        [None, True, 3, -(2**70), 1.5, -0.0, "text\nwith \x1b[31mcodes", (1, (2.5, "x")), [1, [2]], {"a": (1,)},
         Ops.ADD, AxisType.REDUCE, dtypes.float32, dtypes.half.vec(4), dtypes.int8.ptr(16),
         dtypes.float.ptr(4, AddrSpace.REG).vec(2), Decimal("12345.678"), Metadata("relu", "x.py:3", True),
         Invalid, (Invalid, 1.0)],
    )  # fmt: skip
    def test_round_trip(self, value: Any) -> None:
        back = decode(json.loads(json.dumps(encode(value), allow_nan=False)))
        assert back == value
        assert type(back) is type(value)

    def test_non_finite_floats_are_valid_json(self) -> None:
        for value in (math.inf, -math.inf):
            assert decode(json.loads(json.dumps(encode(value), allow_nan=False))) == value
        assert math.isnan(decode(json.loads(json.dumps(encode(math.nan), allow_nan=False))))

    def test_other_values_keep_their_repr_and_type_name(self) -> None:
        back = decode(json.loads(json.dumps(encode(Opaque()))))
        assert back == ReprArg("Opaque", "Opaque(7)")
        assert repr(back) == str(back) == "Opaque(7)"
        assert decode(encode(back)) == back

    def test_unknown_tags_and_names_are_errors(self) -> None:
        for bad in ({"$": "pickle", "v": ""}, {"$": "enum", "type": "os", "v": "system"}, {"$": "dtype", "name": "x"}):
            with pytest.raises((KeyError, ValueError)):
                decode(bad)


def labels(graphs: list[dict[str, Any]]) -> list[list[str]]:
    return [sorted(v["label"] for v in g["graph"].values()) for g in graphs]


class TestRewrites:
    @pytest.mark.parametrize("name", ["rewrites.json", "rewrites.json.gz"])
    def test_round_trip_of_a_real_trace(self, real_trace: RealTrace, tmp_path: Path, name: str) -> None:
        path = save_rewrites(real_trace.trace, tmp_path / name)
        data = path.read_bytes()
        assert data[:2] == b"\x1f\x8b" if name.endswith(".gz") else data[:1] == b"{"
        loaded = load_rewrites(path)
        want, got = get_rewrites(real_trace.trace), get_rewrites(loaded.trace)
        assert [(g["name"], [s["name"] for s in g["steps"]]) for g in got] == [
            (g["name"], [s["name"] for s in g["steps"]]) for g in want
        ]
        for ctx, steps in enumerate(real_trace.trace.rewrites):
            for idx, step in enumerate(steps):
                before = list(get_full_rewrite(step, real_trace.trace.uop_fields))
                after = list(get_full_rewrite(loaded.trace.rewrites[ctx][idx], loaded.trace.uop_fields))
                assert labels(after) == labels(before), f"group {ctx} step {idx} replays differently"
        assert loaded.lines, "source lines of steps and rules are saved with the trace"

    def test_kernel_programs_are_kept(self, real_trace: RealTrace, tmp_path: Path) -> None:
        loaded = load_rewrites(save_rewrites(real_trace.trace, tmp_path / "r.json"))
        programs = [k.ret for k in loaded.trace.keys if k.ret is not None]
        originals = [k.ret for k in real_trace.trace.keys if k.ret is not None]
        assert programs
        assert len(programs) == len(originals)
        for program, spec in zip(programs, originals, strict=True):
            assert isinstance(program, KernelProgram)
            assert program.src == spec.src
            assert program.name == spec.name
            assert len(program.uops) == len(spec.uops)
            assert program.ops == spec.estimates.ops

    def test_loaded_nodes_never_meet_live_ones(self, real_trace: RealTrace, tmp_path: Path) -> None:
        loaded = load_rewrites(save_rewrites(real_trace.trace, tmp_path / "r.json"))
        assert not set(loaded.trace.uop_fields) & set(real_trace.trace.uop_fields)

    def test_a_file_holds_only_json(self, real_trace: RealTrace, tmp_path: Path) -> None:
        path = save_rewrites(real_trace.trace, tmp_path / "r.json")
        document = json.loads(path.read_text())
        assert document["format"] == "fusegrad-viz-rewrites"
        assert document["version"] == 1
        assert "pickle" not in path.read_text()

    def test_an_empty_trace(self, tmp_path: Path) -> None:
        from fusegrad.uop.rewrite import RewriteTrace

        loaded = load_rewrites(save_rewrites(RewriteTrace([TracingKey("empty")], [[]], {}), tmp_path / "r.json"))
        assert [k.display_name for k in loaded.trace.keys] == ["empty"]


class TestProfile:
    def test_round_trip_packs_the_same_timeline(self, real_trace: RealTrace, tmp_path: Path) -> None:
        loaded = load_profile(save_profile(real_trace.events, tmp_path / "p.json.gz"))
        assert get_profile(loaded) == get_profile(real_trace.events)

    def test_exec_payloads_survive(self, real_trace: RealTrace, tmp_path: Path) -> None:
        loaded = load_profile(save_profile(real_trace.events, tmp_path / "p.json"))
        execs = [e for e in loaded if isinstance(e, ProfilePointEvent) and e.name == "exec"]
        assert execs
        assert all(isinstance(e.arg["bufs"], list) for e in execs)
        assert all(isinstance(m, Metadata) for e in execs for m in e.arg["metadata"] or ())


class TestErrors:
    """Every unreadable file gives one line that names the file and the problem."""

    def check(self, path: Path, match: str, loader: Any = load_rewrites) -> None:
        with pytest.raises(TraceFileError, match=match) as info:
            loader(path)
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(str(path))

    def test_missing(self, tmp_path: Path) -> None:
        self.check(tmp_path / "nope.json", "can't read")

    def test_truncated_json(self, real_trace: RealTrace, tmp_path: Path) -> None:
        path = save_rewrites(real_trace.trace, tmp_path / "r.json")
        path.write_bytes(path.read_bytes()[:200])
        self.check(path, "not valid JSON, truncated")

    def test_truncated_gzip(self, real_trace: RealTrace, tmp_path: Path) -> None:
        path = save_rewrites(real_trace.trace, tmp_path / "r.json.gz")
        path.write_bytes(path.read_bytes()[:100])
        self.check(path, "truncated or corrupt gzip")

    def test_foreign_json(self, tmp_path: Path) -> None:
        path = tmp_path / "package.json"
        path.write_text('{"name": "left-pad"}')
        self.check(path, "not a fusegrad VIZ trace")

    def test_the_other_kind_of_trace(self, real_trace: RealTrace, tmp_path: Path) -> None:
        path = save_profile(real_trace.events, tmp_path / "p.json")
        self.check(path, "a fusegrad-viz-profile file, expected a fusegrad-viz-rewrites file")

    def test_newer_version(self, tmp_path: Path) -> None:
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"format": "fusegrad-viz-profile", "version": 99, "events": []}))
        self.check(path, "version 99 is not supported", load_profile)

    def test_pickle_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "trace.pkl"
        path.write_bytes(pickle.dumps({"format": "fusegrad-viz-rewrites"}))
        self.check(path, "binary data")
        path.write_bytes(gzip.compress(pickle.dumps([1, 2])))
        self.check(path, "binary data")

    def test_malformed_content(self, tmp_path: Path) -> None:
        path = tmp_path / "r.json"
        doc = {"format": "fusegrad-viz-rewrites", "version": 1, "keys": [], "groups": [], "lines": {},
               "nodes": [[5, "ADD", {"$": "dtype", "name": "int", "count": 1}, [3], None, None, None]]}  # fmt: skip
        path.write_text(json.dumps(doc))
        self.check(path, "malformed rewrite trace: .*unknown nodes")
        doc["nodes"] = [[5, "NOT_AN_OP", None, [], None, None, None]]
        path.write_text(json.dumps(doc))
        self.check(path, "malformed rewrite trace")
        bad_events = {"format": "fusegrad-viz-profile", "version": 1, "events": [{"type": "range", "st": "x"}]}
        path.write_text(json.dumps(bad_events))
        self.check(path, "malformed profile", load_profile)


class TestRunPairs:
    """Two runs writing profiles into one folder keep apart: each rewrites file is named after its profile, and a
    rewrites file and a profile from different runs are refused together."""

    def test_rewrites_are_named_after_the_profile(self, tmp_path: Path) -> None:
        assert rewrites_path_for(tmp_path / "run_a.json") == tmp_path / "run_a.rewrites.json.gz"
        assert rewrites_path_for(tmp_path / "run_b.json.gz") == tmp_path / "run_b.rewrites.json.gz"
        assert rewrites_path_for(tmp_path / "trace") == tmp_path / "trace.rewrites.json.gz"
        for name in ("run_a.json", "run_b.json"):
            with Context(PROFILEPATH=str(tmp_path / name)):
                assert default_paths() == (rewrites_path_for(tmp_path / name), tmp_path / name)
        assert rewrites_path_for(tmp_path / "run_a.json") != rewrites_path_for(tmp_path / "run_b.json")

    def test_two_runs_in_one_folder_open_their_own_rewrites(self, real_trace: RealTrace, tmp_path: Path) -> None:
        from fusegrad.uop.rewrite import RewriteTrace

        first = RewriteTrace([TracingKey("only in the first run")], [[]], {})
        for name, trace in (("first.json", first), ("second.json", real_trace.trace)):
            run_id = new_run_id()
            save_profile(real_trace.events, tmp_path / name, run_id)
            save_rewrites(trace, rewrites_path_for(tmp_path / name), run_id)
        with Context(PROFILEPATH=str(tmp_path / "first.json")):
            session = open_session()
        assert [g["name"] for g in session.groups()] == ["only in the first run"]

    def test_a_mismatched_pair_is_refused(self, real_trace: RealTrace, tmp_path: Path) -> None:
        profile = save_profile(real_trace.events, tmp_path / "first.json", new_run_id())
        rewrites = save_rewrites(real_trace.trace, tmp_path / "second.rewrites.json.gz", new_run_id())
        with pytest.raises(TraceFileError, match=r"come from different runs.*first\.rewrites\.json\.gz") as info:
            open_session(rewrites, profile)
        assert "\n" not in str(info.value)
        assert str(rewrites) in str(info.value)
        assert str(profile) in str(info.value)
        run_id = new_run_id()  # the same pair saved by one run opens
        save_profile(real_trace.events, profile, run_id)
        save_rewrites(real_trace.trace, rewrites, run_id)
        assert open_session(rewrites, profile).groups()

    def test_files_without_a_run_id_still_open(self, real_trace: RealTrace, tmp_path: Path) -> None:
        profile = save_profile(real_trace.events, tmp_path / "p.json")
        rewrites = save_rewrites(real_trace.trace, tmp_path / "r.json.gz", new_run_id())
        assert json.loads(profile.read_text())["run_id"] is None
        assert open_session(rewrites, profile).groups()


class TestCrashSafeSaves:
    """A save that dies at any point leaves the old file or the new one at the path, never a torn one."""

    def test_a_failing_write_keeps_the_old_file(
        self, real_trace: RealTrace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = save_profile(real_trace.events, tmp_path / "p.json")
        old = path.read_bytes()

        def disk_gone(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(trace_file.os, "fsync", disk_gone)
        with pytest.raises(OSError, match="Input/output error"):
            save_profile([], path)
        assert path.read_bytes() == old
        assert os.listdir(tmp_path) == ["p.json"], "the temporary file is removed"

    def test_data_is_on_disk_before_the_rename(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        calls: list[str] = []
        fsync, replace = os.fsync, os.replace
        monkeypatch.setattr(trace_file.os, "fsync", lambda fd: (calls.append("fsync"), fsync(fd))[1])
        monkeypatch.setattr(trace_file.os, "replace", lambda a, b: (calls.append("replace"), replace(a, b))[1])
        path = trace_file.write_atomic(tmp_path / "t.json", b"{}")
        assert calls[:2] == ["fsync", "replace"]
        assert path.read_bytes() == b"{}"

    def test_a_process_killed_mid_save_leaves_the_old_file(self, real_trace: RealTrace, tmp_path: Path) -> None:
        rewrites = save_rewrites(real_trace.trace, tmp_path / "r.json.gz")
        old = rewrites.read_bytes()
        script = (
            "import os, signal\n"
            "from fusegrad.uop.rewrite import RewriteTrace\n"
            "from fusegrad.helpers import TracingKey\n"
            "from fusegrad.viz import trace_file\n"
            "os.replace = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)  # dies between the write and the rename\n"
            f"trace_file.save_rewrites(RewriteTrace([TracingKey('new')], [[]], {{}}), {str(rewrites)!r})\n"
        )
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
        assert proc.returncode == -9, proc.stderr
        assert rewrites.read_bytes() == old
        assert load_rewrites(rewrites).trace.keys[0].display_name == real_trace.trace.keys[0].display_name

    def test_a_missing_folder_is_created(self, real_trace: RealTrace, tmp_path: Path) -> None:
        path = save_profile(real_trace.events, tmp_path / "new" / "deeper" / "p.json")
        assert load_profile(path)


def test_the_rewrites_file_is_written_in_pieces_as_one_document(
    tmp_path: Path, real_trace: RealTrace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saving streams the document a group and a batch of nodes at a time; the pieces make the same JSON as one dump,
    whatever the batch size (3 nodes: many batches, the commas between them included)."""
    whole = json.loads(
        gzip.decompress(save_rewrites(real_trace.trace, tmp_path / "a.rewrites.json.gz", "ab").read_bytes())
    )
    monkeypatch.setattr(trace_file, "NODES_PER_PIECE", 3)
    path = save_rewrites(real_trace.trace, tmp_path / "b.json", "ab")
    assert json.loads(path.read_bytes()) == whole
    assert len(whole["nodes"]) > 3
    assert trace_file.peek_run_id(path) == "ab"
