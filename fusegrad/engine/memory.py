"""Stage 9 (engine): memory of a TinyJit's captured kernels. `plan_memory` lets intermediates whose lifetimes don't
overlap share buffers at capture; `replan_arenas` moves the buffers into one arena per device
(CapturedJit.replan_buffers_memory_layout). Both leave alone what live tensors hold and the kernels write.
"""

from __future__ import annotations

from typing import Any

from fusegrad.device import Buffer, BufferSpec
from fusegrad.dtype import DType, dtypes
from fusegrad.engine.realize import BufferCopy, CompiledRunner, ExecItem
from fusegrad.helpers import DEBUG, colored, dedup
from fusegrad.schedule.multi import _multi_buffers
from fusegrad.uop.ops import buffers


def output_buffers(ei: ExecItem, in_place: bool = True) -> list[Buffer]:
    """The buffers an item writes; with in_place=False only those it does not also read (an in-place update of state
    keeps its memory)."""
    assert ei.prg is not None, "TinyJit: a captured ExecItem was not lowered"
    if isinstance(ei.prg, (CompiledRunner, BufferCopy)):
        slots = [i for i in ei.prg.outputs if in_place or i not in ei.prg.inputs]
        return [b for i in slots if (b := ei.bufs[i]) is not None]
    return []


def replan_arenas(items: list[ExecItem], kept: set[int]) -> dict[int, Buffer]:
    """{id of a buffer: its view in its device's new arena} (see CapturedJit.replan_buffers_memory_layout)."""
    held, written = held_buffers(), {id(b.base) for ei in items for b in output_buffers(ei)}
    viewed = {id(b.base) for ei in items for b in ei.bufs if b is not None and b._base is not None}
    spans: dict[int, list[Any]] = {}  # id -> [buffer, first use, last use, keeps its value across calls]
    for j, ei in enumerate(items):
        assert ei.prg is not None, "TinyJit: a captured ExecItem was not lowered"
        for i, b in enumerate(ei.bufs):
            if b is None or id(b) in kept or id(b) in viewed or b._base is not None or b.options != BufferSpec():
                continue
            if id(b) in held and id(b) in written:
                continue
            if id(b) not in spans:  # read before it is written: its value comes from before the call
                spans[id(b)] = [b, j, j, not (i in ei.prg.outputs and i not in ei.prg.inputs)]
            spans[id(b)][2] = j
    moved: dict[int, Buffer] = {}
    for device in dedup(v[0].device for v in spans.values()):
        layout = _arena_offsets([v for v in spans.values() if v[0].device == device], len(items))
        arena = Buffer(device, max((o + b.nbytes for b, o in layout), default=0), dtypes.uint8).allocate()
        for b, offset in layout:
            moved[id(b)] = view = arena.view(b.size, b.dtype, offset).ensure_allocated()
            if b.is_allocated():
                view.copy_from(b)
    return moved


_ARENA_ALIGN = 64  # bytes: keeps every buffer as aligned as its own allocation would be for vector loads


def _arena_offsets(spans: list[list[Any]], n_items: int) -> list[tuple[Buffer, int]]:
    """First-fit byte offsets: a buffer takes the lowest aligned offset whose bytes no buffer live at the same time
    uses; buffers that keep values across calls are live over the whole replay."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    layout: list[tuple[Buffer, int]] = []
    for b, first, last, persistent in sorted(spans, key=lambda v: (v[1], -v[0].nbytes)):
        if persistent:
            first, last = 0, n_items
        live = sorted((start, end) for start, end, used, freed in placed if used <= last and first <= freed)
        offset = 0
        for start, end in live:
            if offset + b.nbytes <= start:
                break
            offset = max(offset, -(-end // _ARENA_ALIGN) * _ARENA_ALIGN)
        placed.append((offset, offset + b.nbytes, first, last))
        layout.append((b, offset))
    return layout


def held_buffers() -> set[int]:
    """ids of the Buffers some live BUFFER node still names (results, weights, lazy graphs; per-device buffers of
    multi-device nodes too): their memory outlives the call, so the planner leaves them alone."""
    held = {id(b.base) for b in list(buffers.values())}
    for multi in list(_multi_buffers.values()):
        held |= {id(b.base) for b in multi.bufs}
    return held


def _buffer_lifetimes(items: list[ExecItem]) -> dict[int, tuple[Buffer, int, int]]:
    """{id: (buffer, first, last item)} for buffers whose first use writes them whole: their old value is never read.
    A buffer that any kernel reaches through a view is left out (the view would keep naming the old memory)."""
    spans: dict[int, tuple[Buffer, int, int]] = {}
    skipped = {id(b.base) for ei in items for b in ei.bufs if b is not None and b._base is not None}
    for j, ei in enumerate(items):
        assert ei.prg is not None, "TinyJit: a captured ExecItem was not lowered"
        outs, ins = set(ei.prg.outputs), set(ei.prg.inputs)
        for i, b in enumerate(ei.bufs):
            if b is None or id(b) in skipped:
                continue
            if id(b) in spans:
                spans[id(b)] = (b, spans[id(b)][1], j)
            elif i in outs and i not in ins and b._base is None and b.options == BufferSpec():
                spans[id(b)] = (b, j, j)
            else:
                skipped.add(id(b))
    return spans


def plan_memory(items: list[ExecItem]) -> None:
    """Let intermediates whose lifetimes (first write .. last use) don't overlap share one buffer of the same device,
    dtype and size. Buffers that live tensors still reach are left alone."""
    held = held_buffers()
    spans = sorted((v for k, v in _buffer_lifetimes(items).items() if k not in held), key=lambda v: v[1])
    pools: dict[tuple[str, DType, int], list[list[Any]]] = {}  # key -> [[buffer, last use], ...]
    replace: dict[int, Buffer] = {}
    for b, first, last in spans:
        pool = pools.setdefault((b.device, b.dtype, b.size), [])
        if (free := next((entry for entry in pool if entry[1] < first), None)) is not None:
            replace[id(b)] = free[0]
            free[1] = last
        else:
            pool.append([b, last])
    for ei in items:
        ei.bufs = [replace.get(id(b), b) if b is not None else None for b in ei.bufs]
    if DEBUG.value >= 1 and replace:
        saved = sum(b.nbytes for b, _, _ in spans if id(b) in replace)
        print(colored(f"JIT memory planner: {len(spans)} intermediates share {len(spans) - len(replace)} buffers, "
                      f"{saved} bytes freed", "magenta"))  # fmt: skip
