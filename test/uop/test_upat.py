"""Tests for fusegrad/uop/upat.py: what a UPat matches, how PatternMatcher picks a rule, and malformed input."""

from __future__ import annotations

import inspect

import pytest

from fusegrad.dtype import dtypes, to_dtype
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat


@pytest.fixture
def a() -> UOp:
    return UOp.variable("a", 0, 10)


@pytest.fixture
def b() -> UOp:
    return UOp.variable("b", 0, 10)


def matches(pat: UPat, uop: UOp) -> list[dict[str, UOp]]:
    return pat.match(uop, {})


# *** single patterns ***


class TestUPatMatch:
    def test_by_op(self, a: UOp) -> None:
        assert matches(UPat(Ops.ADD), a + 1)
        assert not matches(UPat(Ops.MUL), a + 1)
        assert matches(UPat(), a + 1)  # no op: anything

    def test_by_set_of_ops(self, a: UOp) -> None:
        pat = UPat((Ops.ADD, Ops.MUL))
        assert matches(pat, a + 1)
        assert matches(pat, a * 2)
        assert not matches(pat, a // 2)
        assert matches(UPat(GroupOp.Comparison), a < 1)
        assert matches(UPat({Ops.IDIV, Ops.MOD}), a % 2)

    def test_by_dtype(self, a: UOp) -> None:
        i = UOp.variable("i", 0, 10, dtypes.int)
        assert matches(UPat(dtype=dtypes.index), a)
        assert not matches(UPat(dtype=dtypes.int), a)
        assert matches(UPat(dtype=(dtypes.int, dtypes.long)), i)
        assert matches(UPat(dtype=dtypes.bool), a < 3)

    def test_vector_dtype_matches_its_scalar(self) -> None:
        vec = UOp.const(dtypes.float.vec(4), 1.0)
        assert matches(UPat(dtype=dtypes.float), vec)
        assert matches(UPat(dtype=dtypes.float.vec(4)), vec)
        assert not matches(UPat(dtype=dtypes.float.vec(2)), UOp.const(dtypes.half.vec(2), 1.0))

    def test_by_arg(self) -> None:
        three = UOp.const(dtypes.int, 3)
        assert matches(UPat(Ops.CONST, arg=3), three)
        assert not matches(UPat(Ops.CONST, arg=4), three)
        assert matches(UPat.const(dtypes.float, 1), UOp.const(dtypes.float, 1.0))  # compared with ==

    def test_name_captures_the_node(self, a: UOp) -> None:
        node = a + 1
        assert matches(UPat(Ops.ADD, name="x"), node) == [{"x": node}]
        assert matches(UPat.var("y"), node) == [{"y": node}]

    def test_tuple_src_matches_in_order(self, a: UOp) -> None:
        pat = UPat(Ops.ADD, src=(UPat(Ops.DEFINE_VAR, name="x"), UPat.cvar("c")))
        assert matches(pat, a + 1) == [{"x": a, "c": (a + 1).src[1]}]
        assert not matches(pat, 1 + a)

    def test_tuple_src_needs_the_same_length(self, a: UOp, b: UOp) -> None:
        pat = UPat(Ops.SINK, src=(UPat(Ops.DEFINE_VAR),))
        assert matches(pat, UOp.sink(a))
        assert not matches(pat, UOp.sink(a, b))
        assert not matches(pat, UOp.sink())

    def test_list_src_matches_any_permutation(self, a: UOp) -> None:
        pat = UPat(Ops.ADD, src=[UPat(Ops.DEFINE_VAR, name="x"), UPat.cvar("c")])
        one = UOp.const(dtypes.index, 1)
        assert matches(pat, a + 1) == [{"x": a, "c": one}]
        assert matches(pat, 1 + a) == [{"x": a, "c": one}]
        assert not matches(pat, a + a)

    def test_list_src_yields_every_binding(self, a: UOp, b: UOp) -> None:
        pat = UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("y")])
        found = matches(pat, a + b)
        assert {(m["x"], m["y"]) for m in found} == {(a, b), (b, a)}

    def test_single_upat_is_repeated_for_all_sources(self, a: UOp, b: UOp) -> None:
        pat = UPat(Ops.SINK, src=UPat(Ops.DEFINE_VAR))
        assert matches(pat, UOp.sink(a, b))
        assert matches(pat, UOp.sink(a, b, a))
        assert not matches(pat, UOp.sink(a, b + 1))
        assert matches(pat, UOp.sink())  # vacuously: no source fails

    def test_allow_any_len_matches_a_prefix(self, a: UOp, b: UOp) -> None:
        pat = UPat(Ops.SINK, src=(UPat(Ops.DEFINE_VAR, name="first"),), allow_any_len=True)
        assert matches(pat, UOp.sink(a, b, b + 1)) == [{"first": a}]
        assert matches(pat, UOp.sink(a)) == [{"first": a}]
        assert not matches(pat, UOp.sink(b + 1, a))
        assert not matches(pat, UOp.sink())

    def test_repeated_name_binds_the_same_node(self, a: UOp, b: UOp) -> None:
        pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
        assert matches(pat, a + a) == [{"x": a}]
        assert not matches(pat, a + b)
        nested = UPat(Ops.MUL, src=[UPat.var("x") + 1, UPat.var("x")])
        assert matches(nested, (a + 1) * a)
        assert matches(nested, a * (a + 1))
        assert not matches(nested, (a + 1) * b)

    def test_failed_branch_leaves_no_binding(self, a: UOp, b: UOp) -> None:
        # the first permutation binds x to a then fails on the dtype; the second must start clean
        pat = UPat(Ops.ADD, src=[UPat.var("x", dtypes.index), UPat.var("y", dtypes.index)])
        assert len(matches(pat, a + b)) == 2
        cast_pat = UPat(Ops.ADD, src=[UPat.var("x").cast(dtypes.index), UPat.var("x")])
        i = UOp.variable("i", 0, 10, dtypes.int)
        assert matches(cast_pat, i.cast(dtypes.index) + a) == []

    def test_operators_build_patterns(self, a: UOp) -> None:
        pat = UPat.var("x") * 2 + UPat.cvar("c")
        found = matches(pat, a * 2 + 5)
        assert len(found) == 1
        assert found[0]["x"] is a
        assert found[0]["c"].arg == 5
        assert matches(pat, 5 + 2 * a)  # ADD and MUL are commutative: both orders match

    def test_any_matches_either_alternative(self, a: UOp) -> None:
        pat = UPat.any(UPat(Ops.ADD, name="x"), UPat(Ops.MUL, name="x"))
        assert matches(pat, a + 1) == [{"x": a + 1}]
        assert matches(pat, a * 2) == [{"x": a * 2}]
        assert not matches(pat, a // 2)
        assert set(pat.op or ()) == {Ops.ADD, Ops.MUL}

    def test_or_casted(self) -> None:
        pat = UPat.var("x", dtypes.int).or_casted()
        i = UOp.variable("i", 0, 10, dtypes.int)
        assert matches(pat, i) == [{"x": i}]
        assert matches(pat, i.cast(dtypes.float)) == [{"x": i}]
        assert not matches(pat, UOp.variable("f", 0.0, 1.0, dtypes.float))
        named = UPat.cvar("c").or_casted(name="outer")
        cast = UOp.const(dtypes.int, 1).cast(dtypes.float)
        assert matches(named, cast)[0]["outer"] is cast

    def test_location_records_where_it_was_written(self) -> None:
        pats = [UPat(Ops.ADD), UPat.var("x"), UPat.cvar("c"), UPat.var("x") + 1, UPat.var("x").or_casted()]
        line = inspect.currentframe().f_lineno - 1  # type: ignore[union-attr]  # CPython always has frames
        for pat in pats:
            assert pat.location == (__file__, line)
        marked = UPat.var("marked")  # printable() shows this line
        assert marked.printable() == 'marked = UPat.var("marked")  # printable() shows this line'

    def test_repr_names_the_pattern(self) -> None:
        text = repr(UPat(Ops.ADD, dtype=dtypes.int, src=(UPat.var("x"), UPat.cvar("c")), name="root"))
        assert "Ops.ADD" in text
        assert "name='root'" in text
        assert "dtypes.int" in text


# *** rule tables ***


class TestPatternMatcher:
    def test_dispatch_by_op(self, a: UOp) -> None:
        calls: list[Ops] = []

        def record(x: UOp) -> None:
            calls.append(x.op)

        pm = PatternMatcher([(UPat(Ops.MUL, name="x"), record), (UPat((Ops.IDIV, Ops.MOD), name="x"), record)])
        assert pm.rewrite(a + 1) is None
        assert calls == []
        pm.rewrite(a * 2)
        pm.rewrite(a % 2)
        pm.rewrite(a // 2)
        assert calls == [Ops.MUL, Ops.MOD, Ops.IDIV]

    def test_early_reject_skips_rules_whose_sources_are_absent(self, a: UOp, b: UOp) -> None:
        calls: list[UOp] = []

        def record(x: UOp) -> None:
            calls.append(x)

        # matches any ADD, but is only tried when a MUL is among the direct sources
        pm = PatternMatcher([(UPat(Ops.ADD, name="x", custom_early_reject={Ops.MUL}), record)])
        pm.rewrite(a + 1)
        assert calls == []
        pm.rewrite(a + b * 2)
        assert calls == [a + b * 2]

    def test_early_reject_from_source_ops(self, a: UOp, b: UOp) -> None:
        pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat(Ops.MUL, name="m"), UPat.var("y")]), lambda m, y: m)])
        assert pm.rewrite(a + b) is None
        assert pm.rewrite(a * 3 + b) is a * 3
        assert pm.rewrite(b + a * 3) is a * 3

    def test_first_rule_returning_a_different_node_wins(self, a: UOp) -> None:
        node = a + 1
        pm = PatternMatcher(
            [
                (UPat(Ops.ADD, name="x"), lambda x: None),  # declines
                (UPat(Ops.ADD, name="x"), lambda x: x),  # returns the same node: also declines
                (UPat(Ops.ADD, name="x"), lambda x: x.src[0]),  # wins
                (UPat(Ops.ADD, name="x"), lambda x: x.src[1]),  # never reached
            ]
        )
        assert pm.rewrite(node) is a

    def test_every_binding_is_tried_until_one_rewrites(self, a: UOp) -> None:
        # with a list src the first binding may decline; the other permutation still gets its turn
        pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("y")]), lambda x, y: y if x is a else None)])
        assert pm.rewrite(UOp.const(dtypes.index, 4) + a).op is Ops.CONST

    def test_ctx_is_passed_only_when_asked_for(self, a: UOp) -> None:
        seen: list[object] = []

        def with_ctx(ctx: list[str], x: UOp) -> UOp:
            seen.append(ctx)
            return x.src[0]

        without_ctx = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x.src[0])])
        assert without_ctx.rewrite(a + 1, ctx=["ignored"]) is a
        asking = PatternMatcher([(UPat(Ops.ADD, name="x"), with_ctx)])
        marker = ["the ctx"]
        assert asking.rewrite(a + 1, ctx=marker) is a
        assert seen == [marker]
        assert seen[0] is marker

    def test_plus_composes_in_order(self, a: UOp) -> None:
        first = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x.src[0])])
        second = PatternMatcher(
            [(UPat(Ops.ADD, name="x"), lambda x: x.src[1]), (UPat(Ops.MUL, name="x"), lambda x: x.src[1])]
        )
        both = first + second
        assert isinstance(both, PatternMatcher)
        assert len(both) == 3
        assert both.rewrite(a + 1) is a
        assert (second + first).rewrite(a + 1) is (a + 1).src[1]
        assert both.rewrite(a * 2) is (a * 2).src[1]
        assert len(first) == 1  # operands are unchanged

    def test_no_match_returns_none(self, a: UOp) -> None:
        assert PatternMatcher([]).rewrite(a) is None
        assert (
            PatternMatcher([(UPat(Ops.ADD, src=(UPat(Ops.CONST), UPat(Ops.CONST))), lambda: None)]).rewrite(a + 1)
            is None
        )

    def test_rule_exception_propagates(self, a: UOp) -> None:
        def boom(x: UOp) -> UOp:
            raise ZeroDivisionError("rule failed")

        with pytest.raises(ZeroDivisionError, match="rule failed"):
            PatternMatcher([(UPat(Ops.ADD, name="x"), boom)]).rewrite(a + 1)


