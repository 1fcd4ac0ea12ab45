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
    (ast,) = kernel_asts(Tensor.rand(4, 32, device="CPU").realize().exp2())
    spec = to_program(ast, OpenCLRenderer())
    assert spec.src.startswith("__kernel void")
    assert "get_group_id(0)" in spec.src
    assert "for (" not in spec.src
    assert spec.global_size is not None
    assert spec.local_size is not None


def test_cuda_source_uses_block_indexes() -> None:
    (ast,) = kernel_asts(Tensor.rand(4, 32, device="CPU").realize().exp2())
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
