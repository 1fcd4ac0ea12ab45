"""One-pass row ops (#12): a reduce read inside the loops over the row it reduced (softmax's max and sum, layernorm's
mean and variance, their backward's row sums) is computed once per row in the kernel that reads it, when the row
fits in cache (schedule/fusion.py, ReadPolicy.repeated_reduce); checked against torch forward and backward and,
as a transformation, against the unfused schedule on CPU and PYTHON (bit for bit on PYTHON)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Device, Tensor
from fusegrad.codegen import to_program
from fusegrad.engine.cache import schedule_cache
from fusegrad.helpers import Context
from fusegrad.schedule import fusion
from test.shared import count_kernels

Op = Callable[[Tensor], Tensor]
TorchOp = Callable[[torch.Tensor], torch.Tensor]


def _softmax_pair(axis: int) -> tuple[Op, TorchOp]:
    return (lambda t: t.softmax(axis)), (lambda t: torch.softmax(t, axis))


def _log_softmax_pair(axis: int) -> tuple[Op, TorchOp]:
    return (lambda t: t.log_softmax(axis)), (lambda t: torch.log_softmax(t, axis))


def _layernorm_pair(axis: int) -> tuple[Op, TorchOp]:
    def torch_layernorm(t: torch.Tensor) -> torch.Tensor:
        mean = t.mean(axis, keepdim=True)
        return (t - mean) / torch.sqrt(((t - mean) ** 2).mean(axis, keepdim=True) + 1e-5)

    return (lambda t: t.layernorm(axis)), torch_layernorm


def _rmsnorm_pair(axis: int) -> tuple[Op, TorchOp]:
    return (lambda t: t * ((t * t).mean(axis, keepdim=True) + 1e-6).rsqrt()), (
        lambda t: t * torch.rsqrt((t * t).mean(axis, keepdim=True) + 1e-6)
    )


PAIRS = {"softmax": _softmax_pair, "log_softmax": _log_softmax_pair, "layernorm": _layernorm_pair,
         "rmsnorm": _rmsnorm_pair}  # fmt: skip
SHAPES = [((4, 1000), -1), ((1000, 1), -1), ((1, 1), 0), ((3, 5, 7), 0), ((3, 5, 7), 1), ((3, 5, 7), 2), ((6, 64), 0)]


def _check_against_torch(op: Op, ref: TorchOp, a: np.ndarray, device: str, masked: np.ndarray | None = None) -> None:
    """Forward and the gradient of sum(out * g) (NaN where torch has NaN)."""
    g = np.random.default_rng(7).standard_normal(a.shape).astype(np.float32)
    x = Tensor(a, device=device, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    if masked is not None:  # masked softmax: the masked positions are -inf before the row op
        fill = float("-inf")
        out = op(Tensor(masked, device=device).where(x, fill))
        tout = ref(torch.where(torch.tensor(masked), tx, torch.tensor(fill)))
    else:
        out, tout = op(x), ref(tx)
    (out * Tensor(g, device=device)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    assert x.grad is not None
    assert tx.grad is not None
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", PAIRS)
@pytest.mark.parametrize(("shape", "axis"), SHAPES)
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_row_ops_match_torch_forward_and_backward(name: str, shape: tuple[int, ...], axis: int, device: str) -> None:
    if device == "PYTHON" and np.prod(shape) > 200:
        shape = (2, *shape[1:]) if shape[0] > 2 else shape  # the interpreter is slow: fewer rows, same row length
    a = np.random.default_rng(hash(shape) % 1000).standard_normal(shape).astype(np.float32) * 3
    op, ref = PAIRS[name](axis)
    _check_against_torch(op, ref, a, device)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_masked_softmax_and_fully_masked_rows_match_torch(device: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 40)).astype(np.float32)
    mask = rng.random((5, 40)) < 0.6
    mask[2] = False  # a row that is all -inf: NaN in torch too
    mask[3] = True
    op, ref = _softmax_pair(-1)
    _check_against_torch(op, ref, a, device, masked=mask)


def test_softmax_with_infinities_matches_torch() -> None:
    a = np.random.default_rng(4).standard_normal((6, 24)).astype(np.float32)
    a[0, 3], a[1, :], a[2, 5], a[4, 7] = np.inf, -np.inf, np.nan, -np.inf
    got = Tensor(a).softmax(-1).numpy()
    np.testing.assert_allclose(got, torch.softmax(torch.tensor(a), -1).numpy(), rtol=1e-5, atol=1e-6)


def test_row_ops_forward_take_one_kernel() -> None:
    x = Tensor.empty(64, 1000)
    assert count_kernels(x.softmax(-1)) == 1  # max, sum and the output in one pass per row (was 3)
    assert count_kernels(x.log_softmax(-1)) == 1
    assert count_kernels(x.layernorm(-1) * Tensor.empty(1000) + Tensor.empty(1000)) == 1  # mean, var, out (was 3)


def test_row_ops_forward_and_backward_take_two_kernels() -> None:
    """The backward's kernel computes the forward's row statistics again over the row it reads anyway, instead of
    loading them from kernels of their own (each statistic is read per row element by both kernels). Realized
    together, the two then run as one kernel with two outputs (schedule/siblings.py)."""
    for op in (lambda t: t.softmax(-1), lambda t: t.log_softmax(-1), lambda t: t.layernorm(-1)):
        x, g = Tensor.empty(64, 256, requires_grad=True), Tensor.empty(64, 256)
        out = op(x)
        (out * g).sum().backward()
        assert x.grad is not None
        with Context(FUSE_SIBLINGS=0):
            assert count_kernels(out, x.grad) == 2
        assert count_kernels(out, x.grad) == 1


def test_a_row_too_long_for_cache_is_reduced_by_kernels_of_its_own() -> None:
    x = Tensor.empty(2, 1 << 16)  # 256 KiB rows: each pass over the row would come from memory
    assert count_kernels(x.softmax(-1)) == 3
    assert fusion.ROW_UNCACHED in _reasons(x.softmax(-1))


def test_a_row_read_through_a_permute_is_reduced_by_kernels_of_its_own() -> None:
    x = Tensor.empty(256, 64)
    assert count_kernels(x.T.softmax(-1)) == 3  # its rows lie across memory: kernels that tile along memory's rows
    assert fusion.ROW_UNCACHED in _reasons(x.T.softmax(-1))
    assert count_kernels(x.T.contiguous().softmax(-1)) == 2  # the copy, then one pass per row


def test_a_statistic_ignoring_an_outer_loop_is_still_stored() -> None:
    x = Tensor.empty(64, 32)
    assert count_kernels(x.softmax(0)) == 3  # a column's max read in the loop over rows: once per column, stored


def test_cross_entropy_is_one_kernel_summing_blocks_of_rows_in_parallel() -> None:
    """The loss's sum over rows holds each row's max and sum (fused): GROUP splits it into partial sums over blocks
    of rows (codegen/opt.group_opts), which the C computes on every core; the value is torch's."""
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((512, 256)).astype(np.float32)
    labels = rng.integers(0, 256, 512).astype(np.int32)
    x, y = Tensor(logits).realize(), Tensor(labels).realize()
    (item,) = x.sparse_categorical_crossentropy(y).schedule()
    assert "#pragma omp parallel for" in to_program(item.ast, Device["CPU"].renderer).src
    expected = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(labels).long()).item()
    np.testing.assert_allclose(x.sparse_categorical_crossentropy(y).item(), expected, rtol=1e-5)


