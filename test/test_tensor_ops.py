"""Tests for fusegrad/tensor.py: every op of the core Tensor API against numpy, on the CPU and PYTHON devices.

Inputs are small random arrays of several shapes (scalars, size-0 and size-1 axes) in float32, float16, int32 and
bool. Shapes come from short fixed lists so the CPU compile cache is reused between runs (each new kernel costs a
C compile); PYTHON interprets every kernel, so its inputs stay tiny.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import GlobalCounters
from fusegrad.mixin import traced
from fusegrad.uop import Ops
from fusegrad.uop.ops import all_metadata
from test.shared import assert_matches

DEVICES = ("CPU", "PYTHON")
DTYPES: dict[str, DType] = {
    "float32": dtypes.float32,
    "float16": dtypes.float16,
    "int32": dtypes.int32,
    "bool": dtypes.bool,
}
NP_DTYPES: dict[DType, Any] = {
    dtypes.float32: np.float32,
    dtypes.float16: np.float16,
    dtypes.int32: np.int32,
    dtypes.bool: np.bool_,
    dtypes.int8: np.int8,
}
HYPOTHESIS = settings(max_examples=20, deadline=None)  # each example is a new kernel: a C compile on a cold cache


# *** helpers ***


def rand(shape: tuple[int, ...], dt: DType, seed: int = 0, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    """A random array of `dt`: floats in [low, high), ints in [low, high] (never 0 when low > 0), bools half True."""
    rng = np.random.default_rng(seed)
    if dt == dtypes.bool:
        return np.asarray(rng.random(shape) < 0.5)
    if dtypes.is_int(dt):
        return np.asarray(rng.integers(int(low), int(high), size=shape, endpoint=True), dtype=NP_DTYPES[dt])
    return np.asarray(rng.uniform(low, high, size=shape), dtype=NP_DTYPES[dt])


def nonzero(shape: tuple[int, ...], dt: DType, seed: int = 1) -> np.ndarray:
    """Random values bounded away from zero (divisors): magnitude in [1, 4], random sign."""
    magnitude = rand(shape, dt, seed, 1, 4)
    sign = np.where(np.random.default_rng(seed + 100).random(shape) < 0.5, -1, 1).astype(magnitude.dtype)
    return np.asarray(magnitude * sign)


def tensor(arr: np.ndarray, device: str) -> Tensor:
    """`Tensor(arr)`, except that a 0-d array goes in as one element and is reshaped: Tensor(0-d array) is buggy
    (see test_create_from_numpy) and the other tests should not all fail with it."""
    return Tensor(arr, device=device) if arr.ndim else Tensor(arr.reshape(1), device=device).reshape(())


def trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C integer division: the quotient rounded toward zero."""
    return np.trunc(a.astype(np.float64) / b.astype(np.float64)).astype(np.result_type(a, b))


# *** creation ***


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("value", "dtype"), [(3.5, dtypes.float32), (-7, dtypes.int32), (True, dtypes.bool), (0.0, dtypes.float32)]
)
def test_create_from_python_scalar(device: str, value: float, dtype: DType) -> None:
    t = Tensor(value, device=device)
    assert (t.shape, t.dtype, t.device, t.ndim, t.numel()) == ((), dtype, device, 0, 1)
    assert t.item() == value
    assert t.tolist() == value
    assert_matches(t, np.array(value, dtype=NP_DTYPES[dtype]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        ([[1, 2, 3], [4, 5, 6]], dtypes.int32),
        ([1.5, -2.0, 0.25], dtypes.float32),
        ([1, 2.5], dtypes.float32),
        ([[True], [False]], dtypes.bool),
        ([], dtypes.float32),
        ([[]], dtypes.float32),
        ((1, 2), dtypes.int32),
    ],
)
def test_create_from_list(device: str, data: Any, dtype: DType) -> None:
    t = Tensor(data, device=device)
    ref = np.array(data, dtype=NP_DTYPES[dtype])
    assert (t.shape, t.dtype, t.device) == (ref.shape, dtype, device)
    assert_matches(t, ref)
    assert t.tolist() == ref.tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_create_from_list_with_dtype(device: str, dtype: DType) -> None:
    data = [[0, 1, 2], [-3, 0, 5]]
    assert_matches(Tensor(data, device=device, dtype=dtype), np.array(data).astype(NP_DTYPES[dtype]), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [*DTYPES.values(), dtypes.int8], ids=[*DTYPES.keys(), "int8"])
@pytest.mark.parametrize(
    "shape",
    [
        (),
        (1,),
        (3,),
        (2, 3),
        (0,),
        (2, 0, 3),
        (1, 1, 4),
    ],
    ids=str,
)
def test_create_from_numpy(device: str, dtype: DType, shape: tuple[int, ...]) -> None:
    arr = rand(shape, dtype)
    t = Tensor(arr, device=device)
    assert (t.shape, t.dtype, t.device) == (shape, dtype, device)
    assert_matches(t, arr)


def test_create_from_numpy_copies_and_accepts_views() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(arr[:, ::2])  # a non-contiguous view
    arr[:] = -1
    assert_matches(t, np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2])


def test_numpy_returns_a_copy() -> None:
    t = Tensor([1.0, 2.0])
    out = t.numpy()
    out[0] = 100
    assert t.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.float16])
@pytest.mark.parametrize("shape", [(), (3,), (2, 0, 4)])
def test_empty_has_shape_and_dtype(device: str, dtype: DType, shape: tuple[int, ...]) -> None:
    t = Tensor.empty(*shape, device=device, dtype=dtype)
    assert (t.shape, t.dtype, t.device, t.numel()) == (shape, dtype, device, math.prod(shape))
    assert Tensor.empty(2, 3).dtype == dtypes.float32


@pytest.mark.parametrize("device", DEVICES)
def test_empty_numpy_has_the_shape(device: str) -> None:
    """The values are undefined, but reading them works (as in tinygrad) and gives the right shape and dtype."""
    out = Tensor.empty(2, 3, device=device, dtype=dtypes.int32).numpy()
    assert (out.shape, out.dtype) == ((2, 3), np.int32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (2, 3), (2, 0, 3)])
