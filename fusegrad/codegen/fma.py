"""Fused multiply-add, after reductions became accumulators: each float32/float64 accumulator update `acc + a*b` (a
matmul's or conv's register tile, a dot product, a sum of squares) becomes MULACC(a, b, acc), one instruction with one
rounding where the renderer says it has one (`Renderer.has_fma`). Entry point: `pm_fuse_multiply_add`.
"""

from __future__ import annotations

from fusegrad.dtype import dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat

# dtypes with a single-rounding fma in every dialect (C's fmaf/fma, OpenCL's and CUDA's fma). Half and the emulated
# floats compute in float32: a fused float32 result rounded again to half is not one rounding, so they stay unfused.
FMA_DTYPES = (dtypes.float32, dtypes.float64)


def fuse_accumulate(store: UOp, idx: UOp, acc: UOp, mul: UOp) -> UOp | None:
    """STORE(idx, LOAD(idx) + x*y) -> STORE(idx, MULACC(x, y, LOAD(idx))): the same register read and written."""
    if acc.src[0] is not idx or mul.dtype.scalar() not in FMA_DTYPES:
        return None
    x, y = mul.src
    return store.replace(src=(idx, UOp(Ops.MULACC, mul.dtype, (x, y, acc))))


# Changes results: x*y is no longer rounded before the add (one rounding instead of two, as IEEE's fma). Only the
# running update of an accumulator is fused, never elementwise `a*b + c`: those are memory-bound (nothing to gain) and
# keep the two roundings numpy and torch give them. The rule sees one update at a time, so every variant of a kernel
# (any opts, vector or scalar, CPU or PYTHON) fuses the same products and keeps the same bits where its sums keep
# their order. Used by codegen's "fuse multiply-add" pass, right after pm_reduce_to_accumulator.
pm_fuse_multiply_add = PatternMatcher([
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="idx"), UPat(Ops.ADD, src=[UPat(Ops.LOAD, name="acc"),
                                                                         UPat(Ops.MUL, name="mul")])), name="store"),
     fuse_accumulate),  # acc = acc + x*y -> acc = fma(x, y, acc)
])  # fmt: skip
