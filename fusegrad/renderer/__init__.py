"""Stage 7 of the pipeline: a linear program (list of UOps) -> source text. `Renderer` is the base every dialect
extends; `ProgramSpec` is what the runtime compiles and runs (docs/KERNEL_IR.md §3), with its cost `Estimates`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fusegrad.dtype import AddrSpace, PtrDType, dtypes
from fusegrad.helpers import to_function_name
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, sint, ssimplify, sym_infer


class Renderer:
    """What a device's code generator can do, and `render`, which turns a linear program into its source.

    Subclasses override the class attributes; codegen reads them (e.g. `extra_matcher`, a rule table applied to the
    kernel before linearizing, for ops this dialect has no spelling for).
    """

    device: ClassVar[str] = ""
    suffix: ClassVar[str] = ""  # file suffix of the rendered source, for caches and DEBUG dumps
    has_local: ClassVar[bool] = False
    has_shared: ClassVar[bool] = False
    supports_float4: ClassVar[bool] = False
    global_max: ClassVar[tuple[int, ...] | None] = None
    local_max: ClassVar[tuple[int, ...] | None] = None
    shared_max: ClassVar[int] = 0
    extra_matcher: ClassVar[PatternMatcher | None] = None
    code_for_op: ClassVar[dict[Ops, Callable[..., str]]] = {}

    def has_fma(self) -> bool:
        """Whether float32/float64 MULACC renders as one fused multiply-add (a single rounding) that runs at full
        speed here: codegen/fma.py then fuses each accumulator's `acc + a*b` into MULACC(a, b, acc)."""
        return False

    def render(self, uops: list[UOp]) -> str:
        """The source of the kernel `uops` (a linear program ending with its SINK)."""
        raise NotImplementedError(f"{type(self).__name__}: render is not implemented")


def _mul(x: sint, y: sint) -> sint:
    if isinstance(x, int) and isinstance(y, int):
        return x * y
    return UOp.const(dtypes.index, x) * y if isinstance(x, int) else x * y


def _add(x: sint, y: sint) -> sint:
    if isinstance(x, int) and isinstance(y, int):
        return x + y
    return UOp.const(dtypes.index, x) + y if isinstance(x, int) else x + y


def base_buffer(buf: UOp) -> UOp:
    """The buffer a node addresses, through its pending writes (AFTERs)."""
    while buf.op is Ops.AFTER:
        buf = buf.src[0]
    return buf


def trip_multiple(end: UOp) -> int:
    """A number the loop end `end` is always a multiple of: a constant end itself; a clipped loop's end (codegen/clip.py
    ends one at `chunks * granule`) its granule; else 1."""
    if end.op is Ops.CONST:
        return int(end.arg)
    if end.op is Ops.MUL and end.src[1].op is Ops.CONST:
        return int(end.src[1].arg)
    return 1


def _trip_count(rng: UOp) -> sint:
    end = rng.src[0]
    if end.op is Ops.CONST:
        return int(end.arg)
    if any(u.op in (Ops.RANGE, Ops.SPECIAL) for u in end.toposort()):
        return int(end.vmax)  # a loop clipped per step of an outer one (codegen/clip.py): counted at its longest
    return _as_index(end)


def _as_index(x: UOp) -> UOp:
    """A loop end lowered to int32/int64 (codegen/index_dtype.py) typed `dtypes.index` again: estimates are in terms of
    the kernel's variables as the scheduler made them, whatever width the kernel computes them at."""
    if x.dtype == dtypes.index:
        return x
    return x.replace(dtype=dtypes.index, src=tuple(_as_index(s) for s in x.src))


