"""What the VIZ server and the terminal view serve: one loaded rewrite trace and profile, as JSON-ready payloads.

`VizSession(trace, events)` answers the endpoints: `groups()` (/ctxs), `step_stream(ctx, idx)` (a step's graph after
every match, replayed once in a thread that streams follow, the STEP_CACHE newest replays kept), `prepare(ctx, idx)`
(that replay started ahead), `kernel(ctx)`, `search(text)`, `profile_bytes()` and `profile_info()`
(/get_profile), `timeline_overview(bins)` and `kernel_stats()` (read from a streaming file's columns at once).
`open_session` reads saved files, the big parts in background threads, so a server answers at once.
"""

from __future__ import annotations

import gc
import linecache
import threading
from collections import OrderedDict
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fusegrad.helpers import Context, ProfileEvent, ProfilePointEvent, ansistrip, to_function_name
from fusegrad.uop.rewrite import RewriteTrace, TrackedGraphRewrite
from fusegrad.viz.overview import TrackBins, kernel_totals, overview, prepare_tracks, scan_events, step_series
from fusegrad.viz.profile import get_profile, key_name
from fusegrad.viz.profile_file import RangeScan, scan_ranges, streaming_run_id
from fusegrad.viz.rewrites import Replayed, get_full_rewrite, get_rewrites
from fusegrad.viz.trace_file import (
    KernelProgram,
    TraceFileError,
    check_same_run,
    default_paths,
    kernel_program,
    load_rewrites,
    load_saved_profile,
    peek_run_id,
)

MAX_SEARCH_RESULTS = 200
STEP_CACHE = 32  # replayed steps the server keeps
CALL_TRACE_FRAMES = 12  # innermost frames of a step's call trace shown in the step header


