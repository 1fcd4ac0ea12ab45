"""Tests for rewrite tracing (fusegrad/uop/rewrite.py) and its VIZ data side (fusegrad/viz/rewrites.py, serve.py).

Groups come from `track_rewrites`, steps from each `graph_rewrite`, matches from the rules that fired; the data
functions list them (`get_rewrites`) and replay a step graph by graph (`get_full_rewrite`).
"""

from __future__ import annotations

import gc
import inspect
import os
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fusegrad.dtype import dtypes
from fusegrad.helpers import TRACK_MATCH_STATS, Context, TracingKey, ansistrip
from fusegrad.uop import Ops
from fusegrad.uop.ops import (
    PatternMatcher,
    RewriteTrace,
    TrackedPatternMatcher,
    UOp,
    UPat,
    _name_cnt,
    active_rewrites,
    graph_rewrite,
    profile_matches,
    track_rewrites,
    tracked_ctxs,
    tracked_keys,
    uop_fields,
)
from fusegrad.uop.symbolic import sym
from fusegrad.viz.serve import get_full_rewrite, get_rewrites, uop_to_json

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def tracing() -> Iterator[None]:
    """Record every rewrite (TRACK_MATCH_STATS=2) into freshly cleared containers; restore the flag after."""
    for container in (tracked_keys, tracked_ctxs, active_rewrites, _name_cnt):
        container.clear()
    saved = TRACK_MATCH_STATS.value
    TRACK_MATCH_STATS.value = 2
    yield
    TRACK_MATCH_STATS.value = saved
    for container in (tracked_keys, tracked_ctxs, active_rewrites, _name_cnt):
        container.clear()


def groups() -> list[dict[str, Any]]:
    return get_rewrites(RewriteTrace(tracked_keys, tracked_ctxs, uop_fields))


def replay(group: int, step: int) -> list[dict[str, Any]]:
    return list(get_full_rewrite(tracked_ctxs[group][step]))


@track_rewrites()
def run_passes(sink: UOp, tables: list[PatternMatcher], names: list[str] | None = None) -> UOp:
    for i, pm in enumerate(tables):
        sink = graph_rewrite(sink, TrackedPatternMatcher(pm.patterns), name=names[i] if names else None)
    return sink


pm_cycle = PatternMatcher(
    [
        (UPat(Ops.CONST, arg=3, name="x"), lambda x: x.replace(arg=4)),
        (UPat(Ops.CONST, arg=4, name="x"), lambda x: x.replace(arg=3)),
    ]
)


# *** groups and steps ***


