"""BEAM search over kernel opts (codegen/opt.py): time candidate opt lists on the kernel's own device, keep the fastest.

`beam_search(ast, device, width)` starts from the heuristic's opts (and no opts, for a small kernel), then each round
takes every kept opt list's neighbours (extended by one legal action of `actions`, one UPCAST's amount changed, one opt
left out), compiles the new kernels in parallel, times them on fresh buffers (best of a few runs), drops any whose
output differs from the reference kernel's, and keeps the `width` fastest, until a round finds nothing faster or the
kernel's time budget (BUDGET_S) is spent; the winner is then timed in turns with the heuristic's opts and kept only if
it still wins by MIN_GAIN. The choice goes to the disk cache, keyed by kernel AST, device and width, so a later
process reuses it while the heuristic's opts for the kernel stay the same (`IGNORE_BEAM_CACHE=1` searches again);
`searches` lists every answer of this process. `beam_ast` is the engine's hook: the AST with the chosen opts in its
KernelInfo when `BEAM` is set.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fusegrad.codegen import KernelInfo, get_kernel_name, simplify_indexing, to_program
from fusegrad.codegen.opt import Opt, OptOps, apply_opts, choose_opts
from fusegrad.codegen.rowbuffer import kept_value
from fusegrad.device import Buffer, Device
from fusegrad.diskcache import CacheValue, JSONValue
from fusegrad.dtype import DType, PtrDType, _to_np_dtype, dtypes
from fusegrad.engine.realize import CompiledRunner
from fusegrad.helpers import BEAM, DEBUG, IGNORE_BEAM_CACHE, NOOPT, Context, dedup, diskcache_get, diskcache_put
from fusegrad.renderer import ProgramSpec, Renderer
from fusegrad.uop import REDUCE_AXES, AxisType, Ops
from fusegrad.uop.ops import UOp

__all__ = ["SearchResult", "actions", "beam_ast", "beam_search", "searches"]

# splits tried for an output axis: powers of two only, as gcc 12 -O2 -fopenmp miscompiled an `omp simd` loop of 3
# inside an upcast loop of 4 (an aligned store to acc0 + 3: a crash, e.g. UPCAST 1 4 then UPCAST 0 3 of a 6x5x8 matmul)
UPCAST_AMOUNTS = (2, 4, 8, 16)
GROUP_AMOUNTS = (2, 4, 8, 16)  # partial reductions tried for a reduce axis
LANES_AMOUNTS = (16, 32, 64)  # interleaved partials tried for a sum's loop (2, 4 or 8 AVX2 vectors of float32)
UNROLL_AMOUNTS = (2, 4, 8)  # unrolled steps tried for the innermost reduce loop (codegen/unroll.py)
SPLIT_AMOUNTS = (2, 4, 8)  # column tiles a SPLIT group may take, tried around the heuristic's (opt.column_groups)
# rows of a clamped row tile (opt.wide_tile_opts, opt.short_tile_opts), tried around the heuristic's
CLAMP_AMOUNTS = (2, 3, 4, 5, 6, 8)
GPU_GROUP_AMOUNTS = (8, 16, 32, 64, 128, 256)  # GPUs: threads of a work-group sharing a reduce through local memory
LOCAL_AMOUNTS = (2, 4, 8, 16, 32, 64)  # GPUs: threads of a work-group along an output axis
MAX_LOCAL = 256  # GPUs: threads of a work-group a candidate may reach (LOCAL and GROUP loops together)
MAX_UPCAST = 256  # product of the upcast loops' sizes a candidate may reach (unrolled code and accumulators grow)
TIMING_RUNS = 3  # a candidate's time is the best of at least this many runs after its checked run (page faults)
MIN_TIMING_S, MAX_TIMING_RUNS = 2e-3, 50  # fast kernels run more often, until this much time: one run is noise
MIN_GAIN = 0.97  # a round must beat the best so far by 3%: smaller wins are timing noise on a busy machine
DUEL_TURNS = (
    5  # the winner and the heuristic's opts are timed in turns this often at the end: the winner must still win
)
MAX_ROUNDS = 8  # actions appended to an opt list at most: bounds the search when every round improves a little
BUDGET_S = 60.0  # seconds one kernel's search may take: no round starts and no candidate is timed after that
MAX_WORK = 16  # a candidate estimated to do this many times the reference kernel's ALU ops is not run (a GPU GROUP of
# 64 threads does 7x a plain sum's ops in its combining tree; the row-loop upcasts this stops do 256x-780x)
COMPILE_CHUNK = 4  # candidates compiled per compiler process before they are timed and the budget is checked
ABANDON = 2.0  # a candidate whose checked run is this many times the best time so far is not run again (a loser)
# the unoptimised kernel is the reference output (and a beam start) up to this many ops; past it (a 2048² matmul runs
# 64 s without opts) the heuristic's kernel is, as tested in test/codegen against numpy and the PYTHON device
PLAIN_MAX_OPS = 1 << 27
BEAM_TABLE = "beam_search"  # disk-cache table: (AST key, device, renderer, width, codegen_stamp) -> a SearchResult
SKIPPED_DEVICES = ("NULL", "DISK", "NPY")  # nothing runs there (NULL) or no kernels at all: no timing to search on


# *** the search space ***


def _const_ranges(sink: UOp, axis_type: AxisType) -> list[UOp]:
    nodes = sink.toposort()
    return sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] is axis_type and u.src[0].op is Ops.CONST),
                  key=lambda r: r.arg)  # fmt: skip


def actions(sink: UOp, has_local: bool = False) -> list[Opt]:
    """The opts that may extend `sink`'s current ones: UPCAST of each constant output loop by a divisor (the upcast
    loops' sizes multiplying to at most MAX_UPCAST) unless a reduce is grouped or packed, GROUP of each constant
    reduce axis by a divisor unless there are upcasts, SWAP of each pair of output loops and of reduce loops (the
    order a conv sums its channels and window in), PACK of each buffer a reduce
    loads across each constant output loop that load doesn't depend on, KEEP of each reduce whose costly value the
    kernel computes again over its row (codegen/rowbuffer.py), LANES of each sum's loop, UNROLL of the innermost reduce
    loop. On GPUs (`has_local`) LOCAL and GROUP (`gpu_actions`) instead of GROUP, PACK, KEEP, LANES and UNROLL.
    Candidates only: apply_opts still decides whether one fits (ValueError: it doesn't)."""
    upcast = math.prod(int(r.src[0].arg) for r in _const_ranges(sink, AxisType.UPCAST))
    loops, reduces = _const_ranges(sink, AxisType.LOOP), _const_ranges(sink, AxisType.REDUCE)
    # GROUP and UPCAST exclude each other: gcc took 37 s to compile a 64x64 matmul tile with its reduce grouped
    grouped = any(u.op is Ops.DEFINE_REG for u in sink.toposort())
    ret: list[Opt] = []
    for r in [] if grouped else loops:
        size = int(r.src[0].arg)
        ret += [Opt(OptOps.UPCAST, r.arg[0], a) for a in UPCAST_AMOUNTS if size % a == 0 and upcast * a <= MAX_UPCAST]
    if has_local:
        return ret + gpu_actions(sink, loops, reduces, upcast > 1)
    for r in [] if upcast > 1 else reduces:
        ret += [Opt(OptOps.GROUP, r.arg[0], a) for a in GROUP_AMOUNTS if int(r.src[0].arg) % a == 0]
    ret += [
        Opt(OptOps.SWAP, a.arg[0], b.arg[0]) for rs in (loops, reduces) for i, a in enumerate(rs) for b in rs[i + 1 :]
    ]
    return ret + pack_actions(sink, loops) + keep_actions(sink) + lane_actions(sink) + unroll_actions(sink)


def lane_actions(sink: UOp) -> list[Opt]:
    """LANES of each sum's or product's one reduce loop (a row's, a GROUP's chunk) by each amount that divides it and
    leaves at least two steps; none for a reduce whose terms are already in lanes or an upcast tile."""
    ret: list[Opt] = []
    for red in (u for u in sink.toposort() if u.op is Ops.REDUCE and u.arg in (Ops.ADD, Ops.MUL) and len(u.src) == 2):
        rng = red.src[1]
        if rng.arg[1] is not AxisType.REDUCE or rng.src[0].op is not Ops.CONST:
            continue
        if any(u.op is Ops.RANGE and u.arg[1] is AxisType.UPCAST for u in red.src[0].toposort()):
            continue
        size = int(rng.src[0].arg)
        ret += [Opt(OptOps.LANES, rng.arg[0], a) for a in LANES_AMOUNTS if size % a == 0 and size >= 2 * a]
    return ret


def unroll_actions(sink: UOp) -> list[Opt]:
    """UNROLL of the innermost reduce loop (the largest axis id among the reduce loops: unroll.py takes no other) by
    each amount that divides it and leaves at least two steps of the outer loop; none once a loop is unrolled."""
    nodes = sink.toposort()
    if any(u.op is Ops.RANGE and u.arg[1] is AxisType.UNROLL for u in nodes):
        return []
    reduces = [u for u in nodes if u.op is Ops.RANGE and u.arg[1] in REDUCE_AXES]
    inner = max(reduces, key=lambda r: r.arg[0], default=None)
    if inner is None or inner.arg[1] is not AxisType.REDUCE:
        return []
    size = int(inner.src[0].arg) if inner.src[0].op is Ops.CONST else 0
    return [Opt(OptOps.UNROLL, inner.arg[0], a) for a in UNROLL_AMOUNTS if size % a == 0 and size >= 2 * a]


def keep_actions(sink: UOp) -> list[Opt]:
    """KEEP(reduce loop, its size) of each reduce with a value worth a row buffer (kept: kept_value finds none)."""
    reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE]
    return [Opt(OptOps.KEEP, red.src[1].arg[0], int(red.src[1].src[0].arg)) for red in reduces
            if kept_value(sink, red) is not None]  # fmt: skip


