"""The GPU dialects of the C renderer: OpenCL C (`OpenCLRenderer`, device CL) and CUDA C++ (`CUDARenderer`, device
CUDA). Each is `CStyleLanguage` with its own spellings and rules for what only GPUs have: launch indexes (SPECIAL),
local/shared memory (DEFINE_LOCAL) and barriers. Both are exported from renderer/cstyle.py, the reference's path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, cast

from fusegrad.dtype import DType, PtrDType, dtypes
from fusegrad.helpers import strip_parens
from fusegrad.renderer.cstyle import CStyleLanguage, RenderContext, base_rewrite
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat

__all__ = ["CUDARenderer", "OpenCLRenderer"]


def render_special(ctx: RenderContext, x: UOp) -> str:
    """gidx<d> -> the work-group index, lidx<d> -> the thread in it, as the kernel's index type."""
    name = str(x.arg)
    return f"(({ctx.lang.render_dtype(x.dtype)}){ctx.lang.launch_index(name[0], int(name[-1]))})"  # type: ignore[attr-defined]


def render_local(ctx: RenderContext, x: UOp) -> str:
    ptr = x.dtype
    assert isinstance(ptr, PtrDType), f"DEFINE_LOCAL: expected a pointer dtype, got {ptr}"
    return f"{ctx.lang.local_prefix}{ctx.lang.render_dtype(ptr.base)} {ctx[x]}[{ptr.size}];"  # type: ignore[attr-defined]


def _is_vector_access(idx: UOp, value: UOp) -> bool:
    """A vector value read from or written to a global array of scalars (codegen/vectorize.py's contiguous lanes),
    not an accumulator array of vectors."""
    buf = idx.src[0]
    while buf.op is Ops.AFTER:
        buf = buf.src[0]
    return value.dtype.count > 1 and buf.op is Ops.DEFINE_GLOBAL


def _gpu(ctx: RenderContext) -> GPURenderer:
    """The dialect, as the GPU renderer the vector rules only run for."""
    return cast("GPURenderer", ctx.lang)


def _element_address(ctx: RenderContext, idx: UOp) -> str:
    return f"{ctx[idx.src[0]]}+{ctx[idx.src[1]]}"


def render_vector_load(ctx: RenderContext, x: UOp, idx: UOp) -> str | None:
    if not _is_vector_access(idx, x):
        return None
    return _gpu(ctx).vector_load(x.dtype, _element_address(ctx, idx))


def render_vector_store(ctx: RenderContext, idx: UOp, value: UOp) -> str | None:
    if not _is_vector_access(idx, value):
        return None
    return _gpu(ctx).vector_store(value.dtype, _element_address(ctx, idx), ctx[value])


def render_vectorize(ctx: RenderContext, x: UOp) -> str:
    return _gpu(ctx).vector_literal(x.dtype, [ctx[s] for s in x.src])


def render_gep(ctx: RenderContext, x: UOp) -> str | None:
    """One lane of a vector (a GEP of several lanes has no spelling here)."""
    return _gpu(ctx).vector_lane(ctx[x.src[0]], x.arg[0]) if len(x.arg) == 1 else None


# the GPU-only nodes, tried before the C rules; the vector forms decline scalar nodes and accumulator arrays of vectors
_gpu_rules: list[tuple[UPat, Callable[..., str | None]]] = [
    (UPat(Ops.SPECIAL, name="x"), render_special),  # gidx0 -> get_group_id(0) / blockIdx.x
    (UPat(Ops.DEFINE_LOCAL, name="x"), render_local),  # __local float temp0[16];
    (UPat(Ops.BARRIER), lambda ctx: ctx.lang.barrier),  # every thread of the work-group waits here
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="idx"),), name="x"), render_vector_load),  # vload8(0, buf+i)
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat.var("value"))), render_vector_store),
    (UPat(Ops.VECTORIZE, name="x"), render_vectorize),  # (float8)(a,a,...)
    (UPat(Ops.GEP, name="x"), render_gep),  # v.s3 / v.v[3]
]
# rules return C text, not UOps (as cstyle.base_rewrite's)
pm_render_gpu = PatternMatcher(_gpu_rules)  # type: ignore[arg-type]


