"""From kernelized graph to run order: every `ASSIGN(BUFFER, KERNEL)` not yet run becomes an `ExecItem`.

`create_schedule(sink)` walks the graph sources-first, so a kernel comes after the kernels whose buffers it reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    from fusegrad.engine.realize import ExecItem  # realize imports the device layer; keep import time small

    items: list[ExecItem] = []
    for u in sink.toposort():
        if not is_kernelized(u):
            continue
        kernel = u.src[1]
        info: Kernel = kernel.arg
        n_slots = _slot_count(info.ast, kernel)
        bufs: list[Buffer | None] = [b.buffer for b in kernel_buffers(kernel)[:n_slots]]
        items.append(ExecItem(info.ast, bufs, metadata=info.metadata))
    return items


def _slot_count(ast: UOp, kernel: UOp) -> int:
    if ast.op is Ops.COPY:
        return 2
    globs = {u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
    return len(globs) if globs else len(kernel.src)
