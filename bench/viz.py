"""Benchmark: VIZ at the scale of real runs: recording, the profile file, the server and the page.

For each size (default 10k, 100k and 500k profile events; each kernel run is two events, an exec point and a range,
recorded exactly as the engine and the CPU runtime record them), a child process records the events while streaming
them to a profile file (PROFILE=1) and another runs the same loop unrecorded (PROFILE=0); each reports its loop time
and its peak RSS. Then: file bytes per event, write overhead per event (the recorded loop's CPU time minus the
unrecorded one's, per event: making the events, encoding, compressing and writing them),
server-ready time (open the file, bind, first answer), and in headless Chromium (playwright driving
/usr/bin/chromium; never `playwright install`): the timeline's first paint (Profiler tab clicked -> the overview
drawn), the time until every event is drawn (every tile in view), the page's own draw time per wheel step while
zooming, 24 zooms and 24 pans, and how long a zoom takes to be sharp (the frames after a zoom draw the tiles the first
one had no time for). Once: a synthetic rewrite step whose graph has 7,000 nodes (first paint after the step is
picked, timed in the page from the click to the frame showing the graph: the server's replay, the page's layout
worker, the drawing, less what the page made ready when the group opened; the same for a step picked as soon as its
group opens, before that head start; and the server's replay alone, wall and CPU time) and one of 1,000 nodes with
8 matches (←/→ steps, every graph laid out and built; its zooms and pans, and pans zoomed in at 1:1).
Each timed input gets two figures, as median / p95 / max (ms): its frame work, the renderer main thread's busy time
from the input to its frame (handler, scripts, style, layout, paint, commit), read from a Chrome trace: the issue's
"≤ 16 ms a frame" is about this (a frame whose work fits in 16.7 ms is made at 60 Hz); and its event-to-frame time,
which adds the wait for the display's next frame (0-16.7 ms whatever the page does) and, on a loaded machine, for
the CPU.
With --gpt-steps N: peak RSS of N steps of the GPT example with VIZ=-1 (the trace's save at exit included) vs
without.

With --profile FILE (and --rewrites FILE): the figures of a saved trace instead, e.g. a real run's (`VIZ=-1 python -m
fusegrad.examples.gpt`): file bytes and bytes per event, server-ready time (first answer, and the group list once
the rewrites file is read), the timeline's first paint and zoom/pan frames, and on the trace's own rewrite steps: the
first paint of its biggest graph and ←/→ on the biggest step with several matches.

    python bench/viz.py [--sizes 10000,100000,500000] [--no-browser] [--keep DIR] [--gpt-steps N]
    python bench/viz.py --profile run.fgprof [--rewrites run.rewrites.json.gz] [--no-browser]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing

# after the path set-up above (E402 on purpose)
from fusegrad.dtype import dtypes  # noqa: E402
from fusegrad.helpers import TracingKey  # noqa: E402
from fusegrad.uop import Ops  # noqa: E402
from fusegrad.uop.rewrite import RewriteTrace, TrackedGraphRewrite, TrackedMatch, _uop_counter  # noqa: E402
from fusegrad.viz.server import start_in_thread  # noqa: E402
from fusegrad.viz.session import VizSession, open_session  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

# the child: `events` profile events as the engine records them (an exec point, then the runtime's cpu_profile range)
RECORDER = """import json, sys, time
from fusegrad import helpers
from fusegrad.helpers import Metadata, ProfilePointEvent, cpu_events, cpu_profile
from fusegrad.viz.serve import register_at_exit

