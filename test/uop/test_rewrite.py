"""Tests for the rewrite engine in fusegrad/uop/rewrite.py: order, fixed points, maps, loops, limits and bad input."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusegrad.dtype import dtypes
from fusegrad.helpers import TRACK_MATCH_STATS, Context
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import (
    PatternMatcher,
    RewriteLoopError,
    UOp,
    UPat,
    _name_cnt,
    active_rewrites,
    graph_rewrite,
    graph_rewrite_map,
    tracked_ctxs,
    tracked_keys,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=[0, 2], ids=["untracked", "tracked"])
def track_level(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run a test with the plain matcher (0) and with the recording one (2): both must rewrite alike."""
    containers = (tracked_keys, tracked_ctxs, active_rewrites, _name_cnt)
    for container in containers:
        container.clear()
    saved = TRACK_MATCH_STATS.value
    TRACK_MATCH_STATS.value = request.param
    yield
    TRACK_MATCH_STATS.value = saved
    assert active_rewrites == [], "a step was left open"
    for container in containers:
        container.clear()


@pytest.fixture
def a() -> UOp:
    return UOp.variable("a", 0, 10)


@pytest.fixture
def b() -> UOp:
    return UOp.variable("b", 0, 10)


def record_visits(order: list[UOp]) -> PatternMatcher:
    """A table that rewrites nothing and records every node it is tried on."""

    def visit(x: UOp) -> None:
        order.append(x)

    return PatternMatcher([(UPat(GroupOp.All, name="x"), visit)])


def fold_add(x: UOp, y: UOp) -> UOp:
    """c1 + c2 -> c"""
    return x.const_like(x.arg + y.arg)


pm_fold_add = PatternMatcher([(UPat.cvar("x") + UPat.cvar("y"), fold_add)])


# *** traversal order ***


@pytest.mark.usefixtures("track_level")
class TestOrder:
    def test_top_down_rewrites_sources_before_users(self, a: UOp, b: UOp) -> None:
        order: list[UOp] = []
        root = (a + b) * a
        graph_rewrite(root, record_visits(order))
        position = {u: i for i, u in enumerate(order)}
        assert set(order) == set(root.toposort())
        assert len(order) == len(position)  # each node once
        for u in order:
            assert all(position[s] < position[u] for s in u.src)

    def test_bottom_up_sees_users_before_sources(self, a: UOp, b: UOp) -> None:
        order: list[UOp] = []
        root = (a + b) * a
        graph_rewrite(root, record_visits(order), bottom_up=True)
        assert order[0] is root
        position = {u: i for i, u in enumerate(order)}
        assert position[a + b] < position[b]

    def test_top_down_user_sees_rewritten_sources(self, a: UOp) -> None:
        # a -> 2 first, so the ADD above it becomes 2+1 and folds
        pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: v.const_like(2))]) + pm_fold_add
        assert graph_rewrite(a + 1, pm) is UOp.const(dtypes.index, 3)

    def test_bottom_up_rule_sees_the_original_node(self, a: UOp, b: UOp) -> None:
        # bottom-up, (a+b) is matched before its sources are rewritten: the rule sees the variables, not constants
        seen: list[UOp] = []

        def note(x: UOp) -> None:
            seen.append(x)

        pm = PatternMatcher(
            [(UPat(Ops.ADD, name="x"), note), (UPat(Ops.DEFINE_VAR, name="v"), lambda v: v.const_like(1))]
        )
        graph_rewrite(a + b, pm, bottom_up=True)
        assert seen[0] is a + b

    def test_bottom_up_result_is_rewritten_again(self, a: UOp, b: UOp) -> None:
        pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: v.const_like(2))]) + pm_fold_add
        assert graph_rewrite(a + b, pm, bottom_up=True) is UOp.const(dtypes.index, 4)

    def test_shared_nodes_are_rewritten_once(self, a: UOp) -> None:
        calls: list[UOp] = []

        def count(v: UOp) -> UOp:
            calls.append(v)
            return v.const_like(1)

        shared = a * 3
        root = UOp.sink(shared + 1, shared + 2, shared * shared)
        graph_rewrite(root, PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), count)]))
        assert calls == [a]


# *** fixed points and maps ***


@pytest.mark.usefixtures("track_level")
class TestFixedPoint:
    def test_rule_output_matched_by_another_keeps_going(self) -> None:
        chain = PatternMatcher(
            [
                (UPat(Ops.CONST, arg=1, name="c"), lambda c: c.replace(arg=2)),
                (UPat(Ops.CONST, arg=2, name="c"), lambda c: c.replace(arg=3)),
                (UPat(Ops.CONST, arg=3, name="c"), lambda c: c.replace(arg=4)),
            ]
        )
        one = UOp.const(dtypes.int, 1)
        assert graph_rewrite(one, chain).arg == 4
        assert graph_rewrite(one, chain, bottom_up=True).arg == 4
        assert graph_rewrite(one * 5, chain).src[0].arg == 4

    def test_new_sources_are_rewritten_too(self, a: UOp) -> None:
        # x*2 -> x+x creates nodes the table must visit; a -> 1 must reach inside them
        pm = PatternMatcher(
            [(UPat.var("x") * 2, lambda x: x + x), (UPat(Ops.DEFINE_VAR, name="v"), lambda v: v.const_like(1))]
        )
        out = graph_rewrite((a + 1) * 2, pm + pm_fold_add)
        assert out is UOp.const(dtypes.index, 4)

    def test_unmatched_graph_is_returned_unchanged(self, a: UOp) -> None:
        root = (a + 1) * 2
        assert graph_rewrite(root, PatternMatcher([])) is root
        assert graph_rewrite(root, pm_fold_add, bottom_up=True) is root

    def test_ctx_reaches_the_callback(self, a: UOp, b: UOp) -> None:
        def rename(ctx: dict[str, UOp], v: UOp) -> UOp | None:
            return ctx.get(v.arg[0])

        c = UOp.variable("c", 0, 10)
        out = graph_rewrite(a + b, PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), rename)]), ctx={"a": c})
        assert out is c + b

    def test_map_covers_every_original_node(self, a: UOp, b: UOp) -> None:
        root = UOp.sink((a + 0) * b, a)
        strip_add_zero = PatternMatcher([(UPat.var("x") + 0, lambda x: x)])
        mapping = graph_rewrite_map(root, strip_add_zero)
        assert set(mapping) == set(root.toposort())
        assert mapping[a + 0] is a
        assert mapping[(a + 0) * b] is a * b
        assert mapping[root] is UOp.sink(a * b, a)
        assert mapping[b] is b

    def test_map_composes_with_an_input_map(self, a: UOp, b: UOp) -> None:
        first = graph_rewrite_map(a + 0, PatternMatcher([]))
        to_b = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: b if v is a else None)])
        second = graph_rewrite_map(a + 0, to_b, input_map=first)
        assert second[a + 0] is b + 0

    def test_bpm_runs_before_pm(self, a: UOp) -> None:
        bpm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: v.const_like(5))])
        assert graph_rewrite(a + 1, pm_fold_add, bpm=bpm) is UOp.const(dtypes.index, 6)


