"""C-family source from a linear program: `CStyleLanguage` maps each op to its text through the rule table
`string_rewrite`; dialects (`ClangRenderer` here, CUDA and OpenCL later) override class attributes and rules.

Entry point: `renderer.render(uops)`; the calling convention is docs/KERNEL_IR.md §4.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, cast

from fusegrad.dtype import FP8_FORMATS, AddrSpace, ConstType, DType, PtrDType, dtypes, fp8_to_float, truncate
from fusegrad.helpers import cpu_flags, strip_parens, to_function_name
from fusegrad.renderer import Renderer, base_buffer, index_arithmetic, trip_multiple
from fusegrad.renderer.stream import StreamPlan, plan_streams, render_stream_helpers
from fusegrad.uop import REDUCE_AXES, AxisType, GroupOp, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat
from fusegrad.uop.symbolic import split_uop

# *** per-kernel render state ***

# names of the values an op defines, by prefix; anything else is an "alu"
_PREFIXES = {Ops.LOAD: "val", Ops.CAST: "cast", Ops.BITCAST: "cast"}
# ops that always render as an expression at their use: constants, addresses and aliases
_ALWAYS_INLINE = frozenset({Ops.CONST, Ops.INDEX, Ops.AFTER})
_STATEMENTS = frozenset({Ops.STORE, Ops.DEFINE_REG, Ops.DEFINE_LOCAL, Ops.BARRIER, Ops.RANGE, Ops.END})
# nodes named before their rule runs: arguments, loop counters and arrays (the rule declares them by that name)
_NAMED_FIRST = (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.RANGE, Ops.DEFINE_REG, Ops.DEFINE_LOCAL)


def _is_register(buf: UOp) -> bool:
    return isinstance(buf.dtype, PtrDType) and buf.dtype.addrspace is AddrSpace.REG


@dataclass
class RenderContext:
    """What the rules read: the dialect (`lang`), the text of every rendered node (`ctx[u]`), and its loop depth."""

    lang: CStyleLanguage
    uops: list[UOp]
    r: dict[UOp, str] = field(default_factory=dict)
    users: dict[UOp, list[UOp]] = field(default_factory=dict)
    depth: dict[UOp, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    wide: set[UOp] = field(default_factory=set)  # index math declared as lang.index_c_type
    loop: dict[UOp, UOp] = field(default_factory=dict)  # node -> the innermost loop it is in
    unrolled: set[UOp] = field(default_factory=set)  # loops under `GCC unroll`: scalar code per iteration, no gathers

    def __post_init__(self) -> None:
        if self.lang.index_c_type is not None:
            self.wide = index_arithmetic(self.uops)
        level, open_loops = 0, list[UOp]()
        for u in self.uops:
            if u.op is Ops.END:
                level -= 1
                open_loops.pop()
            self.depth[u] = level
            if open_loops:
                self.loop[u] = open_loops[-1]
            if u.op is Ops.RANGE:
                level += 1
                open_loops.append(u)
            for s in u.src:
                self.users.setdefault(s, []).append(u)

    def __getitem__(self, u: UOp) -> str:
        return self.r[u]

    def type_of(self, u: UOp) -> str:
        """The C type `u` is declared with."""
        return self.lang.index_c_type if u in self.wide and self.lang.index_c_type else self.lang.render_dtype(u.dtype)

    def fresh_name(self, prefix: str) -> str:
        n = self.counts[prefix] = self.counts.get(prefix, -1) + 1
        return f"{prefix}{n}"

    def name_of(self, u: UOp) -> str:
        """The C identifier a defining node introduces."""
        match u.op:
            case Ops.DEFINE_GLOBAL:
                return f"data{u.arg}"
            case Ops.DEFINE_VAR:
                return str(u.arg[0])
            case Ops.DEFINE_REG:
                return f"acc{u.arg}"
            case Ops.DEFINE_LOCAL:
                return f"temp{u.arg}"
            case Ops.SPECIAL:  # a GPU launch index: gidx0, lidx1, ...
                return str(u.arg)
            case Ops.RANGE:
                base = f"ridx{u.arg[0]}"  # two loops over the same axis id get a suffix
                return base if base not in self.r.values() else self.fresh_name(base + "_")
        return self.fresh_name(_PREFIXES.get(u.op, "alu"))

    def in_reduce(self, u: UOp) -> bool:
        """Whether the innermost loop around `u` is a reduce loop."""
        return (rng := self.loop.get(u)) is not None and rng.arg[1] in REDUCE_AXES

    def is_inline(self, u: UOp) -> bool:
        """Whether `u` is written into its user's text rather than a variable of its own.

        Register loads inline (the accumulator is read where it is used), but for a vector that several nodes use
        in a reduce loop (a packed panel's vector each row of a named tile multiplies: a variable, loaded ahead of the
        rows, codegen/linearize.py); other values inline only when used once in the same loop, so hoisted work stays
        hoisted, and not as a branch of ?:. Global loads get a variable.
        """
        if u.op in _ALWAYS_INLINE:
            return True
        if u.op is Ops.LOAD:
            shared = u.dtype.count > 1 and len(self.users.get(u, [])) > 1 and self.in_reduce(u)
            return _is_register(base_buffer(u.src[0].src[0])) and not shared
        users = self.users.get(u, [])
        if len(users) != 1 or self.depth[users[0]] != self.depth[u]:
            return False
        # a branch of ?: is computed only when taken: C compilers won't speculate float math into a vector select
        return not (users[0].op is Ops.MAX or (users[0].op is Ops.WHERE and users[0].src[0] is not u))


# *** rules: op -> C text ***


def render_index(ctx: RenderContext, x: UOp) -> str:
    """`buf[idx]`, an lvalue; a one-element register is just its name."""
    buf = base_buffer(x.src[0])
    if _is_register(buf) and cast(PtrDType, buf.dtype).size == 1:
        return ctx[x.src[0]]
    return f"{ctx[x.src[0]]}[{strip_parens(ctx[x.src[1]])}]"


def render_load(ctx: RenderContext, x: UOp, idx: UOp) -> str:
    """A gated load reads 0 where its INDEX's valid is false (C's ?: never touches the other branch). An emulated
    float's bits become its float value."""
    value = ctx[idx]
    if _holds_bits(ctx, idx, x.dtype):
        value = f"fg_load_{emulated_name(x.dtype.scalar())}({value})"
    elif len(idx.src) > 2 and _is_strided_gather(ctx, x, idx):
        value = f"{ctx[idx.src[0]]}[(int){ctx[idx.src[1]]}]"
    if len(idx.src) > 2:
        return f"({ctx[idx.src[2]]}?{value}:{ctx.lang.render_const(0, x.dtype)})"
    return value


def _is_strided_gather(ctx: RenderContext, x: UOp, idx: UOp) -> bool:
    """A gated load whose address steps by other than 0 or 1 along its innermost loop (a stride-2 conv's padded
    input), in a kernel whose index math fits int32 but is declared wider (lang.index_c_type). Its subscript is then
    cast to int: gcc 12 vectorises a gated load at an int index as a masked gather (masked-off lanes read nothing),
    but not at a 64-bit one (the loop stayed scalar: a ResNet stem's input panel 3x slower). A unit-stride gated load
    keeps its 64-bit subscript, which gcc vectorises as a masked vector load. In an unrolled upcast loop (a tile's
    rows, each a scalar load broadcast to a vector) there is no gather: an int subscript there costs a 32-bit add and a
    sign extension per load, not folded into the address (a conv weight gradient's 16 rows: 17.7 -> 12.6 ms)."""
    if ctx.lang.index_c_type is None or idx.src[1].dtype.scalar() != dtypes.int32 or (rng := ctx.loop.get(x)) is None:
        return False
    if rng in ctx.unrolled:
        return False
    step = 0
    for term in split_uop(idx.src[1], Ops.ADD):
        if term is rng:
            step += 1
        elif term.op is Ops.MUL and term.src[0] is rng and term.src[1].op is Ops.CONST:
            step += int(term.src[1].arg)
        elif rng in term.toposort():
            return True  # a computed index: a gather either way
    return step not in (0, 1)


def render_store(ctx: RenderContext, idx: UOp, value: UOp) -> str:
    text = ctx[value]
    if _holds_bits(ctx, idx, value.dtype):  # an emulated float's value -> its bits
        text = f"fg_store_{emulated_name(value.dtype.scalar())}({text})"
    store = f"{ctx[idx]} = {text};"
    return f"if ({strip_parens(ctx[idx.src[2]])}) {store}" if len(idx.src) > 2 else store


def render_range(ctx: RenderContext, x: UOp) -> str:
    name, index_type, end = ctx[x], ctx.type_of(x), ctx[x.src[0]]
    # an end binding looser than `<` (a clipped loop's `c ? 0 : 64`, codegen/clip.py) keeps its parentheses
    bound = end if any(op in end for op in "?&|^<>=") else strip_parens(end)
    return f"for ({index_type} {name} = 0; {name} < {bound}; {name}++) {{"


