"""KERNEL nodes in VIZ: which kernel each one is (its name, e.g. `r_4_16`) and which trace group holds its codegen.

`kernel_links(keys)` maps every compiled kernel AST in a trace to (name, group); `kernel_identity(arg, links)` names a
KERNEL node's arg, live or saved; `SavedKernel` is what a saved trace keeps of that arg, so links survive the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fusegrad.helpers import TracingKey
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp


@dataclass(frozen=True, slots=True)
class KernelLink:
    """A kernel's name and the trace group of its codegen (None when this trace never compiled it)."""

    name: str | None
    ref: int | None


@dataclass(frozen=True, slots=True)
class SavedKernel:
    """A KERNEL node's arg in a saved trace: the kernel's name (None: never compiled), its codegen group, its stores."""

    name: str | None
    ref: int | None
    stores: int

    def __repr__(self) -> str:
        return kernel_text(self.name, self.stores)


def kernel_text(name: str | None, stores: int) -> str:
    """A KERNEL node's arg line: `<Kernel r_4_16 1 store(s)>`, without a name when it was never compiled."""
    return f"<Kernel {name} {stores} store(s)>" if name else f"<Kernel {stores} store(s)>"


def kernel_links(keys: Sequence[TracingKey]) -> dict[UOp, KernelLink]:
    """Kernel AST -> its name and group, for every group whose result is a rendered program (get_program's groups)."""
    links: dict[UOp, KernelLink] = {}
    for i, key in enumerate(keys):
        ast, name = getattr(key.ret, "ast", None), getattr(key.ret, "name", None)
        if isinstance(ast, UOp) and isinstance(name, str):
            links.setdefault(ast, KernelLink(name, i))  # the first compile of an AST is the one its name points to
    return links


def _compiled_name(ast: UOp) -> str | None:
    """The name codegen gave `ast` earlier in this process (a cached kernel has no group), looked up without naming."""
    from fusegrad.codegen import kernel_names  # codegen imports the whole IR: only KERNEL labels need it

    key = ast.key
    for base, seen in kernel_names.items():
        if key in seen:
            n = seen.index(key)
            return f"{base}n{n}" if n else base
    return None


def kernel_identity(arg: object, links: Mapping[UOp, KernelLink]) -> KernelLink:
    """Name and codegen group of a KERNEL node's arg: a live Kernel (its AST looked up) or a SavedKernel."""
    if isinstance(arg, SavedKernel):
        return KernelLink(arg.name, arg.ref)
    ast = getattr(arg, "ast", None)
    if not isinstance(ast, UOp):
        return KernelLink(None, None)
    if (link := links.get(ast)) is not None:
        return link
    if ast.op is not Ops.SINK:
        return KernelLink(ast.op.name, None)  # a copy: runs without codegen
    return KernelLink(_compiled_name(ast), None)


def kernel_stores(arg: object) -> int:
    """How many outputs a KERNEL writes (the SINK's sources; a copy writes one)."""
    if isinstance(arg, SavedKernel):
        return arg.stores
    ast = getattr(arg, "ast", None)
    return len(ast.src) if isinstance(ast, UOp) and ast.op is Ops.SINK else 1


def saved_kernel(arg: object, links: Mapping[UOp, KernelLink]) -> SavedKernel:
    """What a saved trace keeps of a KERNEL node's arg: name, codegen group and store count (not the live AST)."""
    link = kernel_identity(arg, links)
    return SavedKernel(link.name, link.ref, kernel_stores(arg))