class TestGroups:
    def test_one_group_per_call_named_with_a_counter(self) -> None:
        a = UOp.variable("a", 0, 10)
        run_passes(a * 1, [sym])
        run_passes(a + 0, [sym])
        run_passes(a, [sym])
        assert [g["name"] for g in groups()] == ["run_passes n1", "run_passes n2", "run_passes n3"]

    def test_one_step_per_graph_rewrite_with_its_name(self) -> None:
        a = UOp.variable("a", 0, 10)
        run_passes(a + 1, [PatternMatcher([]), sym, PatternMatcher([])], ["first", "second", "third"])
        (group,) = groups()
        assert [s["name"] for s in group["steps"]] == ["first", "second", "third"]
        assert all(s["depth"] == 0 for s in group["steps"])

    def test_match_count_counts_rules_that_fired(self) -> None:
        a = UOp.variable("a", 0, 10)
        run_passes((a + 0) * 1, [sym])  # a+0 -> a, a*1 -> a
        run_passes(a + 1, [sym])  # nothing to do
        assert [g["steps"][0]["match_count"] for g in groups()] == [2, 0]

    def test_loc_is_the_caller_of_graph_rewrite(self) -> None:
        def inner(sink: UOp) -> UOp:
            return graph_rewrite(sink, PatternMatcher([]), name="located")

        def outer(sink: UOp) -> UOp:
            return inner(sink)

        outer(UOp.variable("a", 0, 10))
        path, line = groups()[0]["steps"][0]["loc"]
        assert path == inner.__code__.co_filename
        assert line == inner.__code__.co_firstlineno + 1  # the `return graph_rewrite(...)` line

    def test_rewrites_outside_a_tracked_function_join_the_default_group(self) -> None:
        c = UOp.const(dtypes.int, 1)
        graph_rewrite(c + 1, sym)
        graph_rewrite(c + 2, sym)
        (group,) = groups()
        assert group["name"] == "default graph_rewrite"
        assert len(group["steps"]) == 2

    def test_tracked_call_starts_a_new_group_that_later_rewrites_join(self) -> None:
        c = UOp.const(dtypes.int, 1)
        first, last = c + 1, c + 2  # kept alive: a replayed graph is drawn with the ids of the live nodes
        graph_rewrite(first, sym)
        run_passes(c, [sym])
        graph_rewrite(last, sym)
        assert [(g["name"], len(g["steps"])) for g in groups()] == [("default graph_rewrite", 1), ("run_passes n1", 2)]
        assert list(replay(0, 0)[0]["graph"]) == [id(first)]
        assert list(replay(1, 0)[0]["graph"]) == [id(c)]
        assert list(replay(1, 1)[0]["graph"]) == [id(last)]

    def test_default_name_is_the_function_name(self) -> None:
        @track_rewrites()
        def lower_everything() -> UOp:
            return graph_rewrite(UOp.variable("a", 0, 1), PatternMatcher([]))

        lower_everything()
        lower_everything()
        assert [g["name"] for g in groups()] == ["lower_everything n1", "lower_everything n2"]

    def test_name_function_sees_the_result(self) -> None:
        @track_rewrites(name=lambda *args, ret, **kwargs: f"made {ret.render()}")
        def build(s: UOp, extra: list[str] | None = None) -> UOp:
            return graph_rewrite(s, PatternMatcher([]))

        build(UOp.variable("a", 1, 10) * 3, extra=["unused"])
        build(UOp.variable("a", 1, 10) * 3)
        assert [g["name"] for g in groups()] == ["made (a*3) n1", "made (a*3) n2"]

    def test_tracing_key_names_are_used_as_is(self) -> None:
        @track_rewrites(name=lambda inp, ret: TracingKey("kernel_r_16", (inp,)))
        def compile_one(s: UOp) -> UOp:
            return graph_rewrite(s, PatternMatcher([]))

        compile_one(UOp.variable("a", 1, 10))
        compile_one(UOp.variable("a", 1, 10))
        assert [g["name"] for g in groups()] == ["kernel_r_16", "kernel_r_16"]  # no counter

    def test_nothing_is_recorded_below_level_two(self) -> None:
        a = UOp.variable("a", 0, 10)
        with Context(TRACK_MATCH_STATS=1):
            run_passes(a + 0, [sym])
            graph_rewrite(a * 1, sym)
        with Context(TRACK_MATCH_STATS=0):
            run_passes(a + 0, [sym])
        assert groups() == []


# *** nesting ***


def tag_variable(x: UOp) -> UOp | None:
    return x.rtag("leaf") if x.tag is None else None


pm_leaf = TrackedPatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), tag_variable)])


def split_sum(x: UOp, y: UOp) -> UOp | None:
    """x + y -> x' * y', each side rewritten by its own nested pass"""
    if x.tag is not None:
        return None
    return graph_rewrite(x, pm_leaf, name="left") * graph_rewrite(y, pm_leaf, name="right")


pm_branch = TrackedPatternMatcher([(UPat.var("x") + UPat.var("y"), split_sum)])


def rewrite_each_source(root: UOp) -> UOp:
    return root.replace(src=tuple(graph_rewrite(s, pm_branch, name=f"source {i}") for i, s in enumerate(root.src)))


pm_root = TrackedPatternMatcher([(UPat(Ops.SINK, src=UPat(Ops.ADD), name="root"), rewrite_each_source)])