def highlight_c(src: str) -> str | None:
    """Kernel source as HTML spans (Pygments' short token classes, styled by style.css); None without Pygments."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import CLexer
    except ImportError:  # pygments is the optional `viz` extra: the page shows plain text
        return None
    return str(highlight(src, CLexer(), HtmlFormatter(nowrap=True)))


# background loads running, and whether the collector was on when the first began (a container: never rebound)
_loading = {"count": 0, "collector_was_on": True}
_loading_lock = threading.Lock()


@contextmanager
def collections_paused() -> Iterator[None]:
    """Around a trace load: the garbage collector is paused while any load runs, and when the last ends every object
    alive (the loaded trace: a GPT run's is ~700,000, all kept as long as the server) is frozen out of its later passes.

    A load makes objects that all stay, so passes over them while they are made find nothing (paused, a GPT run's
    rewrites load in 1.5-1.9 s instead of 4.5-4.9, its profile in 4.3-4.7 instead of 8-10); afterwards each full pass
    walked them all, and one landing in a request held it 0.2-0.8 s (a step's first graph took 0.8-0.9 s, not 0.3)."""
    with _loading_lock:
        if not _loading["count"]:
            _loading["collector_was_on"] = gc.isenabled()
            gc.disable()
        _loading["count"] += 1
    try:
        yield
    finally:
        with _loading_lock:
            _loading["count"] -= 1
            if not _loading["count"]:
                gc.freeze()
                if _loading["collector_was_on"]:
                    gc.enable()


def _plain(label: str) -> str:
    return ansistrip(label) if "\x1b" in label else label  # most labels have no colour: skip the regex for them


def graph_message(i: int, replay: Mapping[str, Any]) -> dict[str, Any]:
    """One streamed graph: nodes (labels without ANSI codes) and their order (sources first: a JSON object's integer
    keys lose it), created nodes, the rule and the diff. The page lays the graph out itself (static/layout.js, in a
    web worker), so a big graph costs the server no layout and the page's main thread none either."""
    nodes = {str(k): {"label": _plain(v["label"]), "src": v["src"], "color": v["color"], "ref": v.get("ref")}
             for k, v in replay["graph"].items()}  # fmt: skip
    rule = None
    if replay["upat"] is not None:
        (file, line), src = replay["upat"]
        rule = {"loc": [file, line], "src": src, "line": linecache.getline(file, line).strip()}
    return {"kind": "graph", "i": i, "graph": nodes, "order": list(replay["graph"]),
            "changed": replay["changed_nodes"] or [], "diff": replay["diff"] or [], "rule": rule}  # fmt: skip


@dataclass
class SearchIndex:
    """Per node number, where it first appears: (group, step, graph index) — a step's input or the match creating it."""

    where: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    text: dict[int, str] = field(default_factory=dict)


@dataclass
class _Preparing:
    """A step being replayed in the background: its messages so far, and whether it has finished; `changed` is
    notified on each message. `followers` counts the streams sending it as it goes."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    followers: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)


@dataclass
class VizSession:
    """A rewrite trace (with saved source lines) and profile events; payloads are built on request and cached."""

    trace: RewriteTrace | None = None
    events: Sequence[ProfileEvent] = ()
    lines: dict[tuple[str, int], str] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _replay_lock: threading.Lock = field(default_factory=threading.Lock)
    _scan_lock: threading.Lock = field(default_factory=threading.Lock)
    _loader: threading.Thread | None = None  # reads the profile file while the server already answers
    _load_error: TraceFileError | None = None
    _rewrites_loader: threading.Thread | None = None  # reads the rewrites file likewise (open_session background=True)
    _rewrites_error: TraceFileError | None = None
    # finished replays by (group, step), newest last: asking again costs nothing (STEP_CACHE steps kept)
    _steps: OrderedDict[tuple[int, int], list[dict[str, Any]]] = field(default_factory=OrderedDict)
    _preparing: dict[tuple[int, int], _Preparing] = field(default_factory=dict)  # replays running in the background
    _wanted: tuple[int, int] | None = None  # the step last asked for

    def load_profile_in_background(self, path: str | Path) -> None:
        """Read the profile file (and pack the timeline) in a thread; the profile endpoints wait for it, except the
        overview, which reads the file's columns itself."""
        self._cache["profile_path"] = Path(path)

        def load() -> None:
            try:
                with collections_paused():
                    self.overview_tracks()  # first: the overview and the kernel table need only the scan, quick
                    self.events = load_saved_profile(path).events
                    self.profile_bytes()
            except TraceFileError as e:
                self._load_error = e

        self._loader = threading.Thread(target=load, name="viz-profile-loader", daemon=True)
        self._loader.start()

    def profile_events(self) -> Sequence[ProfileEvent]:
        """The profile events, once a background load has finished; its error (a bad file) is raised here."""
        if self._loader is not None:
            self._loader.join()
        if self._load_error is not None:
            raise self._load_error
        return self.events

    def source_line(self, loc: Sequence[Any]) -> str:
        file, line = str(loc[0]), int(loc[1])
        return self.lines.get((file, line)) or linecache.getline(file, line).strip()

    def load_rewrites_in_background(self, path: str | Path) -> None:
        """Read the rewrites file in a thread (its header was checked already); the rewrite endpoints wait for it."""

        def load() -> None:
            try:
                with collections_paused():
                    if "profile_path" in self._cache:
                        self.scan()  # json.loads holds the GIL for seconds: the quick overview scan goes first
                    saved = load_rewrites(path)
                    self.trace, self.lines = saved.trace, saved.lines
            except TraceFileError as e:
                self._rewrites_error = e

        self._rewrites_loader = threading.Thread(target=load, name="viz-rewrites-loader", daemon=True)
        self._rewrites_loader.start()

    def wait_rewrites(self) -> None:
        """Once a background load has finished; its error (a truncated or corrupt file) is raised here."""
        if self._rewrites_loader is not None:
            self._rewrites_loader.join()
        if self._rewrites_error is not None:
            raise self._rewrites_error

    def check_group(self, ctx: int) -> RewriteTrace:
        """The trace, when `ctx` numbers one of its groups; IndexError saying which numbers exist otherwise.

        Negative numbers are refused, not counted from the end: a link or a typo must never show another group."""
        self.wait_rewrites()
        count = len(self.trace.keys) if self.trace is not None else 0
        if self.trace is None or not 0 <= ctx < count:
            allowed = f"groups are numbered 0 to {count - 1}" if count else "this trace has no groups"
            raise IndexError(f"no group {ctx}: {allowed}")
        return self.trace

    def program(self, ctx: int) -> KernelProgram | None:
        """The kernel group `ctx` rendered (made once per group: a live ProgramSpec is converted on first use)."""
        trace = self.check_group(ctx)
        programs: dict[int, KernelProgram | None] = self._cache.setdefault("programs", {})
        if ctx not in programs:
            programs[ctx] = kernel_program(trace.keys[ctx].ret)
        return programs[ctx]

    def groups(self) -> list[dict[str, Any]]:
        """/ctxs: every group with its steps (no call traces: those come with the step), kernel groups marked."""
        self.wait_rewrites()
        if "groups" not in self._cache:
            groups = get_rewrites(self.trace) if self.trace is not None else []
            for i, g in enumerate(groups):
                program = self.program(i)
                g["kernel"] = None if program is None else {"name": program.name, "query": f"/kernel?ctx={i}"}
                for s in g["steps"]:
                    s.pop("trace")
                    s["code_line"] = self.source_line(s["loc"])
            self._cache["groups"] = groups
        return list(self._cache["groups"])

    def step(self, ctx: int, idx: int) -> TrackedGraphRewrite:
        """Step `idx` of group `ctx`; IndexError naming the numbers that exist (negative ones never count back)."""
        steps = self.check_group(ctx).rewrites[ctx]
        if not 0 <= idx < len(steps):
            allowed = f"its steps are numbered 0 to {len(steps) - 1}" if steps else "it has no steps"
            raise IndexError(f"no step {idx} in group {ctx}: {allowed}")
        return steps[idx]

    def step_stream(self, ctx: int, idx: int) -> Iterator[dict[str, Any]]:
        """A header, then the step's graph before any match and after each one, then "done" (or "error").

        A step is replayed once, in a thread of its own that streams follow as it goes (`prepare` starts one ahead); a
        finished replay is kept and sent again. One that no stream follows any more stops once another step is asked
        for, and keeps nothing."""
        step = self.step(ctx, idx)
        yield self._step_header(ctx, idx, step)
        key = (ctx, idx)
        with self._lock:
            self._wanted = key  # a replay of another step, followed by no one, stops at its next graph
            if (cached := self._steps.get(key)) is not None:
                self._steps.move_to_end(key)
            else:
                preparing = self._preparing.get(key) or self._start_replay(key, step)
                preparing.followers += 1
        if cached is not None:
            yield from cached
            return
        try:
            yield from self._follow(preparing)
        finally:
            with self._lock:
                preparing.followers -= 1

    def _step_header(self, ctx: int, idx: int, step: TrackedGraphRewrite) -> dict[str, Any]:
        assert self.trace is not None, "step() checked the trace"
        trace = [{"file": f, "line": n, "name": name, "code": code} for f, n, name, code in step.trace]
        return {"kind": "step", "ctx": ctx, "idx": idx, "name": step.name or "graph_rewrite", "loc": list(step.loc),
                "code_line": self.source_line(step.loc), "depth": step.depth, "match_count": len(step.matches),
                "group": self.trace.keys[ctx].display_name, "trace": trace[-CALL_TRACE_FRAMES:]}  # fmt: skip

    def _keep(self, key: tuple[int, int], graphs: list[dict[str, Any]]) -> None:
        """A complete replay (not one that failed or was abandoned) is kept, the STEP_CACHE newest ones."""
        if not graphs or graphs[-1]["kind"] != "done":
            return
        with self._lock:
            self._steps[key] = graphs
            self._steps.move_to_end(key)
            while len(self._steps) > STEP_CACHE:
                self._steps.popitem(last=False)

    def prepare(self, ctx: int, idx: int) -> bool:
        """/prepare: replay step `idx` of group `ctx` in a background thread (the page asks when a group opens), so
        the step's request finds its graphs made. False when it is kept or being made already. A preparation that no
        request follows stops once another step is asked for (the CPU is the asked step's)."""
        step, key = self.step(ctx, idx), (ctx, idx)
        with self._lock:
            if key in self._steps or key in self._preparing:
                return False
            self._start_replay(key, step)
            return True

    def _start_replay(self, key: tuple[int, int], step: TrackedGraphRewrite) -> _Preparing:
        """A thread replaying `step` (called with `_lock` held): streams follow it, and it keeps what it made."""
        self._preparing[key] = preparing = _Preparing()
        threading.Thread(target=self._prepare, args=(key, step, preparing), name="viz-replay", daemon=True).start()
        return preparing

    def _prepare(self, key: tuple[int, int], step: TrackedGraphRewrite, preparing: _Preparing) -> None:
        replay = self._replay(step)
        try:
            for message in replay:
                with self._lock:  # decided under the lock streams join under: none can join an abandoned one
                    if not preparing.followers and self._wanted not in (None, key) and message["kind"] == "graph":
                        del self._preparing[key]  # a later request for it replays it itself
                        return  # nothing kept
                with preparing.changed:
                    preparing.messages.append(message)
                    preparing.changed.notify_all()
            self._keep(key, preparing.messages)  # finished: no more messages come
        finally:
            replay.close()
            with self._lock:  # only this replay's entry: an abandoned one may have been replaced by a new one
                if self._preparing.get(key) is preparing:
                    del self._preparing[key]
            with preparing.changed:
                preparing.finished = True
                preparing.changed.notify_all()

    def _follow(self, preparing: _Preparing) -> Iterator[dict[str, Any]]:
        """A preparation's messages as they are made: those made already at once, then each as it comes."""
        sent = 0
        while True:
            with preparing.changed:
                while sent == len(preparing.messages) and not preparing.finished:
                    preparing.changed.wait()
                new, finished = preparing.messages[sent:], preparing.finished
            yield from new
            sent += len(new)
            if finished and sent == len(preparing.messages):
                return

    def _replay(self, step: TrackedGraphRewrite) -> Generator[dict[str, Any], None, None]:
        """The step's graph before any match and after each one, laid out, then "done" (or "error" then "done")."""
        assert self.trace is not None, "step() checked the trace"
        replays, count = get_full_rewrite(step, self.trace.uop_fields, self.trace.keys), 0
        try:
            while (replay := self._next_replay(replays)) is not None:
                message = graph_message(count, replay)
                if message["rule"] is not None and not message["rule"]["line"]:
                    message["rule"]["line"] = self.source_line(message["rule"]["loc"])
                count += 1
                yield message
        except Exception as e:  # a replay that fails shows its error in the page instead of a silent stop
            yield {"kind": "error", "message": f"{type(e).__name__}: {e}"}
        finally:
            with self._replay_lock, Context(TRACK_MATCH_STATS=0):
                replays.close()  # here, not whenever it is collected: closing restores flags it saved
        yield {"kind": "done", "count": count}

    def _next_replay(self, replays: Generator[Replayed, None, None]) -> Replayed | None:
        """One graph of a replay. Streams run in threads and a replay flips the process-wide TRACK_MATCH_STATS, so
        one graph is made at a time, with tracking off, and the flag is restored before the lock is let go."""
        with self._replay_lock, Context(TRACK_MATCH_STATS=0):
            return next(replays, None)

    def kernel(self, ctx: int) -> dict[str, Any]:
        """A kernel group's program: source (and its highlighted HTML when Pygments is there), linear UOps, costs."""
        if (program := self.program(ctx)) is None:
            raise IndexError(f"group {ctx} ({self.check_group(ctx).keys[ctx].display_name}) is not a kernel: it has no "
                             "source")  # fmt: skip
        uops = [{"i": i, "op": op, "dtype": dt, "src": list(srcs), "arg": arg} for i, (op, dt, srcs, arg) in
                enumerate(program.uops)]  # fmt: skip
        source_html = highlight_c(program.src)
        return {"name": program.name, "device": program.device, "src": program.src, "uops": uops,
                "html": source_html, "ops": program.ops, "lds": program.lds, "mem": program.mem}  # fmt: skip

    # *** search ***

    def _node_text(self, num: int) -> str:
        assert self.trace is not None, "search needs a trace"
        op, dtype, _, arg, tag = self.trace.uop_fields[num][:5]
        text = f"{op.name} {dtype!r} {'' if arg is None else arg} {'' if tag is None else tag}"
        return ansistrip(text).lower()

    def _new_nodes(self, num: int, known: dict[int, tuple[int, int, int]]) -> list[int]:
        """`num` and every source below it not in `known`: what a step's input or a match's result brings in."""
        assert self.trace is not None, "search needs a trace"
        out: dict[int, None] = {}
        todo = [num]
        while todo:
            n = todo.pop()
            if n not in known and n not in out:
                out[n] = None
                todo.extend(self.trace.uop_fields[n][2])
        return list(out)

    def search_index(self) -> SearchIndex:
        """Built once, on the first search: where each node first appears, as a step's input or a match's result."""
        self.wait_rewrites()
        with self._lock:
            if (index := self._cache.get("search")) is not None:
                return index  # type: ignore[no-any-return]  # the cache holds a SearchIndex under this key
            index = SearchIndex()
            for ctx, steps in enumerate(self.trace.rewrites if self.trace is not None else []):
                for idx, step in enumerate(steps):
                    index.where.update(dict.fromkeys(self._new_nodes(step.sink, index.where), (ctx, idx, 0)))
                    for i, m in enumerate(step.matches):
                        if m.after is not None:
                            index.where.update(dict.fromkeys(self._new_nodes(m.after, index.where), (ctx, idx, i + 1)))
            index.text = {n: self._node_text(n) for n in index.where}
            self._cache["search"] = index
            return index

    def search(self, query: str) -> list[dict[str, Any]]:
        """Nodes whose op, dtype, arg or tag contains `query` (any case), in trace order, with where to find them."""
        if not query.strip() or self.trace is None:
            return []
        needle, index, groups = query.strip().lower(), self.search_index(), self.groups()
        hits = sorted((where, n) for n, where in index.where.items() if needle in index.text[n])
        out = []
        for (ctx, idx, i), n in hits[:MAX_SEARCH_RESULTS]:
            text = index.text[n]
            out.append({"ctx": ctx, "idx": idx, "match": i, "node": n, "text": text[:160],
                        "group": groups[ctx]["name"], "step": groups[ctx]["steps"][idx]["name"]})  # fmt: skip
        return out

    # *** profile ***

    def programs(self) -> dict[str, int]:
        """Kernel name (as the runtime names it, and as the engine does) -> its group, for the timeline's links."""
        self.wait_rewrites()
        out: dict[str, int] = {}
        for ctx in range(len(self.trace.keys) if self.trace is not None else 0):
            if (program := self.program(ctx)) is not None:
                out.setdefault(to_function_name(program.name), ctx)
                out.setdefault(program.name, ctx)
        return out

    def profile_bytes(self) -> bytes:
        """/get_profile: the packed timeline (profile.py's layout); range events link to their kernel's group."""
        if threading.current_thread() is not self._loader:
            self.profile_events()
        with self._lock:
            if "profile" not in self._cache:
                self._cache["profile"] = get_profile(list(self.events), self.programs())
            return bytes(self._cache["profile"])

    def profile_info(self) -> dict[str, Any]:
        """/profile_info: kernel costs by name, and per device the kernel each run was (runs number buffer users)."""
        kernels: dict[str, dict[str, Any]] = {}
        for name, ctx in self.programs().items():
            program = self.program(ctx)
            assert program is not None, "programs() lists kernel groups only"
            kernels[name] = {"ctx": ctx, "name": program.name, "ops": program.ops, "lds": program.lds,
                             "mem": program.mem}  # fmt: skip
        runs: dict[str, list[str]] = {}
        execs = [e for e in self.profile_events() if isinstance(e, ProfilePointEvent) and e.name == "exec"]
        for e in sorted(execs, key=lambda e: e.ts):  # the order profile.py numbers runs in
            runs.setdefault(e.device, []).append(to_function_name(key_name(e.key)))
        return {"kernels": kernels, "runs": runs}

    def scan(self) -> RangeScan:
        """The range events as columns (a streaming file is read for it directly, without waiting for its events)."""
        with self._scan_lock:  # made once: a second caller waits for the first
            if (scan := self._cache.get("scan")) is None:
                path = self._cache.get("profile_path")
                scan = self._cache["scan"] = (
                    scan_ranges(path) if path is not None else scan_events(self.profile_events())
                )
        assert isinstance(scan, RangeScan), "the cache holds a RangeScan under this key"
        return scan

    def timeline_overview(self, bins: int) -> dict[str, Any]:
        """/timeline_overview?bins=N: per track and time bin, how busy it is and its longest kernel (overview.py)."""
        return overview(self.scan(), bins, self.overview_tracks())

    def overview_tracks(self) -> dict[str, TrackBins]:
        """The scan's tracks sorted for binning (overview.py), once: every overview after the first is a few ms."""
        scan = self.scan()
        with self._scan_lock:
            if (tracks := self._cache.get("overview_tracks")) is None:
                tracks = self._cache["overview_tracks"] = prepare_tracks(scan)
        return tracks

    def kernel_stats(self) -> dict[str, Any]:
        """/kernel_stats: per kernel name its runs, total and mean time, GFLOP/s and GB/s (the program's estimates over
        its measured time; None where they are unknown or symbolic), its group; and the step-time series."""
        if (cached := self._cache.get("kernel_stats")) is not None:
            return cached  # type: ignore[no-any-return]  # the cache holds this method's answer under this key
        scan, programs = self.scan(), self.programs()
        rows: list[dict[str, Any]] = []
        for name, k in kernel_totals(scan).items():
            ctx = programs.get(name, programs.get(to_function_name(name)))
            program = None if ctx is None else self.program(ctx)
            ops, mem = (None, None) if program is None else (program.ops, program.mem)
            seconds = k.total_us / 1e6
            rows.append({"name": name, "runs": k.runs, "total_us": k.total_us, "mean_us": k.total_us / k.runs,
                         "first_us": k.first_us, "ctx": ctx,
                         "gflops": None if ops is None or not seconds else ops * k.runs / seconds / 1e9,
                         "gbs": None if mem is None or not seconds else mem * k.runs / seconds / 1e9})  # fmt: skip
        rows.sort(key=lambda r: -r["total_us"])
        self._cache["kernel_stats"] = {"kernels": rows, "steps": step_series(scan.markers)}
        return self._cache["kernel_stats"]  # type: ignore[no-any-return]  # set just above


def open_session(
    rewrites: str | Path | None = None, profile: str | Path | None = None, background: bool = False
) -> VizSession:
    """A session over saved trace files; with neither given, the files VIZ=1 last saved (those that exist).

    Raises TraceFileError for a missing or unreadable file, when there is nothing to open, or when the rewrites and
    the profile were saved by two different runs. A streaming profile is always read in the background; with
    `background` the rewrites file is too, once its header (format, version, run id) checks out, so a server can answer
    at once (a body found corrupt later is the rewrite endpoints' error).
    """
    if rewrites is None and profile is None:
        rewrites, profile = (p if p.exists() else None for p in default_paths())
        if rewrites is None and profile is None:
            raise TraceFileError(f"{default_paths()[1]}: no saved traces: run a program with VIZ=1 (or VIZ=-1) first, "
                                 "or pass --rewrites FILE / --profile FILE")  # fmt: skip
    session, rewrites_id, streaming = VizSession(), None, False
    later = background and rewrites is not None and (rewrites_id := peek_run_id(rewrites)) is not None
    if rewrites is not None and not later:
        saved = load_rewrites(rewrites)  # before the profile's loader starts: the timeline links kernels to groups
        session.trace, session.lines, rewrites_id = saved.trace, saved.lines, saved.run_id or ""
    if profile is not None:
        # a streaming file says its run id in its first record: checked now, its events read in the background
        profile_id = streaming_run_id(profile)
        streaming = profile_id is not None
        if not streaming:
            saved_profile = load_saved_profile(profile)  # the JSON form: read whole, now
            session.events, profile_id = saved_profile.events, saved_profile.run_id
        if rewrites is not None:
            check_same_run(str(rewrites), rewrites_id or None, str(profile), profile_id or None)
    if later:  # started first: the profile's loader waits for it (its timeline links kernels to their groups)
        assert rewrites is not None, "later implies a rewrites file"
        if profile is not None and streaming:
            session._cache["profile_path"] = Path(profile)  # the rewrites loader lets the profile's scan go first
        session.load_rewrites_in_background(rewrites)
    if profile is not None and streaming:
        session.load_profile_in_background(profile)
    return session