def _uses(uops: list[UOp], dt: DType) -> bool:
    return any((u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar() == dt for u in uops)


class GPURenderer(CStyleLanguage):
    """What the GPU dialects share: launch dimensions, local memory, a barrier statement, and vectors of float and
    double (codegen/vectorize.py): each thread moves the contiguous lanes of an upcast loop as whole vectors."""

    has_local = True
    has_shared = True
    supports_float4 = True
    global_max: ClassVar[tuple[int, ...] | None] = (2**31 - 1, 65535, 65535)
    local_max: ClassVar[tuple[int, ...] | None] = (1024, 1024, 64)
    shared_max: ClassVar[int] = 32768
    local_prefix: ClassVar[str] = ""
    barrier: ClassVar[str] = ""
    string_rewrite: ClassVar[PatternMatcher] = pm_render_gpu + base_rewrite

    def launch_index(self, kind: str, dim: int) -> str:
        """The text of launch index `kind` ('g' work-group, 'l' thread in it) in dimension `dim`."""
        raise NotImplementedError(f"{type(self).__name__}: launch_index is not implemented")

    def has_fma(self) -> bool:
        return True  # every OpenCL and CUDA device has a correctly rounded fma, at the speed of a mul

    def render_dtype(self, dt: DType) -> str:
        if dt.count > 1 and not isinstance(dt, PtrDType) and dt.scalar() in (dtypes.float32, dtypes.float64):
            return self.vector_type(dt)
        return super().render_dtype(dt)

    def vector_type(self, dt: DType) -> str:
        """The dialect's name of vector dtype `dt` (a float or double vector)."""
        raise NotImplementedError(f"{type(self).__name__}: vector dtype {dt} is not supported")

    def vector_load(self, dt: DType, address: str) -> str:
        """The vector of `dt.count` elements from `address` on (aligned to the element only)."""
        raise NotImplementedError(f"{type(self).__name__}: vector loads are not supported")

    def vector_store(self, dt: DType, address: str, value: str) -> str:
        """The statement writing vector `value` (of `dt`) to the elements from `address` on."""
        raise NotImplementedError(f"{type(self).__name__}: vector stores are not supported")

    def vector_literal(self, dt: DType, lanes: list[str]) -> str:
        """A vector of `dt` from the text of its lanes."""
        raise NotImplementedError(f"{type(self).__name__}: vector values are not supported")

    def vector_lane(self, vector: str, lane: int) -> str:
        """Lane `lane` of the vector whose text is `vector`."""
        raise NotImplementedError(f"{type(self).__name__}: vector lanes are not supported")


class OpenCLRenderer(GPURenderer):
    """OpenCL C 1.2 for the CL device (any OpenCL driver: PoCL on CPUs, GPU vendors' ICDs)."""

    device = "CL"
    suffix = "cl"
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    local_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    arg_int_prefix = "long"
    type_map: ClassVar[dict[DType, str]] = {
        dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
        dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong",
        dtypes.index: "long", dtypes.float16: "half"}  # fmt: skip
    unsupported_dtypes = frozenset({dtypes.bfloat16, *dtypes.fp8s})

    def launch_index(self, kind: str, dim: int) -> str:
        return f"get_{'group' if kind == 'g' else 'local'}_id({dim})"

    # OpenCL C's own vector types (float2..float16, double2..) with element-aligned vloadn / vstoren
    def vector_type(self, dt: DType) -> str:
        return f"{super().render_dtype(dt.scalar())}{dt.count}"

    def vector_load(self, dt: DType, address: str) -> str:
        return f"vload{dt.count}(0, {address})"

    def vector_store(self, dt: DType, address: str, value: str) -> str:
        return f"vstore{dt.count}({value}, 0, {address});"

    def vector_lane(self, vector: str, lane: int) -> str:
        return f"{vector}.s{lane:x}"  # .s0 .. .sf

    def render_fma(self, x: str, y: str, z: str, dt: DType) -> str:
        return f"fma({x},{y},{z})"  # OpenCL C's fma: one rounding, overloaded for float, double and their vectors

    def vector_literal(self, dt: DType, lanes: list[str]) -> str:
        # one operand broadcasts to every lane: (float8)(x)
        return f"(({self.vector_type(dt)})({lanes[0] if len(set(lanes)) == 1 else ','.join(lanes)}))"

    def render_int(self, x: int, dt: DType) -> str:
        # OpenCL's 64-bit integer is `long` ("long long" is reserved): L / UL, not C's ll / ull
        return super().render_int(x, dt).replace("ull", "UL").replace("ll", "L")

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        if src.itemsize != dt.itemsize:
            raise ValueError(f"bitcast: sizes differ: got {src} ({src.itemsize} bytes) to {dt} ({dt.itemsize} bytes)")
        return f"as_{self.render_dtype(dt)}({x})"

    def render_buffer(self, buf: UOp, name: str, written: bool) -> str:
        """`data0_base, data0_offset`: the buffer and a byte offset into it (runtime/ops_cl.py's CLBuffer), joined into
        the pointer `data0` at the top of the kernel (render_kernel)."""
        # a kernel argument can't point to bool: bool buffers (one byte per element) are passed as uchar
        if buf.dtype.base == dtypes.bool:
            pointer = f"{self.buffer_prefix}{'' if written else self.const_prefix}uchar*"
        else:
            pointer = super().render_buffer(buf, name, written).removesuffix(f" {name}")
        return f"{pointer} {name}_base, ulong {name}_offset"

    def render_kernel(self, function_name: str, args: list[str], body: list[str]) -> str:
        views = []
        for arg in args:
            if (head := arg.partition("_base, ulong ")[0]) != arg:
                pointer, name = head.rsplit(" ", 1)
                views.append(f"  {pointer} {name} = ({pointer})((__global char*){name}_base + {name}_offset);")
        return super().render_kernel(function_name, args, views + body)

    def render(self, uops: list[UOp]) -> str:
        computes_half = dtypes.float16 not in self.unsupported_dtypes and not isinstance(self, OpenCLNoHalfRenderer)
        # a*b+c stays two rounded ops, as on the CPU: OpenCL lets drivers fuse it (PoCL does, in vector code)
        pragmas = "#pragma OPENCL FP_CONTRACT OFF\n"
        if computes_half and _uses(uops, dtypes.float16):
            pragmas += "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
        if _uses(uops, dtypes.float64):
            pragmas += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
        return pragmas + super().render(uops)


def _is_half_global(idx: UOp) -> bool:
    buf = idx.src[0]
    while buf.op is Ops.AFTER:
        buf = buf.src[0]
    return buf.op is Ops.DEFINE_GLOBAL and buf.dtype.base == dtypes.float16


def render_half_load(ctx: RenderContext, x: UOp, idx: UOp) -> str | None:
    """A half element read as a float; a gated one reads 0 where its gate is false."""
    if not _is_half_global(idx):
        return None
    text = ctx.lang.half_load(ctx[idx.src[0]], strip_parens(ctx[idx.src[1]]))  # type: ignore[attr-defined]
    return f"({ctx[idx.src[2]]}?{text}:0.0f)" if len(idx.src) > 2 else text


def render_half_store(ctx: RenderContext, idx: UOp, value: UOp) -> str | None:
    if not _is_half_global(idx):
        return None
    lang = ctx.lang
    store = lang.half_store(ctx[idx.src[0]], strip_parens(ctx[idx.src[1]]), ctx[value])  # type: ignore[attr-defined]
    return f"if ({strip_parens(ctx[idx.src[2]])}) {store}" if len(idx.src) > 2 else store


# half buffers read and written through the dialect's conversions, tried before the other rules
_half_rules: list[tuple[UPat, Callable[..., str | None]]] = [
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="idx"),), name="x"), render_half_load),  # buf[i] -> float
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat.var("value"))), render_half_store),  # float -> buf[i]
]
pm_render_half_storage = PatternMatcher(_half_rules)  # type: ignore[arg-type]  # rules return C text


