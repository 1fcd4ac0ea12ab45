"""Tests for fusegrad/engine/jit.py: TinyJit runs, captures and replays (new inputs, same outputs, assigns to weights,
copies, pruning), and every footgun that must raise JitError instead of replaying something else."""

from __future__ import annotations

import gc
import re
import weakref
from typing import Any

import numpy as np
import pytest

from fusegrad import Tensor, Variable
from fusegrad.dtype import dtypes
from fusegrad.engine.jit import JitError, TinyJit, known_input
from fusegrad.engine.realize import CompiledRunner
from fusegrad.helpers import JIT, Context, GlobalCounters
from fusegrad.uop import Ops
from test.shared import expected, steps, vec


class Counted:
    """A function that counts how often Python actually ran it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        self.calls += 1
        return (x * 2 + y).realize()


# *** capture and replay ***


def test_replays_with_new_inputs_and_skips_the_function() -> None:
    fn = Counted()
    step = TinyJit(fn)
    outputs = []
    for i in range(5):
        x, y = vec(i, 1, 2), vec(10, 20, 30 + i)
        out = step(x, y)
        np.testing.assert_allclose(out.numpy(), x.numpy() * 2 + y.numpy())
        outputs.append(out)
    assert fn.calls == 2  # eager, capture; then replays only
    assert step.cnt == 5
    assert all(out is outputs[1] for out in outputs[2:])  # the captured output tensor, refilled


def test_replay_runs_the_captured_kernels_and_counts_them() -> None:
    step = TinyJit(lambda x: ((x + 1).contiguous() * 3).sum().realize())
    for _ in range(2):
        step(vec(1, 2))
    GlobalCounters.reset()
    assert step(vec(1, 2)).item() == 15
    assert GlobalCounters.kernel_count == len(step.captured.jit_cache) >= 1  # type: ignore[union-attr]


def test_unrealized_inputs_are_realized_and_intermediates_persist() -> None:
    @TinyJit
    def step(x: Tensor) -> Tensor:
        hidden = (x * x).realize()  # an intermediate buffer, realized on its own
        return (hidden + x).realize()

    for i in range(4):
        x = Tensor([1.0, 2.0, 3.0]) + i  # lazy: the JIT realizes it first
        np.testing.assert_allclose(step(x).numpy(), (np.arange(1, 4) + i) ** 2 + np.arange(1, 4) + i)


def test_an_output_fed_back_as_the_input() -> None:
    """`x = step(x)`: on replay the input is the memory the kernels write; it is read from a copy."""
    step = TinyJit(lambda x: (x.flip(0) * 2).realize())
    x, expected = Tensor(np.arange(1000, dtype=np.float32)), np.arange(1000, dtype=np.float32)
    for _ in range(5):
        x, expected = step(x), expected[::-1] * 2
        np.testing.assert_array_equal(x.numpy(), expected)


def test_keyword_and_container_inputs() -> None:
    @TinyJit
    def step(xs: list[Tensor], scale: dict[str, Tensor], *, bias: Tensor) -> dict[str, Any]:
        total = (xs[0] + xs[1]) * scale["s"] + bias
        return {"sum": total.realize(), "parts": [xs[0].max().realize()]}

    for i in range(4):
        a, b, s, bias = vec(i, 1), vec(2, i), vec(3, 3), vec(0, 100)
        out = step([a, b], {"s": s}, bias=bias)
        np.testing.assert_allclose(out["sum"].numpy(), [(i + 2) * 3, (1 + i) * 3 + 100])
        assert out["parts"][0].item() == max(i, 1)


def test_a_tensor_passed_alone_and_in_a_list_is_one_input() -> None:
    step = TinyJit(lambda x, xs: (x + xs[0] + xs[1]).realize())
    for i in range(4):
        x = vec(i, 2 * i)
        assert step(x, [x, vec(1, 1)]).tolist() == [2 * i + 1, 4 * i + 1]
    assert step.captured is not None
    assert len(step.captured.keys) == 2


def test_an_empty_input_before_others() -> None:
    step = TinyJit(lambda empty, x: (x * 2 + empty.sum()).realize())
    for i in range(4):
        assert step(Tensor.empty(0), vec(i, 1)).tolist() == [2 * i, 2]


def test_returned_input_is_this_calls_input() -> None:
    @TinyJit
    def scale(x: Tensor) -> tuple[Tensor, Tensor]:
        x.assign(x * 3).realize()
        return x, (x + 1).realize()

    for i in range(4):
        x = vec(1, i)
        same, plus = scale(x)
        assert same is x
        assert x.tolist() == [3, 3 * i]
        assert plus.tolist() == [4, 3 * i + 1]


def test_method_and_prune_decorator_forms() -> None:
    class Model:
        def __init__(self) -> None:
            self.w = vec(1, 2, 3)

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return (x * self.w).realize()

    model = Model()
    for i in range(4):
        assert model(vec(i, i, i)).tolist() == [i, 2 * i, 3 * i]
    with pytest.raises(JitError, match=r"argument 'self' \(argument 0\) changed since capture: got Model object 0x"):
        Model()(vec(1, 1, 1))  # the JIT lives on the class: its capture holds the first model's weights

    @TinyJit(prune=True)
    def pruned(x: Tensor) -> Tensor:
        return x.sum().realize()

    assert [pruned(vec(i, 1)).item() for i in range(4)] == [1, 2, 3, 4]


def test_prune_keeps_only_input_kernels() -> None:
    weight = vec(1, 2)

    def step(x: Tensor) -> Tensor:
        doubled = (weight * 2).realize()  # does not depend on x: runs once at capture
        return (x + doubled).realize()

    pruned, full = TinyJit(step, prune=True), TinyJit(step)
    for i in range(4):
        assert pruned(vec(i, i)).tolist() == full(vec(i, i)).tolist() == [2 + i, 4 + i]
    assert pruned.captured is not None
    assert full.captured is not None
    assert len(pruned.captured.jit_cache) == len(full.captured.jit_cache) - 1


def test_prune_keeps_state_updates() -> None:
    """The random counter's kernels read no input but update memory that outlives the call: they stay."""
    step = TinyJit(lambda x: (x + Tensor.rand(3)).realize(), prune=True)
    draws = [tuple(step(vec(0, 0, 0)).tolist()) for _ in range(5)]
    assert len(set(draws)) == 5