class TestNesting:
    def test_nested_rewrites_form_a_tree(self) -> None:
        a, b, c, d = (UOp.variable(n, 0, 10) for n in "abcd")
        graph_rewrite(UOp.sink(a + b, c + d), pm_root, name="root")
        steps = groups()[0]["steps"]
        got = [(s["name"], s["depth"], s["match_count"]) for s in steps]
        assert got == [
            ("root", 0, 1),
            ("source 0", 1, 1),
            ("left", 2, 1),
            ("right", 2, 1),
            ("source 1", 1, 1),
            ("left", 2, 1),
            ("right", 2, 1),
        ]
        assert active_rewrites == []

    def test_profile_matches_adds_a_step_above_its_rewrites(self) -> None:
        @profile_matches
        def two_passes(u: UOp) -> None:
            for i in range(2):
                graph_rewrite(u, PatternMatcher([]), name=f"pass {i}")

        @track_rewrites()
        def pipeline(u: UOp) -> None:
            graph_rewrite(u, PatternMatcher([]), name="start")
            two_passes(u)

        pipeline(UOp.variable("a", 1, 10) + UOp.variable("b", 1, 10))
        steps = groups()[0]["steps"]
        assert [(s["name"], s["depth"]) for s in steps] == [
            ("start", 0),
            ("two_passes", 0),
            ("pass 0", 1),
            ("pass 1", 1),
        ]

    def test_profile_matches_step_loc_is_the_caller(self) -> None:
        @profile_matches
        def nothing(u: UOp) -> None:
            graph_rewrite(u, PatternMatcher([]), name="inner")

        @track_rewrites()
        def pipeline(u: UOp) -> None:
            nothing(u)  # the step's loc

        pipeline(UOp.variable("a", 1, 10))
        lines, first = inspect.getsourcelines(pipeline)
        call_line = first + next(i for i, text in enumerate(lines) if "# the step's loc" in text)
        assert groups()[0]["steps"][0]["loc"] == (__file__, call_line)

    def test_profile_matches_rejects_a_non_uop_first_argument(self) -> None:
        @profile_matches
        def takes_text(arg: str) -> UOp:
            return graph_rewrite(UOp(Ops.SINK), PatternMatcher([]))

        with pytest.raises(AssertionError, match="invalid match tracing input"):
            takes_text("not a uop")


# *** errors and loops ***


def count_to_three(x: UOp) -> UOp:
    assert x.arg <= 3, f"went past three: {x.arg}"
    return x.replace(arg=x.arg + 1)


class TestErrors:
    def test_failing_rule_is_recorded_as_a_match(self) -> None:
        with pytest.raises(AssertionError, match="went past three"):
            run_passes(UOp.const(dtypes.int, 1), [PatternMatcher([(UPat.cvar("x"), count_to_three)])])
        step = groups()[0]["steps"][0]
        assert step["match_count"] == 4  # 1->2, 2->3, 3->4, then the error
        assert active_rewrites == []  # the step was closed despite the exception
        graphs = replay(0, 0)
        assert [g["uop"] for g in graphs[:4]] == [str(UOp.const(dtypes.int, n)) for n in (1, 2, 3, 4)]
        final = graphs[-1]
        assert "went past three" in final["uop"]
        assert "NOOP" in next(iter(final["graph"].values()))["label"]

    def test_loop_replays_to_a_noop_with_the_reason(self) -> None:
        three, four = UOp.const(dtypes.int, 3), UOp.const(dtypes.int, 4)
        with pytest.raises(RuntimeError):
            run_passes(three, [pm_cycle])
        graphs = [node for g in replay(0, 0) for node in g["graph"].values()]
        assert graphs[0] == uop_to_json(three)[id(three)]
        assert graphs[1] == uop_to_json(four)[id(four)]
        loop = UOp(Ops.NOOP, arg="infinite loop in fixed_point_rewrite")
        assert graphs[2] == uop_to_json(loop)[id(loop)]


# *** the data functions ***


