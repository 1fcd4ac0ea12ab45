"""Tests for fusegrad/uop/logistic.py: e / (1 + e) of an exponential and its gradient keep every digit where the
product form is accurate (e < 1: the same bits) and stay within a few ulp of float64 where it is not (e >= 1,
including e = inf, where the product form gives NaN); the rules fire only on their shapes and never on their own
output. The reference's test_sigmoid_alt_extreme is the motivating case."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fusegrad import Tensor
from fusegrad.dtype import dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym

LOG2E = np.float32(1.4426950408889634)
LN2 = np.float32(0.6931471805599453)
DEVICES = ["CPU", "PYTHON"]

# float32 x over the whole range where exp(x) goes from 0 through denormals to inf, plus the special values
_SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 88.0, 88.8, 89.0, -87.0, -100.0, -103.0, 300.0]
_inputs = hnp.arrays(
    np.float32,
    st.integers(1, 48),
    elements=st.one_of(
        st.floats(-110, 110, width=32), st.floats(-1e6, 1e6, width=32), st.sampled_from(_SPECIAL).map(np.float32)
    ),
)


def alt_sigmoid(x: Tensor) -> Tensor:
    return x.exp() / (1 + x.exp())


def exact_exp(x: np.ndarray) -> np.ndarray:
    """float64 exp of x as the kernel evaluates it: exp2 of the float32 product x * log2(e), exactly, and inf where
    the float32 result overflows (from there the kernel's e is inf, whatever the formula after it)."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp2((x * LOG2E).astype(np.float64))
        return np.where(np.isinf(e.astype(np.float32)), np.inf, e)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in float32 ulps of want (denormal spacing below 2**-126; 0 where both are the same NaN/inf)."""
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - want) / spacing
    same = (np.isnan(got) & np.isnan(want)) | (got == want)
    return np.where(same, 0.0, err)


def _forward_and_gradient(x: np.ndarray, device: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = Tensor(x, device=device)
    out = alt_sigmoid(t)
    (grad,) = out.sum().gradient(t)
    return t.exp().numpy(), out.numpy(), grad.numpy()


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(x=_inputs)
def test_alt_sigmoid_within_a_few_ulp_of_float64(device: str, x: np.ndarray) -> None:
    """Forward within 4 ulp and gradient within 8 ulp of float64 (from the kernel's own exp argument), everywhere:
    the product form's gradient is off by up to 1e38 ulp for e >= 1 and NaN at e = inf."""
    _, out, grad = _forward_and_gradient(x, device)
    e = exact_exp(x)
    with np.errstate(invalid="ignore", over="ignore"):
        want_out = np.where(np.isinf(e), 1.0, e / (1 + e))
        want_grad = np.where(np.isinf(e), 0.0, e / (1 + e) ** 2) * np.float64(LN2) * np.float64(LOG2E)
    assert ulps(out, want_out).max(initial=0) <= 4, (x, out, want_out)
    assert ulps(grad, want_grad).max(initial=0) <= 8, (x, grad, want_grad)


@settings(max_examples=25, deadline=None)
@given(x=_inputs)
def test_alt_sigmoid_keeps_the_product_bits_below_one(x: np.ndarray) -> None:
    """Where e < 1 the rules keep the product form: the same bits as e * (1/(1+e)) and its autograd expression in
    float32, from the kernel's own e (PYTHON: each op rounds to float32, no fused multiply-add)."""
    e, out, grad = _forward_and_gradient(x, "PYTHON")
    one, minus_one = np.float32(1), np.float32(-1)
    with np.errstate(all="ignore"):
        d = one / (one + e)
        product = e * d
        autograd = (d + ((e * minus_one) * d) * d) * e * LN2 * LOG2E
    below = e < 1
    np.testing.assert_array_equal(out[below], product[below])
    np.testing.assert_array_equal(grad[below], autograd[below])


@pytest.mark.parametrize("device", DEVICES)
def test_alt_sigmoid_extreme(device: str) -> None:
    """The reference's test_sigmoid_alt_extreme: exp(300) is inf in float32; the value is 1 and the gradient 0."""
    for value, expected in ((300.0, 1.0), (-300.0, 0.0)):
        x = Tensor([value], device=device)
        assert alt_sigmoid(x).item() == expected
        assert alt_sigmoid(x)[0].gradient(x)[0].item() == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_alt_sigmoid_gradient_with_an_upstream_factor(device: str) -> None:
    """With an upstream gradient g the sum is g*d - g*e*d*d; the rule keeps g (value checked at e = inf and 1)."""
    x = Tensor([300.0, 0.0], device=device)
    w = Tensor([3.0, 5.0], device=device)
    (grad,) = (alt_sigmoid(x) * w).sum().gradient(x)
    np.testing.assert_allclose(grad.numpy(), [0.0, 5 * 0.25], rtol=1e-6)


def _e_and_d() -> tuple[UOp, UOp]:
    x = UOp(Ops.DEFINE_VAR, dtypes.float, arg=("x", -1e3, 1e3))
    e = (x * 1.4426950408889634).exp2()
    return e, (e + 1).reciprocal()


def test_rules_fire_once_and_only_on_their_shape() -> None:
    e, d = _e_and_d()
    rewritten = graph_rewrite(e * d, sym)
    assert rewritten.op is Ops.WHERE  # e < 1 ? d * e : 1/(1 + 1/e), and no rule fires on d * e again
    assert rewritten.src[1].op is Ops.MUL
    assert rewritten.src[1].src == (d, e)
    untouched = [e * (e + 2).reciprocal(), d * e, e.src[0] * (e.src[0] + 1).reciprocal()]
    for expr in untouched:  # 1/(2+e), the other operand order, a base that may be negative
        assert graph_rewrite(expr, sym) is graph_rewrite(expr, sym, name="again")
        assert Ops.WHERE not in {u.op for u in graph_rewrite(expr, sym).toposort()}