# C computes these in int: results of the ops that can leave their range are cast back (wrapped), as the IR defines
_PROMOTED_INTS = frozenset({dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint16})
_MAY_LEAVE_RANGE = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.IDIV, Ops.SHL, Ops.MULACC})


def _narrow(ctx: RenderContext, x: UOp, code: str) -> str:
    """`code` rounded back to x's dtype where C computed it wider: half math runs in float (excess precision), and
    8/16-bit ints in int (an inline `(a+b)<0` would otherwise see 200 where the IR has -56)."""
    scalar = x.dtype.scalar()
    if (scalar == dtypes.float16 and x.op not in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)) or (
        scalar in _PROMOTED_INTS and x.op in _MAY_LEAVE_RANGE
    ):
        return ctx.lang.render_cast_to(code, x.dtype)
    if scalar in ctx.lang.emulated_floats:  # computed in float: round to the emulated float after every op
        return f"fg_round_{emulated_name(scalar)}({code})"
    return code


def render_alu(ctx: RenderContext, x: UOp) -> str | None:
    if (fn := ctx.lang.code_for_op.get(x.op)) is None:
        return None
    return _narrow(ctx, x, fn(*[ctx[s] for s in x.src], x.dtype))


def render_add_negative(ctx: RenderContext, x: UOp, c: UOp, a: UOp) -> str | None:
    """x + (-c) as x - c (exact in IEEE and in wrapping ints), skipped where -c would overflow."""
    if c.dtype == dtypes.bool or not c.arg < 0 or (dtypes.is_int(c.dtype) and c.arg == dtypes.min(c.dtype)):
        return None
    return _narrow(ctx, a, f"({ctx[x]}-{ctx.lang.render_const(-c.arg, c.dtype)})")


def render_negate(ctx: RenderContext, x: UOp, m: UOp) -> str:
    return _narrow(ctx, m, f"(-{ctx[x]})")


def _int_min(dt: DType) -> int:
    return -(2**63) if dt.scalar() == dtypes.index else int(dtypes.min(dt))


def render_int_div(ctx: RenderContext, x: UOp) -> str | None:
    """x // y and x % y with the results alu.py defines where C has none: 0 for a zero divisor, INT_MIN // -1 wraps to
    INT_MIN (x86's idiv traps on both). Guarded only where y's bounds hold 0 (or -1 with an x that can be INT_MIN),
    so index math, whose divisors are positive constants, renders bare."""
    if not dtypes.is_int(x.dtype):
        return None
    a, b = x.src
    text = render_alu(ctx, x)
    wide = x.dtype.scalar() not in _PROMOTED_INTS  # 8/16-bit ints divide in int: INT8_MIN / -1 doesn't trap
    minus_one = wide and not dtypes.is_unsigned(x.dtype) and b.vmin <= -1 <= b.vmax and a.vmin <= _int_min(x.dtype)
    if minus_one:  # -x wraps (-fwrapv): INT_MIN // -1 is INT_MIN, and INT_MIN % -1 is 0
        text = f"(({ctx[b]}=={ctx.lang.render_const(-1, b.dtype)})?{_negated(ctx, x, a)}:{text})"
    if b.vmin <= 0 <= b.vmax:
        text = f"(({ctx[b]}==0)?{ctx.lang.render_const(0, x.dtype)}:{text})"
    return text


def _negated(ctx: RenderContext, x: UOp, a: UOp) -> str:
    return f"(-{ctx[a]})" if x.op is Ops.IDIV else ctx.lang.render_const(0, x.dtype)


def render_shift(ctx: RenderContext, x: UOp) -> str | None:
    """x << y and x >> y, with alu.py's results for a count outside [0, bits), which C leaves undefined: every bit
    shifted out (0, or -1 for a negative x shifted right). Guarded only where y's bounds leave that range."""
    a, b = x.src
    bits = min(x.dtype.scalar().bitsize, 64)
    if b.vmin >= 0 and b.vmax < bits:
        return None
    zero = ctx.lang.render_const(0, x.dtype)
    out = zero
    if x.op is Ops.SHR and not dtypes.is_unsigned(x.dtype) and a.vmin < 0:
        out = f"(({ctx[a]}<0)?{ctx.lang.render_const(-1, x.dtype)}:{zero})"
    in_range = f"({ctx[b]}<{bits})" if dtypes.is_unsigned(x.dtype) else f"({ctx[b]}>=0&&{ctx[b]}<{bits})"
    return f"({in_range}?{render_alu(ctx, x)}:{out})"


def render_mulacc(ctx: RenderContext, x: UOp) -> str | None:
    """MULACC(x, y, z) of floats: x*y + z rounded once, the dialect's fma (codegen/fma.py emits it for float32 and
    float64 only). Ints fall through to code_for_op's `((x*y)+z)`, wrapped like any int op."""
    if not dtypes.is_float(x.dtype):
        return None
    if x.dtype.scalar() not in (dtypes.float32, dtypes.float64):  # computed in float: fused, then rounded again
        raise NotImplementedError(f"{type(ctx.lang).__name__}: MULACC of {x.dtype} has no single-rounding spelling")
    a, b, c = (ctx[s] for s in x.src)
    return ctx.lang.render_fma(a, b, c, x.dtype)


def render_cast(ctx: RenderContext, x: UOp) -> str:
    """A value conversion; float -> int takes alu.float_to_int's results for NaN, inf and out-of-range values."""
    src = x.src[0]
    if x.dtype.scalar() in ctx.lang.emulated_floats:
        return f"fg_round_{emulated_name(x.dtype.scalar())}({ctx[src]})"
    if dtypes.is_int(x.dtype) and dtypes.is_float(src.dtype):
        if src.dtype.scalar() in ctx.lang.emulated_floats:  # held as float: bounds checked in float, not saturated
            src = src.replace(dtype=dtypes.float32)
        return ctx.lang.render_float_to_int(ctx[x.src[0]], src, x.dtype)
    return ctx.lang.render_cast_to(ctx[src], x.dtype)


_rules: list[tuple[UPat, Callable[..., str | None]]] = [
    (UPat(Ops.DEFINE_REG, name="x"), lambda ctx, x: ctx.lang.render_register(ctx[x], x.dtype)),
    (UPat(Ops.RANGE, name="x"), render_range),
    (UPat(Ops.END), lambda: "}"),
    (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.lang.render_const(x.arg, x.dtype)),
    (UPat(Ops.AFTER, name="x"), lambda ctx, x: ctx[x.src[0]]),  # the value once its deps ran: same storage
    (UPat(Ops.INDEX, name="x"), render_index),
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="idx"),), name="x"), render_load),
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat.var("value"))), render_store),
    (UPat(Ops.CAST, name="x"), render_cast),
    (UPat(Ops.BITCAST, name="x"), lambda ctx, x: ctx.lang.render_bitcast(ctx[x.src[0]], x.src[0].dtype, x.dtype)),
    (UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c", vec=False)), name="a"), render_add_negative),  # x+(-c) -> x-c
    (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, -1)), name="m"), render_negate),  # x*-1 -> -x
    (UPat(Ops.CMPNE, src=(UPat.var("x", dtypes.bool), UPat.const(dtypes.bool, True))), lambda ctx, x: f"(!{ctx[x]})"),
    (UPat((Ops.IDIV, Ops.MOD), name="x"), render_int_div),  # guarded where the divisor may be 0 or -1
    (UPat((Ops.SHL, Ops.SHR), name="x"), render_shift),  # guarded where the count may leave [0, bits)
    (UPat(Ops.MULACC, name="x"), render_mulacc),  # floats: fma(x, y, z)
    (UPat(GroupOp.ALU, name="x"), render_alu),
]
# the rules return C text, not UOps: PatternMatcher is typed for rewrites, but `rewrite` hands back whatever they return
base_rewrite = PatternMatcher(_rules)  # type: ignore[arg-type]


# *** the dialect ***


def _is_bool(dtype: DType) -> bool:
    return dtype.scalar() == dtypes.bool


def _max(x: str, y: str, dtype: DType) -> str:
    if dtypes.is_float(dtype):
        return f"((({x}>{y})|({x}!={x}))?{x}:{y})"  # a NaN on either side wins, like numpy's maximum
    return f"(({x}>{y})?{x}:{y})"


# *** floats C lacks (bfloat16, fp8): stored as their bits, held and computed in float, rounded after every op ***


def emulated_name(dt: DType) -> str:
    """The suffix of a stored-as-bits float's helpers: bf16, e4m3, e5m2, e4m3fnuz, e5m2fnuz."""
    return dt.name.removeprefix("float8_").strip("_")