def chain(x: Tensor, kept: list[Tensor]) -> Tensor:
    """Ten realized steps; the first intermediate is kept by the caller, the others die."""
    for i in range(10):
        x = (x + 1).realize()
        if i == 0:
            kept.append(x)
    return x


@pytest.mark.parametrize("planner", [1, 0])
def test_memory_planner_shares_dead_intermediates(planner: int) -> None:
    kept: list[Tensor] = []
    step = TinyJit(lambda x: chain(x, kept))
    with Context(NO_MEMORY_PLANNER=1 - planner):
        for i in range(4):
            assert step(vec(i, 2 * i)).tolist() == [i + 10, 2 * i + 10]
            assert kept[-1].tolist() == [i + 1, 2 * i + 1]  # a live intermediate is never shared: replays refill it
    assert step.captured is not None
    distinct = {id(b) for ei in step.captured.jit_cache for b in ei.bufs if b is not None}
    assert len(distinct) == (4 if planner else 10)  # kept, output, and 8 dead ones sharing two (ping-pong)


def test_copies_replay() -> None:
    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (x.to("PYTHON") * 2).realize()

    for i in range(4):
        out = step(vec(i, 5))
        assert out.device == "PYTHON"
        assert out.tolist() == [2 * i, 10]


def test_multi_device_work_inside_replays() -> None:
    """Sharding an input inside copies views of it to each device: replays copy views of the new input."""
    devices = ("CPU", "CPU:1")
    weight = Tensor([1.0, 2.0, 3.0, 4.0]).shard(devices, axis=0).realize()

    def step(x: Tensor) -> tuple[Tensor, Tensor]:
        product = (x.shard(devices, axis=0) * weight).realize()  # dies after the call: the planner may reuse it
        hidden = (product + 1).realize()
        return (hidden * 2).realize(), hidden.sum().realize()  # the sum's allreduce reads views of its partials

    jitted = TinyJit(step)
    for i in range(5):
        out, total = jitted(vec(i, i, i, i))
        assert out.device == devices
        assert out.tolist() == [2 * (i * w + 1) for w in (1, 2, 3, 4)]
        assert total.item() == sum(i * w + 1 for w in (1, 2, 3, 4))


