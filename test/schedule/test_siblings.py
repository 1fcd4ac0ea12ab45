"""Sibling kernels (schedule/siblings.py, engine/schedule.merge_siblings): which kernels may merge, that a merged row
kernel shares its row statistics, that every order the run depends on is kept, and that merged kernels give the
separate kernels' bits on CPU and PYTHON (hypothesis over row and elementwise ops, shapes and values)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor, TinyJit
from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.engine.cache import cache_counts
from fusegrad.engine.realize import ExecItem
from fusegrad.engine.schedule import merge_siblings
from fusegrad.helpers import Context
from fusegrad.nn.optim import Adam
from fusegrad.schedule.siblings import sibling_signature
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp
from test.shared import cl_unavailable, count_kernels

ROW_OPS: dict[str, Callable[[Tensor], Tensor]] = {
    "softmax": lambda t: t.softmax(-1),
    "log_softmax": lambda t: t.log_softmax(-1),
    "layernorm": lambda t: t.layernorm(-1),
    "rms": lambda t: t * (t.square().mean(-1, keepdim=True) + 1e-6).rsqrt(),
    "centered": lambda t: t - t.max(-1, keepdim=True),
}
ELEMENTWISE_OPS: dict[str, Callable[[Tensor], Tensor]] = {
    "affine": lambda t: t * 2 + 1,
    "exp": lambda t: (t * 0.5).exp(),
    "square": lambda t: t * t,
}


def _kernels(*tensors: Tensor) -> list[UOp]:
    return [si.ast for si in tensors[0].schedule(*tensors[1:]) if si.ast.op is Ops.SINK]


def _forward_backward(op: Callable[[Tensor], Tensor], x: np.ndarray, g: np.ndarray, device: str) -> list[np.ndarray]:
    xt = Tensor(x, device=device, requires_grad=True)
    out = op(xt)
    (out * Tensor(g, device=device)).sum().backward()
    assert xt.grad is not None
    Tensor.realize(out, xt.grad)
    return [out.numpy(), xt.grad.numpy()]


def test_sibling_signature_is_the_store_index_of_row_ops_only() -> None:
    x, w = Tensor.empty(16, 32), Tensor.empty(32, 32)
    (softmax,) = _kernels(x.softmax(-1))
    assert sibling_signature(softmax) is softmax.src[0].src[0].src[1]
    (matmul,) = _kernels(x @ w)  # each output its own reduce: a contraction
    assert sibling_signature(matmul) is None
    (elementwise,) = _kernels(x * 2 + 1)
    assert sibling_signature(elementwise) is elementwise.src[0].src[0].src[1]
    (total,) = _kernels(x.sum(-1))  # the reduce is the output: nothing broadcast along a row
    assert sibling_signature(total) is None


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layernorm"])
def test_forward_and_backward_merge_and_share_their_statistics(name: str) -> None:
    x, g = Tensor.empty(64, 256, requires_grad=True), Tensor.empty(64, 256)
    out = ROW_OPS[name](x)
    (out * g).sum().backward()
    assert x.grad is not None
    with Context(FUSE_SIBLINGS=0):
        apart = _kernels(out, x.grad)
    (merged,) = _kernels(out, x.grad)
    assert len(apart) == 2
    assert len(merged.src) == 2
    reduces = [sum(u.op is Ops.REDUCE for u in ast.toposort()) for ast in (*apart, merged)]
    # the forward's statistics (max and sum, or mean and variance) are the backward's too: computed once
    assert reduces[2] == reduces[1] < reduces[0] + reduces[1]


@pytest.mark.parametrize(("siblings", "kernels"), [(1, 1), (0, 2)])
def test_debug_line_counts_the_kernels_that_run(
    siblings: int, kernels: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """DEBUG=1's "scheduled N kernels" counts them after the merge (it counted kernelize's kernels before it)."""
    x = Tensor(np.random.default_rng(0).standard_normal((8, 48), dtype=np.float32), requires_grad=True).realize()
    out = x.log_softmax(-1)
    (out * 3).sum().backward()
    assert x.grad is not None
    capsys.readouterr()
    with Context(FUSE_SIBLINGS=siblings, DEBUG=1):
        Tensor.realize(out, x.grad)
    assert f"scheduled {kernels} kernels in" in capsys.readouterr().out


def test_a_kernel_reading_the_other_ones_output_is_not_merged() -> None:
    x = Tensor.empty(32, 64)
    first = x.softmax(-1)
    second = (first * 3).softmax(-1) + x  # reads first's output
    assert count_kernels(first, second) == 2


def _item(t: Tensor) -> ExecItem:
    (item,) = t.schedule()
    return item


def test_merge_keeps_the_order_of_kernels_between_them() -> None:
    """first and last read x. A kernel between them that writes x: neither may move past it. One that reads first's
    output: last moves up to first. One that reads last's output before last writes it: first moves down to last."""
    x, y = Tensor.randn(32, 64).realize(), Tensor.randn(32, 64).realize()
    first, last, scale = _item(x.softmax(-1)), _item(x.layernorm(-1)), _item(y * 3)
    x_buf, y_buf = first.bufs[1], scale.bufs[1]
    assert first.bufs[1] is last.bufs[1] is x_buf

    def kernel_between(writes: Buffer | None, reads: Buffer | None) -> ExecItem:  # y * 3, rewired
        out = writes or Buffer("CPU", 32 * 64, dtypes.float32)
        return ExecItem(scale.ast, [out, reads or y_buf])

    writes_x = kernel_between(x_buf, None)
    assert [len(i.ast.src) for i in merge_siblings([first, writes_x, last])] == [1, 1, 1]
    reads_first = kernel_between(None, first.bufs[0])
    merged = merge_siblings([first, reads_first, last])
    assert [len(i.ast.src) for i in merged] == [2, 1]
    assert merged[1] is reads_first
    reads_last = kernel_between(None, last.bufs[0])
    merged = merge_siblings([first, reads_last, last])
    assert [len(i.ast.src) for i in merged] == [1, 2]
    assert merged[0] is reads_last
    both = kernel_between(None, first.bufs[0]), kernel_between(None, last.bufs[0])
    assert len(merge_siblings([first, *both, last])) == 4


