"""Host state that TinyJit's captured kernels advance (the random generator's seed and call numbers): its owner
registers how a capture records it and how a replay redoes it, so the engine never imports the frontend that owns it.
Entry point: `register_capture_state(CaptureState(begin, end, replay))`, run by the owner at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CaptureState(Generic[T]):
    """How TinyJit keeps one piece of host state in step with its kernels: `begin()` before a capture runs (returns
    the state's start), `end(start)` after it (returns the record of what the capture did), `replay(record)` before
    each replay (brings the host state to where the replayed kernels leave it). `end` returns None for a capture that
    left the state as it found it: its replays skip the state."""

    begin: Callable[[], T]
    end: Callable[[T], T | None]
    replay: Callable[[T], None]


# in registration order; filled at import by the state's owner (mixin/random.py), mutated in place, never rebound
CAPTURE_STATES: list[CaptureState[Any]] = []


def register_capture_state(state: CaptureState[T]) -> None:
    """Have every TinyJit capture record `state` and every replay redo it."""
    CAPTURE_STATES.append(state)
