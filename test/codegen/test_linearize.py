"""The linear program (docs/KERNEL_IR.md §2): order, loop placement, hoisting, reduce lowering, names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fusegrad.codegen import KernelInfo, full_rewrite, get_kernel_name, kernel_names, to_program
from fusegrad.codegen.linearize import linearize, loop_scopes
from fusegrad.dtype import AddrSpace, DType, PtrDType, dtypes
from fusegrad.helpers import Context
from fusegrad.renderer import Renderer
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import PatternMatcher, UOp, UPat


def glob(slot: int, size: int, dt: DType = dtypes.float32) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), arg=slot)


def loop(end: int | UOp, axis: int) -> UOp:
    return UOp.range(end, axis, AxisType.LOOP)


def red(end: int | UOp, axis: int) -> UOp:
    return UOp.range(end, axis, AxisType.REDUCE)


def program(ast: UOp) -> list[UOp]:
    return full_rewrite(ast, ClangRenderer())


def loops_around(uops: list[UOp]) -> dict[UOp, tuple[UOp, ...]]:
    """Each node -> the RANGEs open where it sits, outermost first."""
    ret: dict[UOp, tuple[UOp, ...]] = {}
    stack: list[UOp] = []
    for u in uops:
        if u.op is Ops.END:
            assert stack, f"END of {u.src[0].arg} with no loop open"
            assert stack[-1] is u.src[0], f"END of {u.src[0].arg} closes {stack[-1].arg}"
            stack.pop()
        ret[u] = tuple(stack)
        if u.op is Ops.RANGE:
            stack.append(u)
    assert not stack, "every loop is closed"
    return ret


def matmul_ast() -> UOp:
    r0, r1, r2 = loop(4, 0), loop(5, 1), red(6, 2)
    product = glob(1, 24).index(r0 * 6 + r2).load() * glob(2, 30).index(r2 * 5 + r1).load()
    return UOp.sink(glob(0, 20).index(r0 * 5 + r1).store(product.reduce(r2, arg=Ops.ADD)))


def sum_ast() -> UOp:
    r0, r1 = loop(4, 0), red(8, 1)
    return UOp.sink(glob(0, 4).index(r0).store(glob(1, 32).index(r0 * 8 + r1).load().reduce(r1, arg=Ops.ADD)))


def padded_ast() -> UOp:
    r0 = loop(10, 0)
    return UOp.sink(glob(0, 10).index(r0).store(glob(1, 8).index(r0 - 1, (r0 >= 1) & (r0 < 9)).load()))


def symbolic_ast() -> UOp:
    n, m = UOp.variable("n", 1, 64), UOp.variable("m", 1, 8)
    r0 = loop(n, 0)
    return UOp.sink(glob(0, 64).index(r0).store(glob(1, 64).index(r0).load() + m.cast(dtypes.float32)))


ASTS = {"matmul": matmul_ast, "sum": sum_ast, "padded": padded_ast, "symbolic": symbolic_ast}


@pytest.fixture(autouse=True)
def _fresh_kernel_names_and_no_opts() -> Iterator[None]:
    """These tests pin the lowering of §2 itself: no opts (test_opt.py covers them and how they lower)."""
    kernel_names.clear()
    with Context(NOOPT=1):
        yield


# *** the contract of §2 ***


@pytest.mark.parametrize("name", ASTS)
def test_each_node_after_its_sources_and_once(name: str) -> None:
    uops = program(ASTS[name]())
    seen: set[UOp] = set()
    for u in uops:
        assert u not in seen, f"{u.op} appears twice"
        missing = [s.op for s in u.src if s not in seen]
        assert not missing, f"{u.op} comes before its sources {missing}"
        seen.add(u)
    assert uops[-1].op is Ops.SINK
    assert isinstance(uops[-1].arg, KernelInfo)


@pytest.mark.parametrize("name", ASTS)
def test_each_node_inside_exactly_its_loops(name: str) -> None:
    uops = program(ASTS[name]())
    around = loops_around(uops)
    scopes = loop_scopes(uops[-1])
    for u in uops:
        if u.op in (Ops.END, Ops.SINK, Ops.DEFINE_REG, Ops.RANGE):  # a loop nests where its users need it
            continue
        # inside every loop it depends on, and no deeper than the innermost of them (loops around that one included)
        assert set(around[u]) >= scopes[u], f"{u.op} sits in {around[u]}, depends on {scopes[u]}"
        assert not around[u] or around[u][-1] in scopes[u], f"{u.op} could move out of {around[u][-1]}"


def test_defines_come_first_globals_by_slot_then_vars_by_name() -> None:
    uops = program(symbolic_ast())
    defines = [u for u in uops if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR)]
    assert uops[: len(defines)] == defines
    assert [(u.op, u.arg if u.op is Ops.DEFINE_GLOBAL else u.arg[0]) for u in defines] == [
        (Ops.DEFINE_GLOBAL, 0), (Ops.DEFINE_GLOBAL, 1), (Ops.DEFINE_VAR, "m"), (Ops.DEFINE_VAR, "n")]  # fmt: skip


def test_loop_order_output_loops_outer_by_axis_then_reduce() -> None:
    r2, r0, r1 = loop(3, 2), loop(4, 0), red(5, 1)  # axis ids out of order on purpose
    value = glob(1, 60).index(r0 * 15 + r1 * 3 + r2).load().reduce(r1, arg=Ops.ADD)
    uops = program(UOp.sink(glob(0, 12).index(r2 * 4 + r0).store(value)))
    assert [u.arg[0] for u in uops if u.op is Ops.RANGE] == [0, 2, 1]
    assert [u.src[0].arg[0] for u in uops if u.op is Ops.END] == [1, 2, 0]


# *** reductions ***


def test_reduce_lowered_to_accumulator() -> None:
    uops = program(sum_ast())
    around = loops_around(uops)
    r0, r1 = (u for u in uops if u.op is Ops.RANGE)
    assert not [u for u in uops if u.op is Ops.REDUCE]
    (acc,) = [u for u in uops if u.op is Ops.DEFINE_REG]
    assert acc.dtype == dtypes.float32.ptr(1, AddrSpace.REG)
    assert around[acc] == (r0,)
    init, update = [u for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is not Ops.DEFINE_GLOBAL]
    assert init.src[1].op is Ops.CONST
    assert init.src[1].arg == 0
    assert around[init] == (r0,)
    assert uops.index(init) < uops.index(r1)
    assert around[update] == (r0, r1)
    assert update.src[1].op is Ops.ADD
    (out,) = [u for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    assert out.src[1].op is Ops.LOAD
    assert around[out] == (r0,)
    assert uops.index(out) > uops.index(UOp(Ops.END, dtypes.void, (r1,)))


@pytest.mark.parametrize(("op", "identity"), [(Ops.ADD, 0.0), (Ops.MUL, 1.0), (Ops.MAX, float("-inf"))])
def test_reduce_identity(op: Ops, identity: float) -> None:
    r0 = red(8, 0)
    uops = program(UOp.sink(glob(0, 1).index(UOp.const(dtypes.index, 0)).store(
        glob(1, 8).index(r0).load().reduce(r0, arg=op))))  # fmt: skip
    (init,) = [u for u in uops if u.op is Ops.STORE and u.src[1].op is Ops.CONST]
    assert init.src[1].arg == identity


def test_int_max_identity_is_dtype_min() -> None:
    r0 = red(8, 0)
    value = glob(1, 8, dtypes.int32).index(r0).load().reduce(r0, arg=Ops.MAX)
    uops = program(UOp.sink(glob(0, 1, dtypes.int32).index(UOp.const(dtypes.index, 0)).store(value)))
    assert [u.src[1].arg for u in uops if u.op is Ops.STORE and u.src[1].op is Ops.CONST] == [-(2**31)]


def test_nested_reduce_resets_inside_outer_reduce_loop() -> None:
    r1, r2 = red(4, 1), red(8, 2)  # out = sum_r1 x[r1] * sum_r2 y[r1, r2]
    inner = glob(2, 32).index(r1 * 8 + r2).load().reduce(r2, arg=Ops.ADD)
    outer = (glob(1, 4).index(r1).load() * inner).reduce(r1, arg=Ops.ADD)
    uops = program(UOp.sink(glob(0, 1).index(UOp.const(dtypes.index, 0)).store(outer)))
    around = loops_around(uops)
    inits = [u for u in uops if u.op is Ops.STORE and u.src[1].op is Ops.CONST]
    assert [len(around[u]) for u in inits] == [0, 1]  # the inner accumulator restarts every r1 iteration


def test_reduce_not_depending_on_output_loop_is_hoisted() -> None:
    r0, r1 = loop(16, 0), red(8, 1)  # out[r0] = a[r0] + sum(b): the sum runs once, before the r0 loop
    total = glob(2, 8).index(r1).load().reduce(r1, arg=Ops.ADD)
    uops = program(UOp.sink(glob(0, 16).index(r0).store(glob(1, 16).index(r0).load() + total)))
    around = loops_around(uops)
    assert all(around[u] == () for u in uops if u.op is Ops.RANGE)
    assert [u.arg[0] for u in uops if u.op is Ops.RANGE] == [1, 0]


def test_shared_reduce_range_moves_inside_the_output_loop() -> None:
    r0, r1 = loop(4, 0), red(8, 1)  # sum_r1 a[r0, r1] * sum_r1 b[r1]: one r1 loop, so both sums sit in r0
    first = glob(1, 32).index(r0 * 8 + r1).load().reduce(r1, arg=Ops.ADD)
    second = glob(2, 8).index(r1).load().reduce(r1, arg=Ops.ADD)
    uops = program(UOp.sink(glob(0, 4).index(r0).store(first * second)))
    around = loops_around(uops)
    (rng1,) = [u for u in uops if u.op is Ops.RANGE and u.arg[0] == 1]
    assert [r.arg[0] for r in around[rng1]] == [0]
    assert len([u for u in uops if u.op is Ops.DEFINE_REG]) == 2


def test_reduce_reusing_a_closed_range_is_an_error() -> None:
    r0 = red(8, 0)  # sum_r0 (x[r0] * sum_r0 x[r0]) needs the inner sum inside the loop that computes it
    x = glob(1, 8).index(r0).load()
    bad = (x * x.reduce(r0, arg=Ops.ADD)).reduce(r0, arg=Ops.ADD)
    with pytest.raises(ValueError, match="linearize"):
        program(UOp.sink(glob(0, 1).index(UOp.const(dtypes.index, 0)).store(bad)))


# *** hoisting and index simplification ***


def test_loop_invariant_load_is_hoisted() -> None:
    r0, r1 = loop(4, 0), loop(8, 1)  # out[r0, r1] = a[r0] * b[r0, r1]: a[r0] is loaded once per r0
    row = glob(1, 4).index(r0).load()
    uops = program(UOp.sink(glob(0, 32).index(r0 * 8 + r1).store(row * glob(2, 32).index(r0 * 8 + r1).load())))
    around = loops_around(uops)
    (load_row,) = [u for u in uops if u.op is Ops.LOAD and u.src[0].src[0].arg == 1]
    assert [r.arg[0] for r in around[load_row]] == [0]
    assert uops.index(load_row) < next(i for i, u in enumerate(uops) if u.op is Ops.RANGE and u.arg[0] == 1)


def test_constants_and_defines_sit_outside_every_loop() -> None:
    around = loops_around(program(matmul_ast()))
    assert all(not loops for u, loops in around.items() if u.op in (Ops.CONST, Ops.DEFINE_GLOBAL))


def test_contiguous_index_has_no_div_mod() -> None:
    r0, r1 = loop(4, 0), loop(4, 1)  # a reshape (4, 4) -> (16,) -> (4, 4) leaves div/mod for sym to remove
    flat = r0 * 4 + r1
    idx = (flat // 4) * 4 + flat % 4
    uops = program(UOp.sink(glob(0, 16).index(idx).store(glob(1, 16).index(idx).load())))
    index_math = [u for u in uops if u.dtype == dtypes.index]
    assert not [u for u in index_math if u.op in (Ops.IDIV, Ops.MOD)]


def test_gate_that_always_holds_is_dropped_and_one_that_never_holds_loads_zero() -> None:
    r0 = loop(8, 0)
    always = glob(1, 8).index(r0, r0 < 8).load()
    never = glob(2, 8).index(r0, r0 >= 8).load()
    uops = program(UOp.sink(glob(0, 8).index(r0).store(always + never)))
    indexes = [u for u in uops if u.op is Ops.INDEX]
    assert all(len(u.src) == 2 for u in indexes)
    assert not [u for u in uops if u.op is Ops.LOAD and u.src[0].src[0].arg == 2]


def test_two_stores_with_their_own_loops() -> None:
    r0, r1 = loop(4, 0), loop(6, 1)
    first = glob(0, 4).index(r0).store(glob(2, 4).index(r0).load())
    second = glob(1, 6).index(r1).store(glob(3, 6).index(r1).load() * 2.0)
    around = loops_around(program(UOp.sink(first, second)))
    assert all(loops == () for u, loops in around.items() if u.op is Ops.RANGE)


def test_linearize_without_reduce_needs_no_lowering() -> None:
    r0 = loop(4, 0)
    uops = linearize(UOp.sink(glob(0, 4).index(r0).store(UOp.const(dtypes.float32, 1.0))))
    assert [u.op for u in uops] == [Ops.DEFINE_GLOBAL, Ops.CONST, Ops.CONST, Ops.RANGE, Ops.INDEX, Ops.STORE,
                                    Ops.END, Ops.SINK]  # fmt: skip


# *** names and ProgramSpec ***


def test_kernel_names() -> None:
    assert get_kernel_name(matmul_ast()) == "r_4_5_6"
    assert get_kernel_name(symbolic_ast()) == "E_n"
    r0 = loop(10, 0)
    other = UOp.sink(glob(0, 10).index(r0).store(glob(1, 10).index(r0).load() * 2.0))
    assert get_kernel_name(padded_ast()) == "E_10"
    assert get_kernel_name(other) == "E_10n1"  # another kernel with the same loops
    assert get_kernel_name(padded_ast()) == "E_10"  # the same kernel keeps its name
    scalar = glob(0, 1).index(UOp.const(dtypes.index, 0)).store(UOp.const(dtypes.float32, 1.0))
    assert get_kernel_name(UOp.sink(scalar)) == "E_"


def test_kernel_info_name_is_kept() -> None:
    ast = sum_ast()
    named = ast.replace(arg=KernelInfo(name="my_sum"))
    assert program(named)[-1].arg.name == "my_sum"
    assert program(ast)[-1].arg == KernelInfo(name="r_4_8")
    assert KernelInfo(name="a-b").function_name == "a2Db"


def test_program_spec() -> None:
    prg = to_program(matmul_ast(), ClangRenderer())
    assert (prg.name, prg.function_name, prg.device) == ("r_4_5_6", "r_4_5_6", "CPU")
    assert (prg.globals, prg.outs, prg.ins, prg.vars) == ([0, 1, 2], [0], [1, 2], [])
    assert prg.estimates.ops == 4 * 5 * 6 * 2  # a multiply and an add per step
    assert prg.estimates.lds == 4 * 5 * 6 * 2 * 4 + 4 * 5 * 4
    assert prg.estimates.mem == (24 + 30 + 20) * 4
    assert "void r_4_5_6(" in prg.src
    assert prg.launch_dims({}) == ([1, 1, 1], [1, 1, 1])


def test_symbolic_estimates() -> None:
    prg = to_program(symbolic_ast(), ClangRenderer())
    assert [v.arg[0] for v in prg.vars] == ["m", "n"]
    n = prg.vars[1]
    assert isinstance(prg.estimates.ops, UOp)
    assert prg.estimates.ops.render() == n.render()
    assert prg.estimates.mem == 64 * 4 * 2 or isinstance(prg.estimates.mem, UOp)


def test_renderer_extra_matcher_runs_before_linearizing() -> None:
    class NoMax(ClangRenderer):
        extra_matcher = PatternMatcher([
            (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: (x < y).where(y, x)),
        ])  # fmt: skip

    r0 = loop(4, 0)
    ast = UOp.sink(glob(0, 4).index(r0).store(glob(1, 4).index(r0).load().maximum(0.0)))
    uops = full_rewrite(ast, NoMax())
    assert not [u for u in uops if u.op is Ops.MAX]
    assert [u for u in uops if u.op is Ops.WHERE]


def test_full_rewrite_needs_a_sink() -> None:
    with pytest.raises(ValueError, match="SINK"):
        full_rewrite(glob(0, 4), ClangRenderer())


def test_base_renderer_has_no_render() -> None:
    with pytest.raises(NotImplementedError, match="Renderer"):
        Renderer().render([])


def test_register_dtype() -> None:
    (acc,) = [u for u in program(sum_ast()) if u.op is Ops.DEFINE_REG]
    assert isinstance(acc.dtype, PtrDType)
    assert acc.dtype.addrspace is AddrSpace.REG
    assert acc.arg == 0