def guarded(name: str, text: str) -> str:
    """`text` (C definitions) once per translation unit: the CPU compiler builds kernels joined into one source, and a
    second definition of a static function or table there is an error (the whole batch then compiles one by one)."""
    macro = f"FG_HAVE_{name.upper()}"
    return f"#ifndef {macro}\n#define {macro}\n{text}#endif\n"


def _bf16_helpers() -> str:
    """Round to nearest even on the top 16 bits of a float; a NaN keeps its sign and stays quiet."""
    return guarded(
        "bf16",
        "static inline float fg_load_bf16(unsigned short x) {\n"
        "  union { unsigned int u; float f; } v = { .u = (unsigned int)x << 16 }; return v.f; }\n"
        "static inline unsigned short fg_store_bf16(float x) {\n"
        "  union { float f; unsigned int u; } v = { .f = x };\n"
        "  if (x != x) return (unsigned short)((v.u >> 16) | 0x40u);\n"
        "  return (unsigned short)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16); }\n"
        "static inline float fg_round_bf16(float x) { return fg_load_bf16(fg_store_bf16(x)); }\n",
    )


def _fp8_helpers(dt: DType) -> str:
    """dtype.py's _round_fp8 and float_to_fp8 in C (rounding in double, as Python does); loads read a table of the 256
    values fp8_to_float gives, so both backends agree bit for bit."""
    fmt, name = FP8_FORMATS[dt], emulated_name(dt)
    values = ",".join(_c_float_literal(fp8_to_float(bits, dt)) for bits in range(256))
    min_normal, min_subnormal = 2.0 ** (1 - fmt.bias), 2.0 ** (1 - fmt.bias - fmt.mantissa_bits)
    zero = "0.0f" if fmt.fnuz else "(float)x"  # fnuz has no negative zero
    return guarded(
        name,
        f"static const float fg_{name}_values[256] = {{{values}}};\n"
        f"static inline float fg_load_{name}(unsigned char x) {{ return fg_{name}_values[x]; }}\n"
        f"static inline float fg_round_{name}(double x) {{\n"
        f"  if (x != x) return (float)x;\n  if (x == 0.0) return {zero};\n"
        "  double m = __builtin_fabs(x);\n  if (m != __builtin_inf()) {\n"
        f"    int e; __builtin_frexp(m, &e); e = e - 1 > {-fmt.bias + 1} ? e - 1 : {-fmt.bias + 1};\n"
        f"    double spacing = __builtin_ldexp(1.0, e - {fmt.mantissa_bits});\n"
        "    m = __builtin_rint(m / spacing) * spacing; }\n"
        f"  if (m > {fmt.max!r}) m = {fmt.max!r};\n"
        f"  return {'m == 0.0 ? 0.0f : ' if fmt.fnuz else ''}(float)__builtin_copysign(m, x); }}\n"
        f"static inline unsigned char fg_store_{name}(float x) {{\n"
        f"  float v = fg_round_{name}(x);\n  if (v != v) return {fmt.nan_bits:#x};\n"
        "  unsigned char sign = __builtin_signbit(v) ? 0x80 : 0; float m = __builtin_fabsf(v);\n"
        f"  if (m < {min_normal!r}f) return sign | (unsigned char)(m / {min_subnormal!r}f);\n"
        "  int e; __builtin_frexpf(m, &e);\n"
        f"  return sign | (unsigned char)(((e - 1 + {fmt.bias}) << {fmt.mantissa_bits})"
        f" | (int)((__builtin_ldexpf(m, 1 - e) - 1.0f) * {1 << fmt.mantissa_bits})); }}\n",
    )


def _c_float_literal(x: float) -> str:
    if math.isnan(x):
        return '__builtin_nanf("")'
    if math.isinf(x):
        return "__builtin_inff()" if x > 0 else "-__builtin_inff()"
    return f"{x!r}f"


def render_emulated_helpers(uops: list[UOp], lang: CStyleLanguage) -> str:
    """The load/store/round helpers of each stored-as-bits float the kernel uses (none for most kernels)."""
    used = {u.dtype.base.scalar() for u in uops} & set(lang.emulated_floats)
    return "".join(_bf16_helpers() if dt == dtypes.bfloat16 else _fp8_helpers(dt) for dt in sorted(used))


def _holds_bits(ctx: RenderContext, idx: UOp, dtype: DType) -> bool:
    """Whether an access through `idx` reads or writes an emulated float's bits (global memory; registers hold
    the float value)."""
    return dtype.scalar() in ctx.lang.emulated_floats and not _is_register(base_buffer(idx.src[0]))


