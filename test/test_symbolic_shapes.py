"""Symbolic shapes (fusegrad/uop/symbolic_shape.py): sizes that are bound variables, one kernel for every value.

Each op family is checked against numpy at two bound values on CPU and PYTHON; the rest checks the contract: one
compile per graph, the value passed at launch, range errors, and what Tensor.shape and friends report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import fusegrad.engine.realize as realize_module
from fusegrad import Context, Tensor, TinyJit, UOp, Variable
from fusegrad.engine.jit import JitError
from fusegrad.engine.realize import ExecItem
from fusegrad.uop.ops import sym_infer
from fusegrad.uop.symbolic_shape import SymbolicError

A = np.random.default_rng(0).standard_normal((4, 10)).astype(np.float32)
B = np.random.default_rng(1).standard_normal((10, 3)).astype(np.float32)
I_VAR = Variable("i", 1, 10)

# (name, fusegrad graph of (a, b, bound i, device), numpy result for i = s)
Case = tuple[str, Callable[[Tensor, Tensor, UOp, str], Tensor], Callable[[int], Any]]
CASES: list[Case] = [
    ("add", lambda a, b, v, d: a[:, :v] + 1, lambda s: A[:, :s] + 1),
    ("mul_exp", lambda a, b, v, d: a[:, :v] * a[:, :v].exp(), lambda s: A[:, :s] * np.exp(A[:, :s])),
    ("sum_symbolic_axis", lambda a, b, v, d: a[:, :v].sum(1), lambda s: A[:, :s].sum(1)),
    ("sum_other_axis", lambda a, b, v, d: a[:, :v].sum(0), lambda s: A[:, :s].sum(0)),
    ("sum_all", lambda a, b, v, d: a[:, :v].sum(), lambda s: A[:, :s].sum()),
    ("max", lambda a, b, v, d: a[:, :v].max(1), lambda s: A[:, :s].max(1)),
    ("mean", lambda a, b, v, d: a[:, :v].mean(1), lambda s: A[:, :s].mean(1)),
    ("var", lambda a, b, v, d: a[:, :v].var(1), lambda s: A[:, :s].var(1, ddof=1)),
    ("std_all", lambda a, b, v, d: a[:, :v].std(), lambda s: A[:, :s].std(ddof=1)),
    ("softmax", lambda a, b, v, d: a[:, :v].softmax(1), lambda s: np.exp(A[:, :s]) / np.exp(A[:, :s]).sum(1)[:, None]),
    ("matmul_over_symbolic", lambda a, b, v, d: a[:, :v] @ b[:v], lambda s: A[:, :s] @ B[:s]),
    ("matmul_symbolic_out", lambda a, b, v, d: a[:, :v].T @ a[:, :v], lambda s: A[:, :s].T @ A[:, :s]),
    ("permute", lambda a, b, v, d: a[:, :v].permute(1, 0), lambda s: A[:, :s].T),
    ("pad", lambda a, b, v, d: a[:, :v].pad(((0, 0), (1, 2))), lambda s: np.pad(A[:, :s], ((0, 0), (1, 2)))),
    (
        "pad_value",
        lambda a, b, v, d: a[:, :v].pad(((1, 0), (0, 1)), value=5.0),
        lambda s: np.pad(A[:, :s], ((1, 0), (0, 1)), constant_values=5.0),
    ),
    ("expand", lambda a, b, v, d: Tensor.ones(1, 3, device=d).expand(v, 3) * 2, lambda s: np.full((s, 3), 2.0)),
    ("reshape_flat", lambda a, b, v, d: a[:, :v].reshape(-1), lambda s: A[:, :s].reshape(-1)),
    ("reshape_axes", lambda a, b, v, d: a[:2, :v].reshape(2, 1, v), lambda s: A[:2, :s].reshape(2, 1, s)),
    ("shrink_symbolic_start", lambda a, b, v, d: a.shrink((None, (v, v + 2))), lambda s: A[:, s : s + 2]),
    ("shrink_of_symbolic", lambda a, b, v, d: a[:, :v][:, 1:], lambda s: A[:, 1:s]),
    (
        "pad_by_symbolic",
        lambda a, b, v, d: a[:, :3].pad(((0, 0), (v, 1))),
        lambda s: np.pad(A[:, :3], ((0, 0), (s, 1))),
    ),
    ("cat_on_symbolic_axis", lambda a, b, v, d: a[:, :v].cat(a, dim=1), lambda s: np.concatenate([A[:, :s], A], 1)),
    ("argmax", lambda a, b, v, d: a[:, :v].argmax(1), lambda s: A[:, :s].argmax(1)),
    ("cumsum", lambda a, b, v, d: a[:, :v].cumsum(1), lambda s: A[:, :s].cumsum(1)),
    ("arange", lambda a, b, v, d: Tensor.arange(v, device=d) * 2, lambda s: np.arange(s) * 2),
    ("attention", lambda a, b, v, d: (a[:1, :4] @ a[:, :v]).softmax(-1) @ b[:v], lambda s: _attention(s)),
    ("flip", lambda a, b, v, d: a[:, :v].flip(1), lambda s: A[:, :s][:, ::-1]),
    ("cat", lambda a, b, v, d: a[:, :v].cat(a[:, :v] * 2, dim=0), lambda s: np.concatenate([A[:, :s], 2 * A[:, :s]])),
]


def _attention(s: int) -> np.ndarray:
    """softmax(q @ k) @ v with a key/value length of s (a KV cache's valid prefix)."""
    scores = A[:1, :4] @ A[:, :s]
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ B[:s]


def _values(t: Tensor, want: np.ndarray) -> np.ndarray:
    """t's values: realized as they are (symbolic), then the first want.shape elements read back as ints."""
    t.realize()
    return t.contiguous()[tuple(slice(0, n) for n in want.shape)].numpy() if t.ndim else t.numpy()


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize(("name", "build", "expect"), CASES, ids=[c[0] for c in CASES])
def test_op_families_match_numpy(device: str, name: str, build: Any, expect: Any) -> None:
    a, b = Tensor(A, device=device), Tensor(B, device=device)
    for s in (3, 7):
        want = np.asarray(expect(s))
        np.testing.assert_allclose(_values(build(a, b, I_VAR.bind(s), device), want), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_reference_slice_then_add_and_sum(device: str) -> None:
    ones = Tensor.ones(10, device=device).contiguous()
    for s in (2, 5):
        assert (ones[: I_VAR.bind(s)] + 1).contiguous()[:s].tolist() == [2.0] * s
        assert ones[: I_VAR.bind(s)].sum().item() == s


def test_gradient_through_a_symbolic_slice() -> None:
    a = Tensor(A, requires_grad=True)
    (a[:, : I_VAR.bind(3)] ** 2).sum().backward()
    assert a.grad is not None
    want = np.where(np.arange(10) < 3, 2 * A, 0)
    np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-6)


def test_gradients_through_matmul_cat_and_std_match_torch() -> None:
    torch = pytest.importorskip("torch")
    weight = B[:4]  # (4, 3)
    for s in (3, 6):
        x, w = Tensor(A.T.copy(), requires_grad=True), Tensor(weight, requires_grad=True)  # x: (10, 4)
        v = I_VAR.bind(s)
        loss = (x[:v] @ w).relu().mean() + x[:v].cat(x[:2], dim=0).std()
        loss.backward()
        xt, wt = torch.tensor(A.T.copy(), requires_grad=True), torch.tensor(weight, requires_grad=True)
        want = (xt[:s] @ wt).relu().mean() + torch.cat([xt[:s], xt[:2]]).std()
        want.backward()
        assert x.grad is not None
        assert w.grad is not None
        np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_same_graph_at_two_values_compiles_once(monkeypatch: pytest.MonkeyPatch) -> None:
    n = Variable("compile_once_n", 1, 32)  # a name no other test uses: nothing cached yet
    compiled: list[str] = []
    real = realize_module.get_program
    monkeypatch.setattr(realize_module, "get_program", lambda ast, r: compiled.append("x") or real(ast, r))
    x = Tensor(np.arange(32, dtype=np.float32)).realize()
    items = []
    for s in (2, 5):
        (sched,) = ((x[: n.bind(s)] * 3).sum()).schedule()
        assert sched.fixedvars == {"compile_once_n": s}
        items.append(sched)
    assert items[0].ast is items[1].ast  # no value in the kernel: the same node
    for ei in items:
        ei.run()
    assert len(compiled) == 1
    assert items[0].prg is items[1].prg
    assert items[1].bufs[0] is not None
    assert np.frombuffer(items[1].bufs[0].as_memoryview(), np.float32)[0] == 3 * sum(range(5))


def test_variable_is_a_kernel_argument() -> None:
    (ei,) = (Tensor.ones(10).contiguous().realize()[: I_VAR.bind(4)] + 1).schedule()
    prg = ei.lower().prg
    assert isinstance(prg, realize_module.CompiledRunner)
    assert [v.expr for v in prg.p.vars] == ["i"]
    assert "long long i" in prg.p.src
    assert "for (long long ridx0 = 0; ridx0 < i;" in prg.p.src


def test_launch_checks_the_value_against_the_range() -> None:
    (ei,) = (Tensor.ones(10).contiguous().realize()[: I_VAR.bind(4)] * 2).schedule()
    bare = ExecItem(ei.ast, ei.bufs)  # no bound value: the caller must give one
    with pytest.raises(AssertionError, match=r"bind: 11 is out of range for variable 'i': expected 1\.\.10"):
        bare.run({"i": 11})
    with pytest.raises(ValueError, match="no value for variables"):
        bare.run({})
    bare.run({"i": 10})


def test_debug_2_shows_the_values(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor.ones(10).contiguous().realize()
    with Context(DEBUG=2):
        (x[: I_VAR.bind(6)] - 1).realize()
    assert "i=6" in capsys.readouterr().out


def test_bind_out_of_range_is_the_references_assertion() -> None:
    with pytest.raises(AssertionError, match=r"bind: 0 is out of range for variable 'i': expected 1\.\.10"):
        I_VAR.bind(0)
    with pytest.raises(ValueError, match="out of range"):  # and a ValueError, as house style asks
        I_VAR.bind(11)
    with pytest.raises(TypeError, match="takes an int"):
        I_VAR.bind(2.5)  # type: ignore[arg-type]


def test_variable_api() -> None:
    v = I_VAR.bind(3)
    assert v.unbind() == (I_VAR, 3)
    assert (I_VAR.expr, I_VAR.vmin, I_VAR.vmax) == ("i", 1, 10)
    assert sym_infer(I_VAR * 2 + 1, {"i": 3}) == 7
    t = Tensor.ones(4, 10)[:, :v]
    assert t.shape[0] == 4
    assert t.shape[1] is v
    assert t.shape[1].render() == "i"
    assert repr(t).startswith("<Tensor (4, i) on")
    assert sym_infer(t.numel(), {"i": 3}) == 12
    assert t.pad(((0, 0), (1, 1))).shape[1].render() == "(i+2)"


def test_shapes_are_checked_at_the_bound_values() -> None:
    with pytest.raises(ValueError, match="shrink"):
        Tensor.ones(5)[: I_VAR.bind(7)]
    with pytest.raises(ValueError, match="reshape"):
        Tensor.ones(4, 10)[:, : I_VAR.bind(3)].reshape(5, -1)
    with pytest.raises(ValueError, match="step 1"):
        Tensor.ones(10)[: I_VAR.bind(4) : 2]


def test_empty_with_a_symbolic_size_holds_the_largest() -> None:
    for s in (3, 6):
        t = Tensor.empty(2, I_VAR.bind(s))
        assert t.uop.base.arg == 20  # 2 x max(i): one buffer serves every value
        assert (t * 0 + 1).sum().item() == 2 * s


def test_data_of_a_symbolic_shape_is_refused() -> None:
    t = Tensor.ones(10)[: I_VAR.bind(3)]
    with pytest.raises(AssertionError, match=r"numpy: no data for a tensor of symbolic shape \(i,\)"):
        t.numpy()
    with pytest.raises(SymbolicError, match="data"):
        t.data()


def test_one_variable_with_two_values_in_one_schedule_is_refused() -> None:
    x = Tensor.ones(10).contiguous()
    with pytest.raises(SymbolicError, match="variable 'i' is bound to 2 and 3"):
        (x[: I_VAR.bind(2)].sum() + x[: I_VAR.bind(3)].sum()).realize()


def test_reference_expand_to_a_symbolic_size() -> None:
    dim3 = UOp.variable("dim3", 1, 64).bind(32)
    (ei,) = Tensor.empty(16, 16, 1).expand(-1, -1, dim3).contiguous().schedule()
    assert ei.fixedvars == {"dim3": 32}
    prg = ei.lower().prg
    assert isinstance(prg, realize_module.CompiledRunner)
    assert prg.p.name.endswith("dim3")


# *** TinyJit: captured once, replayed for every bound value ***


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_jit_with_a_variable_argument_replays_without_recompiling(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    n = Variable(f"jit_arg_{device}", 1, 10)  # fresh name: its kernels are not cached yet
    compiled: list[int] = []
    real = realize_module.get_program
    monkeypatch.setattr(realize_module, "get_program", lambda ast, r: compiled.append(1) or real(ast, r))

    @TinyJit
    def step(a: Tensor, v: UOp) -> Tensor:
        return (a[:, :v] * 2).sum(1).realize()

    for k, s in enumerate((2, 5, 3, 7, 9)):
        out = step(Tensor(A, device=device), n.bind(s))
        np.testing.assert_allclose(out.numpy(), (A[:, :s] * 2).sum(1), rtol=1e-5)
        if k == 0:
            first = len(compiled)
    assert step.captured is not None
    assert len(compiled) == first  # the capture and every replay reuse the first call's kernels


def test_jit_with_a_symbolic_input_refills_its_symbolic_output() -> None:
    base = Tensor(np.arange(10, dtype=np.float32)).realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (x * 3).contiguous().realize()

    for s in (2, 5, 3, 7):
        out = step(base[: I_VAR.bind(s)])
        assert out.shape[0].unbind() == (I_VAR, s)  # the returned tensor takes this call's value
        assert out.contiguous()[:s].tolist() == [3.0 * k for k in range(s)]


def test_jit_refuses_other_uops_and_still_checks_plain_arguments() -> None:
    step = TinyJit(lambda x, v: (x[:v] + 1).realize())
    x = Tensor.ones(10).contiguous().realize()
    with pytest.raises(JitError, match="expected Tensors or bound variables"):
        step(x, I_VAR)  # an unbound variable has no value to pass
    other = Variable("other", 1, 10)
    for s in (2, 3):
        step(x, I_VAR.bind(s))
    with pytest.raises(JitError, match=r"changed since capture: got variable other in 1\.\.10, expected variable i"):
        step(x, other.bind(2))


@pytest.mark.parametrize("axis", [0, 1])
def test_sharded_tensor_with_a_symbolic_slice(axis: int) -> None:
    for s in (3, 6):
        t = Tensor(A).shard(("CPU:0", "CPU:1"), axis=axis)
        np.testing.assert_allclose((t[:, : I_VAR.bind(s)] * 2).sum(1).numpy(), (A[:, :s] * 2).sum(1), rtol=1e-6)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_two_variables_in_one_kernel(device: str) -> None:
    j = Variable("j", 1, 4)
    a = Tensor(A, device=device)
    for s, t in ((3, 4), (7, 2)):
        got = (a[: j.bind(t), : I_VAR.bind(s)] * 2).sum(1)
        np.testing.assert_allclose(got.contiguous()[:t].numpy(), (A[:t, :s] * 2).sum(1), rtol=1e-5)


def test_tensor_is_symbolic_agrees_with_symbolic_shape() -> None:
    """tensor.py's one-scan is_symbolic answers as symbolic_shape's for ints, bound and unbound sizes, and empty."""
    from fusegrad import tensor
    from fusegrad.uop import symbolic_shape

    n = Variable("n", 1, 8)
    for shape in ((), (3, 4), (n, 4), (3, n.bind(2)), (n * 2, 1), (True, 0)):
        assert tensor.is_symbolic(shape) == symbolic_shape.is_symbolic(shape), shape