def test_contractions_sharing_an_input_are_not_merged() -> None:
    x, w1, w2 = Tensor.empty(64, 64), Tensor.empty(64, 64), Tensor.empty(64, 64)
    assert count_kernels(x @ w1, x @ w2) == 2


def test_row_and_elementwise_kernels_are_not_merged() -> None:
    x = Tensor.empty(32, 64)
    assert count_kernels(x.softmax(-1), x * 2) == 2
    assert count_kernels(x * 2, (x + 1).exp()) == 1


def test_adam_moment_updates_of_a_parameter_merge() -> None:
    """Adam's first and second moment updates both read the gradient: one kernel. Training matches the separate
    kernels bit for bit."""

    def train(steps: int) -> tuple[int, list[np.ndarray]]:
        rng = np.random.default_rng(11)
        w = Tensor(rng.standard_normal((16, 32)).astype(np.float32), requires_grad=True)
        b = Tensor(rng.standard_normal(32).astype(np.float32), requires_grad=True)
        x = Tensor(rng.standard_normal((8, 16)).astype(np.float32))
        opt = Adam([w, b], lr=0.01)
        kernels = 0
        with Tensor.train():
            for _ in range(steps):
                opt.zero_grad()
                ((x @ w + b).relu().sum()).backward()
                update = opt.schedule_step()
                items = update[0].schedule(*update[1:])
                kernels = len([si for si in items if si.ast.op is Ops.SINK])
                for si in items:
                    si.run()
        return kernels, [w.numpy(), b.numpy()]

    with Context(FUSE_SIBLINGS=0):
        apart_kernels, apart = train(3)
    kernels, merged = train(3)
    assert kernels == apart_kernels - 2  # one kernel fewer per parameter
    for got, want in zip(merged, apart, strict=True):
        np.testing.assert_array_equal(got, want)


def test_kernels_with_no_input_in_common_are_not_merged() -> None:
    a, b = Tensor.empty(32, 64), Tensor.empty(32, 64)
    assert count_kernels(a.softmax(-1), b.softmax(-1)) == 2


def test_merged_kernels_keep_metadata_of_both() -> None:
    x, g = Tensor.empty(8, 32, requires_grad=True), Tensor.empty(8, 32)
    out = x.softmax(-1)
    (out * g).sum().backward()
    assert x.grad is not None
    (item,) = [si for si in out.schedule(x.grad) if si.ast.op is Ops.SINK]
    assert {("softmax", False), ("softmax", True)} <= {(m.name, m.backward) for m in item.metadata or ()}


