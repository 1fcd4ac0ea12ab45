"""Tests for fusegrad/engine/memory.py through CapturedJit: free_intermediates, replan_buffers_memory_layout and
TinyJit(optimize=True)."""

from __future__ import annotations

from fusegrad import Tensor
from fusegrad.engine.jit import TinyJit
from fusegrad.helpers import GlobalCounters
from test.shared import vec


def test_free_intermediates_gives_back_input_dependent_memory() -> None:
    offset = vec(1, 24, 23, 45, 1)

    @TinyJit
    def step(x: Tensor) -> Tensor:
        doubled = (x * 2).contiguous().realize()
        shifted = (doubled + offset).contiguous().realize()
        return shifted.sum().contiguous().realize()

    for i in range(4):
        assert step(vec(i, 1, 2, 3, 4)).item() == 114 + 2 * i
    assert step.captured is not None
    for _ in range(2):  # freeing twice frees nothing more
        before = GlobalCounters.mem_used
        step.captured.free_intermediates()
        step.captured.free_intermediates()
        assert before - GlobalCounters.mem_used == 5 * 4 * 2 + 4  # doubled, shifted, the sum; not the offset
        assert step(vec(11, 1, 2, 3, 4)).item() == 136  # the next replay allocates them again


def test_free_intermediates_keeps_in_place_updates() -> None:
    total = vec(1)

    @TinyJit
    def step(y: Tensor) -> Tensor:
        total.assign(total + y).realize()
        return total

    for _ in range(5):
        step(vec(1))
    assert step.captured is not None
    before = GlobalCounters.mem_used
    step.captured.free_intermediates()
    assert before == GlobalCounters.mem_used
    step(vec(2))
    assert total.item() == 8


def distinct_bases(step: TinyJit) -> set[int]:  # type: ignore[type-arg]
    assert step.captured is not None
    return {id(b.base) for ei in step.captured.jit_cache for b in ei.bufs if b is not None}


def broadcast_sum(x: Tensor, scale: Tensor, offset: Tensor) -> Tensor:
    return (x * scale + offset).reshape(5, 1).expand(5, 100).contiguous().sum()


def test_replan_buffers_memory_layout_moves_buffers_into_one_arena() -> None:
    scale, offset = vec(2, 2, 2, 2, 2), vec(1, 24, 23, 45, 1)
    step = TinyJit(lambda x: broadcast_sum(x, scale, offset))
    for i in range(4):
        assert step(vec(i, 1, 2, 3, 4)).item() == 11400 + 200 * i
    assert len(distinct_bases(step)) == 4  # scale, offset, the expanded intermediate, the result
    assert step.captured is not None
    step.captured.replan_buffers_memory_layout()
    assert len(distinct_bases(step)) == 2  # the arena and the result (a returned tensor's memory stays)
    assert step(vec(11, 1, 2, 3, 4)).item() == 13600
    assert scale.tolist() == [2] * 5  # the weights were copied, not moved away from their tensors


def test_replan_leaves_written_state_with_its_tensor() -> None:
    total = vec(0, 0)

    @TinyJit
    def step(y: Tensor) -> Tensor:
        total.assign(total + (y * 2).contiguous()).realize()
        return (total + 1).realize()

    for _ in range(3):
        step(vec(1, 1))
    assert step.captured is not None
    step.captured.replan_buffers_memory_layout()
    assert step(vec(1, 1)).tolist() == [9, 9]
    assert total.tolist() == [8, 8]  # the replay still updates the tensor's own memory


def test_optimize_replans_at_capture() -> None:
    scale, offset = vec(2, 2, 2, 2, 2), vec(1, 24, 23, 45, 1)
    step = TinyJit(lambda x: broadcast_sum(x, scale, offset), optimize=True)
    for i in range(4):
        assert step(vec(i, 1, 2, 3, 4)).item() == 11400 + 200 * i
    assert len(distinct_bases(step)) == 2