def gpu_actions(sink: UOp, loops: list[UOp], reduces: list[UOp], upcast: bool) -> list[Opt]:
    """LOCAL of each constant output loop and GROUP of each constant reduce (unless there are upcasts), by powers of
    two, the work-group staying within MAX_LOCAL threads. No PACK: its panel is copied outside an output loop, and on
    GPUs output loops are launch indexes (codegen/gpudims.py)."""
    in_group = _const_ranges(sink, AxisType.LOCAL) + _const_ranges(sink, AxisType.GROUP_REDUCE)
    threads = math.prod(int(r.src[0].arg) for r in in_group)
    ret = [Opt(OptOps.LOCAL, r.arg[0], a) for r in loops for a in LOCAL_AMOUNTS
           if int(r.src[0].arg) % a == 0 and threads * a <= MAX_LOCAL]  # fmt: skip
    ret += [Opt(OptOps.GROUP, r.arg[0], a) for r in ([] if upcast else reduces) for a in GPU_GROUP_AMOUNTS
            if int(r.src[0].arg) % a == 0 and threads * a <= MAX_LOCAL]  # fmt: skip
    return ret


def pack_actions(sink: UOp, loops: list[UOp]) -> list[Opt]:
    """PACK(loop, slot) for each global load inside a reduce and each output loop its index doesn't depend on (the
    loop its panel is copied outside of, then reused across): opt.py packs only such a load."""
    # loops a store's address depends on: not a PACK's copy loops (a panel placed by another's copy is no reuse)
    stored = {r for st in sink.src if st.op is Ops.STORE for r in st.src[0].toposort()}
    loops = [r for r in loops if r in stored]
    nodes = sink.toposort()
    reduced = {r for u in nodes if u.op is Ops.REDUCE for r in u.src[1:]}
    indexes = [u.src[0] for u in nodes if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    indexes = [x for x in indexes if x.src[0].op is Ops.DEFINE_GLOBAL and reduced & set(x.toposort())]
    # once packed, the load indexes the panel's copy loops, not a reduce range: the same PACK is not proposed again
    ret = [Opt(OptOps.PACK, r.arg[0], int(x.src[0].arg)) for x in indexes for r in loops if r not in x.toposort()]
    return dedup(ret)


def extensions(sink: UOp, opts: tuple[Opt, ...], has_local: bool = False) -> list[tuple[Opt, ...]]:
    """Every `opts + (action,)` that applies to the (simplified) kernel `sink` without error (`has_local`: on a GPU)."""
    return _applicable(sink, [(*opts, action) for action in actions(apply_opts(sink, opts, has_local), has_local)],
                       has_local)  # fmt: skip


def neighbours(sink: UOp, opts: tuple[Opt, ...], has_local: bool = False) -> list[tuple[Opt, ...]]:
    """The opt lists one step from `opts`: its extensions, `opts` with one UPCAST's, UPCAST_CLAMP's, UNROLL's or SPLIT's
    amount changed (another tile or group size: a finished tile such as the heuristic's, whose PACK ends its extensions,
    is still varied), and `opts` without one of its opts; those that apply."""
    ret = extensions(sink, opts, has_local)
    amounts = {OptOps.UPCAST: UPCAST_AMOUNTS, OptOps.UNROLL: UNROLL_AMOUNTS, OptOps.SPLIT: SPLIT_AMOUNTS,
               OptOps.UPCAST_CLAMP: CLAMP_AMOUNTS}  # fmt: skip
    for i, opt in enumerate(opts):
        if opt.op in amounts:
            ret += _applicable(sink, [(*opts[:i], Opt(opt.op, opt.axis, amount), *opts[i + 1 :])
                                      for amount in amounts[opt.op] if amount != opt.arg], has_local)  # fmt: skip
    ret += _applicable(sink, [opts[:i] + opts[i + 1 :] for i in range(len(opts))], has_local)
    return dedup(ret)


def _applicable(sink: UOp, candidates: list[tuple[Opt, ...]], has_local: bool) -> list[tuple[Opt, ...]]:
    """The candidates apply_opts takes without error."""
    ret = []
    for opts in candidates:
        try:
            apply_opts(sink, opts, has_local)
        except ValueError:
            continue
        except Exception as e:  # an opt.py defect on an odd candidate: dropped (and shown), never fatal to the search
            if DEBUG >= 2:
                print(f"beam: {opts} failed to apply: {type(e).__name__}: {e}")
            continue
        ret.append(opts)
    return ret


# *** timing candidates on fresh buffers ***


def _random_values(dt: DType, size: int, rng: np.random.Generator) -> np.ndarray:
    """Small ints (in range of every int dtype), normal floats, random bools."""
    if dt == dtypes.bool:
        return rng.integers(0, 2, size).astype(np.bool_)
    if dtypes.is_int(dt):
        return rng.integers(0, 8, size).astype(_to_np_dtype(dt))
    return rng.standard_normal(size).astype(_to_np_dtype(dt))


def _close(got: np.ndarray, expected: np.ndarray, scale: float = 1.0) -> bool:
    """Equal up to the reordered sums of GROUP and vectorised reductions, their tolerance times `scale` (ints and
    bools: exactly)."""
    if got.dtype.kind != "f":
        return bool(np.array_equal(got, expected))
    tolerance = (2e-2 if got.dtype.itemsize <= 2 else 1e-4) * scale
    return bool(np.allclose(got, expected, rtol=tolerance, atol=tolerance, equal_nan=True))


@dataclass
class Bench:
    """One kernel's search state: fresh random buffers (the same for every candidate), the reference kernel's outputs
    on them, the opt lists timed so far (None: dropped, it failed or gave a different answer) and the time the search
    must end by (`deadline`, perf_counter seconds; `capped` once a candidate was skipped for it)."""

    ast: UOp
    device: str
    name: str
    bufs: list[Buffer]
    initial: list[np.ndarray]
    var_vals: dict[str, int]
    deadline: float = math.inf
    capped: bool = False
    work: float = math.inf  # the reference kernel's ALU ops (codegen's estimate; inf: symbolic)
    scale: float = 1.0  # of _close's tolerance: rounding differences between summation orders grow with the reduce
    expected: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    timed: dict[tuple[Opt, ...], float | None] = dataclasses.field(default_factory=dict)

    @staticmethod
    def of(ast: UOp, device: str, reference: tuple[Opt, ...] = ()) -> Bench:
        """The bench of kernel `ast` on `device`, its expected outputs those of the kernel with opts `reference`."""
        nodes = ast.toposort()
        slots = {int(u.arg): u.dtype for u in nodes if u.op is Ops.DEFINE_GLOBAL and isinstance(u.dtype, PtrDType)}
        rng = np.random.default_rng(0)
        initial = [_random_values(slots[s].base, max(slots[s].size, 1), rng) if s in slots else np.zeros(1, np.uint8)
                   for s in range(max(slots, default=-1) + 1)]  # fmt: skip
        bufs = [Buffer(device, x.size, slots[s].base if s in slots else dtypes.uint8).allocate()
                for s, x in enumerate(initial)]  # fmt: skip
        var_vals = {u.expr: int(u.vmax) for u in nodes if u.op is Ops.DEFINE_VAR}  # the largest: buffers fit it
        bench = Bench(ast, device, get_kernel_name(ast), bufs, initial, var_vals, scale=_tolerance_scale(nodes))
        with Context(NOOPT=int(reference == ())):
            runner = bench.compile([reference])[reference]
            first = bench.run(reference, runner)
        if runner is not None and isinstance(ops := runner.p.estimates.ops, int):
            bench.work = max(ops, 1)
        if first is None:
            raise RuntimeError(f"beam: the reference kernel {bench.name} {reference} failed on {device}")
        bench.timed[reference], bench.expected = first
        return bench

    def compile(self, candidates: list[tuple[Opt, ...]]) -> dict[tuple[Opt, ...], CompiledRunner | None]:
        """Each candidate's kernel, rendered here and compiled by a pool of compiler processes (None: it failed)."""
        programs: dict[tuple[Opt, ...], ProgramSpec | None] = {}
        for opts in candidates:
            try:
                programs[opts] = to_program(with_opts(self.ast, opts, self.name), Device[self.device].renderer)
            except Exception as e:  # a candidate that cannot be rendered is dropped, never fatal
                self._failed(opts, e)
                programs[opts] = None
            if (program := programs[opts]) is not None and self._too_much_work(program):
                programs[opts] = None
        compiler = Device[self.device].compiler
        with ThreadPoolExecutor(max(2, min(os.cpu_count() or 1, len(programs))), thread_name_prefix="beam-cc") as pool:
            libs = {opts: pool.submit(compiler.compile_cached, p.src) for opts, p in programs.items() if p is not None}
        runners: dict[tuple[Opt, ...], CompiledRunner | None] = dict.fromkeys(candidates)
        for opts, lib in libs.items():
            try:
                runners[opts] = CompiledRunner(programs[opts], lib.result())  # type: ignore[arg-type]  # not None here
            except Exception as e:  # a compile error drops the candidate
                self._failed(opts, e)
        return runners

    def _too_much_work(self, program: ProgramSpec) -> bool:
        """Does the candidate do MAX_WORK times the reference kernel's ALU ops? An upcast of the loop a fused row
        op's statistic depends on moves the reduce inside its row loop (780x the ops: 62 s for one run of a 12 ms
        kernel, and a running kernel can't be stopped)."""
        ops = program.estimates.ops
        if isinstance(ops, int) and ops > MAX_WORK * self.work:
            if DEBUG >= 3:
                print(f"beam: {self.name} {program.ast.arg.opts_to_apply} dropped: {ops} ops vs {self.work}")
            return True
        return False

    def _failed(self, opts: tuple[Opt, ...], e: Exception) -> None:
        if DEBUG >= 3:
            print(f"beam: {self.name} {opts} failed: {type(e).__name__}: {e}")

    def run(self, opts: tuple[Opt, ...], runner: CompiledRunner | None) -> tuple[float, dict[int, np.ndarray]] | None:
        """(best time, outputs) of the compiled candidate, or None when there is none or it fails to run. The checked
        run is cold (page faults, threads starting): a candidate whose next run takes ABANDON times the best so far
        keeps that run's time, as no contender."""
        if runner is None:
            return None
        for buf, values in zip(self.bufs, self.initial, strict=True):  # outputs may be read too (in-place kernels)
            buf.copyin(values.data.cast("B"))
        runner(self.bufs, self.var_vals, wait=True)
        outputs = {s: self.bufs[s].numpy().copy() for s in runner.p.outs}
        if (warm := runner(self.bufs, self.var_vals, wait=True) or 0.0) > ABANDON * self.best():
            return warm, outputs
        return time_runner(runner, self.bufs, self.var_vals), outputs

    def duel(self, first: tuple[Opt, ...], second: tuple[Opt, ...]) -> tuple[float, float]:
        """Both candidates' best times, timed in turns (DUEL_TURNS each): on shared cores a candidate timed while
        other work ran looks slower than one timed a second later (a 2 ms kernel ran 1 to 9 ms on a loaded host)."""
        runners = self.compile([first, second])  # from the compile cache: both compiled before
        first_runner, second_runner = runners[first], runners[second]
        if first_runner is None or second_runner is None:  # not expected (both ran before): keep the search's times
            return self.timed[first] or math.nan, self.timed[second] or math.nan
        first_times, second_times = [], []
        for _ in range(DUEL_TURNS):
            first_times.append(time_runner(first_runner, self.bufs, self.var_vals))
            second_times.append(time_runner(second_runner, self.bufs, self.var_vals))
        return min(first_times), min(second_times)

    def best(self) -> float:
        return min((t for t in self.timed.values() if t is not None), default=math.inf)

    def ranked(self, candidates: list[tuple[Opt, ...]]) -> list[tuple[float, tuple[Opt, ...]]]:
        """The candidates that ran right before the deadline, fastest first. They compile a chunk at a time (a few per
        compiler process), so a search stops within one chunk's compiles and runs of its budget."""
        new = [opts for opts in candidates if opts not in self.timed]
        chunk = COMPILE_CHUNK * max(2, os.cpu_count() or 1)
        for i in range(0, len(new), chunk):
            if time.perf_counter() >= self.deadline:  # out of budget: the rest stay untimed (not dropped for good)
                self.capped = True
                break
            runners = self.compile(new[i : i + chunk])
            for opts, runner in runners.items():
                if time.perf_counter() >= self.deadline:
                    self.capped = True
                    break
                ran = self.run(opts, runner)
                good = ran is not None and all(_close(ran[1][s], x, self.scale) for s, x in self.expected.items())
                self.timed[opts] = ran[0] if ran is not None and good else None
        timed = [(self.timed.get(opts), opts) for opts in candidates]
        return sorted(((t, opts) for t, opts in timed if t is not None), key=lambda x: x[0])


def _tolerance_scale(nodes: Iterable[UOp]) -> float:
    """How far two summation orders of the kernel's longest reduce may drift apart, relative to one of 1024 terms:
    a rounding error per term, random in sign, grows as the square root of their number (16M floats: 128x)."""
    sizes = [math.prod(int(r.src[0].arg) for r in u.src[1:] if r.src[0].op is Ops.CONST) for u in nodes
             if u.op is Ops.REDUCE]  # fmt: skip
    return max(1.0, math.sqrt(max(sizes, default=1)) / 32)


def time_runner(runner: CompiledRunner, bufs: list[Buffer], var_vals: dict[str, int]) -> float:
    """Best of at least TIMING_RUNS runs, more for fast kernels (until MIN_TIMING_S in all): seconds."""
    times: list[float] = []
    while len(times) < TIMING_RUNS or (sum(times) < MIN_TIMING_S and len(times) < MAX_TIMING_RUNS):
        times.append(runner(bufs, var_vals, wait=True) or 0.0)
    return min(times)


def with_opts(ast: UOp, opts: tuple[Opt, ...], name: str) -> UOp:
    """The kernel AST with `opts` to apply and a fixed `name` (so candidates don't take new kernel names)."""
    info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
    return ast.replace(arg=dataclasses.replace(info, name=name, opts_to_apply=opts))


# *** the search ***


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One kernel's BEAM answer: the chosen opts and the heuristic's, both timed in the same search (seconds, nan when
    the heuristic's failed), how long the search took, how many opt lists it timed, whether the budget cut it short,
    and whether this answer came from the disk cache."""

    name: str
    width: int
    opts: tuple[Opt, ...]
    best_s: float
    heuristic: tuple[Opt, ...]
    heuristic_s: float
    search_s: float
    timed: int
    capped: bool
    cached: bool = False

    def to_json(self) -> JSONValue:
        fields: dict[str, JSONValue] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in ("opts", "heuristic"):
            fields[name] = [[o.op.name, o.axis, o.arg] for o in getattr(self, name)]
        fields["heuristic_s"] = None if math.isnan(self.heuristic_s) else self.heuristic_s
        del fields["cached"]
        return fields

    @staticmethod
    def from_json(hit: CacheValue | None) -> SearchResult | None:
        """The cached answer, or None for a missing or malformed entry (an older cache's plain opt list: searched
        again)."""
        if not isinstance(hit, dict) or (opts := _opts(hit.get("opts"))) is None:
            return None
        heuristic = _opts(hit.get("heuristic"))
        name, width, timed, capped = hit.get("name"), hit.get("width"), hit.get("timed"), hit.get("capped")
        times = [hit.get(k) for k in ("best_s", "heuristic_s", "search_s")]
        if heuristic is None or not isinstance(name, str) or not isinstance(width, int) or not isinstance(timed, int):
            return None
        if not isinstance(capped, bool) or not all(t is None or isinstance(t, (int, float)) for t in times):
            return None
        best_s, heuristic_s, search_s = (math.nan if t is None else float(t) for t in times)  # type: ignore[arg-type]
        return SearchResult(name, width, opts, best_s, heuristic, heuristic_s, search_s, timed, capped, cached=True)


def _opts(entry: JSONValue | None) -> tuple[Opt, ...] | None:
    """Opts from [op name, axis, arg] lists, or None when `entry` holds anything else."""
    if not isinstance(entry, list):
        return None
    ret = []
    for item in entry:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(op := item[0], str)):
            return None
        if op not in OptOps.__members__ or not (isinstance(item[1], int) and isinstance(item[2], int)):
            return None
        ret.append(Opt(OptOps[op], item[1], item[2]))
    return tuple(ret)


# every BEAM answer of this process, searched or from the disk cache, in order: the bench's per-kernel report
searches: list[SearchResult] = []


# the packages whose code decides a kernel's opts, its source and how it is compiled and launched
_CODEGEN_PACKAGES = ("codegen", "renderer", "uop", "runtime")


@functools.cache
def codegen_stamp() -> str:
    """A digest of the code generator's own sources: part of a search's cache key, so times recorded against other
    code (the heuristic's and every candidate's kernels change with it) are never reused as if they were current."""
    return sources_digest(Path(__file__).resolve().parent.parent)


def sources_digest(root: Path) -> str:
    """16 hex digits over the names and bytes of every .py file of _CODEGEN_PACKAGES under package folder `root`."""
    digest = hashlib.sha256()
    for path in sorted(p for package in _CODEGEN_PACKAGES for p in (root / package).rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _cache_key(ast: UOp, device: str, width: int) -> tuple[bytes, str, str, int, str]:
    return ast.key, device.split(":")[0], type(Device[device].renderer).__name__, width, codegen_stamp()


def _is_small(sink: UOp, renderer: Renderer) -> bool:
    """Does the unoptimised kernel do at most PLAIN_MAX_OPS ops (so it can be the reference)?"""
    with Context(NOOPT=1):
        ops = to_program(sink, renderer).estimates.ops
    return isinstance(ops, int) and ops <= PLAIN_MAX_OPS


def beam_search(ast: UOp, device: str, width: int) -> tuple[Opt, ...]:
    """The fastest opts found for kernel `ast` on `device` by a beam of `width` (from the disk cache if it has them)."""
    start = time.perf_counter()
    sink = simplify_indexing(ast)  # what full_rewrite applies the opts to
    renderer = Device[device].renderer  # the device's own heuristic starts the beam (GPUs: codegen/gpudims.py's)
    heuristic = choose_opts(sink, None, renderer)
    key = _cache_key(ast, device, width)
    hit = None if IGNORE_BEAM_CACHE.value else SearchResult.from_json(diskcache_get(BEAM_TABLE, key))
    if hit is not None and hit.heuristic == heuristic:  # a changed heuristic is a new start (and a new comparison)
        return _answer(hit)
    small = _is_small(ast, renderer)
    bench = Bench.of(ast, device, () if small else heuristic)
    beam = bench.ranked(dedup([(), heuristic] if small else [heuristic]))[:width]  # the starts: timed in any budget
    bench.deadline = start + BUDGET_S
    for round_ in range(MAX_ROUNDS):
        if not beam or time.perf_counter() >= bench.deadline:
            bench.capped |= bool(beam)
            break
        candidates = dedup(ext for _, opts in beam for ext in neighbours(sink, opts, renderer.has_local))
        ranked = bench.ranked(candidates)
        if DEBUG >= 2:
            _show_round(bench, round_, candidates, ranked, beam[0][0])
        if not ranked or ranked[0][0] >= beam[0][0] * MIN_GAIN:
            break
        beam = ranked[:width]
    best_s, best = beam[0] if beam else (math.nan, heuristic)
    heuristic_s = bench.timed.get(heuristic)
    if heuristic_s is not None and best != heuristic:  # timed apart, seconds or minutes apart: now side by side
        heuristic_s, best_s = bench.duel(heuristic, best)
        if best_s >= heuristic_s * MIN_GAIN:
            best, best_s = heuristic, heuristic_s
    result = SearchResult(bench.name, width, best, best_s, heuristic, math.nan if heuristic_s is None else heuristic_s,
                          time.perf_counter() - start, len(bench.timed), bench.capped)  # fmt: skip
    diskcache_put(BEAM_TABLE, key, result.to_json())
    return _answer(result)


Ranked = list[tuple[float, tuple[Opt, ...]]]  # (seconds, opts), fastest first


def _show_round(bench: Bench, round_: int, candidates: list[tuple[Opt, ...]], ranked: Ranked, best: float) -> None:
    dropped = sum(bench.timed.get(c, 0) is None for c in candidates)
    fastest = ranked[0][0] if ranked else math.nan
    print(f"beam {bench.name}: round {round_ + 1}, {len(candidates)} candidates ({dropped} dropped), "
          f"best {fastest * 1e6:.1f} us vs {best * 1e6:.1f} us")  # fmt: skip


def _answer(result: SearchResult) -> tuple[Opt, ...]:
    """Record `result` in `searches` and, with DEBUG=2, print it: the chosen opts beside the heuristic's."""
    searches.append(result)
    if DEBUG >= 2:
        how = "cached" if result.cached else f"searched in {result.search_s:.1f} s, {result.timed} kernels timed"
        cap = ", budget reached" if result.capped else ""
        print(f"beam {result.width} {result.name}: {result.opts} {result.best_s * 1e6:.1f} us ({how}{cap}); "
              f"heuristic {result.heuristic} {result.heuristic_s * 1e6:.1f} us")  # fmt: skip
    return result.opts


def _loads_an_address(ast: UOp) -> bool:
    """Whether some access's index depends on a loaded value (a gather): random inputs could point anywhere."""
    return any(u.op is Ops.INDEX and any(x.op is Ops.LOAD for x in u.src[1].toposort()) for u in ast.toposort())


def beam_ast(ast: UOp, device: str) -> UOp:
    """`ast` with BEAM-searched opts to apply, when BEAM is set, NOOPT is not, the kernel has no opts given already,
    its device runs kernels and it reads no addresses from memory (fresh random buffers can't run a gather safely);
    otherwise `ast` itself (the heuristic's opts apply as usual)."""
    given = isinstance(ast.arg, KernelInfo) and ast.arg.opts_to_apply is not None
    if BEAM.value < 1 or NOOPT.value or given or ast.op is not Ops.SINK or device.startswith(SKIPPED_DEVICES):
        return ast
    if _loads_an_address(ast):
        return ast
    return with_opts(ast, beam_search(ast, device, BEAM.value), get_kernel_name(ast))
