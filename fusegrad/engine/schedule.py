"""From kernelized graph to run order: every `ASSIGN(BUFFER, KERNEL)` not yet run becomes an `ExecItem`.

`create_schedule(sink)` walks the graph sources-first, so a kernel comes after the kernels whose buffers it reads.
A kernel on several devices becomes one ExecItem per device (its MULTI range bound to the device's index); a
multi-device COPY becomes one buffer copy per move (schedule/collectives.py). Independent row kernels over the same
rows then run as one kernel with several outputs (`merge_siblings`, schedule/siblings.py), as do elementwise ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegrad.helpers import FUSE_SIBLINGS, cpu_profile
from fusegrad.schedule.collectives import MultiCopy
from fusegrad.schedule.multi import DEVICE_VAR, is_multi_range, multi_buffer
from fusegrad.schedule.rangeify import Kernel, is_kernelized
from fusegrad.schedule.siblings import has_reduce, merge_kernels, sibling_signature
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
    return merge_siblings(items) if FUSE_SIBLINGS.value else items


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


# *** sibling kernels (schedule/siblings.py) ***

SIBLING_DEVICES = frozenset({"CPU", "PYTHON", "NULL"})  # where merged kernels were measured (CPU) and checked
SIBLING_WINDOW = 128  # how far back in the run order a kernel looks for a sibling (an optimizer's steps of ~50
# parameters write every first moment, then every second moment: a parameter's two are ~50 kernels apart)
MAX_SIBLING_STORES = 4  # stores of one merged kernel, at most


def merge_siblings(items: list[ExecItem]) -> list[ExecItem]:
    """`items` with each row (or elementwise) kernel merged into an earlier one of its kind over the same output loops
    (`sibling_signature`) that reads one of the same buffers, where neither reads or writes what the other writes and
    moving one next to the other breaks no order with the kernels between them. The merged kernel runs at the
    earlier one's place, or else at the later one's. A layernorm's forward and backward realized together: 2 kernels
    -> 1, their rows read once; Adam's moment updates of one parameter: 2 -> 1, its gradient read once."""
    return _SiblingMerge().run(items)


class _SiblingMerge:
    """One merge_siblings pass: the run order so far, and each item's accesses worked out once (keyed by id; the
    entry holds the item, so no other item can take its id during the pass)."""

    def __init__(self) -> None:
        self.out: list[ExecItem] = []
        self.accesses: dict[int, tuple[ExecItem, Access | None]] = {}

    def run(self, items: list[ExecItem]) -> list[ExecItem]:
        for item in items:
            if not any(self.merge_into(k, item) for k in self.candidates(item)):
                self.out.append(item)
        return self.out

    def access(self, item: ExecItem) -> Access | None:
        if (kept := self.accesses.get(id(item))) is None:
            kept = self.accesses[id(item)] = (item, _access(item))
        return kept[1]

    def candidates(self, item: ExecItem) -> list[int]:
        """Positions in the run order (latest first, within SIBLING_WINDOW) of kernels of `item`'s signature: the
        same output index, the same kind."""
        if (signature := _signature(item)) is None:
            return []
        index, kind = signature
        start = len(self.out) - 1
        window = range(start, max(-1, start - SIBLING_WINDOW), -1)
        return [k for k in window if (other := _signature(self.out[k])) and other[0] is index and other[1] is kind]

    def merge_into(self, k: int, item: ExecItem) -> bool:
        """Merge `item` into the kernel at `k` (there, or with that one moved to the end) where that keeps every
        order that matters."""
        out, first = self.out, self.out[k]
        if len(first.ast.src) + len(item.ast.src) > MAX_SIBLING_STORES or _device(first) != _device(item):
            return False
        mine, theirs = self.access(first), self.access(item)
        if mine is None or theirs is None or not _independent(mine, theirs) or not _share_operand(first, mine, theirs):
            return False
        between = [self.access(c) for c in out[k + 1 :]]
        if all(c is not None and _independent(theirs, c) for c in between):
            out[k] = _merged_item(first, item)  # the later kernel moves up to the earlier one
        elif all(c is not None and _independent(mine, c) for c in between):
            del out[k]  # the earlier kernel moves down to the later one
            out.append(_merged_item(first, item))
        else:
            return False
        return True