def test_multi_device_inputs() -> None:
    """A sharded input: each device's buffer is swapped in; a change of placement is refused."""
    devices = ("CPU", "CPU:1")
    weight = Tensor([1.0, 2.0, 3.0, 4.0]).shard(devices, axis=0).realize()
    step = TinyJit(lambda x, y: ((x * weight).sum().to("CPU") + y).realize())
    for i in range(5):
        x = Tensor([float(i), 1.0, 2.0, float(i)]).shard(devices, axis=0)
        out = step(x, vec(10))
        assert out.item() == i + 2 + 6 + 4 * i + 10
    with pytest.raises(JitError, match=r"changed since capture: got shape \(4,\) .* replicated"):
        step(Tensor([1.0, 2.0, 3.0, 4.0]).shard(devices), vec(10))


def test_reset_and_jit_off() -> None:
    fn = Counted()
    step = TinyJit(fn)
    for _ in range(3):
        step(vec(1), vec(2))
    step.reset()
    assert (step.cnt, step.captured) == (0, None)
    assert step(vec(1, 1), vec(2, 2)).tolist() == [4, 4]  # new shapes are fine after reset
    with Context(JIT=0):
        assert JIT.value == 0
        before = fn.calls
        for _ in range(3):
            step(vec(1, 1), vec(2, 2))
        assert fn.calls == before + 3


def test_debug_lines(capsys: pytest.CaptureFixture[str]) -> None:
    step = TinyJit(lambda x: (x + 1).realize())
    with Context(DEBUG=1):
        for _ in range(3):
            step(vec(1))
    out = capsys.readouterr().out
    assert re.search(r"JIT captured 1 kernels with 1 inputs", out)
    assert re.search(r"JIT replayed 1 kernels in [\d.]+ ms", out)


# *** a training step ***


def mlp_weights() -> list[Tensor]:
    rng = np.random.default_rng(0)
    shapes = [(3, 8), (8,), (8, 2), (2,)]
    return [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True).realize() for s in shapes]


def sgd_step(weights: list[Tensor], x: Tensor, y: Tensor) -> Tensor:
    """One SGD step of a 3-8-2 MLP with a squared loss; the update writes the weights in place."""
    w1, b1, w2, b2 = weights
    loss = (((x @ w1 + b1).relu() @ w2 + b2 - y) ** 2).mean()
    grads = loss.gradient(*weights)
    Tensor.realize(loss, *grads)  # every gradient reads the old weights: compute them before any write
    for w, g in zip(weights, grads, strict=True):
        w.assign(w.detach() - g * 0.1)
    Tensor.realize(*weights)
    return loss


def test_jitted_training_step_matches_eager() -> None:
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((4, 3)), rng.standard_normal((4, 2))) for _ in range(6)]
    eager_weights, jit_weights = mlp_weights(), mlp_weights()
    step = TinyJit(lambda x, y: sgd_step(jit_weights, x, y))
    for x, y in batches:
        eager_loss = sgd_step(eager_weights, Tensor(x.astype(np.float32)), Tensor(y.astype(np.float32)))
        jit_loss = step(Tensor(x.astype(np.float32)), Tensor(y.astype(np.float32)))
        np.testing.assert_allclose(jit_loss.item(), eager_loss.item(), rtol=1e-5)
    for eager, jitted in zip(eager_weights, jit_weights, strict=True):
        np.testing.assert_allclose(jitted.numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)
    assert step.cnt == 6


def test_pending_writes_run_once_or_every_call() -> None:
    """An assign left pending by the function is realized (and replayed); one made before the capture is not."""
    weights, outside = vec(0, 0), vec(5)

    @TinyJit
    def step(x: Tensor) -> Tensor:
        weights.assign(weights + x)  # nobody reads it in here: the JIT realizes it anyway
        return (x * outside).sum().realize()

    step(vec(1, 1))
    outside.assign(outside + 1)  # pending when the capture starts, and read by it
    for _ in range(3):
        assert step(vec(1, 2)).item() == 18
    assert weights.tolist() == [4, 7]
    assert outside.tolist() == [6]


def test_a_function_with_only_side_effects() -> None:
    total = vec(0, 0)

    @TinyJit
    def accumulate(x: Tensor) -> None:
        total.assign(total + x * 2)

    for i in range(5):
        assert accumulate(vec(i, 1)) is None
    assert total.tolist() == [20, 10]