# *** malformed input ***


class TestMalformed:
    @pytest.mark.parametrize(
        ("build", "pattern"),
        [
            pytest.param(lambda: UPat("ADD"), "op", id="op_is_a_string"),
            pytest.param(lambda: UPat((Ops.ADD, 3)), "op", id="op_set_with_non_op"),
            pytest.param(lambda: UPat(Ops.ADD, src=3), "src", id="src_is_an_int"),
            pytest.param(lambda: UPat(Ops.ADD, src=(UPat(), "x")), "src", id="src_tuple_with_non_upat"),
            pytest.param(lambda: UPat(Ops.ADD, src=[Ops.CONST]), "src", id="src_list_with_non_upat"),
            pytest.param(lambda: UPat(Ops.ADD, name=3), "name", id="name_is_an_int"),
            pytest.param(lambda: UPat(Ops.ADD, dtype="float"), "dtype", id="dtype_is_a_string"),
        ],
    )
    def test_malformed_upat_raises_type_error(self, build: object, pattern: str) -> None:
        with pytest.raises(TypeError, match=pattern):
            build()  # type: ignore[operator]  # each param is a zero-argument lambda

    @pytest.mark.parametrize(
        "rule",
        [
            pytest.param((UPat(Ops.ADD),), id="one_element"),
            pytest.param((UPat(Ops.ADD), lambda x: x, "extra"), id="three_elements"),
            pytest.param((UPat(Ops.ADD), "not callable"), id="not_callable"),
            pytest.param((lambda x: x, UPat(Ops.ADD)), id="swapped"),
            pytest.param([UPat(Ops.ADD), lambda x: x], id="list_not_tuple"),
            pytest.param(UPat(Ops.ADD), id="bare_upat"),
        ],
    )
    def test_rule_that_is_not_a_pair_raises_type_error(self, rule: object) -> None:
        with pytest.raises(TypeError, match=r"PatternMatcher: rule 1 must be a \(UPat, callable\) pair"):
            PatternMatcher([(UPat(Ops.MUL), lambda: None), rule])  # type: ignore[list-item]  # the point of the test

    def test_top_level_upat_without_op_raises_value_error(self) -> None:
        with pytest.raises(ValueError, match="rule 0"):
            PatternMatcher([(UPat.var("x"), lambda x: x)])
        with pytest.raises(ValueError, match="op"):
            PatternMatcher([(UPat(name="x", src=(UPat(Ops.CONST),)), lambda x: x)])

    def test_unknown_dtype_name_raises_value_error(self) -> None:
        with pytest.raises(ValueError, match="float99"):
            to_dtype("float99")
        assert to_dtype("float32") == dtypes.float
        with pytest.raises(TypeError):
            to_dtype(32)  # type: ignore[arg-type]  # the point of the test
