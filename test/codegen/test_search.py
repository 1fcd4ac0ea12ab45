"""BEAM search (fusegrad/codegen/search.py): the actions it enumerates (KEEP and PACK included), the opts it picks under
a fake clock and on the real one, that a wrong candidate is never picked, the disk cache of its choice per beam width
(hit, and IGNORE_BEAM_CACHE), DEBUG=2's report, candidates compiled in parallel, the time budget, and the reference
a large kernel is checked against."""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.codegen import kernel_names, simplify_indexing, to_program
from fusegrad.codegen import search as search_module
from fusegrad.codegen.opt import Opt, OptOps, apply_opts, choose_opts, hand_coded_opts
from fusegrad.codegen.search import Bench, SearchResult, actions, beam_ast, extensions, neighbours, with_opts
from fusegrad.device import Device
from fusegrad.dtype import dtypes
from fusegrad.engine.realize import CompiledRunner, ExecItem, method_cache
from fusegrad.helpers import Context
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym

UPCAST, GROUP, SWAP, PACK = OptOps.UPCAST, OptOps.GROUP, OptOps.SWAP, OptOps.PACK
KEEP, UNROLL, UPCAST_CLAMP = OptOps.KEEP, OptOps.UNROLL, OptOps.UPCAST_CLAMP
Ran = tuple[float, dict[int, np.ndarray]] | None


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


def keep_benches(monkeypatch: pytest.MonkeyPatch) -> list[Bench]:
    """Every Bench the searches make, kept for the test to read."""
    benches: list[Bench] = []
    real_of = Bench.of

    def of(ast: UOp, device: str, reference: tuple[Opt, ...] = ()) -> Bench:
        benches.append(real_of(ast, device, reference))
        return benches[-1]

    monkeypatch.setattr(Bench, "of", staticmethod(of))
    return benches


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
        Opt(PACK, 1, 1), Opt(PACK, 0, 2),  # a's rows serve every column, b's columns every row
        Opt(UNROLL, 2, 2), Opt(UNROLL, 2, 4)]  # fmt: skip  # the reduce of 8 in 2 or 4 steps, at least 2 left outside
    # after an upcast: no GROUP (gcc compiles such kernels very slowly), the upcast budget caps the next amounts
    after = extensions(sink, (Opt(UPCAST, 1, 16),))
    assert (Opt(UPCAST, 1, 16), Opt(UPCAST, 0, 4)) in after
    assert all(o[-1].op is not GROUP for o in after)
    # axis 1 is gone (upcast whole): no swap of it, no packing of a across it; axis 0's 12 rows split by powers of two
    # (no 3: see UPCAST_AMOUNTS)
    unrolls = [Opt(UNROLL, 2, 2), Opt(UNROLL, 2, 4)]
    assert [o[-1] for o in after] == [Opt(UPCAST, 0, 2), Opt(UPCAST, 0, 4), Opt(PACK, 0, 2), *unrolls]
    # once packed: no upcast (opt.py refuses to split a loop the panel's copy is placed by), no second PACK of b
    assert [o[-1] for o in extensions(sink, (Opt(PACK, 0, 2),))] == [Opt(PACK, 1, 1), *unrolls]
    # once unrolled: no second UNROLL
    assert all(o[-1].op is not UNROLL for o in extensions(sink, (Opt(UNROLL, 2, 4),)))


