"""Run order of a schedule's kernels when some of them write memory that others still read (write-after-read).

`x.assign(x - gx); y.assign(y - f(x))` realized together: the kernel updating y reads x's *old* contents, so it must
run before the kernel that overwrites x. Data dependencies alone don't say so (y's kernel reads the BUFFER, not the
ASSIGN), so `run_order` adds an edge from every reader of a buffer's old contents to the write, and `kernelize`
records those readers as extra sources of the writing KERNEL. Entry points: `run_order`, `add_dependencies`, `snapshot`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fusegrad.schedule.fusion import is_kernelized
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import UOp


def written_buffer(root: UOp) -> UOp | None:
    """The BUFFER an ASSIGN root overwrites (None for other roots and for writes chained after pending ones)."""
    if root.op is not Ops.ASSIGN or is_kernelized(root):
        return None
    node = root.src[0]
    while node.op in GroupOp.Movement:
        node = node.src[0]
    if is_kernelized(node):
        node = node.src[0]
    return node if node.op is Ops.BUFFER else None


def buffers_read(root: UOp, realized: dict[UOp, str]) -> set[UOp]:
    """BUFFERs whose current contents the kernel of `root` loads (reads of other realized nodes are not followed)."""
    start = root.src[1] if root.op is Ops.ASSIGN else root
    found: set[UOp] = set()
    stack, seen = [start], {start}
    while stack:
        node = stack.pop()
        if node.op is Ops.BUFFER:
            found.add(node)
            continue
        if is_kernelized(node):
            found.add(node.src[0])
            continue
        if (node is not root and node in realized) or node.op is Ops.AFTER:
            continue  # its own kernel (or a pending write) orders those reads
        for s in node.src:
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return found


def _realized_children(root: UOp, realized: dict[UOp, str]) -> list[UOp]:
    """The realized nodes the kernel of `root` reads, i.e. the kernels that must run before it."""
    out: list[UOp] = []
    stack, seen = list(root.src), set(root.src)
    while stack:
        node = stack.pop()
        if node in realized:
            out.append(node)
            continue
        for s in node.src:
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return out


@dataclass(frozen=True)
class RunOrder:
    """Realized nodes in build order; per write, the readers of the old contents that run before it (`before`) and
    those that can't, because they depend on the write through a cycle of such edges (`after`: they need a copy)."""

    roots: list[UOp]
    before: dict[UOp, list[UOp]]
    after: dict[UOp, list[UOp]]


def _write_after_read_edges(roots: list[UOp], realized: dict[UOp, str]) -> dict[UOp, list[UOp]]:
    """For each write of a BUFFER, the other roots whose kernels read that buffer's old contents."""
    readers: dict[UOp, list[UOp]] = {}
    for root in roots:
        for buf in buffers_read(root, realized):
            readers.setdefault(buf, []).append(root)
    edges: dict[UOp, list[UOp]] = {}
    for root in roots:
        written = written_buffer(root)
        others = [r for r in readers.get(written, []) if r is not root] if written is not None else []
        if others:
            edges[root] = others
    return edges


def _depth_first_order(roots: list[UOp], realized: dict[UOp, str], edges: dict[UOp, list[UOp]]) -> list[UOp]:
    """Roots after everything they read and after the readers `edges` puts first; an edge closing a cycle is skipped."""
    order: list[UOp] = []
    placed: dict[UOp, bool] = {}  # False while on the DFS path, True once in `order`
    for start in roots:
        stack: list[tuple[UOp, bool]] = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                placed[node] = True
                order.append(node)
            elif node not in placed:
                placed[node] = False
                stack.append((node, True))
                kids = _realized_children(node, realized) + edges.get(node, [])
                stack.extend((k, False) for k in reversed(kids) if k not in placed)
    return order


def run_order(topo: Iterable[UOp], realized: dict[UOp, str]) -> RunOrder:
    """Order the realized nodes so that, where possible, every read of a buffer's old contents precedes its write.

    Two updates that each read the other's old value (`a -= f(b); b -= g(a)`) form a cycle: one of the reads is
    listed in `after`, and the caller gives it a snapshot of the old contents.
    """
    roots = [u for u in topo if u in realized]
    if not any(written_buffer(root) is not None for root in roots):
        return RunOrder(roots, {}, {})
    edges = _write_after_read_edges(roots, realized)
    if not edges:
        return RunOrder(roots, {}, {})
    order = _depth_first_order(roots, realized, edges)
    position = {u: i for i, u in enumerate(order)}
    before = {w: [r for r in rs if position[r] < position[w]] for w, rs in edges.items()}
    after = {w: [r for r in rs if position[r] > position[w]] for w, rs in edges.items()}
    return RunOrder(order, {w: rs for w, rs in before.items() if rs}, {w: rs for w, rs in after.items() if rs})


def add_dependencies(stored: UOp, deps: list[UOp]) -> UOp:
    """ASSIGN(BUFFER, KERNEL) with `deps` appended to the KERNEL's sources (they order the run, pass no buffer)."""
    if not deps:
        return stored
    kernel = stored.src[1]
    return stored.replace(src=(stored.src[0], kernel.replace(src=(*kernel.src, *deps))))


def snapshot(write: UOp) -> tuple[UOp, UOp]:
    """(BUFFER written by `write`, a node whose kernel copies that buffer as it is now): readers that can't run before
    the write read the copy instead."""
    buf = written_buffer(write)
    assert buf is not None, f"snapshot: {write.op} writes no plain buffer"
    return buf, buf.contiguous()
