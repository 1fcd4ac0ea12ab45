"""Index arithmetic gets a concrete integer type: until here every address, loop counter and symbolic size is typed
`dtypes.index` (an unbounded integer); this pass, the last before linearize, retypes all of it to int32 when the value
bounds (uop/bounds.py) of every index node in the kernel fit int32, and to int64 otherwise.

int32 is what the reference chooses and what vectorises best (half the lanes of int64 for the same register). The
choice is per kernel, so a kernel never mixes the two and needs no casts between them. Bounds are sound, so int32
arithmetic cannot wrap in a kernel lowered to int32 (the PYTHON device, which wraps int32 like C, relies on it).
"""

from __future__ import annotations

from fusegrad.dtype import DType, InvalidType, PtrDType, dtypes
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat, graph_rewrite

__all__ = ["index_dtype_for", "lower_index_dtype", "pm_lower_index"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _is_index(u: UOp) -> bool:
    return not isinstance(u.dtype, PtrDType) and u.dtype.scalar() == dtypes.index


def index_dtype_for(sink: UOp) -> DType:
    """int32 when every index-typed node below `sink` (RANGE ends, symbolic variables' ranges, every intermediate of
    the address arithmetic) has bounds inside int32; int64 otherwise, unknown bounds included."""
    for u in sink.toposort():
        if not _is_index(u) or (u.op is Ops.CONST and isinstance(u.arg, InvalidType)):
            continue  # Invalid marks a lane with no access: it is never computed with
        if u.vmin < _INT32_MIN or u.vmax > _INT32_MAX:
            return dtypes.int64
    return dtypes.int32


def _retype(ctx: DType, x: UOp) -> UOp | None:
    return x.replace(dtype=ctx.vec(x.dtype.count)) if _is_index(x) else None


pm_lower_index = PatternMatcher([(UPat(GroupOp.All, name="x"), _retype)])


def lower_index_dtype(sink: UOp) -> UOp:
    """The kernel with every `dtypes.index` node retyped to `index_dtype_for(sink)`.

    DEFINE_VARs are retyped too; the runtimes still pass their values as int64 (the renderer narrows them)."""
    return graph_rewrite(sink, pm_lower_index, ctx=index_dtype_for(sink), name="lower index dtype")
