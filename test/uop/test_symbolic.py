"""Unit tests for fusegrad/uop/symbolic.py: each rule family with exact expected results.

Expressions are compared as `render(simplify=False)` text of the rewritten graph, or by node identity.
"""

from __future__ import annotations

import math

import pytest

from fusegrad.dtype import Invalid, dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import (
    order_key,
    pm_drop_and_clauses,
    pm_simplify_valid,
    simplify_valid,
    split_uop,
    sym,
    symbolic,
    symbolic_simple,
    uop_given_valid,
)

a = UOp.variable("a", 0, 100)
b = UOp.variable("b", 0, 100)
n = UOp.variable("n", -10, 10)  # spans zero: C truncation differs from floor division here
m = UOp.variable("m", -20, -1)


def simplified(x: UOp) -> str:
    return graph_rewrite(x, sym).render(simplify=False)


def const(dt: object, v: object) -> UOp:
    return UOp.const(dt, v)  # type: ignore[arg-type]  # test helper over dtype-generic constants


class TestTables:
    def test_tables_nest(self) -> None:
        assert set(map(id, symbolic_simple.patterns)) < set(map(id, symbolic.patterns)) < set(map(id, sym.patterns))

    def test_render_does_not_change_plain_sums(self) -> None:
        assert (UOp.variable("a", 1, 10) + 1).render() == "(a+1)"

    def test_split_uop(self) -> None:
        assert list(split_uop(a + b + 3, Ops.ADD)) == [a, b, const(dtypes.index, 3)]
        assert list(split_uop(a * b, Ops.ADD)) == [a * b]