def test_zeros_ones(device: str, shape: tuple[int, ...]) -> None:
    assert_matches(Tensor.zeros(*shape, device=device), np.zeros(shape, np.float32), dtypes.float32)
    assert_matches(Tensor.ones(shape, device=device), np.ones(shape, np.float32), dtypes.float32)
    assert_matches(Tensor.zeros(*shape, device=device, dtype=dtypes.int32), np.zeros(shape, np.int32), dtypes.int32)
    assert_matches(Tensor.ones(*shape, device=device, dtype=dtypes.bool), np.ones(shape, np.bool_), dtypes.bool)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("fill", "dtype", "expected_dtype"),
    [
        (2.5, None, dtypes.float32),
        (-3, None, dtypes.int32),
        (True, None, dtypes.bool),
        (7, dtypes.float16, dtypes.float16),
        (1.75, dtypes.int32, dtypes.int32),
    ],
)
@pytest.mark.parametrize("shape", [(), (2, 3), (0, 2)])
def test_full(device: str, fill: Any, dtype: DType | None, expected_dtype: DType, shape: tuple[int, ...]) -> None:
    t = Tensor.full(shape, fill, device=device, dtype=dtype)
    assert_matches(t, np.full(shape, fill).astype(NP_DTYPES[expected_dtype]), expected_dtype)