def test_actions_of_a_row_sum_include_lanes() -> None:
    # a layernorm's mean and variance: LANES of each sum's loop of 64 by 16 and 32 (64 would leave one step)
    sink = graph_rewrite(walk_kernels()["layernorm"], sym)
    lanes = [o for o in actions(sink) if o.op is OptOps.LANES]
    axes = sorted({o.axis for o in lanes})
    assert len(axes) == 2
    assert lanes == [Opt(OptOps.LANES, axis, amount) for axis in axes for amount in (16, 32)]
    assert all(len(e) == 1 for e in extensions(sink, ()) if e[-1].op is OptOps.LANES)
    # once a sum is in lanes, its loop takes no second LANES
    first = lanes[0]
    assert all(o.axis != first.axis for o in actions(apply_opts(sink, (first,))) if o.op is OptOps.LANES)


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
    benches = keep_benches(monkeypatch)
    # integer-valued floats: every summation order gives the same bits, so any difference is a wrong value read
    rng = np.random.default_rng(1)
    x, y = (rng.integers(-4, 5, (16, 16)).astype(np.float32) for _ in range(2))
    ei = (Tensor(x).realize() @ Tensor(y).realize()).schedule()[-1]
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        assert applied(ei) == fastest
    packed = [opts for opts in timed if opts and opts[-1].op is PACK]
    # from no opts: a packed across the columns, b across the rows; from the heuristic's tile: b across its row tiles
    assert {(Opt(PACK, 1, 1),), (Opt(PACK, 0, 2),), fastest} <= set(packed)
    assert all(benches[0].timed[opts] is not None for opts in packed)  # each ran and matched the unoptimised kernel
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

    def run(self: Bench, opts: tuple[Opt, ...], runner: CompiledRunner | None) -> Ran:
        ret = real_run(self, opts, runner)
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

    def no_search(ast: UOp, device: str, reference: tuple[Opt, ...] = ()) -> Bench:
        raise AssertionError("searched again despite the cached choice")

    monkeypatch.setattr(Bench, "of", staticmethod(no_search))
    with Context(BEAM=2):  # a later run (the in-process kernel cache cleared): the disk cache answers
        method_cache.clear()
        assert applied(ExecItem(ei.ast, ei.bufs)) == fastest
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1), pytest.raises(AssertionError, match="searched again"):
        beam_ast(ei.ast, "CPU")
    with Context(BEAM=2, NOOPT=1):  # NOOPT wins over BEAM
        assert beam_ast(ei.ast, "CPU") is ei.ast


def test_beam_cache_misses_when_the_code_generator_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_clock(monkeypatch, (Opt(UPCAST, 0, 2),))
    ei, _ = matmul_kernel()
    with Context(BEAM=2):
        beam_ast(ei.ast, "CPU")
    monkeypatch.setattr(search_module, "codegen_stamp", lambda: "other code")  # codegen/ or renderer/ edited since
    with Context(BEAM=2):
        beam_ast(ei.ast, "CPU")
    assert [r.cached for r in search_module.searches[-2:]] == [False, False]  # searched again, not the old times


def test_codegen_stamp_follows_the_code_generators_sources(tmp_path: Path) -> None:
    assert search_module.codegen_stamp() == search_module.sources_digest(Path(search_module.__file__).parents[1])
    for name in ("codegen/opt.py", "renderer/cstyle.py", "nn/optim.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    first = search_module.sources_digest(tmp_path)
    (tmp_path / "nn/optim.py").write_text("x = 2\n")  # not the code generator: the old times still hold
    assert search_module.sources_digest(tmp_path) == first
    (tmp_path / "renderer/cstyle.py").write_text("x = 2\n")
    changed = search_module.sources_digest(tmp_path)
    assert changed != first
    (tmp_path / "uop").mkdir()
    (tmp_path / "uop/symbolic.py").write_text("")  # a new file, even an empty one, is new code
    assert search_module.sources_digest(tmp_path) not in (first, changed)


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


def test_keep_is_searched_and_runs_right() -> None:
    # a fused softmax recomputes exp(x - max) over its row for the sum and the output: KEEP keeps it in a row buffer
    ei = Tensor.randn(8, 256).realize().softmax(-1).schedule()[-1]
    sink = graph_rewrite(ei.ast, sym)
    keeps = [o for o in actions(sink) if o.op is KEEP]
    assert keeps == [Opt(KEEP, 3, 256)]
    bench = Bench.of(ei.ast, "CPU")
    assert [opts for _, opts in bench.ranked([(keeps[0],)])] == [(keeps[0],)]  # ran, and matched the plain kernel
    assert not [o for o in actions(apply_opts(sink, (keeps[0],))) if o.op is KEEP]  # kept once


def test_cache_is_per_width_and_debug_2_prints_the_choice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fastest = (Opt(UPCAST, 1, 4),)
    fake_clock(monkeypatch, fastest)
    benches = keep_benches(monkeypatch)
    ei, _ = matmul_kernel()
    search_module.searches.clear()
    with Context(DEBUG=2):
        for width in (1, 2, 2):  # BEAM=1 and BEAM=2 are searched apart; the second BEAM=2 reads the disk cache
            with Context(BEAM=width):
                assert beam_ast(ei.ast, "CPU").arg.opts_to_apply == fastest
    assert len(benches) == 2
    assert [(r.width, r.cached) for r in search_module.searches] == [(1, False), (2, False), (2, True)]
    searched, cached = search_module.searches[1:]
    assert cached == dataclasses.replace(searched, cached=True)  # every field survives the disk cache
    assert searched.heuristic == (Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 16))
    assert searched.heuristic_s == 1.0
    assert searched.best_s == 0.5
    assert not searched.capped
    out = capsys.readouterr().out.splitlines()
    assert f"beam 2 {searched.name}: {fastest} 500000.0 us (cached); heuristic {searched.heuristic}" in out[-1]
    assert any(line.startswith(f"beam 2 {searched.name}: {fastest} 500000.0 us (searched in") for line in out)