class TestConstantFolding:
    @pytest.mark.parametrize(
        ("expr", "expected"),
        [
            (lambda: const(dtypes.int8, 127) + 1, -128),
            (lambda: const(dtypes.int32, 2**31 - 1) + 1, -(2**31)),
            (lambda: const(dtypes.uint8, 0) - 1, 255),
            (lambda: const(dtypes.uint8, 16) * 16, 0),
            (lambda: const(dtypes.int32, -7) // 2, -3),
            (lambda: const(dtypes.int32, -7) % 2, -1),
            (lambda: const(dtypes.int32, 7) // -2, -3),
            (lambda: const(dtypes.int32, 7) % -2, 1),
            (lambda: const(dtypes.index, 3).maximum(5), 5),
            (lambda: const(dtypes.int32, 1) << 3, 8),
            (lambda: const(dtypes.float32, 2.7).cast(dtypes.int32), 2),
            (lambda: const(dtypes.float32, -2.7).cast(dtypes.int32), -2),
            (lambda: const(dtypes.int32, 300).cast(dtypes.uint8), 44),
            (lambda: const(dtypes.int32, -1).cast(dtypes.uint32), 2**32 - 1),
            (lambda: const(dtypes.int32, 3).cast(dtypes.bool), True),
            (lambda: const(dtypes.float32, 0.0).reciprocal(), math.inf),
            (lambda: (const(dtypes.index, 3) < 4).where(const(dtypes.index, 1), 2), 1),
        ],
    )
    def test_folds_with_c_semantics(self, expr: object, expected: object) -> None:
        ret = graph_rewrite(expr(), symbolic_simple)  # type: ignore[operator]  # the lambdas above
        assert ret.op is Ops.CONST
        assert ret.arg == expected
        assert type(ret.arg) is type(expected)

    def test_division_by_zero_folds_to_the_defined_zero(self) -> None:  # alu.py: numpy's x // 0 == x % 0 == 0
        assert simplified(const(dtypes.int32, 7) // 0) == "0"
        assert simplified(const(dtypes.int32, 7) % 0) == "0"
        assert simplified(a // 0) == "0"
        assert simplified(a % 0) == "0"
        assert simplified(const(dtypes.int32, -(2**31)) // -1) == str(-(2**31))  # wraps

    def test_wide_shifts_and_bad_casts_fold_to_the_defined_values(self) -> None:  # alu.py: numpy's x86 results
        assert simplified(const(dtypes.int32, 1) << -1) == "0"
        assert simplified(const(dtypes.int32, -8) >> 40) == "-1"
        assert simplified(const(dtypes.float32, math.nan).cast(dtypes.int32)) == str(-(2**31))
        assert simplified(const(dtypes.float32, 1e20).cast(dtypes.int8)) == "0"

    def test_vector_constants_fold_lane_by_lane(self) -> None:
        v = UOp(Ops.VECTORIZE, dtypes.int32.vec(2), (const(dtypes.int32, 1), const(dtypes.int32, 2)))
        assert graph_rewrite(v, sym) is const(dtypes.int32.vec(2), (1, 2))
        assert graph_rewrite(v + const(dtypes.int32.vec(2), (10, 20)), sym) is const(dtypes.int32.vec(2), (11, 22))


class TestIdentities:
    def test_neutral_elements_return_the_same_node(self) -> None:
        for expr in (a + 0, 0 + a, a * 1, 1 * a, a // 1, a ^ 0, a | 0):
            assert graph_rewrite(expr, symbolic_simple) is a

    def test_int_zero_products_and_unit_mods(self) -> None:
        for expr in (a * 0, 0 * a, a % 1, a % -1, a % a, a & 0):
            assert graph_rewrite(expr, symbolic_simple) is const(dtypes.index, 0)

    def test_float_times_zero_keeps_nan(self) -> None:
        f = UOp.variable("f", 0, 1, dtypes.float32)
        assert graph_rewrite(f * 0, sym) is f * 0

    def test_self_division_needs_a_nonzero_divisor(self) -> None:
        assert simplified(UOp.variable("p", 1, 10) // UOp.variable("p", 1, 10)) == "1"
        assert simplified(n // n) == "(n//n)"

    def test_negations_and_self_subtraction(self) -> None:
        assert graph_rewrite(a * -1 * -1, sym) is a
        assert graph_rewrite(-(a * -1), sym) is a
        assert simplified(a - a) == "0"
        assert simplified(a // -1) == "(a*-1)"

    def test_comparisons_of_a_node_with_itself(self) -> None:
        assert simplified(a < a) == "False"
        assert simplified(a.ne(a)) == "False"
        assert simplified(a.eq(a)) == "True"
        f = UOp.variable("f", 0, 1, dtypes.float32)
        assert graph_rewrite(f.ne(f), sym) is f.ne(f)  # NaN != NaN

    def test_idempotent_ops(self) -> None:
        c = a < 5
        for expr in (c & c, c | c, a.maximum(a)):
            assert graph_rewrite(expr, symbolic_simple) is expr.src[0]

    def test_nested_mod_by_the_same_divisor(self) -> None:
        assert simplified((n % b) % b) == "(n%b)"


class TestBools:
    def test_and_or_with_constants(self) -> None:
        c = a < 5
        assert graph_rewrite(c & True, sym) is c
        assert graph_rewrite(c | False, sym) is c
        assert simplified(c & False) == "False"
        assert simplified(c | True) == "True"
        assert graph_rewrite(c ^ False, sym) is c
        assert graph_rewrite(c.ne(False), sym) is c

    def test_double_negation_and_complements(self) -> None:
        c = a < 5
        assert graph_rewrite(c.logical_not().logical_not(), sym) is c
        assert simplified(c & c.logical_not()) == "False"
        assert simplified(c | c.logical_not()) == "True"
        assert graph_rewrite(c | (c & (b < 3)), sym) is c

    def test_bool_arithmetic_becomes_logic(self) -> None:
        c, d = a < 5, b < 3
        assert graph_rewrite(c + d, symbolic_simple) is c | d
        assert graph_rewrite(c * d, symbolic_simple) is c & d


class TestWhereAndCast:
    def test_where_folds(self) -> None:
        c = a < 5
        assert graph_rewrite(c.where(n, n), sym) is n
        assert graph_rewrite(const(dtypes.bool, True).where(a, b), sym) is a
        assert graph_rewrite(const(dtypes.bool, False).where(a, b), sym) is b
        true, false = const(dtypes.bool, True), const(dtypes.bool, False)
        assert graph_rewrite(c.where(true, false), sym) is c
        assert simplified(c.where(false, true)) == "((a<5)!=True)"
        assert simplified(c.logical_not().where(a, b)) == "((a<5) ? b : a)"

    def test_where_chains_on_one_gate(self) -> None:
        c = a < 5
        assert simplified(c.where(a, c.where(b, n))) == "((a<5) ? a : n)"
        assert simplified(c.where(c.where(a, b), n)) == "((a<5) ? a : n)"
        assert simplified(c.where((b < 3).where(a, n), n)) == "(((a<5)&(b<3)) ? a : n)"

    def test_casts(self) -> None:
        x = UOp.variable("x", 0, 10, dtypes.int8)
        y = UOp.variable("y", 0, 10, dtypes.int32)
        assert graph_rewrite(x.cast(dtypes.int32).cast(dtypes.int8), sym) is x
        assert simplified(x.cast(dtypes.int32).cast(dtypes.int64)) == "(long)(x)"
        assert simplified(y.cast(dtypes.int8).cast(dtypes.int32)) == "(int)((signed char)(y))"  # int8 loses values
        assert graph_rewrite(UOp(Ops.CAST, dtypes.int32, (y,)), sym) is y


class TestLikeTerms:
    @pytest.mark.parametrize(
        ("expr", "expected"),
        [
            (lambda: a + a, "(a*2)"),
            (lambda: a * 3 + a * 5, "(a*8)"),
            (lambda: a + a * 4, "(a*5)"),
            (lambda: (b + a) + a, "(b+(a*2))"),
            (lambda: (a * 3 + b) + a * 2, "(b+(a*5))"),
            (lambda: (a + 3) + 4, "(a+7)"),
            (lambda: (a * 2) * 3, "(a*6)"),
            (lambda: (a + 2) + b, "((a+b)+2)"),
            (lambda: (a * 2) * b, "((a*b)*2)"),
            (lambda: (a + b) * 3, "((a*3)+(b*3))"),
            (lambda: b + a, "(a+b)"),
            (lambda: 3 + a, "(a+3)"),
            (lambda: (n % 4) + (n // 4) * 4, "n"),
            (lambda: a - 20 + 20, "a"),
        ],
    )
    def test_combine(self, expr: object, expected: str) -> None:
        assert simplified(expr()) == expected  # type: ignore[operator]  # the lambdas above

    def test_order_is_deterministic_and_content_based(self) -> None:
        assert graph_rewrite(a + b, sym) is graph_rewrite(b + a, sym)
        assert order_key(a) < order_key(a * 2) < order_key(const(dtypes.index, 1))
        assert order_key(a) == order_key(UOp.variable("a", 0, 100))


class TestBounds:
    def test_decided_nodes_fold(self) -> None:
        assert simplified(UOp.variable("z", 5, 5)) == "5"
        assert simplified(a < 101) == "True"
        assert simplified(a < 0) == "False"
        assert simplified(a.ne(-1)) == "True"
        assert simplified(a.eq(200)) == "False"
        assert simplified((a % 4) < 4) == "True"

    def test_max_by_bounds(self) -> None:
        assert graph_rewrite(a.maximum(n - 20), sym) is a
        assert graph_rewrite((n - 20).maximum(a), sym) is a
        assert simplified(a.maximum(a + 1)) == "max(a, (a+1))"  # bounds overlap: undecided

    def test_division_decided_by_bounds(self) -> None:
        assert simplified((a % 50) // 50) == "0"
        assert graph_rewrite((a % 50) % 50, sym) is a % 50
        assert simplified(n // 11) == "0"  # -10..10: truncation gives 0 on both sides
        assert simplified(n % 11) == "n"
        assert simplified(a // (b + 101)) == "0"


class TestDivMod:
    @pytest.mark.parametrize(
        ("expr", "expected"),
        [
            (lambda: (a * 4 + b * 8 + 3) // 4, "(a+(b*2))"),
            (lambda: (a * 4 + b * 8 + 3) % 4, "3"),
            (lambda: (a % 4) % 2, "(a%2)"),
            (lambda: (n % 4) % 2, "(n%2)"),  # holds for negative n too under C semantics
            (lambda: (a * 3) // 3, "a"),
            (lambda: (n * 3) // 3, "n"),
            (lambda: (a * 8 + b) // 4, "((a*2)+(b//4))"),
            (lambda: (a * 8 + b) % 4, "(b%4)"),
            (lambda: (a * 4 + b * 6) % 8, "((((a*2)+(b*3))%4)*2)"),
            (lambda: (a * 4 + b * 6) // 8, "(((a*2)+(b*3))//4)"),
            (lambda: (a + 8) % 4, "(a%4)"),
            (lambda: (a + 9) // 4, "(((a+1)//4)+2)"),
            (lambda: (a * 4 + 3) // 4, "a"),
            (lambda: (m * 4 + 1) // 4, "(m+1)"),  # m < 0: every value truncates toward zero
            (lambda: (m * 4 - 1) % 4, "-1"),
            (lambda: (a // 2) // 3, "(a//6)"),
            (lambda: (n // 2) // 3, "(n//6)"),
            (lambda: a // -3, "((a//3)*-1)"),
            (lambda: a % -3, "(a%3)"),
            (lambda: (a % 8 + 8) // 4, "(((a%8)//4)+2)"),
            (lambda: (a * 4 + (a % 4)) // 4, "a"),
        ],
    )
    def test_folds(self, expr: object, expected: str) -> None:
        assert simplified(expr()) == expected  # type: ignore[operator]  # the lambdas above

    def test_two_valued_numerators_fold_for_any_sign(self) -> None:
        assert simplified((UOp.variable("t", 0, 1) * 3 + 1) // 2) == "(t*2)"
        assert simplified((UOp.variable("t", -1, 0) * 3 + 1) // 2) == "t"

    @pytest.mark.parametrize(
        ("expr", "expected"),
        [
            (lambda: (n * 4 + 3) // 4, "(((n*4)+3)//4)"),  # n = -1: (-1)//4 is 0 in C, but n would give -1
            (lambda: (n * 4 + 3) % 4, "(((n*4)+3)%4)"),
            (lambda: (n + 8) % 4, "((n+8)%4)"),
            (lambda: (a * 4 + n) // 4, "((n+(a*4))//4)"),
            (lambda: (a % 8) // 4, "((a%8)//4)"),
        ],
    )
    def test_sign_dependent_forms_stay(self, expr: object, expected: str) -> None:
        assert simplified(expr()) == expected  # type: ignore[operator]  # the lambdas above


class TestCompare:
    @pytest.mark.parametrize(
        ("expr", "expected"),
        [
            (lambda: a * 4 < 10, "(a<3)"),
            (lambda: n * 4 < -6, "(n<-1)"),
            (lambda: n * -3 < 7, "((n*-1)<3)"),
            (lambda: (a + 5) < 20, "(a<15)"),
            (lambda: a // 4 < 3, "(a<12)"),
            (lambda: n // 3 < -1, "(n<-5)"),  # truncation: -5//3 is -1
            (lambda: n // 3 < 1, "(n<3)"),
            (lambda: (a * 4 + b * 8) < 12, "((a+(b*2))<3)"),
            (lambda: (a * 4 + (b % 4)) < 12, "(a<3)"),
            (lambda: n * -1 < a * -1, "(a<n)"),
            (lambda: (a + 3).ne(5), "(a!=2)"),
            (lambda: (a + 3).eq(5), "(a==2)"),
            (lambda: (a * 4).ne(6), "True"),
            (lambda: (a * 4).eq(8), "(a==2)"),
        ],
    )
    def test_folds(self, expr: object, expected: str) -> None:
        assert simplified(expr()) == expected  # type: ignore[operator]  # the lambdas above

    def test_unit_terms_that_can_go_negative_stay(self) -> None:
        x = (a * 4 + b * 8 + (n % 2)) < 12
        assert graph_rewrite(x, sym) is x


class TestVectorLanes:
    p = UOp.variable("p", 0, 3, dtypes.int32)
    q = UOp.variable("q", 0, 3, dtypes.int32)

    def test_gep_and_vectorize(self) -> None:
        v = UOp(Ops.VECTORIZE, dtypes.int32.vec(2), (self.p, self.q))
        assert graph_rewrite(v.gep(1), sym) is self.q
        assert graph_rewrite(v.gep((1, 0)), sym) is UOp(Ops.VECTORIZE, dtypes.int32.vec(2), (self.q, self.p))
        assert graph_rewrite(UOp(Ops.VECTORIZE, v.dtype, (v.gep(0), v.gep(1))), sym) is v
        assert graph_rewrite(v.gep((0, 1)), sym) is v
        assert graph_rewrite(v.gep((1, 0)).gep(0), sym) is self.q
        assert graph_rewrite(const(dtypes.int32.vec(2), (3, 4)).gep(1), sym) is const(dtypes.int32, 4)


class TestValidity:
    def test_simplify_valid(self) -> None:
        assert simplify_valid((a < 5) & (a < 10)) is (a < 5)
        assert simplify_valid((a < 5) & ((a // 8) < 1)) is (a < 5)
        assert simplify_valid((a < 5) & (a < 7).logical_not()) is const(dtypes.bool, False)
        assert simplify_valid((a < 50) & (b < 5)) is None  # independent clauses: nothing to do

    def test_uop_given_valid(self) -> None:
        assert uop_given_valid(a < 5, a // 8) is const(dtypes.index, 0)
        assert uop_given_valid(a < 5, a % 8) is a
        assert uop_given_valid((a > 3) & (a < 5), a) is const(dtypes.index, 4)
        assert uop_given_valid((a < 5) & (a < 7).logical_not(), a) is None
        assert uop_given_valid(b < 5, a) is a

    def test_gated_index(self) -> None:
        inv = const(dtypes.index, Invalid)
        gated = (a < 8).where(a // 8 + b, inv)
        assert graph_rewrite(gated, pm_simplify_valid).render(simplify=False) == "((a<8) ? b : Invalid)"

    def test_drop_and_clauses(self) -> None:
        r0, r1 = UOp.range(16, 0), UOp.range(8, 1)
        inv = const(dtypes.index, Invalid)
        gated = ((r0 < 10) & (r1 < 4)).where(r0 * 2, inv)
        assert graph_rewrite(gated, pm_drop_and_clauses) is (r0 < 10).where(r0 * 2, inv)