class HalfAsFloat(CStyleLanguage):
    """Half stored as half and computed in float, rounded to half after every op as on devices that compute in half
    (the C renderer narrows each half result through `render_cast_to`). The dialect supplies `half_preamble` (which
    defines fg_half_bits: float -> the nearest half's bits, and fg_bits_half: bits -> float) and the buffer accesses."""

    half_preamble: ClassVar[str] = ""
    half_buffer_type: ClassVar[str] = "half"

    def half_load(self, buf: str, idx: str) -> str:
        raise NotImplementedError(f"{type(self).__name__}: half_load is not implemented")

    def half_store(self, buf: str, idx: str, value: str) -> str:
        raise NotImplementedError(f"{type(self).__name__}: half_store is not implemented")

    def render_dtype(self, dt: DType) -> str:
        return "float" if dt == dtypes.float16 else super().render_dtype(dt)

    def render_cast_to(self, x: str, dt: DType) -> str:
        return f"fg_bits_half(fg_half_bits({x}))" if dt == dtypes.float16 else super().render_cast_to(x, dt)

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        """half <-> 16-bit ints through the half's bits; everything else as the dialect does it."""
        if src == dtypes.float16 and dt.itemsize == 2:
            return f"(({self.render_dtype(dt)})fg_half_bits({x}))"
        if dt == dtypes.float16 and src.itemsize == 2:
            return f"fg_bits_half(({self.half_buffer_type}_bits)({x}))"
        return super().render_bitcast(x, src, dt)

    def render_buffer(self, buf: UOp, name: str, written: bool) -> str:
        text = super().render_buffer(buf, name, written)
        # the dialect's buffer argument, pointing to half storage rather than the float the values compute in
        return text.replace("float*", f"{self.half_buffer_type}*", 1) if buf.dtype.base == dtypes.float16 else text

    def render(self, uops: list[UOp]) -> str:
        src = super().render(uops)
        return self.half_preamble + src if _uses(uops, dtypes.float16) else src


