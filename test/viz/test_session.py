"""Tests for fusegrad/viz/session.py at scale: replays kept per step, a streaming profile read in the background, the
whole-run kernel table and the step times."""

from __future__ import annotations

import gc
import struct
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fusegrad.helpers import ProfilePointEvent, ProfileRangeEvent
from fusegrad.viz import session as session_module
from fusegrad.viz.profile import get_profile
from fusegrad.viz.profile_file import ProfileWriter
from fusegrad.viz.session import VizSession, open_session
from fusegrad.viz.trace_file import TraceFileError, peek_run_id, save_rewrites

if TYPE_CHECKING:  # the fixture's type; conftest is not importable in importlib mode
    from conftest import RealTrace


def first_step_with_matches(real_trace: RealTrace) -> tuple[int, int]:
    return next((c, i) for c, steps in enumerate(real_trace.trace.rewrites) for i, s in enumerate(steps) if s.matches)


def test_a_step_is_replayed_once(real_trace: RealTrace, monkeypatch: pytest.MonkeyPatch) -> None:
    session = real_trace.session()
    ctx, idx = first_step_with_matches(real_trace)
    first = list(session.step_stream(ctx, idx))
    assert first[-1]["kind"] == "done"
    replays: list[object] = []
    real = session_module.get_full_rewrite
    monkeypatch.setattr(session_module, "get_full_rewrite", lambda *a: replays.append(a) or real(*a))
    assert list(session.step_stream(ctx, idx)) == first
    assert replays == []
    other = next((c, i) for c, steps in enumerate(real_trace.trace.rewrites) for i in range(len(steps))
                 if (c, i) != (ctx, idx))  # fmt: skip
    list(session.step_stream(*other))
    assert len(replays) == 1  # a step not asked for before is replayed


