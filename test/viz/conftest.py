"""Shared by the VIZ app's tests: a real trace of a small CPU computation (rewrites and profile), and a server on it.

`real_trace` runs a few Tensor ops with TRACK_MATCH_STATS=2 and PROFILE=1 once per test process and snapshots what
was recorded, so tests that clear the global containers don't disturb it. `served` serves it on a free port.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.device import Buffer, Compiled
from fusegrad.helpers import Context, ProfileEvent, cpu_events, profile_marker
from fusegrad.uop.ops import RewriteTrace, _name_cnt, active_rewrites, tracked_ctxs, tracked_keys, uop_fields
from fusegrad.viz.server import start_in_thread
from fusegrad.viz.session import VizSession


@dataclass
class RealTrace:
    trace: RewriteTrace
    events: list[ProfileEvent]

    def session(self) -> VizSession:
        return VizSession(self.trace, self.events)


def clear_tracing() -> None:
    from fusegrad.engine.realize import method_cache

    # a kernel another test in this process already compiled would be reused without a codegen trace
    for container in (tracked_keys, tracked_ctxs, active_rewrites, _name_cnt, method_cache):
        container.clear()


def record_small_run() -> RealTrace:
    """Two realizes and one small training step (forward, backward, SGD update), with markers around them; constants no
    other test uses, so each kernel is compiled (and traced)."""
    clear_tracing()
    first_cpu, first_buffer = len(cpu_events), len(Buffer.profile_events)
    with Context(TRACK_MATCH_STATS=2, PROFILE=1):
        x = Tensor(np.arange(21, dtype=np.float32).reshape(7, 3), device="CPU")
        profile_marker("start")
        y = (x * 1.8125 + 0.4375).relu().sum(axis=1).realize()  # (7, 3) -> (7,)
        profile_marker("middle")
        z = (x.T @ x * 0.0625).realize()  # (3, 7) @ (7, 3) -> (3, 3)
        w = Tensor(np.full((3, 2), 0.0234375, dtype=np.float32), device="CPU", requires_grad=True).realize()
        loss = ((x @ w).relu() - 1.15625).square().mean()  # a linear layer and a squared error: (7, 3) @ (3, 2)
        loss.backward()
        w.assign(w - w.grad * 0.0078125)  # one SGD step, in place
        Tensor.realize(loss, w)
        profile_marker("end")
        assert y.numpy().shape == (7,), "the traced run computed the wrong shape"
        assert z.numpy().shape == (3, 3), "the traced run computed the wrong shape"
    trace = RewriteTrace(list(tracked_keys), [list(steps) for steps in tracked_ctxs], dict(uop_fields))
    events = [*Compiled.profile_events, *cpu_events[first_cpu:], *Buffer.profile_events[first_buffer:]]
    clear_tracing()
    return RealTrace(trace, events)


@pytest.fixture(scope="session")
def real_trace() -> RealTrace:
    return record_small_run()


@pytest.fixture(scope="session")
def served(real_trace: RealTrace) -> Iterator[tuple[VizSession, str]]:
    """(session, base URL) of a server on a free port, for the whole test process."""
    session = real_trace.session()
    server, url = start_in_thread(session)
    yield session, url
    server.shutdown()
    server.server_close()