def test_full_int_shape() -> None:
    assert_matches(Tensor.full(3, 4.0), np.full(3, 4.0, np.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "args",
    [
        (5,),
        (0,),
        (2, 10, 3),
        (10, 2, -2),
        (-3, 4),
        (5, 5),
        (3, 0),
        (0, 10, 20),
        (0.5, 3.0, 0.5),
        (1.0, -1.0, -0.25),
        (2.5,),
    ],
    ids=str,
)
def test_arange(device: str, args: tuple[float, ...]) -> None:
    ref = np.arange(*args)
    expected = dtypes.int32 if ref.dtype.kind == "i" else dtypes.float32
    assert_matches(Tensor.arange(*args, device=device), ref.astype(NP_DTYPES[expected]), expected)


def test_arange_with_dtype() -> None:
    assert_matches(Tensor.arange(4, dtype=dtypes.float16), np.arange(4, dtype=np.float16), dtypes.float16)
    assert_matches(Tensor.arange(1, 7, 2, dtype="float32"), np.arange(1, 7, 2, dtype=np.float32), dtypes.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_like_constructors(device: str, dtype: DType) -> None:
    src = Tensor(rand((2, 3), dtype), device=device)
    np_dt = NP_DTYPES[dtype]
    assert_matches(src.zeros_like(), np.zeros((2, 3), np_dt), dtype)
    assert_matches(src.ones_like(), np.ones((2, 3), np_dt), dtype)
    assert_matches(src.full_like(1), np.full((2, 3), 1).astype(np_dt), dtype)
    empty = src.empty_like()
    assert (empty.shape, empty.dtype, empty.device) == ((2, 3), dtype, device)
    for t in (src.zeros_like(), src.ones_like(), src.full_like(1), empty):
        assert t.device == device
    assert_matches(src.ones_like(dtype=dtypes.int32), np.ones((2, 3), np.int32), dtypes.int32)


# *** elementwise binary ops ***

BINARY_SHAPES = [((2, 1, 3), (4, 1)), ((), (3,)), ((0, 3), (1, 3))]  # size-1 axes broadcast in the first pair


def _np_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) / b.astype(np.float64)


# name -> (fusegrad op, numpy reference, dtypes it applies to, needs a non-zero right operand)
BINARY_OPS: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any], tuple[str, ...], bool]] = {
    "add": (lambda a, b: a + b, np.add, ("float32", "float16", "int32", "bool"), False),
    "sub": (lambda a, b: a - b, np.subtract, ("float32", "float16", "int32"), False),
    "mul": (lambda a, b: a * b, np.multiply, ("float32", "float16", "int32", "bool"), False),
    "div": (lambda a, b: a / b, _np_div, ("float32", "float16", "int32"), True),
    "idiv": (lambda a, b: a.idiv(b), trunc_div, ("int32",), True),
    "mod": (lambda a, b: a.mod(b), np.mod, ("int32", "float32"), True),  # floor semantics, as the reference
    "floordiv": (lambda a, b: a // b, np.floor_divide, ("int32", "float32"), True),
    "floormod": (lambda a, b: a % b, np.mod, ("int32", "float32"), True),
    "maximum": (lambda a, b: a.maximum(b), np.maximum, ("float32", "float16", "int32", "bool"), False),
    "minimum": (lambda a, b: a.minimum(b), np.minimum, ("float32", "float16", "int32", "bool"), False),
    "lt": (lambda a, b: a < b, np.less, ("float32", "float16", "int32", "bool"), False),
    "gt": (lambda a, b: a > b, np.greater, ("float32", "float16", "int32", "bool"), False),
    "le": (lambda a, b: a <= b, np.less_equal, ("float32", "float16", "int32", "bool"), False),
    "ge": (lambda a, b: a >= b, np.greater_equal, ("float32", "float16", "int32", "bool"), False),
    "eq": (lambda a, b: a == b, np.equal, ("float32", "float16", "int32", "bool"), False),
    "ne": (lambda a, b: a != b, np.not_equal, ("float32", "float16", "int32", "bool"), False),
    "and": (lambda a, b: a & b, np.bitwise_and, ("int32", "bool"), False),
    "or": (lambda a, b: a | b, np.bitwise_or, ("int32", "bool"), False),
    "xor": (lambda a, b: a ^ b, np.bitwise_xor, ("int32", "bool"), False),
}
BINARY_CASES = [(op, dt) for op, (_, _, dts, _) in BINARY_OPS.items() for dt in dts]
COMPARISONS = ("lt", "gt", "le", "ge", "eq", "ne")


def binary_result_dtype(op: str, dt: DType) -> DType:
    if op in COMPARISONS:
        return dtypes.bool
    if op == "div" and not dtypes.is_float(dt):
        return dtypes.float32
    return dt


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize(("op", "dtype_name"), BINARY_CASES, ids=[f"{o}-{d}" for o, d in BINARY_CASES])
def test_binary_op(device: str, shapes: tuple[tuple[int, ...], ...], op: str, dtype_name: str) -> None:
    fg_op, np_op, _, needs_nonzero = BINARY_OPS[op]
    dt = DTYPES[dtype_name]
    a = rand(shapes[0], dt, seed=2)
    b = nonzero(shapes[1], dt) if needs_nonzero else rand(shapes[1], dt, seed=3)
    if op in COMPARISONS and dtypes.is_float(dt):
        b.reshape(-1)[::2] = a.reshape(-1)[0] if a.size else 0  # make == and != hit equal values too
    ref = np_op(a, b)
    out = fg_op(tensor(a, device), tensor(b, device))
    assert_matches(out, ref.astype(NP_DTYPES[binary_result_dtype(op, dt)]), binary_result_dtype(op, dt))


@pytest.mark.parametrize("device", DEVICES)
def test_idiv_truncates_toward_zero_and_mod_floors(device: str) -> None:
    """idiv is C's (toward zero): -7 idiv 2 == -3; mod is the reference's (and %'s): the sign of the divisor,
    -7 mod 2 == 1; the operator // is Python's floor division."""
    a = Tensor([-7, 7, -7, 7, 0, -1, 6], device=device)
    b = Tensor([2, 2, -2, -2, 3, 4, -3], device=device)
    assert a.idiv(b).tolist() == [-3, 3, 3, -3, 0, 0, -2]
    assert a.mod(b).tolist() == [1, 1, -1, -1, 0, 3, 0]
    assert a.idiv(3).tolist() == trunc_div(np.array([-7, 7, -7, 7, 0, -1, 6]), np.array(3)).tolist()
    na, nb = np.array([-7, 7, -7, 7, 0, -1, 6]), np.array([2, 2, -2, -2, 3, 4, -3])
    assert (a // b).tolist() == (na // nb).tolist()
    assert (a % b).tolist() == (na % nb).tolist()
    assert (20 // Tensor([3, -3, 7], device=device)).tolist() == [6, -7, 2]
    assert (20 % Tensor([3, -3, 7], device=device)).tolist() == [2, -1, 6]


@HYPOTHESIS
@given(
    shapes=st.lists(st.sampled_from([0, 1, 2, 3]), min_size=0, max_size=3).flatmap(
        lambda out: st.tuples(*[broadcastable_to(tuple(out)) for _ in range(2)])
    )
)
def test_broadcasting_random_shapes(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a, b = rand(shapes[0], dtypes.float32, 20), rand(shapes[1], dtypes.float32, 21)
    assert_matches(tensor(a, "CPU") * tensor(b, "CPU") + 1, a * b + 1)


def broadcastable_to(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes that broadcast to `shape`: a suffix of it with some axes set to 1."""
    return st.integers(0, len(shape)).flatmap(
        lambda n: st.tuples(*[st.sampled_from([s, 1]) for s in shape[len(shape) - n :]])
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("fn", "ref", "dtype"),
    [
        (lambda t: t + 2, lambda a: a + 2, dtypes.int32),
        (lambda t: 2 - t, lambda a: 2 - a, dtypes.int32),
        (lambda t: t * 0.5, lambda a: a * 0.5, dtypes.float32),
        (lambda t: t / 2, lambda a: a / 2, dtypes.float32),
        (lambda t: 12 / t, lambda a: 12 / a, dtypes.float32),
        (lambda t: t % 3, lambda a: np.mod(a, 3), dtypes.int32),
        (lambda t: t < 1, lambda a: a < 1, dtypes.bool),
        (lambda t: t >= 1, lambda a: a >= 1, dtypes.bool),
        (lambda t: t == 2, lambda a: a == 2, dtypes.bool),
        (lambda t: t & 6, lambda a: a & 6, dtypes.int32),
        (lambda t: 5 | t, lambda a: 5 | a, dtypes.int32),
        (lambda t: t.maximum(0), lambda a: np.maximum(a, 0), dtypes.int32),
        (lambda t: t.minimum(1.5), lambda a: np.minimum(a, 1.5), dtypes.float32),
    ],
)
def test_binary_op_with_python_scalar(
    device: str, fn: Callable[[Any], Any], ref: Callable[[Any], Any], dtype: DType
) -> None:
    a = np.array([[-3, -1, 1], [2, 3, 4]], dtype=np.int32)
    assert_matches(fn(tensor(a, device)), np.asarray(ref(a)).astype(NP_DTYPES[dtype]), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_float_tensor_with_python_scalars_keeps_dtype(device: str) -> None:
    a = rand((4,), dtypes.float16)
    t = tensor(a, device)
    assert_matches(t * 3, a * np.float16(3), dtypes.float16)
    assert_matches(t + 0.5, a + np.float16(0.5), dtypes.float16)
    assert_matches(1 - t, np.float16(1) - a, dtypes.float16)


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_dtype_promotion(device: str) -> None:
    i = np.array([1, -2, 3], dtype=np.int32)
    f = np.array([0.5, 0.25, -1.5], dtype=np.float32)
    h = np.array([0.5, 2, -1], dtype=np.float16)
    b = np.array([True, False, True])
    assert_matches(tensor(i, device) + tensor(f, device), i + f, dtypes.float32)
    assert_matches(tensor(f, device) * tensor(h, device), f * h.astype(np.float32), dtypes.float32)
    assert_matches(tensor(b, device) + tensor(i, device), b + i, dtypes.int32)
    assert_matches(tensor(i, device) + tensor(h, device), i + h.astype(np.float32), dtypes.float16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32])
@pytest.mark.parametrize(("shape", "x_shape", "y_shape"), [((2, 3), (3,), (2, 1)), ((), (), ()), ((0, 2), (1, 2), ())])
def test_where(
    device: str, dtype: DType, shape: tuple[int, ...], x_shape: tuple[int, ...], y_shape: tuple[int, ...]
) -> None:
    cond, x, y = rand(shape, dtypes.bool, 4), rand(x_shape, dtype, 5), rand(y_shape, dtype, 6)
    out = tensor(cond, device).where(tensor(x, device), tensor(y, device))
    assert_matches(out, np.where(cond, x, y), dtype)


def _where_graph(cond: Tensor, x: Any, y: Any) -> list[tuple[bytes, Any]]:
    """Every node of `cond.where(x, y)` by content, with its label's name."""
    out = cond.where(x, y)
    return [(u.key, tuple(m.name for m in all_metadata.get(u) or ())) for u in out.uop.toposort()]


@pytest.mark.parametrize(
    ("cond_shape", "x", "y"),
    [((4, 1, 3), (2, 3), 0.5), ((3,), -1, (2, 3)), ((2, 3), (2, 3), (1, 3)), ((2, 1), 0, (1, 3)), ((1,), 2.0, (3,))],
)
def test_where_builds_the_general_paths_nodes_and_labels(
    monkeypatch: pytest.MonkeyPatch, cond_shape: tuple[int, ...], x: Any, y: Any
) -> None:
    """where's direct path (bool condition, values of one dtype or numbers of its kind) builds the nodes, in the same
    order, with the same labels, as the general path (tensors per operand); the values stay numpy's."""
    rng = np.random.default_rng(0)
    cond = Tensor(rng.random(cond_shape) < 0.5).realize()
    values = [Tensor(rng.random(v).astype(np.float32)).realize() if isinstance(v, tuple) else v for v in (x, y)]
    direct = _where_graph(cond, *values)
    monkeypatch.setattr(Tensor, "_where_uop", lambda *args: None)
    assert _where_graph(cond, *values) == direct
    arrays = [v.numpy() if isinstance(v, Tensor) else v for v in values]
    monkeypatch.undo()
    np.testing.assert_array_equal(cond.where(*values).numpy(), np.where(cond.numpy(), *arrays).astype(np.float32))


@pytest.mark.parametrize(
    ("x_shape", "w_shape"), [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,))]
)
def test_dot_builds_the_nodes_and_labels_of_its_formula(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> None:
    """dot's nodes, built without reshape's and transpose's argument handling, are those of its formula written with
    them (x (..., n, 1, k) times w moved to (..., 1, m, k), summed over k), in order and labelled alike."""

    @traced
    def dot(x: Tensor, w: Tensor) -> Tensor:  # the formula, labelled as Tensor.dot labels its nodes
        ones = [1] * min(x.ndim - 1, w.ndim - 1, 1)
        xr = x.reshape(*x.shape[:-1], *ones, x.shape[-1])
        wt = w.reshape(*w.shape[:-2], *ones, *w.shape[-min(w.ndim, 2) :]).transpose(-1, -min(w.ndim, 2))
        return (xr * wt).sum(-1)

    def graph(out: Tensor) -> list[tuple[bytes, Any]]:
        return [(u.key, tuple(m.name for m in all_metadata.get(u) or ())) for u in out.uop.toposort()]

    rng = np.random.default_rng(1)
    x, w = (Tensor(rng.random(s).astype(np.float32)).realize() for s in (x_shape, w_shape))
    built = graph(x.dot(w))
    assert built == graph(dot(x, w))
    np.testing.assert_allclose(x.dot(w).numpy(), x.numpy() @ w.numpy(), rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_where_with_scalars(device: str) -> None:
    cond = np.array([[True, False, True]])
    c = tensor(cond, device)
    assert_matches(c.where(1.5, -2.0), np.where(cond, 1.5, -2.0).astype(np.float32), dtypes.float32)
    assert_matches(c.where(3, 4), np.where(cond, 3, 4).astype(np.int32), dtypes.int32)
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    assert_matches(c.where(tensor(x, device), 0), np.where(cond, x, 0), dtypes.float32)
    ints = np.array([0, 3, -1], dtype=np.int32)  # a non-bool condition: non-zero is True
    assert_matches(tensor(ints, device).where(1.0, 0.0), np.where(ints, 1.0, 0.0).astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_logical_not(device: str, dtype: DType) -> None:
    a = rand((2, 3), dtype, 7, -1, 1)
    a.reshape(-1)[0] = 0
    assert_matches(tensor(a, device).logical_not(), np.logical_not(a), dtypes.bool)


@pytest.mark.parametrize("device", DEVICES)
def test_bitwise_on_negative_ints(device: str) -> None:
    a = np.array([-1, -2, 3, 0x7FFF0000, -(2**31)], dtype=np.int32)
    b = np.array([1, -5, 6, 0x0F0F0F0F, -1], dtype=np.int32)
    ta, tb = tensor(a, device), tensor(b, device)
    assert_matches(ta & tb, a & b, dtypes.int32)
    assert_matches(ta | tb, a | b, dtypes.int32)
    assert_matches(ta ^ tb, a ^ b, dtypes.int32)


# *** elementwise unary ops ***

# name -> (fusegrad op, numpy reference, input range)
UNARY_OPS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], tuple[float, float]]] = {
    "neg": (lambda t: -t, np.negative, (-3, 3)),
    "exp": (lambda t: t.exp(), np.exp, (-3, 3)),
    "log": (lambda t: t.log(), np.log, (0.1, 5)),
    "exp2": (lambda t: t.exp2(), np.exp2, (-3, 3)),
    "log2": (lambda t: t.log2(), np.log2, (0.1, 5)),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, (0, 5)),
    "sin": (lambda t: t.sin(), np.sin, (-3, 3)),
    "reciprocal": (lambda t: t.reciprocal(), np.reciprocal, (0.5, 4)),
    "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0), (-3, 3)),
    "abs": (lambda t: t.abs(), np.abs, (-3, 3)),
    "sigmoid": (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), (-4, 4)),
    "tanh": (lambda t: t.tanh(), np.tanh, (-3, 3)),
    "square": (lambda t: t.square(), np.square, (-3, 3)),
}
INT_CLOSED_UNARY = ("neg", "relu", "abs", "square")  # stay int32 on int32 input; the rest promote to float32
UNARY_SHAPES = [(2, 3), (), (0, 4), (1, 1)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_float(device: str, shape: tuple[int, ...], dtype_name: str, op: str) -> None:
    fg_op, np_op, (low, high) = UNARY_OPS[op]
    dt = DTYPES[dtype_name]
    a = rand(shape, dt, 8, low, high)
    ref = np_op(a.astype(np.float64))
    assert_matches(fg_op(tensor(a, device)), ref.astype(NP_DTYPES[dt]), dt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_int(device: str, op: str) -> None:
    fg_op, np_op, (low, high) = UNARY_OPS[op]
    a = rand((2, 3), dtypes.int32, 9, math.ceil(low), math.floor(high))
    if op in ("log", "log2", "reciprocal"):
        a = np.maximum(a, 1)
    ref = np_op(a.astype(np.float64))
    expected = dtypes.int32 if op in INT_CLOSED_UNARY else dtypes.float32
    assert_matches(fg_op(tensor(a, device)), ref.astype(NP_DTYPES[expected]), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_unary_special_values(device: str) -> None:
    a = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan], dtype=np.float32)
    t = tensor(a, device)
    with np.errstate(all="ignore"):
        assert_matches(t.exp2(), np.exp2(a))
        assert_matches(t.sqrt(), np.sqrt(a))
        assert_matches(t.log2(), np.log2(a))
        assert_matches(t.reciprocal(), np.reciprocal(a))
        assert_matches(t.relu(), np.maximum(a, 0))  # NaN stays NaN, as torch.relu and numpy's maximum


@pytest.mark.parametrize(
    ("op", "device"),
    [("maximum", "CPU"), ("maximum", "PYTHON"), ("minimum", "CPU"), ("minimum", "PYTHON")],
)
def test_maximum_minimum_propagate_nan(op: str, device: str) -> None:
    a = np.array([1.0, np.nan, -1.0], dtype=np.float32)
    assert_matches(getattr(tensor(a, device), op)(0.0), getattr(np, op)(a, np.float32(0)))


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_float32_constants_are_float32(device: str) -> None:
    """9 * 0.1 in float32 is 0.90000004: the constant 0.1 must be rounded to float32 first, as in C and numpy."""
    out = (tensor(np.array([9.0], np.float32), device) * 0.1).item()
    assert out == float(np.float32(9) * np.float32(0.1))


@pytest.mark.parametrize("device", DEVICES)
def test_neg_and_abs_of_bool(device: str) -> None:
    """tinygrad: -bool is logical_not; abs(bool) is the identity."""
    a = np.array([True, False])
    assert_matches(-tensor(a, device), np.logical_not(a), dtypes.bool)
    assert_matches(tensor(a, device).abs(), a, dtypes.bool)


# *** cast and bitcast ***

CAST_INPUT = np.array([-2.7, -1.0, -0.5, 0.0, 0.4, 1.0, 2.5, 3.9, 100.25], dtype=np.float32)


def cast_source(dt: DType) -> np.ndarray:
    if dt == dtypes.bool:
        return CAST_INPUT != 0
    if dt == dtypes.int32:
        return np.array([-3, -1, 0, 0, 1, 2, 7, 300, -128], dtype=np.int32)
    return CAST_INPUT.astype(NP_DTYPES[dt])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("src_name", DTYPES)
@pytest.mark.parametrize("dst_name", DTYPES)
def test_cast(device: str, src_name: str, dst_name: str) -> None:
    """Float to int truncates toward zero (as C and numpy's astype do); anything to bool is `!= 0`."""
    a = cast_source(DTYPES[src_name])
    dst = DTYPES[dst_name]
    out = tensor(a, device).cast(dst)
    assert_matches(out, a.astype(NP_DTYPES[dst]), dst, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_cast_shorthands(device: str) -> None:
    t = Tensor([1.5, -2.5, 0.0], device=device)
    assert (t.float().dtype, t.half().dtype, t.int().dtype, t.bool().dtype) == (
        dtypes.float32,
        dtypes.float16,
        dtypes.int32,
        dtypes.bool,
    )
    assert t.int().tolist() == [1, -2, 0]
    assert t.bool().tolist() == [True, True, False]
    assert t.cast("float16").dtype == dtypes.float16


@pytest.mark.parametrize("device", DEVICES)
def test_bitcast_float32_int32(device: str) -> None:
    f = np.array([1.0, -2.5, 0.0, np.inf, 3.1415927], dtype=np.float32)
    assert_matches(tensor(f, device).bitcast(dtypes.int32), f.view(np.int32), dtypes.int32)
    i = np.array([0x3F800000, -1082130432, 0, 1, 0x7F7FFFFF], dtype=np.int32)
    assert_matches(tensor(i, device).bitcast(dtypes.float32), i.view(np.float32), dtypes.float32, rtol=0, atol=0)
    # a bitcast of a computed value, not just of a loaded buffer
    assert_matches((tensor(f, device) * 2).bitcast("int32"), (f * 2).view(np.int32), dtypes.int32)


# *** reductions ***

# (axis, keepdim): keepdim alternates so every axis kind is seen with and without it, at half the kernels
REDUCE_AXES: list[tuple[Any, bool]] = [
    (None, False),
    (None, True),
    (0, True),
    (-1, False),
    ((0, 2), True),
    ((-1, -3), False),
]


def np_reduce(op: str, a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    ax = tuple(axis) if isinstance(axis, tuple) else axis
    match op:
        case "sum":
            acc = np.float64 if a.dtype.kind == "f" else np.int64
            return np.sum(a, axis=ax, keepdims=keepdims, dtype=acc)
        case "max":
            return np.max(a, axis=ax, keepdims=keepdims)
        case "min":
            return np.min(a, axis=ax, keepdims=keepdims)
        case "mean":
            return np.mean(a.astype(np.float64), axis=ax, keepdims=keepdims)
    raise AssertionError(op)


def reduce_result_dtype(op: str, dt: DType) -> DType:
    if op == "sum" and dt in (dtypes.bool, dtypes.int8):
        return dtypes.int32
    if op == "mean" and not dtypes.is_float(dt):
        return dtypes.float32
    return dt


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("axis", "keepdim"), REDUCE_AXES, ids=str)
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_reduce(device: str, axis: Any, keepdim: bool, dtype_name: str, op: str) -> None:
    dt = DTYPES[dtype_name]
    a = rand((2, 3, 4), dt, 10)
    expected = reduce_result_dtype(op, dt)
    rtol = 2e-2 if dt == dtypes.float16 else None  # a float16 accumulator rounds at every step
    ref = np_reduce(op, a, axis, keepdim).astype(NP_DTYPES[expected])
    t = tensor(a, device)
    out = getattr(t, op)(axis, keepdim=keepdim) if axis is not None else getattr(t, op)(keepdim=keepdim)
    assert_matches(out, ref, expected, rtol=rtol, atol=1e-2 if dt == dtypes.float16 else None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("src", "expected"),
    [
        (dtypes.int8, dtypes.int32),
        (dtypes.bool, dtypes.int32),
        (dtypes.float16, dtypes.float16),
        (dtypes.int32, dtypes.int32),
        (dtypes.float32, dtypes.float32),
    ],
)
def test_sum_result_dtype(device: str, src: DType, expected: DType) -> None:
    a = np.full((3, 50), 100 if src == dtypes.int8 else 1).astype(NP_DTYPES[src])  # int8 sums overflow int8
    out = tensor(a, device).sum(1)
    assert_matches(out, a.astype(np.int64).sum(1).astype(NP_DTYPES[expected]), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_min_of_int32_extremes(device: str) -> None:
    a = np.array([[-(2**31), 5], [2**31 - 1, -3]], dtype=np.int32)
    assert_matches(tensor(a, device).min(1), a.min(1), dtypes.int32)
    assert_matches(tensor(a, device).max(1), a.max(1), dtypes.int32)
    assert tensor(a, device).min().item() == -(2**31)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("src", [dtypes.int32, dtypes.int8, dtypes.bool])
def test_mean_of_int_is_float32(device: str, src: DType) -> None:
    a = np.array([[1, 2], [0, 1]]).astype(NP_DTYPES[src])
    assert_matches(tensor(a, device).mean(), np.mean(a.astype(np.float64)), dtypes.float32)
    assert_matches(tensor(a, device).mean(0), np.mean(a.astype(np.float64), 0), dtypes.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "axis",
    [
        None,
        0,
        1,
        (0, 1),
    ],
    ids=str,
)
def test_sum_over_empty_axes(device: str, axis: Any) -> None:
    """The sum of nothing is 0; the empty axis may be the reduced one or a kept one."""
    for dt in (dtypes.float32, dtypes.int32):
        a = np.zeros((0, 3), NP_DTYPES[dt])
        t = tensor(a, device)
        assert_matches(t.sum(axis), np.sum(a, axis=axis), dt)
        assert_matches(t.sum(axis, keepdim=True), np.sum(a, axis=axis, keepdims=True), dt)


@pytest.mark.parametrize("device", DEVICES)
def test_sum_of_empty_computed_tensor(device: str) -> None:
    t = Tensor.ones(2, 0, device=device) * 3
    assert_matches(t.sum(1), np.zeros(2, np.float32), dtypes.float32)
    assert_matches(t.sum(), np.float32(0), dtypes.float32)
    assert_matches(Tensor.arange(0, device=device).sum(), np.int32(0), dtypes.int32)


@pytest.mark.parametrize("device", DEVICES)
def test_mean_of_empty_is_nan(device: str) -> None:
    out = Tensor.zeros(0, 3, device=device).mean(0)
    assert out.shape == (3,)
    assert np.isnan(out.numpy()).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_reduce_scalar(device: str, op: str) -> None:
    out = getattr(Tensor(2.5, device=device), op)()
    assert_matches(out, np.float32(2.5), dtypes.float32)
    out = getattr(Tensor(np.array([[-4]], dtype=np.int32), device=device), op)(1)
    assert_matches(out, np_reduce(op, np.array([[-4]], dtype=np.int32), 1, False).astype(out.numpy().dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_reduce_of_expression(device: str) -> None:
    """Reduces fused with elementwise work before and after them."""
    a, b = rand((3, 4), dtypes.float32, 11), rand((4,), dtypes.float32, 12)
    ta, tb = tensor(a, device), tensor(b, device)
    assert_matches(((ta * tb).sum(1) + 1).exp2(), np.exp2((a * b).sum(1) + 1), rtol=1e-5)
    assert_matches((ta - ta.max(1, keepdim=True)).sum(0), (a - a.max(1, keepdims=True)).sum(0), atol=1e-5)
    assert_matches(ta.sum(1).max(), a.sum(1).max(), atol=1e-5)


@HYPOTHESIS
@given(
    shape=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3).map(tuple),
    data=st.data(),
)
def test_sum_max_random_shapes_and_axes(shape: tuple[int, ...], data: st.DataObject) -> None:
    axes = data.draw(
        st.lists(
            st.integers(-len(shape), len(shape) - 1),
            min_size=1,
            max_size=len(shape),
            unique_by=lambda a: a % len(shape),
        )
    )
    keepdim = data.draw(st.booleans())
    a = rand(shape, dtypes.float32, 13)
    t = Tensor(a)
    assert_matches(t.sum(tuple(axes), keepdim=keepdim), a.sum(tuple(axes), keepdims=keepdim), atol=1e-5)
    assert_matches(t.max(tuple(axes), keepdim=keepdim), a.max(tuple(axes), keepdims=keepdim))


# *** movement ***

MOVEMENT_CASES: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = [
    ("reshape", lambda t: t.reshape(4, 6), lambda a: a.reshape(4, 6)),
    ("reshape-tuple", lambda t: t.reshape((6, 4)), lambda a: a.reshape(6, 4)),
    ("reshape-neg1", lambda t: t.reshape(-1, 3), lambda a: a.reshape(-1, 3)),
    ("reshape-neg1-mid", lambda t: t.reshape(2, -1, 2), lambda a: a.reshape(2, -1, 2)),
    ("reshape-flat", lambda t: t.reshape(-1), lambda a: a.reshape(-1)),
    ("permute", lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("permute-tuple", lambda t: t.permute((1, 2, 0)), lambda a: a.transpose(1, 2, 0)),
    ("expand", lambda t: t[:, :1].expand(2, 5, 4), lambda a: np.broadcast_to(a[:, :1], (2, 5, 4))),
    ("expand-neg1", lambda t: t[:1].expand(3, -1, -1), lambda a: np.broadcast_to(a[:1], (3, 3, 4))),
    ("expand-new-dims", lambda t: t[0, 0].expand(2, 3, 4), lambda a: np.broadcast_to(a[0, 0], (2, 3, 4))),
    ("pad", lambda t: t.pad(((1, 0), (0, 2), (1, 1))), lambda a: np.pad(a, ((1, 0), (0, 2), (1, 1)))),
    ("pad-none", lambda t: t.pad((None, (2, 1), None)), lambda a: np.pad(a, ((0, 0), (2, 1), (0, 0)))),
    ("pad-negative", lambda t: t.pad(((0, -1), (-1, -1), (-2, 0))), lambda a: a[:1, 1:2, 2:]),
    (
        "pad-mixed",
        lambda t: t.pad(((1, -1), (0, 0), (-1, 2))),
        lambda a: np.pad(a[:1, :, 1:], ((1, 0), (0, 0), (0, 2))),
    ),
    (
        "pad-value",
        lambda t: t.pad(((0, 1), (1, 0), (0, 0)), value=-7.5),
        lambda a: np.pad(a, ((0, 1), (1, 0), (0, 0)), constant_values=-7.5),
    ),
    ("shrink", lambda t: t.shrink(((1, 2), (0, 3), (1, 3))), lambda a: a[1:2, 0:3, 1:3]),
    ("shrink-none", lambda t: t.shrink((None, (1, 2), None)), lambda a: a[:, 1:2]),
    ("shrink-empty", lambda t: t.shrink(((1, 1), None, None)), lambda a: a[1:1]),
    ("flip", lambda t: t.flip(0), lambda a: np.flip(a, 0)),
    ("flip-many", lambda t: t.flip((0, -1)), lambda a: np.flip(a, (0, 2))),
    ("transpose", lambda t: t.transpose(), lambda a: a.swapaxes(1, 0)),
    ("transpose-args", lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    ("transpose-neg", lambda t: t.transpose(-1, -2), lambda a: a.swapaxes(-1, -2)),
    ("T", lambda t: t[0].T, lambda a: a[0].T),
    ("flatten", lambda t: t.flatten(), lambda a: a.flatten()),
    ("flatten-from1", lambda t: t.flatten(1), lambda a: a.reshape(2, 12)),
    ("flatten-range", lambda t: t.flatten(0, 1), lambda a: a.reshape(6, 4)),
    ("squeeze", lambda t: t[:, :1].squeeze(), lambda a: a[:, :1].squeeze()),
    ("squeeze-dim", lambda t: t[:, :1].squeeze(1), lambda a: a[:, :1].squeeze(1)),
    ("squeeze-not-one", lambda t: t.squeeze(0), lambda a: a),
    ("unsqueeze", lambda t: t.unsqueeze(0), lambda a: a[None]),
    ("unsqueeze-end", lambda t: t.unsqueeze(-1), lambda a: a[..., None]),
    ("unsqueeze-mid", lambda t: t.unsqueeze(2), lambda a: np.expand_dims(a, 2)),
    ("contiguous", lambda t: t.permute(1, 0, 2).contiguous(), lambda a: a.transpose(1, 0, 2)),
    ("chain", lambda t: t.permute(2, 1, 0).reshape(4, 6).flip(1)[1:3].pad(((1, 1), None)), None),
]


def _chain_ref(a: np.ndarray) -> np.ndarray:
    return np.pad(np.flip(a.transpose(2, 1, 0).reshape(4, 6), 1)[1:3], ((1, 1), (0, 0)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "fn", "ref"), MOVEMENT_CASES, ids=[c[0] for c in MOVEMENT_CASES])
def test_movement(device: str, name: str, fn: Callable[[Any], Any], ref: Callable[[Any], Any] | None) -> None:
    a = (np.arange(24).reshape(2, 3, 4) - 5).astype(np.float32)
    assert_matches(fn(tensor(a, device)), (ref or _chain_ref)(a), dtypes.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype_name", ["float16", "int32", "bool"])
def test_movement_other_dtypes(device: str, dtype_name: str) -> None:
    """Movement ops move elements of any size: one chain of all of them per dtype."""
    a = rand((2, 3, 4), DTYPES[dtype_name], 19)
    chain = tensor(a, device).permute(2, 1, 0).reshape(4, 6).flip(1)[1:3].pad(((1, 1), None))
    assert_matches(chain, _chain_ref(a), DTYPES[dtype_name])
    assert_matches(tensor(a, device)[:, ::-2, 1:].expand(3, 2, 2, 3), np.broadcast_to(a[:, ::-2, 1:], (3, 2, 2, 3)))


@pytest.mark.parametrize("device", DEVICES)
def test_pad_value_dtypes(device: str) -> None:
    a = np.array([[1, 2]], dtype=np.int32)
    assert_matches(tensor(a, device).pad(((1, 0), (0, 1)), value=9), np.pad(a, ((1, 0), (0, 1)), constant_values=9))
    b = np.array([True])
    assert_matches(tensor(b, device).pad(((2, 0),), value=False), np.pad(b, ((2, 0),)))
    assert_matches(tensor(b, device).pad(((1, 1),), value=True), np.array([True, True, True]))


@pytest.mark.parametrize("device", DEVICES)
def test_movement_on_scalars_and_empty(device: str) -> None:
    s = Tensor(4.0, device=device)
    assert_matches(s.reshape(1, 1), np.full((1, 1), 4.0, np.float32))
    assert_matches(s.expand(2, 3), np.full((2, 3), 4.0, np.float32))
    assert_matches(s.unsqueeze(0), np.array([4.0], np.float32))
    assert_matches(s.flatten(), np.array([4.0], np.float32))
    assert_matches(Tensor([[5.0]], device=device).reshape(()), np.float32(5.0))
    assert_matches(Tensor([[5.0]], device=device).squeeze(), np.float32(5.0))
    e = Tensor.zeros(0, 3, device=device)
    assert_matches(e.reshape(3, 0), np.zeros((3, 0), np.float32))
    assert_matches(e.permute(1, 0), np.zeros((3, 0), np.float32))
    assert_matches(e.pad(((1, 1), None), value=2.0), np.full((2, 3), 2.0, np.float32))
    assert_matches(e.expand(4, 0, 3), np.zeros((4, 0, 3), np.float32))
    assert_matches(Tensor.ones(1, 0, device=device).expand(5, 0), np.zeros((5, 0), np.float32))


GETITEM_CASES: list[Any] = [
    1,
    -1,
    (1, 2),
    (0, -1, -2),
    (slice(None), -2),
    slice(1, 3),
    slice(None, None, 2),
    slice(None, None, -1),
    (slice(None), slice(3, 0, -2)),
    (slice(None), slice(None), slice(None, None, -3)),
    (slice(None), slice(None, None, 2), slice(1, None, 3)),
    (Ellipsis, 1),
    (1, Ellipsis),
    (Ellipsis,),
    (None, 0),
    (0, None, slice(1, None)),
    (Ellipsis, None),
    (slice(-2, None), Ellipsis, slice(None, None, -2)),
    slice(5, 10),
    (slice(None), slice(2, 2)),
    (1, 2, 3),
    (-1, Ellipsis, -1, None),
    (slice(None, None, -1), slice(-1, -4, -1), slice(None, None, 2)),
    (None, Ellipsis, None),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", GETITEM_CASES, ids=str)
def test_getitem(device: str, index: Any) -> None:
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    assert_matches(tensor(a, device)[index], a[index], dtypes.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_getitem_of_computed_and_scalar(device: str) -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = tensor(a, device) * 2
    assert_matches(t[1, ::-1], (a * 2)[1, ::-1])
    assert t[1, 2].item() == 10
    assert_matches(Tensor(3.0, device=device)[None], np.array([3.0], np.float32))
    assert_matches(Tensor(3.0, device=device)[...], np.float32(3.0))


# *** softmax, log_softmax, matmul ***


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("shape", "axis"), [((3, 5), -1), ((3, 5), 0), ((4,), 0), ((2, 1, 3), 1)], ids=str)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16], ids=["float32", "float16"])
def test_softmax_log_softmax(device: str, shape: tuple[int, ...], axis: int, dtype: DType) -> None:
    a = rand(shape, dtype, 14, -4, 4)
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis, keepdims=True))
    ref = e / e.sum(axis, keepdims=True)
    t = tensor(a, device)
    assert_matches(t.softmax(axis), ref.astype(NP_DTYPES[dtype]), dtype)
    log_ref = x - x.max(axis, keepdims=True) - np.log(e.sum(axis, keepdims=True))
    assert_matches(
        t.log_softmax(axis), log_ref.astype(NP_DTYPES[dtype]), dtype, atol=1e-2 if dtype == dtypes.float16 else 1e-5
    )


def test_softmax_default_axis_and_int_input() -> None:
    a = np.array([[1, 2, 3], [0, 0, 0]], dtype=np.int32)
    e = np.exp(a - a.max(-1, keepdims=True))
    assert_matches(Tensor(a).softmax(), (e / e.sum(-1, keepdims=True)).astype(np.float32), dtypes.float32)


MATMUL_SHAPES = [
    ((3,), (3,)),
    ((2, 3), (3, 4)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((1, 1), (1, 1)),
    ((2, 2, 3), (3, 4)),
    ((2, 2, 3), (2, 3, 4)),
    ((1, 2, 3), (4, 3, 2)),
    ((3,), (2, 3, 2)),
    ((2, 0), (0, 3)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32], ids=["float32", "int32"])
def test_matmul(device: str, shapes: tuple[tuple[int, ...], tuple[int, ...]], dtype: DType) -> None:
    a, b = rand(shapes[0], dtype, 15), rand(shapes[1], dtype, 16)
    out = tensor(a, device) @ tensor(b, device)
    assert_matches(out, np.matmul(a, b), dtype, atol=1e-5)
    assert_matches(tensor(a, device).matmul(tensor(b, device)), np.matmul(a, b), dtype, atol=1e-5)


def test_matmul_float16() -> None:
    a, b = rand((4, 8), dtypes.float16, 17), rand((8, 3), dtypes.float16, 18)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    assert_matches(Tensor(a) @ Tensor(b), ref.astype(np.float16), dtypes.float16, rtol=2e-2, atol=3e-2)


# *** properties and conversions ***


@pytest.mark.parametrize("device", DEVICES)
def test_properties(device: str) -> None:
    t = Tensor.ones(2, 0, 3, device=device, dtype=dtypes.int32)
    assert (t.shape, t.dtype, t.device, t.ndim, t.numel(), len(t)) == ((2, 0, 3), dtypes.int32, device, 3, 0, 2)
    s = Tensor(1.5, device=device)
    assert (s.shape, s.ndim, s.numel()) == ((), 0, 1)
    assert t.element_size() == 4
    assert Tensor.ones(3, 2, dtype=dtypes.float16).nbytes() == 12


@pytest.mark.parametrize("device", DEVICES)
def test_item_and_tolist(device: str) -> None:
    assert Tensor([[2.5]], device=device).item() == 2.5
    assert isinstance(Tensor(3, device=device).item(), int)
    assert isinstance(Tensor(True, device=device).item(), bool)
    assert (Tensor([1, 2, 3], device=device).sum()).item() == 6
    assert Tensor([[1, 2], [3, 4]], device=device).tolist() == [[1, 2], [3, 4]]
    assert Tensor([[True, False]], device=device).tolist() == [[True, False]]
    assert Tensor.zeros(2, 0, device=device).tolist() == [[], []]
    assert (Tensor(2, device=device) * 3).tolist() == 6
    assert Tensor([1.5, 2.0], device=device).half().tolist() == [1.5, 2.0]


@pytest.mark.parametrize("device", DEVICES)
def test_repr_shows_shape_device_dtype_without_realizing(device: str) -> None:
    t = Tensor([[1.0, 2.0, 3.0]], device=device) + 1
    before = GlobalCounters.kernel_count
    text = repr(t)
    assert GlobalCounters.kernel_count == before
    assert t.uop.base.op is not Ops.BUFFER, "repr realized the tensor"
    assert "(1, 3)" in text
    assert device in text
    assert "float" in text
    assert "int" in repr(Tensor.zeros(2, dtype=dtypes.int32, device=device) * 2)


def test_reference_signatures_take_positional_dtype_and_device() -> None:
    assert Tensor.full((2,), 1, dtypes.int32).dtype == dtypes.int32
    assert Tensor.arange(0, 4, 1, dtypes.float32).tolist() == [0.0, 1.0, 2.0, 3.0]
    x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.full_like(2, dtypes.int32).tolist() == [[2, 2], [2, 2]]
    assert x.flip(0, 1).tolist() == [[4.0, 3.0], [2.0, 1.0]]
    assert x.matmul(Tensor([[0.0, 1.0], [1.0, 0.0]]), reverse=True).tolist() == [[3.0, 4.0], [1.0, 2.0]]
    assert x.softmax(dtype=dtypes.float16).dtype == dtypes.float16
    assert x.prod(dtype=dtypes.int32).item() == 24


def test_sigmoid_gradient_is_finite_far_below_zero() -> None:
    x = Tensor([-200.0, -100.0, 0.0, 2.0], requires_grad=True)
    x.sigmoid().sum().backward()
    assert x.grad is not None
    grad = x.grad.numpy()
    assert np.isfinite(grad).all()
    np.testing.assert_allclose(grad[2:], [0.25, 0.104993585], rtol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("x_shape", "y_shape"), [((4, 3), (3,)), ((3,), (2, 1, 3)), ((2, 1), (1, 5)), ((4,), (4,))])
def test_broadcast_fast_path_builds_the_general_paths_nodes(
    x_shape: tuple[int, ...], y_shape: tuple[int, ...], reverse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tensors of one dtype broadcast as nodes (_broadcast_uop): the very nodes and labels (kernel names, VIZ)
    that broadcasting them as tensors (_broadcasted) builds, and the same values."""
    from fusegrad.uop.ops import all_metadata

    x, y = Tensor.rand(*x_shape).realize(), Tensor.rand(*y_shape).realize()

    def graph() -> tuple[list[Any], list[Any]]:
        u = x.add(y, reverse=reverse).uop
        nodes = list(u.toposort())
        labels = [all_metadata.get(n) for n in nodes]
        return [(n.op, n.arg, n.dtype) for n in nodes], [None if m is None else m[0].name for m in labels]

    fast = graph()
    monkeypatch.setattr(Tensor, "_broadcasted_uops", lambda self, y, op, reverse=False: tuple(
        t.uop for t in self._broadcasted(y, op, reverse)))  # fmt: skip
    assert graph() == fast
    assert "add" in fast[1]
    monkeypatch.undo()
    expected = np.add(y.numpy(), x.numpy()) if reverse else np.add(x.numpy(), y.numpy())
    np.testing.assert_allclose(x.add(y, reverse=reverse).numpy(), expected)
    with pytest.raises(ValueError, match="cannot broadcast"):
        x.add(Tensor.rand(7, 6))
