"""Benchmark: the VIZ app on the trace of a training-like run, its graph layout, and the profile's packed size.

Records `--steps` steps of a small two-layer MLP trained with hand-written gradients (TRACK_MATCH_STATS=2, PROFILE=1),
saves both traces, then prints: server ready time (load the files, bind, first answer), `/ctxs` time, time to the
first graph of the biggest step, layout time for 500 / 2,000 / 5,000-node graphs, and profile bytes per event.

    python bench/viz.py [--steps 50] [--reps 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.request import urlopen

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import numpy as np  # after the path set-up above

from fusegrad import Tensor
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context, ProfileRangeEvent
from fusegrad.viz.layout import layout_graph
from fusegrad.viz.profile import get_profile
from fusegrad.viz.serve import live_events, live_trace
from fusegrad.viz.server import start_in_thread
from fusegrad.viz.session import open_session
from fusegrad.viz.trace_file import save_profile, save_rewrites


def train_mlp(steps: int, batch: int = 64, features: int = 16, hidden: int = 32, lr: float = 0.05) -> float:
    """Gradient descent on a ReLU MLP, gradients written out by hand; returns the last loss."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((batch, features)).astype(np.float32))
    y = Tensor(rng.standard_normal((batch, 1)).astype(np.float32))
    w1 = Tensor((rng.standard_normal((features, hidden)) * 0.1).astype(np.float32)).contiguous().realize()
    w2 = Tensor((rng.standard_normal((hidden, 1)) * 0.1).astype(np.float32)).contiguous().realize()
    loss = Tensor(0.0)
    for _ in range(steps):
        h = (x @ w1).relu()  # (B, H)
        diff = h @ w2 - y  # (B, 1)
        loss = (diff * diff).mean()
        d_out = diff * (2.0 / batch)  # d loss / d out
        d_h = (d_out @ w2.T) * (h > 0).cast(dtypes.float32)  # back through the ReLU
        w1.assign(w1 - (x.T @ d_h) * lr)
        w2.assign(w2 - (h.T @ d_out) * lr)
        Tensor.realize(loss, w1, w2)
    return float(loss.item())


def random_dag(n: int, seed: int = 0) -> dict[int, dict[str, Any]]:
    rng = random.Random(seed)
    graph: dict[int, dict[str, Any]] = {}
    for i in range(n):
        srcs = sorted({rng.randrange(max(0, i - 40), i) for _ in range(rng.choice((0, 1, 2, 2, 3)))}) if i > 4 else []
        graph[i] = {"label": f"ADD\ndtypes.float\nnode {i}", "src": list(enumerate(srcs))}
    return graph


def best_of(reps: int, fn: Any) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=50, help="training steps to trace (default 50)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each timing, best kept (default 3)")
    args = parser.parse_args()

    start = time.perf_counter()
    with Context(TRACK_MATCH_STATS=2, PROFILE=1):
        loss = train_mlp(args.steps)
    trace, events = live_trace(), live_events()
    steps = sum(len(s) for s in trace.rewrites)
    matches = sum(len(s.matches) for group in trace.rewrites for s in group)
    print(f"traced {args.steps} MLP steps in {time.perf_counter() - start:.2f} s (loss {loss:.4f}): "
          f"{len(trace.keys)} groups, {steps} steps, {matches} matches, {len(events)} profile events")  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        rewrites_file = save_rewrites(trace, Path(tmp) / "rewrites.json.gz")
        profile_file = save_profile(events, Path(tmp) / "profile.json")
        sizes = f"{rewrites_file.stat().st_size / 1e3:.0f} kB + {profile_file.stat().st_size / 1e3:.0f} kB"
        start = time.perf_counter()
        session = open_session(rewrites_file, profile_file)
        server, url = start_in_thread(session)
        with urlopen(url, timeout=60) as res:
            res.read()
        print(f"server ready (load {sizes}, bind, first answer): {(time.perf_counter() - start) * 1e3:.1f} ms")
        start = time.perf_counter()
        with urlopen(url + "ctxs", timeout=60) as res:
            res.read()
        print(f"/ctxs (first request, {len(trace.keys)} groups): {(time.perf_counter() - start) * 1e3:.1f} ms")
        ctx, idx = max(((c, i) for c, group in enumerate(trace.rewrites) for i in range(len(group))),
                       key=lambda ci: len(trace.rewrites[ci[0]][ci[1]].matches))  # fmt: skip
        start = time.perf_counter()
        with urlopen(url + f"ctxs?ctx={ctx}&idx={idx}", timeout=60) as res:
            res.readline()
            res.readline()  # the header, then the first graph
            first = time.perf_counter() - start
            lines = 2 + sum(1 for _ in res)
        total = time.perf_counter() - start
        timing = f"first graph after {first * 1e3:.1f} ms, all after {total * 1e3:.1f} ms"
        print(f"biggest step ({lines - 3} matches): {timing}")
        server.shutdown()
        server.server_close()

    for n in (500, 2000, 5000):
        graph = random_dag(n)
        seconds = best_of(args.reps, lambda graph=graph, n=n: layout_graph(graph, max_nodes=n))
        print(f"layout of {n:5d} nodes: {seconds * 1e3:7.1f} ms")

    ranges = sum(isinstance(e, ProfileRangeEvent) for e in events)
    packed = get_profile(events)
    per_event = len(packed) / max(len(events), 1)
    print(f"profile: {len(packed)} bytes for {len(events)} events ({per_event:.1f} bytes/event, {ranges} range events)")
    print(f"viewer files: {sizes}")


if __name__ == "__main__":
    main()
