"""The PYTHON device, the executable spec: it interprets linear programs (docs/KERNEL_IR.md §2) one op at a time
with C semantics (`exec_alu`: integers wrap, division truncates, float32 rounds after every op), to check the C backend.

Its renderer serialises the program to JSON (`serialize_program`; never pickle, so a cached binary can't run code) and
`PythonProgram(dev, name, lib)` decodes and runs it on host memory.
"""

from __future__ import annotations

import functools
import json
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from fusegrad.device import Compiled, Compiler, MallocAllocator
from fusegrad.diskcache import JSONValue
from fusegrad.dtype import (
    DTYPES_DICT,
    AddrSpace,
    DType,
    Invalid,
    InvalidType,
    PtrDType,
    dtypes,
    float_to_bf16,
    float_to_fp8,
    fp8_to_float,
    storage_fmt_for_dtype,
    truncate,
)
from fusegrad.helpers import CRASH_REPORT, cpu_profile, report_kernel
from fusegrad.uop import AxisType, GroupOp, Ops
from fusegrad.uop.alu import exec_alu, float_to_int, python_alu

if TYPE_CHECKING:
    from fusegrad.renderer import Renderer
    from fusegrad.uop.ops import UOp

FORMAT = "fusegrad-linear/1"  # bump when the serialised form changes

# *** serialisation: a linear program <-> JSON of op names, dtype names, source positions and JSON-able args ***

_DTYPE_NAMES: dict[DType, str] = {dt: name for name, dt in DTYPES_DICT.items()} | {
    dtypes.void: "void",
    dtypes.index: "index",
}
_DTYPES_BY_NAME = {name: dt for dt, name in _DTYPE_NAMES.items()}
_ENUMS: dict[str, type[Enum]] = {"Ops": Ops, "AxisType": AxisType, "AddrSpace": AddrSpace}


def encode_dtype(dt: DType) -> JSONValue:
    """'float32'; ['vec', 'float32', 4]; ['ptr', <base>, 'GLOBAL', size, v] for pointers."""
    if isinstance(dt, PtrDType):
        return ["ptr", encode_dtype(dt.base), dt.addrspace.name, dt.size, dt.v]
    if dt.count > 1:
        return ["vec", encode_dtype(dt.scalar()), dt.count]
    if (name := _DTYPE_NAMES.get(dt)) is None:
        raise TypeError(f"serialize: unsupported dtype: got {dt!r}")
    return name


def decode_dtype(x: JSONValue) -> DType:
    match x:
        case str() if x in _DTYPES_BY_NAME:
            return _DTYPES_BY_NAME[x]
        case ["vec", scalar, int() as count]:
            return decode_dtype(scalar).vec(count)
        case ["ptr", base, str() as space, int() as size, int() as v] if space in AddrSpace.__members__:
            return decode_dtype(base).ptr(size, AddrSpace[space]).vec(v)
    raise ValueError(f"deserialize: not a dtype: got {x!r}")


def encode_arg(op: Ops, arg: object) -> JSONValue:
    """Scalars as themselves, tuples and the IR's enums tagged; SINK's KernelInfo (never read here) is dropped."""
    match arg:
        case None | bool() | int() | float() | str():
            return arg
        case tuple():
            return {"tuple": [encode_arg(op, x) for x in arg]}
        case Enum() if _ENUMS.get(type(arg).__name__) is type(arg):
            return {"enum": type(arg).__name__, "name": arg.name}
        case InvalidType():
            return {"invalid": True}
    if op is Ops.SINK:
        return None
    raise TypeError(f"serialize: {op} has an arg that can't be serialised: got {type(arg).__name__} {arg!r}")


def decode_arg(x: JSONValue) -> object:
    match x:
        case None | bool() | int() | float() | str():
            return x
        case {"tuple": list() as items}:
            return tuple(decode_arg(i) for i in items)
        case {"enum": str() as kind, "name": str() as name} if kind in _ENUMS and name in _ENUMS[kind].__members__:
            return _ENUMS[kind][name]
        case {"invalid": True}:
            return Invalid
    raise ValueError(f"deserialize: not an arg: got {x!r}")