def test_merge_siblings_leaves_a_schedule_without_siblings_alone() -> None:
    x = Tensor.empty(16, 16)
    items = (x @ x).schedule()
    assert merge_siblings(list(items)) == items


@pytest.mark.skipif(cl_unavailable() is not None, reason="no OpenCL device")
def test_not_merged_on_gpu_style_devices() -> None:
    x, g = Tensor.empty(16, 64, device="CL", requires_grad=True), Tensor.empty(16, 64, device="CL")
    out = x.softmax(-1)
    (out * g).sum().backward()
    assert x.grad is not None
    assert count_kernels(out, x.grad) == 2


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("name", sorted(ROW_OPS))
def test_merged_forward_and_backward_are_right(name: str, device: str) -> None:
    rng = np.random.default_rng(7)
    x, g = rng.standard_normal((5, 24)).astype(np.float32), rng.standard_normal((5, 24)).astype(np.float32)
    got = _forward_backward(ROW_OPS[name], x, g, device)
    xt = torch.tensor(x, requires_grad=True)
    out = {
        "softmax": lambda t: t.softmax(-1),
        "log_softmax": lambda t: t.log_softmax(-1),
        "layernorm": lambda t: torch.nn.functional.layer_norm(t, (24,), eps=1e-5),
        "rms": lambda t: t * (t.square().mean(-1, keepdim=True) + 1e-6).rsqrt(),
        "centered": lambda t: t - t.max(-1, keepdim=True).values,
    }[name](xt)
    (out * torch.tensor(g)).sum().backward()
    assert xt.grad is not None
    np.testing.assert_allclose(got[0], out.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    names=st.lists(st.sampled_from(sorted(ROW_OPS | ELEMENTWISE_OPS)), min_size=1, max_size=3),
    rows=st.integers(1, 9),
    cols=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
    device=st.sampled_from(["CPU", "PYTHON"]),
)
def test_merged_kernels_give_the_separate_kernels_bits(
    names: list[str], rows: int, cols: int, seed: int, device: str
) -> None:
    """Several row and elementwise ops of one input and their gradient, realized together: merged or not, the same
    bits (each store keeps its own expression and its reduces' order)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    gs = [rng.standard_normal((rows, cols)).astype(np.float32) for _ in names]

    def run() -> list[np.ndarray]:
        xt = Tensor(x, device=device, requires_grad=True)
        outs = [(ROW_OPS | ELEMENTWISE_OPS)[n](xt) for n in names]
        sum((o * Tensor(g, device=device)).sum() for o, g in zip(outs, gs, strict=True)).backward()
        assert xt.grad is not None
        Tensor.realize(*outs, xt.grad)
        return [o.numpy() for o in (*outs, xt.grad)]

    with Context(FUSE_SIBLINGS=0):
        apart = run()
    for got, want in zip(run(), apart, strict=True):
        np.testing.assert_array_equal(got, want)


def test_jitted_merged_kernel_reads_each_call_s_inputs() -> None:
    @TinyJit
    def step(x: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
        x.grad = None
        out = x.softmax(-1)
        (out * g).sum().backward()
        assert x.grad is not None
        return out.realize(), x.grad.realize()

    rng = np.random.default_rng(3)
    for _ in range(4):
        xn, gn = rng.standard_normal((6, 32)).astype(np.float32), rng.standard_normal((6, 32)).astype(np.float32)
        out, grad = step(Tensor(xn, requires_grad=True).realize(), Tensor(gn).realize())
        xt = torch.tensor(xn, requires_grad=True)
        (xt.softmax(-1) * torch.tensor(gn)).sum().backward()
        assert xt.grad is not None
        np.testing.assert_allclose(out.numpy(), torch.softmax(torch.tensor(xn), -1).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_eager_repeats_hit_the_schedule_cache_with_the_merged_kernel() -> None:
    rng = np.random.default_rng(5)
    hits = cache_counts["hit"]
    for _ in range(3):
        xn, gn = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((4, 16)).astype(np.float32)
        got = _forward_backward(ROW_OPS["layernorm"], xn, gn, "CPU")
        xt = torch.tensor(xn, requires_grad=True)
        out = torch.nn.functional.layer_norm(xt, (16,), eps=1e-5)
        (out * torch.tensor(gn)).sum().backward()
        assert xt.grad is not None
        np.testing.assert_allclose(got[0], out.detach().numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert cache_counts["hit"] >= hits + 2
