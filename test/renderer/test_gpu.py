"""The GPU dialects (renderer/gpu.py): every kernel of a small suite and of one GPT training step rendered as CUDA C++
compiles with NVRTC for sm_90 (no GPU needed: a CUDA codegen error fails here), and the OpenCL source has the GPU
shape (work-group ids, no output loops, local memory and barriers for GROUP reductions)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fusegrad import Tensor, dtypes, nn
from fusegrad.codegen import to_program
from fusegrad.renderer.cstyle import CUDARenderer, OpenCLRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp


def _nvrtc_missing() -> str | None:
    try:
        from fusegrad.runtime.support.nvrtc import find_nvrtc

        find_nvrtc()
    except RuntimeError as err:
        return str(err)
    return None


needs_nvrtc = pytest.mark.skipif((why := _nvrtc_missing()) is not None, reason=f"{why}")


def kernel_asts(*tensors: Tensor) -> list[UOp]:
    return [si.ast for si in Tensor.schedule(*tensors) if si.ast.op is Ops.SINK]


def _suite() -> list[Callable[[], list[Tensor]]]:
    def base() -> Tensor:
        return Tensor.rand(8, 16, device="CPU").realize()

    return [
        lambda: [base().sqrt().exp2().log2().sin(), base().trunc(), base() ** 1.5, base().relu().max(1)],
        lambda: [base().half() * 3, base().half().sum(1), base().half().bitcast(dtypes.int16)],
        lambda: [base().cast(dtypes.int64) // 3, base().cast(dtypes.uint8) % 5, (base() * 100).cast(dtypes.int8) << 2],
        lambda: [base().cast(dtypes.int32).bitcast(dtypes.float32), base() < 0.5, (base() > 0.2).where(base(), 1)],
        lambda: [base().double().sum(0), base().cast(dtypes.uint64) + 1, base().cumsum(1), base().argmax(1)],
        lambda: [base() @ base().T, base().softmax(1), base().reshape(1, 2, 8, 8).conv2d(Tensor.rand(4, 2, 3, 3))],
        lambda: [Tensor.arange(100, device="CPU").float().reshape(10, 10).sum(), base().pad(((1, 1), (0, 2))).flip(0)],
    ]


@needs_nvrtc
@pytest.mark.parametrize("case", range(len(_suite())))
def test_suite_compiles_for_sm90(case: int) -> None:
    from fusegrad.runtime.support.nvrtc import compile_to_ptx

    for ast in kernel_asts(*_suite()[case]()):
        ptx = compile_to_ptx(to_program(ast, CUDARenderer("sm_90")).src, "sm_90")
        assert b".target sm_90" in ptx


@needs_nvrtc
def test_gpt_training_step_compiles_for_sm90() -> None:
    from fusegrad.examples.gpt import GPT, GPTConfig
    from fusegrad.runtime.support.nvrtc import compile_to_ptx

    model = GPT(GPTConfig(vocab_size=32, context=8, dim=16, heads=2, layers=1))
    opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-3)
    ids = Tensor(np.arange(16).reshape(2, 8) % 32, device="CPU")
    with Tensor.train():
        loss = model.loss(ids, ids).backward()
        asts = kernel_asts(loss, *[p.grad for p in opt.params if p.grad is not None])
        Tensor.realize(loss, *[p.grad for p in opt.params if p.grad is not None])
        asts += kernel_asts(*opt.schedule_step())
    assert len(asts) > 20
    for ast in asts:
        compile_to_ptx(to_program(ast, CUDARenderer("sm_90")).src, "sm_90")


def test_nvrtc_error_names_the_line() -> None:
    from fusegrad.device import CompileError
    from fusegrad.runtime.support.nvrtc import compile_to_ptx

    if _nvrtc_missing() is not None:
        pytest.skip("no NVRTC")
    with pytest.raises(CompileError, match="undefined_name"):
        compile_to_ptx('extern "C" __global__ void k(float* a) { a[0] = undefined_name; }', "sm_90")


def test_opencl_source_has_work_groups() -> None:
    (ast,) = kernel_asts(Tensor.rand(16, 128, device="CPU").realize().exp2())  # more than one work-group of 256
    spec = to_program(ast, OpenCLRenderer())
    assert spec.src.startswith("#pragma OPENCL FP_CONTRACT OFF\n__kernel void")
    assert "get_group_id(0)" in spec.src
    assert "for (" not in spec.src
    assert spec.global_size is not None
    assert spec.local_size is not None


def test_cuda_source_uses_block_indexes() -> None:
    (ast,) = kernel_asts(Tensor.rand(16, 128, device="CPU").realize().exp2())
    src = to_program(ast, CUDARenderer()).src
    assert 'extern "C" __global__ void __launch_bounds__(' in src
    assert "blockIdx.x" in src


def test_gpu_opts_that_dont_fit_are_value_errors() -> None:
    from fusegrad.codegen.opt import Opt, OptOps, apply_opts
    from fusegrad.uop import AxisType

    (ast,) = kernel_asts(Tensor.rand(8, 32, device="CPU").realize().sum(1))
    loop = next(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP)
    red = next(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE)
    with pytest.raises(ValueError, match="LOCAL by 3 of axis"):
        apply_opts(ast, (Opt(OptOps.LOCAL, loop, 3),), has_local=True)
    with pytest.raises(ValueError, match="GROUP needs one REDUCE axis"):
        apply_opts(ast, (Opt(OptOps.GROUP, loop, 2),), has_local=True)
    assert "temp0" in to_program(ast.replace(arg=_info(Opt(OptOps.GROUPTOP, red, 4))), OpenCLRenderer()).src


def _info(*opts: object) -> object:
    from fusegrad.codegen import KernelInfo

    return KernelInfo(opts_to_apply=opts)


# *** vectors (codegen/vectorize.py): contiguous upcast lanes as float8 on OpenCL, fg_vec on CUDA ***


def _with_opts(ast: UOp, *specs: tuple[str, int, int]) -> UOp:
    """`ast` with opts given as (op name, position of the output loop it applies to, outermost first; amount)."""
    from fusegrad.codegen.linearize import range_key
    from fusegrad.codegen.opt import Opt, OptOps
    from fusegrad.uop import AxisType

    loops = sorted((u for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP), key=range_key)
    return ast.replace(arg=_info(*(Opt(OptOps[op], loops[i].arg[0], amount) for op, i, amount in specs)))


def _vector_cases() -> list[UOp]:
    a, b = Tensor.rand(64, 48, device="CPU").realize(), Tensor.rand(64, 48, device="CPU").realize()
    (elementwise,) = kernel_asts(a * b + 1)
    (column_sum,) = kernel_asts(a.sum(0))
    (matmul,) = kernel_asts(a @ Tensor.rand(48, 64, device="CPU").realize())  # lanes along the second's rows
    (double,) = kernel_asts(a.double().contiguous().realize() * 3)
    return [
        elementwise,  # the heuristic's UPCAST and LOCAL
        _with_opts(column_sum, ("UPCAST", 0, 8)),  # a vector accumulator
        _with_opts(matmul, ("UPCAST", 0, 4), ("UPCAST", 1, 8)),  # 4 rows x 1 vector of accumulators
        double,  # double4
    ]


def test_heuristic_upcasts_contiguous_lanes_into_vectors() -> None:
    from fusegrad.codegen.gpudims import vector_upcast
    from fusegrad.uop import AxisType

    a = Tensor.rand(64, 48, device="CPU").realize()
    for out, width in [(a * 2, 8), (a.T * 2, None), (a.exp2(), None), (a[:, :44] * 2, None)]:
        (ast,) = kernel_asts(out)
        inner = max((u for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP), key=lambda u: u.arg)
        assert vector_upcast(ast, inner) == width, out.shape
    spec = to_program(kernel_asts(a * 2)[0], OpenCLRenderer())
    assert "vload8(0, data1+" in spec.src
    assert "vstore8(" in spec.src
    # the rows and columns are one loop (schedule/merge.py): 3,072 floats = 384 vectors of 8, work-groups of 64 threads
    assert [int(x) for x in (*spec.global_size, *spec.local_size)] == [6, 1, 1, 64, 1, 1]  # type: ignore[misc]


def test_heuristic_tiles_a_matmul() -> None:
    from fusegrad.codegen.opt import Opt, OptOps, choose_opts

    a, b = Tensor.rand(64, 96, device="CPU").realize(), Tensor.rand(96, 128, device="CPU").realize()
    (ast,) = kernel_asts(a @ b)
    rows, columns = 0, 1  # the output's axes
    # each thread: 4 rows x a vector of 8 columns; threads: 16 along the columns (local id 0, the last LOCAL), 16 rows
    assert choose_opts(ast, None, CUDARenderer()) == (
        Opt(OptOps.UPCAST, rows, 4), Opt(OptOps.UPCAST, columns, 8),
        Opt(OptOps.LOCAL, rows, 16), Opt(OptOps.LOCAL, columns, 16))  # fmt: skip
    src = to_program(ast, CUDARenderer()).src
    assert "fg_float8 acc0[4];" in src
    assert "__launch_bounds__(256)" in src
    assert "(((int)threadIdx.x)*8)" in src  # neighbouring threads, neighbouring vectors


def test_opencl_vectors_are_opencl_types() -> None:
    sources = [to_program(ast, OpenCLRenderer()).src for ast in _vector_cases()]
    assert "((float8)(1.0f))" in sources[0]  # a broadcast operand
    assert "float8 acc0;" in sources[1]
    assert "float8 acc0[4];" in sources[2]
    assert "double4 val0 = vload4(0, data1+" in sources[3]
    assert all("#pragma OPENCL FP_CONTRACT OFF" in src for src in sources)


@needs_nvrtc
def test_cuda_vectors_compile_to_128_bit_accesses() -> None:
    from fusegrad.runtime.support.nvrtc import compile_to_ptx

    for ast in _vector_cases():
        src = to_program(ast, CUDARenderer("sm_90")).src
        assert "fg_vload<" in src
        ptx = compile_to_ptx(src, "sm_90").decode()
        assert ".v4.f32" in ptx or ".v2.f64" in ptx or ".v4.u32" in ptx, src  # 16 bytes at a time where aligned


def test_vector_lanes_and_broadcasts() -> None:
    assert OpenCLRenderer().vector_lane("val0", 11) == "val0.sb"  # OpenCL's hex lane names, .s0 to .sf
    assert CUDARenderer().vector_lane("val0", 11) == "val0.v[11]"
    assert OpenCLRenderer().vector_literal(dtypes.float32.vec(8), ["x"] * 8) == "((float8)(x))"
    assert CUDARenderer().vector_literal(dtypes.float64.vec(4), ["a", "b", "c", "d"]) == "fg_double4{{a,b,c,d}}"


def test_accumulators_fuse_to_each_dialects_fma() -> None:
    """OpenCL's fma is overloaded for every float and vector type; CUDA has fmaf / fma and fg_fma for vectors."""
    tile = _vector_cases()[2]  # 4 rows x a vector of 8 columns
    assert "acc0[" in (opencl := to_program(tile, OpenCLRenderer()).src)
    assert "= fma(" in opencl
    assert "= fg_fma(" in to_program(tile, CUDARenderer()).src
    for dt, spelling in ((dtypes.float32, "fmaf("), (dtypes.float64, "fma(")):
        a = Tensor.rand(8, 16, device="CPU").cast(dt).realize()
        (scalar,) = kernel_asts(a @ a.T)
        assert f"acc0 = {spelling}" in to_program(scalar, CUDARenderer()).src
