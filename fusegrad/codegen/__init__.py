"""Stage 6 of the pipeline: one kernel AST (docs/KERNEL_IR.md §1) -> a linear program (§2) -> a `ProgramSpec` (§3).

`full_rewrite` is the pass list, top to bottom; `to_program` adds the name, the rendered source and the estimates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fusegrad.codegen.clip import clip_reduce_loops
from fusegrad.codegen.fma import pm_fuse_multiply_add
from fusegrad.codegen.gates import pm_simplify_gates
from fusegrad.codegen.gather import pm_collapse_one_hot_sums
from fusegrad.codegen.gpudims import add_gpudims, launch_sizes
from fusegrad.codegen.index_dtype import lower_index_dtype
from fusegrad.codegen.linearize import AccumulatorContext, linearize, pm_reduce_to_accumulator, range_key
from fusegrad.codegen.opt import apply_opts, choose_opts
from fusegrad.codegen.vectorize import vectorize_upcast
from fusegrad.helpers import to_function_name
from fusegrad.renderer import ProgramSpec, Renderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym

__all__ = [
    "KernelInfo",
    "ProgramSpec",
    "full_rewrite",
    "get_kernel_name",
    "kernel_names",
    "simplify_indexing",
    "to_program",
]


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """The SINK's arg: the kernel's name and the optimisation state later passes record ("test" = not named yet)."""

    name: str = "test"
    axis_types: tuple[Any, ...] = ()
    dont_use_locals: bool = False
    applied_opts: tuple[Any, ...] = ()
    opts_to_apply: tuple[Any, ...] | None = None

    @property
    def function_name(self) -> str:
        return to_function_name(self.name)


# base name -> content keys of the kernels given it, in order; the i-th distinct kernel gets suffix n<i>.
# Mutated in place, never rebound: tests .clear() it for stable names.
kernel_names: dict[str, list[bytes]] = {}


def get_kernel_name(ast: UOp) -> str:
    """`E_` (no REDUCE) or `r_` and the loop sizes in loop order, e.g. `r_16_32`; `n1`, `n2`... on repeats.

    A repeat is a different kernel with the same base name: the same AST always gets the same name in a process.
    """
    nodes = ast.toposort()
    ranges = sorted((u for u in nodes if u.op is Ops.RANGE), key=range_key)
    prefix = "r" if any(u.op is Ops.REDUCE for u in nodes) else "E"
    base = "_".join([prefix, *(_size_text(r.src[0]) for r in ranges)]) if ranges else f"{prefix}_"
    seen = kernel_names.setdefault(base, [])
    if ast.key not in seen:
        seen.append(ast.key)
    n = seen.index(ast.key)
    return f"{base}n{n}" if n else base


def _size_text(end: UOp) -> str:
    return str(end.arg) if end.op is Ops.CONST else end.render()


def name_kernel(sink: UOp, ast: UOp) -> UOp:
    """The SINK with a KernelInfo naming it: the one it has, or get_kernel_name(ast)."""
    info = sink.arg if isinstance(sink.arg, KernelInfo) else KernelInfo()
    if info.name == "test":
        info = dataclasses.replace(info, name=get_kernel_name(ast))
    return sink.replace(arg=info)


def simplify_indexing(ast: UOp) -> UOp:
    """The kernel AST the opts see: its index math simplified and its one-hot sums collapsed (codegen/gather.py). The
    heuristic and BEAM (codegen/search.py) both start here, so an opt list means the same kernel to both."""
    return graph_rewrite(ast, sym + pm_collapse_one_hot_sums, name="simplify indexing")


def full_rewrite(ast: UOp, renderer: Renderer) -> list[UOp]:
    """The kernel `ast` as a linear program for `renderer`, ending with its (named) SINK."""
    if ast.op is not Ops.SINK:
        raise ValueError(f"full_rewrite: a kernel AST is a SINK of STOREs, got {ast.op}")
    sink = optimize(simplify_indexing(ast), renderer)
    if renderer.has_local:  # GPUs: output loops become work-groups, LOCAL loops their threads
        sink = add_gpudims(sink, renderer.global_max or (2**31 - 1,) * 3, renderer.local_max or (1024,) * 3)
    sink = graph_rewrite(sink, pm_simplify_gates, name="simplify gates")
    # triangular loops: reduce loops end where the rest is identity or unread (after the gates: simplifying an index
    # given its gate would rewrite a clipped loop's end inside it, making a second copy of the loop)
    sink = clip_reduce_loops(sink)
    if renderer.supports_float4:
        sink = vectorize_upcast(sink, masks=not renderer.has_local)  # the innermost upcast loop as vector values
    sink = graph_rewrite(sink, pm_reduce_to_accumulator, ctx=AccumulatorContext.of(sink), name="reduce to accumulators")
    if renderer.has_fma():
        sink = graph_rewrite(sink, pm_fuse_multiply_add, name="fuse multiply-add")  # acc + a*b -> fma(a, b, acc)
    if renderer.extra_matcher is not None:
        sink = graph_rewrite(sink, renderer.extra_matcher, name="renderer decompositions")
    sink = lower_index_dtype(sink)  # int32 index math where bounds allow, else int64
    sink = name_kernel(sink, ast)
    return linearize(sink)


def optimize(sink: UOp, renderer: Renderer) -> UOp:
    """The kernel with its opts (codegen/opt.py) applied and recorded in its KernelInfo's applied_opts."""
    info = sink.arg if isinstance(sink.arg, KernelInfo) else KernelInfo()
    if not (opts := choose_opts(sink, info.opts_to_apply, renderer)):
        return sink
    applied = dataclasses.replace(info, applied_opts=(*info.applied_opts, *opts), opts_to_apply=None)
    return apply_opts(sink, opts, renderer.has_local).replace(arg=applied)


def to_program(ast: UOp, renderer: Renderer) -> ProgramSpec:
    """Compile-ready: the kernel's name, linear program, source and estimates."""
    uops = full_rewrite(ast, renderer)
    name = uops[-1].arg.name
    spec = ProgramSpec.from_uops(name, renderer.render(uops), renderer.device, ast, uops)
    if not renderer.has_local:
        return spec
    global_size, local_size = launch_sizes(uops)
    return dataclasses.replace(spec, global_size=global_size, local_size=local_size)