def test_debug_2_replays_through_exec_items(capsys: pytest.CaptureFixture[str]) -> None:
    step = captured(lambda x: (x + 1).realize(), vec(1))
    with Context(DEBUG=2):
        assert step(vec(2)).tolist() == [3]
    assert "JIT replayed 1 kernels" in capsys.readouterr().out


def test_lazy_weight_updates_match_eager() -> None:
    """The same MLP step without realizing the updated weights: the JIT realizes the pending assigns."""
    eager_weights, jit_weights = mlp_weights(), mlp_weights()

    def lazy_step(weights: list[Tensor], x: Tensor) -> Tensor:
        loss = ((x @ weights[0] + weights[1]).relu() @ weights[2] + weights[3]).square().mean()
        grads = loss.gradient(*weights)
        Tensor.realize(loss, *grads)
        for w, g in zip(weights, grads, strict=True):
            w.assign(w.detach() - g * 0.05)  # left pending
        return loss

    step = TinyJit(lambda x: lazy_step(jit_weights, x))
    for i in range(5):
        x = np.full((2, 3), i / 5, dtype=np.float32)
        lazy_step(eager_weights, Tensor(x))
        step(Tensor(x))
    for eager, jitted in zip(eager_weights, jit_weights, strict=True):
        np.testing.assert_allclose(jitted.numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)


def run_with_optimizer(use_jit: bool, dropout: float, steps: int = 5) -> list[np.ndarray]:
    """Train a Linear-dropout-Linear model with nn.optim.Adam from fixed weights and seed; the final weights."""
    from fusegrad import nn
    from fusegrad.nn import optim

    Tensor.manual_seed(0)
    rng = np.random.default_rng(2)
    layers = [nn.Linear(3, 8), nn.Linear(8, 2)]
    params = [p for layer in layers for p in (layer.weight, layer.bias) if p is not None]
    for p in params:
        p.assign(Tensor(rng.standard_normal(p.shape).astype(np.float32))).realize()
    opt = optim.Adam(params, lr=0.01)

    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = (layers[1](layers[0](x).relu().dropout(dropout)) - y).square().mean()
            loss.backward()
            opt.step()
        return loss.realize()

    run = TinyJit(step) if use_jit else step
    for i in range(steps):
        x = Tensor(np.full((4, 3), i / steps, dtype=np.float32) + np.eye(4, 3, dtype=np.float32))
        run(x, Tensor(np.ones((4, 2), dtype=np.float32)))
    return [p.numpy() for p in params]


@pytest.mark.parametrize("dropout", [0.0, pytest.param(0.3, marks=pytest.mark.slow)])
def test_jitted_optimizer_step_matches_eager(dropout: float) -> None:
    """nn.optim.Adam's moments and step count (and dropout's device counter) all advance on replay."""
    eager_weights, jit_weights = run_with_optimizer(False, dropout), run_with_optimizer(True, dropout)
    for eager, jitted in zip(eager_weights, jit_weights, strict=True):
        np.testing.assert_allclose(jitted, eager, rtol=1e-5, atol=1e-6)


# *** footguns ***


def captured(fn: Any, *args: Tensor) -> TinyJit[Any]:
    """A TinyJit of fn that has run twice (so the next call replays)."""
    jit = TinyJit(fn)
    for _ in range(2):
        jit(*args)
    return jit


def test_an_error_while_capturing_leaves_nothing_behind() -> None:
    fail = [False, True]

    @TinyJit
    def step(x: Tensor) -> Tensor:
        out = (x + 1).realize()
        if fail and fail.pop(0):
            raise ValueError("boom")
        return out

    x = vec(1, 2)
    step(x)
    with pytest.raises(ValueError, match="boom"):
        step(x)
    assert x.uop.op.name == "BUFFER"  # the capture alias is undone
    assert step.cnt == 1  # the next call captures again
    assert [step(vec(i, i)).tolist() for i in range(3)] == [[1, 1], [2, 2], [3, 3]]


def test_jit_error_is_a_runtime_error_and_an_assertion_error() -> None:
    """RuntimeError is the house type; the reference's tests catch the AssertionError its older JIT raised."""
    assert issubclass(JitError, RuntimeError)
    assert issubclass(JitError, AssertionError)
    step = TinyJit(lambda x, y: (x + y).realize())
    x = vec(1, 2)
    with pytest.raises(AssertionError, match="duplicate inputs"):
        step(x, x)