# OpenCL without cl_khr_fp16 may not declare a half variable, but vstore_half / vload_half work through a half pointer
_CL_HALF = """typedef ushort half_bits;
inline ushort fg_half_bits(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); return h; }
inline float fg_bits_half(ushort h) { return vload_half(0, (__private half*)&h); }
"""


class OpenCLNoHalfRenderer(HalfAsFloat, OpenCLRenderer):
    """OpenCL on a device without cl_khr_fp16 (PoCL on CPUs): half buffers through vload_half / vstore_half."""

    string_rewrite = pm_render_half_storage + OpenCLRenderer.string_rewrite
    half_preamble = _CL_HALF

    def half_load(self, buf: str, idx: str) -> str:
        return f"vload_half({idx}, {buf})"

    def half_store(self, buf: str, idx: str, value: str) -> str:
        return f"vstore_half({value}, {idx}, {buf});"


def _cuda_math(name: str) -> Callable[..., str]:
    """A CUDA math function by dtype: `sqrtf` for float (and half, computed in float), `sqrt` for double."""

    def render(*args: str) -> str:
        *operands, dtype = args
        suffix = "" if dtype.scalar() == dtypes.float64 else "f"  # type: ignore[attr-defined]
        return f"{name}{suffix}({','.join(operands)})"

    return render


_CUDA_PREAMBLE = """#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fffffff))
template <class T, class F> __device__ __forceinline__ T fg_bitcast(F x) { T t; memcpy(&t, &x, sizeof(T)); return t; }
"""
# half as its bits, converted by PTX's cvt (no cuda_fp16.h: NVRTC has no headers without a CUDA toolkit)
_CUDA_HALF = """typedef unsigned short half;
typedef unsigned short half_bits;
__device__ __forceinline__ unsigned short fg_half_bits(float x) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h;
}
__device__ __forceinline__ float fg_bits_half(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
"""


