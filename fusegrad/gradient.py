"""Reverse-mode differentiation on the UOp graph: one derivative rule per op (`pm_gradient`), applied by
`compute_gradient(root, root_grad, targets)`. Frontend stage: `Tensor.backward` and `Tensor.gradient` call it, and the
gradient graph it returns is as lazy as the forward one, so the scheduler fuses both alike.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import cast

from fusegrad.dtype import dtypes
from fusegrad.helpers import Metadata
from fusegrad.uop import Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat, all_metadata
from fusegrad.uop.upat import RewriteFn

# one gradient per source of the node; None where no gradient flows (comparisons, conditions, integer results)
SourceGrads = tuple[UOp | None, ...]


def _sum_to(grad: UOp, axes: tuple[int, ...]) -> UOp:
    """Sum `grad` over `axes` (kept as size 1); half-precision gradients accumulate in float32."""
    if grad.dtype in (dtypes.float16, dtypes.bfloat16):
        return grad.cast(dtypes.float32).r(Ops.ADD, axes).cast(grad.dtype)
    return grad.r(Ops.ADD, axes)


def _max_gradient(ctx: UOp, x: UOp, y: UOp) -> SourceGrads:
    """d max(x, y): all of ctx to the larger operand, half to each on a tie (torch.maximum does the same)."""
    tie = x.eq(y).where(ctx * 0.5, ctx.const_like(0))
    return (y < x).where(ctx, tie), (x < y).where(ctx, tie)


def _pow_gradient(ctx: UOp, ret: UOp, b: UOp, e: UOp) -> SourceGrads:
    """d b**e, as torch's: e * b**(e-1), 0 where e == 0 (else 0 * inf at b == 0); and b**e * ln(b), 0 where b == 0 and
    e >= 0 (else 0 * -inf). A negative base gives NaN in e (ln of a negative number), as torch's does."""
    zero = ctx.const_like(0)
    d_base = e.eq(0).where(zero, e * b.alu(Ops.POW, e - 1))
    d_exponent = (b.eq(0) & (e.gt(0) | e.eq(0))).where(zero, ret * b.log2() * math.log(2))  # NaN e: not masked
    return ctx * d_base, ctx * d_exponent


def _product_of_others(ret: UOp, x: UOp) -> UOp:
    """d prod(x) / dx_i: the product of the other elements of x_i's group. prod / x_i where x_i != 0 (no division by
    zero: a 0 * inf there would be NaN); at a zero, the product of the nonzero values if it is the group's only zero,
    else 0 (torch's gradient too)."""
    axes = ret.arg[1]
    is_zero = x.eq(x.const_like(0))
    one = x.const_like(1)
    nonzero_product = is_zero.where(one, x).r(Ops.MUL, axes)
    zero_count = is_zero.where(one, x.const_like(0)).r(Ops.ADD, axes)  # in x's dtype: only == 1 matters
    at_zero = zero_count.eq(1).where(nonzero_product, x.const_like(0)).expand(x.shape)
    return is_zero.where(at_zero, ret.expand(x.shape) * is_zero.where(one, x).reciprocal())


def _reduce_gradient(ctx: UOp, ret: UOp, x: UOp) -> SourceGrads:
    """Reductions keep their axes as size 1, so `expand(x.shape)` broadcasts a result back onto its input."""
    match ret.arg[0]:
        case Ops.ADD:
            return (ctx.expand(x.shape),)
        case Ops.MUL:
            return ((ctx.expand(x.shape) * _product_of_others(ret, x)),)
        case Ops.MAX:
            # ties share the gradient equally (torch.amax does the same)
            is_max = x.eq(ret.expand(x.shape)).cast(ctx.dtype)
            count = is_max.r(Ops.ADD, ret.arg[1])
            return (is_max * (ctx * count.reciprocal()).expand(x.shape),)
    raise AssertionError(f"gradient: REDUCE_AXIS with {ret.arg[0]} has no rule, expected ADD, MUL or MAX")


def _cast_gradient(ctx: UOp, x: UOp) -> SourceGrads:
    """A float-to-float cast passes the gradient back in the source dtype; a cast to or from int/bool is flat."""
    return (ctx.cast(x.dtype),) if dtypes.is_float(x.dtype) and dtypes.is_float(ctx.dtype) else (None,)


def _expand_gradient(ctx: UOp, ret: UOp, x: UOp) -> SourceGrads:
    """Every copy made by expand sends its gradient back: sum over the grown axes."""
    grown = tuple(i for i, (before, after) in enumerate(zip(x.shape, ret.shape, strict=True)) if before != after)
    return (_sum_to(ctx, grown),)


def _after_gradient(ctx: UOp, ret: UOp) -> SourceGrads | None:
    """AFTER(memory, write) reads the written value: pass the gradient to the write when it covers all the memory."""
    write = ret.src[1]
    target = write.src[0]
    if write.op is not Ops.ASSIGN or target.base is not ret.src[0] or target.op not in (Ops.RESHAPE, Ops.BUFFER):
        return None
    return None, ctx.reshape(write.shape)


def _inverse_permutation(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(order)), key=order.__getitem__))