class CStyleLanguage(Renderer):
    """The C family. Each dialect sets the spellings below; `render` lays out one function from a linear program."""

    preamble: ClassVar[str] = ""  # text before the kernel (includes, helpers)
    kernel_prefix: ClassVar[str] = ""  # before the return type, e.g. CUDA's `extern "C" __global__ `
    buffer_prefix: ClassVar[str] = ""  # before a buffer argument's element type, e.g. OpenCL's `__global `
    buffer_suffix: ClassVar[str] = ""  # after a buffer argument's `*`, e.g. C99's ` restrict`
    const_prefix: ClassVar[str] = "const "  # on buffers the kernel only reads
    arg_int_prefix: ClassVar[str] = "long long"  # type of a DEFINE_VAR argument
    index_c_type: ClassVar[str | None] = None  # C type of all index math whatever its IR width; None: the IR's
    infinity: ClassVar[str] = "INFINITY"
    nan: ClassVar[str] = "NAN"
    type_map: ClassVar[dict[DType, str]] = {dtypes.bool: "bool", dtypes.index: "long long"}
    unsupported_dtypes: ClassVar[frozenset[DType]] = frozenset()
    # floats the dialect lacks -> the C type their bits are stored as; values are held in float (see _bf16_helpers)
    emulated_floats: ClassVar[dict[DType, str]] = {}
    # ops x trips of an outer loop at which threads start to pay. A parallel region waits at its end for every thread:
    # a sleeping worker's wake-up costs tens of us on an idle machine and ms when the cores are oversubscribed, so a
    # kernel of ~1M ops (~50-300 us alone) is the least that can gain (1 << 16 put a ~10 us ONNX encoder's matmuls
    # in regions: replays 0.16 ms, 1 in 10 over 60 ms on the loaded 2-core machine)
    parallel_threshold: ClassVar[int] = 1 << 20
    # global bytes loaded and stored in an outer loop at which threads pay whatever its op count: a vector kernel's
    # ops count once per vector, so a memory-bound one (a conv weight gradient's sum of 8 per-image partials, 1.2 MB
    # read) never reached parallel_threshold: 15.6 us on one core, 7 us on two
    parallel_bytes: ClassVar[int] = 1 << 20
    inline_limit: ClassVar[int] = 160  # longer expressions get a variable: long chains stay readable and parse fast
    code_for_op: ClassVar[dict[Ops, Callable[..., str]]] = {
        Ops.SQRT: lambda x, dtype: f"sqrt({x})",
        Ops.EXP2: lambda x, dtype: f"exp2({x})",
        Ops.LOG2: lambda x, dtype: f"log2({x})",
        Ops.SIN: lambda x, dtype: f"sin({x})",
        Ops.TRUNC: lambda x, dtype: f"trunc({x})",
        Ops.RECIPROCAL: lambda x, dtype: f"(1/{x})",
        Ops.NEG: lambda x, dtype: f"(!{x})" if _is_bool(dtype) else f"(-{x})",
        Ops.ADD: lambda x, y, dtype: f"({x}|{y})" if _is_bool(dtype) else f"({x}+{y})",
        Ops.SUB: lambda x, y, dtype: f"({x}-{y})",
        Ops.MUL: lambda x, y, dtype: f"({x}&{y})" if _is_bool(dtype) else f"({x}*{y})",
        Ops.FDIV: lambda x, y, dtype: f"({x}/{y})",
        Ops.IDIV: lambda x, y, dtype: f"({x}/{y})",  # C division truncates toward zero, as the IR's IDIV
        Ops.MOD: lambda x, y, dtype: f"({x}%{y})",  # and the remainder takes the dividend's sign
        Ops.MAX: _max,
        Ops.CMPLT: lambda x, y, dtype: f"({x}<{y})",
        Ops.CMPNE: lambda x, y, dtype: f"({x}!={y})",
        Ops.CMPEQ: lambda x, y, dtype: f"({x}=={y})",
        Ops.AND: lambda x, y, dtype: f"({x}&{y})",
        Ops.OR: lambda x, y, dtype: f"({x}|{y})",
        Ops.XOR: lambda x, y, dtype: f"({x}^{y})",
        Ops.SHL: lambda x, y, dtype: f"({x}<<{y})",
        Ops.SHR: lambda x, y, dtype: f"({x}>>{y})",
        Ops.POW: lambda x, y, dtype: f"pow({x},{y})",
        Ops.WHERE: lambda c, x, y, dtype: f"({c}?{x}:{y})",
        Ops.MULACC: lambda x, y, z, dtype: f"(({x}*{y})+{z})",
    }
    string_rewrite: ClassVar[PatternMatcher] = base_rewrite

    # *** spellings ***

    def render_dtype(self, dt: DType) -> str:
        if dt.count > 1:
            raise NotImplementedError(f"{type(self).__name__}: vector dtype {dt} is not supported yet")
        if dt.scalar() in self.unsupported_dtypes:
            raise NotImplementedError(f"{type(self).__name__}: dtype {dt} is not supported yet")
        if dt.scalar() in self.emulated_floats:
            return "float"
        return self.type_map.get(dt, dt.name)

    def render_const(self, x: ConstType, dt: DType) -> str:
        """A C literal of `x` that reads back exactly as `dt`; negative values are parenthesized."""
        if dtypes.is_float(dt):
            return self.render_float(float(x), dt)
        if _is_bool(dt):
            return "1" if x else "0"
        return self.render_int(int(truncate.get(dt.scalar(), int)(int(x))), dt)  # wrapped, as PYTHON reads it

    def render_float(self, x: float, dt: DType) -> str:
        x = float(truncate.get(dt.scalar(), float)(x))  # the value the dtype holds: 1e39 as float32 is inf
        if math.isnan(x):
            return self.nan
        if math.isinf(x):
            return self.infinity if x > 0 else f"(-{self.infinity})"
        if dt == dtypes.float64:
            text = repr(abs(x))
        else:
            text = _shortest_float32(abs(x)) + "f"
            if dt != dtypes.float32 and dt.scalar() not in self.emulated_floats:
                text = f"(({self.render_dtype(dt)}){text})"
        return f"(-{text})" if math.copysign(1.0, x) < 0 else text

    def render_int(self, x: int, dt: DType) -> str:
        suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dt.scalar(), "")
        if dt == dtypes.index and not -(2**31) <= x < 2**31:
            suffix = "ll"
        if x < 0 and x == dtypes.min(dt) and dt.itemsize >= 4:  # -2147483648 would parse as -(a long)
            return f"({x + 1}{suffix}-1)"
        return f"({x}{suffix})" if x < 0 else f"{x}{suffix}"

    def render_float_to_int(self, x: str, src: UOp, dt: DType) -> str:
        """`x` (the text of float `src`) converted to int dtype `dt` as alu.float_to_int defines it."""
        target = self.render_dtype(dt)
        if dt.scalar() == dtypes.uint64:  # below 2**63 through int64; [2**63, 2**64) converts in C; 0 beyond
            two63, two64 = self.render_float(2.0**63, src.dtype), self.render_float(2.0**64, src.dtype)
            high = f"(({x}<{two64})?(({target})({x})):0)"
            return f"(({x}>={two63})?{high}:(({target})({self._truncate_or_min(x, src, 64)})))"
        bits = 64 if dt.scalar() in (dtypes.int64, dtypes.index, dtypes.uint32) else 32
        inner = self._truncate_or_min(x, src, bits)
        return inner if dt.scalar() in (dtypes.int32, dtypes.int64, dtypes.index) else f"(({target})({inner}))"

    def _truncate_or_min(self, x: str, src: UOp, bits: int) -> str:
        """x86's cvtt conversion in portable C: trunc(x) when it fits `bits`, else the int's minimum (NaN too).
        Bare where src's bounds fit (finite bounds come only from finite operands, so no NaN either)."""
        int_dt = dtypes.int64 if bits == 64 else dtypes.int32
        lo = -(2 ** (bits - 1))
        if lo <= src.vmin and src.vmax < -lo:
            return f"(({self.render_dtype(int_dt)})({x}))"
        low, high = self.render_float(float(lo), src.dtype), self.render_float(float(-lo), src.dtype)
        fits = f"({x}>={low}&&{x}<{high})"
        return f"({fits}?(({self.render_dtype(int_dt)})({x})):{self.render_int(lo, int_dt)})"

    def render_fma(self, x: str, y: str, z: str, dt: DType) -> str:
        """x*y + z with one rounding, of float32 or float64 `dt` (C99's fmaf / fma; OpenCL's fma is overloaded)."""
        if dt.count > 1:
            raise NotImplementedError(f"{type(self).__name__}: MULACC of vector dtype {dt} is not supported")
        return f"fma{_math_suffix(dt)}({x},{y},{z})"

    def render_cast_to(self, x: str, dt: DType) -> str:
        """`x` converted (and rounded) to `dt`."""
        return f"(({self.render_dtype(dt)})({x}))"

    def render_register(self, name: str, ptr: PtrDType) -> str:
        count = f"[{ptr.size}]" if ptr.size != 1 else ""
        return f"{self.render_dtype(ptr.base)} {name}{count};"

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        """The bits of `x` read as `dt`, through a union (the one type pun C99 defines)."""
        if src.itemsize != dt.itemsize:
            raise ValueError(f"bitcast: sizes differ: got {src} ({src.itemsize} bytes) to {dt} ({dt.itemsize} bytes)")
        if src.scalar() in self.emulated_floats:  # the value's bits, then read as dt
            x, src = f"fg_store_{emulated_name(src.scalar())}({x})", self._bits_dtype(src)
        if dt.scalar() in self.emulated_floats:
            return f"fg_load_{emulated_name(dt.scalar())}({self.render_bitcast(x, src, self._bits_dtype(dt))})"
        return f"((union {{ {self.render_dtype(src)} a; {self.render_dtype(dt)} b; }}){{ .a = {x} }}).b"

    def render_buffer(self, buf: UOp, name: str, written: bool) -> str:
        qualifier = "" if written else self.const_prefix
        element = self.emulated_floats.get(buf.dtype.base.scalar()) or self.render_dtype(buf.dtype.base)
        return f"{self.buffer_prefix}{qualifier}{element}*{self.buffer_suffix} {name}"

    @staticmethod
    def _bits_dtype(dt: DType) -> DType:
        """The unsigned int of an emulated float's size."""
        return dtypes.uint8 if dt.itemsize == 1 else dtypes.uint16

    def loop_pragmas(self, uops: list[UOp]) -> dict[UOp, str]:
        """Pragmas to put before some loops (RANGE -> text); none in plain C."""
        return {}

    def stream_plan(self, uops: list[UOp], pragmas: dict[UOp, str]) -> StreamPlan:
        """The loops whose stores are rendered as streaming stores (renderer/stream.py); none in plain C."""
        return StreamPlan()

    def render_kernel(self, function_name: str, args: list[str], body: list[str]) -> str:
        lines = [f"{self.kernel_prefix}void {function_name}({', '.join(args)}) {{", *body, "}"]
        return self.preamble + "\n".join(lines) + "\n"

    # *** layout ***

    def render(self, uops: list[UOp]) -> str:
        ctx = RenderContext(self, uops)
        pragmas = self.loop_pragmas(uops)
        ctx.unrolled = {rng for rng, pragma in pragmas.items() if pragma.startswith("#pragma GCC unroll")}
        streams = self.stream_plan(uops, pragmas)
        body: list[str] = []
        for u in uops:
            if u.op is Ops.SINK:
                continue
            if u.op in _NAMED_FIRST:
                ctx.r[u] = ctx.name_of(u)
                if u.op is Ops.DEFINE_VAR and u not in ctx.wide and u.dtype.itemsize < 8:  # passed as arg_int_prefix
                    ctx.r[u] = f"(({self.render_dtype(u.dtype)}){ctx.r[u]})"
                if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR):
                    continue
            indent = "  " * (ctx.depth[u] + 1)
            if streams and (streamed := _render_streamed(streams, u, ctx, pragmas, indent)) is not None:
                body += streamed
                continue
            text = cast("str | None", self.string_rewrite.rewrite(u, ctx=ctx))
            if text is None:
                raise NotImplementedError(f"{type(self).__name__}: no C spelling for {u.op} of {u.dtype}")
            if u in pragmas:
                body.append(f"{indent}{pragmas[u]}")
            if u.op in _STATEMENTS:
                body.append(indent + text)
            elif ctx.is_inline(u) and (u.op in _ALWAYS_INLINE or len(text) <= self.inline_limit):
                ctx.r[u] = text
            else:
                ctx.r[u] = ctx.name_of(u)
                body.append(f"{indent}{ctx.type_of(u)} {ctx[u]} = {text};")
        helpers = render_emulated_helpers(uops, self)
        return helpers + self.render_kernel(to_function_name(kernel_name(uops)), self.render_args(uops, ctx), body)

    def render_args(self, uops: list[UOp], ctx: RenderContext) -> list[str]:
        """Buffers in slot order (const where only read), then the variables (KERNEL_IR.md §4)."""
        written = {base_buffer(u.src[0].src[0]) for u in uops if u.op is Ops.STORE}
        globs = sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: int(u.arg))
        args = [self.render_buffer(u, ctx[u], u in written) for u in globs]
        return args + [f"{self.arg_int_prefix} {u.arg[0]}" for u in uops if u.op is Ops.DEFINE_VAR]