register_at_exit()  # what opening a device does when PROFILE is set: arms the streaming writer
names = [f"r_{i}_{16 * (i % 5 + 1)}_{i % 3 + 2}" for i in range(240)]  # about a GPT step's kernels
metadata = [(Metadata("linear", f"nn.py:{i}", False),) for i in range(240)]
start = time.process_time()  # CPU time: what recording costs this process, less swayed by a busy machine
for i in range(int(sys.argv[1]) // 2):
    k = i % 240
    if helpers.PROFILE:
        payload = {"metadata": metadata[k], "var_vals": {}, "bufs": [3 * k, 3 * k + 1, 3 * k + 2], "inputs": (1, 2),
                   "outputs": (0,)}
        cpu_events.append(ProfilePointEvent("CPU", "exec", names[k], payload))
    with cpu_profile(names[k], "CPU"):
        pass
    if k == 239:
        helpers.profile_marker(f"step {i // 240}")
seconds = time.process_time() - start
# VmHWM: this process image's peak RSS (ru_maxrss would carry over the parent's peak across fork and exec)
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "rss_mb": peak_kb / 1024}))
"""


def record(events: int, path: Path, profile: bool) -> dict[str, float]:
    """Run the recorder child; its loop time and peak RSS (the profile file lands at `path` when `profile`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "PROFILE", "CI", "DISPLAY", "WAYLAND_DISPLAY")}
    env |= {"PYTHONPATH": str(REPO), "PROFILE": "1" if profile else "0", "PROFILEPATH": str(path)}
    done = subprocess.run([sys.executable, "-c", RECORDER, str(events)], env=env, capture_output=True, text=True,
                          timeout=3600, check=True)  # fmt: skip
    return dict(json.loads(done.stdout.splitlines()[0]))


def server_ready(profile: Path) -> tuple[float, Any, str]:
    """Seconds from opening the file to the server's first answer, and the server and its URL."""
    start = time.perf_counter()
    session = open_session(None, profile)
    server, url = start_in_thread(session)
    with urlopen(url, timeout=60) as res:
        res.read()
    return time.perf_counter() - start, server, url


# *** synthetic rewrite steps ***