# d(root)/d(source) for each op, given ctx = d(root)/d(ret); the callbacks return one gradient per source.
# Used only by compute_gradient; rules are independent of each other (one per op).
_gradient_rules: list[tuple[UPat, Callable[..., SourceGrads | None]]] = [
    # elementwise: binary and ternary
    (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),  # d(x+y) = (1, 1)
    (UPat(Ops.MUL, src=(UPat.var("x"), UPat.var("y"))), lambda ctx, x, y: (ctx * y, ctx * x)),  # d(x*y) = (y, x)
    (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), _max_gradient),  # d max(x,y) = ([x>y], [y>x]), ties 1/2
    (UPat(Ops.POW, src=(UPat.var("b"), UPat.var("e")), name="ret"), _pow_gradient),  # d b^e = (e b^(e-1), b^e ln b)
    (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var(), UPat.var())),  # d where(c,x,y) = (-, [c], [!c])
     lambda ctx, c: (None, c.where(ctx, ctx.const_like(0)), c.where(ctx.const_like(0), ctx))),
    (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR)),
     lambda: (None, None)),  # piecewise constant or integer-valued: no gradient
    # elementwise: unary
    (UPat(Ops.NEG), lambda ctx: (ctx.neg(),)),  # d(-x) = -1
    (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ctx * ret * math.log(2),)),  # d 2^x = 2^x ln2
    (UPat(Ops.LOG2, src=(UPat.var("x"),)), lambda ctx, x: (ctx / (x * math.log(2)),)),  # d log2(x) = 1/(x ln2)
    (UPat(Ops.SIN, src=(UPat.var("x"),)), lambda ctx, x: (ctx * (math.pi / 2 - x).sin(),)),  # d sin(x) = cos(x)
    (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (ctx / (ret * 2),)),  # d sqrt(x) = 1/(2 sqrt(x))
    (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),  # d 1/x = -1/x^2
    (UPat((Ops.TRUNC, Ops.BITCAST, Ops.THREEFRY), name="ret"), lambda ret: (None,) * len(ret.src)),  # flat/no number
    (UPat(Ops.CAST, src=(UPat.var("x"),)), _cast_gradient),  # d cast(x) = cast back (floats only)
    # reductions
    (UPat(Ops.REDUCE_AXIS, src=(UPat.var("x"),), name="ret"), _reduce_gradient),
    # movement: each gradient is the inverse movement (expand's is a sum)
    (UPat(Ops.RESHAPE, src=(UPat.var("x"),)), lambda ctx, x: (ctx.reshape(x.shape),)),
    (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(_inverse_permutation(ret.arg)),)),
    (UPat(Ops.EXPAND, src=(UPat.var("x"),), name="ret"), _expand_gradient),
    (UPat(Ops.PAD, src=(UPat.var("x"),), name="ret"),  # pad -> shrink the padding off
     lambda ctx, ret, x: (ctx.shrink(tuple((b, b + s) for s, (b, _) in zip(x.shape, ret.arg, strict=True))),)),
    (UPat(Ops.SHRINK, src=(UPat.var("x"),), name="ret"),  # shrink -> pad the cut parts with zeros
     lambda ctx, ret, x: (ctx.pad(tuple((b, s - e) for s, (b, e) in zip(x.shape, ret.arg, strict=True))),)),
    (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),  # flip is its own inverse
    # buffers and markers
    (UPat(Ops.CONTIGUOUS), lambda ctx: (ctx,)),
    (UPat(Ops.CONTIGUOUS_BACKWARD), lambda ctx: (ctx.contiguous(),)),  # realize the gradient here
    (UPat(Ops.DETACH), lambda: (None,)),  # stops gradients
    (UPat(Ops.COPY, src=(UPat.var("x"), UPat())), lambda ctx, x: (ctx.copy_to_device(x.device), None)),
    (UPat(Ops.ASSIGN), lambda ctx: (None, ctx)),  # the result is the assigned value; the old contents are gone
    (UPat(Ops.AFTER, name="ret"), _after_gradient),
]  # fmt: skip
# the matcher is typed for rewrites (a node or None); here its callbacks return a tuple of gradients instead
pm_gradient = PatternMatcher(cast("list[tuple[UPat, RewriteFn]]", _gradient_rules))


@functools.cache
def _backward_metadata(forward: tuple[Metadata, ...]) -> tuple[Metadata, ...]:
    return tuple(dataclasses.replace(m, backward=True) for m in forward)


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
    """d(root)/d(node) for every target (and every node between), given d(loss)/d(root) = `root_grad`.

    Walks the graph once in reverse topological order with an explicit list (graphs are 10,000+ nodes deep), only
    along paths that reach a target, summing the gradients of nodes used more than once. Targets not reached by any
    path (or only through DETACH) are missing from the result.
    """
    order = list(root.toposort())  # sources before users
    reaches: dict[UOp, bool] = {}  # does a path from this node lead to a target?
    for u in order:
        reaches[u] = any(s in targets or reaches[s] for s in u.src)
    grads: dict[UOp, UOp] = {root: root_grad}
    for node in reversed(order):  # users before sources: a node's gradient is complete when it is reached
        if not reaches[node] or (ctx := grads.get(node)) is None:
            continue
        source_grads = cast("SourceGrads | None", pm_gradient.rewrite(node, ctx=ctx))
        if source_grads is None:
            raise RuntimeError(f"gradient: no rule to differentiate {node.op} (shape {node._shape}, {node.dtype})")
        assert len(source_grads) == len(node.src), f"gradient: {node.op} rule gave {len(source_grads)} gradients"
        forward = all_metadata.get(node)
        for src, grad in zip(node.src, source_grads, strict=True):
            if grad is None or not (reaches[src] or src in targets):
                continue
            grads[src] = total = grads[src] + grad if src in grads else grad
            if forward is not None and total not in all_metadata:  # VIZ and DEBUG label kernels "<op> bw"
                all_metadata[total] = _backward_metadata(forward)
    return grads
