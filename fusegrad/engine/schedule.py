"""From kernelized graph to run order: every `ASSIGN(BUFFER, KERNEL)` not yet run becomes an `ExecItem`.

`create_schedule(sink)` walks the graph sources-first, so a kernel comes after the kernels whose buffers it reads.
A kernel on several devices becomes one ExecItem per device (its MULTI range bound to the device's index); a
multi-device COPY becomes one buffer copy per move (schedule/collectives.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegrad.helpers import cpu_profile
from fusegrad.schedule.collectives import MultiCopy
from fusegrad.schedule.multi import DEVICE_VAR, is_multi_range, multi_buffer
from fusegrad.schedule.rangeify import Kernel, is_kernelized
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp

if TYPE_CHECKING:
    from fusegrad.device import Buffer
    from fusegrad.engine.realize import ExecItem


def kernel_buffers(kernel: UOp) -> list[UOp]:
    """The BUFFER nodes a KERNEL passes to its program, in slot order (dependencies carry no buffer of their own)."""
    bufs: list[UOp] = []
    for s in kernel.src:
        buf = s.src[0] if is_kernelized(s) else s
        if buf.op is Ops.BUFFER:
            bufs.append(buf)
    return bufs


def create_schedule(sink: UOp) -> list[ExecItem]:
    """ExecItems for every kernel below `sink`, in a valid run order."""
    with cpu_profile("create_schedule", "TINY"):  # a span on the host track of the VIZ timeline
        return _create_schedule(sink)


def _create_schedule(sink: UOp) -> list[ExecItem]:
    from fusegrad.engine.realize import ExecItem  # realize imports the device layer; keep import time small

    items: list[ExecItem] = []
    for u in sink.toposort():
        if not is_kernelized(u):
            continue
        kernel = u.src[1]
        info: Kernel = kernel.arg
        n_slots = _slot_count(info.ast, kernel)
        slots = kernel_buffers(kernel)[:n_slots]
        if isinstance(info.ast.arg, MultiCopy):
            items.extend(_copy_items(info, slots))
        elif isinstance(slots[0].device, tuple):
            items.extend(_multi_kernel_items(info, slots))
        else:
            bufs: list[Buffer | None] = [b.buffer for b in slots]
            items.append(ExecItem(info.ast, bufs, metadata=info.metadata, fixedvars=dict(info.var_vals)))
    return items


def _device_buffer(buf: UOp, device: int) -> Buffer:
    return buf.buffer if device < 0 else multi_buffer(buf).bufs[device]


def _view(buf: Buffer, offset: int, size: int) -> Buffer:
    """`size` elements of `buf` from element `offset` (a view of a view is a view of the same base)."""
    if offset == 0 and size == buf.size:
        return buf
    return buf.view(size, buf.dtype, offset * buf.dtype.itemsize)


def _copy_items(info: Kernel, slots: list[UOp]) -> list[ExecItem]:
    """One buffer copy per move of a multi-device COPY."""
    from fusegrad.engine.realize import ExecItem

    dest, src = slots
    items = []
    for move in info.ast.arg.moves:
        ast = UOp(Ops.COPY, dest.dtype, info.ast.src, move.size * dest.dtype.itemsize)
        to = _view(_device_buffer(dest, move.dest), move.dest_offset, move.size)
        bufs: list[Buffer | None] = [to, _view(_device_buffer(src, move.src), move.src_offset, move.size)]
        items.append(ExecItem(ast, bufs, metadata=info.metadata))
    return items


def _multi_kernel_items(info: Kernel, slots: list[UOp]) -> list[ExecItem]:
    """The kernel once per device: its MULTI range becomes a variable bound to the device index (one compile)."""
    from fusegrad.engine.realize import ExecItem

    n = len(slots[0].device)
    ast = info.ast
    if multi := [u for u in ast.toposort() if is_multi_range(u)]:
        ast = ast.substitute({multi[0]: UOp.variable(DEVICE_VAR, 0, n - 1)})
    held = [multi_buffer(b) for b in slots]
    var_vals = dict(info.var_vals)  # symbolic sizes (symbolic_shape.py) are the same on every device
    return [
        ExecItem(ast, [h.bufs[d] for h in held], metadata=info.metadata, fixedvars=var_vals | {DEVICE_VAR: d})
        for d in range(n)
    ]


def _slot_count(ast: UOp, kernel: UOp) -> int:
    if ast.op is Ops.COPY:
        return 2
    # slots are numbered when the kernel is built; simplification can drop one (a load that folded away), so the
    # buffers up to the highest slot still used are passed, each at its own position
    slots = ast.__dict__.get(_SLOTS)  # kept in the AST: a model's repeated layer has one AST for all its kernels
    if slots is None:
        globs = [int(u.arg) for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL]
        slots = ast.__dict__[_SLOTS] = max(globs) + 1 if globs else 0
    return slots if slots else len(kernel.src)


_SLOTS = "_slot_count"  # a kernel AST's __dict__ entry: its highest DEFINE_GLOBAL slot plus one (0: none)
