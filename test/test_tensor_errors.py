"""Tests for the errors of fusegrad/tensor.py (and the CPU compiler and allocator behind it): bad input raises a clear
error, naming the op, the shapes, axes, devices or dtypes involved, before any kernel runs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from fusegrad import Context, Device, GlobalCounters, Tensor, dtypes
from fusegrad.device import BufferSpec, CompileError


@pytest.fixture(autouse=True)
def no_kernel_runs() -> Iterator[None]:
    """Every error in this file is raised before a kernel runs (tests that do run kernels reset the count)."""
    before = GlobalCounters.kernel_count
    yield
    assert GlobalCounters.kernel_count == before, "a kernel ran before the error"


def shapes_pattern(op: str, first: tuple[int, ...], second: tuple[int, ...]) -> str:
    """`op: ... (2, 3) ... (4, 3)`: the op and both shapes, in either order."""
    a, b = re.escape(str(first)), re.escape(str(second))
    return rf"^{op}: .*({a}.*{b}|{b}.*{a})"


# *** broadcasting ***

BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
    "lt": lambda a, b: a < b,
    "gt": lambda a, b: a > b,
    "le": lambda a, b: a <= b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}


@pytest.mark.parametrize(
    "op",
    list(BINARY),
)
def test_broadcast_mismatch_names_op_and_shapes(op: str) -> None:
    a, b = Tensor.ones(2, 3), Tensor.ones(4, 3)
    with pytest.raises(ValueError, match=shapes_pattern(op, (2, 3), (4, 3))):
        BINARY[op](a, b)


@pytest.mark.parametrize(
    ("op", "fn"),
    [
        ("bitwise_and", lambda a, b: a.int() & b.int()),
        ("bitwise_or", lambda a, b: a.bool() | b.bool()),
        ("bitwise_xor", lambda a, b: a.int() ^ b.int()),
        ("idiv", lambda a, b: a.int().idiv(b.int())),
        ("mod", lambda a, b: a.int() % b.int()),
        ("where", lambda a, b: (a > 0).where(b, 1.0)),
        ("where", lambda a, b: b.bool().where(a, 0.0)),
    ],
)
def test_broadcast_mismatch_other_ops(op: str, fn: Callable[[Tensor, Tensor], Any]) -> None:
    with pytest.raises(ValueError, match=shapes_pattern(op, (2, 3), (4, 3))):
        fn(Tensor.ones(2, 3), Tensor.ones(4, 3))


def test_broadcast_mismatch_with_more_dims() -> None:
    with pytest.raises(ValueError, match=shapes_pattern("add", (5, 2, 3), (4,))):
        Tensor.zeros(5, 2, 3) + Tensor.zeros(4)
    with pytest.raises(ValueError, match=shapes_pattern("mul", (0,), (2,))):
        Tensor.zeros(0) * Tensor.zeros(2)


def test_matmul_inner_dimension_mismatch() -> None:
    with pytest.raises(ValueError, match=r"^matmul: .*\(2, 3\).*\(4, 2\)"):
        Tensor.ones(2, 3) @ Tensor.ones(4, 2)
    with pytest.raises(ValueError, match=r"^matmul: .*\(\)"):
        Tensor(1.0) @ Tensor.ones(2)


def test_expand_mismatch() -> None:
    with pytest.raises(ValueError, match=r"^expand: .*\(2, 3\).*\(4, 3\)"):
        Tensor.ones(2, 3).expand(4, 3)


# *** shapes ***


@pytest.mark.parametrize(
    ("src", "dst"), [((2, 3), (4, 2)), ((2, 3), (-1, 4)), ((6,), (7,)), ((0, 3), (1,)), ((), (2,))], ids=str
)
def test_reshape_to_incompatible_size(src: tuple[int, ...], dst: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=rf"^reshape: .*{re.escape(str(src))}.*{re.escape(str(dst))}"):
        Tensor.ones(*src).reshape(*dst)


def test_reshape_bad_sizes() -> None:
    with pytest.raises(ValueError, match=r"^reshape: .*-1"):
        Tensor.ones(6).reshape(-1, -1)
    with pytest.raises(ValueError, match=r"^reshape: negative size"):
        Tensor.ones(6).reshape(-2, -3)


def test_negative_shape() -> None:
    with pytest.raises(ValueError, match=r"non-negative.*\(-1, 2\)"):
        Tensor.zeros(-1, 2)


@pytest.mark.parametrize(
    ("op", "fn"),
    [
        ("pad", lambda t: t.pad(((1, 1),))),
        ("shrink", lambda t: t.shrink(((0, 3), (0, 3)))),
        ("shrink", lambda t: t.shrink(((1, 0), None))),
        ("permute", lambda t: t.permute(0, 0)),
    ],
)
def test_movement_argument_errors(op: str, fn: Callable[[Tensor], Any]) -> None:
    with pytest.raises(ValueError, match=rf"^{op}: .*"):
        fn(Tensor.ones(2, 3))


def test_shrink_names_shape() -> None:
    with pytest.raises(ValueError, match=r"^shrink: .*\(2, 3\)"):
        Tensor.ones(2, 3).shrink(((0, 3), (0, 3)))


def test_item_of_many_elements() -> None:
    with pytest.raises(ValueError, match=r"^item: .*\(2, 3\)"):
        Tensor.ones(2, 3).item()
    with pytest.raises(TypeError, match=r"^__bool__ on Tensor is not defined: use \.item\(\)"):  # as the reference
        bool(Tensor.ones(2))
    with pytest.raises(TypeError, match="0-d"):
        len(Tensor(1.0))


def test_arange_step_zero() -> None:
    with pytest.raises(ValueError, match=r"^arange: step"):
        Tensor.arange(0, 5, 0)


# *** axes ***

AXIS_OPS: dict[str, Callable[[Tensor, int], Any]] = {
    "sum": lambda t, a: t.sum(a),
    "max": lambda t, a: t.max(a),
    "min": lambda t, a: t.min(a),
    "mean": lambda t, a: t.mean(a),
    "softmax": lambda t, a: t.softmax(a),
    "log_softmax": lambda t, a: t.log_softmax(a),
    "flip": lambda t, a: t.flip(a),
    "transpose": lambda t, a: t.transpose(0, a),
    "squeeze": lambda t, a: t.squeeze(a),
    "flatten": lambda t, a: t.flatten(a),
    "permute": lambda t, a: t.permute(0, a),
}


@pytest.mark.parametrize(
    "op",
    list(AXIS_OPS),
)
@pytest.mark.parametrize("axis", [2, -3, 7])
def test_axis_out_of_range(op: str, axis: int) -> None:
    with pytest.raises(IndexError, match=rf"^{op}: axis {axis} out of range for 2-d tensor \(-2\.\.1\)"):
        AXIS_OPS[op](Tensor.ones(2, 3), axis)


def test_axis_out_of_range_in_tuple() -> None:
    with pytest.raises(IndexError, match=r"^sum: axis 3 out of range for 3-d tensor \(-3\.\.2\)"):
        Tensor.ones(1, 2, 3).sum((0, 3))


def test_unsqueeze_out_of_range() -> None:
    with pytest.raises(IndexError, match=r"^unsqueeze: dim 4 out of range for 2-d tensor \(-3\.\.2\)"):
        Tensor.ones(2, 3).unsqueeze(4)


# *** indexing ***


@pytest.mark.parametrize(
    ("index", "pattern"),
    [
        (2, r"index 2 is out of bounds for axis 0 with size 2"),
        (-3, r"index -3 is out of bounds for axis 0 with size 2"),
        ((0, 3), r"index 3 is out of bounds for axis 1 with size 3"),
        ((Ellipsis, -4), r"index -4 is out of bounds for axis 1 with size 3"),
        ((None, 1, 5), r"index 5 is out of bounds for axis 1 with size 3"),
        ((0, 0, 0), r"too many indices for 2-d tensor"),
        ((Ellipsis, 0, Ellipsis), r"single ellipsis"),
    ],
    ids=str,
)
def test_index_out_of_bounds(index: Any, pattern: str) -> None:
    with pytest.raises(IndexError, match=rf"^getitem: .*{pattern}"):
        Tensor.ones(2, 3)[index]


def test_index_of_wrong_type() -> None:
    with pytest.raises(TypeError, match=r"^getitem: .*float"):
        Tensor.ones(2, 3)[1.5]


def test_index_into_empty_axis() -> None:
    with pytest.raises(IndexError, match=r"index 0 is out of bounds for axis 0 with size 0"):
        Tensor.ones(0, 3)[0]


# *** devices ***

CROSS_DEVICE: dict[str, Callable[[Tensor, Tensor], Any]] = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "sub": lambda a, b: a - b,
    "div": lambda a, b: a / b,
    "lt": lambda a, b: a < b,
    "maximum": lambda a, b: a.maximum(b),
    "matmul": lambda a, b: a @ b,
    "where": lambda a, b: (a > 0).where(b, 0.0),
    "assign": lambda a, b: a.assign(b),
}


@pytest.mark.parametrize(
    "op",
    list(CROSS_DEVICE),
)
def test_different_devices(op: str) -> None:
    a, b = Tensor.ones(2, 2), Tensor.ones(2, 2, device="PYTHON")
    with pytest.raises(ValueError, match=rf"^{op}: .*(CPU.*PYTHON|PYTHON.*CPU).*\.to\(\)"):
        CROSS_DEVICE[op](a, b)


def test_where_condition_on_another_device() -> None:
    with pytest.raises(ValueError, match=r"^where: .*(CPU.*PYTHON|PYTHON.*CPU).*\.to\(\)"):
        Tensor([True], device="PYTHON").where(Tensor([1.0]), Tensor([2.0]))


def test_unknown_device() -> None:
    with pytest.raises(ValueError, match=r"unknown device 'FOO'.*CPU.*PYTHON"):
        Tensor([1.0], device="FOO")


# *** the Tensor methods of fusegrad/mixin: each names itself, then the inner op, with the offending values ***

A23, A43 = (2, 3), (4, 3)
MIXIN_BROADCAST: dict[str, Callable[[Tensor, Tensor], Any]] = {
    "copysign": lambda a, b: a.copysign(b),
    "logaddexp": lambda a, b: a.logaddexp(b),
    "isclose": lambda a, b: a.isclose(b),
    "allclose": lambda a, b: a.allclose(b),
    "pow": lambda a, b: a.pow(b),
    "fmod": lambda a, b: a.fmod(b),
    "lerp": lambda a, b: a.lerp(b, 0.5),
    "clamp": lambda a, b: a.clamp(b, None),
    "masked_fill": lambda a, b: a.masked_fill(b > 0, 1.0),
    "binary_crossentropy": lambda a, b: a.binary_crossentropy(b),
    "binary_crossentropy_logits": lambda a, b: a.binary_crossentropy_logits(b),
    "lshift": lambda a, b: a.int() << b.int(),
}


@pytest.mark.parametrize("op", list(MIXIN_BROADCAST))
def test_mixin_broadcast_mismatch_names_op_and_shapes(op: str) -> None:
    with pytest.raises(ValueError, match=shapes_pattern(op, A23, A43)):
        MIXIN_BROADCAST[op](Tensor.ones(*A23), Tensor.ones(*A43))


def test_mixin_errors_are_named_once_and_without_tracemeta() -> None:
    """The outermost method names the error (not every method on the way down), also with TRACEMETA=0."""
    with Context(TRACEMETA=0), pytest.raises(ValueError, match=r"^lerp: sub: cannot broadcast shapes \(4, 3\)"):
        Tensor.ones(*A23).lerp(Tensor.ones(*A43), 0.5)
    with pytest.raises(IndexError, match=r"^softmin: softmax: axis 2 out of range") as info:
        Tensor.ones(*A23).softmin(2)
    assert isinstance(info.value.__cause__, IndexError), "the inner error is kept as the cause"
    with pytest.raises(ValueError, match=r"^cross_entropy: label_smoothing must be in \[0, 1\], got 2"):
        Tensor.ones(*A23).cross_entropy(Tensor([0, 1]), label_smoothing=2.0)


def test_traced_prefixes_only_errors_that_do_not_already_name_the_op() -> None:
    from fusegrad.mixin import traced

    @traced
    def lerp(message: str, kind: type[Exception]) -> None:
        raise kind(message)

    @traced
    def dot(message: str) -> None:
        raise ValueError(message)

    with pytest.raises(ValueError, match=r"^lerp: sub: cannot broadcast$"):
        lerp("sub: cannot broadcast", ValueError)
    with pytest.raises(TypeError, match=r"^lerp: bad dtype$"):
        lerp("lerp: bad dtype", TypeError)
    with pytest.raises(RuntimeError, match=r"^sub: not an input error$"):
        lerp("sub: not an input error", RuntimeError)
    with pytest.raises(ValueError, match=r"^matmul: inner dimensions differ$"):
        dot("matmul: inner dimensions differ")  # Tensor.dot's messages say matmul


MIXIN_AXIS: dict[str, Callable[[Tensor, int], Any]] = {
    "argmax": lambda t, a: t.argmax(a),
    "argmin": lambda t, a: t.argmin(a),
    "any": lambda t, a: t.any(a),
    "all": lambda t, a: t.all(a),
    "var": lambda t, a: t.var(a),
    "std": lambda t, a: t.std(a),
    "var_mean": lambda t, a: t.var_mean(a),
    "logsumexp": lambda t, a: t.logsumexp(a),
    "softmin": lambda t, a: t.softmin(a),
    "cumsum": lambda t, a: t.cumsum(a),
    "cumprod": lambda t, a: t.cumprod(a),
    "cummax": lambda t, a: t.cummax(a),
    "logcumsumexp": lambda t, a: t.logcumsumexp(a),
    "sort": lambda t, a: t.sort(a),
    "argsort": lambda t, a: t.argsort(a),
    "topk": lambda t, a: t.topk(1, a),
    "cat": lambda t, a: t.cat(t, dim=a),
    "split": lambda t, a: t.split(1, a),
    "chunk": lambda t, a: t.chunk(2, a),
    "roll": lambda t, a: t.roll(1, a),
    "unflatten": lambda t, a: t.unflatten(a, (1,)),
    "gather": lambda t, a: t.gather(a, Tensor([[0], [0]])),
    "scatter": lambda t, a: t.scatter(a, Tensor([[0], [0]]), 1.0),
    "diagonal": lambda t, a: t.diagonal(0, 0, a),
    "repeat_interleave": lambda t, a: t.repeat_interleave(2, a),
    "unfold": lambda t, a: t.unfold(a, 1, 1),
    "layernorm": lambda t, a: t.layernorm(a),
    "batchnorm": lambda t, a: t.batchnorm(None, None, Tensor.ones(3), Tensor.ones(3), axis=a),
}


@pytest.mark.parametrize("op", list(MIXIN_AXIS))
@pytest.mark.parametrize("axis", [2, -3])
def test_mixin_axis_out_of_range(op: str, axis: int) -> None:
    with pytest.raises(IndexError, match=rf"^{op}: (\w+: )?axis {axis} out of range for 2-d tensor \(-2\.\.1\)"):
        MIXIN_AXIS[op](Tensor.ones(*A23), axis)


def test_stack_dim_out_of_range() -> None:
    with pytest.raises(IndexError, match=r"^stack: dim 3 out of range for 3-d result \(-3\.\.2\)"):
        Tensor.ones(2, 3).stack(Tensor.ones(2, 3), dim=3)


MIXIN_CROSS_DEVICE: dict[str, Callable[[Tensor, Tensor], Any]] = {
    "copysign": lambda a, b: a.copysign(b),
    "logaddexp": lambda a, b: a.logaddexp(b),
    "lerp": lambda a, b: a.lerp(b, 0.5),
    "cat": lambda a, b: a.cat(b),
    "stack": lambda a, b: a.stack(b),
    "einsum": lambda a, b: Tensor.einsum("ij,ij", a, b),
    "gather": lambda a, b: a.gather(1, b.int()),
    "scatter": lambda a, b: a.scatter(1, Tensor([[0], [1]]), b[:, :1]),
    "masked_fill": lambda a, b: a.masked_fill(b > 0, 1.0),
    "linear": lambda a, b: a.linear(b.T),
    "conv2d": lambda a, b: a.reshape(1, 1, 2, 2).conv2d(b.reshape(1, 1, 2, 2)),
    "cross_entropy": lambda a, b: a.cross_entropy(b.argmax(1)),
    "scaled_dot_product_attention": lambda a, b: a[None].scaled_dot_product_attention(b[None], b[None]),
}


@pytest.mark.parametrize("op", list(MIXIN_CROSS_DEVICE))
def test_mixin_different_devices(op: str) -> None:
    a, b = Tensor.ones(2, 2), Tensor.ones(2, 2, device="PYTHON")
    with pytest.raises(ValueError, match=rf"^{op}: .*(CPU.*PYTHON|PYTHON.*CPU).*\.to\(\)"):
        MIXIN_CROSS_DEVICE[op](a, b)


@pytest.mark.parametrize(
    ("fn", "pattern"),
    [
        (lambda: Tensor.ones(2).bitwise_not(), r"^bitwise_not: expected an integer or bool tensor, got dtypes.float"),
        (lambda: ~Tensor.ones(2), r"^bitwise_not: .* got dtypes.float"),
        (lambda: Tensor.ones(2) << 1, r"^lshift: shifts need integer tensors, got dtypes.float"),
        (lambda: Tensor([1.5]) >> 1, r"^rshift: shifts need integer tensors, got dtypes.float"),
        (lambda: Tensor.ones(2).one_hot(3), r"^one_hot: expected an integer tensor, got dtypes.float"),
        (lambda: Tensor.ones(2, 2).gather(1, Tensor([[0.0]] * 2)), r"^gather: index must be an integer tensor"),
        (lambda: Tensor.ones(2, 2).scatter(1, Tensor([[0.0]] * 2), 1.0), r"^scatter: index must be an integer"),
        (lambda: Tensor([1, 2]).pow(-1), r"^pow: an integer tensor needs a non-negative integer exponent, got -1"),
        (
            lambda: Tensor.ones(1, 1, 2, 2).max_unpool2d(Tensor.ones(1, 1, 2, 2)),
            r"^max_unpool2d: indices must be an integer tensor, got dtypes.float",
        ),
    ],
    ids=["bitwise_not", "invert", "lshift", "rshift", "one_hot", "gather", "scatter", "pow", "max_unpool2d"],
)
def test_mixin_op_on_unsupported_dtype(fn: Callable[[], Any], pattern: str) -> None:
    with pytest.raises(TypeError, match=pattern):
        fn()


@pytest.mark.parametrize(
    ("fn", "pattern"),
    [
        (lambda: Tensor.einsum("ij,jk", Tensor.ones(2, 3), Tensor.ones(2, 3)), r"^einsum: subscript 'j' has size 3"),
        (lambda: Tensor.ones(1, 2, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)), r"^conv2d: input \(1, 2, 3, 3\) has 2"),
        (lambda: Tensor.ones(2, 3).linear(Tensor.ones(2, 2)), r"^linear: matmul: .*\(2, 3\) @ \(2, 2\)"),
        (
            lambda: Tensor.ones(2, 3, 4).scaled_dot_product_attention(Tensor.ones(2, 3, 5), Tensor.ones(2, 3, 4)),
            r"^scaled_dot_product_attention: matmul: inner dimensions differ",
        ),
        (lambda: Tensor.ones(2, 3).topk(5), r"^topk: k=5 out of range for dim -1 of size 3 \(0\.\.3\)"),
        (lambda: Tensor.ones(2, 3).stack(Tensor.ones(4, 3)), r"^stack: .* got \(2, 3\) and \(4, 3\)"),
        (lambda: Tensor.ones(2, 3).repeat(2), r"^repeat: .* for shape \(2, 3\), got \(2,\)"),
        (lambda: Tensor.ones(2, 3).pad_to(1, 3), r"^pad_to: cannot pad shape \(2, 3\) to \(1, 3\)"),
        (
            lambda: Tensor.ones(2, 3).batchnorm(None, None, Tensor.ones(4), Tensor.ones(3)),
            r"^batchnorm: reshape: cannot reshape \(4,\)",
        ),
        (lambda: Tensor.ones(2, 3).cross_entropy(Tensor.ones(2, 4)), r"^cross_entropy: target shape \(2, 4\)"),
    ],
    ids=["einsum", "conv2d", "linear", "sdpa", "topk", "stack", "repeat", "pad_to", "batchnorm", "cross_entropy"],
)
def test_mixin_shape_errors(fn: Callable[[], Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        fn()


# *** dtypes ***


@pytest.mark.parametrize(
    "fn",
    [
        lambda: Tensor.ones(2) & Tensor.ones(2),
        lambda: Tensor.ones(2) | 1,
        lambda: Tensor.ones(2, dtype=dtypes.float16) ^ Tensor.ones(2, dtype=dtypes.float16),
        lambda: Tensor([1, 2]) & Tensor([1.0, 2.0]),
        lambda: Tensor([1, 2]) & 1.5,
        lambda: 3 | Tensor([0.5]),
    ],
)
def test_bitwise_on_floats(fn: Callable[[], Any]) -> None:
    with pytest.raises(TypeError, match=r"^bitwise_(and|or|xor): .*(float|half)"):
        fn()


def test_idiv_on_floats() -> None:
    """idiv is C's integer division; // also takes floats (floor semantics), and so do mod and % (as the reference)."""
    with pytest.raises(TypeError, match=r"^idiv: expected integer tensors, got .*float"):
        Tensor.ones(2).idiv(2)


