"""The schedule cache: random programs run three times on fresh data must match numpy every time, and the second
and third runs must replay cached schedules (no scheduler run); random draws, assigns, views and copies between
devices included."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.engine import cache
from fusegrad.engine.cache import cache_counts, graph_structure, schedule_cache
from fusegrad.helpers import Context, GlobalCounters
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp

N_INPUTS = 3
SHAPE = (4, 4)

Pool = list[tuple[Tensor, np.ndarray]]


@pytest.fixture(autouse=True)
def _cache_on() -> Iterator[None]:
    with Context(SCHEDULE_CACHE=1, TRACK_MATCH_STATS=0):
        yield


# *** a program: steps on a pool of (tensor, array) pairs, run by fusegrad and numpy side by side ***


def _unary(kind: str, t: Tensor, a: np.ndarray) -> tuple[Tensor, np.ndarray]:
    match kind:
        case "relu":
            return t.relu(), np.maximum(a, 0)
        case "neg":
            return -t, -a
        case "sigmoid":
            return t.sigmoid(), 1 / (1 + np.exp(-a))
        case _:
            return (t.abs() + 1).sqrt(), np.sqrt(np.abs(a) + 1)


def _binary(kind: str, t: Tensor, u: Tensor, a: np.ndarray, b: np.ndarray) -> tuple[Tensor, np.ndarray]:
    match kind:
        case "add":
            return t + u, a + b
        case "mul":
            return t * u, a * b
        case "sub":
            return t - u, a - b
        case "max":
            return t.maximum(u), np.maximum(a, b)
        case _:
            return t @ u, a @ b


def _view(kind: str, t: Tensor, a: np.ndarray) -> tuple[Tensor, np.ndarray]:
    match kind:
        case "transpose":
            return t.T, a.T
        case "flip":
            return t.flip(0), np.flip(a, 0)
        case "shrink_pad":
            return t[1:3].pad(((1, 1), (0, 0))), np.pad(a[1:3], ((1, 1), (0, 0)))
        case _:
            return t.reshape(2, 8).T.reshape(SHAPE), a.reshape(2, 8).T.reshape(SHAPE)


def _realize_all(pool: Pool) -> None:
    Tensor.realize(*[t for t, _ in pool])


def _assign(step: tuple[Any, ...], pool: Pool) -> None:
    """Overwrite input k in place: first realize everything (what reads k's old contents reads them now), and copy
    the results that are views of k's memory (a view reads what the assign writes, as in numpy)."""
    _, kind, k, i = step
    _realize_all(pool)
    target = pool[k][0]
    for n, (t, a) in enumerate(pool):
        if n >= N_INPUTS and t.uop.base is target.uop.base:
            pool[n] = (t.contiguous().realize(), a)
    (target, old), (value, new) = pool[k], pool[i]
    match kind:
        case "assign":
            target.assign(value * 0.5 + target)
            pool[k] = (target, new * 0.5 + old)
        case "iadd":
            target += value
            target += 1
            pool[k] = (target, old + new + 1)
        case _:
            target[1:3] = value[1:3]
            updated = old.copy()
            updated[1:3] = new[1:3]
            pool[k] = (target, updated)


def run_step(step: tuple[Any, ...], pool: Pool) -> None:
    match step[0]:
        case "unary":
            pool.append(_unary(step[1], *pool[step[2]]))
        case "binary":
            (t, a), (u, b) = pool[step[2]], pool[step[3]]
            pool.append(_binary(step[1], t, u, a, b))
        case "const":
            t, a = pool[step[1]]
            pool.append((t * step[2] + step[2], a * np.float32(step[2]) + np.float32(step[2])))
        case "reduce":
            t, a = pool[step[1]]
            pool.append(
                (t.sum(step[2], keepdim=True).expand(SHAPE), np.broadcast_to(a.sum(step[2], keepdims=True), SHAPE))
            )
        case "view":
            pool.append(_view(step[1], *pool[step[2]]))
        case "device":
            t, a = pool[step[1]]
            pool.append((((t.to("CPU:1") * 2) + 1).to("CPU"), a * 2 + 1))
        case "realize":
            pool[step[1]][0].realize()
        case _:
            _assign(step, pool)


@st.composite
def programs(draw: Any) -> list[tuple[Any, ...]]:
    steps: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 8))):
        n = N_INPUTS + sum(1 for s in steps if s[0] in ("unary", "binary", "const", "reduce", "view", "device"))
        pick = st.integers(0, n - 1)
        kind = draw(st.sampled_from(["unary", "binary", "const", "reduce", "view", "device", "realize", "assign"]))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(["relu", "neg", "sigmoid", "sqrt"])), draw(pick)))
        elif kind == "binary":
            op = draw(st.sampled_from(["add", "mul", "sub", "max", "matmul"]))
            steps.append(("binary", op, draw(pick), draw(pick)))
        elif kind == "const":
            steps.append(("const", draw(pick), draw(st.sampled_from([0.5, -2.0, 3.0, -0.0]))))
        elif kind == "reduce":
            steps.append(("reduce", draw(pick), draw(st.integers(0, 1))))
        elif kind == "view":
            steps.append(("view", draw(st.sampled_from(["transpose", "flip", "shrink_pad", "permute"])), draw(pick)))
        elif kind in ("device", "realize"):
            steps.append((kind, draw(pick)))
        else:
            target = draw(st.integers(0, N_INPUTS - 1))
            steps.append(("assign", draw(st.sampled_from(["assign", "iadd", "setitem"])), target, draw(pick)))
    return steps


