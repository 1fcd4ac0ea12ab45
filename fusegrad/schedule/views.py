"""Views of stored memory as BUFFER_VIEWs: a device that stores data but runs no kernels (DISK, NPY) hands out views.

`byte_run(x)` decides whether a chain of movement ops and same-size bitcasts over memory reads one contiguous run of
the base's bytes, in row-major order, and where; `view_kernel` builds the BUFFER_VIEW kernel whose output Buffer is
that run of the input's Buffer, so a COPY (or `.numpy()`) reads it with no kernel on the device. Entry points:
`storage_view_kernel` (kernelize.py calls it for a CONTIGUOUS root), `copy_then_rearrange` (for a COPY of a permuted
or flipped view) and `bitcast_view` (Tensor.bitcast on DISK).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusegrad.device import _STORAGE_DEVICES
from fusegrad.dtype import DType
from fusegrad.helpers import prod
from fusegrad.schedule.fusion import is_kernelized, is_stored
from fusegrad.schedule.indexing import strides_for
from fusegrad.schedule.rangeify import Kernel
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.ops import UOp, buffers


@dataclass(frozen=True, slots=True)
class ByteRun:
    """`nbytes` bytes of `base`'s memory from byte `offset`, read in order as a tensor of `shape` x `dtype`."""

    base: UOp
    offset: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: DType


def is_storage_device(device: str | tuple[str, ...]) -> bool:
    """A device that holds data but runs no kernels: a view of its memory must be a Buffer view, not a kernel."""
    return isinstance(device, str) and device.split(":")[0] in _STORAGE_DEVICES


def view_chain(x: UOp) -> tuple[UOp, list[UOp]]:
    """(base, ops): the node below every movement op and bitcast of `x`, and those ops from the base up."""
    ops: list[UOp] = []
    while x.op in GroupOp.Movement or x.op is Ops.BITCAST:
        ops.append(x)
        x = x.src[0]
    return x, ops[::-1]


@dataclass(frozen=True, slots=True)
class Strided:
    """A view as element `offset + sum(i_k * strides[k])` of the base at index (i_0, i_1, ...) of `shape`."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int

    def is_run(self) -> bool:
        """Read in row-major order, are the elements offset, offset+1, ...? (Size-1 axes have no stride.)"""
        row_major = strides_for(self.shape)
        return all(st == rm for s, st, rm in zip(self.shape, self.strides, row_major, strict=True) if s != 1)


def _reshape(view: Strided, shape: tuple[int, ...]) -> Strided | None:
    """The same elements in a new shape, if strides can say it: every run of merged axes must be contiguous."""
    if view.is_run():
        return Strided(shape, strides_for(shape), view.offset)
    old = [(s, st) for s, st in zip(view.shape, view.strides, strict=True) if s != 1]
    strides: list[int] = []
    i = 0
    for size in shape:  # walk the new axes, taking old axes until their product matches
        if size == 1:
            strides.append(0)
            continue
        if i >= len(old):
            return None
        count, inner = old[i][0], old[i][1]
        i += 1
        while count < size and i < len(old) and old[i - 1][1] == old[i][0] * old[i][1]:
            count, inner = count * old[i][0], old[i][1]
            i += 1
        if count != size:
            return None  # splits an old axis or merges two that aren't adjacent in memory
        strides.append(inner)
    return Strided(shape, tuple(strides), view.offset) if i == len(old) else None


def _step(view: Strided, op: UOp) -> Strided | None:
    """The view after one more op, or None where strides can't say it (padding, a reshape across a gap)."""
    match op.op:
        case Ops.RESHAPE:
            return _reshape(view, tuple(op.arg))
        case Ops.SHRINK:
            offset = view.offset + sum(start * st for (start, _), st in zip(op.arg, view.strides, strict=True))
            return Strided(tuple(end - start for start, end in op.arg), view.strides, offset)
        case Ops.PERMUTE:
            return Strided(tuple(view.shape[a] for a in op.arg), tuple(view.strides[a] for a in op.arg), view.offset)
        case Ops.EXPAND:  # an expanded axis reads one element again and again
            strides = tuple(st if s == e else 0 for s, e, st in zip(view.shape, op.arg, view.strides, strict=True))
            return Strided(tuple(op.arg), strides, view.offset)
        case Ops.FLIP:
            flips = list(zip(view.shape, view.strides, op.arg, strict=True))
            offset = view.offset + sum((s - 1) * st for s, st, flip in flips if flip)
            return Strided(view.shape, tuple(-st if flip else st for _, st, flip in flips), offset)
        case Ops.PAD:
            return view if all(before == after == 0 for before, after in op.arg) else None
        case Ops.BITCAST:
            return view if op.dtype.itemsize == op.src[0].dtype.itemsize else None
    return None