@pytest.mark.parametrize(
    "fn",
    [
        lambda: Tensor([1], dtype="float33"),
        lambda: Tensor.ones(2).cast("int33"),
        lambda: Tensor.zeros(2, dtype="flaot"),
        lambda: Tensor.arange(3, dtype="f32"),
    ],
)
def test_unknown_dtype_name(fn: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=r"unknown dtype name '\w+'.*expected one of ") as info:
        fn()
    assert {"float32", "float16", "int32", "bool"} <= set(
        re.findall(r"\w+", str(info.value).split("expected one of")[1])
    )


def test_dtype_of_wrong_type() -> None:
    with pytest.raises(TypeError, match="dtype"):
        Tensor.ones(2).cast(3)  # type: ignore[arg-type]  # the error under test


def test_bitcast_size_mismatch() -> None:
    assert Tensor.ones(2).bitcast(dtypes.float16).shape == (4,)  # a size-changing bitcast regroups the last axis
    with pytest.raises(ValueError, match=r"^bitcast: .*\(2 vs 4 bytes per element\): got shape \(3,\)"):
        Tensor.ones(3, dtype=dtypes.float16).bitcast(dtypes.float32)


def test_bad_data() -> None:
    with pytest.raises(TypeError, match="cannot build a tensor from str"):
        Tensor("abc")
    with pytest.raises(TypeError, match="shape must be ints"):
        Tensor.zeros(2.5)


