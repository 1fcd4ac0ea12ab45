"""Tests for fusegrad/runtime/graph/cpu.py: a TinyJit replay on CPU runs its kernels through one generated C call, and
gives what replays without graphs (JIT=2) give: random small graphs with inputs swapped per call, symbolic
variables, transfers between CPU devices, and the GPT and convnet examples' training steps."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fusegrad import Tensor, TinyJit, Variable
from fusegrad.helpers import JIT, Context
from fusegrad.nn import optim
from fusegrad.nn.state import get_parameters
from fusegrad.runtime.graph.cpu import CPUGraph


def graph_items(jit: TinyJit[object]) -> list[CPUGraph]:
    return [ei.prg for ei in jit.jit_cache if isinstance(ei.prg, CPUGraph)]


def test_a_replay_runs_one_generated_call() -> None:
    @TinyJit
    def step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        a = ((x + 1) * y).realize()
        return a, (a.exp() - x).sum(1).realize()

    rng = np.random.default_rng(0)
    for _ in range(5):
        x, y = rng.standard_normal((2, 3, 4), dtype=np.float32)
        a, s = step(Tensor(x), Tensor(y))
        np.testing.assert_allclose(a.numpy(), (x + 1) * y, rtol=1e-6)
        np.testing.assert_allclose(s.numpy(), (np.exp((x + 1) * y) - x).sum(1), rtol=1e-5)
    (graph,) = graph_items(step)
    assert len(step.jit_cache) == 1
    assert len(graph.jit_cache) == 2
    assert graph.src.count("f[") == 2  # one call per kernel, through the function-pointer table


def random_program(rng: np.random.Generator, n_ops: int) -> Callable[[Tensor, Tensor], list[Tensor]]:
    """A random chain of elementwise ops, reductions and views on two (4, 6) inputs, realized at random points."""
    choices = [
        lambda a, b: a + b,
        lambda a, b: a * b,
        lambda a, b: (a - b).relu(),
        lambda a, b: a.sigmoid(),
        lambda a, b: a.sum(1, keepdim=True) + b,
        lambda a, b: a.max(0, keepdim=True) - b,
        lambda a, b: a.flip(1) + b.T.T,
        lambda a, b: a.reshape(6, 4).T * b,
    ]
    picks = [(int(rng.integers(len(choices))), bool(rng.integers(2))) for _ in range(n_ops)]

    def program(x: Tensor, y: Tensor) -> list[Tensor]:
        out, a, b = [], x, y
        for k, realize in picks:
            a, b = choices[k](a, b), a
            if realize:
                out.append(a.contiguous().realize())
        return [*out, a.contiguous().realize()]

    return program


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_match_replays_without_graphs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    program = random_program(rng, 8)
    inputs = [rng.standard_normal((2, 4, 6), dtype=np.float32) for _ in range(5)]
    results = {}
    for jit_flag in (1, 2):
        with Context(JIT=jit_flag):
            step = TinyJit(lambda x, y: program(x, y))
            results[jit_flag] = [[t.numpy() for t in step(Tensor(x), Tensor(y))] for x, y in inputs]
            if jit_flag == 1 and len(step.captured.jit_cache if step.captured else []) > 1:
                assert graph_items(step), "two kernels or more replay through a CPU graph"
    eager = [[t.numpy() for t in program(Tensor(x), Tensor(y))] for x, y in inputs]
    for got, want, plain in zip(results[1], results[2], eager, strict=True):
        for g, w, p in zip(got, want, plain, strict=True):
            np.testing.assert_array_equal(g, w)
            np.testing.assert_allclose(g, p, rtol=1e-5, atol=1e-6)


def test_an_input_fed_back_and_a_symbolic_variable() -> None:
    n = Variable("graph_cpu_n", 1, 8)

    @TinyJit
    def step(x: Tensor, k: object) -> Tensor:
        y = (x[:, :k] * 2).realize()  # type: ignore[index]  # a bound variable slices like an int
        return (y + 1).sum(1).realize()

    base = np.arange(16, dtype=np.float32).reshape(2, 8)
    for size in (2, 5, 3, 8, 1, 7):
        out = step(Tensor(base + size), n.bind(size))
        np.testing.assert_allclose(out.numpy(), ((base + size)[:, :size] * 2 + 1).sum(1), rtol=1e-6)
    (graph,) = graph_items(step)
    assert "v[0]" in graph.src  # the variable's value goes through the values table
    with pytest.raises(ValueError, match="graph_cpu_n"):
        graph(graph.jit_cache[0].bufs, {})  # type: ignore[arg-type]  # slots are empty: the value check comes first


def test_state_updated_in_place_across_replays() -> None:
    w = Tensor.zeros(4).contiguous().realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        w.assign(w + x).realize()
        return (w * 2).realize()

    total = np.zeros(4, dtype=np.float32)
    for i in range(6):
        x = np.full(4, i, dtype=np.float32)
        total += x
        np.testing.assert_allclose(step(Tensor(x)).numpy(), total * 2)
    np.testing.assert_allclose(w.numpy(), total)


def test_transfers_between_cpu_devices_run_in_the_graph() -> None:
    @TinyJit
    def step(x: Tensor) -> Tensor:
        a = (x + 1).realize()
        b = a.to("CPU:1").realize()
        return (b * 3).realize()

    rng = np.random.default_rng(3)
    for _ in range(4):
        x = rng.standard_normal(5, dtype=np.float32)
        out = step(Tensor(x))
        assert out.device == "CPU:1"
        np.testing.assert_allclose(out.numpy(), (x + 1) * 3, rtol=1e-6)
    (graph,) = graph_items(step)
    assert "__builtin_memcpy" in graph.src
    assert len(graph.jit_cache) == 3


def test_a_sharded_step_runs_kernels_of_both_devices_in_one_graph() -> None:
    @TinyJit
    def step(x: Tensor) -> Tensor:
        y = (x * 2 + 1).realize()
        return y.sum(0).realize()  # sums the shards: kernels and transfers on both devices

    rng = np.random.default_rng(4)
    for _ in range(4):
        a = rng.standard_normal((4, 6), dtype=np.float32)
        np.testing.assert_allclose(
            step(Tensor(a).shard(("CPU", "CPU:1"), axis=0)).numpy(), (a * 2 + 1).sum(0), rtol=1e-5
        )
    graphs = graph_items(step)
    assert {ei.prg.device for graph in graphs for ei in graph.jit_cache if ei.prg is not None} == {"CPU", "CPU:1"}


def train_losses(make: Callable[[], tuple[object, Callable[[Tensor, Tensor], Tensor]]], batches: list) -> list[float]:  # type: ignore[type-arg]
    """Losses of a training step replayed over the batches, and the final weights' sum, from a fixed seed (with
    graphs on, the replays must have gone through CPU graphs)."""
    Tensor.manual_seed(0)
    model, loss_of = make()
    opt = optim.Adam(get_parameters(model), lr=1e-2)

    @TinyJit
    @Tensor.train()
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = loss_of(x, y).backward()
        Tensor.realize(loss, *[p.grad for p in opt.params if p.grad is not None])
        opt.step()
        return loss

    losses = [step(Tensor(x), Tensor(y)).item() for x, y in batches]
    assert bool(graph_items(step)) == (JIT.value != 2)
    return [*losses, sum(float(p.sum().item()) for p in get_parameters(model))]


def test_gpt_step_with_graphs_equals_without() -> None:
    from fusegrad.examples.gpt import GPT, GPTConfig

    cfg = GPTConfig(16, 8, 16, 2, 1)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 16, (2, 8)).astype(np.int32), rng.integers(0, 16, (2, 8)).astype(np.int32))] * 2
    batches += [(rng.integers(0, 16, (2, 8)).astype(np.int32), rng.integers(0, 16, (2, 8)).astype(np.int32))] * 2

    def make() -> tuple[object, Callable[[Tensor, Tensor], Tensor]]:
        model = GPT(cfg)
        return model, model.loss

    with Context(JIT=2):
        plain = train_losses(make, batches)
    assert train_losses(make, batches) == plain


def test_convnet_step_with_graphs_equals_without() -> None:
    from fusegrad.examples.mnist import ConvNet

    rng = np.random.default_rng(1)
    batches = [(rng.integers(0, 255, (2, 1, 28, 28)).astype(np.uint8), rng.integers(0, 10, 2).astype(np.int32))] * 4

    def make() -> tuple[object, Callable[[Tensor, Tensor], Tensor]]:
        model = ConvNet(4)
        return model, lambda x, y: model(x.float() / 255.0).sparse_categorical_crossentropy(y)

    with Context(JIT=2):
        plain = train_losses(make, batches)
    assert train_losses(make, batches) == plain