def serialize_program(uops: Sequence[UOp]) -> str:
    """The linear program as JSON text, one op per line: [op name, dtype, [source positions], arg]."""
    position = {u: i for i, u in enumerate(uops)}
    lines = []
    for u in uops:
        if any(position.get(s, len(uops)) >= position[u] for s in u.src):
            raise ValueError(f"serialize: a source of {u.op} is missing or listed after it: expected a linear program")
        node = [u.op.name, encode_dtype(u.dtype), [position[s] for s in u.src], encode_arg(u.op, u.arg)]
        lines.append(json.dumps(node))
    return f'{{"format": "{FORMAT}", "uops": [\n' + ",\n".join(lines) + "\n]}\n"


@dataclass(frozen=True, slots=True)
class Instr:
    """One decoded op of a linear program; `src` holds positions of earlier instructions."""

    op: Ops
    dtype: DType
    src: tuple[int, ...]
    arg: Any  # Any: the op's arg (slot, constant, (axis, AxisType), ...)


def deserialize_program(lib: bytes) -> list[Instr]:
    """Raises ValueError for anything that isn't a serialised linear program of this format."""
    try:
        doc = json.loads(lib)
    except ValueError as err:  # bad UTF-8 or bad JSON, e.g. a pickle
        raise ValueError(f"deserialize: not a {FORMAT} program: {err}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("uops"), list):
        raise ValueError(f"deserialize: not a {FORMAT} program")
    instrs = []
    for i, node in enumerate(doc["uops"]):
        match node:
            case [str() as op, dtype, list() as src, arg] if op in Ops.__members__ and all(
                isinstance(s, int) and 0 <= s < i for s in src
            ):
                instrs.append(Instr(Ops[op], decode_dtype(dtype), tuple(src), decode_arg(arg)))
            case _:
                raise ValueError(f"deserialize: bad op at position {i}: {node!r}")
    return instrs


# *** values in memory ***


class _Codec:
    """One scalar dtype's stored form: struct packing, plus bit conversions for bfloat16 and fp8."""

    def __init__(self, dt: DType) -> None:
        if (fmt := storage_fmt_for_dtype(dt)) is None:
            raise TypeError(f"PYTHON: no storage format for {dt!r}")
        self.struct, self.dtype = struct.Struct("=" + fmt), dt
        self.size = self.struct.size

    def unpack_from(self, buf: memoryview | bytes, offset: int) -> Any:  # Any: a Python scalar of the dtype
        raw = self.struct.unpack_from(buf, offset)[0]
        if self.dtype == dtypes.bfloat16:
            return struct.unpack("=f", struct.pack("=I", raw << 16))[0]
        return fp8_to_float(raw, self.dtype) if self.dtype in dtypes.fp8s else raw

    def pack(self, value: Any) -> bytes:  # Any: a Python scalar of the dtype
        if self.dtype == dtypes.bfloat16:
            value = struct.unpack("=I", struct.pack("=f", float_to_bf16(value)))[0] >> 16
        elif self.dtype in dtypes.fp8s:
            value = float_to_fp8(value, self.dtype)
        return self.struct.pack(value)


@functools.cache
def _codec(dt: DType) -> _Codec:
    return _Codec(dt)


def _to_bytes(value: Any, dt: DType) -> bytes:
    lanes = value if dt.count > 1 else (value,)
    return b"".join(_codec(dt.scalar()).pack(x) for x in lanes)


def _from_bytes(data: bytes, dt: DType) -> Any:
    codec = _codec(dt.scalar())
    lanes = tuple(codec.unpack_from(data, i * codec.size) for i in range(dt.count))
    return lanes if dt.count > 1 else lanes[0]


def _zero(dt: DType) -> Any:
    scalar: Any = False if dt.scalar() == dtypes.bool else (0.0 if dtypes.is_float(dt) else 0)
    return (scalar,) * dt.count if dt.count > 1 else scalar


class _HostMemory:
    """A global buffer seen as elements of its dtype; every access is bounds-checked (a codegen bug is an error)."""

    def __init__(self, mv: memoryview, dt: DType, name: str) -> None:
        self.mv, self.dtype, self.name = mv, dt, name
        self.codec = _codec(dt.scalar())
        self.length = len(mv) // (self.codec.size * dt.count)

    def _span(self, i: int, count: int) -> tuple[slice, DType]:
        """The bytes of elements i..i+count-1, and their dtype (a vector for count > 1)."""
        if not (isinstance(i, int) and i >= 0 and i + count <= self.length):
            raise IndexError(f"PYTHON: out-of-bounds access {self.name}[{i}] (x{count}): it has {self.length} elements")
        size = self.codec.size * self.dtype.count
        return slice(i * size, (i + count) * size), self.dtype.vec(count) if count > 1 else self.dtype

    def load(self, i: int, count: int) -> Any:
        span, dt = self._span(i, count)
        return _from_bytes(bytes(self.mv[span]), dt)

    def store(self, i: int, value: Any, count: int) -> None:
        span, dt = self._span(i, count)
        self.mv[span] = _to_bytes(value, dt)


class _RegMemory:
    """A DEFINE_REG / DEFINE_LOCAL: a list of values, zero-initialised."""

    def __init__(self, size: int, dt: DType, name: str) -> None:
        self.cells, self.name = [_zero(dt)] * size, name

    def load(self, i: int, count: int) -> Any:
        if not 0 <= i <= len(self.cells) - count:
            raise IndexError(f"PYTHON: out-of-bounds access {self.name}[{i}]: it has {len(self.cells)} elements")
        return self.cells[i] if count == 1 else tuple(self.cells[i : i + count])

    def store(self, i: int, value: Any, count: int) -> None:
        if not 0 <= i <= len(self.cells) - count:
            raise IndexError(f"PYTHON: out-of-bounds access {self.name}[{i}]: it has {len(self.cells)} elements")
        self.cells[i : i + count] = list(value) if count > 1 else [value]


@dataclass(frozen=True, slots=True)
class _Pointer:
    """What INDEX makes: memory, element index, and whether the access happens (gated accesses may not)."""

    memory: _HostMemory | _RegMemory
    index: int
    valid: bool


# *** C casts ***


def cast_value(x: Any, dt: DType) -> Any:
    """C's value conversion: an int wraps to its width; a float -> int is `float_to_int` (numpy's x86 results for
    NaN, inf and out-of-range values, which C leaves undefined)."""
    if dt.count > 1:
        return tuple(cast_value(v, dt.scalar()) for v in x)
    if dt == dtypes.bool:
        return bool(x)
    if dtypes.is_int(dt):
        if isinstance(x, float):
            return float_to_int(x, dt)
        return truncate[dt](int(x))
    return truncate.get(dt, float)(float(x))


def bitcast_value(x: Any, src: DType, dst: DType) -> Any:
    """Reinterpret the bytes (struct-packed, native order) of a value of src as dst."""
    data = _to_bytes(x, src)
    if len(data) != dst.itemsize * dst.count:
        raise TypeError(f"bitcast: size mismatch: {src!r} is {len(data)} bytes, {dst!r} is {dst.itemsize * dst.count}")
    return _from_bytes(data, dst)


# *** the interpreter: one handler per op, returning the next program counter ***


class _Run:
    """One execution: the value of every instruction, plus the range being skipped (an empty loop)."""

    def __init__(self, prg: PythonProgram, bufs: Sequence[memoryview], vals: Sequence[int]) -> None:
        self.prg, self.bufs, self.vals = prg, bufs, vals
        self.values: list[Any] = [None] * len(prg.instrs)
        self.skipping: int | None = None

    def arg(self, ins: Instr, i: int) -> Any:
        return self.values[ins.src[i]]


Handler = Callable[[_Run, int, Instr], int]


def _set(run: _Run, pc: int, value: Any) -> int:
    run.values[pc] = value
    return pc + 1


def _define_global(run: _Run, pc: int, ins: Instr) -> int:
    slot = int(ins.arg)
    position = run.prg.global_position[slot]  # buffers come in slot order, without slots the kernel doesn't use
    if position >= len(run.bufs):
        raise ValueError(f"PYTHON: {run.prg.name}: the kernel reads buffer slot {slot}: got {len(run.bufs)} buffers")
    return _set(run, pc, _HostMemory(run.bufs[position], ins.dtype.base, f"data{slot}"))


def _define_var(run: _Run, pc: int, ins: Instr) -> int:
    return _set(run, pc, run.vals[run.prg.var_slot[pc]])


def _define_reg(run: _Run, pc: int, ins: Instr) -> int:
    size = ins.dtype.size if isinstance(ins.dtype, PtrDType) and ins.dtype.size > 0 else 1
    return _set(run, pc, _RegMemory(size, ins.dtype.base, f"{ins.op.name.lower()}{ins.arg}"))


def _range(run: _Run, pc: int, ins: Instr) -> int:
    run.values[pc] = 0
    if run.arg(ins, 0) > 0:
        return pc + 1
    run.skipping = pc  # an empty loop: jump to its END, which closes it without a pass
    return run.prg.range_end[pc]


def _end(run: _Run, pc: int, ins: Instr) -> int:
    ranges = run.prg.end_ranges[pc]  # innermost first
    start = 0
    if run.skipping is not None:
        start, run.skipping = ranges.index(run.skipping) + 1, None
    for r in ranges[start:]:
        run.values[r] += 1
        if run.values[r] < run.values[run.prg.instrs[r].src[0]]:
            return r + 1
    return pc + 1


def _if(run: _Run, pc: int, ins: Instr) -> int:
    return pc + 1 if run.arg(ins, 0) else run.prg.if_end[pc]


def _index(run: _Run, pc: int, ins: Instr) -> int:
    target, idx = run.arg(ins, 0), run.arg(ins, 1) if len(ins.src) > 1 else 0
    # gated: a false `valid` operand or an Invalid index (WHERE(valid, idx, Invalid)) means no access happens
    valid = not isinstance(idx, InvalidType) and (len(ins.src) < 3 or bool(run.arg(ins, 2)))
    if isinstance(target, _Pointer):  # indexing a pointer offsets it
        valid = valid and target.valid
        return _set(run, pc, _Pointer(target.memory, target.index + int(idx) if valid else 0, valid))
    return _set(run, pc, _Pointer(target, int(idx) if valid else 0, valid))


def _load(run: _Run, pc: int, ins: Instr) -> int:
    ptr: _Pointer = run.arg(ins, 0)
    if ptr.valid:
        return _set(run, pc, ptr.memory.load(ptr.index, ins.dtype.count))
    return _set(run, pc, run.arg(ins, 1) if len(ins.src) > 1 else _zero(ins.dtype))


def _store(run: _Run, pc: int, ins: Instr) -> int:
    ptr: _Pointer = run.arg(ins, 0)
    if ptr.valid and (len(ins.src) < 3 or run.arg(ins, 2)):
        ptr.memory.store(ptr.index, run.arg(ins, 1), run.prg.instrs[ins.src[1]].dtype.count)
    return pc + 1


def _cast(run: _Run, pc: int, ins: Instr) -> int:
    if isinstance(ins.dtype, PtrDType):
        return _set(run, pc, run.arg(ins, 0))  # a pointer cast (to a vector pointer) keeps the address
    return _set(run, pc, cast_value(run.arg(ins, 0), ins.dtype))


def _gep(run: _Run, pc: int, ins: Instr) -> int:
    x, lanes = run.arg(ins, 0), ins.arg
    if not isinstance(x, tuple):
        return _set(run, pc, x)
    return _set(run, pc, x[lanes[0]] if len(lanes) == 1 else tuple(x[i] for i in lanes))


_HANDLERS: dict[Ops, Handler] = {
    Ops.DEFINE_GLOBAL: _define_global,
    Ops.DEFINE_VAR: _define_var,
    Ops.DEFINE_REG: _define_reg,
    Ops.DEFINE_LOCAL: _define_reg,
    Ops.CONST: lambda run, pc, ins: _set(run, pc, cast_value(ins.arg, ins.dtype)),  # float32 constants round
    Ops.VCONST: lambda run, pc, ins: _set(run, pc, tuple(ins.arg)),
    Ops.RANGE: _range,
    Ops.END: _end,
    Ops.IF: _if,
    Ops.INDEX: _index,
    Ops.LOAD: _load,
    Ops.STORE: _store,
    Ops.CAST: _cast,
    Ops.BITCAST: lambda run, pc, ins: _set(run, pc, bitcast_value(run.arg(ins, 0), run.prg.src_dtype(ins), ins.dtype)),
    Ops.VECTORIZE: lambda run, pc, ins: _set(run, pc, tuple(run.values[s] for s in ins.src)),
    Ops.GEP: _gep,
    Ops.AFTER: lambda run, pc, ins: _set(run, pc, run.arg(ins, 0)),
    **{op: lambda run, pc, ins: pc + 1 for op in (Ops.SINK, Ops.NOOP, Ops.BARRIER, Ops.ENDIF, Ops.GROUP)},
    **{op: lambda run, pc, ins: _set(run, pc, exec_alu(ins.op, ins.dtype, [run.values[s] for s in ins.src]))
       for op in GroupOp.ALU if op in python_alu},
}  # fmt: skip


class PythonProgram:
    """A deserialised linear program; `prg(*buffers, vals=(...), wait=True) -> seconds` interprets it."""

    def __init__(self, dev: Compiled, name: str, lib: bytes) -> None:
        self.dev, self.name, self.device = dev, name, dev.device
        self.instrs = deserialize_program(lib)
        self.src: str | None = lib.decode()  # CRASH_REPORT prints it before the first run
        if unknown := sorted({ins.op.name for ins in self.instrs if ins.op not in _HANDLERS}):
            raise NotImplementedError(f"PYTHON: {name}: can't interpret {', '.join(unknown)}")
        self.handlers = [_HANDLERS[ins.op] for ins in self.instrs]
        # DEFINE_VARs take `vals` in program order (KERNEL_IR.md: by name, the order of ProgramSpec.vars)
        self.var_slot = {i: k for k, i in enumerate(i for i, ins in enumerate(self.instrs) if ins.op is Ops.DEFINE_VAR)}
        slots = sorted({int(ins.arg) for ins in self.instrs if ins.op is Ops.DEFINE_GLOBAL})
        self.global_position = {slot: k for k, slot in enumerate(slots)}
        self.end_ranges, self.range_end, self.if_end = self._match_blocks()

    def _match_blocks(self) -> tuple[dict[int, list[int]], dict[int, int], dict[int, int]]:
        end_ranges: dict[int, list[int]] = {}
        for i, ins in enumerate(self.instrs):
            if ins.op is Ops.END:
                end_ranges[i] = sorted((s for s in ins.src if self.instrs[s].op is Ops.RANGE), reverse=True)
        range_end = {r: i for i, ranges in end_ranges.items() for r in ranges}
        if_end = {ins.src[0]: i for i, ins in enumerate(self.instrs) if ins.op is Ops.ENDIF}
        for i, ins in enumerate(self.instrs):
            if (ins.op is Ops.RANGE and i not in range_end) or (ins.op is Ops.IF and i not in if_end):
                raise ValueError(f"PYTHON: {self.name}: the {ins.op.name} at position {i} is never closed")
        return end_ranges, range_end, if_end

    def src_dtype(self, ins: Instr) -> DType:
        return self.instrs[ins.src[0]].dtype

    def __call__(
        self,
        *bufs: memoryview,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        if len(vals) != len(self.var_slot):
            raise ValueError(f"PYTHON: {self.name}: got {len(vals)} variable values, expected {len(self.var_slot)}")
        if CRASH_REPORT:
            report_kernel(self.name, self.src)
            self.src = None
        with cpu_profile(self.name, self.device):
            start = time.perf_counter()
            run, pc, instrs, handlers = _Run(self, bufs, vals), 0, self.instrs, self.handlers
            while pc < len(instrs):
                pc = handlers[pc](run, pc, instrs[pc])
            elapsed = time.perf_counter() - start
        return elapsed if wait else None


def _python_renderer() -> Renderer:
    # renderers import codegen, which loads after the runtime: the class is made on first render
    from fusegrad.renderer import Renderer

    class PythonRenderer(Renderer):
        """Renders a linear program as serialize_program's JSON; loops stay loops (no local/global launch dims)."""

        device = "PYTHON"
        has_local = False
        has_shared = False
        supports_float4 = False
        global_max = None
        local_max = None

        def has_fma(self) -> bool:
            """As the CPU device fuses (exec_alu's MULACC is exact), so the two agree bit for bit on every host."""
            from fusegrad.renderer.cstyle import host_has_fma

            return host_has_fma()

        def render(self, uops: list[UOp]) -> str:
            return serialize_program(uops)

    return PythonRenderer()


class PythonDevice(Compiled):
    def __init__(self, device: str) -> None:
        # Compiler(): the "binary" is the JSON text itself
        super().__init__(device, MallocAllocator(self), _python_renderer, Compiler(), PythonProgram)