def run_program(steps: list[tuple[Any, ...]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool: Pool = []
    for _ in range(N_INPUTS):
        data = rng.uniform(-1, 1, SHAPE).astype(np.float32)
        pool.append((Tensor(data).realize(), data))
    for step in steps:
        run_step(step, pool)
    _realize_all(pool)
    for t, a in pool:
        np.testing.assert_allclose(t.numpy(), a, rtol=1e-4, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(programs())
def test_random_programs_replay_and_match_numpy(steps: list[tuple[Any, ...]]) -> None:
    run_program(steps, seed=0)  # schedules (or replays what an earlier example of this structure cached)
    misses, hits = cache_counts["miss"], cache_counts["hit"]
    kernels = GlobalCounters.kernel_count
    run_program(steps, seed=1)
    ran = GlobalCounters.kernel_count - kernels
    run_program(steps, seed=2)
    assert cache_counts["miss"] == misses, f"a realize of a structure seen before was scheduled again: {steps}"
    assert cache_counts["hit"] > hits
    assert GlobalCounters.kernel_count - kernels == 2 * ran, "a replay ran a different number of kernels"


# *** random numbers ***


def _draws(seed: int) -> list[np.ndarray]:
    Tensor.manual_seed(seed)
    out = []
    for _ in range(3):
        x = Tensor.rand(*SHAPE)
        out.append(((x * 2 + Tensor.rand(*SHAPE)).realize() + Tensor.randn(SHAPE)).numpy())
    return out


def test_random_draws_are_not_replayed() -> None:
    with Context(SCHEDULE_CACHE=0):
        expected = _draws(5)
    before = cache_counts["hit"]
    got = _draws(5)
    assert cache_counts["hit"] > before  # the draws' schedules are replayed ...
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(g, e)  # ... with the numbers the scheduler's path draws
    assert not np.array_equal(got[0], got[1])
    assert not np.array_equal(got[1], got[2])


# *** the key and the flag ***


def test_key_ignores_buffers_but_sees_constants_shapes_and_aliasing() -> None:
    a, b, c = Tensor.ones(3).contiguous().realize(), Tensor.ones(3).contiguous().realize(), Tensor.ones(4)
    key = graph_structure(UOp.sink((a + b).uop)).key
    assert key is not None
    assert graph_structure(UOp.sink((b + a).uop)).key == key
    assert graph_structure(UOp.sink((a + a).uop)).key != key  # one buffer read twice is another kernel's slots
    assert graph_structure(UOp.sink((a * b).uop)).key != key
    assert graph_structure(UOp.sink((a + b + 0.0).uop)).key != graph_structure(UOp.sink((a + b + -0.0).uop)).key
    assert graph_structure(UOp.sink((c.contiguous() + 1).uop)).key != graph_structure(UOp.sink((a + 1).uop)).key


def test_symbolic_graphs_are_scheduled_each_time() -> None:
    v = UOp.variable("n", 1, 8).bind(3)
    assert graph_structure(UOp.sink((Tensor.ones(8)[:v] * 2).uop)).key is None


def test_remembered_plain_movement_args_skip_only_plain_ops() -> None:
    """A movement arg once found plain is skipped by later walks; a symbolic one, or a device tuple, still refuses."""
    x = Tensor.ones(4, 6).contiguous().realize()
    assert graph_structure(UOp.sink((x.reshape(6, 4) + 1).uop)).key is not None
    assert (6, 4) in cache._PLAIN_MOVEMENT_ARGS
    assert graph_structure(UOp.sink((x.reshape(6, 4) * 2).uop)).key is not None  # the remembered arg
    v = UOp.variable("n", 1, 4).bind(2)
    assert graph_structure(UOp.sink((x.reshape(6, 4)[:v] * 2).uop)).key is None
    assert graph_structure(UOp.sink((x.reshape(6, 4)[:v] * 2).uop)).key is None  # not remembered as plain
    assert not any(isinstance(a, UOp) or UOp in map(type, a) for a in cache._PLAIN_MOVEMENT_ARGS)


def test_replayed_tensors_carry_their_shape_and_device() -> None:
    """A hit's tensors read nodes built from templates, their shape and device recorded (not worked out again)."""
    x = Tensor.rand(6, 4).realize()
    for _ in range(3):
        hits = cache_counts["hit"]
        y = (x.reshape(4, 6) * 2).contiguous().permute(1, 0)
        y.realize()
    assert cache_counts["hit"] > hits
    views = [u for u in y.uop.toposort() if u.op in (Ops.RESHAPE, Ops.PERMUTE)]
    assert [(u.__dict__.get("_shape"), u.__dict__.get("_device")) for u in views] == [
        ((4, 6), x.device),
        ((6, 4), x.device),
    ]
    np.testing.assert_allclose(y.numpy(), (x.numpy().reshape(4, 6) * 2).T)


def test_templates_stop_at_their_parameters() -> None:
    """A template reads each buffer as its parameter: the nodes under a BUFFER (its UNIQUE and DEVICE) are not
    rebuilt on every hit, and its nodes carry their hash-consing key parts (looked up directly, no UOp() call)."""
    schedule_cache.clear()
    x = Tensor.rand(6, 4).realize()
    for _ in range(3):
        y = (x * 2).contiguous().reshape(4, 6).permute(1, 0)
        y.realize()
    lazy = (x * 2).contiguous().reshape(4, 6).permute(1, 0).uop
    structure = graph_structure(UOp.sink(lazy))
    templates = dict(schedule_cache[structure.key].becomes)
    for template in templates.values():
        assert not {n[0] for n in template.nodes if not isinstance(n, int)} & {Ops.DEVICE, Ops.UNIQUE}
    template = templates[structure.position[lazy]]
    first, *views = template.nodes
    assert isinstance(first, int)  # the contiguous buffer: the parameter after x
    assert [v[0] for v in views if not isinstance(v, int)][-2:] == [Ops.RESHAPE, Ops.PERMUTE]
    assert all(not isinstance(v, int) and v[0] in (Ops.RESHAPE, Ops.PERMUTE) for v in views)
    assert y.uop.op is Ops.PERMUTE
    assert y.uop is UOp(Ops.PERMUTE, y.dtype, (y.uop.src[0],), (1, 0))  # the live node hash-consing finds
    np.testing.assert_allclose(y.numpy(), (x.numpy() * 2).reshape(4, 6).T)


def test_replay_builds_only_what_tensors_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hit gives an intermediate buffer (no tensor reads it afterwards) no BUFFER node, and builds the node of a
    template only for a tensor that holds it; values stay right."""
    schedule_cache.clear()  # this structure scheduled here, whatever ran before
    x = Tensor.rand(4, 4).realize()
    made: list[UOp] = []
    new_buffer = UOp.new_buffer

    def counted(*args: Any) -> UOp:
        made.append(node := new_buffer(*args))
        return node

    for i in range(3):
        if i == 2:
            monkeypatch.setattr(UOp, "new_buffer", staticmethod(counted))
        hits = cache_counts["hit"]
        hidden = (x + 1).contiguous()  # realized with y as an intermediate once its tensor is gone
        y = (hidden * 2).sum(0)
        del hidden
        y.realize()
    assert cache_counts["hit"] == hits + 1
    assert len(made) == 1  # y's buffer; the intermediate is a bare Buffer
    assert y.uop.base is made[0]
    np.testing.assert_allclose(y.numpy(), ((x.numpy() + 1) * 2).sum(0), rtol=1e-6)
    # a lazy tensor whose graph holds the intermediate reads its buffer after a hit (its node built for it), while
    # an unrelated lazy one is left as it is
    unrelated = Tensor.ones(3) + 1
    hidden = (x + 1).contiguous()
    kept, y = hidden * 3, (hidden * 2).sum(0)
    del hidden
    hits = cache_counts["hit"]
    y.realize()
    assert cache_counts["hit"] == hits + 1
    assert kept.uop.src[0].base.op is Ops.BUFFER
    assert unrelated.uop.base.op is Ops.ADD
    np.testing.assert_allclose(kept.numpy(), (x.numpy() + 1) * 3, rtol=1e-6)
    structure = graph_structure(UOp.sink(((x + 1).contiguous() * 2).sum(0).uop))
    becomes = cache.replay(schedule_cache[structure.key], structure, do_update_stats=False)
    assert len(becomes) >= 1
    assert not becomes._made  # nothing built before a look-up


def test_remembered_first_walk_gives_the_same_structure() -> None:
    """A walk that starts from the walk a first source kept (Tensor.gradient's of the loss) lists the nodes, places,
    leaves and key a full walk does."""
    x, w = Tensor.rand(4, 4).realize(), Tensor.rand(4, 4).realize()
    loss = ((x @ w).relu() + 1).sum().uop
    grad = ((x * 2) @ w).uop
    graph_structure(UOp.sink(loss, UOp.const(loss.dtype, 1.0)), remember_first=True)
    assert loss.__dict__.get(cache._KEPT_WALK) is not None
    spliced = graph_structure(UOp.sink(loss, grad))
    del loss.__dict__[cache._KEPT_WALK]
    full = graph_structure(UOp.sink(loss, grad))
    assert spliced.key is not None
    assert spliced.key == full.key
    assert spliced.nodes == full.nodes
    assert spliced.position == full.position
    assert spliced.leaves == full.leaves


def test_realize_of_rebuilt_gradients_splices_the_walk_a_full_walk_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """The realize of a loss with gradients rebuilt from a recipe walks them once per recipe; later realizes splice
    that walk (no walk at all) and get the nodes, places, leaves and key a full walk gives; a gradient that is no
    output of the latest build (accumulated, or edited) is walked."""
    x = Tensor.rand(4, 4).realize()
    w1, w2 = Tensor.rand(4, 4, requires_grad=True).realize(), Tensor.rand(4, requires_grad=True).realize()
    walks: list[int] = []
    walk = cache._walk

    def counted(stack: list[UOp | None], *args: Any) -> bool:
        walks.append(len(stack))
        return walk(stack, *args)

    monkeypatch.setattr(cache, "_walk", counted)
    for step in range(5):
        w1.grad = w2.grad = None
        loss = ((x @ w1).relu() * w2 + 1).sum()
        loss.backward()
        grads = [w2.grad.uop, w1.grad.uop] if step < 4 else [(w2.grad * 1).uop, w1.grad.uop]
        walks.clear()
        got = graph_structure(UOp.sink(loss.uop, *grads))  # as Tensor.realize(loss, w2.grad, w1.grad) walks it
        spliced = not walks
        del loss.uop.__dict__[cache._KEPT_WALK]
        full = graph_structure(UOp.sink(loss.uop, *grads))
        assert got.nodes == full.nodes
        assert got.position == full.position
        assert got.leaves == full.leaves
        assert got.key == full.key
        assert spliced == (step in (2, 3)), step  # recorded, rebuilt and walked, then spliced; the edited one walks
        Tensor.realize(loss, w1.grad, w2.grad)


def test_view_structure_is_worked_out_once_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """An optimiser keys every step by its inputs' view structures, most of them the same nodes each step: a node
    keeps its answer (None included), and a new node of the same structure gets the same one."""
    calls: list[UOp] = []
    work = cache._view_structure

    def counted(u: UOp) -> tuple[Any, ...] | None:
        calls.append(u)
        return work(u)

    monkeypatch.setattr(cache, "_view_structure", counted)
    buf = Tensor.rand(6, 4).realize()
    view = buf.reshape(4, 6).T.uop
    lazy = (buf + 1).uop
    first = cache.view_structure(view)
    assert first is not None
    assert first[:2] == ((Ops.PERMUTE, (1, 0)), (Ops.RESHAPE, (4, 6)))  # outermost first
    assert cache.view_structure(view) is first
    assert cache.view_structure(lazy) is None
    assert cache.view_structure(lazy) is None
    assert calls == [view, lazy]
    other = Tensor.rand(6, 4).realize().reshape(4, 6).T.uop
    assert cache.view_structure(other) == first


def test_flag_off_schedules_every_realize() -> None:
    a = Tensor.ones(5).contiguous().realize()
    (a + 1).realize()
    with Context(SCHEDULE_CACHE=0):
        counts = dict(cache_counts)
        np.testing.assert_array_equal((a + 1).numpy(), np.full(5, 2.0))
        assert cache_counts["hit"] == counts["hit"]
        assert cache_counts["off"] > counts["off"]


def test_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "CACHE_SIZE", 3)
    schedule_cache.clear()
    a = Tensor.ones(2).contiguous().realize()
    for i in range(5):  # five constants, five structures
        (a + i).realize()
    assert len(schedule_cache) == 3


def test_cache_is_bounded_by_graph_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "CACHE_NODES", 12)
    schedule_cache.clear()
    a = Tensor.ones(2).contiguous().realize()
    for i in range(3):
        (a + i).realize()
    assert len(schedule_cache) == 1  # each key holds more than half of the allowed nodes
    assert sum(e.nodes for e in schedule_cache.values()) <= 12


def test_update_loop_replays_and_keeps_values(capsys: pytest.CaptureFixture[str]) -> None:
    """An optimiser-like loop: w -= lr * g, realized each step, reusing one schedule for the same buffer."""
    w, g = Tensor([1.0, 2.0, 3.0]).realize(), Tensor([0.5, 0.5, 0.5]).realize()
    expected = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    with Context(DEBUG=1):
        for _ in range(4):
            w.assign(w - 0.1 * g).realize()
            expected = expected - np.float32(0.1) * np.float32(0.5)
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
    assert "(schedule cache hit)" in capsys.readouterr().out


# *** hot schedules run through device graphs ***


def _layer_step(x: Tensor, w: Tensor) -> Tensor:
    """Three kernels or more: a matmul with relu, a reduce of a view, and an in-place update of w."""
    out = (x @ w).relu().T.sum(axis=1)  # (4,)
    w.assign(w * 0.5 + out.reshape(1, 4).expand(4, 4).flip(1))
    return out


def _layer_step_numpy(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = np.maximum(x @ w, 0).T.sum(axis=1)
    return out, w * np.float32(0.5) + np.broadcast_to(out.reshape(1, 4), (4, 4))[:, ::-1]


def _batches() -> int:
    return sum(isinstance(item, cache.Batch) for e in schedule_cache.values() for item in (e.plan or ()))


def test_hot_schedule_runs_through_a_device_graph_on_fresh_data() -> None:
    schedule_cache.clear()
    rng = np.random.default_rng(3)
    w_np = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    w = Tensor(w_np).realize()
    counts = []
    for _ in range(cache.GRAPH_AFTER_HITS + 3):
        x_np = rng.uniform(-1, 1, SHAPE).astype(np.float32)
        kernels = GlobalCounters.kernel_count
        out = _layer_step(Tensor(x_np).realize(), w)
        Tensor.realize(out, w)
        counts.append(GlobalCounters.kernel_count - kernels)
        expected, w_np = _layer_step_numpy(x_np, w_np)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-6)
    assert _batches() >= 1, "a schedule replayed this often should run through the CPU graph"
    assert len(set(counts)) == 1, f"graph runs count their kernels like single runs: {counts}"
    assert counts[0] >= 2


def test_hot_replay_repoints_and_frees_the_graph_before_its_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the device-graph path a hit points its tensors at their buffers and lets the old graph go before the
    kernels run (the Python after a long graph call runs on cold caches); the tensors then read the kernels' values."""
    schedule_cache.clear()
    x = Tensor.rand(8, 8).realize()
    seen: list[tuple[Ops, bool]] = []
    run_plan = cache._run_plan

    def spying(*args: Any) -> None:
        seen.append((y.uop.base.op, graph() is None))
        run_plan(*args)

    for i in range(cache.GRAPH_AFTER_HITS + 2):
        if i == cache.GRAPH_AFTER_HITS + 1:
            monkeypatch.setattr(cache, "_run_plan", spying)
        y = ((x + 1).contiguous().exp() * 2).sum(0)
        graph = weakref.ref(y.uop)
        y.realize()
    assert seen == [(Ops.BUFFER, True)]
    np.testing.assert_allclose(y.numpy(), (np.exp(x.numpy() + 1) * 2).sum(0), rtol=1e-5)


def test_kept_schedules_drop_their_kernels_linear_programs() -> None:
    from fusegrad.engine.realize import CompiledRunner

    schedule_cache.clear()
    w = Tensor(np.ones(SHAPE, np.float32)).realize()
    Tensor.realize(_layer_step(Tensor(np.ones(SHAPE, np.float32)).realize(), w), w)
    runners = [s.prg for entry in schedule_cache.values() for s in entry.steps if isinstance(s.prg, CompiledRunner)]
    assert runners
    assert all(r.program.uops == [] for r in runners)
    assert all(r.p.uops and r.p.uops[-1].op is Ops.SINK for r in runners)  # rendered again when asked for


def _hot_entry() -> cache.CachedSchedule:
    return next(e for e in schedule_cache.values() if e.plan is not None and e.intermediates)


def test_hot_schedule_reuses_its_intermediates_and_keeps_values() -> None:
    schedule_cache.clear()
    rng = np.random.default_rng(5)
    w_np = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    w = Tensor(w_np).realize()
    kept: list[list[int]] = []
    outs: list[Tensor] = []
    for _ in range(cache.GRAPH_AFTER_HITS + 4):
        x_np = rng.uniform(-1, 1, SHAPE).astype(np.float32)
        outs.append(out := _layer_step(Tensor(x_np).realize(), w))
        Tensor.realize(out, w)
        expected, w_np = _layer_step_numpy(x_np, w_np)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-6)
        if _batches():
            spares = _hot_entry().spares
            assert spares is not None
            kept.append(sorted(id(b) for b in spares.values()))
    assert len(kept) >= 3
    assert all(ids == kept[0] for ids in kept)  # the same buffers, replay after replay
    read = {id(t.uop.base.buffer) for t in outs}  # every output a tensor reads has a buffer of its own
    assert len(read) == len(outs)
    assert not read & set(kept[0])


def test_only_the_latest_hot_schedules_keep_intermediates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "SPARE_ENTRIES", 1)
    schedule_cache.clear()
    w, v = Tensor.ones(*SHAPE).contiguous().realize(), Tensor.ones(*SHAPE).contiguous().realize()
    for _ in range(cache.GRAPH_AFTER_HITS + 2):
        Tensor.realize(_layer_step(Tensor.ones(*SHAPE).contiguous().realize(), w), w)
    first = _hot_entry()
    assert first.spares is not None
    for _ in range(cache.GRAPH_AFTER_HITS + 2):  # another structure: the sum below makes it a different graph
        Tensor.realize(_layer_step(Tensor.ones(*SHAPE).contiguous().realize(), v).sum(), v)
    assert first.spares is None
    assert sum(e.spares is not None for e in schedule_cache.values()) == 1


def test_an_evicted_schedule_lets_its_intermediates_go(monkeypatch: pytest.MonkeyPatch) -> None:
    schedule_cache.clear()
    w = Tensor.ones(*SHAPE).contiguous().realize()
    for _ in range(cache.GRAPH_AFTER_HITS + 2):
        Tensor.realize(_layer_step(Tensor.ones(*SHAPE).contiguous().realize(), w), w)
    hot = _hot_entry()
    assert hot.spares is not None
    monkeypatch.setattr(cache, "CACHE_SIZE", 1)
    (Tensor.ones(3).contiguous() + 2).realize()  # a new structure: the cache keeps only it
    assert hot not in schedule_cache.values()
    assert hot.spares is None
    assert id(hot) not in cache._sparing


def test_hot_schedule_runs_kernel_by_kernel_while_a_jit_captures() -> None:
    """TinyJit's capture sees every kernel of a replay even when the schedule is hot: its replays compute."""
    from fusegrad import TinyJit

    schedule_cache.clear()
    rng = np.random.default_rng(4)
    w_np = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    w = Tensor(w_np).realize()
    x = Tensor.empty(*SHAPE).contiguous().realize()
    for _ in range(cache.GRAPH_AFTER_HITS + 2):  # hot before the jit sees it
        x_np = rng.uniform(-1, 1, SHAPE).astype(np.float32)
        x.assign(Tensor(x_np)).realize()
        _layer_step(x, w).realize(w)
        w_np = _layer_step_numpy(x_np, w_np)[1]
    assert _batches() >= 1
    step = TinyJit(lambda x: _layer_step(x, w).realize(w))
    for _ in range(4):
        x_np = rng.uniform(-1, 1, SHAPE).astype(np.float32)
        out = step(Tensor(x_np).realize())
        expected, w_np = _layer_step_numpy(x_np, w_np)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-6)


def test_hot_schedule_prints_every_kernel_at_debug_2(capsys: pytest.CaptureFixture[str]) -> None:
    schedule_cache.clear()
    w, x = Tensor.ones(*SHAPE).contiguous().realize(), Tensor.ones(*SHAPE).contiguous().realize()
    with Context(DEBUG=2):  # flags are part of the key: the schedule gets hot under DEBUG=2
        for _ in range(cache.GRAPH_AFTER_HITS + 1):
            _layer_step(x, w).realize(w)
        capsys.readouterr()
        kernels = GlobalCounters.kernel_count
        _layer_step(x, w).realize(w)
    lines = [line for line in capsys.readouterr().out.splitlines() if "***" in line]
    assert max(e.hits for e in schedule_cache.values()) > cache.GRAPH_AFTER_HITS
    assert len(lines) == GlobalCounters.kernel_count - kernels >= 2


def test_jit_2_keeps_hot_schedules_kernel_by_kernel() -> None:
    """JIT=2 (no graphs) holds for eager replays too."""
    schedule_cache.clear()
    w, x = Tensor.ones(*SHAPE).contiguous().realize(), Tensor.ones(*SHAPE).contiguous().realize()
    with Context(JIT=2):
        for _ in range(cache.GRAPH_AFTER_HITS + 2):
            _layer_step(x, w).realize(w)
    assert max(e.hits for e in schedule_cache.values()) > cache.GRAPH_AFTER_HITS
    assert _batches() == 0


# *** GraphRecipe: frontend graphs rebuilt on other leaves ***


def _update(w: Tensor, g: Tensor) -> Tensor:
    return (w.detach() - 0.1 * (g * g + 1).sqrt()).cast(w.dtype)


def test_graph_recipe_rebuilds_the_graph_on_new_leaves() -> None:
    """Rebuilt on other buffers of the same structure, a recipe gives the very nodes the code builds on them, and
    the labels a rebuilt node has none of."""
    w, g1, g2 = (Tensor.rand(3, 4).realize() for _ in range(3))
    built = _update(w, g1).uop
    recipe = cache.GraphRecipe.of([built], [w.uop, g1.uop])
    assert recipe is not None
    direct = _update(w, g2).uop
    (rebuilt,) = recipe.build([w.uop, g2.uop])
    assert rebuilt is direct
    labels = [cache.all_metadata.get(u) for u in built.toposort() if u.op is not Ops.BUFFER]
    assert any(labels)
    del direct, rebuilt
    (fresh,) = recipe.build([w.uop, Tensor.rand(3, 4).realize().uop])
    assert [cache.all_metadata.get(u) for u in fresh.toposort() if u.op is not Ops.BUFFER] == labels


def test_graph_recipe_refuses_memory_that_is_no_leaf() -> None:
    """A buffer the leaves don't name would be the old one in every rebuild, and a contiguous() a fresh identity."""
    w, g = Tensor.rand(4).realize(), Tensor.rand(4).realize()
    assert cache.GraphRecipe.of([(w + g).uop], [w.uop]) is None
    assert cache.GraphRecipe.of([(w + 1).contiguous().uop], [w.uop]) is None
    assert cache.GraphRecipe.of([(w + 1).uop], [w.uop]) is not None