class _StopSearchError(Exception):
    pass


def test_search_starts_from_the_kernel_full_rewrite_optimises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The beam's start (the heuristic) and its opts are worked out on the AST full_rewrite applies opts to, one-hot
    sums collapsed: a convnet's pool backward read with sym alone took UPCAST(4, 13) where the heuristic applies
    UPCAST(4, 2), so the search timed (and reported) a 600 us kernel as the heuristic's, 5x its 115 us."""
    from fusegrad.examples.mnist import ConvNet
    from fusegrad.nn.optim import Adam
    from fusegrad.nn.state import get_parameters

    Tensor.manual_seed(0)
    monkeypatch.setattr(Tensor, "training", True)
    model = ConvNet(4)
    optimizer = Adam(get_parameters(model))
    Tensor.realize(*get_parameters(model))
    loss = model(Tensor.empty(2, 1, 28, 28)).sum().backward()
    asts = [i.ast for i in loss.schedule(*[p.grad for p in optimizer.params]) if i.ast.op is Ops.SINK]
    differing = [a for a in asts if hand_coded_opts(graph_rewrite(a, sym)) != hand_coded_opts(simplify_indexing(a))]
    assert differing  # the case this guards: kernels whose opts change once their one-hot sums collapse
    seen: list[UOp] = []

    def choose(sink: UOp, given: tuple[Opt, ...] | None, renderer: object) -> tuple[Opt, ...]:
        seen.append(sink)
        raise _StopSearchError

    monkeypatch.setattr(search_module, "choose_opts", choose)
    for ast in differing:
        with pytest.raises(_StopSearchError):
            search_module.beam_search(ast, "CPU", 2)
        assert seen[-1] is simplify_indexing(ast)


def test_cache_entries_that_are_not_a_search_result_are_ignored() -> None:
    assert SearchResult.from_json([["UPCAST", 0, 4]]) is None  # an older cache's plain opt list
    assert SearchResult.from_json({"opts": [["NOPE", 0, 4]], "heuristic": []}) is None
    assert SearchResult.from_json(None) is None
    result = SearchResult("k", 2, (Opt(PACK, 0, 2),), 1e-3, (), math.nan, 3.5, 7, True)
    assert SearchResult.from_json(result.to_json()) == dataclasses.replace(result, cached=True, heuristic_s=math.nan)


def test_budget_caps_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(runner: CompiledRunner, bufs: object, var_vals: object) -> float:
        time.sleep(0.05)
        return 1.0

    monkeypatch.setattr(search_module, "time_runner", slow)
    monkeypatch.setattr(search_module, "BUDGET_S", 0.3)
    ei, expected = matmul_kernel()
    search_module.searches.clear()
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        applied(ei)
    run_checked(ei, expected)
    (result,) = search_module.searches
    sink = graph_rewrite(ei.ast, sym)
    in_round_1 = {e for start in ((), result.heuristic) for e in neighbours(sink, start)}
    assert result.capped
    assert 2 <= result.timed < 2 + len(in_round_1)  # the two starts, then as many as the budget let through
    assert result.search_s < 10  # the budget plus one round's compiles and the last candidate


def test_candidates_compile_in_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = Device["CPU"].compiler
    real_compile, lock = compiler.compile_cached, threading.Lock()
    running, most = [0], [0]

    def compile_cached(src: str) -> bytes:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.1)  # long enough for a second compile to start beside it, when there is a pool
        try:
            return real_compile(src)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(compiler, "compile_cached", compile_cached)
    ei, _ = matmul_kernel()
    bench = Bench.of(ei.ast, "CPU")
    runners = bench.compile([(Opt(UPCAST, 0, 2),), (Opt(UPCAST, 1, 2),), (Opt(UPCAST, 1, 4),)])
    assert all(r is not None for r in runners.values())
    assert most[0] >= 2