@dataclass(frozen=True, slots=True)
class Estimates:
    """Cost of one kernel run: `ops` ALU ops (index arithmetic excluded), `lds` bytes moved by every global load and
    store, `mem` bytes of global memory touched (each buffer once). Symbolic sizes give symbolic estimates."""

    ops: sint = 0
    lds: sint = 0
    mem: sint = 0

    def __add__(self, other: Estimates) -> Estimates:
        return Estimates(_add(self.ops, other.ops), _add(self.lds, other.lds), _add(self.mem, other.mem))

    def simplify(self) -> Estimates:
        return Estimates(ssimplify(self.ops), ssimplify(self.lds), ssimplify(self.mem))

    @staticmethod
    def from_uops(uops: Sequence[UOp]) -> Estimates:
        """Walk the program once, multiplying each op by the trip counts of the loops around it and by its vector lanes,
        so the counts do not depend on the vector width a host gets. Address arithmetic
        (index dtype) and the gates of gated loads and stores are not counted as ops, as in the reference."""
        ops: sint = 0
        lds: sint = 0
        touched: dict[UOp, sint] = {}  # DEFINE_GLOBAL -> bytes accessed
        threads: sint = 1  # GPU launch indexes (SPECIAL): every thread runs the whole program
        for u in uops:
            if u.op is Ops.SPECIAL:
                threads = _mul(threads, _trip_count(u))
        trips: list[sint] = [threads]
        gating = {g for u in uops if u.op is Ops.INDEX and len(u.src) > 2 for g in u.src[2].toposort()}
        indexing = index_arithmetic(uops)
        for u in uops:
            if u.op is Ops.RANGE:
                trips.append(_mul(trips[-1], _trip_count(u)))
            elif u.op is Ops.END:
                trips.pop()
            elif u.op in GroupOp.ALU and u not in indexing and u not in gating:
                flops = u.dtype.count * (2 if u.op is Ops.MULACC else 1)  # a vector op is one op per lane
                ops = _add(ops, _mul(trips[-1], flops))  # a fused multiply-add is the mul and the add it replaces
            elif (buf := _global_accessed(u)) is not None:
                lanes = (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count
                nbytes = _mul(trips[-1], buf.dtype.base.itemsize * lanes)
                lds = _add(lds, nbytes)
                touched[buf] = _add(touched.get(buf, 0), nbytes)
        mem: sint = 0
        for buf, nbytes in touched.items():
            size = buf.dtype.size if isinstance(buf.dtype, PtrDType) else -1
            whole = size * buf.dtype.base.itemsize
            mem = _add(mem, nbytes if size < 0 or (isinstance(nbytes, int) and nbytes < whole) else whole)
        return Estimates(ops, lds, mem).simplify()


def index_arithmetic(uops: Sequence[UOp]) -> set[UOp]:
    """The nodes of a linear program that compute indexes (loop counters, variables, ALU ops): those typed
    `dtypes.index` and, once codegen lowered them to int32/int64 (codegen/index_dtype.py), those in that role.
    Every index value derives from a loop counter, a variable or a launch index without passing through a CAST (data
    leaves index math through a CAST, and stays counted), or is part of an address; a CAST into an address is where
    data enters index math."""
    ret: set[UOp] = set()
    for u in uops:  # forward: from loop counters and variables through integer ALU ops
        if u.op in (Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR) or u.dtype.scalar() == dtypes.index:
            ret.add(u)
        elif u.op in GroupOp.ALU and u.op is not Ops.CAST and dtypes.is_int(u.dtype):
            values = [s for s in (u.src[1:] if u.op is Ops.WHERE else u.src) if s.op is not Ops.CONST]
            if values and all(s in ret for s in values):
                ret.add(u)
    stack = [s for u in uops if u.op is Ops.INDEX for s in u.src[1:2]] + [u.src[0] for u in uops if u.op is Ops.RANGE]
    while stack:  # backward: everything an address (or a loop end) is computed from, down to the CASTs into it
        if (x := stack.pop()).op in GroupOp.ALU and x not in ret and dtypes.is_int(x.dtype):
            ret.add(x)
            if x.op is not Ops.CAST:
                stack.extend(x.src)
    return ret


def _global_accessed(u: UOp) -> UOp | None:
    """The DEFINE_GLOBAL a LOAD or STORE reads or writes, if it is one."""
    if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX:
        return None
    buf = u.src[0].src[0]
    is_global = isinstance(buf.dtype, PtrDType) and buf.dtype.addrspace is AddrSpace.GLOBAL
    return buf if buf.op is Ops.DEFINE_GLOBAL and is_global else None


@dataclass(frozen=True)
class ProgramSpec:
    """A rendered kernel: `src` for `device`, the program it came from, and what the runtime needs to launch it.

    `globals` are buffer slots in argument order, `outs`/`ins` the slots written/read, `vars` the DEFINE_VARs passed
    after the buffers. `global_size`/`local_size` are launch dimensions (None on devices without them, like CPU).
    """

    name: str
    src: str
    device: str
    ast: UOp
    uops: list[UOp]
    global_size: list[sint] | None = None  # symbolic where a launch dimension depends on a variable
    local_size: list[sint] | None = None
    vars: list[UOp] = field(default_factory=list)
    globals: list[int] = field(default_factory=list)
    outs: list[int] = field(default_factory=list)
    ins: list[int] = field(default_factory=list)
    estimates: Estimates = field(default_factory=Estimates)

    @property
    def function_name(self) -> str:
        return to_function_name(self.name)

    @staticmethod
    def from_uops(name: str, src: str, device: str, ast: UOp, uops: list[UOp]) -> ProgramSpec:
        """A ProgramSpec whose buffers, variables and estimates are read off the linear program."""
        outs = sorted({int(b.arg) for u in uops if u.op is Ops.STORE and (b := _global_accessed(u)) is not None})
        ins = sorted({int(b.arg) for u in uops if u.op is Ops.LOAD and (b := _global_accessed(u)) is not None})
        return ProgramSpec(name, src, device, ast, uops,
                           vars=[u for u in uops if u.op is Ops.DEFINE_VAR],
                           globals=sorted(int(u.arg) for u in uops if u.op is Ops.DEFINE_GLOBAL),
                           outs=outs, ins=ins, estimates=Estimates.from_uops(uops))  # fmt: skip

    def launch_dims(self, var_vals: dict[str, int]) -> tuple[list[int], list[int]]:
        """(global, local) sizes with every variable filled in; [1, 1, 1] where the device has none."""
        global_size = [sym_infer(s, var_vals) for s in self.global_size] if self.global_size is not None else [1, 1, 1]
        local_size = [sym_infer(s, var_vals) for s in self.local_size] if self.local_size is not None else [1, 1, 1]
        return global_size, local_size