def _device(item: ExecItem) -> str | None:
    """The one device of every buffer of `item` (None: a buffer missing, or several devices)."""
    devices = {b.device if b is not None else None for b in item.bufs}
    return devices.pop() if len(devices) == 1 else None


Signature = tuple[UOp, bool]  # sibling_signature's output index, and whether the kernel has a reduce (its kind)


def _signature(item: ExecItem) -> Signature | None:
    """The item's sibling signature and kind (kept in its AST), for an unlowered kernel on one SIBLING_DEVICES
    device."""
    if item.ast.op is not Ops.SINK or item.prg is not None or item.fixedvars or len(item.ast.src) >= MAX_SIBLING_STORES:
        return None
    if (device := _device(item)) is None or device.split(":")[0] not in SIBLING_DEVICES:
        return None
    known = item.ast.__dict__
    if (kept := known.get(_SIGNATURE, _NONE)) is _NONE:
        index = sibling_signature(item.ast)
        kept = known[_SIGNATURE] = None if index is None else (index, has_reduce(item.ast))
    return kept  # type: ignore[no-any-return]  # only this function writes the entry


_SIGNATURE = "_sibling_signature"  # a kernel AST's __dict__ entry: _signature's answer
_NONE = object()


def _share_operand(first: ExecItem, mine: Access, theirs: Access) -> bool:
    """Do the two read one buffer (not one either writes) of at least half the first's output's size? That is what a
    merge reads once; kernels sharing only a scalar (a learning rate) would save a launch, not traffic: left apart."""
    if (out := first.bufs[0]) is None:
        return False
    common = (mine[1] - mine[0]) & (theirs[1] - theirs[0])
    return any(b is not None and id(b.base) in common and 2 * b.base.size >= out.size for b in first.bufs)


Access = tuple[set[int], set[int]]  # (written, every buffer used) as ids of base buffers


def _access(item: ExecItem) -> Access | None:
    """What `item` writes and uses; None where that is not known (a buffer not made yet, a store through a view)."""
    if any(b is None for b in item.bufs):
        return None
    used = {id(b.base) for b in item.bufs if b is not None}
    if item.ast.op is not Ops.SINK:  # a copy or a view: its destination comes first
        first = item.bufs[0]
        return ({id(first.base)} if first is not None else set()), used
    written: set[int] = set()
    for store in item.ast.src:
        if store.op is not Ops.STORE or store.src[0].op is not Ops.INDEX:
            return None
        if (glob := store.src[0].src[0]).op is not Ops.DEFINE_GLOBAL:
            return None
        if (buf := item.bufs[int(glob.arg)]) is not None:
            written.add(id(buf.base))
    return written, used


def _independent(a: Access, b: Access) -> bool:
    """Neither uses what the other writes: the two may run in either order, or as one kernel."""
    return not (a[0] & b[1]) and not (b[0] & a[1])


def _merged_item(first: ExecItem, second: ExecItem) -> ExecItem:
    """One ExecItem running both kernels: the second's buffers join the first's, a buffer both pass through the same
    kind of pointer keeping one slot."""
    from fusegrad.engine.realize import ExecItem

    mine = _globals(first.ast)
    bufs = list(first.bufs)
    slots: dict[int, int] = {}
    for slot, glob in sorted(_globals(second.ast).items()):
        buf = second.bufs[slot]
        same = [i for i, b in enumerate(bufs) if b is buf and i in mine and mine[i].dtype == glob.dtype]
        if not same:
            bufs.append(buf)
        slots[slot] = same[0] if same else len(bufs) - 1
    metadata = tuple(dict.fromkeys((*(first.metadata or ()), *(second.metadata or ()))))
    return ExecItem(merge_kernels(first.ast, second.ast, slots), bufs, metadata=metadata or None)


def _globals(ast: UOp) -> dict[int, UOp]:
    """A kernel's DEFINE_GLOBALs by slot."""
    return {int(u.arg): u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