def _render_streamed(plan: StreamPlan, u: UOp, ctx: RenderContext, pragmas: dict[UOp, str],
                     indent: str) -> list[str] | None:  # fmt: skip
    """The lines of `u` where plan renders it (a streamed loop's start and end, a streamed store), else None."""
    if u in plan.loops:
        return plan.open_loop(u, ctx[u], ctx.type_of(u), pragmas[u], indent)
    if u.op is Ops.END and u.src[0] in plan.loops:
        return plan.close_loop(u.src[0], pragmas[u.src[0]], indent, ctx.__getitem__)
    if u in plan.lines:
        return [indent + plan.store(u, ctx[ctx.loop[u]], ctx[u.src[1]])]
    if u in plan.fenced:
        return plan.open_fenced(pragmas.get(u, ""), render_range(ctx, u), indent)
    if u.op is Ops.END and u.src[0] in plan.fenced:
        return plan.close_fenced(pragmas.get(u.src[0], ""), indent)
    if u in plan.vectors:
        return [indent + plan.vector_store(f"&{ctx[u.src[0]]}", ctx.lang.render_dtype(u.src[1].dtype), ctx[u.src[1]])]
    return None


def __getattr__(name: str) -> type[CStyleLanguage]:
    """The GPU dialects at the reference's path; they live in renderer/gpu.py, which imports this module."""
    if name in ("OpenCLRenderer", "CUDARenderer"):
        from fusegrad.renderer import gpu

        return getattr(gpu, name)  # type: ignore[no-any-return]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def kernel_name(uops: list[UOp]) -> str:
    """The name in the closing SINK's KernelInfo ("test" when there is none)."""
    if uops and uops[-1].op is Ops.SINK and isinstance(name := getattr(uops[-1].arg, "name", None), str):
        return name
    return "test"


def _shortest_float32(x: float) -> str:
    """The shortest decimal that reads back as the float32 nearest to `x` (always with a '.' or an exponent)."""
    bits = struct.pack("f", x)
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        if struct.pack("f", float(text)) == bits:
            break
    return text if "." in text or "e" in text else text + ".0"


@dataclass
class _LoopShapes:
    """What decides a loop's pragmas: work inside each outermost loop (ops x trip counts), the loops holding no other
    loop, the loops inside a reduce loop, and the loops that carry a value between iterations (an accumulator declared
    outside them)."""

    work: dict[UOp, int] = field(default_factory=dict)
    innermost: set[UOp] = field(default_factory=set)
    in_reduce: set[UOp] = field(default_factory=set)
    around_upcast: set[UOp] = field(default_factory=set)
    carrying: set[UOp] = field(default_factory=set)
    vector: set[UOp] = field(default_factory=set)  # loops whose own body holds vector values (codegen/vectorize.py)
    updates: dict[UOp, list[tuple[UOp, Ops]]] = field(default_factory=dict)  # loop -> (register, op) stored in it
    # outermost loops that write a kernel-wide register array element per iteration (opt.GROUP's partials), and the
    # work in each outermost loop counting a vector op's lanes
    partials: set[UOp] = field(default_factory=set)
    lane_work: dict[UOp, int] = field(default_factory=dict)
    traffic: dict[UOp, int] = field(default_factory=dict)  # global bytes loaded and stored in each outermost loop

    @staticmethod
    def of(uops: list[UOp]) -> _LoopShapes:
        ret = _LoopShapes()
        open_loops: list[UOp] = []
        declared_in: dict[UOp, int] = {}  # DEFINE_REG -> how many loops were open where it was declared
        trips = [1]
        for u in uops:
            if u.op is Ops.RANGE:
                ret.innermost.add(u)
                ret.innermost.difference_update(open_loops[-1:])
                if any(r.arg[1] in REDUCE_AXES for r in open_loops):
                    ret.in_reduce.add(u)
                if u.arg[1] is AxisType.UPCAST:
                    ret.around_upcast.update(open_loops)
                open_loops.append(u)
                trips.append(trips[-1] * max(int(u.src[0].vmax), 1))
            elif u.op is Ops.END:
                open_loops.pop()
                trips.pop()
            elif u.op is Ops.DEFINE_REG:
                declared_in[u] = len(open_loops)
            if u.op is Ops.STORE and (reg := base_buffer(u.src[0].src[0])) in declared_in:
                # a loop whose range picks the element stored (acc[j] in the j loop) writes a new one each iteration
                picked = u.src[0].src[1].toposort() if len(u.src[0].src) > 1 else {}
                ret.carrying.update(r for r in open_loops[declared_in[reg] :] if r not in picked)
                if declared_in[reg] == 0 and open_loops and open_loops[0] in picked:
                    ret.partials.add(open_loops[0])
                # an element per iteration (a row buffer filled by a reduce's loop, codegen/rowbuffer.py) is no update
                if open_loops and open_loops[-1] not in picked:
                    ret.updates.setdefault(open_loops[-1], []).append((reg, u.src[1].op))
            value = u.src[1] if u.op is Ops.STORE else u
            if open_loops and value.dtype.count > 1 and not isinstance(value.dtype, PtrDType):
                ret.vector.add(open_loops[-1])
            if open_loops and (u.op in GroupOp.ALU or u.op in (Ops.LOAD, Ops.STORE)):
                ret._count(u, value, open_loops[0], trips[-1])
        return ret

    def _count(self, u: UOp, value: UOp, outer: UOp, trips: int) -> None:
        """Add op `u` (its value `value`), run `trips` times in the outermost loop `outer`, to that loop's work."""
        self.work[outer] = self.work.get(outer, 0) + trips
        lanes = value.dtype.count if not isinstance(value.dtype, PtrDType) else 1
        self.lane_work[outer] = self.lane_work.get(outer, 0) + trips * lanes
        index = u.src[0]
        if (
            u.op in (Ops.LOAD, Ops.STORE)
            and index.op is Ops.INDEX
            and base_buffer(index.src[0]).op is Ops.DEFINE_GLOBAL
        ):
            self.traffic[outer] = self.traffic.get(outer, 0) + trips * lanes * value.dtype.scalar().itemsize


def _math_suffix(dtype: DType) -> str:
    return "" if dtype.scalar() == dtypes.float64 else "f"


# accumulator updates OpenMP can reorder for SIMD (MAX is left in order: our MAX propagates NaN, OpenMP's need not)
_SIMD_REDUCTIONS = {Ops.ADD: "+", Ops.MUL: "*", Ops.MULACC: "+"}  # acc = fma(x, y, acc) sums


def _is_simd_reducible(reg: UOp) -> bool:
    """OpenMP reductions take scalar arithmetic accumulators (not bool, not a vector type)."""
    return reg.dtype.base != dtypes.bool and reg.dtype.base.count == 1


# libm functions with SIMD variants in glibc's libmvec (AVX2/AVX-512), by C type
_SIMD_MATH = [("float", "exp2f"), ("float", "log2f"), ("float", "sinf"), ("double", "exp2"), ("double", "log2"),
              ("double", "sin")]  # fmt: skip


# *** C vector types (GCC/Clang vector extensions), for codegen/vectorize.py's vector values ***


def _vector_access(ctx: RenderContext, idx: UOp, vector: DType, qualifier: str) -> str:
    """The lvalue of a whole vector at a global buffer's element (an unaligned type: rows start anywhere)."""
    return f"(*({qualifier}{ctx.lang.render_dtype(vector)}_u*)&{ctx[idx]})"


def _is_vector_access(idx: UOp, value: UOp) -> bool:
    """A vector value read from or written to an array of scalars (not an accumulator array of vectors)."""
    return value.dtype.count > 1 and base_buffer(idx.src[0]).dtype.base.count == 1


def render_vector_load(ctx: RenderContext, x: UOp, idx: UOp) -> str | None:
    if not _is_vector_access(idx, x):
        return None
    return _vector_access(ctx, idx, x.dtype, "const ")


def render_vector_store(ctx: RenderContext, idx: UOp, value: UOp) -> str | None:
    if not _is_vector_access(idx, value):
        return None
    return f"{_vector_access(ctx, idx, value.dtype, '')} = {ctx[value]};"