def test_a_large_kernel_is_checked_against_the_heuristic(monkeypatch: pytest.MonkeyPatch) -> None:
    fastest = (Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 16), Opt(PACK, 0, 2))
    timed = fake_clock(monkeypatch, fastest)
    monkeypatch.setattr(search_module, "PLAIN_MAX_OPS", 0)  # every kernel is "large": its plain run would be too slow
    benches = keep_benches(monkeypatch)
    ei, expected = matmul_kernel()
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        assert applied(ei) == fastest
    run_checked(ei, expected)
    assert timed[0] == fastest[:2]  # the heuristic's kernel is the reference and the one start
    assert () not in timed
    assert () not in benches[0].timed


def test_a_losing_candidate_is_not_timed_further(monkeypatch: pytest.MonkeyPatch) -> None:
    ei, _ = matmul_kernel()
    bench = Bench.of(ei.ast, "CPU")
    bench.timed[(Opt(UPCAST, 0, 2),)] = 1e-12  # a best time nothing can come close to

    def no_repeats(runner: CompiledRunner, bufs: object, var_vals: object) -> float:
        raise AssertionError("a loser was timed again")

    monkeypatch.setattr(search_module, "time_runner", no_repeats)
    opts = (Opt(UPCAST, 1, 2),)
    ran = bench.run(opts, bench.compile([opts])[opts])
    assert ran is not None
    assert ran[0] > 1e-12


def test_a_long_sum_keeps_its_grouped_candidate() -> None:
    # 16M float32 terms summed in order (the unoptimised reference) and in 16 parts drift ~1e-3 apart relatively: the
    # check scales its tolerance with the reduce's length (at 1e-4 the heuristic's own GROUP was dropped as wrong)
    ei = Tensor.randn(16 << 20).realize().sum().schedule()[-1]
    bench = Bench.of(ei.ast, "CPU")
    assert bench.scale == 128
    grouped = (Opt(GROUP, 0, 16),)
    assert [opts for _, opts in bench.ranked([grouped])] == [grouped]
    partial = bench.initial[1][: 15 << 20].sum(dtype=np.float32)  # a kernel that skipped a 16th of the terms
    assert not search_module._close(np.array([partial]), bench.expected[0], bench.scale)


def test_a_candidate_with_far_more_work_is_not_run() -> None:
    # upcasting a fused softmax's row loop moves its row max and sum inside the loop over the row (256x the ops): such
    # a candidate could run for minutes, and a running kernel can't be stopped, so it is dropped before it runs
    ei = Tensor.randn(64, 256).realize().softmax(-1).schedule()[-1]
    bench = Bench.of(ei.ast, "CPU")
    row_upcast, keep = (Opt(UPCAST, 0, 2),), (Opt(KEEP, 3, 256),)
    runners = bench.compile([row_upcast, keep])
    assert runners[row_upcast] is None
    assert runners[keep] is not None
    assert (
        to_program(with_opts(ei.ast, row_upcast, "k"), Device["CPU"].renderer).estimates.ops
        > search_module.MAX_WORK * bench.work
    )


