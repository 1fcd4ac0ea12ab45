"""BEAM search (fusegrad/codegen/search.py): the actions it enumerates, the opts it picks under a fake clock and on the
real one, that a wrong candidate is never picked, and the disk cache of its choice (hit, and IGNORE_BEAM_CACHE)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.codegen import kernel_names
from fusegrad.codegen import search as search_module
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.codegen.search import Bench, actions, beam_ast, extensions
from fusegrad.dtype import dtypes
from fusegrad.engine.realize import CompiledRunner, ExecItem, method_cache
from fusegrad.helpers import Context
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp

UPCAST, GROUP, SWAP, PACK = OptOps.UPCAST, OptOps.GROUP, OptOps.SWAP, OptOps.PACK


@pytest.fixture(autouse=True)
def _fresh_caches(tmp_path: Path) -> Iterator[None]:
    """Each test compiles its kernels again, against its own disk cache."""
    method_cache.clear()
    kernel_names.clear()
    with Context(CACHEDB=str(tmp_path / "cache.db"), CACHELEVEL=2):
        yield
    method_cache.clear()


def matmul_kernel(n: int = 16) -> tuple[ExecItem, np.ndarray]:
    """The scheduled kernel of a (n, n) @ (n, n) matmul, unlowered, and numpy's answer."""
    a, b = Tensor.randn(n, n).realize(), Tensor.randn(n, n).realize()
    return (a @ b).schedule()[-1], a.numpy() @ b.numpy()


def applied(ei: ExecItem) -> tuple[Opt, ...]:
    prg = ei.lower().prg
    assert isinstance(prg, CompiledRunner)
    return tuple(prg.p.uops[-1].arg.applied_opts)


def run_checked(ei: ExecItem, expected: np.ndarray) -> None:
    ei.run()
    out = ei.bufs[0]
    assert out is not None
    np.testing.assert_allclose(out.numpy().reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)


def fake_clock(monkeypatch: pytest.MonkeyPatch, fastest: tuple[Opt, ...]) -> list[tuple[Opt, ...]]:
    """Candidates time 1 s, `fastest` 0.5 s; returns the list of opt lists timed, in order."""
    timed: list[tuple[Opt, ...]] = []

    def time_runner(runner: CompiledRunner, bufs: object, var_vals: object) -> float:
        opts = tuple(runner.p.uops[-1].arg.applied_opts)
        timed.append(opts)
        return 0.5 if opts == fastest else 1.0

    monkeypatch.setattr(search_module, "time_runner", time_runner)
    return timed


def loop(end: int, axis: int) -> UOp:
    return UOp.range(end, axis, AxisType.LOOP)


def test_actions_of_a_matmul() -> None:
    r0, r1, r2 = loop(12, 0), loop(16, 1), UOp.range(8, 2, AxisType.REDUCE)
    a, b, out = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(192), arg=i) for i in (1, 2, 0))
    value = (a.index(r0 * 8 + r2).load() * b.index(r2 * 16 + r1).load()).reduce(r2, arg=Ops.ADD)
    sink = UOp.sink(out.index(r0 * 16 + r1).store(value))
    assert actions(sink) == [
        Opt(UPCAST, 0, 2), Opt(UPCAST, 0, 4),
        Opt(UPCAST, 1, 2), Opt(UPCAST, 1, 4), Opt(UPCAST, 1, 8), Opt(UPCAST, 1, 16),
        Opt(GROUP, 2, 2), Opt(GROUP, 2, 4), Opt(GROUP, 2, 8),
        Opt(SWAP, 0, 1),
        Opt(PACK, 1, 1), Opt(PACK, 0, 2)]  # fmt: skip  # a's rows serve every column, b's columns every row
    # after an upcast: no GROUP (gcc compiles such kernels very slowly), the upcast budget caps the next amounts
    after = extensions(sink, (Opt(UPCAST, 1, 16),))
    assert (Opt(UPCAST, 1, 16), Opt(UPCAST, 0, 4)) in after
    assert all(o[-1].op is not GROUP for o in after)
    # axis 1 is gone (upcast whole): no swap of it, no packing of a across it; axis 0's 12 rows split by powers of two
    # (no 3: see UPCAST_AMOUNTS)
    assert [o[-1] for o in after] == [Opt(UPCAST, 0, 2), Opt(UPCAST, 0, 4), Opt(PACK, 0, 2)]
    # once packed: no upcast (opt.py refuses to split a loop the panel's copy is placed by), no second PACK of b
    assert [o[-1] for o in extensions(sink, (Opt(PACK, 0, 2),))] == [Opt(PACK, 1, 1)]


