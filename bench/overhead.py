"""Host overhead, fusegrad vs torch (2 threads) vs the reference (tinygrad 0.14, DEV=CPU), in one run: a tiny op eager
and jitted, jitted replay cost per kernel (CPU and NULL), eager/jitted ratio of an MLP Adam step and of a GPT training
step (the model of fusegrad.examples.gpt), `import` time, a cold first GPT step (empty compile cache), the scheduling
of a 1,000-layer chain, and the eager tiny op and MLP step with the schedule cache off (SCHEDULE_CACHE=0).

Every figure is the best of several runs, each measured in a fresh subprocess per framework; the table also shows the
load average, since a busy machine inflates all of them. Usage: python bench/overhead.py [--help]
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

FRAMEWORKS = ("fusegrad", "torch", "tinygrad")
MEASURES = ("tiny", "replay", "mlp", "gpt", "python", "import", "cold", "chain", "nocache")
REPLAY_KERNELS = 200  # kernels in the replayed chain: the per-call cost is spread over them
CHAIN_LAYERS = 1000  # (x @ w).relu() layers scheduled by the chain measure (bench/schedule.py shows other lengths)
# the GPT of fusegrad.examples.gpt at its default size: vocab of the stdlib corpus (~96 characters), batch 16
GPT_SHAPE = {"vocab": 96, "context": 64, "dim": 128, "heads": 4, "layers": 2, "batch": 16}


def best_of(fn: Callable[[], Any], seconds: float, number: int = 1) -> float:
    """Seconds per call: the fastest of repeated batches of `number` calls (at least 3) within `seconds`."""
    return best_of_both(fn, seconds, number)[0]


def best_of_both(fn: Callable[[], Any], seconds: float, number: int = 1) -> tuple[float, float]:
    """(wall seconds, CPU seconds) per call, each the fastest of repeated batches of `number` calls (at least 3)
    within `seconds`. CPU time (this process, all its threads) is what a loaded machine inflates far less."""
    return best_in_turns([fn], seconds, number)[0]


def best_in_turns(fns: list[Callable[[], Any]], seconds: float, number: int = 1) -> list[tuple[float, float]]:
    """best_of_both of each of `fns`, which take turns (a batch of `number` calls each per round, at least 3 rounds,
    after one untimed call each), so load from other work on the shared cores falls on all of them alike."""
    for fn in fns:
        fn()
    best = [(math.inf, math.inf) for _ in fns]
    deadline, rounds = time.perf_counter() + seconds, 0
    while rounds < 3 or time.perf_counter() < deadline:
        for i, fn in enumerate(fns):
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(number):
                fn()
            wall, cpu = (time.perf_counter() - start) / number, (time.process_time() - cpu_start) / number
            best[i] = (min(best[i][0], wall), min(best[i][1], cpu))
        rounds += 1
    return best


# *** workers: one framework, one measure, in its own process; print a JSON dict of figures ***


def load(name: str) -> ModuleType:
    if name == "torch":
        import torch

        torch.set_num_threads(2)
        return torch
    fw = importlib.import_module(name)
    for sub in ("nn", "nn.optim", "nn.state"):
        importlib.import_module(f"{name}.{sub}")
    fw.Tensor.training = True  # the training steps' mode, set once
    if (training := getattr(importlib.import_module(f"{name}.helpers"), "TRAINING", None)) is not None:
        training.value = 1  # the reference keeps the mode in a flag too, which its optimizers check
    return fw


def tiny(fw: ModuleType, name: str, seconds: float) -> dict[str, float]:
    """(a + b) on 10 floats, µs per call: eager (realize), and jitted where the framework has a JIT."""
    if name == "torch":
        a, b = fw.rand(10), fw.rand(10)
        return {"tiny eager µs": best_of(lambda: a + b, seconds, 200) * 1e6}
    a, b = fw.Tensor.rand(10).realize(), fw.Tensor.rand(10).realize()
    eager = best_of(lambda: (a + b).realize(), seconds, 20)
    step = fw.TinyJit(lambda x, y: (x + y).realize())
    out = {"tiny eager µs": eager * 1e6, "tiny jitted µs": best_of(lambda: step(a, b), seconds, 50) * 1e6}
    if name == "fusegrad":  # the reference's Tensor has no schedule() to take the launch apart with
        (item,) = (a + b).schedule()
        out["eager launch µs/kernel"] = best_of(item.lower().run, seconds, 50) * 1e6  # scheduling excluded
    return out


def replay(fw: ModuleType, name: str, seconds: float) -> dict[str, float]:
    """µs per kernel of a jitted replay of a chain of REPLAY_KERNELS tiny kernels, on CPU and on NULL."""
    if name == "torch":
        return {}

    def chain(x: Any) -> Any:
        for _ in range(REPLAY_KERNELS):
            x = (x + 1).realize()
        return x

    out = {}
    for device in ("CPU", "NULL"):
        x = fw.Tensor.ones(16, device=device).contiguous().realize()
        step = fw.TinyJit(chain)
        out[f"replay {device} µs/kernel"] = best_of(lambda s=step, x=x: s(x), seconds, 5) / REPLAY_KERNELS * 1e6
    return out


def mlp_step(fw: ModuleType, name: str) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """An MLP 784-128-10 Adam step on a batch of 64: (eager step, jitted step or None)."""
    if name == "torch":
        model = fw.nn.Sequential(fw.nn.Linear(784, 128), fw.nn.ReLU(), fw.nn.Linear(128, 10))
        opt = fw.optim.Adam(model.parameters(), lr=1e-3)
        x, y = fw.randn(64, 784), fw.randint(0, 10, (64,))

        def torch_step() -> Any:
            opt.zero_grad()
            loss = fw.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()

        return torch_step, None
    nn = fw.nn
    layers = [nn.Linear(784, 128), nn.Linear(128, 10)]
    opt = nn.optim.Adam(nn.state.get_parameters(layers), lr=1e-3)
    x, y = fw.Tensor.randn(64, 784).realize(), fw.Tensor.randint(64, low=0, high=10).realize()

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y).backward()
        fw.Tensor.realize(loss, *[p.grad for p in opt.params if p.grad is not None])
        opt.step()
        return loss

    jitted = fw.TinyJit(step)
    return lambda: step(x, y).item(), lambda: jitted(x, y).item()


def make_gpt(fw: ModuleType) -> Any:
    """fusegrad.examples.gpt's model, written against the API both fusegrad and the reference have."""
    nn = fw.nn
    v, t, c, h = (GPT_SHAPE[k] for k in ("vocab", "context", "dim", "heads"))

    class Block:
        def __init__(self) -> None:
            self.norm1, self.norm2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.qkv, self.out = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.up, self.down = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def __call__(self, x: Any) -> Any:
            b = x.shape[0]
            qkv = self.qkv(self.norm1(x)).reshape(b, t, 3, h, c // h).permute(2, 0, 3, 1, 4)  # (3, B, h, T, C/h)
            y = qkv[0].scaled_dot_product_attention(qkv[1], qkv[2], is_causal=True)
            x = x + self.out(y.transpose(1, 2).reshape(b, t, c))
            return x + self.down(self.up(self.norm2(x)).gelu())

    class GPT:
        def __init__(self) -> None:
            self.tokens, self.positions = nn.Embedding(v, c), nn.Embedding(t, c)
            self.blocks = [Block() for _ in range(GPT_SHAPE["layers"])]
            self.norm, self.head = nn.LayerNorm(c), nn.Linear(c, v)

        def __call__(self, ids: Any) -> Any:
            x = self.tokens(ids) + self.positions(fw.Tensor.arange(t))
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    return GPT()


def gpt_parts(fw: ModuleType) -> tuple[Any, Any, Any, Any]:
    """(model, AdamW optimiser, x, y): the GPT, its optimiser and a batch of random characters."""
    fw.Tensor.manual_seed(0)
    model = make_gpt(fw)
    opt = fw.nn.optim.AdamW(fw.nn.state.get_parameters(model), lr=1e-3, weight_decay=0.01)
    shape = (GPT_SHAPE["batch"], GPT_SHAPE["context"])
    x = fw.Tensor.randint(*shape, low=0, high=GPT_SHAPE["vocab"]).realize()
    y = fw.Tensor.randint(*shape, low=0, high=GPT_SHAPE["vocab"]).realize()
    return model, opt, x, y


def gpt_step(fw: ModuleType) -> tuple[Callable[[Any, Any], Any], Any, Any]:
    """(step(x, y) -> loss, x, y): one AdamW training step of the GPT on a batch of random characters."""
    model, opt, x, y = gpt_parts(fw)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward()
        fw.Tensor.realize(loss, *[p.grad for p in opt.params if p.grad is not None])
        opt.step()
        return loss

    return step, x, y


def ratio(eager: Callable[[], Any], jitted: Callable[[], Any] | None, seconds: float, label: str) -> dict[str, float]:
    """The eager step's ms, and with a jitted step its ms and the eager/jitted ratio, in wall and in CPU time.

    The two take turns, one call each, for `seconds` in all, and each keeps its best: load from other work on the
    shared cores falls on both alike. Timed one after the other (a block of eager steps, then one of jitted steps),
    the GPT ratio on this host swung 1.35-1.84 between runs; taking turns, 1.18-1.31 in three runs."""
    if jitted is None:
        wall, cpu = best_of_both(eager, seconds)
        return {f"{label} eager ms": wall * 1e3}
    (wall, cpu), (jit_wall, jit_cpu) = best_in_turns([eager, jitted], seconds)
    return {
        f"{label} eager ms": wall * 1e3,
        f"{label} jitted ms": jit_wall * 1e3,
        f"{label} eager/jitted": wall / jit_wall,
        f"{label} eager/jitted CPU time": cpu / jit_cpu,
    }


def mlp(fw: ModuleType, name: str, seconds: float) -> dict[str, float]:
    return ratio(*mlp_step(fw, name), seconds, "MLP step")


def gpt(fw: ModuleType, name: str, seconds: float) -> dict[str, float]:
    if name == "torch":
        return {}
    step, x, y = gpt_step(fw)
    jitted = fw.TinyJit(step)
    return ratio(lambda: step(x, y).item(), lambda: jitted(x, y).item(), seconds, "GPT step")


def python(fw: ModuleType, name: str, seconds: float) -> dict[str, float]:
    """The GPT step's Python by phase on the NULL device (kernels cost nothing there): CPU ms per step of the forward
    (loss built), backward, the realize of loss and gradients, and the optimiser step (medians over the steps run
    in `seconds`), their total (mean, so it includes the garbage collections), and the collector's ms per step."""
    if name != "fusegrad":  # the device is chosen by the driver's environment (DEV=NULL)
        return {}
    import gc
    import statistics

    model, opt, x, y = gpt_parts(fw)
    collecting: list[float] = []
    gc_seconds = [0.0]

    def timed_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collecting.append(time.process_time())
        elif collecting:
            gc_seconds[0] += time.process_time() - collecting.pop()

    def phases() -> list[float]:
        marks = [time.process_time()]
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        marks.append(time.process_time())
        loss.backward()
        marks.append(time.process_time())
        fw.Tensor.realize(loss, *[p.grad for p in opt.params if p.grad is not None])
        marks.append(time.process_time())
        opt.step()
        marks.append(time.process_time())
        loss.item()
        return [b - a for a, b in itertools.pairwise(marks)]

    for _ in range(5):  # schedules, recordings and recipes made
        phases()
    gc.callbacks.append(timed_gc)
    try:
        rows, deadline = [], time.perf_counter() + seconds
        while len(rows) < 20 or time.perf_counter() < deadline:
            rows.append(phases())
    finally:
        gc.callbacks.remove(timed_gc)
    names = ("forward", "backward", "realize", "optimiser")
    out = {f"GPT step Python ms, {n} (NULL)": statistics.median(r[i] for r in rows) * 1e3 for i, n in enumerate(names)}
    out["GPT step Python ms, total with GC (NULL)"] = statistics.mean(sum(r) for r in rows) * 1e3
    out["GPT step Python ms, garbage collection (NULL)"] = gc_seconds[0] / len(rows) * 1e3
    return out


def cold(fw: ModuleType, name: str, seconds: float) -> dict[str, float]:
    """The first GPT step's seconds (schedule, codegen, compile and run), in a process whose cache starts empty."""
    if name == "torch":
        return {}
    step, x, y = gpt_step(fw)
    before, start = cpu_seconds(), time.perf_counter()
    step(x, y).item()
    # CPU time, this process's threads and its compiler processes: what a loaded machine inflates far less
    return {"first GPT step s": time.perf_counter() - start, "first GPT step s CPU time": cpu_seconds() - before}


def cpu_seconds() -> float:
    """User + system seconds of this process and its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def chain(fw: ModuleType, name: str, seconds: float) -> dict[str, float]:
    """Seconds to schedule a chain of CHAIN_LAYERS `(x @ w).relu()` layers (nothing runs): wall and CPU time."""
    if name != "fusegrad":  # the reference's Tensor has no schedule() that stops before running
        return {}
    x, w = fw.Tensor.empty(16, 16), fw.Tensor.empty(16, 16)
    for _ in range(CHAIN_LAYERS):
        x = (x @ w).relu()
    before, start = cpu_seconds(), time.perf_counter()
    x.schedule()
    label = f"schedule {CHAIN_LAYERS:,}-layer chain s"
    return {label: time.perf_counter() - start, f"{label} CPU time": cpu_seconds() - before}


def nocache(fw: ModuleType, name: str, seconds: float) -> dict[str, float]:
    """The tiny op and the MLP step eager with the schedule cache off (SCHEDULE_CACHE=0): every realize scheduled."""
    if name != "fusegrad":
        return {}
    with fw.Context(SCHEDULE_CACHE=0):
        a, b = fw.Tensor.rand(10).realize(), fw.Tensor.rand(10).realize()
        eager, _ = mlp_step(fw, name)
        return {
            "tiny eager µs, no schedule cache": best_of(lambda: (a + b).realize(), seconds, 20) * 1e6,
            "MLP step eager ms, no schedule cache": best_of(eager, seconds) * 1e3,
        }


WORKERS = {"tiny": tiny, "replay": replay, "mlp": mlp, "gpt": gpt, "python": python, "cold": cold, "chain": chain,
           "nocache": nocache}  # fmt: skip


def worker(name: str, measure: str, seconds: float) -> None:
    print(json.dumps(WORKERS[measure](load(name), name, seconds)))


# *** the driver: one subprocess per (framework, measure) ***


def run_worker(name: str, measure: str, seconds: float, env: dict[str, str]) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", name, measure, "--seconds", str(seconds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=1800)
    if proc.returncode != 0:
        print(f"  {name} {measure} failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return {}
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]  # a dict of floats


def import_time(name: str, repeats: int, env: dict[str, str]) -> dict[str, float]:
    """ms of `import name` in a fresh interpreter, less the interpreter's own start-up (best of `repeats`): wall
    time, and CPU time (user + system), which a loaded machine inflates far less. Timed as a user's installed package
    imports: from the bytecode cache, which an untimed first import writes (into a temporary PYTHONPYCACHEPREFIX, so
    a read-only install works too); with PYTHONDONTWRITEBYTECODE set in the environment (as on some shared machines,
    every module compiled again at each import) the wall time without the cache is reported too."""

    def run(code: str, run_env: dict[str, str]) -> tuple[float, float]:
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=run_env, check=True)
        wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime

    def timed(run_env: dict[str, str]) -> tuple[float, float]:
        base = [run("pass", run_env) for _ in range(repeats)]
        runs = [run(f"import {name}", run_env) for _ in range(repeats)]
        return min(r[0] for r in runs) - min(r[0] for r in base), min(r[1] for r in runs) - min(r[1] for r in base)

    with tempfile.TemporaryDirectory(prefix="overhead_pycache_") as tmp:
        cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": tmp}
        try:
            run(f"import {name}", cached)  # writes the bytecode cache
            wall, cpu = timed(cached)
            uncached = timed(env)[0] if env.get("PYTHONDONTWRITEBYTECODE") else None
        except subprocess.CalledProcessError:
            print(f"  {name} import failed", file=sys.stderr)
            return {}
    out = {"import ms": wall * 1e3, "import ms CPU time": cpu * 1e3}
    return out | ({"import ms, no bytecode cache": uncached * 1e3} if uncached is not None else {})


def measure_all(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {name: {} for name in args.frameworks}
    for name in args.frameworks:
        env = {**os.environ, "DEV": "CPU", "OMP_NUM_THREADS": "2"}
        for measure in args.measures:
            print(f"  {name}: {measure} ...", file=sys.stderr, flush=True)
            if measure == "import":
                results[name] |= import_time(name, args.repeats, env)
            elif measure == "python":  # Python alone: the NULL device runs no kernels
                results[name] |= run_worker(name, "python", args.seconds, {**env, "DEV": "NULL"})
            elif measure == "cold":
                with tempfile.TemporaryDirectory(prefix="overhead_cache_") as tmp:
                    cold_env = {**env, "CACHEDB": os.path.join(tmp, "cache.db")}
                    results[name] |= run_worker(name, "cold", args.seconds, cold_env)
            else:
                results[name] |= run_worker(name, measure, args.seconds, env)
    return results


TARGETS = {"tiny eager µs": "≤ 50", "eager launch µs/kernel": "≤ 10", "replay CPU µs/kernel": "≤ 2",
           "replay NULL µs/kernel": "≤ 2",
           "MLP step eager/jitted": "≤ 1.5", "GPT step eager/jitted": "≤ 1.5",
           "MLP step eager/jitted CPU time": "≤ 1.5", "GPT step eager/jitted CPU time": "≤ 1.5", "import ms": "≤ 150",
           "import ms CPU time": "≤ 150",
           "first GPT step s": "≤ 10", f"schedule {CHAIN_LAYERS:,}-layer chain s": "≤ 1",
           f"schedule {CHAIN_LAYERS:,}-layer chain s CPU time": "≤ 1"}  # fmt: skip


def print_table(results: dict[str, dict[str, float]]) -> None:
    rows = list(dict.fromkeys(k for figures in results.values() for k in figures))
    names = list(results)
    load1, load5, _ = os.getloadavg()
    print(f"host overhead, best of runs; {os.cpu_count()} cores, load average {load1:.1f} / {load5:.1f} (1/5 min)")
    print(f"| | {' | '.join(names)} | target (fusegrad) |")
    print(f"|---|{'---|' * len(names)}---|")
    for row in rows:
        cells = [f"{results[n][row]:,.2f}" if row in results[n] else "n/a" for n in names]
        print(f"| {row} | {' | '.join(cells)} | {TARGETS.get(row, '')} |")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--measures", nargs="+", choices=MEASURES, default=list(MEASURES))
    parser.add_argument("--seconds", type=float, default=2.0, help="time spent per figure (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="interpreter starts per import figure (default 5)")
    parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "MEASURE"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[1], args.seconds)
        return
    print_table(measure_all(args))


if __name__ == "__main__":
    main()