def render_vector_typedefs(uops: list[UOp], lang: CStyleLanguage) -> str:
    """A register type (aligned) and a memory type (element-aligned, may alias its elements) per vector dtype used."""
    vectors = sorted({u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype for u in uops} - {dtypes.void})
    lines = []
    # lane masks (int lanes as wide as float32's): bool vectors, and the selects of vector max and where
    masks = {d.count for d in vectors if d.count > 1 and _is_bool(d)}
    masks |= {u.dtype.count for u in uops if u.op in (Ops.MAX, Ops.WHERE) and u.dtype.count > 1}
    lines += [f"typedef int fg_mask{n} __attribute__((vector_size({4 * n})));" for n in sorted(masks)]
    for dt in (d for d in vectors if d.count > 1 and not _is_bool(d)):
        scalar, name = lang.render_dtype(dt.scalar()), lang.render_dtype(dt)
        size, align = dt.itemsize, dt.scalar().itemsize
        lines.append(f"typedef {scalar} {name} __attribute__((vector_size({size})));")
        lines.append(f"typedef {scalar} {name}_u __attribute__((vector_size({size}), aligned({align}), may_alias));")
    return "".join(line + "\n" for line in lines)


def render_vectorize(ctx: RenderContext, x: UOp) -> str:
    literal = f"(({ctx.lang.render_dtype(x.dtype)}){{{','.join(ctx[s] for s in x.src)}}})"
    return f"(-{literal})" if _is_bool(x.dtype) else literal  # a lane mask is all bits set where true


def render_gep(ctx: RenderContext, x: UOp) -> str | None:
    """One lane of a vector: GCC's vector types take a subscript (a mask's lane is -1 where true: made a 0/1 bool)."""
    if len(x.arg) != 1:
        return None
    return f"({ctx[x.src[0]]}[{x.arg[0]}]!=0)" if _is_bool(x.dtype) else f"{ctx[x.src[0]]}[{x.arg[0]}]"


# *** lane masks (codegen/vectorize.py's SELECT_ALU): a float vector compare gives a vector of int, -1 where true ***


def mask_type(dt: DType) -> str:
    """The GCC vector of int holding a bool vector's lanes as masks (float32 lanes: vectorize makes no others)."""
    return f"fg_mask{dt.count}"


def _select(mask: str, x: str, y: str, dt: DType, lang: CStyleLanguage) -> str:
    """x where the mask's lane is set, else y: bitwise on the lanes' bits (GCC's C has no vector `?:`)."""
    m = mask_type(dt)
    return f"(({lang.render_dtype(dt)})((({m}){x}&{mask})|(({m}){y}&~{mask})))"


def render_vector_where(ctx: RenderContext, x: UOp, c: UOp) -> str | None:
    if x.dtype.count == 1:
        return None
    if c.dtype.count == 1:  # a scalar condition: C's `?:` picks a whole vector (of one type: a load is `_u`-typed)
        t = ctx.lang.render_dtype(x.dtype)
        return f"({ctx[c]}?(({t}){ctx[x.src[1]]}):(({t}){ctx[x.src[2]]}))"
    return _select(ctx[c], ctx[x.src[1]], ctx[x.src[2]], x.dtype, ctx.lang)


def render_vector_max(ctx: RenderContext, x: UOp) -> str | None:
    """The scalar form's order: x where x > y or x is NaN, else y."""
    if x.dtype.count == 1 or x.dtype.scalar() != dtypes.float32:  # masks of int lanes: float32 vectors only
        return None
    a, b = ctx[x.src[0]], ctx[x.src[1]]
    return _select(f"(({a}>{b})|({a}!={a}))", a, b, x.dtype, ctx.lang)


def render_vector_math(ctx: RenderContext, x: UOp) -> str | None:
    return f"fg_{x.op.name.lower()}_{ctx.lang.render_dtype(x.dtype)}({ctx[x.src[0]]})" if x.dtype.count > 1 else None


_MVEC_ISA = {32: "d", 64: "e"}  # the x86-64 vector function ABI's letter: AVX2 (32-byte), AVX-512 (64-byte) vectors


def render_vector_math_helpers(uops: list[UOp], lang: CStyleLanguage) -> str:
    """`fg_exp2_float16(v)` and the like for the vector math ops used: glibc's libmvec variant where it links
    (FUSEGRAD_MVEC) on x86-64 with the ISA the vector needs, else the scalar builtin lane by lane."""
    used = sorted({(u.op.name.lower(), u.dtype) for u in uops if u.op in _VECTOR_MATH and u.dtype.count > 1})
    out = []
    for fn, dt in used:
        name, scalar, libm = lang.render_dtype(dt), lang.render_dtype(dt.scalar()), f"{fn}{_math_suffix(dt)}"
        call = "fg_exp2f" if libm == "exp2f" else f"__builtin_{libm}"  # without libmvec: inline, vectorised by gcc
        lane = f"  for (int i = 0; i < {dt.count}; i++) v[i] = ({scalar}){call}(v[i]);"
        lines = [f"static inline {name} fg_{fn}_{name}({name} v) {{", lane, "  return v;", "}"]
        if (isa := _MVEC_ISA.get(dt.itemsize)) is not None:
            guard, vector_fn = "__AVX512F__" if isa == "e" else "__AVX2__", f"_ZGV{isa}N{dt.count}v_{libm}"
            mvec = [f"#if defined(FUSEGRAD_MVEC) && defined(__x86_64__) && defined({guard})"]
            mvec += [f"{name} {vector_fn}({name});", f"#define fg_{fn}_{name} {vector_fn}", "#else"]
            lines = [*mvec, *lines, "#endif"]
        if libm == "exp2f" and dt.count == 16:  # inline on AVX-512, before libmvec's call
            lines = ["#if defined(__x86_64__) && defined(__AVX512F__)", _EXP2_FLOAT16_AVX512, "#else", *lines, "#endif"]
        out.append(guarded(f"{fn}_{name}", "".join(line + "\n" for line in lines)))
    return "".join(out)


_VECTOR_MATH = (Ops.EXP2, Ops.LOG2, Ops.SIN)

# exp2 of 16 float32 lanes on AVX-512, inline: fg_exp2f's steps (the same clamps, polynomial and rounding, so the
# same bits lane for lane) with vrndscaleps for the nearest integer n and vscalefps for p * 2^n (one instruction that
# rounds once, denormals included). 13 instructions and no call: libmvec's call spills every live vector register
# around it (all are caller-saved), which cost a softmax row more than the exp itself. GCC's builtins, not
# immintrin.h, which adds 0.25 s to every compile. 4 = _MM_FROUND_CUR_DIRECTION; rndscale's 8: to nearest, quietly.
_EXP2_FLOAT16_AVX512 = """static inline float16 fg_exp2_float16(float16 v) {
  const float16 z = {0};
  const unsigned short all = (unsigned short)-1;
  float16 c = __builtin_ia32_maxps512_mask(z - 151.0f, v, z, all, 4);
  c = __builtin_ia32_minps512_mask(z + 129.0f, c, z, all, 4);
  float16 n = __builtin_ia32_rndscaleps_mask(c, 8, z, all, 4), f = c - n;
  float16 p = __builtin_ia32_vfmaddps512_mask(z + 0x1.388748p-13f, f, z + 0x1.5efff6p-10f, all, 4);
  p = __builtin_ia32_vfmaddps512_mask(p, f, z + 0x1.3b3a9p-7f, all, 4);
  p = __builtin_ia32_vfmaddps512_mask(p, f, z + 0x1.c6af98p-5f, all, 4);
  p = __builtin_ia32_vfmaddps512_mask(p, f, z + 0x1.ebfbcep-3f, all, 4);
  p = __builtin_ia32_vfmaddps512_mask(p, f, z + 0x1.62e43p-1f, all, 4);
  p = __builtin_ia32_vfmaddps512_mask(p, f, z + 1.0f, all, 4);
  return __builtin_ia32_scalefps512_mask(p, n, z, all, 4);
}"""