def test_changed_shape_dtype_or_device() -> None:
    step = captured(lambda x, y: (x + y).realize(), vec(1, 2), vec(3, 4))
    with pytest.raises(JitError, match=r"input 'x' \(argument 0\) changed since capture: got shape \(3,\).*expected "
                                       r"shape \(2,\)"):  # fmt: skip
        step(vec(1, 2, 3), vec(3, 4))
    with pytest.raises(JitError, match=r"input 'y' \(argument 1\) changed since capture: got shape \(2,\) dtypes.half"):
        step(vec(1, 2), vec(3, 4).cast(dtypes.float16))
    with pytest.raises(JitError, match=r"'x' \(argument 0\) changed since capture: got .* on PYTHON"):
        step(vec(1, 2).to("PYTHON"), vec(3, 4))
    with pytest.raises(JitError, match=r"Tensor arguments changed since capture: got \['x' \(argument 0\), 'y' "):
        step(vec(1, 2), y=vec(3, 4))
    assert step(vec(1, 2), vec(3, 4)).tolist() == [4, 6]  # still usable


def test_changed_python_arguments() -> None:
    step = captured(lambda x, scale, label=None: (x * scale).realize(), vec(1, 2), 2.0)
    assert step(vec(3, 4), 2.0).tolist() == [6, 8]
    with pytest.raises(JitError, match=r"argument 'scale' \(argument 1\) changed since capture: got float 3.0, "
                                       r"expected float 2.0; Python values and objects are baked"):  # fmt: skip
        step(vec(3, 4), 3.0)
    with pytest.raises(JitError, match=r"argument 'label' \(keyword\) changed since capture: got str 'a', expected "
                                       r"nothing"):  # fmt: skip
        step(vec(3, 4), 2.0, label="a")


def test_changed_training_mode() -> None:
    step = captured(lambda x: (x.dropout(0.5) * 1).realize(), vec(1, 1))  # captured in eval mode: no dropout
    with Tensor.train(), pytest.raises(JitError, match=r"Tensor.training changed since capture: got True, expected"):
        step(vec(1, 1))
    assert step(vec(2, 2)).tolist() == [2, 2]


def test_changed_view_of_an_input() -> None:
    base = vec(1, 2, 3, 4)
    step = captured(lambda x: (x * 1).realize(), base[0:2])
    assert step(vec(5, 6, 7, 8)[0:2]).tolist() == [5, 6]  # the same view of another buffer
    with pytest.raises(JitError, match=r"changed since capture: got shape \(2,\) .* as a shrink view of a 4-element "):
        step(vec(5, 6, 7, 8)[2:4])
    with pytest.raises(JitError, match=r"changed since capture: got shape \(2,\) .* of a 2-element buffer"):
        step(vec(5, 6))


def test_non_tensor_result() -> None:
    step = TinyJit(lambda x: ((x + 1).realize(), 3))
    step(vec(1))
    with pytest.raises(JitError, match=r"result\[1\] is a int, expected Tensors"):
        step(vec(1))


def test_no_kernels_on_capture() -> None:
    step = TinyJit(lambda x: x)
    step(vec(1))
    with pytest.raises(JitError, match="ran no kernels on the capture call"):
        step(vec(1))


def test_nested_jit() -> None:
    inner = TinyJit(lambda x: (x * 2).realize())
    outer = TinyJit(lambda x: inner((x + 1).realize()))
    outer(vec(1))  # eager: inner runs eagerly too
    with pytest.raises(
        RuntimeError, match="having TinyJit inside another TinyJit is not supported: called from inside"
    ):
        outer(vec(1))


def test_constant_inputs_get_memory_and_follow_each_call() -> None:
    """Tensor.zeros/ones/full as inputs are realized into buffers of their own, so a replay takes this call's value."""
    step = TinyJit(lambda x, y, z: (x + y + z).realize())
    for i in range(5):
        y = Tensor.full((3,), float(i))
        assert step(vec(i, i, i), y, Tensor.zeros(3)).tolist() == [2 * i] * 3
        assert y.uop.base.op is Ops.BUFFER  # the caller's tensor now names the memory it was realized into