# CUDA's float4 has no arithmetic and needs 16-byte alignment: vectors are arrays of lanes with lane-wise operators,
# loaded and stored 16 bytes at a time where the address allows it (a view into a buffer may start anywhere)
_CUDA_VECTORS = """template <class T, int N> struct __align__(16) fg_vec { T v[N]; };
#define FG_LANEWISE(op) template <class T, int N> __device__ __forceinline__ fg_vec<T, N> operator op( \\
    fg_vec<T, N> a, fg_vec<T, N> b) { fg_vec<T, N> r; _Pragma("unroll") for (int i = 0; i < N; i++) \\
    r.v[i] = a.v[i] op b.v[i]; return r; }
FG_LANEWISE(+) FG_LANEWISE(-) FG_LANEWISE(*) FG_LANEWISE(/)
template <class T, int N> __device__ __forceinline__ fg_vec<T, N> operator-(fg_vec<T, N> a) {
  fg_vec<T, N> r; _Pragma("unroll") for (int i = 0; i < N; i++) r.v[i] = -a.v[i]; return r; }
__device__ __forceinline__ float fg_fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fg_fma(double a, double b, double c) { return fma(a, b, c); }
template <class T, int N> __device__ __forceinline__ fg_vec<T, N> fg_fma(fg_vec<T, N> a, fg_vec<T, N> b,
    fg_vec<T, N> c) {
  fg_vec<T, N> r; _Pragma("unroll") for (int i = 0; i < N; i++) r.v[i] = fg_fma(a.v[i], b.v[i], c.v[i]); return r; }
template <int N, class T> __device__ __forceinline__ fg_vec<T, N> fg_splat(T x) {
  fg_vec<T, N> r; _Pragma("unroll") for (int i = 0; i < N; i++) r.v[i] = x; return r; }
template <int N, class T> __device__ __forceinline__ fg_vec<T, N> fg_vload(const T* p) {
  fg_vec<T, N> r;
  if (sizeof(r) % 16 == 0 && ((unsigned long long)p & 15) == 0) {
    _Pragma("unroll") for (int i = 0; i < (int)(sizeof(r) / 16); i++) ((uint4*)r.v)[i] = ((const uint4*)p)[i];
  } else {
    _Pragma("unroll") for (int i = 0; i < N; i++) r.v[i] = p[i];
  }
  return r;
}
template <int N, class T> __device__ __forceinline__ void fg_vstore(T* p, fg_vec<T, N> x) {
  if (sizeof(x) % 16 == 0 && ((unsigned long long)p & 15) == 0) {
    _Pragma("unroll") for (int i = 0; i < (int)(sizeof(x) / 16); i++) ((uint4*)p)[i] = ((const uint4*)x.v)[i];
  } else {
    _Pragma("unroll") for (int i = 0; i < N; i++) p[i] = x.v[i];
  }
}
"""


def _vector_dtypes(uops: list[UOp]) -> list[DType]:
    """The vector value dtypes of a program (not pointers), in a stable order."""
    found = {u.dtype for u in uops if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)}
    found |= {u.dtype.base for u in uops if isinstance(u.dtype, PtrDType) and u.dtype.base.count > 1}
    return sorted(found, key=lambda dt: (dt.scalar().name, dt.count))


