"""Benchmark: simplify one large symbolic index graph with `sym`, in fusegrad and in the reference system (tinygrad).

Both systems build the same expression through their own `UOp` API (outside the timed region) and rewrite it with
`graph_rewrite(graph, sym)`; the figure is input nodes per second, best of `--reps` runs on freshly built graphs.

    python bench/rewrite.py [--terms 7500] [--reps 3] [--profile] [--no-reference]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

NUM_VARS = 64  # variables per graph: few enough that terms share them, many enough that terms differ
VAR_MAX = 15  # every variable is in 0..15, so every value is non-negative and // and % agree with C's
# terms per expression: a kernel has many small index expressions, not one huge sum (whose like-term rules are
# quadratic in the sum's length in both systems, which would measure that instead of the matcher)
GROUP_SIZE = 8


@dataclass(frozen=True)
class System:
    """One implementation under test: how to make a variable, rewrite with sym, count nodes and evaluate."""

    name: str
    variable: Callable[[str], Any]
    sink: Callable[[list[Any]], Any]
    simplify: Callable[[Any], Any]
    count: Callable[[Any], int]
    evaluate: Callable[[Any, dict[str, int]], int]


def term(x: Any, y: Any, z: Any, i: int) -> Any:
    """One index term, written so sym has work to do: x+0, *1, *0, like terms and div/mod folding."""
    c = i % 97
    folds_div = ((x * 4 + y * 8 + c) // 4) % 16  # -> (x + y*2 + c//4) % 16
    identities = (z + 0) * 1 + x * (i % 3)  # -> z (+ x or x*2); x*0 drops out
    folds_mod = (y * 16 + z) % 16  # -> z, since 0 <= z < 16
    like_terms = x * 2 + x * (i % 5 + 1)  # -> x*k
    return folds_div + identities + folds_mod + like_terms


def build_sums(variable: Callable[[str], Any], terms: int, suffix: str) -> list[Any]:
    """`terms` terms over NUM_VARS variables, added up in groups of GROUP_SIZE: one index expression per group."""
    pool = [variable(f"v{k}_{suffix}") for k in range(NUM_VARS)]
    parts = [
        term(pool[i % NUM_VARS], pool[(7 * i + 1) % NUM_VARS], pool[(13 * i + 2) % NUM_VARS], i) for i in range(terms)
    ]
    sums = []
    for start in range(0, terms, GROUP_SIZE):
        total = parts[start]
        for part in parts[start + 1 : start + GROUP_SIZE]:
            total = total + part
        sums.append(total)
    return sums


def fusegrad_system() -> System:
    from fusegrad.helpers import TRACK_MATCH_STATS
    from fusegrad.uop.ops import UOp, graph_rewrite, sym_infer
    from fusegrad.uop.symbolic import sym

    TRACK_MATCH_STATS.value = 0
    return System(
        "fusegrad",
        lambda name: UOp.variable(name, 0, VAR_MAX),
        lambda sums: UOp.sink(*sums),
        lambda graph: graph_rewrite(graph, sym),
        lambda graph: len(graph.toposort()),
        sym_infer,
    )


def reference_system() -> System | None:
    os.environ.setdefault("DEV", "CPU")  # read by tinygrad at import
    try:
        import tinygrad.uop.ops as ops
        import tinygrad.uop.symbolic as symbolic
    except ImportError:
        return None
    reference: ModuleType = ops
    return System(
        "tinygrad",
        lambda name: reference.UOp.variable(name, 0, VAR_MAX),
        lambda sums: reference.UOp.sink(*sums),
        lambda graph: reference.graph_rewrite(graph, symbolic.sym),
        lambda graph: len(graph.toposort()),
        reference.sym_infer,
    )


def build(system: System, terms: int, suffix: str) -> Any:
    return system.sink(build_sums(system.variable, terms, suffix))


def check(system: System, terms: int) -> tuple[int, int]:
    """Rewrite once, check the result against plain Python ints at random points; return node counts before/after."""
    graph = build(system, terms, "check")
    simplified = system.simplify(graph)
    rng = random.Random(0)
    for _ in range(3):
        values = {f"v{k}_check": rng.randint(0, VAR_MAX) for k in range(NUM_VARS)}
        plain = build_sums(lambda name, values=values: values[name], terms, "check")
        got = [system.evaluate(expr, values) for expr in simplified.src]
        assert got == plain, f"{system.name}: the rewrite changed a value"
    return system.count(graph), system.count(simplified)


def best_time(system: System, terms: int, reps: int) -> tuple[float, int]:
    """Best wall time of `reps` rewrites, each on a graph built fresh (new variable names defeat every cache)."""
    best, nodes = float("inf"), 0
    for rep in range(reps):
        graph = build(system, terms, f"r{rep}")
        nodes = system.count(graph)
        gc.collect()
        start = time.perf_counter()
        system.simplify(graph)
        best = min(best, time.perf_counter() - start)
        del graph
    return best, nodes


def profile(system: System, terms: int, top: int, sort: str) -> None:
    graph = build(system, terms, "profile")
    profiler = cProfile.Profile()
    profiler.enable()
    system.simplify(graph)
    profiler.disable()
    print(f"\n{system.name}: top {top} functions of one rewrite, by {sort}")
    pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats(sort).print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--terms", type=int, default=7500, help="index terms in the graph (7500 gives ~53k nodes)")
    parser.add_argument("--reps", type=int, default=3, help="timed runs per system; the best counts")
    parser.add_argument("--profile", action="store_true", help="also cProfile one fusegrad rewrite")
    parser.add_argument("--top", type=int, default=25, help="functions shown by --profile")
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative"], help="--profile order")
    parser.add_argument("--no-reference", action="store_true", help="skip tinygrad even when it is installed")
    args = parser.parse_args()

    systems = [fusegrad_system()]
    reference = None if args.no_reference else reference_system()
    if reference is not None:
        systems.append(reference)
    elif not args.no_reference:
        print("tinygrad is not installed (pip install tinygrad): measuring fusegrad only")

    rates: dict[str, float] = {}
    print(f"{'system':10} {'nodes':>8} {'after':>8} {'best s':>8} {'nodes/s':>10}")
    for system in systems:
        _, after = check(system, args.terms)
        seconds, nodes = best_time(system, args.terms, args.reps)
        rates[system.name] = nodes / seconds
        print(f"{system.name:10} {nodes:8d} {after:8d} {seconds:8.3f} {rates[system.name]:10.0f}")
    if "tinygrad" in rates:
        print(f"fusegrad / tinygrad speed: {rates['fusegrad'] / rates['tinygrad']:.2f}x")
    if args.profile:
        profile(systems[0], args.terms, args.top, args.sort)


if __name__ == "__main__":
    main()