def test_duplicate_inputs() -> None:
    step = TinyJit(lambda x, y: (x + y).realize())
    x = vec(1, 2)
    with pytest.raises(JitError, match=r"duplicate inputs: 'x' \(argument 0\) and 'y' \(argument 1\) share one"):
        step(x, x)
    pair = vec(1, 2, 3, 4)
    with pytest.raises(JitError, match="duplicate inputs"):
        step(pair[0:2], pair[2:4])
    with pytest.raises(JitError, match=r"is a UOp: got Ops\.BUFFER"):
        step(vec(1), x.uop)


weight = vec(1, 2, 3)


class Holder:
    def __init__(self, t: Tensor) -> None:
        self.t = t


holder = Holder(weight.reshape(3, 1))


def read_holder() -> Tensor:
    return holder.t.reshape(3)


def test_input_also_read_as_a_global() -> None:
    step = TinyJit(lambda x: (x + weight).realize())
    step(weight)  # eager is fine
    with pytest.raises(JitError, match=r"input 'x' \(argument 0\) is also read without being passed, through the "
                                       r"function's variable 'weight'"):  # fmt: skip
        step(weight)
    assert step.captured is None

    @TinyJit
    @Tensor.train()
    def decorated(x: Tensor) -> Tensor:
        return (x + weight).realize()

    decorated(weight)
    with pytest.raises(JitError, match="through the function's variable 'weight'"):
        decorated(weight)


def test_input_also_read_as_an_attribute_of_self() -> None:
    class Model:
        def __init__(self) -> None:
            self.layers = [Holder(vec(1, 2))]

        def __call__(self, x: Tensor) -> Tensor:
            return x * self.layers[0].t

        @TinyJit
        def forward(self, x: Tensor) -> Tensor:
            return self(x).realize()

    model = Model()
    model.forward(vec(3, 4))
    with pytest.raises(JitError, match=r"through the function's variable 'self.layers\[0\].t'"):
        model.forward(model.layers[0].t)


def test_input_also_read_through_another_tensor() -> None:
    """A helper reads a view of the input's memory: only the captured kernels show it (the alias check)."""
    step = TinyJit(lambda x: (x + read_holder()).realize())
    step(weight)
    with pytest.raises(JitError, match=r"input 'x' \(argument 0\) is also read without being passed, through kernel"):
        step(weight)
    assert weight.uop.op.name == "BUFFER"  # the input tensor is restored after the capture
    assert TinyJit(lambda x: (x + read_holder()).realize())(vec(1, 1, 1)).tolist() == [2, 3, 4]


def test_result_view_of_an_input() -> None:
    @TinyJit
    def step(x: Tensor) -> tuple[Tensor, Tensor]:
        return (x + 1).realize(), x.reshape(2, 1)

    step(vec(1, 2))
    with pytest.raises(JitError, match=r"result\[1\] is a view of input 'x' \(argument 0\)"):
        step(vec(1, 2))


def test_jit_cache_lists_what_replays_run() -> None:
    step = TinyJit(lambda x: steps(x, 3))
    assert step.jit_cache == []
    assert step.input_replace == {}
    with Context(JIT=2):  # graphs off (CPU has one: test/engine/test_graph.py covers it)
        for i in range(3):
            assert step(vec(i)).tolist() == expected([i], 3)
    assert len(step.jit_cache) == 3
    assert all(isinstance(ei.prg, CompiledRunner) for ei in step.jit_cache)
    assert step.captured is not None
    assert step.captured.jit_cache == step.jit_cache  # no graph: the captured list is what replays run
    assert set(step.input_replace) == {(0, 1)}  # the first kernel reads the input in slot 1


# *** the per-call work of a replay: an input node is worked out once, every call still checked ***


def test_an_input_node_is_worked_out_once() -> None:
    x = vec(1, 2)
    known = known_input(x.uop)
    assert known_input(x.uop) is known  # kept in the node: every later call passing it skips the work
    assert known.parts == (x.uop.buffer,)
    assert known.spec.shape == (2,)
    assert not known.symbolic
    x.uop.buffer.deallocate()  # e.g. free_intermediates on an output fed back in
    assert known_input(x.uop) is known
    assert known.parts[0].is_allocated()  # the memory comes back, as for a node seen the first time