class TestData:
    def test_replay_rebuilds_every_intermediate_graph(self) -> None:
        a = UOp.variable("a", 0, 10)
        before = (a + 0) * 1
        run_passes(before, [sym])
        graphs = replay(0, 0)
        assert len(graphs) == 3  # the input, then one graph per match
        assert graphs[0]["uop"] == str(before)
        assert graphs[-1]["uop"] == str(a)
        assert list(graphs[-1]["graph"]) == [id(a)]
        assert graphs[0]["changed_nodes"] is None
        assert all(g["upat"][0][0].endswith("symbolic.py") for g in graphs[1:])
        assert all(isinstance(g["diff"], list) for g in graphs[1:])

    def test_replay_reads_like_a_dict_and_reuses_labels_correctly(self) -> None:
        a = UOp.variable("a", 0, 10)
        before = ((a + 0) * 1 + (a * 1)).cast(dtypes.float)
        run_passes(before, [sym])
        graphs = list(get_full_rewrite(tracked_ctxs[0][0]))
        assert len(graphs) > 3
        for g in graphs:  # labels kept from earlier graphs of the replay are the ones drawn afresh
            assert g["graph"] == uop_to_json(g.root)
            assert set(g) == {"graph", "uop", "changed_nodes", "diff", "upat"}
            assert len(g) == 5
            assert dict(g)["uop"] == str(g.root)  # made when read

    def test_replayed_nodes_are_the_live_nodes(self) -> None:
        c = UOp.const(dtypes.int, 1)
        node = c + 1
        graph_rewrite(node, sym)
        assert list(replay(0, 0)[0]["graph"]) == [id(node)]

    def test_get_rewrites_fields(self) -> None:
        run_passes(UOp.variable("a", 0, 10) + 0, [sym], ["simplify"])
        step = groups()[0]["steps"][0]
        assert {"name", "loc", "depth", "match_count"} <= set(step)
        assert step["name"] == "simplify"

    def test_uop_to_json_folds_constants_into_users(self) -> None:
        a = UOp.variable("a", 0, 10, dtypes.int)
        zero = UOp.const(dtypes.int, 0)
        product = a * zero
        graph = uop_to_json(product)
        assert list(graph) == [id(a), id(product)]
        assert "CONST" in graph[id(product)]["label"]
        assert graph[id(product)]["src"] == [(0, id(a))]
        assert list(uop_to_json(zero)) == [id(zero)]  # a constant on its own is still drawn

    def test_constant_fold_step_shows_the_constant(self) -> None:
        a = UOp.variable("a", 0, 10, dtypes.int)
        zero = UOp.const(dtypes.int, 0)
        product = a * zero
        run_passes(product, [sym])
        graphs = [g["graph"] for g in replay(0, 0)]
        assert list(graphs[0]) == [id(a), id(product)]
        assert list(graphs[1]) == [id(zero)]

    def test_labels_show_args_and_strip_to_plain_text(self) -> None:
        node = UOp(Ops.CUSTOM, arg="\x1b[32mgreen\x1b[0m")
        label = uop_to_json(node)[id(node)]["label"]
        assert ansistrip(label) == "CUSTOM\ngreen"

    def test_tracing_keeps_no_graph_alive(self) -> None:
        @track_rewrites()
        def simplify_and_drop(x: UOp) -> None:
            graph_rewrite(x, sym)

        node = UOp.variable("only_here", 0, 10) * 7 + 0
        ref = weakref.ref(node)
        simplify_and_drop(node)
        del node
        gc.collect()
        assert ref() is None
        assert groups()[0]["steps"][0]["match_count"] == 1


# *** TRACK_MATCH_STATS=2 report at exit ***

STATS_SCRIPT = """from fusegrad.uop import Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat, graph_rewrite

pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x)])  # strip_add_zero
a = UOp.variable("a", 0, 10)
assert graph_rewrite(UOp.sink(a + 0, a * 2 + 0), pm) is UOp.sink(a, a * 2)
"""


