"""Stage 9: run a schedule. `ExecItem.lower()` picks a runner for a kernel AST (a compiled program, a copy or a view);
`ExecItem.run()` executes it, records profile events and updates GlobalCounters; `run_schedule` runs a list of them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fusegrad.device import Buffer, Compiled, Compiler, Device, MallocAllocator, Program
from fusegrad.helpers import (
    BEAM,
    CAPTURING,
    CRASH_REPORT,
    DEBUG,
    NOOPT,
    PARALLEL_COMPILE,
    PROFILE,
    RUNNER_CACHE_SIZE,
    STREAM_STORES,
    TRACEMETA,
    TRACK_MATCH_STATS,
    Context,
    ContextVar,
    GlobalCounters,
    Metadata,
    ProfilePointEvent,
    TracingKey,
    ansilen,
    colored,
    cpu_events,
    cpu_profile,
    time_to_str,
)
from fusegrad.uop.ops import Ops, UOp, sint, sym_infer, track_rewrites
from fusegrad.uop.symbolic_shape import check_bind

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from fusegrad.renderer import Estimates, ProgramSpec, Renderer


def _program_trace_key(ast: UOp, renderer: Renderer, ret: ProgramSpec) -> TracingKey:
    return TracingKey(ret.name, (ret.function_name, ast), ret)


@track_rewrites(name=_program_trace_key)
def get_program(ast: UOp, renderer: Renderer) -> ProgramSpec:
    """Kernel AST -> ProgramSpec (codegen, then render); VIZ shows it as one group named after the kernel."""
    from fusegrad.codegen import to_program  # codegen imports the engine's neighbours: import on use

    return to_program(ast, renderer)


# *** runners: what an ExecItem runs ***


class Runner:
    """A runnable step: its name, device, and op/memory estimates for GlobalCounters and DEBUG=2 lines."""

    def __init__(self, display_name: str, device: str, estimates: Estimates) -> None:
        self.first_run, self.display_name, self.device, self.estimates = True, display_name, device, estimates

    @property
    def dev(self) -> Compiled:
        return Device[self.device]

    @property
    def inputs(self) -> list[int]:
        """Buffer slots read (for profile events); copies and views read slot 1."""
        return [1]

    @property
    def outputs(self) -> list[int]:
        return [0]

    def exec(self, rawbufs: list[Buffer], var_vals: dict[str, int] | None = None) -> float | None:
        return self(rawbufs, {} if var_vals is None else var_vals)

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        raise NotImplementedError(f"{type(self).__name__}: __call__ is not implemented")

    def direct_launch(self, bufs: Sequence[Buffer | None], inputs: dict[int, int]) -> DirectLaunch | None:
        """This runner as a bare call for TinyJit's replay (`DirectLaunch`), with the buffers of `bufs` fixed except
        the slots in `inputs` ({slot: index in a call's flat input list}, filled per call); None when it has no such
        form (the default: the replay calls the runner)."""
        return None


@dataclass(frozen=True, slots=True)
class DirectLaunch:
    """A runner reduced to `fxn(*args)` for TinyJit's replay: before each call, `target[pos] = addresses[k]` for
    every (pos, k) in `subs`, where `addresses` are the call's flat input buffers' addresses (`target` is `args`
    itself, or a table the call reads). Nothing else runs between a replay's kernels."""

    fxn: Callable[..., object]
    args: list[object]
    target: Any  # a list (`args` itself), or a ctypes array the call reads: set by index
    subs: tuple[tuple[int, int], ...]
    address: Callable[[Buffer], Any]  # a Buffer (an input of the call) -> what `target` holds for it


def _launch_dims(sizes: Sequence[sint] | None, var_vals: dict[str, int]) -> tuple[int, ...] | None:
    return None if sizes is None else tuple(sym_infer(s, var_vals) for s in sizes)


class CompiledRunner(Runner):
    """A kernel compiled (through the device's compile cache) and loaded: `runner(bufs, var_vals, wait)`."""

    def __init__(self, p: ProgramSpec, precompiled: bytes | None = None, prg: Program | None = None) -> None:
        if DEBUG >= 3:
            print(p.ast)
        if DEBUG >= 4:
            print(p.src)
        self._program = p
        # every flag's value now: codegen reads flags (NOOPT, DEVECTORIZE, ...), and `p` renders a dropped linear
        # program again under the ones this kernel was rendered with
        self._flags = {name: flag.value for name, flag in ContextVar._cache.items()}
        self._uops_dropped = False
        if precompiled is not None:
            self.lib = precompiled
        else:
            with cpu_profile(TracingKey(f"compile {p.name}", (p.function_name,)), "TINY"):
                self.lib = Device[p.device].compiler.compile_cached(p.src)
        if DEBUG >= 7:
            Device[p.device].compiler.disassemble(self.lib)
        self._prg = Device[p.device].runtime(p.function_name, self.lib) if prg is None else prg
        # without variables the launch sizes are numbers: worked out once, not at every launch
        self._global_size = None if p.vars else _launch_dims(p.global_size, {})
        self._local_size = None if p.vars else _launch_dims(p.local_size, {})
        # the eager launch's bare C call, once the program hands it out (`_direct_call`); False: it never will
        self._direct: tuple[Callable[..., object], Callable[[Buffer], Any]] | bool | None = None
        super().__init__(p.name, p.device, p.estimates)

    def __reduce__(self) -> tuple[type[CompiledRunner], tuple[ProgramSpec, bytes], dict[str, object]]:
        # a dropped linear program stays dropped (rendering every kernel again to pickle it would cost seconds)
        return CompiledRunner, (self._program, self.lib), {"_flags": self._flags, "_uops_dropped": self._uops_dropped}

    @property
    def p(self) -> ProgramSpec:
        """The rendered kernel. After `drop_uops` its linear program (`p.uops`) is rendered again on the first read,
        from `p.ast` under the flags the kernel was first rendered with: codegen is deterministic, so the same
        nodes."""
        if self._uops_dropped:
            from fusegrad.codegen import to_program  # codegen imports the engine's neighbours: import on use

            changed = {
                k: v for k, v in self._flags.items() if k in ContextVar._cache and ContextVar._cache[k].value != v
            }
            with Context(**changed):
                uops = to_program(self._program.ast, Device[self._program.device].renderer).uops
            self._program, self._uops_dropped = dataclasses.replace(self._program, uops=uops), False
        return self._program

    def drop_uops(self) -> None:
        """Let go of the linear program (`p.uops`, ~35 nodes a kernel) while keeping the kernel: a hot schedule's
        runners do (engine/cache.py), since no launch reads it but every full garbage collection walks it and the
        hash-consing entries it keeps. `p` renders it again when asked. Kept while VIZ tracks rewrites."""
        if self._uops_dropped or TRACK_MATCH_STATS.value >= 2:
            return
        self._program, self._uops_dropped = dataclasses.replace(self._program, uops=[]), True

    def direct_launch(self, bufs: Sequence[Buffer | None], inputs: dict[int, int]) -> DirectLaunch | None:
        program = self._program
        direct = getattr(self._prg, "direct", None)  # a program that can hand out its bare function (CPU)
        if program.vars or direct is None or (found := direct(len(program.globals))) is None:
            return None
        fxn, address = found
        args: list[object] = []
        for slot in program.globals:
            if slot in inputs:
                args.append(None)
            elif (buf := bufs[slot]) is None:  # no memory and no input: the runner's own path reports it
                return None
            else:
                args.append(address(buf))
        subs = tuple((pos, inputs[slot]) for pos, slot in enumerate(program.globals) if slot in inputs)
        return DirectLaunch(fxn, args, args, subs, address)

    def _direct_call(self) -> tuple[Callable[..., object], Callable[[Buffer], Any]] | None:
        """The kernel's bare C function and how a Buffer gives its address, for the eager launch of a kernel without
        variables: the arguments are kept host addresses, not memoryviews converted at every call (CPU: 9-10 -> 4-5 us
        a launch). None when the program has none to give now; `_direct` is False for a device whose programs never
        do (no `direct`: PYTHON, NULL, the GPUs)."""
        if isinstance(self._direct, tuple):
            return self._direct
        if (direct := getattr(self._prg, "direct", None)) is None:
            self._direct = False
            return None
        found: tuple[Callable[..., object], Callable[[Buffer], Any]] | None = direct(len(self._program.globals))
        self._direct = found
        return found

    @property
    def program(self) -> ProgramSpec:
        """`p` as it is held (its `uops` empty once dropped): for readers of the launch fields (name, globals, vars)
        that need no linear program rendered again."""
        return self._program

    @property
    def inputs(self) -> list[int]:
        return list(self._program.ins)

    @property
    def outputs(self) -> list[int]:
        return list(self._program.outs)

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        program = self._program  # not `p`: a launch never needs the linear program
        if not program.vars:  # the eager launch path: nothing to check or work out
            # the bare call skips the program's profile events and CRASH_REPORT's line per run: not while those are on
            if (
                self._direct is not False
                and not PROFILE
                and not CRASH_REPORT
                and (direct := self._direct_call()) is not None
            ):
                fxn, address = direct
                args = [address(rawbufs[slot]) for slot in program.globals]
                if not wait:
                    fxn(*args)
                    return None
                start = time.perf_counter()
                fxn(*args)
                return time.perf_counter() - start
            bufs = [rawbufs[slot]._buf for slot in program.globals]
            return self._prg(*bufs, global_size=self._global_size, local_size=self._local_size, wait=wait)
        if missing := [v.expr for v in program.vars if v.expr not in var_vals]:
            raise ValueError(f"{program.name}: no value for variables {missing}: got values for {sorted(var_vals)}")
        for v in program.vars:  # the kernel was simplified for the variable's range: a value outside it is unsafe
            check_bind(v, var_vals[v.expr])
        vals = tuple(var_vals[v.expr] for v in program.vars)
        global_size, local_size = (
            _launch_dims(program.global_size, var_vals),
            _launch_dims(program.local_size, var_vals),
        )
        bufs = [rawbufs[slot]._buf for slot in program.globals]  # a slot whose loads folded away is not passed
        return self._prg(*bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)


class ViewOp(Runner):
    """A BUFFER_VIEW kernel: the output already is a view of the input's memory, so running only checks that."""

    def __init__(self, buf: Buffer) -> None:
        from fusegrad.renderer import Estimates

        super().__init__(colored(f"view {buf.nbytes:8d} @ {buf.offset:<10d}", "yellow"), buf.device, Estimates())

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        if rawbufs[0]._base is None or rawbufs[0]._base is not rawbufs[1].base:
            raise RuntimeError(f"view: output {rawbufs[0]!r} is not a view of input {rawbufs[1]!r}")
        return None


class BufferCopy(Runner):
    """A COPY kernel: bufs[1] -> bufs[0], directly where the destination is host memory, else through a host copy."""

    def __init__(self, total_sz: int, dest_device: str, src_device: str) -> None:
        from fusegrad.renderer import Estimates

        size = f"{total_sz / 1e6:7.2f}M" if total_sz >= 1e6 else f"{total_sz:8d}"
        name = f"copy {size}, {dest_device[:7]:>7s} <- {src_device[:7]:7s}"
        super().__init__(colored(name, "yellow"), dest_device, Estimates(lds=total_sz, mem=total_sz))

    def copy(self, dest: Buffer, src: Buffer) -> None:
        if dest.device.startswith("NULL") or src.device.startswith("NULL"):
            return  # NULL stores nothing: the copy only records its event (and never stages NULL's size in host memory)
        # the source writes straight into host memory (CPU, PYTHON, NPY): one memcpy, or DISK reading its mmap into it.
        # DISK's own memory is not offered here: a write must go through copyin, which grows the file.
        if (host := dest.allocator._as_buffer(dest._buf)) is not None:
            src.copyout(host)
        else:
            dest.copyin(src.as_memoryview(allow_zero_copy=True))

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        dest, src = rawbufs[0], rawbufs[1]
        if dest.size != src.size or dest.dtype != src.dtype:
            raise ValueError(f"copy: buffer mismatch: {dest.size} x {dest.dtype} <- {src.size} x {src.dtype}")
        start = time.perf_counter()
        with cpu_profile(f"{src.device} -> {dest.device}", dest.device, is_copy=True):
            self.copy(dest, src)
        if not wait:
            return None
        Device[dest.device].synchronize()
        return time.perf_counter() - start


class BufferXfer(BufferCopy):
    """A COPY between two devices of one type whose memory the host sees (CPU -> CPU:1): one direct memory move,
    without staging through a third buffer."""

    def __init__(self, total_sz: int, dest_device: str, src_device: str) -> None:
        super().__init__(total_sz, dest_device, src_device)
        self.display_name = self.display_name.replace("copy", "xfer", 1)

    @staticmethod
    def can_transfer(dest: Buffer, src: Buffer) -> bool:
        """Same device type, different devices, both in host memory (decided without allocating either)."""
        if dest.device == src.device or dest.device.split(":")[0] != src.device.split(":")[0]:
            return False
        return isinstance(dest.allocator, MallocAllocator) and isinstance(src.allocator, MallocAllocator)

    def copy(self, dest: Buffer, src: Buffer) -> None:
        dest_memory, src_memory = dest.allocator._as_buffer(dest._buf), src.allocator._as_buffer(src._buf)
        assert dest_memory is not None, "xfer: lowered for a destination the host cannot see"
        assert src_memory is not None, "xfer: lowered for a source the host cannot see"
        dest_memory[: dest.nbytes] = src_memory[: src.nbytes]


RunnerKey = tuple[str, type[Compiler], bytes, tuple[int, ...], bool]


class RunnerCache(dict[RunnerKey, CompiledRunner]):
    """A dict that keeps the RUNNER_CACHE_SIZE most recently used entries: `get` and setting an entry make it the
    newest, and setting one past the bound drops the oldest. A dropped runner's kernel unloads once nothing else
    (a TinyJit capture, a graph, the schedule cache) holds it; get_runner builds it again from the disk compile
    cache. Without the bound every kernel a long process ever ran stays mapped until dlopen runs out of mappings."""

    def get(self, key: RunnerKey, default: CompiledRunner | None = None) -> CompiledRunner | None:  # type: ignore[override]
        if (runner := self.pop(key, None)) is None:
            return default
        super().__setitem__(key, runner)  # re-inserted: dicts keep insertion order, so the end is the newest
        return runner

    def __setitem__(self, key: RunnerKey, runner: CompiledRunner) -> None:
        self.pop(key, None)
        super().__setitem__(key, runner)
        while len(self) > max(1, RUNNER_CACHE_SIZE.value):
            del self[next(iter(self))]


# kernels compiled and loaded (the RUNNER_CACHE_SIZE most recently used), by (device, compiler type, ast key,
# (BEAM, NOOPT), is-base-device entry)
method_cache: dict[RunnerKey, CompiledRunner] = RunnerCache()


def get_runner(device: str, ast: UOp) -> CompiledRunner:
    """The CompiledRunner for a kernel AST on device, compiling it once; `CPU:1` reuses the binary of `CPU`."""
    context = _codegen_flags()
    compiler = type(Device[device].compiler)
    key = (device, compiler, ast.key, context, False)
    if (cached := method_cache.get(key)) is not None:
        return cached
    base_key = (device.split(":")[0], compiler, ast.key, context, True)
    if (base := method_cache.get(base_key)) is not None and base.device == device:
        runner = base  # the base device itself: its runner, not a second load of the same binary
    elif base is not None:
        runner = CompiledRunner(dataclasses.replace(base.p, device=device), base.lib)
    else:
        program = get_program(_with_beam_opts(ast, device), Device[device].renderer)
        runner = method_cache[base_key] = CompiledRunner(dataclasses.replace(program, device=device))
    method_cache[key] = runner
    return runner


COMPILE_BATCH_MAX = 16  # kernels one compiler run builds at most (more batches than compilers keeps them all busy)


def _base_runner_key(device: str, ast: UOp) -> RunnerKey:
    """get_runner's key of the binary that every device of this type shares."""
    return (device.split(":")[0], type(Device[device].compiler), ast.key, _codegen_flags(), True)


def _codegen_flags() -> tuple[int, ...]:
    """The flags that change a kernel's binary for one AST: a runner compiled under others is not this one."""
    return (BEAM.value, NOOPT.value, STREAM_STORES.value)


class _CompileBatches:
    """Groups rendered kernels into batches (one compiler type, distinct function names, at most `size`: one binary
    can't hold two kernels of one name) and hands each full batch to a thread pool."""

    def __init__(self, pool: ThreadPoolExecutor, size: int) -> None:
        self.pool, self.size = pool, size
        self.batch: list[tuple[RunnerKey, ProgramSpec]] = []
        self.jobs: list[tuple[list[tuple[RunnerKey, ProgramSpec]], Future[list[bytes]]]] = []

    def add(self, key: RunnerKey, program: ProgramSpec) -> None:
        if self.batch and not self._fits(program):
            self.flush()
        self.batch.append((key, program))
        if len(self.batch) >= self.size:
            self.flush()

    def _fits(self, program: ProgramSpec) -> bool:
        compiler = type(Device[self.batch[0][1].device].compiler)
        if type(Device[program.device].compiler) is not compiler:
            return False
        return all(p.function_name != program.function_name for _, p in self.batch)

    def flush(self) -> None:
        if self.batch:
            compile_many = Device[self.batch[0][1].device].compiler.compile_cached_many
            self.jobs.append((self.batch, self.pool.submit(compile_many, [p.src for _, p in self.batch])))
            self.batch = []

    def results(self) -> Iterator[tuple[RunnerKey, ProgramSpec, bytes]]:
        self.flush()
        for batch, libs in self.jobs:
            for (key, program), lib in zip(batch, libs.result(), strict=True):
                yield key, program, lib


def compile_ahead(schedule: list[ExecItem]) -> None:
    """Compile the schedule's kernels that have no runner yet before running any: kernels render on this thread
    (Python) while a thread pool drives the compiler on batches already rendered, several compiler processes at once,
    each building its batch in one run where the compiler can (Compiler.compile_cached_many; the disk cache is asked
    first). Runs for two new kernels or more, not under BEAM (its search compiles each candidate)."""
    if len(schedule) < 2 or PARALLEL_COMPILE.value == 1 or BEAM.value >= 1:
        return
    pending: dict[RunnerKey, tuple[str, UOp]] = {}
    for ei in schedule:
        if ei.prg is not None or ei.ast.op is not Ops.SINK or not ei.bufs or (first := ei.bufs[0]) is None:
            continue
        if (key := _base_runner_key(first.device, ei.ast)) not in method_cache:
            pending.setdefault(key, (first.device, ei.ast))
    if len(pending) < 2:
        return
    from concurrent.futures import ThreadPoolExecutor  # with its logging import, ~10 ms: only when compiling

    workers = min(PARALLEL_COMPILE.value or max(2, os.cpu_count() or 1), len(pending))
    span = f"compile {len(pending)} kernels, {workers} compilers at once"
    with ThreadPoolExecutor(workers, thread_name_prefix="fusegrad-cc") as pool, cpu_profile(span, "TINY"):
        batches = _CompileBatches(pool, min(COMPILE_BATCH_MAX, -(-len(pending) // workers)))
        for key, (device, ast) in pending.items():
            batches.add(key, dataclasses.replace(get_program(ast, Device[device].renderer), device=device))
        for key, program, lib in batches.results():  # get_runner finds these under the base key
            method_cache[key] = CompiledRunner(program, lib)


def _with_beam_opts(ast: UOp, device: str) -> UOp:
    """With BEAM set, the AST with the opts a timed search picked on `device` (codegen/search.py)."""
    if BEAM.value < 1:
        return ast
    from fusegrad.codegen.search import beam_ast  # the search imports this module: import on use

    return beam_ast(ast, device)


def lower_ast(ast: UOp, bufs: list[Buffer]) -> Runner:
    """SINK -> compiled kernel, COPY -> BufferXfer between host-visible devices of one type else BufferCopy,
    BUFFER_VIEW -> ViewOp."""
    match ast.op:
        case Ops.SINK:
            return get_runner(bufs[0].device, ast)
        case Ops.COPY:
            runner = BufferXfer if BufferXfer.can_transfer(bufs[0], bufs[1]) else BufferCopy
            return runner(bufs[0].nbytes, bufs[0].device, bufs[1].device)
        case Ops.BUFFER_VIEW:
            return ViewOp(bufs[0])
    raise ValueError(f"lower: can't run a {ast.op} kernel: expected SINK, COPY or BUFFER_VIEW")


# *** ExecItem ***


@dataclass
class ExecItem:
    """One scheduled step: a kernel AST and its buffers (slot order, outputs first); `lower()` then `run()`."""

    ast: UOp
    bufs: list[Buffer | None] = field(default_factory=list)
    metadata: tuple[Metadata, ...] | None = None
    fixedvars: dict[str, int] = field(default_factory=dict)
    prg: Runner | None = None
    # called once run_schedule has run this item: Tensor.schedule sets it on the last item so that the tensors whose
    # kernels ran read their buffers (a kernel run from a returned schedule is not scheduled again)
    settle: Callable[[], None] | None = None

    def _buffers(self) -> list[Buffer]:
        if missing := [i for i, b in enumerate(self.bufs) if b is None]:
            raise ValueError(f"ExecItem: buffer slots {missing} are None: every buffer must exist before running")
        return [b for b in self.bufs if b is not None]

    def lower(self) -> ExecItem:
        """Pick the runner (compiling the kernel on first use); a no-op once lowered."""
        if self.prg is None:
            try:
                self.prg = lower_ast(self.ast, self._buffers())
            except Exception:
                if DEBUG >= 2:
                    print(f"error lowering {self.ast.op}; tensor operations: {self.metadata}")
                raise
        return self

    def run(
        self,
        var_vals: dict[str, int] | None = None,
        wait: bool = False,
        jit: bool = False,
        do_update_stats: bool = True,
    ) -> float | None:
        """Run (allocating buffers as needed); returns seconds when timed (wait, or DEBUG>=2), else None."""
        prg = self.lower().prg
        assert prg is not None, "ExecItem.run: lower() left no runner"
        var_vals = self.fixedvars if var_vals is None else var_vals | self.fixedvars
        bufs = self._buffers()
        if not jit:
            for b in bufs:
                b.ensure_allocated()
        if PROFILE:
            payload = {"metadata": self.metadata, "var_vals": var_vals, "bufs": [b.trace_num for b in bufs],
                       "inputs": prg.inputs, "outputs": prg.outputs}  # fmt: skip
            cpu_events.append(ProfilePointEvent(prg.device, "exec", prg.display_name, payload))
        elapsed = prg(bufs, var_vals, wait=wait or DEBUG >= 2)
        if do_update_stats:
            self._update_stats(prg, bufs, var_vals, elapsed, jit)
        return elapsed

    def _update_stats(
        self, prg: Runner, bufs: list[Buffer], var_vals: dict[str, int], et: float | None, jit: bool
    ) -> None:
        ops, mem = count_run(prg, var_vals, et)
        if DEBUG >= 2:
            lds = sym_infer(prg.estimates.lds, var_vals)
            header = colored(f"*** {prg.device[:7]:7s} {GlobalCounters.kernel_count:4d}", _header_color(prg, jit))
            shown = prg.display_name + _var_values(prg, var_vals)  # a symbolic kernel says which sizes this run has
            name = shown + " " * (46 - ansilen(shown))
            metadata = [repr(m) if TRACEMETA >= 2 else str(m) for m in self.metadata] if self.metadata else ""
            line = f"{header} {name} arg {len(bufs):2d} mem {GlobalCounters.mem_used / 1e9:6.2f} GB"
            print(f"{line}{_timing(et, ops, mem, lds)} {metadata}")
        prg.first_run = False


def count_run(prg: Runner, var_vals: dict[str, int], et: float | None) -> tuple[int, int]:
    """Count one run of `prg` in GlobalCounters; returns its (ops, memory bytes). The caller then clears
    `prg.first_run` (DEBUG=2's line colours a first run)."""
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += (ops := sym_infer(prg.estimates.ops, var_vals))
    GlobalCounters.global_mem += (mem := sym_infer(prg.estimates.mem, var_vals))
    if et is not None:
        GlobalCounters.time_sum_s += et
    return ops, mem


def _var_values(prg: Runner, var_vals: dict[str, int]) -> str:
    """' i=3 j=4' for the variables a compiled program takes (empty for other runners and variable-free kernels)."""
    if not isinstance(prg, CompiledRunner) or not prg.program.vars:
        return ""
    return " " + " ".join(f"{v.expr}={var_vals[v.expr]}" for v in prg.program.vars)


def _header_color(prg: Runner, jit: bool) -> str | None:
    if jit:
        return "magenta"
    return "green" if prg.first_run else None


def _timing(et: float | None, ops: int, mem: int, lds: int) -> str:
    """' tm <time>/<total> (<GFLOPS> <GB/s>)' for a DEBUG=2 line."""
    if et is None:
        return ""
    seconds = et or 1e-20
    speed = f"{ops / seconds * 1e-9:7.0f} GFLOPS {mem / seconds * 1e-9:4.0f}|{lds / seconds * 1e-9:<6.0f} GB/s"
    shown = colored(time_to_str(et, w=9), "yellow" if et > 0.01 else None)
    return f" tm {shown}/{GlobalCounters.time_sum_s * 1e3:9.2f}ms ({speed})"


# *** schedules ***


class Capturer(Protocol):
    """What TinyJit puts in `capturing`: it is shown every ExecItem run while it captures."""

    def add(self, ei: ExecItem) -> None: ...


capturing: list[Capturer] = []  # mutated in place, never rebound: TinyJit appends itself while capturing


def lower_schedule(schedule: list[ExecItem]) -> Iterator[tuple[ExecItem, ExecItem]]:
    """Pop each item off `schedule` and yield it with its lowered form, (item, item with its runner): the scheduled
    step and what runs it are one ExecItem here, so both are the same object, lowered."""
    while schedule:
        ei = schedule.pop(0)
        yield ei, ei.lower()


def run_schedule(
    schedule: list[ExecItem], var_vals: dict[str, int] | None = None, do_update_stats: bool = True
) -> None:
    """Lower and run every item in order, popping each off `schedule` (so its buffers can be freed as it goes).
    Afterwards the tensors whose kernels ran read their buffers (see ExecItem.settle)."""
    settles: list[Callable[[], None]] = []
    compile_ahead(schedule)
    while schedule:
        ei = schedule.pop(0).lower()
        if capturing and CAPTURING:
            capturing[0].add(ei)
        ei.run(var_vals, do_update_stats=do_update_stats)
        if ei.settle is not None:
            settles.append(ei.settle)
    for settle in settles:
        settle()


# *** eager replays through device graphs ***


def batch_for_graph(items: list[ExecItem], bufs: list[Buffer]) -> list[ExecItem]:
    """`items` (lowered, each buffer one of `bufs`) with every run of consecutive kernels a device graph supports
    grouped into one graph item (engine/graph.py). Every buffer is an input of the graph, so a later call runs it on
    other buffers of the same layout: `item.prg(new_bufs, {})`. The schedule cache replays hot schedules this way."""
    from fusegrad.engine.graph import apply_graph_to_jit  # graph.py builds on this module: import on use

    return apply_graph_to_jit(items, bufs, {})


def run_graph(runner: Runner, bufs: list[Buffer], kernels: int, do_update_stats: bool = True) -> None:
    """One call of a graph item from `batch_for_graph` on `bufs` (allocated), counted as its `kernels` kernels."""
    elapsed = runner(bufs, {}, wait=DEBUG >= 2)
    if do_update_stats:
        GlobalCounters.kernel_count += kernels
        GlobalCounters.global_ops += sym_infer(runner.estimates.ops, {})
        GlobalCounters.global_mem += sym_infer(runner.estimates.mem, {})
        if elapsed is not None:
            GlobalCounters.time_sum_s += elapsed
    runner.first_run = False