def test_replays_of_the_same_tensors_see_their_new_values() -> None:
    step = TinyJit(lambda x, y: (x * 2 + y).realize())
    x, y = vec(1, 2), vec(10, 20)
    for _ in range(3):
        assert step(x, y).tolist() == [12, 24]
    assert step.captured is not None
    assert known_input(x.uop).spec is step.captured.specs[0]  # the capture's own spec: compared by identity
    x.assign(vec(5, 6)).realize()  # new values in x's memory
    y.replace(vec(0, 1))  # y now names other memory
    assert step(x, y).tolist() == [10, 13]


# *** a replay of the very same Tensors repeats the last one (SameCall): nothing collected, checked or placed again ***


def test_a_replay_of_the_same_tensors_repeats_the_last_one() -> None:
    step = TinyJit(lambda x, y: (x * 2 + y).realize())
    x, y = vec(1, 2), vec(10, 20)
    for _ in range(3):
        step(x, y)
    assert step.captured is not None
    assert (same := step.captured.same) is not None
    GlobalCounters.reset()
    assert step(x, y).tolist() == [12, 24]
    assert step.captured.same is same  # repeated: no new record
    assert GlobalCounters.kernel_count == len(step.jit_cache)  # still counted
    x.assign(vec(5, 6)).realize()  # new values in x's memory
    assert step(x, y).tolist() == [20, 32]
    assert step(vec(0, 0), y).tolist() == [10, 20]  # another Tensor: the whole way, and a record of that call
    assert step.captured.same is not same
    assert step(x, y).tolist() == [20, 32]


def test_a_repeated_replay_follows_a_tensor_onto_other_memory() -> None:
    step = TinyJit(lambda x: (x * 2).realize())
    x = vec(1, 2)
    for _ in range(3):
        step(x)
    x.replace(vec(3, 4))  # the same Tensor, a new node and memory
    assert step(x).tolist() == [6, 8]


def test_a_repeated_replay_notices_its_input_memory_given_back() -> None:
    step = TinyJit(lambda x: (x * 2).realize())
    x = vec(1.0, 2.0)
    for _ in range(3):
        step(x)
    assert step.captured is not None
    assert (same := step.captured.same) is not None
    buf = x.uop.buffer
    buf.deallocate()  # e.g. free_intermediates on an output fed back in: the recorded address is gone
    buf.allocate().copyin(memoryview(np.array([3, 4], dtype=np.float32)).cast("B"))
    assert step(x).tolist() == [6, 8]
    assert step.captured.same is not same  # the whole way, on the new memory's address


def test_a_repeated_replay_still_checks_the_training_mode() -> None:
    step = TinyJit(lambda x: (x.dropout(0.5) * 1).realize())
    x = vec(1, 1)
    for _ in range(3):
        step(x)
    with Tensor.train(), pytest.raises(JitError, match=r"Tensor.training changed since capture: got True, expected"):
        step(x)


def test_a_repeated_replay_keeps_no_input_alive() -> None:
    step = TinyJit(lambda x: (x + 1).realize())
    for _ in range(3):
        x = vec(1, 2)
        step(x)
    assert step.captured is not None
    assert step.captured.same is not None
    memory = weakref.ref(x.uop.buffer)
    del x
    gc.collect()
    assert memory() is None  # the record holds its Tensors, nodes and memory weakly


def test_only_plain_calls_are_repeated() -> None:
    step = TinyJit(lambda x, scale=1.0: (x * scale).realize())
    x = vec(1, 2)
    for _ in range(3):
        step(x, scale=2.0)
    assert step.captured is not None
    assert step.captured.same is None  # a keyword argument: checked every call
    nested = TinyJit(lambda xs: (xs[0] + xs[1]).realize())
    pair = [vec(1), vec(2)]
    for _ in range(3):
        assert nested(pair).tolist() == [3]
    assert nested.captured is not None
    assert nested.captured.same is None  # a list's items may change in place
    pair[0] = vec(5)
    assert nested(pair).tolist() == [7]


def test_a_repeated_replay_prints_its_debug_line(capsys: pytest.CaptureFixture[str]) -> None:
    step = TinyJit(lambda x: (x + 1).realize())
    x = vec(1)
    for _ in range(3):
        step(x)
    with Context(DEBUG=1):
        step(x)
    assert "JIT replayed 1 kernels" in capsys.readouterr().out