# exp2 of float (float32, and the float that half and the emulated floats compute in) as `fg_exp2f`: glibc's exp2f
# where libmvec links (gcc vectorises its calls into libmvec's), else inline C that gcc and clang vectorise: without
# libmvec a loop of exp2f calls stays scalar (softmax scores of (4, 8, 256, 256): 9.5 -> 1.45 ms one thread, 6.5x).
# libmvec is kept where it links: on AVX-512 the inline form was 0.86-0.91x its speed in that kernel, 0.74-0.78x on
# AVX2. x = n + f (n nearest, by adding 1.5 * 2^23), 2^f by a degree-6 minimax polynomial on [-0.5, 0.5] (relative
# error 1.5e-9), 2^n as two powers of two made from exponent bits (2^(n/2) and the rest: both normal for n in [-151,
# 129], so denormals and overflow round once, in the last product). Every float32 input checked against float64 exp2:
# within 0.88 ulp with fma, 1.08 ulp without. The clamps keep NaN (NaN < c is false) and map +-inf to inf and 0.
_EXP2F_HELPER = """#ifndef FG_EXP2F
#define FG_EXP2F
#ifdef FUSEGRAD_MVEC
#define fg_exp2f __builtin_exp2f
#else
#if defined(__FMA__) || defined(__FP_FAST_FMAF) || defined(__ARM_FEATURE_FMA)
#define FG_MADDF(a, b, c) __builtin_fmaf(a, b, c)
#else
#define FG_MADDF(a, b, c) ((a) * (b) + (c))
#endif
static inline float fg_exp2f(float x) {
  x = x < -151.0f ? -151.0f : x;
  x = x > 129.0f ? 129.0f : x;
  float t = x + 12582912.0f;
  float f = x - (t - 12582912.0f);
  unsigned bits, lo, hi;
  __builtin_memcpy(&bits, &t, 4);
  int n = (int)(bits - 0x4b400000u), half = n >> 1;
  lo = ((unsigned)half << 23) + 0x3f800000u;
  hi = ((unsigned)(n - half) << 23) + 0x3f800000u;
  float p = FG_MADDF(0x1.388748p-13f, f, 0x1.5efff6p-10f), a, b;
  p = FG_MADDF(p, f, 0x1.3b3a9p-7f);
  p = FG_MADDF(p, f, 0x1.c6af98p-5f);
  p = FG_MADDF(p, f, 0x1.ebfbcep-3f);
  p = FG_MADDF(p, f, 0x1.62e43p-1f);
  p = FG_MADDF(p, f, 1.0f);
  __builtin_memcpy(&a, &lo, 4);
  __builtin_memcpy(&b, &hi, 4);
  return p * a * b;
}
#endif
#endif
"""


def render_exp2f_helper(uops: list[UOp]) -> str:
    """`fg_exp2f` where a float exp2 is rendered (scalar, or a float32 vector's lanes); guarded, so kernels joined into
    one file define it once."""
    return _EXP2F_HELPER if any(u.op is Ops.EXP2 and u.dtype.scalar() != dtypes.float64 for u in uops) else ""


# vector forms first: they decline (None) scalar nodes and accumulator arrays of vectors, which fall through to the
# scalar rules
_vector_rules: list[tuple[UPat, Callable[..., str | None]]] = [
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="idx"),), name="x"), render_vector_load),  # *(float8_u*)&buf[i]
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat.var("value"))), render_vector_store),
    (UPat(Ops.VECTORIZE, name="x"), render_vectorize),  # (float8){a, a, ...}
    (UPat(Ops.GEP, name="x"), render_gep),  # v[i]
    (UPat(Ops.WHERE, src=(UPat.var("c"), UPat(), UPat()), name="x"), render_vector_where),  # bitwise by lane mask
    (UPat(Ops.MAX, name="x"), render_vector_max),
    (UPat(_VECTOR_MATH, name="x"), render_vector_math),  # fg_exp2_float16(v)
]
# text, not UOps, as for base_rewrite
pm_render_vectors = PatternMatcher(_vector_rules)  # type: ignore[arg-type]


# *** fused multiply-add (codegen/fma.py's MULACC) ***


@functools.cache
def host_has_fma() -> bool:
    """Whether this CPU has FMA instructions: the kernels compile with -march=native, so fmaf is then one instruction;
    without them it is a slow libm call."""
    return "fma" in cpu_flags()


# x86 builtins of one vector fma per GCC vector size (gcc and clang both have them; no header: <immintrin.h> costs
# ~0.25 s per compile). GCC's vector extension has no fma, and fmaf lane by lane stays scalar code (gcc 12 -O2).
_X86_FMA = {
    (dtypes.float32, 8): ("__FMA__", "__builtin_ia32_vfmaddps256(a, b, c)"),
    (dtypes.float64, 4): ("__FMA__", "__builtin_ia32_vfmaddpd256(a, b, c)"),
    (dtypes.float32, 16): ("__AVX512F__", "__builtin_ia32_vfmaddps512_mask(a, b, c, (unsigned short)-1, 4)"),
    (dtypes.float64, 8): ("__AVX512F__", "__builtin_ia32_vfmaddpd512_mask(a, b, c, (unsigned char)-1, 4)"),
}  # 4 = _MM_FROUND_CUR_DIRECTION: the current rounding mode, to nearest


def render_fma_helpers(uops: list[UOp], lang: CStyleLanguage) -> str:
    """`fg_fma_float16(a, b, c)` and the like for each vector dtype a MULACC has: one x86 instruction where the ISA is
    there, else fmaf lane by lane (the same bits, slower)."""
    used = sorted({u.dtype for u in uops if u.op is Ops.MULACC and u.dtype.count > 1 and dtypes.is_float(u.dtype)})
    out = []
    for dt in used:
        name, scalar = lang.render_dtype(dt), dt.scalar()
        lines = [f"static inline {name} fg_fma_{name}({name} a, {name} b, {name} c) {{"]
        if (builtin := _X86_FMA.get((scalar, dt.count))) is not None:
            lines += [f"#if defined(__x86_64__) && defined({builtin[0]})",
                      f"  return {builtin[1]};", "#else"]  # fmt: skip
        fma = f"__builtin_fma{_math_suffix(dt)}"
        lines += [f"  for (int i = 0; i < {dt.count}; i++) a[i] = {fma}(a[i], b[i], c[i]);", "  return a;"]
        if builtin is not None:
            lines.append("#endif")
        lines.append("}")
        out.append(guarded(f"fma_{name}", "".join(line + "\n" for line in lines)))
    return "".join(out)


