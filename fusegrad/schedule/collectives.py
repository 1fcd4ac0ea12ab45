"""Communication between devices as kernels in the graph: multi-device COPYs (replicate, scatter, gather, allgather)
and allreduce (naive, or ring: reduce-scatter then all-gather), built from COPY kernels and elementwise kernels.

A multi-device COPY kernel's AST carries its `Move`s (which device's elements go where); engine/schedule.py turns each
move into one buffer copy. Entry points: `multi_copy_kernel` and `allreduce_kernel`, called by kernelize.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from fusegrad.dtype import dtypes
from fusegrad.helpers import RING, RING_ALLREDUCE_THRESHOLD, prod
from fusegrad.schedule.fusion import is_kernelized
from fusegrad.schedule.multi import (
    REPLICATED,
    Placement,
    leading_block,
    multi_buffer,
    multi_range,
    register_multi_buffer,
)
from fusegrad.schedule.rangeify import Kernel, simplify_kernel
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp


@dataclass(frozen=True, slots=True)
class Move:
    """`size` elements from device `src` at element `src_offset` to device `dest` at `dest_offset` (-1: one device)."""

    src: int
    src_offset: int
    dest: int
    dest_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class MultiCopy:
    """The arg of a multi-device COPY AST: the moves it makes, run in order."""

    moves: tuple[Move, ...]

    def __repr__(self) -> str:
        return f"<MultiCopy {len(self.moves)} moves>"


def _buffer_of(stored: UOp) -> UOp:
    return stored.src[0] if is_kernelized(stored) else stored


def plan_moves(src: UOp, root: UOp, dest_placement: Placement | None) -> tuple[Move, ...]:
    """The moves of COPY `root` from stored `src`: single -> multi, multi -> single, or sharded -> replicated."""
    size = prod(root.shape)
    if not isinstance(src.device, tuple):  # one device -> several: replicate, or scatter a leading-axis shard
        n = len(root.device)
        assert dest_placement is not None, "plan_moves: a multi-device destination needs a placement"
        if dest_placement.axis is None:
            return tuple(Move(-1, 0, e, 0, size) for e in range(n))
        assert leading_block(root.shape, dest_placement.axis), "plan_moves: a scatter's shards must be contiguous"
        local = size // n
        return tuple(Move(-1, e * local, e, 0, local) for e in range(n))
    held = multi_buffer(_buffer_of(src))
    n = len(held.devices)
    if not isinstance(root.device, tuple):  # several -> one: one replica, or every shard in its place
        if held.placement.axis is None:
            return (Move(held.devices.index(root.device) if root.device in held.devices else 0, 0, -1, 0, size),)
        return tuple(Move(e, 0, -1, e * held.local_size, held.local_size) for e in range(n))
    assert held.placement.axis is not None, "plan_moves: an allgather's source must be sharded"
    local = held.local_size
    return tuple(Move(f, 0, e, f * local, local) for e in range(n) for f in range(n))


def copy_ast(root: UOp, moves: tuple[Move, ...]) -> UOp:
    return UOp(Ops.COPY, root.dtype, (UOp(Ops.DEVICE, arg=root.device),), MultiCopy(moves))


def _copy_node(dest: UOp, src: UOp, moves: tuple[Move, ...], metadata: tuple[object, ...]) -> UOp:
    kernel = UOp(Ops.KERNEL, src=(dest, src), arg=Kernel(copy_ast(dest, moves), metadata))
    return UOp(Ops.ASSIGN, dest.dtype, (dest, kernel))


def multi_copy_kernel(root: UOp, src: UOp, placement: Placement | None, metadata: tuple[object, ...]) -> UOp:
    """ASSIGN(BUFFER, KERNEL) for a COPY that involves several devices (not an allreduce)."""
    out = UOp.new_buffer(root.device, prod(root.shape), root.dtype)
    if placement is not None:
        register_multi_buffer(out, placement, root.shape)
    return _copy_node(out, src, plan_moves(src, root, placement), metadata)


# *** allreduce ***


def _glob(slot: int, buf: UOp) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(multi_buffer(buf).capacity), arg=slot)


def _combine(op: Ops, a: UOp, b: UOp) -> UOp:
    return UOp(op, a.dtype, (a, b))


def _rng(size: int) -> UOp:
    return UOp.range(UOp.const(dtypes.index, size), 0, AxisType.LOOP)


def _kernel_node(out: UOp, ast: UOp, srcs: tuple[UOp, ...], metadata: tuple[object, ...]) -> UOp:
    kernel = UOp(Ops.KERNEL, src=(out, *srcs), arg=Kernel(simplify_kernel(ast), metadata))
    return UOp(Ops.ASSIGN, out.dtype, (out, kernel))


def use_ring(size: int) -> bool:
    """Ring when asked (RING=2), or by default (RING=1) from the threshold's elements on: bench/devices.py measured
    ring ahead of naive from about 1 MB on 2 and on 4 CPU devices (each device then moves 2(n-1)/n x size, not n-1)."""
    return RING.value >= 2 or (RING.value == 1 and size >= RING_ALLREDUCE_THRESHOLD.value)


def allreduce_kernel(root: UOp, partial: UOp, op: Ops, metadata: tuple[object, ...]) -> UOp:
    """The last ASSIGN(BUFFER, KERNEL) of an allreduce of stored `partial` (each device's partial result) with `op`."""
    devices, size = root.device, prod(root.shape)
    assert isinstance(devices, tuple), "allreduce: the destination must be several devices"
    out = UOp.new_buffer(devices, size, root.dtype)
    register_multi_buffer(out, REPLICATED, root.shape)
    builder = _ring_allreduce if use_ring(size) else _naive_allreduce
    return builder(out, partial, op, metadata)


def _naive_allreduce(out: UOp, partial: UOp, op: Ops, metadata: tuple[object, ...]) -> UOp:
    """Every device copies every other's partial into its staging buffer (n-1 slots), then one kernel combines."""
    n, size = len(out.device), out.arg
    staging = UOp.new_buffer(out.device, (n - 1) * size, out.dtype)
    register_multi_buffer(staging, REPLICATED, ((n - 1) * size,))
    moves = tuple(Move((e + 1 + j) % n, 0, e, j * size, size) for e in range(n) for j in range(n - 1))
    copied = _copy_node(staging, partial, moves, metadata)
    r = _rng(size)
    own = _glob(1, _buffer_of(partial)).index(r).load(dtype=out.dtype)
    others = [_glob(2, staging).index(r + j * size).load(dtype=out.dtype) for j in range(n - 1)]
    value = functools.reduce(functools.partial(_combine, op), others, own)
    ast = UOp.sink(_glob(0, out).index(r).store(value))
    return _kernel_node(out, ast, (partial, copied), metadata)


def _ring_allreduce(out: UOp, partial: UOp, op: Ops, metadata: tuple[object, ...]) -> UOp:
    """Reduce-scatter (n-1 steps: device e adds chunk (e-1-t) mod n from device e-1), then all-gather (n-1 steps:
    device e copies the finished chunk (e-t) mod n from device e-1). Chunks are C = ceil(size/n) elements: replicated
    and partial buffers have room for n*C, so every chunk has the same size (the tail is never read as a value)."""
    n, size = len(out.device), out.arg
    chunk = -(-size // n)
    staging = UOp.new_buffer(out.device, chunk, out.dtype)
    register_multi_buffer(staging, REPLICATED, (chunk,))
    device, r = multi_range(n), _rng(chunk)
    last: UOp | None = None
    for t in range(n - 1):
        sender = partial if last is None else last
        moves = tuple(Move((e - 1) % n, ((e - 1 - t) % n) * chunk, e, 0, chunk) for e in range(n))
        copied = _copy_node(staging, sender, moves, metadata)  # after the last step: it reads its result
        pos = ((device + (n - 1 - t)) % n) * chunk + r
        own = _glob(1, _buffer_of(partial)).index(pos).load(dtype=out.dtype)
        value = _combine(op, own, _glob(2, staging).index(r).load(dtype=out.dtype))
        ast = UOp.sink(_glob(0, out).index(pos).store(value))
        last = _kernel_node(out, ast, (partial, copied), metadata)
    assert last is not None, "ring allreduce: needs at least two devices"
    for t in range(n - 1):
        moves = tuple(Move((e - 1) % n, ((e - t) % n) * chunk, e, ((e - t) % n) * chunk, chunk) for e in range(n))
        last = _copy_node(out, last, moves, metadata)
    return last