def strided_view(base: UOp, ops: list[UOp]) -> Strided | None:
    """Where the chain `ops` over `base` reads base's elements, or None when that is not one stride per axis."""
    view: Strided | None = Strided(base.shape, strides_for(base.shape), 0)
    for op in ops:
        if view is None:
            return None
        view = _step(view, op)
    return view


def byte_run(x: UOp) -> ByteRun | None:
    """Where `x`, a chain of movement ops and same-size bitcasts over some node, reads that node's bytes, if that is
    one contiguous run in row-major order; None otherwise."""
    base, ops = view_chain(x)
    if any(u._shape is None or not all(isinstance(s, int) for s in u.shape) for u in (base, *ops)):
        return None  # no shape, or a symbolic one: no fixed byte range
    if prod(x.shape) == 0:
        return ByteRun(base, 0, 0, x.shape, x.dtype)  # reads nothing: trivially one run
    view = strided_view(base, ops)
    if view is None or not view.is_run():
        return None
    return ByteRun(base, view.offset * base.dtype.itemsize, prod(x.shape) * x.dtype.itemsize, x.shape, x.dtype)


def longest_run(base: UOp, ops: list[UOp]) -> int:
    """The most ops (from the base up) that still read one run of base's bytes (0: the whole base)."""
    longest, view = 0, strided_view(base, [])
    for k, op in enumerate(ops, start=1):
        if view is None or (view := _step(view, op)) is None:
            return longest
        longest = k if view.is_run() else longest
    return longest


def copy_then_rearrange(c: UOp) -> UOp | None:
    """COPY(rearranged run of storage memory) -> CONTIGUOUS(the rearrangement of COPY(the run)), computed on the
    destination. Only when the ops past the longest run select nothing (permute, flip, expand, pad, reshape,
    bitcast): a shrink there would copy bytes the view skips, so such a view stays an error (as in the reference)."""
    src = c.src[0]
    if not is_storage_device(src.device) or not isinstance(c.device, str) or byte_run(src) is not None:
        return None
    base, ops = view_chain(src)
    if not (is_stored(base) or base.op is Ops.COPY) or any(not isinstance(s, int) for u in ops for s in u.shape):
        return None
    k = longest_run(base, ops)
    if any(op.op is Ops.SHRINK for op in ops[k:]):
        return None
    run = ops[k - 1] if k else base
    moved = UOp(Ops.COPY, run.dtype, (run, *c.src[1:]), c.arg)
    for op in ops[k:]:
        moved = op.replace(src=(moved,))
    return moved.contiguous()


def describe_view(x: UOp) -> str:
    """The view chain of `x` as text for errors: "(4, 6) int32 -> shrink ((0, 4), (1, 3))"."""
    base, ops = view_chain(x)
    steps = [f"{op.op.name.lower()} {op.dtype if op.op is Ops.BITCAST else op.arg}" for op in ops]
    return " -> ".join([f"{base._shape} {base.dtype}", *steps])


def _stored_buffer(stored: UOp) -> UOp | None:
    """The BUFFER node behind stored memory (a buffer, or a buffer whose kernel is built), if there is one."""
    if stored.op is Ops.BUFFER:
        return stored
    if is_kernelized(stored) and stored.src[0].op is Ops.BUFFER:
        return stored.src[0]
    return None


def _view_buffer(source: UOp, offset: int, size: int, dtype: DType) -> UOp:
    """A new BUFFER node of `size` x `dtype` whose Buffer is `source`'s memory from byte `offset` on."""
    assert isinstance(source.device, str), "view: a view of a multi-device buffer has no single Buffer"
    assert size > 0, "view: an empty view needs no memory (callers make an empty tensor)"
    out = UOp.new_buffer(source.device, size, dtype)
    buffers[out] = source.buffer.view(size, dtype, offset)
    return out


def view_kernel(stored: UOp, offset: int, size: int, dtype: DType) -> UOp:
    """ASSIGN(out, KERNEL(BUFFER_VIEW)): a BUFFER of `size` x `dtype` whose Buffer is the `stored` memory's from
    byte `offset` on. Running the kernel only checks that; a COPY of `out` then reads the stored memory there."""
    source = _stored_buffer(stored)
    assert source is not None, f"view_kernel: expected stored memory, got {stored.op}"
    out = _view_buffer(source, offset, size, dtype)
    ast = UOp(Ops.BUFFER_VIEW, dtype, (), (size, offset))
    return UOp(Ops.ASSIGN, dtype, (out, UOp(Ops.KERNEL, src=(out, stored), arg=Kernel(ast))))