# *** assign ***


def test_assign_mismatches() -> None:
    target = Tensor.zeros(2, 3).contiguous()
    with pytest.raises(ValueError, match=r"^assign: shape \(3, 2\) .*\(2, 3\)"):
        target.assign(Tensor.ones(3, 2))
    with pytest.raises(TypeError, match=r"^assign: .*int.*float"):
        target.assign(Tensor.ones(2, 3, dtype=dtypes.int32))


# *** compiler and allocator (these run the pipeline up to the failure) ***


def test_compile_error_shows_source_and_compiler_message() -> None:
    with pytest.raises(CompileError, match="broken") as info:
        Device["CPU"].compiler.compile("int broken(")
    err = info.value
    assert err.src == "int broken("
    assert "error" in err.stderr
    assert err.stderr.strip() in str(err), "the message should hold the compiler's output"
    assert "int broken(" in str(err), "the message should hold the kernel source"
    assert isinstance(err, RuntimeError)


def test_missing_compiler_says_what_was_looked_for_and_how_to_install() -> None:
    pattern = r"no C compiler found: looked for CPU_CC=/nonexistent/cc; install one .*apt-get install"
    with Context(CPU_CC="/nonexistent/cc"):
        with pytest.raises(RuntimeError, match=pattern):
            Device["CPU"].compiler.compile("void f(void) {}")
        # a kernel no other test compiles, so neither the disk cache nor the in-process cache holds it
        with pytest.raises(RuntimeError, match=pattern):
            (Tensor([1.0, 2.0]) * 7.0625 - 0.1875).realize()


