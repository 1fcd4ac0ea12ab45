"""Compiled CPU kernels unload when nothing holds them: a long process running ever new kernels keeps a bounded number
of memory mappings (RUNNER_CACHE_SIZE bounds the runner cache; dlopen fails at vm.max_map_count otherwise), while a
TinyJit capture or CPU graph keeps the kernels it calls loaded, and an evicted kernel is built again when it runs.
The scenarios that shrink the cache run in a child process (RUNNER_CACHE_SIZE and SCHEDULE_CACHE=0 set there).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import weakref
from typing import Any

import pytest

from fusegrad import Device
from fusegrad.device import Compiler
from fusegrad.engine.realize import RunnerCache
from fusegrad.helpers import Context

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not pathlib.Path("/proc/self/maps").exists(), reason="counts /proc/self/maps lines")

CHILD = """
import gc, sys, weakref
from fusegrad import Tensor, TinyJit
from fusegrad.engine.realize import method_cache
from fusegrad.runtime.graph.cpu import CPUGraph

def kernel_maps():  # mappings of loaded kernel libraries (their deleted temp files are named fusegrad_*.so)
    with open("/proc/self/maps") as f:
        return sum(".so" in line and "/fusegrad_" in line for line in f)

x = Tensor([1.0, 2.0, 3.0]).realize()

def run_distinct(start, count):  # `count` kernels no earlier one shares (the constant is in the kernel)
    for i in range(start, start + count):
        got = (x * float(i) + 0.5).tolist()
        assert got == [i + 0.5, 2 * i + 0.5, 3 * i + 0.5], (i, got)

def held_programs(runner):  # the CPUPrograms a runner (a graph or one kernel) can call
    return list(runner._programs) + [runner._program] if isinstance(runner, CPUGraph) else [runner._prg]

def bounded():
    run_distinct(0, 20)
    first = kernel_maps()
    peak = 0
    for start in range(20, 240, 20):
        run_distinct(start, 20)
        peak = max(peak, kernel_maps())
    assert 0 < first and peak <= 16 * 6, (first, peak)  # 16 entries: at most 16 kernels, ~5 mappings each
    assert len(method_cache) <= 16

def evicted_runs_again():
    got = (x * 3.0 + 0.25).tolist()
    runner = next(reversed(method_cache.values()))
    program = weakref.ref(runner._prg)
    del runner
    run_distinct(1000, 20)  # pushes it out of the cache: nothing else holds it, so it unloads
    assert program() is None, "an evicted kernel nobody holds must unload"
    assert (x * 3.0 + 0.25).tolist() == got == [3.25, 6.25, 9.25]

def jit_keeps_kernels(graph):
    @TinyJit
    def step(a):
        b = (a * 2.0 + 1.0).contiguous()
        c = (b * b).contiguous()
        return (c + a).sum()
    for k in range(3):
        assert step(Tensor([1.0, 2.0, 3.0]) + k).item() == sum((2 * (v + k) + 1) ** 2 + v + k for v in (1, 2, 3))
    replayed = step.captured._jit_cache
    assert any(isinstance(ei.prg, CPUGraph) for ei in replayed) == graph, [type(ei.prg) for ei in replayed]
    programs = [weakref.ref(p) for ei in replayed for p in held_programs(ei.prg)]
    assert len(programs) >= 2
    run_distinct(2000, 40)  # every kernel of the capture leaves the runner cache
    gc.collect()
    assert all(p() is not None for p in programs), "a capture must keep the kernels it calls loaded"
    for k in range(3, 6):
        assert step(Tensor([1.0, 2.0, 3.0]) + k).item() == sum((2 * (v + k) + 1) ** 2 + v + k for v in (1, 2, 3))
    loaded = kernel_maps()
    del step, replayed
    gc.collect()
    assert all(p() is None for p in programs), "dropping the capture must unload its kernels"
    assert kernel_maps() < loaded

def threads_outlive_kernels():  # OpenMP's worker threads sleep in its runtime: unloading every kernel must keep it
    big = Tensor.ones(1 << 22).contiguous().realize()  # big enough for `omp parallel for`
    for k in range(3):
        assert (big * float(k + 7)).sum().item() == (k + 7) * (1 << 22)
        method_cache.clear()
        gc.collect()
        assert kernel_maps() == 0, "with the cache cleared and no capture, no kernel stays loaded"

scenarios = {"bounded": bounded, "threads": threads_outlive_kernels, "evicted": evicted_runs_again}
scenarios.update(jit_graph=lambda: jit_keeps_kernels(True), jit_items=lambda: jit_keeps_kernels(False))
scenarios[sys.argv[1]]()
print("ok")
"""


def run_child(scenario: str, **env: str) -> None:
    """Run one scenario in a fresh interpreter on CPU with a 16-entry runner cache; it must print only "ok"."""
    child_env = {**os.environ, "DEV": "CPU", "RUNNER_CACHE_SIZE": "16", "SCHEDULE_CACHE": "0", **env}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, scenario], cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=600
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, "", "ok\n"), proc.stderr[-3000:]


def test_mappings_stay_bounded_over_many_kernels() -> None:
    run_child("bounded")


def test_openmp_runtime_stays_when_every_kernel_unloads() -> None:
    run_child("threads")  # it crashed (SIGSEGV) when the last kernel linking libgomp took it along


def test_evicted_kernel_unloads_and_runs_again() -> None:
    run_child("evicted")


@pytest.mark.parametrize("jit", ["1", "2"], ids=["cpu_graph", "no_graph"])
def test_capture_keeps_evicted_kernels_loaded(jit: str) -> None:
    run_child("jit_graph" if jit == "1" else "jit_items", JIT=jit)


def test_runner_cache_drops_least_recently_used() -> None:
    cache: Any = RunnerCache()  # the cache never looks inside its values: strings stand for runners
    keys = [("CPU", Compiler, bytes([n]), (0, 0), True) for n in range(4)]
    with Context(RUNNER_CACHE_SIZE=2):
        cache[keys[0]], cache[keys[1]] = "a", "b"
        assert cache.get(keys[0]) == "a"  # now the newest
        cache[keys[2]] = "c"
        assert list(cache) == [keys[0], keys[2]], "the least recently used entry goes first"
        assert cache.get(keys[1]) is None
    with Context(RUNNER_CACHE_SIZE=0):  # a bound below one keeps one entry
        cache[keys[3]] = "d"
        assert list(cache) == [keys[3]]


def test_program_unloads_when_freed() -> None:
    from fusegrad.runtime.ops_cpu import CPUProgram

    dev = Device["CPU"]
    src = "void fusegrad_unload_probe(float* restrict out) { out[0] = 42.0f; }\n"
    program = CPUProgram(dev, "fusegrad_unload_probe", dev.compiler.compile_cached(src))

    def probe_maps() -> int:
        return pathlib.Path("/proc/self/maps").read_text().count("/fusegrad_fusegrad_unload_probe_")

    assert probe_maps() > 0
    alive = weakref.ref(program)
    del program  # refcounting frees it at once: no cycle keeps a loaded library alive until a GC pass
    assert alive() is None
    assert probe_maps() == 0, "a freed program's library must be unloaded"