# *** loops, errors and limits ***

pm_cycle = PatternMatcher(
    [
        (UPat(Ops.CONST, arg=3, name="x"), lambda x: x.replace(arg=4)),
        (UPat(Ops.CONST, arg=4, name="x"), lambda x: x.replace(arg=3)),
    ]
)


@pytest.mark.usefixtures("track_level")
class TestLoopsAndErrors:
    @pytest.mark.parametrize("bottom_up", [False, True])
    def test_cycle_raises_naming_the_pass(self, bottom_up: bool) -> None:
        with pytest.raises(RewriteLoopError, match="swap_three_four"):
            graph_rewrite(UOp.const(dtypes.int, 3), pm_cycle, bottom_up=bottom_up, name="swap_three_four")
        assert issubclass(RewriteLoopError, RuntimeError)

    @pytest.mark.parametrize("bottom_up", [False, True])
    def test_cycle_deep_in_a_graph_raises(self, a: UOp, bottom_up: bool) -> None:
        root = a
        for _ in range(50):
            root = root * 2
        root = root + UOp.const(dtypes.index, 3)
        with pytest.raises(RuntimeError, match="infinite loop"):
            graph_rewrite(root, pm_cycle, bottom_up=bottom_up, name="deep cycle")

    def test_self_feeding_rule_raises(self, a: UOp) -> None:
        # x -> x+0 puts x back under its own result: the cycle goes through a new node
        grow = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: v + 0)])
        with pytest.raises(RewriteLoopError, match="grow"):
            graph_rewrite(a, grow, name="grow")

    def test_endless_fresh_nodes_hit_the_stack_limit(self) -> None:
        count_up = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.replace(arg=c.arg + 1))])
        with Context(REWRITE_STACK_LIMIT=1000), pytest.raises(RewriteLoopError, match="count_up"):
            graph_rewrite(UOp.const(dtypes.int, 0), count_up, name="count_up")

    def test_rule_exception_propagates(self, a: UOp) -> None:
        def boom(x: UOp) -> UOp:
            raise ArithmeticError(f"cannot rewrite {x.op}")

        pm = PatternMatcher([(UPat(Ops.MUL, name="x"), boom)])
        with pytest.raises(ArithmeticError, match=r"cannot rewrite Ops\.MUL"):
            graph_rewrite((a * 2) + 1, pm)
        with pytest.raises(ArithmeticError):
            graph_rewrite((a * 2) + 1, pm, bottom_up=True)

    def test_stack_limit_bounds_a_deep_graph(self, a: UOp) -> None:
        root = a
        for _ in range(1000):
            root = root + 1
        with Context(REWRITE_STACK_LIMIT=100), pytest.raises(RuntimeError, match="stack too big"):
            graph_rewrite(root, PatternMatcher([]), name="deep")
        assert graph_rewrite(root, PatternMatcher([])) is root  # the default limit is far above this

    def test_non_uop_input_raises_type_error_naming_the_type(self) -> None:
        with pytest.raises(TypeError, match="int"):
            graph_rewrite(3, PatternMatcher([]))  # type: ignore[arg-type]  # the point of the test
        with pytest.raises(TypeError, match="list"):
            graph_rewrite([UOp.variable("a", 0, 1)], PatternMatcher([]))  # type: ignore[arg-type]  # the point
        with pytest.raises(TypeError, match="str"):
            graph_rewrite_map("x", PatternMatcher([]))  # type: ignore[arg-type]  # the point of the test

    def test_non_pattern_matcher_raises_type_error(self, a: UOp) -> None:
        with pytest.raises(TypeError, match="PatternMatcher"):
            graph_rewrite(a, [(UPat(Ops.ADD), lambda: None)])  # type: ignore[arg-type]  # the point of the test


def test_endless_fresh_nodes_bottom_up_do_not_hang() -> None:
    code = """
    from fusegrad.helpers import Context
    from fusegrad.uop import Ops
    from fusegrad.uop.ops import PatternMatcher, RewriteLoopError, UOp, UPat, graph_rewrite
    grow = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x + 0)])
    try:
        with Context(REWRITE_STACK_LIMIT=1000):
            graph_rewrite(UOp.variable("a", 0, 10) + 1, grow, bottom_up=True, name="grow_bottom_up")
    except RewriteLoopError as e:
        print(e)
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=10)  # fmt: skip
    assert "grow_bottom_up" in proc.stdout