class CUDARenderer(HalfAsFloat, GPURenderer):
    """CUDA C++ for the CUDA device, compiled to PTX by NVRTC for the GPU's architecture (`arch`, e.g. sm_90).
    Half is stored as half and computed in float (HalfAsFloat): tensor cores come later."""

    string_rewrite = pm_render_half_storage + GPURenderer.string_rewrite
    half_preamble = _CUDA_HALF

    device = "CUDA"
    suffix = "cu"
    local_prefix = "__shared__ "
    barrier = "__syncthreads();"
    shared_max = 49152
    type_map: ClassVar[dict[DType, str]] = {
        dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int64: "long long",
        dtypes.uint64: "unsigned long long", dtypes.index: "long long", dtypes.float16: "half"}  # fmt: skip
    unsupported_dtypes = frozenset({dtypes.bfloat16, *dtypes.fp8s})  # TODO(#15): __nv_bfloat16
    code_for_op: ClassVar[dict[Ops, Callable[..., str]]] = {
        **CStyleLanguage.code_for_op,
        **{op: _cuda_math(fn) for op, fn in ((Ops.SQRT, "sqrt"), (Ops.EXP2, "exp2"), (Ops.LOG2, "log2"),
                                             (Ops.SIN, "sin"), (Ops.TRUNC, "trunc"), (Ops.POW, "pow"))},
    }  # fmt: skip

    def __init__(self, arch: str = "sm_90") -> None:
        self.arch = arch

    def launch_index(self, kind: str, dim: int) -> str:
        return f"{'blockIdx' if kind == 'g' else 'threadIdx'}.{'xyz'[dim]}"

    def half_load(self, buf: str, idx: str) -> str:
        return f"fg_bits_half({buf}[{idx}])"

    def half_store(self, buf: str, idx: str, value: str) -> str:
        return f"{buf}[{idx}] = fg_half_bits({value});"

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        if src.itemsize != dt.itemsize:
            raise ValueError(f"bitcast: sizes differ: got {src} ({src.itemsize} bytes) to {dt} ({dt.itemsize} bytes)")
        if dtypes.float16 in (src, dt):
            return super().render_bitcast(x, src, dt)
        return f"fg_bitcast<{self.render_dtype(dt)}>({x})"

    def vector_type(self, dt: DType) -> str:
        return f"fg_{super().render_dtype(dt.scalar())}{dt.count}"  # typedef'd by render

    def loop_pragmas(self, uops: list[UOp]) -> dict[UOp, str]:
        """Upcast loops unrolled: their accumulator arrays then stay in registers (indexed in a loop, they would
        spill to local memory)."""
        return {u: "#pragma unroll" for u in uops if u.op is Ops.RANGE and u.arg[1] is AxisType.UPCAST}

    def vector_load(self, dt: DType, address: str) -> str:
        return f"fg_vload<{dt.count}>({address})"

    def vector_store(self, dt: DType, address: str, value: str) -> str:
        return f"fg_vstore<{dt.count}>({address}, {value});"

    def vector_lane(self, vector: str, lane: int) -> str:
        return f"{vector}.v[{lane}]"

    def render_fma(self, x: str, y: str, z: str, dt: DType) -> str:
        if dt.count > 1:
            return f"fg_fma({x},{y},{z})"  # lane by lane (_CUDA_VECTORS)
        return f"fma{'' if dt.scalar() == dtypes.float64 else 'f'}({x},{y},{z})"

    def vector_literal(self, dt: DType, lanes: list[str]) -> str:
        if len(set(lanes)) == 1:  # one operand broadcast to every lane
            return f"fg_splat<{dt.count}>(({super().render_dtype(dt.scalar())}){lanes[0]})"
        return f"{self.vector_type(dt)}{{{{{','.join(lanes)}}}}}"

    def render_kernel(self, function_name: str, args: list[str], body: list[str]) -> str:
        threads = getattr(self, "_threads", 1)
        head = f'extern "C" __global__ void __launch_bounds__({threads}) {function_name}({", ".join(args)}) {{'
        return self.preamble + "\n".join([head, *body, "}"]) + "\n"

    def render(self, uops: list[UOp]) -> str:
        # __launch_bounds__: the threads per block, so the compiler may give each thread more registers
        self._threads = 1
        for u in uops:
            if u.op is Ops.SPECIAL and str(u.arg).startswith("l"):
                self._threads *= int(u.src[0].arg)
        vectors = _vector_dtypes(uops)
        typedefs = "".join(f"typedef fg_vec<{self.render_dtype(dt.scalar())}, {dt.count}> {self.render_dtype(dt)};\n"
                           for dt in vectors)  # fmt: skip
        return _CUDA_PREAMBLE + (_CUDA_VECTORS + typedefs if vectors else "") + super().render(uops)