def test_beam_picks_the_fastest_and_stops_when_nothing_is_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    fastest = (Opt(UPCAST, 1, 4),)
    timed = fake_clock(monkeypatch, fastest)
    ei, expected = matmul_kernel()
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        assert applied(ei) == fastest
    run_checked(ei, expected)
    # round 0: no opts and the heuristic's; round 1: their one-action extensions; round 2 finds nothing faster
    assert timed[:2] == [(), (Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 16))]
    assert fastest in timed
    assert all(len(opts) <= 3 for opts in timed)


def test_beam_considers_pack_and_its_choice_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    fastest = (Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 16), Opt(PACK, 0, 2))  # the heuristic's tile, then b packed
    timed = fake_clock(monkeypatch, fastest)
    checked: dict[tuple[Opt, ...], float | None] = {}
    real_time = Bench.time

    def time(self: Bench, opts: tuple[Opt, ...]) -> float | None:
        checked[opts] = real_time(self, opts)
        return checked[opts]

    monkeypatch.setattr(Bench, "time", time)
    # integer-valued floats: every summation order gives the same bits, so any difference is a wrong value read
    rng = np.random.default_rng(1)
    x, y = (rng.integers(-4, 5, (16, 16)).astype(np.float32) for _ in range(2))
    ei = (Tensor(x).realize() @ Tensor(y).realize()).schedule()[-1]
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        assert applied(ei) == fastest
    packed = [opts for opts in timed if opts and opts[-1].op is PACK]
    # from no opts: a packed across the columns, b across the rows; from the heuristic's tile: b across its row tiles
    assert {(Opt(PACK, 1, 1),), (Opt(PACK, 0, 2),), fastest} <= set(packed)
    assert all(checked[opts] is not None for opts in packed)  # each ran and matched the unoptimised kernel
    ei.run()
    chosen = ei.bufs[0].numpy().copy()
    method_cache.clear()
    with Context(NOOPT=1):
        ExecItem(ei.ast, ei.bufs).run()
    plain = ei.bufs[0].numpy()
    assert chosen.tobytes() == plain.tobytes()
    np.testing.assert_array_equal(chosen.reshape(16, 16), x @ y)


def test_beam_never_picks_a_wrong_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = (Opt(UPCAST, 1, 4),)
    fake_clock(monkeypatch, wrong)
    real_run = Bench.run

    def run(self: Bench, opts: tuple[Opt, ...]) -> tuple[float, dict[int, np.ndarray]] | None:
        ret = real_run(self, opts)
        if ret is None or opts != wrong:
            return ret
        return ret[0], {slot: x + 1 for slot, x in ret[1].items()}  # the fastest candidate computes the wrong thing

    monkeypatch.setattr(Bench, "run", run)
    ei, expected = matmul_kernel()
    with Context(BEAM=1, IGNORE_BEAM_CACHE=1):
        assert applied(ei) != wrong
    run_checked(ei, expected)


def test_beam_choice_is_cached_on_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    fastest = (Opt(UPCAST, 0, 2),)
    fake_clock(monkeypatch, fastest)
    ei, _ = matmul_kernel()
    with Context(BEAM=2):
        assert beam_ast(ei.ast, "CPU").arg.opts_to_apply == fastest

    def no_search(ast: UOp, device: str) -> Bench:
        raise AssertionError("searched again despite the cached choice")

    monkeypatch.setattr(Bench, "of", staticmethod(no_search))
    with Context(BEAM=2):  # a later run (the in-process kernel cache cleared): the disk cache answers
        method_cache.clear()
        assert applied(ExecItem(ei.ast, ei.bufs)) == fastest
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1), pytest.raises(AssertionError, match="searched again"):
        beam_ast(ei.ast, "CPU")
    with Context(BEAM=2, NOOPT=1):  # NOOPT wins over BEAM
        assert beam_ast(ei.ast, "CPU") is ei.ast


def test_beam_on_the_real_clock_gives_the_same_numbers() -> None:
    ei, expected = matmul_kernel(32)
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        opts = applied(ei)
    assert opts != ()  # an opt-free 32x32 matmul loses to every tile of it
    run_checked(ei, expected)


def test_beam_leaves_gathers_and_null_devices_alone() -> None:
    # out[i] = a[idx[i]]: random fresh inputs could send the load anywhere, so no timed search runs it
    r0 = loop(8, 0)
    idx = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(8), arg=2).index(r0).load().cast(dtypes.index)
    value = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(64), arg=1).index(idx).load()
    gather = UOp.sink(UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(8), arg=0).index(r0).store(value))
    ei, _ = matmul_kernel()
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        assert beam_ast(gather, "CPU") is gather
        assert beam_ast(ei.ast, "NULL") is ei.ast  # nothing runs on NULL: nothing to time