def _reasons(t: Tensor) -> list[str]:
    from fusegrad.schedule import kernelize as kernelize_module

    found: list[str] = []
    original = kernelize_module.find_realizes

    def spy(sink, placements=None):  # type: ignore[no-untyped-def]  # a test double of find_realizes
        ret = original(sink, placements)
        found.extend(ret.values())
        return ret

    kernelize_module.find_realizes = spy
    try:
        t.kernelize()
    finally:
        kernelize_module.find_realizes = original
    return found


# *** the transformation as a property: fused and unfused schedules compute the same numbers ***

UNARY: dict[str, Op] = {"exp": lambda t: (t * 0.5).exp(), "neg": lambda t: -t, "relu": lambda t: t.relu(),
                        "scale": lambda t: t * 1.5 + 0.25}  # fmt: skip
REDUCES: dict[str, Callable[[Tensor, int], Tensor]] = {
    "sum": lambda t, a: t.sum(a, keepdim=True), "max": lambda t, a: t.max(a, keepdim=True),
    "mean": lambda t, a: t.mean(a, keepdim=True)}  # fmt: skip
COMBINE: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"sub": lambda x, r: x - r, "mul": lambda x, r: x * r,
                                                          "add": lambda x, r: x + r}  # fmt: skip

step = st.tuples(st.sampled_from(sorted(UNARY)), st.sampled_from(sorted(REDUCES)), st.sampled_from(sorted(COMBINE)))


def _row_graph(x: Tensor, y: Tensor, axis: int, steps: list[tuple[str, str, str]]) -> Tensor:
    """x -> for each step: a unary op, a row reduce of the value (or of y times it), combined with the value."""
    value = x
    for i, (unary, reduce, combine) in enumerate(steps):
        value = UNARY[unary](value)
        reduced = REDUCES[reduce](value * y if i % 2 else value, axis)
        value = COMBINE[combine](value, reduced)
    return value


def _run(shape: tuple[int, ...], axis: int, steps: list[tuple[str, str, str]], device: str, fused: bool) -> np.ndarray:
    rng = np.random.default_rng(11)
    x = Tensor(rng.standard_normal(shape).astype(np.float32), device=device)
    y = Tensor(rng.standard_normal(shape).astype(np.float32), device=device)
    schedule_cache.clear()  # the same graph structure must be scheduled again under the other policy
    saved = fusion.ROW_CACHE_BYTES
    fusion.ROW_CACHE_BYTES = saved if fused else -1  # -1: every row reduce gets a kernel of its own, as before
    try:
        return _row_graph(x, y, axis, steps).numpy()
    finally:
        fusion.ROW_CACHE_BYTES = saved
        schedule_cache.clear()


@settings(max_examples=25, deadline=None)
@given(
    shape_axis=st.sampled_from([((3, 16), 1), ((3, 16), 0), ((2, 3, 8), 2), ((2, 3, 8), 1), ((5, 1), 1), ((1, 9), 1)]),
    steps=st.lists(step, min_size=1, max_size=3),
)
def test_fused_row_reduces_compute_what_separate_kernels_do(
    shape_axis: tuple[tuple[int, ...], int], steps: list[tuple[str, str, str]]
) -> None:
    shape, axis = shape_axis
    exact = _run(shape, axis, steps, "PYTHON", fused=False)
    np.testing.assert_array_equal(_run(shape, axis, steps, "PYTHON", fused=True), exact)  # same order of every op
    np.testing.assert_allclose(_run(shape, axis, steps, "CPU", fused=True), exact, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_run(shape, axis, steps, "CPU", fused=False), exact, rtol=1e-4, atol=1e-5)