def test_match_stats_print_a_rule_table_at_exit(tmp_path: Path) -> None:
    script = tmp_path / "stats.py"
    script.write_text(STATS_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACK_MATCH_STATS": "2"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rule_lines = [line for line in ansistrip(proc.stdout).splitlines() if "strip_add_zero" in line]
    assert len(rule_lines) == 1, proc.stdout
    assert "stats.py:4" in rule_lines[0]
    assert rule_lines[0].split()[0] == "2"  # matches: both additions of zero


def test_kernel_nodes_link_to_their_codegen_group_and_tensor_nodes_show_shapes() -> None:
    from fusegrad import Tensor
    from fusegrad.engine.realize import method_cache
    from fusegrad.helpers import Context
    from fusegrad.uop.ops import tracked_ctxs, tracked_keys

    for lst in (tracked_keys, tracked_ctxs):
        lst.clear()
    method_cache.clear()  # compiled earlier in this process, the kernel would run without a codegen trace
    with Context(TRACK_MATCH_STATS=2):
        a = Tensor.empty(4, 4)
        (a + 1).realize()
        steps = tracked_ctxs[0]
        kernel_step = next(s for s in steps if s.name == "kernel graph")
        graph = next(get_full_rewrite(kernel_step))["graph"]
        refs = [n["ref"] for n in graph.values() if n["label"].startswith("KERNEL")]
        assert len(refs) == 1
        assert refs[0] is not None
        assert tracked_keys[refs[0]].display_name.startswith("E_16")  # the (4, 4) loops merged: schedule/merge.py
        first = next(get_full_rewrite(steps[0]))["graph"]
        assert any("shape=(4, 4)" in n["label"] for n in first.values())


# *** the changed-node highlight ***

pm_fold_mul = PatternMatcher([
    (UPat(Ops.MUL, src=(UPat.cvar("x"), UPat.cvar("y"))), lambda x, y: x.const_like(x.arg * y.arg)),  # c*c -> c
    (UPat(Ops.CUSTOM, arg="widen", name="x"), lambda x: UOp(Ops.CUSTOM, x.dtype, x.src, "wide") * 2),
])  # fmt: skip


def deep_chain(leaf: UOp, depth: int) -> UOp:
    """`leaf` under `depth` additions of variables: every addition is an ancestor of the leaf."""
    for i in range(depth):
        leaf = leaf + UOp.variable(f"v{i}", 0, 10, dtypes.int)
    return leaf


def test_a_constant_fold_marks_only_what_it_created() -> None:
    product = UOp(Ops.MUL, dtypes.int, (UOp.const(dtypes.int, 3), UOp.const(dtypes.int, 4)))
    top = deep_chain(product + UOp.variable("x", 0, 10, dtypes.int), 40)
    run_passes(top, [pm_fold_mul])
    graphs = replay(0, 0)
    assert len(graphs) == 2
    new = graphs[1]
    assert len(new["graph"]) > 80
    # the 12 is drawn inside the addition that uses it: that node is marked, none of its 40 rebuilt ancestors
    assert len(new["changed_nodes"]) == 1
    assert "12" in new["graph"][new["changed_nodes"][0]]["label"]


def test_a_rule_marks_its_result_and_the_nodes_below_it_it_made() -> None:
    x = UOp.variable("x", 0, 10, dtypes.int)
    top = deep_chain(UOp(Ops.CUSTOM, dtypes.int, (x,), "widen"), 30)
    run_passes(top, [pm_fold_mul])
    new = replay(0, 0)[1]
    labels = sorted(ansistrip(new["graph"][n]["label"]).split("\n")[0] for n in new["changed_nodes"])
    assert labels == ["CUSTOM", "MUL"]  # wide * 2: the product and the new CUSTOM, not x and not the 30 additions


def test_steps_from_the_same_call_site_share_one_call_trace() -> None:
    """A training loop schedules from the same lines every step: its steps keep one interned trace, not one each."""
    pm = PatternMatcher([(UPat.cvar("x", dtypes.int) + 0, lambda x: x)])
    for i in range(3):
        graph_rewrite(UOp.const(dtypes.int, i) + 0, pm, name="add zero")
    steps = [s for group in tracked_ctxs for s in group if s.name == "add zero"]
    assert len(steps) == 3
    assert steps[0].trace is steps[1].trace is steps[2].trace
    here = [t for t in steps[0].trace if t[2] == "test_steps_from_the_same_call_site_share_one_call_trace"]
    assert here
    assert here[-1][3] == 'graph_rewrite(UOp.const(dtypes.int, i) + 0, pm, name="add zero")'  # the source line
