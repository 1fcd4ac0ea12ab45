"""The fusion policy's reasons (schedule/fusion.py): each realized node carries why it got a kernel of its own, and
with TRACK_MATCH_STATS=2 the "fusion decisions" step shows it as the node's tag in VIZ (on a GPT training step too)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.helpers import Context
from fusegrad.schedule import fusion
from fusegrad.uop import Ops
from fusegrad.uop.ops import _name_cnt, active_rewrites, tracked_ctxs, tracked_keys, uop_fields
from fusegrad.viz.rewrites import get_full_rewrite


def _clear() -> None:
    for container in (tracked_keys, tracked_ctxs, active_rewrites, _name_cnt):
        container.clear()


def decisions(*tensors: Tensor) -> list[tuple[Ops, str]]:
    """(op, reason) of every node the "fusion decisions" steps tagged while kernelizing `tensors`."""
    _clear()
    with Context(TRACK_MATCH_STATS=2):
        Tensor.kernelize(*tensors)
    found = [uop_fields[m.after][:5:4] for steps in tracked_ctxs for s in steps if s.name == "fusion decisions"
             for m in s.matches if m.after is not None]  # fmt: skip
    _clear()
    return [(op, tag if isinstance(tag, str) else tag[1]) for op, tag in found]


def reasons(*tensors: Tensor) -> set[str]:
    return {reason for _, reason in decisions(*tensors)}


def _rows() -> Tensor:
    return Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()


def _assigned_view() -> Tensor:
    w, v = _rows(), _rows()
    return w.assign(v.flip(0))  # a view of memory as the value: it is copied to a buffer first


def _window_gradient() -> Tensor:
    x, w = Tensor.empty(2, 4, 10, 12, requires_grad=True), Tensor.empty(8, 4, 3, 3, requires_grad=True)
    (x.conv2d(w, padding=1) * Tensor.empty(2, 8, 10, 12)).sum().backward()
    assert x.grad is not None
    return x.grad


def _split_weight_gradient() -> Tensor:
    x, w = Tensor.empty(4, 4, 48, 48), Tensor.empty(8, 4, 3, 3, requires_grad=True)
    (x.conv2d(w, padding=1) * Tensor.empty(4, 8, 48, 48)).sum().backward()
    assert w.grad is not None
    return w.grad


def _updates_reading_each_other() -> list[Tensor]:
    x, y = _rows(), _rows()
    new_x, new_y = x - y * 0.5, y - x * 0.25  # each reads what the other overwrites: one old value is kept
    return [x.assign(new_x), y.assign(new_y)]


def _reshard() -> Tensor:
    shards = ("CPU", "CPU:1")
    return (Tensor.empty(8, 4).shard(shards, axis=0).T + 1).shard(shards, axis=1)


def _shared_sum() -> list[Tensor]:
    s = _rows().sum(1)
    return [s + 1, s * 2]


# one graph per reason, each the smallest that takes that decision
CASES: dict[str, Callable[[], Tensor | list[Tensor]]] = {
    fusion.OUTPUT: lambda: _rows() + 1,
    fusion.CONTIGUOUS: lambda: (_rows() + 1).contiguous() * 2,
    fusion.DEVICE_COPY: lambda: Tensor(np.ones(3, np.float32)),
    fusion.ASSIGN: lambda: _rows().assign(_rows() + 1),
    fusion.COPY_SOURCE: lambda: (_rows() + 1).to("PYTHON"),
    fusion.ASSIGN_VALUE: _assigned_view,
    fusion.SPLIT_REDUCE: _split_weight_gradient,
    fusion.MULTI_PLACEMENT: _reshard,
    fusion.REDUCE_RECOMPUTED: lambda: _rows() - _rows().mean(0),  # a column's mean, read in the loop over rows
    fusion.ROW_UNCACHED: lambda: (lambda x: x - x.max(1, keepdim=True))(Tensor.empty(2, 1 << 16)),  # 256 KiB rows
    fusion.ROW_IN_CONTRACTION: lambda: (_rows() - _rows().mean(1, keepdim=True)) @ Tensor.empty(4, 8),
    fusion.USED_BY_KERNELS: _shared_sum,
    fusion.READ_TWICE: lambda: (lambda e: e[1:] + e[:-1])(_rows().exp()),
    fusion.COSTLY_IN_REDUCE: lambda: (
        (Tensor.empty(8, 16).exp() * Tensor.empty(8, 16).sin()).sqrt() @ Tensor.empty(16, 4)
    ),
    fusion.WINDOW_CROP: _window_gradient,
    fusion.SNAPSHOT: _updates_reading_each_other,
}


def test_every_reason_has_a_case() -> None:
    assert set(CASES) == set(fusion.REASONS)
    assert len(set(fusion.REASONS)) == len(fusion.REASONS)


@pytest.mark.parametrize("reason", fusion.REASONS)
def test_each_reason_is_recorded(reason: str) -> None:
    made = CASES[reason]()
    tensors = made if isinstance(made, list) else [made]
    assert reason in reasons(*tensors)


def test_a_fused_graph_records_only_its_output() -> None:
    assert decisions((_rows() * 2 + 1).relu().sum(1)) == [(Ops.REDUCE_AXIS, fusion.OUTPUT)]


def test_recorded_reasons_do_not_change_the_schedule() -> None:
    """Tracing adds a step; the kernels are the same as without it."""
    a, b = Tensor.empty(8, 16), Tensor.empty(16, 4)
    plain = [item.ast for item in ((a.exp() * 2) @ b).schedule()]
    _clear()
    with Context(TRACK_MATCH_STATS=2):
        traced = [item.ast for item in ((a.exp() * 2) @ b).schedule()]
    _clear()
    assert traced == plain


def _gpt_training_step() -> list[Tensor]:
    from fusegrad.examples.gpt import GPT, GPTConfig
    from fusegrad.nn import optim
    from fusegrad.nn.state import get_parameters

    Tensor.manual_seed(0)
    model = GPT(GPTConfig(16, 8, 16, 2, 1))
    opt = optim.AdamW(get_parameters(model), lr=1e-3)
    Tensor.realize(*get_parameters(model), *get_parameters(opt))
    rng = np.random.default_rng(0)
    x, y = (Tensor(rng.integers(0, 16, (2, 8)).astype(np.int32)).realize() for _ in range(2))
    with Tensor.train():
        opt.zero_grad()
        loss = model.loss(x, y)
        loss.backward()
        return [loss, *opt.schedule_step()]  # the step's updates, not yet realized


def test_gpt_training_step_shows_why_each_kernel_exists() -> None:
    """VIZ: the training step's schedule has a "fusion decisions" step with one match per kernel, and its last graph
    (what the rewrite viewer draws) labels every realized node with a reason from the fixed set."""
    tensors = _gpt_training_step()
    _clear()
    with Context(TRACK_MATCH_STATS=2):
        Tensor.kernelize(*tensors)
    groups = [(key.display_name, steps) for key, steps in zip(tracked_keys, tracked_ctxs, strict=True)]
    (name, steps), *_ = [(n, s) for n, s in groups if n.startswith("Schedule")]
    step = next(s for s in steps if s.name == "fusion decisions")
    kernels = int(name.split()[1])
    assert len(step.matches) == kernels
    *_, last = get_full_rewrite(step, uop_fields, tracked_keys)
    labels = [node["label"] for node in last["graph"].values()]
    _clear()
    shown = Counter(line[5:-1] for label in labels for line in label.splitlines() if line.startswith("tag='"))
    assert set(shown) <= set(fusion.REASONS)
    assert sum(shown.values()) == kernels
    # a training step has kernels of its own for each kind of decision a transformer makes
    # (no reduce read by several kernels since row statistics are computed by each kernel reading them per row, #12)
    assert {fusion.ASSIGN, fusion.REDUCE_RECOMPUTED, fusion.COSTLY_IN_REDUCE} <= set(shown)