def test_neighbours_vary_a_finished_tile() -> None:
    # the heuristic's matmul tile ends in a PACK, after which only a second PACK or an UNROLL applies (no upcast: tile
    # sizes stay as they are): its neighbours also try other tile sizes and the tile without each of its opts
    ei, _ = matmul_kernel(64)
    sink = graph_rewrite(ei.ast, sym)
    tile = choose_opts(sink, None, Device["CPU"].renderer)
    assert tile[-1].op is PACK
    assert all(opts[-1].op in (PACK, UNROLL) for opts in extensions(sink, tile))
    near = neighbours(sink, tile)
    first = tile[0]  # on AVX2 (conftest's 8 lanes) a clamped tile of 6 rows over its reduce of 64 (short_tile_opts)
    assert first == Opt(UPCAST_CLAMP, 0, 6)
    assert (Opt(UPCAST_CLAMP, first.axis, 4), *tile[1:]) in near  # the clamp's rows are varied too
    assert (first, Opt(UPCAST, tile[1].axis, tile[1].arg // 2), *tile[2:]) in near  # and the vectors'
    assert tile[:-1] in near
    assert tile not in near
    # an UNROLL's amount is varied as an UPCAST's is
    unrolled = (*tile, Opt(UNROLL, 2, 4))
    assert (*tile, Opt(UNROLL, 2, 2)) in neighbours(sink, unrolled)


def test_neighbours_vary_a_split_groups_size() -> None:
    # the heuristic's groups of column tiles (opt.column_groups) are tried at the other sizes and left out
    ei, _ = matmul_kernel(64)
    sink = graph_rewrite(ei.ast, sym)
    tile = (Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 4), Opt(SWAP, 0, 1))
    grouped = (*tile, Opt(OptOps.SPLIT, 0, 4), Opt(PACK, 1, 2))
    near = neighbours(sink, grouped)
    for amount in (2, 8):  # of the 16 column tiles
        assert (*tile, Opt(OptOps.SPLIT, 0, amount), Opt(PACK, 1, 2)) in near
    assert (*tile, Opt(PACK, 1, 2)) in near


def test_a_winner_by_luck_loses_the_duel_with_the_heuristic(monkeypatch: pytest.MonkeyPatch) -> None:
    lucky = (Opt(UPCAST, 1, 4),)  # timed once during the search while the machine was quiet, slow ever after
    seen: list[tuple[Opt, ...]] = []

    def time_runner(runner: CompiledRunner, bufs: object, var_vals: object) -> float:
        opts = tuple(runner.p.uops[-1].arg.applied_opts)
        seen.append(opts)
        if opts == lucky:
            return 0.5 if seen.count(lucky) == 1 else 2.0
        return 1.0

    monkeypatch.setattr(search_module, "time_runner", time_runner)
    ei, expected = matmul_kernel()
    search_module.searches.clear()
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        chosen = applied(ei)
    (result,) = search_module.searches
    assert chosen == result.heuristic  # the heuristic's opts kept
    assert (result.best_s, result.heuristic_s) == (1.0, 1.0)
    assert seen.count(lucky) == 1 + search_module.DUEL_TURNS
    run_checked(ei, expected)


@functools.cache
def walk_kernels() -> dict[str, UOp]:
    """ASTs whose neighbourhoods hold every kind of opt: a matmul (UPCAST, SWAP, GROUP, PACK), a softmax (KEEP), a
    layernorm (LANES of its mean's and its variance's sums)."""
    a, b = Tensor.randn(16, 32).realize(), Tensor.randn(32, 16).realize()
    return {
        "matmul": (a @ b).schedule()[-1].ast,
        "softmax": Tensor.randn(8, 64).realize().softmax(-1).schedule()[-1].ast,
        "layernorm": Tensor.randn(8, 64).realize().layernorm(-1).schedule()[-1].ast,
    }


@settings(max_examples=8, deadline=None)
@given(st.data())
def test_neighbour_walks_compute_what_the_plain_kernel_does(data: st.DataObject) -> None:
    """A walk of 1-3 steps through `neighbours` (changed amounts and left-out opts too) from no opts or the heuristic's:
    the kernel, where it renders, matches the unoptimised one on the search's own random inputs."""
    ast = walk_kernels()[data.draw(st.sampled_from(["matmul", "softmax", "layernorm"]))]
    sink = graph_rewrite(ast, sym)
    opts = choose_opts(sink, None, Device["CPU"].renderer) if data.draw(st.booleans()) else ()
    for _ in range(data.draw(st.integers(1, 3))):
        if not (near := neighbours(sink, opts)):
            break
        opts = data.draw(st.sampled_from(near))
    bench = Bench.of(ast, "CPU")
    bench.work = math.inf  # run even a candidate BEAM would skip for its work (a softmax's row loop upcast)
    # a candidate that doesn't render is dropped (opt.py takes GROUP(2, 2) twice on the softmax, then linearize fails)
    if (runner := bench.compile([opts])[opts]) is not None:
        ran = bench.run(opts, runner)
        assert ran is not None, opts
        assert all(search_module._close(ran[1][s], x) for s, x in bench.expected.items()), opts


def test_a_changed_heuristic_searches_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_clock(monkeypatch, (Opt(UPCAST, 1, 4),))
    benches = keep_benches(monkeypatch)
    ei, _ = matmul_kernel()
    with Context(BEAM=2):
        beam_ast(ei.ast, "CPU")
        beam_ast(ei.ast, "CPU")  # the disk cache answers
        assert len(benches) == 1
        monkeypatch.setattr(search_module, "choose_opts", lambda sink, given, renderer: (Opt(UPCAST, 0, 2),))
        beam_ast(ei.ast, "CPU")  # the cached search started from other opts and timed other ones against it
    assert len(benches) == 2
    assert search_module.searches[-1].heuristic == (Opt(UPCAST, 0, 2),)
