"""Rules for the logistic function written by hand as e / (1 + e) with e = exp(x), and for its gradient.

Stage 3 (part of `sym`). In float32 e overflows to inf from x = 89 on, where the product form e * (1/(1+e)) gives
inf * 0 = NaN and its autograd derivative e * (d - e*d*d) (d = 1/(1+e)) NaN too; for large finite e the derivative
also loses every digit to cancellation. The limit forms 1/(1 + 1/e) and (1/(1 + 1/e)) * d have neither problem
(0.14 passes the reference's test_sigmoid_alt_extreme with its own rule, 1 - 1/(1+e), which loses all digits of
small e). Each rule keeps the original expression, rounding for rounding, where e < 1, where it is accurate, so no
input gets a less accurate result (test/uop/test_logistic.py measures both against float64).
e is an EXP2 node, so it is >= 0 or NaN: 1/(1 + 1/e) never meets the cancellation it would have near e = -1.
"""

from __future__ import annotations

from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp
from fusegrad.uop.upat import PatternMatcher, UPat


def _is_one_plus(d: UOp, e: UOp) -> bool:
    """d is 1/(1 + e) (either order of the sum)."""
    if d.op is not Ops.RECIPROCAL or d.src[0].op is not Ops.ADD:
        return False
    a, b = d.src[0].src
    return (a is e and b.op is Ops.CONST and b.arg == 1) or (b is e and a.op is Ops.CONST and a.arg == 1)


def _logistic_of_large(e: UOp) -> UOp:
    """e / (1 + e) as 1 / (1 + 1/e): exactly 1 at e = inf, within 1.5 ulp of float64 for e >= 1."""
    return (e.reciprocal() + 1).reciprocal()


def logistic(e: UOp, d: UOp) -> UOp | None:
    """e * (1/(1+e)) -> e < 1 ? e * d : 1/(1 + 1/e)."""
    if not _is_one_plus(d, e):
        return None
    # the kept product is built as d * e: this rule matches e * d only, so it does not fire on its own output
    return (e < 1).where(UOp(Ops.MUL, e.dtype, (d, e)), _logistic_of_large(e))


def _upstream(term: UOp, factor: UOp) -> UOp | None:
    """The g of term = g * factor (1 when term is factor itself), else None."""
    if term is factor:
        return factor.const_like(1)
    if term.op is Ops.MUL and factor in term.src:
        return term.src[1] if term.src[0] is factor else term.src[0]
    return None


def _gradient_terms(first: UOp, second: UOp, e: UOp) -> tuple[UOp, UOp] | None:
    """(g, d) when first + second is g*d + ((g*e * -1) * d) * d with d = 1/(1+e), else None."""
    if second.op is not Ops.MUL or second.src[0].op is not Ops.MUL:
        return None
    d = second.src[1]
    negated, d_again = second.src[0].src
    if d_again is not d or not _is_one_plus(d, e) or negated.op is not Ops.MUL:
        return None
    if negated.src[1].op is not Ops.CONST or negated.src[1].arg != -1:
        return None
    g = _upstream(first, d)
    return (g, d) if g is not None and g is _upstream(negated.src[0], e) else None


def logistic_gradient(grad: UOp, e: UOp) -> UOp | None:
    """(g*d + ((g*e * -1) * d) * d) * e -> e < 1 ? e * (...) : g * (1/(1 + 1/e)) * d, the derivative g*e/(1+e)^2.

    The sum is what autograd builds for the gradient of e * d with respect to e (upstream g, 1 when folded away);
    exp's own rule then multiplies by e. Algebra: g*d - g*e*d^2 = g*d*(1 - e*d) = g*d*d, times e is g*(e*d)*d.
    """
    a, b = grad.src
    if (terms := _gradient_terms(a, b, e) or _gradient_terms(b, a, e)) is None:
        return None
    g, d = terms
    limit = _logistic_of_large(e) * d
    # the kept product is built as e * grad: this rule matches grad * e only, so it does not fire on its own output
    return (e < 1).where(UOp(Ops.MUL, e.dtype, (e, grad)), limit if g.op is Ops.CONST and g.arg == 1 else g * limit)


# e/(1+e) of an exponential and its gradient: their limit forms where e >= 1 (see the module docstring). Used by
# `sym`; each matches one operand order and keeps the product in the other, so neither fires on its own output.
pm_logistic = PatternMatcher([
    (UPat(Ops.MUL, src=(UPat(Ops.EXP2, name="e"), UPat(Ops.RECIPROCAL, name="d"))),
     logistic),  # e * 1/(1+e) -> e < 1 ? e * d : 1/(1 + 1/e)
    (UPat(Ops.MUL, src=(UPat(Ops.ADD, name="grad"), UPat(Ops.EXP2, name="e"))),
     logistic_gradient),  # (g*d - g*e*d*d) * e -> e < 1 ? e * (...) : g * 1/(1 + 1/e) * d
])  # fmt: skip