def storage_view_kernel(root: UOp, buffer_of: dict[UOp, UOp]) -> UOp | None:
    """The kernel for CONTIGUOUS(view of memory) on a storage device: a BUFFER_VIEW when the view is one byte run.

    Raises RuntimeError naming the device and the view when it is not (the device can't gather it). None when `root`
    is not such a node (its kernel is an ordinary one)."""
    if root.op is not Ops.CONTIGUOUS or not is_storage_device(root.device):
        return None
    base, _ = view_chain(root.src[0])
    if _stored_buffer(stored := buffer_of.get(base, base)) is None:
        return None  # not memory (a computed value): an ordinary kernel, which this device can't run
    if (run := byte_run(root.src[0])) is None:
        raise RuntimeError(
            f"{root.device}: can't read a non-contiguous view: got {describe_view(root.src[0])}, expected one run of "
            "bytes (whole rows, a slice of the last axis, a bitcast): this device runs no kernels; copy the whole "
            "tensor to a compute device first, e.g. .to('CPU'), then take the view there"
        )
    return view_kernel(stored, run.offset, prod(run.shape), run.dtype)


def check_storage_write(target: UOp, value: UOp) -> UOp:
    """The COPY behind `value` for a write of it into `target` on a storage device. Raises RuntimeError naming the
    device when the target is not one run of bytes, or the value is not a copy (the device can't compute it)."""
    if byte_run(target) is None:
        raise RuntimeError(
            f"{target.device}: can't write a non-contiguous view: got {describe_view(target)}, expected one run of "
            "bytes (whole rows, a slice of the last axis): this device runs no kernels; assign the whole tensor, or "
            "rows of it, instead"
        )
    copy = value
    while copy.op is Ops.RESHAPE:  # a reshape keeps the copied bytes in order
        copy = copy.src[0]
    if copy.op is not Ops.COPY:
        raise RuntimeError(
            f"{target.device}: can't compute {value.op} into its memory: this device runs no kernels; compute the "
            "value on a compute device and assign a copy of it, e.g. t.assign(x.to(t.device))"
        )
    return copy


def storage_write_kernel(root: UOp, buffer_of: dict[UOp, UOp]) -> UOp | None:
    """The kernel for ASSIGN(view of memory, COPY(x)) on a storage device: the COPY writes straight into the viewed
    bytes (a whole buffer or one run of it), so no kernel runs on the device. None when `root` is not such a write;
    RuntimeError as check_storage_write."""
    if root.op is not Ops.ASSIGN or not is_storage_device(root.device) or is_kernelized(root):
        return None
    target, value = root.src
    base, _ = view_chain(target)
    if (source := _stored_buffer(stored := buffer_of.get(base, base))) is None:
        return None
    copy = check_storage_write(target, value)
    copied = buffer_of.get(copy, copy)
    assert is_kernelized(copied), f"storage_write_kernel: the copy into {root.device} has no kernel yet"
    run = byte_run(target)
    assert run is not None, "checked by check_storage_write"
    whole = run.offset == 0 and run.nbytes == source.buffer.nbytes
    out = source if whole else _view_buffer(source, run.offset, prod(run.shape), run.dtype)
    copy_kernel = copied.src[1]  # the COPY's own kernel, re-aimed at the target's bytes instead of a buffer of its own
    kernel = UOp(Ops.KERNEL, src=(out, *copy_kernel.src[1:], *([stored] if stored is not source else [])),
                 arg=copy_kernel.arg)  # fmt: skip
    return UOp(Ops.ASSIGN, source.dtype, (source, kernel))


def bitcast_view(x: UOp, dtype: DType) -> UOp:
    """`x` (a view of a realized buffer on a storage device) read as `dtype`, whose size differs: a buffer viewing the
    same bytes, with the last axis scaled. Nothing runs: the memory is there. Raises RuntimeError when `x` is not one
    run of bytes of a realized buffer."""
    if (run := byte_run(x)) is None or run.base.op is not Ops.BUFFER:
        raise RuntimeError(
            f"bitcast: {x.device} runs no kernels, so a bitcast to {dtype} must view memory: got "
            f"{describe_view(x)}, expected one run of bytes of a realized buffer"
        )
    shape = (*run.shape[:-1], run.shape[-1] * run.dtype.itemsize // dtype.itemsize)
    return _view_buffer(run.base, run.offset, prod(shape), dtype).reshape(shape)