def test_a_stream_closed_early_leaves_its_step_replayed_once(
    real_trace: RealTrace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page stopped reading after the first graph (a reload, the same step picked again): no other step was asked
    for, so the replay goes on, and asking again follows or reads it instead of starting over."""
    session, replays = real_trace.session(), counted_replays(monkeypatch)
    ctx, idx = first_step_with_matches(real_trace)
    stream = session.step_stream(ctx, idx)
    next(stream)
    next(stream)
    stream.close()
    assert list(session.step_stream(ctx, idx))[-1]["kind"] == "done"
    assert len(replays) == 1


def counted_replays(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Each replay of a step (get_full_rewrite called) appends to the returned list."""
    replays: list[object] = []
    real = session_module.get_full_rewrite
    monkeypatch.setattr(session_module, "get_full_rewrite", lambda *a: replays.append(a) or real(*a))
    return replays


def drawn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with node ids as places in their graph's order: a replay's nodes that died in between are made
    again at new ids, so two replays compare by what they draw."""
    out = []
    for m in messages:
        if m["kind"] == "graph":
            at = {int(k): i for i, k in enumerate(m["order"])}
            nodes = [(n["label"], [(i, at.get(int(s), -1)) for i, s in n["src"]], n["color"], n["ref"])
                     for n in (m["graph"][str(k)] for k in m["order"])]  # fmt: skip
            m = {**m, "graph": nodes, "order": None, "changed": sorted(at.get(int(c), -1) for c in m["changed"])}
        out.append(m)
    return out


def held_replay(session: VizSession, release: threading.Event) -> None:
    """The session's next replays start once `release` is set (waiting outside the replay lock: others go on)."""
    real = session._replay

    def held(*args: Any) -> Any:
        release.wait(30)
        yield from real(*args)

    session._replay = held  # type: ignore[method-assign]  # this session's replays only


def wait_prepared(session: VizSession) -> None:
    for _ in range(3000):
        if not session._preparing:
            return
        time.sleep(0.01)
    raise AssertionError("a preparation did not finish in 30 s")


def test_a_prepared_step_is_replayed_once_and_sent_as_a_stream_replays_it(
    real_trace: RealTrace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, idx = first_step_with_matches(real_trace)
    want = drawn(list(real_trace.session().step_stream(ctx, idx)))
    replays = counted_replays(monkeypatch)
    session = real_trace.session()
    assert session.prepare(ctx, idx)
    assert drawn(list(session.step_stream(ctx, idx))) == want  # followed while it is made, or sent from the cache
    assert not session.prepare(ctx, idx)  # kept: nothing to start
    assert drawn(list(session.step_stream(ctx, idx))) == want
    wait_prepared(session)
    assert len(replays) == 1


def test_a_stream_follows_a_preparation_as_it_goes(real_trace: RealTrace, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, idx = first_step_with_matches(real_trace)
    want = drawn(list(real_trace.session().step_stream(ctx, idx)))
    session, release, replays = real_trace.session(), threading.Event(), counted_replays(monkeypatch)
    held_replay(session, release)  # the preparation waits until the stream has joined it
    session.prepare(ctx, idx)
    stream = session.step_stream(ctx, idx)
    assert next(stream)["kind"] == "step"
    threading.Timer(0.2, release.set).start()
    assert drawn([next(stream), *stream]) == want[1:]
    assert len(replays) == 1  # the preparation's, followed: the stream made none of its own
    assert session._preparing == {}
    assert (ctx, idx) in session._steps


def test_a_preparation_nobody_follows_stops_when_another_step_is_asked_for(real_trace: RealTrace) -> None:
    ctx, idx = first_step_with_matches(real_trace)
    session, release = real_trace.session(), threading.Event()
    held_replay(session, release)
    session.prepare(ctx, idx)
    del session._replay  # the other step's stream replays at once
    other = next((c, i) for c, steps in enumerate(real_trace.trace.rewrites) for i in range(len(steps))
                 if (c, i) != (ctx, idx))  # fmt: skip
    list(session.step_stream(*other))
    release.set()
    wait_prepared(session)
    assert (ctx, idx) not in session._steps  # abandoned after its first graph: not kept
    assert other in session._steps


def test_the_kept_replays_are_bounded(real_trace: RealTrace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "STEP_CACHE", 2)
    session = real_trace.session()
    steps = [(c, i) for c, group in enumerate(real_trace.trace.rewrites) for i in range(len(group))][:3]
    for key in steps:
        list(session.step_stream(*key))
    assert list(session._steps) == steps[1:]  # the oldest went
    replays = counted_replays(monkeypatch)
    list(session.step_stream(*steps[1]))  # kept: sent again, and now the newest
    assert replays == []
    list(session.step_stream(*steps[0]))
    assert len(replays) == 1
    assert list(session._steps) == [steps[1], steps[0]]


def write_profile(path: Path, events: list, run_id: str | None) -> Path:  # type: ignore[type-arg]  # profile events
    writer = ProfileWriter(path, run_id)
    writer.write(events)
    return writer.close()


def test_a_streaming_profile_loads_in_the_background(tmp_path: Path, real_trace: RealTrace) -> None:
    profile = write_profile(tmp_path / "run.fgprof", real_trace.events, "id1")
    save_rewrites(real_trace.trace, tmp_path / "run.rewrites.json.gz", "id1")
    session = open_session(tmp_path / "run.rewrites.json.gz", profile)
    assert session._loader is not None
    expected = VizSession(session.trace, list(session.profile_events())).profile_bytes()
    assert session.profile_bytes() == expected
    assert session.profile_bytes() == get_profile(list(session.profile_events()), session.programs())


def test_a_loaded_trace_is_kept_out_of_garbage_collections(tmp_path: Path, real_trace: RealTrace) -> None:
    """The collector is paused while the background loads run, and once they finish the loaded objects are frozen
    (gc.freeze): its full passes no longer walk a whole run's trace while the server answers."""
    profile = write_profile(tmp_path / "run.fgprof", real_trace.events, "id1")
    save_rewrites(real_trace.trace, tmp_path / "run.rewrites.json.gz", "id1")
    gc.unfreeze()
    try:
        session = open_session(tmp_path / "run.rewrites.json.gz", profile, background=True)
        session.wait_rewrites()
        session.profile_events()
        assert gc.get_freeze_count() > 0
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_a_streaming_profile_of_another_run_is_refused(tmp_path: Path, real_trace: RealTrace) -> None:
    profile = write_profile(tmp_path / "run.fgprof", real_trace.events, "id2")
    save_rewrites(real_trace.trace, tmp_path / "other.rewrites.json.gz", "id3")
    with pytest.raises(TraceFileError, match=r"come from different runs"):
        open_session(tmp_path / "other.rewrites.json.gz", profile)


def test_a_bad_chunk_shows_when_the_profile_is_asked_for(tmp_path: Path, real_trace: RealTrace) -> None:
    data = bytearray(write_profile(tmp_path / "run.fgprof", real_trace.events, None).read_bytes())
    data[-40] ^= 0xFF
    (tmp_path / "run.fgprof").write_bytes(bytes(data))
    session = open_session(None, tmp_path / "run.fgprof")
    with pytest.raises(TraceFileError, match=r"run.fgprof: malformed profile chunk"):
        session.profile_bytes()


def kernel_run(name: str, st: int, dur: int) -> list[ProfilePointEvent | ProfileRangeEvent]:
    return [ProfilePointEvent("CPU", "exec", name, {"bufs": []}, Decimal(st)),
            ProfileRangeEvent("CPU", name, Decimal(st), Decimal(st + dur))]  # fmt: skip


def test_the_kernel_table_totals_each_kernel_over_the_run(tmp_path: Path, real_trace: RealTrace) -> None:
    events = [*kernel_run("r_a", 100, 10), *kernel_run("r_b", 120, 50), *kernel_run("r_a", 200, 30)]
    events += [ProfileRangeEvent("TINY", "compile r_a", Decimal(0), Decimal(90))]  # host work: not a kernel run
    stats = VizSession(events=events).kernel_stats()
    rows = {r["name"]: r for r in stats["kernels"]}
    assert [r["name"] for r in stats["kernels"]] == ["r_b", "r_a"]  # most time first
    assert (rows["r_a"]["runs"], rows["r_a"]["total_us"], rows["r_a"]["mean_us"]) == (2, 40.0, 20.0)
    assert rows["r_a"]["first_us"] == 100.0  # the compile range at 0 starts the timeline
    assert rows["r_a"]["gflops"] is None  # no program: no estimates
    streamed = open_session(None, write_profile(tmp_path / "p.fgprof", events, None)).kernel_stats()
    assert streamed == stats  # read from the file's columns, without waiting for its events: the same table
    # with the real trace's programs: ops and bytes over the measured time
    real = real_trace.session().kernel_stats()["kernels"]
    timed = [r for r in real if r["ctx"] is not None]
    assert timed
    for r in timed:
        program = real_trace.session().program(r["ctx"])
        assert program is not None
        assert program.ops is not None
        assert r["gflops"] == pytest.approx(program.ops * r["runs"] / (r["total_us"] / 1e6) / 1e9)


def test_marked_steps_give_the_step_time_series(tmp_path: Path) -> None:
    def mark(name: str, ts: int) -> ProfilePointEvent:
        return ProfilePointEvent("TINY", "marker", None, {"name": name, "color": "gray"}, Decimal(ts))

    events = [mark("step 1", 100), mark("step 2", 350), mark("eval", 400), mark("step 3", 500), mark("step 4", 900)]
    assert VizSession(events=events).kernel_stats()["steps"] == {"step": [250.0, 150.0, 400.0]}
    streamed = open_session(None, write_profile(tmp_path / "p.fgprof", events, None))
    assert streamed.kernel_stats()["steps"] == {"step": [250.0, 150.0, 400.0]}


def test_the_overview_sums_each_bin(tmp_path: Path) -> None:
    """Four bins over 0..400 us: each event's time goes to the bins it covers; the longest event names its bin."""
    events = [*kernel_run("r_a", 0, 50), *kernel_run("r_b", 60, 20), *kernel_run("r_long", 150, 200)]
    events.append(ProfilePointEvent("TINY", "marker", None, {"name": "end"}, Decimal(400)))
    for session in (VizSession(events=events), open_session(None, write_profile(tmp_path / "p.fgprof", events, None))):
        view = session.timeline_overview(4)
        assert view["duration_us"] == 400
        (track,) = view["tracks"]
        assert track["name"] == "CPU"
        assert track["busy"] == [0.7, 0.5, 1.0, 0.5]  # r_long (150..350) covers half of bin 1, all of 2, half of 3
        assert [view["strings"][i] if i >= 0 else None for i in track["top"]] == ["r_a", "r_long", None, None]
    with pytest.raises(ValueError, match=r"timeline_overview: bins must be 1\.\.8192: got 0"):
        VizSession(events=events).timeline_overview(0)


def test_the_overview_of_a_real_run_matches_its_timeline(tmp_path: Path, real_trace: RealTrace) -> None:
    from_file = open_session(None, write_profile(tmp_path / "p.fgprof", real_trace.events, None))
    view = from_file.timeline_overview(500)
    duration = struct.unpack_from("<I", from_file.profile_bytes())[0]
    assert int(view["duration_us"]) == duration  # same origin and end as the packed timeline
    assert {t["name"] for t in view["tracks"]} == {t["name"] for t in VizSession(events=real_trace.events)
                                                   .timeline_overview(500)["tracks"]}  # fmt: skip


def test_a_rewrites_file_loads_in_the_background_once_its_header_checks_out(
    tmp_path: Path, real_trace: RealTrace
) -> None:
    rewrites = save_rewrites(real_trace.trace, tmp_path / "run.rewrites.json.gz", "abc1")
    profile = write_profile(tmp_path / "run.fgprof", real_trace.events, "abc1")
    assert peek_run_id(rewrites) == "abc1"
    session = open_session(rewrites, profile, background=True)
    assert session._rewrites_loader is not None
    assert session.groups() == open_session(rewrites, profile).groups()
    with pytest.raises(TraceFileError, match=r"come from different runs"):
        open_session(save_rewrites(real_trace.trace, tmp_path / "other.rewrites.json.gz", "abc2"), profile, True)
    data = rewrites.read_bytes()
    cut = tmp_path / "cut.rewrites.json.gz"
    cut.write_bytes(data[: len(data) // 2])  # the header is whole, the body is not
    late = open_session(cut, None, background=True)
    with pytest.raises(TraceFileError, match=r"cut.rewrites.json.gz: truncated or corrupt gzip data"):
        late.groups()
    (tmp_path / "foreign.json").write_text('{"format": "something else"}')
    assert peek_run_id(tmp_path / "foreign.json") is None
    with pytest.raises(TraceFileError, match=r"not a fusegrad VIZ trace|a something else file"):
        open_session(tmp_path / "foreign.json", None, background=True)  # checked at once, not in the background