def test_a_repeated_replay_draws_new_random_numbers() -> None:
    step = TinyJit(lambda x: (x + Tensor.rand(4)).realize())
    x = Tensor.zeros(4).contiguous().realize()
    draws = {tuple(step(x).tolist()) for _ in range(6)}
    assert step.captured is not None
    assert step.captured.same is not None
    assert len(draws) == 6
    plain = TinyJit(lambda x: (x + 1).realize())
    for _ in range(2):
        plain(x)
    assert plain._records == []  # drew nothing: its replays leave the generator alone


def test_known_inputs_are_still_checked() -> None:
    step = captured(lambda x, y: (x + y).realize(), vec(1, 2), vec(3, 4))
    small, half, x = vec(1), vec(1, 2).cast(dtypes.half).realize(), vec(1, 2)
    for t in (small, half, x):
        known_input(t.uop)  # worked out before this JIT sees them (another JIT's call)
    with pytest.raises(JitError, match=r"input 'x' \(argument 0\) changed since capture: got shape \(1,\)"):
        step(small, x)
    with pytest.raises(JitError, match=r"input 'y' \(argument 1\) changed since capture: got shape \(2,\) dtypes.half"):
        step(x, half)
    with pytest.raises(JitError, match=r"duplicate inputs: 'x' \(argument 0\) and 'y' \(argument 1\) share one"):
        step(x, x)
    with pytest.raises(JitError, match="duplicate inputs"):
        step(x, x.reshape(1, 2).reshape(2))
    assert step(x, vec(1, 1)).tolist() == [2, 3]


def test_a_bound_variable_in_a_list_takes_each_calls_value() -> None:
    n = Variable("jit_list_n", 1, 10)
    step = TinyJit(lambda x, sizes: (x[: sizes[0]] * 2).sum().realize())
    x = Tensor(np.arange(10, dtype=np.float32)).realize()
    for s in (2, 5, 3, 7):
        assert step(x, [n.bind(s)]).item() == 2 * sum(range(s))


def test_a_replay_keeps_no_input_alive() -> None:
    step = TinyJit(lambda x: (x * 2).realize())
    for i in range(3):
        step(vec(i, i))
    x = vec(5, 6)
    assert step(x).tolist() == [10, 12]
    memory = weakref.ref(x.uop.buffer)
    del x
    gc.collect()
    assert memory() is None  # what the call worked out lives in x's node and went with it


# *** the replay's hot path: CPU kernels and graphs called bare ***


@pytest.mark.parametrize("kernels", [1, 3])
def test_cpu_replays_call_the_kernels_bare(kernels: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from fusegrad.runtime.graph.cpu import CPUGraph

    step = TinyJit(lambda x, y: steps(x + y, kernels - 1) if kernels > 1 else (x + y).realize())
    empty = TinyJit(lambda e, x: (x + e.sum()).realize())  # an empty input has no memory (address 0)
    for i in range(2):
        step(vec(i + 0.5, 1.5), vec(2.5, 3.5))
        empty(Tensor.empty(0), vec(1.5, 2.5))
    assert step.captured is not None

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a replay went through a runner")

    monkeypatch.setattr(CompiledRunner, "__call__", refuse)
    monkeypatch.setattr(CPUGraph, "__call__", refuse)
    for i in range(3):  # new inputs (new memory) at every call
        x, y = vec(i + 0.5, 2 * i + 0.5), vec(10.5, 20.5)
        assert step(x, y).tolist() == expected([i + 11.0, 2 * i + 21.0], kernels - 1)
    assert step.captured._direct is not None
    for _ in range(3):
        assert empty(Tensor.empty(0), vec(1.5, 2.5)).tolist() == [1.5, 2.5]


def test_replays_with_variables_or_profiling_go_through_the_runners() -> None:
    n = Variable("jit_bare_n", 1, 8)
    step = TinyJit(lambda x, k: (x[:k].contiguous() + 1).realize())
    for i in range(1, 4):
        assert step(vec(1, 2, 3, 4, 5, 6, 7, 8), n.bind(i)).shrink(((0, i),)).tolist() == [2, 3, 4][:i]
    assert step.captured is not None
    assert step.captured._direct is None  # a kernel variable takes each call's value
    plain = TinyJit(lambda x: (x * 3).realize())
    for _ in range(3):
        plain(vec(1))
    with Context(DEBUG=2):  # per-kernel lines: the runners print them
        assert plain(vec(2)).tolist() == [6]