class ClangRenderer(CStyleLanguage):
    """C99 for the CPU device, compiled by the system C compiler with -fopenmp (GCC or Clang)."""

    device = "CPU"
    suffix = "c"
    supports_float4 = True  # vector values (codegen/vectorize.py) as GCC vector extension types
    string_rewrite = pm_render_vectors + base_rewrite
    # with glibc's libmvec (the compiler defines FUSEGRAD_MVEC), these declarations let gcc vectorize math calls
    preamble = (
        "#include <math.h>\n#ifdef FUSEGRAD_MVEC\n"
        + "".join(f'{t} {f}({t}) __attribute__((simd("notinbranch")));\n' for t, f in _SIMD_MATH)
        + "#endif\n"
    )
    buffer_suffix = " restrict"
    # index math stays 64-bit in C even where codegen proved int32 enough: under -fwrapv a 32-bit address sum must
    # wrap, so gcc cannot widen it into a pointer step and vectorises contiguous loads as gathers (4x slower sums)
    index_c_type = "long long"
    # reduce loops up to this many iterations around upcast loops are unrolled: a conv window's taps; a sum of 8
    # per-image partials (a conv weight gradient's, 12 vectors of accumulators: 7.0 -> 4.8 us on two cores)
    unroll_reduce_max: ClassVar[int] = 8
    infinity = "__builtin_inff()"
    nan = '__builtin_nanf("")'
    type_map: ClassVar[dict[DType, str]] = {
        dtypes.bool: "_Bool", dtypes.int64: "long long", dtypes.uint64: "unsigned long long",
        dtypes.float16: "_Float16", dtypes.index: "long long"}  # fmt: skip
    emulated_floats: ClassVar[dict[DType, str]] = {
        dtypes.bfloat16: "unsigned short", **dict.fromkeys(dtypes.fp8s, "unsigned char")}  # fmt: skip
    code_for_op: ClassVar[dict[Ops, Callable[..., str]]] = {
        **CStyleLanguage.code_for_op,
        # builtins: no libm prototypes or errno needed; float and half compute in float, double in double
        Ops.SQRT: lambda x, dtype: f"__builtin_sqrt{_math_suffix(dtype)}({x})",
        Ops.EXP2: lambda x, dtype: f"fg_exp2f({x})" if _math_suffix(dtype) else f"__builtin_exp2({x})",  # _EXP2F_HELPER
        Ops.LOG2: lambda x, dtype: f"__builtin_log2{_math_suffix(dtype)}({x})",
        Ops.SIN: lambda x, dtype: f"__builtin_sin{_math_suffix(dtype)}({x})",
        Ops.TRUNC: lambda x, dtype: f"__builtin_trunc{_math_suffix(dtype)}({x})",
        Ops.POW: lambda x, y, dtype: f"__builtin_pow{_math_suffix(dtype)}({x},{y})",
    }

    def render_dtype(self, dt: DType) -> str:
        """Vectors of float and double as GCC vector types named like OpenCL's (`float8`), typedef'd by `render`."""
        if dt.count > 1 and not isinstance(dt, PtrDType) and dt.scalar() in (dtypes.float32, dtypes.float64):
            return f"{super().render_dtype(dt.scalar())}{dt.count}"
        if dt.count > 1 and not isinstance(dt, PtrDType) and _is_bool(dt):
            return mask_type(dt)
        return super().render_dtype(dt)

    def has_fma(self) -> bool:
        return host_has_fma()

    def render_fma(self, x: str, y: str, z: str, dt: DType) -> str:
        """Scalars by gcc's builtin (one vfmadd with -march=native, no libm prototype needed), vectors by a helper."""
        if dt.count > 1:
            return f"fg_fma_{self.render_dtype(dt)}({x},{y},{z})"
        return f"__builtin_fma{_math_suffix(dt)}({x},{y},{z})"

    def render_register(self, name: str, ptr: PtrDType) -> str:
        """An accumulator array of scalars is 32-byte aligned: gcc 12.2 placed one in the red zone of a kernel without
        threads at an address 8 past a 16-byte boundary and cleared it with the aligned `vmovdqa` from an `omp simd`
        loop (a 4x5 @ 5x1000 half matmul, and a cumsum over an expanded bool (3, 4) tensor, found by test.fuzz, both
        segfaulted); an alignment above the ABI's makes gcc realign. Arrays of vectors are aligned by their type."""
        if ptr.base.count == 1 and ptr.size > 1:
            return f"{self.render_dtype(ptr.base)} {name}[{ptr.size}] __attribute__((aligned(32)));"
        return super().render_register(name, ptr)

    def render(self, uops: list[UOp]) -> str:
        helpers = render_exp2f_helper(uops) + render_vector_math_helpers(uops, self) + render_fma_helpers(uops, self)
        kernel = super().render(uops)
        if "fg_stream_line(" in kernel:
            helpers += render_stream_helpers()
        src = render_vector_typedefs(uops, self) + helpers + kernel
        return (_SIMDLEN_DEFINE + src) if "FG_SIMDLEN" in src else src

    def stream_plan(self, uops: list[UOp], pragmas: dict[UOp, str]) -> StreamPlan:
        """Stores of kernels bigger than the last-level cache stream to memory (renderer/stream.py)."""
        return plan_streams(uops, pragmas)

    def loop_pragmas(self, uops: list[UOp]) -> dict[UOp, str]:
        """OpenMP on output loops, whose iterations write disjoint elements and declare their own accumulators:
        `parallel for` on an outermost one with enough work to pay for threads, `simd` on an innermost one
        (so -O2's cheapest vectorizer cost model still vectorizes it). An innermost reduce loop that only sums (or
        multiplies) one accumulator gets `simd reduction`, which lets it reorder into SIMD lanes; other reduce loops
        carry their accumulator in order. Upcast loops (codegen/opt.py) that update accumulator arrays inside a reduce
        loop, and short reduce loops around them, get `GCC unroll` so the arrays stay in registers.
        """
        shapes = _LoopShapes.of(uops)
        ret: dict[UOp, str] = {}
        for rng in (u for u in uops if u.op is Ops.RANGE and u.arg[1] in REDUCE_AXES and u in shapes.around_upcast):
            if rng.src[0].op is Ops.CONST and rng.src[0].arg <= self.unroll_reduce_max:  # a conv window's 3x3
                ret[rng] = f"#pragma GCC unroll {rng.src[0].arg}"  # unrolled: one body per tap, loads scheduled across
        for rng in (u for u in uops if u.op is Ops.RANGE and u.arg[1] is AxisType.UNROLL and u.src[0].op is Ops.CONST):
            ret[rng] = f"#pragma GCC unroll {rng.src[0].arg}"  # an UNROLL opt's steps (codegen/unroll.py), in order
        for rng in (u for u in uops if u.op is Ops.RANGE and u.arg[1] in REDUCE_AXES and u in shapes.innermost):
            if rng in ret:
                continue
            # one accumulator summed (or multiplied) in an innermost loop: OpenMP may reorder it, so it vectorises
            updates = shapes.updates.get(rng, [])
            if len(updates) == 1 and updates[0][1] in _SIMD_REDUCTIONS and _is_simd_reducible(updates[0][0]):
                reg, op = updates[0]
                ret[rng] = f"#pragma omp simd reduction({_SIMD_REDUCTIONS[op]}:acc{reg.arg}){_simdlen(rng)}"
        for rng in (u for u in uops if u.op is Ops.RANGE and u.arg[1] not in REDUCE_AXES):
            if rng in shapes.carrying:
                continue
            if rng.arg[1] is AxisType.UPCAST and (rng not in shapes.innermost or rng in shapes.vector):
                # an upcast loop that updates accumulators inside a reduce loop is unrolled, so they stay in registers
                # (a loop would index them in memory); unrolling the ones around their set-up and read-out makes gcc
                # keep the array in memory after all
                if rng in shapes.in_reduce:
                    ret[rng] = f"#pragma GCC unroll {rng.src[0].arg}"
                continue
            # a GROUP's chunks summed as vectors (opt.LANES) are the work of the same chunks summed lane by lane;
            # other vector kernels keep the scalar count (a GPT or convnet kernel of ~1M lanes' work ran 4-13x
            # slower on threads)
            work = (shapes.lane_work if rng in shapes.partials else shapes.work).get(rng, 0)
            threads = work >= self.parallel_threshold or shapes.traffic.get(rng, 0) >= self.parallel_bytes
            simd = rng in shapes.innermost and rng not in shapes.vector and not _short_odd_trip(rng)
            clauses = (["parallel for"] if threads else []) + ([f"simd{_simdlen(rng)}"] if simd else [])
            if clauses:
                ret[rng] = "#pragma omp " + " ".join(clauses)
        ret.update(_spread_pragmas(uops, ret))
        return ret


# gcc vectorises `omp simd` loops 8 floats wide by default even on AVX-512 hosts (-march=native prefers 256-bit
# vectors); a loop whose trip count is a multiple of 16 gets `simdlen` of a whole 64-byte vector there (softmax's
# and layernorm's rows: their loops and glibc's exp2f 16 lanes wide, 2.6 -> 1.9 and 1.6 -> 1.3 ms single-thread at
# (4096, 1024)). Only such loops: forced wide on every loop (-mprefer-vector-width=512), the loops of 26 of the
# convnet's batchnorm statistics ran 3x slower, most of each row in the scalar remainder.
_SIMDLEN_DEFINE = "#ifdef __AVX512F__\n#define FG_SIMDLEN 16\n#else\n#define FG_SIMDLEN 8\n#endif\n"


def _simdlen(rng: UOp) -> str:
    return " simdlen(FG_SIMDLEN)" if trip_multiple(rng.src[0]) % 16 == 0 else ""  # clipped loops too (codegen/clip.py)


def _spread_pragmas(uops: list[UOp], pragmas: dict[UOp, str]) -> dict[UOp, str]:
    """A short upcast loop (fewer than 8 iterations) outside reduces that is the only loop in an output loop with no
    pragma of its own, and updates no register (codegen/opt.py spread_opts: the c outputs of one x // c): unrolled,
    and the loop around it takes its `simd`, so the vector lanes run over the outer loop and its loads stay
    contiguous (vectorised itself, the short loop gathered at x // c: a pool backward 0.50 -> 0.30 ms)."""
    parent: dict[UOp, UOp | None] = {}
    children: dict[UOp | None, int] = {}
    stored_in: set[UOp] = set()  # loops around a store to a register
    open_loops: list[UOp] = []
    for u in uops:
        if u.op is Ops.RANGE:
            parent[u] = open_loops[-1] if open_loops else None
            children[parent[u]] = children.get(parent[u], 0) + 1
            open_loops.append(u)
        elif u.op is Ops.END:
            open_loops.pop()
        elif u.op is Ops.STORE and _is_register(base_buffer(u.src[0].src[0])):
            stored_in.update(open_loops)
    ret: dict[UOp, str] = {}
    for rng, outer in parent.items():
        trip = rng.src[0]
        if rng.arg[1] is not AxisType.UPCAST or trip.op is not Ops.CONST or trip.arg >= 8 or rng in children:
            continue
        if outer is None or outer.arg[1] is not AxisType.LOOP or outer in pragmas or children[outer] != 1:
            continue
        around = _loops_around(parent, rng)
        if rng in stored_in or _short_odd_trip(outer) or any(r.arg[1] in REDUCE_AXES for r in around):
            continue
        ret[rng], ret[outer] = f"#pragma GCC unroll {trip.arg}", f"#pragma omp simd{_simdlen(outer)}"
    return ret


def _loops_around(parent: dict[UOp, UOp | None], rng: UOp) -> list[UOp]:
    """The loops enclosing `rng`, innermost first."""
    ret, node = [], parent[rng]
    while node is not None:
        ret.append(node)
        node = parent[node]
    return ret


def _short_odd_trip(rng: UOp) -> bool:
    """A loop of a constant 3, 5, 6 or 7 iterations: no `omp simd` (vector code is already SIMD). gcc 12.2 -O2
    -fopenmp -march=native miscompiled an `omp simd` set-up loop of 3 inside an upcast of 4 (a matmul tile of 4x3 rows
    and columns, int32) into code that segfaults; such short loops gain nothing from the pragma anyway."""
    trip = rng.src[0]
    return trip.op is Ops.CONST and trip.arg < 8 and trip.arg & (trip.arg - 1) != 0