def synthetic_step(nodes: int, matches: int, seed: int = 0) -> RewriteTrace:
    """One group with one step on a random DAG of `nodes` nodes (64 constants, then ADD/MUL/MAX nodes whose sources are
    the node before and one of the 40 before it, so no two subgraphs repeat), and `matches` matches that each turn one
    node of the last third into a SUB of the same sources. Numbers come from the trace counter, so they meet no others.
    """
    rng, fields, order = random.Random(seed), dict[int, tuple[Any, ...]](), list[int]()
    for i in range(nodes):
        if i < 64:
            row: tuple[Any, ...] = (Ops.CONST, dtypes.int, (), i, None, None)
        else:
            srcs = (order[i - 1], order[rng.randrange(max(0, i - 40), i - 1)])
            row = ((Ops.ADD, Ops.MUL, Ops.MAX)[i % 3], dtypes.int, srcs, None, None, None)
        fields[n := next(_uop_counter)] = row
        order.append(n)
    fields[sink := next(_uop_counter)] = (Ops.SINK, dtypes.void, (order[-1],), None, None, None)
    found = []
    for before in rng.sample(order[2 * nodes // 3 :], matches):
        fields[after := next(_uop_counter)] = (Ops.SUB, dtypes.int, fields[before][2], None, None, None)
        found.append(TrackedMatch(before, after, (__file__, 1), "x op y -> x - y", 0.0))
    step = TrackedGraphRewrite((__file__, 1), sink, 0, False, f"random DAG of {nodes}", found)
    return RewriteTrace([TracingKey(f"synthetic {nodes} nodes")], [[step]], fields)


# *** the page ***

FIRST_FRAME = "() => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)))"
# each timed input is marked in the page's trace (console.timeStamp): "viz-input" as it is sent, "viz-frame" once the
# frame after it is drawn; `main_thread_work` reads the renderer's work between the two from a Chrome trace
STEP_KEY = """async () => {
  const t = performance.now();
  console.timeStamp("viz-input");
  document.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight" }));
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  console.timeStamp("viz-frame");
  return performance.now() - t;
}"""
# one input event on `selector` (wheel: [dx, dy]; drag: a mouse move of dx after a press), timed in the page from the
# event to the next frame drawn (ms): what a user waits for, the browser's style, layout and paint included
INPUT_FRAME = """async ([selector, kind, dx, dy]) => {
  const target = document.querySelector(selector), box = target.getBoundingClientRect();
  const x = box.left + box.width * 0.6, y = box.top + Math.min(60, box.height / 2);
  if (kind === "drag") target.dispatchEvent(new MouseEvent("mousedown", { clientX: x, clientY: y, bubbles: true }));
  const t = performance.now();
  console.timeStamp("viz-input");
  if (kind === "wheel") {
    target.dispatchEvent(new WheelEvent("wheel", { deltaX: dx, deltaY: dy, clientX: x, clientY: y, bubbles: true,
      cancelable: true }));
  } else {
    window.dispatchEvent(new MouseEvent("mousemove", { clientX: x + dx, clientY: y + dy, bubbles: true }));
  }
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const ms = performance.now() - t;
  console.timeStamp("viz-frame");
  if (kind === "drag") window.dispatchEvent(new MouseEvent("mouseup", { clientX: x + dx, clientY: y + dy }));
  return ms;
}"""


# a step picked (its row clicked in the page) to the first frame showing its graph (seconds), timed in the page: what a
# user waits for, without the driver's own checks before a click (tens of ms on a loaded machine)
PICK_STEP = """async (selector) => {
  const row = document.querySelector(selector), t = performance.now();
  row.click();
  while (!window.vizProbe.graphDrawn()) await new Promise((r) => requestAnimationFrame(r));
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  return (performance.now() - t) / 1000;
}"""


# the page idle after loading (its sidebar drawn, the layout worker started), as when a user gets to a click
IDLE = "() => new Promise((r) => requestIdleCallback(() => r(), { timeout: 2000 }))"
# every graph of the shown step has its elements (made in idle time, before ←/→ reaches it)
BUILT = "() => window.vizProbe.graphsBuilt() === rw.graphs.length"


def input_frames(page: Any, selector: str) -> dict[str, list[float]]:
    """Event-to-frame times (ms) of 24 zoom steps (12 in, 12 out) and 24 pans (drags of ±40 px) on `selector`, and the
    renderer's main-thread work for each (`zoom_work`, `pan_work`: `main_thread_work`)."""
    with main_thread_work(page) as work:
        zoom = [page.evaluate(INPUT_FRAME, [selector, "wheel", 0, dy]) for dy in [-240] * 12 + [240] * 12]
        pan = [page.evaluate(INPUT_FRAME, [selector, "drag", dx, 0]) for dx in [40, -40] * 12]
    return {"zoom": zoom, "pan": pan, "zoom_work": work[:24], "pan_work": work[24:]}


# the graph at 1:1 around its middle node (its labels drawn), as a user reads it
ZOOM_IN = """() => {
  const B = rw.drawnMsg.layout.boxes, i = Math.floor(B.length / 8), pane = document.getElementById('graph-wrap');
  rw.view = { k: 1, x: pane.clientWidth / 2 - B[4 * i], y: pane.clientHeight / 2 - B[4 * i + 1] };
  applyView();
}"""


def near_pans(page: Any) -> dict[str, list[float]]:
    """Zoomed in on the graph (1:1, every node near the pane an element): 24 drags of 40 px the same way (960 px, past
    the area drawn at first), event to frame and main-thread work (ms), as `pan_near` and `pan_near_work`."""
    page.evaluate(ZOOM_IN)
    page.evaluate(FIRST_FRAME)
    with main_thread_work(page) as work:
        pans = [page.evaluate(INPUT_FRAME, ["#graph-wrap", "drag", -40, 0]) for _ in range(24)]
    page.evaluate("() => fitGraph()")
    return {"pan_near": pans, "pan_near_work": work}


def step_frames(page: Any, steps: int) -> tuple[list[float], list[float]]:
    """Event-to-frame times (ms) of `steps` → keys, and the renderer's main-thread work for each."""
    with main_thread_work(page) as work:
        times = [page.evaluate(STEP_KEY) for _ in range(steps)]
    return times, work


# what a frame costs the page, without the wait for the display's next frame that event-to-frame times include (up to
# ~16.7 ms at 60 Hz whatever the page does): the renderer main thread's busy time between an input's two marks
# (the handler, scripts, style, layout, paint and the commit to the compositor), from a Chrome trace
TRACE_CATEGORIES = ["devtools.timeline", "toplevel"]


@contextlib.contextmanager
def main_thread_work(page: Any) -> Iterator[list[float]]:
    """Trace the page while the block runs; the list it yields is then filled with each marked input's work (ms)."""
    browser, work = page.context.browser, list[float]()
    with tempfile.TemporaryDirectory(prefix="bench_viz_trace_") as folder:
        path = Path(folder) / "trace.json"
        browser.start_tracing(page=page, path=str(path), categories=TRACE_CATEGORIES)
        try:
            yield work
        finally:
            browser.stop_tracing()
        work.extend(work_per_input(json.loads(path.read_text())))


def work_per_input(trace: dict[str, Any] | list[dict[str, Any]]) -> list[float]:
    """Per "viz-input" .. "viz-frame" pair of marks: the busy time (ms) of the thread that made the marks, as the union
    of its trace slices (nested slices counted once) overlapping the pair."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    marks = sorted((e for e in events if e.get("name") == "TimeStamp" and
                    e.get("args", {}).get("data", {}).get("message") in ("viz-input", "viz-frame")),
                   key=lambda e: e["ts"])  # fmt: skip
    if not marks:
        return []
    thread = (marks[0]["pid"], marks[0]["tid"])
    slices = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                    if e.get("ph") == "X" and "dur" in e and (e["pid"], e["tid"]) == thread)  # fmt: skip
    busy: list[tuple[float, float]] = []  # the union of the slices, in order
    for start, end in slices:
        if busy and start <= busy[-1][1]:
            busy[-1] = (busy[-1][0], max(busy[-1][1], end))
        else:
            busy.append((start, end))
    message = lambda e: e["args"]["data"]["message"]  # noqa: E731
    pairs = [(a["ts"], b["ts"]) for a, b in itertools.pairwise(marks)
             if message(a) == "viz-input" and message(b) == "viz-frame"]  # fmt: skip
    return [sum(max(0.0, min(end, t1) - max(start, t0)) for start, end in busy) / 1e3 for t0, t1 in pairs]


def timeline_figures(page: Any, url: str) -> tuple[float, float, list[float], dict[str, list[float]]]:
    """First paint of the timeline (the overview), every event drawn (seconds), the page's draw time per wheel step
    (ms) zooming in and out, and event-to-frame times of zooms and pans (`input_frames`)."""
    page.goto(url)
    page.wait_for_function("() => document.getElementById('status').textContent.includes('groups')")
    start = time.perf_counter()
    page.click("#tab-profiler")
    page.wait_for_function("() => window.vizProbe.painted()", timeout=600_000, polling=10)
    first = time.perf_counter() - start
    page.wait_for_function("() => window.vizProbe.settled()", timeout=600_000)
    full = time.perf_counter() - start
    box = page.locator("#timeline").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 60)
    frames = []
    for dy in [-240] * 12 + [240] * 12:
        page.mouse.wheel(0, dy)
        page.evaluate(FIRST_FRAME)
        frames.append(page.evaluate("() => window.vizProbe.drawMs()"))
    page.dblclick("#timeline")  # the whole run again, every tile drawn (its frames are not the inputs')
    page.wait_for_function("() => window.vizProbe.settled()")
    inputs = input_frames(page, "#timeline")
    page.dblclick("#timeline")
    page.wait_for_function("() => window.vizProbe.settled()")
    inputs["zoom_sharp"] = [page.evaluate(ZOOM_SHARP, ["#timeline", -240]) for _ in range(8)]
    return first, full, frames, inputs


# a zoom of the timeline shows the last whole frame stretched where its tiles are not drawn yet (a frame draws what
# fits its budget): from the wheel event to the frame with every tile drawn at the new scale (ms)
ZOOM_SHARP = """async ([selector, dy]) => {
  const target = document.querySelector(selector), box = target.getBoundingClientRect(), t = performance.now();
  target.dispatchEvent(new WheelEvent("wheel", { deltaY: dy, clientX: box.left + box.width * 0.6,
    clientY: box.top + 60, bubbles: true, cancelable: true }));
  do await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  while (!window.vizProbe.settled());
  return performance.now() - t;
}"""


def graph_figures(page: Any) -> tuple[float, float, list[float], dict[str, list[float]]]:
    """First paint of a 7,000-node step (seconds), the same step asked again (seconds), ←/→ times at 1,000 nodes (ms,
    every graph laid out), and event-to-frame times of zooming and panning that graph (`input_frames`)."""
    times, frames = [], {}
    for nodes, matches in ((7000, 2), (1000, 8)):
        server, url = start_in_thread(VizSession(synthetic_step(nodes, matches)))
        page.goto(url)
        page.wait_for_selector("#groups .group > div")
        page.click("#groups .group > div")
        page.evaluate(IDLE)
        runs = []
        for _ in range(2):  # picked, then (every graph of the step loaded) picked again: from the page's cache
            runs.append(page.evaluate(PICK_STEP, "#groups .step"))
            page.wait_for_function(f"() => document.getElementById('status').textContent === '{matches + 1} graphs'",
                                   timeout=600_000)  # fmt: skip
            page.wait_for_function("() => window.vizProbe.layoutsPending() === 0", timeout=600_000)  # all laid out
            page.evaluate("() => document.getElementById('graph').replaceChildren()")
        if nodes == 1000:
            page.click("#groups .step")
            page.wait_for_function("() => window.vizProbe.layoutsPending() === 0")
            page.wait_for_function(BUILT, timeout=600_000)
            page.evaluate(FIRST_FRAME)
            steps, step_work = step_frames(page, matches)
            frames = {"step": steps, "step_work": step_work} | input_frames(page, "#graph-wrap") | near_pans(page)
        else:
            times = runs
        server.shutdown()
        server.server_close()
    return times[0], times[1], steps, frames


def first_paint_at_once(page: Any, nodes: int = 7000) -> float:
    """First paint (seconds) of a step picked as soon as its group opens: the page's head start on the step it makes
    ready when a group opens (the server's replay, the first graph's layout) has had no time to run."""
    server, url = start_in_thread(VizSession(synthetic_step(nodes, 2, seed=2)))  # nodes no other figure built
    try:
        page.goto(url)
        page.wait_for_selector("#groups .group > div")
        page.click("#groups .group > div")
        seconds: float = page.evaluate(PICK_STEP, "#groups .step")
        page.wait_for_function("() => document.getElementById('status').textContent === '3 graphs'", timeout=600_000)
        return seconds
    finally:
        server.shutdown()
        server.server_close()


def measure_size(events: int, folder: Path, page: Any | None) -> dict[str, Any]:
    path = folder / f"run_{events}.fgprof"
    off, on = record(events, folder / "unused.fgprof", False), record(events, path, True)
    out = {"events": events, "bytes_per_event": path.stat().st_size / events, "rss_off_mb": off["rss_mb"],
           "rss_on_mb": on["rss_mb"], "write_us": (on["seconds"] - off["seconds"]) / events * 1e6}  # fmt: skip
    out["ready_ms"], server, url = server_ready(path)
    out["ready_ms"] *= 1e3
    if page is not None:
        first, full, frames, inputs = timeline_figures(page, url)
        out |= {"first_paint_s": first, "full_s": full, "frame_max_ms": max(frames),
                "frame_median_ms": statistics.median(frames), "inputs": inputs}  # fmt: skip
    server.shutdown()
    server.server_close()
    return out


def report(row: dict[str, Any]) -> str:
    text = (f"{row['events']:>7,} events: {row['bytes_per_event']:5.2f} bytes/event on disk, write overhead "
            f"{row['write_us']:5.2f} us/event, peak RSS {row['rss_on_mb']:.0f} MB recording vs "
            f"{row['rss_off_mb']:.0f} MB not, server ready {row['ready_ms']:.0f} ms")  # fmt: skip
    if "first_paint_s" in row:
        text += (f", timeline first paint {row['first_paint_s']:.2f} s (every event {row['full_s']:.2f} s), zoom "
                 f"draws max {row['frame_max_ms']:.1f} ms / median {row['frame_median_ms']:.1f} ms; "
                 f"{frames_text(row['inputs'])}")  # fmt: skip
    return text


def spread(ms: list[float]) -> str:
    """`median a / p95 b / max c` of times in ms (p95 by nearest rank: of 24 times, the 23rd smallest)."""
    if not ms:
        return "none"
    ordered = sorted(ms)
    p95 = ordered[math.ceil(0.95 * len(ordered)) - 1]
    return f"median {statistics.median(ordered):.1f} / p95 {p95:.1f} / max {ordered[-1]:.1f}"


def frames_text(inputs: dict[str, list[float]]) -> str:
    """Per kind of input: the renderer's main-thread work per frame (what the 16 ms frame budget is about) and the
    event-to-frame time (that work plus the wait for the display's next frame), each as median / p95 / max (ms)."""
    kinds = [kind for kind in ("step", "zoom", "pan", "pan_near") if f"{kind}_work" in inputs]
    text = "; ".join(f"{kind} frame work {spread(inputs[f'{kind}_work'])} ms" +
                     (f" (event to frame {spread(inputs[kind])})" if kind in inputs else "")
                     for kind in kinds)  # fmt: skip
    if "zoom_sharp" in inputs:
        text += f"; a zoom is sharp (every tile drawn) after {spread(inputs['zoom_sharp'])} ms"
    return text


def replay_seconds(nodes: int = 7000, matches: int = 2) -> tuple[float, float]:
    """The server's share of the graph's first paint: wall and CPU seconds from asking a fresh session for the step
    to its first graph message (the input graph rebuilt and made drawable). CPU time is what a loaded machine keeps.
    UOps are interned: a graph this process built before would be found, not built, so this one is another."""
    stream = VizSession(synthetic_step(nodes, matches, seed=1)).step_stream(0, 0)  # not graph_figures' nodes (seed 0)
    wall, cpu = time.perf_counter(), time.process_time()
    while next(stream)["kind"] != "graph":
        pass
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stream.close()
    return wall, cpu


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="10000,100000,500000", help="profile sizes in events (comma-separated)")
    parser.add_argument("--no-browser", action="store_true", help="skip the page figures (no Chromium needed)")
    parser.add_argument("--keep", metavar="DIR", help="keep the profile files in DIR")
    gpt_help = "also train the GPT example N steps with VIZ=-1 and without: peak RSS (minutes)"
    parser.add_argument("--gpt-steps", type=int, default=0, metavar="N", help=gpt_help)
    parser.add_argument("--profile", metavar="FILE", help="measure this saved profile instead of synthetic ones")
    parser.add_argument("--rewrites", metavar="FILE", help="with --profile: the run's rewrites file")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    use_browser = not args.no_browser and Path(CHROMIUM).exists()
    if not args.no_browser and not use_browser:
        print(f"no {CHROMIUM}: page figures skipped")
    if args.rewrites and not args.profile:
        parser.error("--rewrites needs --profile (the figures are a run's: its profile and its rewrites)")
    if args.profile:
        with browser_page(use_browser) as page:
            row = measure_trace(Path(args.profile), Path(args.rewrites) if args.rewrites else None, page)
        print(trace_report(row), flush=True)
        return [row]
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench_viz_"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    with browser_page(use_browser) as page:
        for events in sizes:
            rows.append(measure_size(events, folder, page))
            print(report(rows[-1]), flush=True)
        if page is not None:
            first, again, steps, frames = graph_figures(page)
            at_once = first_paint_at_once(page)
            replay_wall, replay_cpu = replay_seconds()
            print(f"7,000-node graph: first paint {first:.2f} s, picked as its group opens {at_once:.2f} s (the "
                  f"server's replay alone: {replay_wall:.2f} s, {replay_cpu:.2f} s CPU), asked again {again:.3f} s; at "
                  f"1,000 nodes (←/→ is step): {frames_text(frames)}")  # fmt: skip
            rows.append({"graph_first_s": first, "graph_at_once_s": at_once, "graph_again_s": again,
                         "graph_replay_s": replay_wall, "graph_replay_cpu_s": replay_cpu, "step_ms": steps,
                         "graph_inputs": frames})  # fmt: skip
        if args.gpt_steps:
            rows.append(gpt_memory(args.gpt_steps, folder))
            print(f"GPT example, {args.gpt_steps} steps: peak RSS {rows[-1]['viz_mb']:.0f} MB with VIZ=-1 (its "
                  f"trace saved at exit) vs {rows[-1]['plain_mb']:.0f} MB without", flush=True)  # fmt: skip
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


# *** a saved trace ***


def step_sizes(trace: RewriteTrace) -> list[tuple[int, int, int, int]]:
    """(nodes, matches, group, step) of every step of `trace`: the nodes below the step's input graph's sink."""
    fields, out = trace.uop_fields, []
    for ctx, steps in enumerate(trace.rewrites):
        for idx, step in enumerate(steps):
            seen, todo = {step.sink}, [step.sink]
            while todo:
                for s in fields[todo.pop()][2]:
                    if s not in seen:
                        seen.add(s)
                        todo.append(s)
            out.append((len(seen), len(step.matches), ctx, idx))
    return out


def open_step(page: Any, url: str, ctx: int, idx: int) -> float:
    """Seconds from clicking step `idx` of group `ctx` to its first graph's first frame; then waits until every graph
    of the step has arrived, been laid out and had its elements made (in the page's idle time)."""
    page.goto(url)
    page.wait_for_selector(f"#groups li.group[data-ctx='{ctx}'] > div")
    page.click(f"#groups li.group[data-ctx='{ctx}'] > div")
    page.evaluate(IDLE)
    seconds = page.evaluate(PICK_STEP, f"#groups .step[data-step='{ctx}:{idx}']")
    page.wait_for_function("() => /^[0-9]+ graphs$/.test(document.getElementById('status').textContent)",
                           timeout=600_000)  # fmt: skip
    page.wait_for_function("() => window.vizProbe.layoutsPending() === 0", timeout=600_000)
    page.wait_for_function(BUILT, timeout=600_000)
    return seconds


def trace_graph_figures(page: Any, url: str, trace: RewriteTrace) -> dict[str, Any]:
    """On the trace's own steps: the biggest input graph's first paint (and nodes drawn), and ←/→ (ms, up to 8 steps)
    with zoom and pan frames on the biggest step that has at least 4 matches (or the most matches)."""
    sizes = step_sizes(trace)
    nodes, _, ctx, idx = max(sizes)
    out: dict[str, Any] = {
        "graph_nodes": nodes,
        "graph_step": [ctx, idx],
        "graph_first_s": open_step(page, url, ctx, idx),
    }
    out["graph_drawn"] = page.evaluate("() => rw.drawnMsg.layout.nodes.length")
    several = [s for s in sizes if s[1] >= 4] or [max(sizes, key=lambda s: (s[1], s[0]))]
    nodes, matches, ctx, idx = max(several)
    open_step(page, url, ctx, idx)
    out |= {"step_nodes": nodes, "step_matches": matches, "step_step": [ctx, idx],
            "step_drawn": page.evaluate("() => rw.drawnMsg.layout.nodes.length")}  # fmt: skip
    out["step_ms"], step_work = step_frames(page, min(matches, 8))
    out["graph_inputs"] = {"step": out["step_ms"], "step_work": step_work} | input_frames(page, "#graph-wrap")
    out["graph_inputs"] |= near_pans(page)
    return out


def measure_trace(profile: Path, rewrites: Path | None, page: Any | None) -> dict[str, Any]:
    """A saved trace's figures (module docstring): file sizes, server ready, and with a page the timeline's and the
    rewrite graphs' (when there is a rewrites file)."""
    start = time.perf_counter()
    session = open_session(rewrites, profile, background=True)  # as `python -m fusegrad.viz` opens them
    server, url = start_in_thread(session)
    with urlopen(url, timeout=60) as res:
        res.read()
    row: dict[str, Any] = {"profile": str(profile), "profile_bytes": profile.stat().st_size,
                           "ready_ms": (time.perf_counter() - start) * 1e3}  # fmt: skip
    with urlopen(url + "ctxs", timeout=600) as res:
        res.read()
    row["groups_ms"] = (time.perf_counter() - start) * 1e3  # the rewrites file read: the page lists its groups
    row["events"] = len(session.profile_events())
    row["bytes_per_event"] = row["profile_bytes"] / max(row["events"], 1)
    if rewrites is not None:
        row["rewrites_bytes"] = rewrites.stat().st_size
    if page is not None:
        first, full, frames, inputs = timeline_figures(page, url)
        row |= {"first_paint_s": first, "full_s": full, "frame_max_ms": max(frames),
                "frame_median_ms": statistics.median(frames), "inputs": inputs}  # fmt: skip
        if session.trace is not None and session.trace.rewrites:
            row |= trace_graph_figures(page, url, session.trace)
    server.shutdown()
    server.server_close()
    return row


def trace_report(row: dict[str, Any]) -> str:
    """The figures of `measure_trace` as lines of text."""
    lines = [f"{row['profile']}: {row['profile_bytes'] / 1e6:.2f} MB, {row['events']:,} events, "
             f"{row['bytes_per_event']:.2f} bytes/event" + (f"; rewrites file {row['rewrites_bytes'] / 1e6:.2f} MB"
             if "rewrites_bytes" in row else ""),
             f"server ready {row['ready_ms']:.0f} ms, groups listed {row['groups_ms']:.0f} ms"]  # fmt: skip
    if "first_paint_s" in row:
        lines.append(f"timeline first paint {row['first_paint_s']:.2f} s (every event {row['full_s']:.2f} s), zoom "
                     f"draws max {row['frame_max_ms']:.1f} ms / median {row['frame_median_ms']:.1f} ms; "
                     f"{frames_text(row['inputs'])}")  # fmt: skip
    if "graph_first_s" in row:
        lines.append(f"biggest graph (step {row['graph_step']}, {row['graph_nodes']:,} nodes, {row['graph_drawn']:,} "
                     f"drawn): first paint {row['graph_first_s']:.2f} s; ←/→ on step {row['step_step']} "
                     f"({row['step_nodes']:,} nodes, {row['step_drawn']:,} drawn, {row['step_matches']} matches; "
                     "step is ←/→): "
                     f"{frames_text(row['graph_inputs'])}")  # fmt: skip
    return "\n".join(lines)


# the GPT example under a watch on this process's peak RSS, read by an exit hook registered before any of fusegrad's
# (so it runs after them: the trace's save at exit is counted)
GPT = """import atexit, sys
peak = lambda: next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) / 1024
atexit.register(lambda: print(f"peak {peak()}", file=sys.stderr))
from fusegrad.examples import gpt
gpt.main(["--steps", sys.argv[1], "--sample", "0", "--eval-batches", "2", "--corpus-bytes", "200000",
          "--checkpoint", sys.argv[2]])
"""


def gpt_memory(steps: int, folder: Path) -> dict[str, float]:
    """Peak RSS (MB) of `steps` GPT training steps with VIZ=-1 and with neither VIZ nor PROFILE."""
    out = {}
    for key, flags in (("viz_mb", {"VIZ": "-1"}), ("plain_mb", {})):
        env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "PROFILE", "TRACK_MATCH_STATS")}
        env |= {"PYTHONPATH": str(REPO), "PROFILEPATH": str(folder / "gpt.fgprof"), **flags}
        done = subprocess.run([sys.executable, "-c", GPT, str(steps), str(folder / "gpt.safetensors")], env=env,
                              capture_output=True, text=True, timeout=7200, check=True)  # fmt: skip
        out[key] = float(done.stderr.strip().splitlines()[-1].split()[1])
    return out


@contextlib.contextmanager
def browser_page(use: bool) -> Iterator[Any]:
    """A page in headless Chromium when `use` (None otherwise), closed on exit."""
    if not use:
        yield None
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser.new_page(viewport={"width": 1400, "height": 850})
        browser.close()


if __name__ == "__main__":
    main()