def test_failed_allocation_names_bytes_and_device(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(size: int, options: BufferSpec) -> Any:
        raise MemoryError(f"simulated: {size} bytes")

    monkeypatch.setattr(Device["CPU"].allocator, "_alloc", fail)
    with pytest.raises(MemoryError, match=r"out of memory on CPU: 4444 bytes"):
        Tensor(np.ones(1111, np.float32)).realize()  # a numpy array is copied to the device when realized
    with pytest.raises(MemoryError, match=r"out of memory on CPU: 49380 bytes"):
        (Tensor.ones(12345) + 1).realize()


# *** the reference's exception types ***
# For these mistakes the reference (and torch) raise RuntimeError, NotImplementedError or AttributeError. fusegrad's
# error is that type and also the house type (ValueError/TypeError), with the same clear message.

REFERENCE_TYPED: dict[str, tuple[Callable[[], Any], type[Exception], type[Exception], str]] = {
    "matmul_0d": (lambda: Tensor(3.0) @ Tensor.ones(3, 3), ValueError, RuntimeError, r"^matmul: both operands"),
    "dot_inner": (lambda: Tensor.ones(2, 4).dot(Tensor.ones(1, 3)), ValueError, RuntimeError, r"^matmul: inner dim"),
    "linear_inner": (lambda: Tensor.ones(2, 3).linear(Tensor.ones(2, 2)), ValueError, RuntimeError, r"^linear: matmul"),
    "permute": (lambda: Tensor.ones(3, 4).permute(0, 0), ValueError, RuntimeError, r"^permute: \(0, 0\) is not a perm"),
    "reshape_two_minus_one": (lambda: Tensor.ones(3, 4).reshape(-1, -1, 2), ValueError, RuntimeError, r"only one axis"),
    "flip_twice": (
        lambda: Tensor.ones(3, 4).flip(1, -1),
        ValueError,
        RuntimeError,
        r"^flip: each axis can appear once",
    ),
    "div_rounding_mode": (
        lambda: Tensor([5]).div(2, rounding_mode="typo"),  # type: ignore[arg-type]  # the error under test
        ValueError,
        RuntimeError,
        r"^div: unknown rounding_mode 'typo'",
    ),
    "clip_no_bounds": (lambda: Tensor.ones(2).clip(), ValueError, RuntimeError, r"^clip: clamp: at least one of"),
    "roll": (lambda: Tensor.ones(3, 3).roll(1, (0, 1)), ValueError, RuntimeError, r"^roll: 1 shifts for 2 dims"),
    "unfold": (lambda: Tensor.ones(8).unfold(0, 9, 3), ValueError, RuntimeError, r"^unfold: need 0 <= size <= 8"),
    "meshgrid": (lambda: Tensor.ones(3).meshgrid(indexing="ab"), ValueError, RuntimeError, r"^meshgrid: indexing"),
    "gather": (lambda: Tensor.ones(4, 5).gather(0, Tensor([1])), ValueError, RuntimeError, r"^gather: index shape"),
    "scatter_shape": (
        lambda: Tensor.ones(2, 3).scatter(1, Tensor.zeros(3, 3, dtype=dtypes.int32), 1.0),
        ValueError,
        RuntimeError,
        r"^scatter: index shape \(3, 3\) does not fit self \(2, 3\)",
    ),
    "scatter_dtype": (
        lambda: Tensor.ones(2, dtype=dtypes.half).scatter(0, Tensor([0]), Tensor([1.0])),
        TypeError,
        RuntimeError,
        r"^scatter: src dtype dtypes.float does not match self's dtypes.half",
    ),
    "scatter_reduce_mode": (
        lambda: Tensor.ones(3).scatter_reduce(0, Tensor([0]), Tensor([1.0]), "max"),  # type: ignore[arg-type]
        ValueError,
        RuntimeError,
        r"^scatter_reduce: reduce must be",
    ),
    "einsum_sizes": (
        lambda: Tensor.einsum("ij,jk", Tensor.ones(2, 3), Tensor.ones(2, 3)),
        ValueError,
        RuntimeError,
        r"^einsum: subscript 'j' has size 3",
    ),
    "einsum_two_ellipses": (
        lambda: Tensor.einsum("...i...,i", Tensor.ones(2, 3), Tensor.ones(3)),
        ValueError,
        RuntimeError,
        r"^einsum: subscripts must be letters",
    ),
    "conv2d_kernel_too_big": (
        lambda: Tensor.ones(1, 1, 2, 2).conv2d(Tensor.ones(1, 1, 3, 3)),
        ValueError,
        RuntimeError,
        r"^conv2d: pool: kernel 3 .* does not fit an axis of size 2",
    ),
    "cross_entropy_target": (
        lambda: Tensor.ones(4, 3).cross_entropy(Tensor.ones(4, 1)),
        ValueError,
        RuntimeError,
        r"^cross_entropy: target shape \(4, 1\)",
    ),
    "sdpa_causal_and_mask": (
        lambda: Tensor.ones(2, 4).scaled_dot_product_attention(
            Tensor.ones(2, 4), Tensor.ones(2, 4), Tensor.ones(2, 2), is_causal=True
        ),
        ValueError,
        RuntimeError,
        r"^scaled_dot_product_attention: attn_mask and is_causal=True",
    ),
    "bitwise_and_floats": (lambda: Tensor.ones(2) & Tensor.ones(2), TypeError, RuntimeError, r"^bitwise_and: .*float"),
    "bitwise_not_float": (lambda: ~Tensor.ones(2), TypeError, RuntimeError, r"^bitwise_not: .*float"),
    "int_pow_negative": (lambda: Tensor([2, 3]) ** -2, TypeError, RuntimeError, r"^pow: an integer tensor needs"),
    "pad_mode": (
        lambda: Tensor.ones(3, 3).pad((1, 1), mode="typo"),
        ValueError,
        NotImplementedError,
        r"^pad: mode 'typo' is not supported",
    ),
    "pad_circular_twice": (
        lambda: Tensor.ones(1, 5).pad((3, 6), mode="circular"),
        ValueError,
        NotImplementedError,
        r"^pad: circular padding \(3, 6\) wraps around more than once",
    ),
    "sum_dtype_name": (
        lambda: Tensor([1.0]).sum(dtype=""),
        ValueError,
        AttributeError,
        r"^sum: .*unknown dtype name ''",
    ),
    "prod_dtype_name": (lambda: Tensor([1.0]).prod(dtype="typo"), ValueError, AttributeError, r"unknown dtype name"),
    "cat_0d": (lambda: Tensor(1.0).cat(Tensor(2.0)), IndexError, IndexError, r"^cat: zero-dimensional tensors"),
    "scatter_reduce_arg_with_a_tensor": (
        lambda: Tensor.ones(4).scatter(1, Tensor([0]), Tensor.ones(4), reduce="add"),
        TypeError,
        TypeError,
        r"^scatter: reduce='add' takes a scalar src, got a Tensor: use scatter_reduce",
    ),
    "linspace_bool": (lambda: Tensor.linspace(0, 1, 3, dtype="bool"), ValueError, ValueError, r"^linspace: bool"),
    "stack_sequence_and_more": (
        lambda: Tensor.stack([Tensor([1]), Tensor([2])], Tensor([3])),  # type: ignore[call-overload, arg-type]
        ValueError,
        ValueError,
        r"^stack: give the tensors either as one sequence or one by one",
    ),
}


@pytest.mark.parametrize("name", list(REFERENCE_TYPED))
def test_errors_also_have_the_reference_type(name: str) -> None:
    fn, house, reference, pattern = REFERENCE_TYPED[name]
    with pytest.raises(house, match=pattern) as info:
        fn()
    assert isinstance(info.value, reference), f"{type(info.value).__name__} is not a {reference.__name__}"
