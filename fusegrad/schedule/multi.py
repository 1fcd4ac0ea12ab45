"""Several devices at once: where a multi-device tensor's data lives, and the communication the scheduler inserts.

A tensor on a device tuple is one logical tensor with its global shape; autograd and the Tensor API see nothing else.
Its memory has a *placement*: replicated (every device holds all of it), sharded along an axis (device d holds the d-th
of n equal blocks) or partial (every device holds a full-size partial reduce, until an allreduce combines them).
`place_graph(sink)` runs before fusion: it gives every multi-device node a placement and inserts the COPY nodes that
move data between placements. Kernels are then described once for all devices (rangeify.py, indexing each device's
block through `DeviceIndexing`): the device index is a RANGE of type MULTI, bound per device when the schedule is
lowered (engine/schedule.py).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from fusegrad.device import Buffer, Device
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import prod
from fusegrad.schedule.fusion import is_kernelized
from fusegrad.schedule.indexing import Index, idx_const, linearize_index, simplify_index
from fusegrad.uop import AxisType, GroupOp, Ops
from fusegrad.uop.ops import UOp

DEVICE_VAR = "_device_num"  # the variable a MULTI range becomes when a kernel is lowered for one device


@dataclass(frozen=True, slots=True)
class Placement:
    """How a multi-device node's elements are spread: `axis` sharded (None: replicated), or `partial` (a reduce op)."""

    axis: int | None = None
    partial: Ops | None = None
    masked: bool = False  # a write into a view that crosses shards: each device stores only into its own block

    def __repr__(self) -> str:
        if self.partial is not None:
            return f"partial({self.partial.name})"
        if self.masked:
            return "masked write"
        return "replicated" if self.axis is None else f"sharded({self.axis})"


REPLICATED = Placement()


class MultiBuffer:
    """The memory of one multi-device BUFFER: a Buffer per device, holding the elements its placement gives it.

    Replicated and partial buffers get storage rounded up to a multiple of the device count, so every ring-allreduce
    chunk has the same size (the tail is never read as a value)."""

    def __init__(self, devices: tuple[str, ...], size: int, dtype: DType, placement: Placement, shape: tuple[int, ...]):
        self.devices, self.size, self.dtype, self.placement, self.shape = devices, size, dtype, placement, shape
        n = len(devices)
        self.local_size = size // n if placement.axis is not None else size
        self.capacity = self.local_size if placement.axis is not None else -(-size // n) * n
        self._bufs: list[Buffer] | None = None

    @property
    def bufs(self) -> list[Buffer]:
        """The per-device Buffers (created on first use, allocated when a kernel first runs)."""
        if self._bufs is None:
            self._bufs = [Buffer(d, self.capacity, self.dtype) for d in self.devices]
        return self._bufs


_multi_buffers: weakref.WeakKeyDictionary[UOp, MultiBuffer] = weakref.WeakKeyDictionary()


def register_multi_buffer(buf: UOp, placement: Placement, shape: tuple[int, ...]) -> MultiBuffer:
    assert isinstance(buf.device, tuple), f"register_multi_buffer: {buf.device} is one device"
    assert prod(shape) == buf.arg, f"register_multi_buffer: shape {shape} does not hold {buf.arg} elements"
    ret = _multi_buffers[buf] = MultiBuffer(buf.device, buf.arg, buf.dtype, placement, shape)
    return ret


def multi_buffer(buf: UOp) -> MultiBuffer:
    """The MultiBuffer of a multi-device BUFFER node (one made by `Tensor.empty` is replicated)."""
    if (ret := _multi_buffers.get(buf)) is None:
        ret = register_multi_buffer(buf, REPLICATED, (buf.arg,))
    return ret


def devices_of(u: UOp) -> tuple[str, ...] | None:
    """The device tuple of a tensor-level node, or None for a single device (or none)."""
    if u.op in (Ops.SINK, Ops.KERNEL, Ops.DEFINE_VAR, Ops.BIND, Ops.UNIQUE):
        return None
    try:
        device = u.device
    except ValueError:  # a bare constant (no DEVICE source) is on no device
        return None
    return device if isinstance(device, tuple) else None


def can_compute(device: str) -> bool:
    """Can kernels run on `device`? (DISK and NPY only store data.)"""
    try:
        Device[device].compiler  # noqa: B018  # the property raises for storage-only devices
    except RuntimeError:
        return False
    return True


def leading_block(shape: tuple[int, ...], axis: int) -> bool:
    """Is each device's shard along `axis` one contiguous range of memory (every axis before it has size 1)?"""
    return prod(shape[:axis]) == 1


def reshaped_axis(in_shape: tuple[int, ...], axis: int, out_shape: tuple[int, ...], n: int) -> int | None:
    """The axis of `out_shape` whose n blocks hold the same elements as `axis`'s n blocks of `in_shape`, if any.

    Reshape keeps the flat order: the blocks match when the axes before have the same product (so each row of the
    flat order is split the same way) and the new axis divides into n."""
    before, acc = prod(in_shape[:axis]), 1
    for j, s in enumerate(out_shape):
        if acc == before and s % n == 0 and s > 1:
            return j
        acc *= s
        if acc > before:
            return None
    return None


def to_front(ndim: int, axis: int) -> tuple[int, ...]:
    return (axis, *[i for i in range(ndim) if i != axis])


def inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(order.index(i) for i in range(len(order)))


@dataclass
class PlaceGraph:
    """The state of `place_graph`: the placement of every multi-device node of the rewritten graph."""

    placements: dict[UOp, Placement] = field(default_factory=dict)

    def put(self, u: UOp, p: Placement) -> UOp:
        self.placements[u] = p
        return u

    def copy_source(self, x: UOp) -> UOp:
        """A COPY moves memory: its source must be stored contiguously (else a kernel makes it so first)."""
        node = x
        while node.op is Ops.RESHAPE:
            node = node.src[0]
        if node.op in (Ops.BUFFER, Ops.COPY, Ops.CONTIGUOUS) or is_kernelized(node):
            return x
        return self.put(x.contiguous(), self.placements[x]) if devices_of(x) else x.contiguous()

    def allgather(self, x: UOp) -> UOp:
        """Sharded -> replicated; a shard that is not one contiguous range is moved to the front first."""
        axis = self.placements[x].axis
        assert axis is not None, "allgather: the source must be sharded"
        devices = UOp(Ops.DEVICE, arg=x.device)
        if leading_block(x.shape, axis):
            return self.put(UOp(Ops.COPY, x.dtype, (self.copy_source(x), devices)), REPLICATED)
        order = to_front(len(x.shape), axis)
        front = self.put(self.put(x.permute(order), Placement(0)).contiguous(), Placement(0))
        gathered = self.put(UOp(Ops.COPY, x.dtype, (front, devices)), REPLICATED)
        return self.put(gathered.permute(inverse(order)), REPLICATED)

    def allreduce(self, x: UOp) -> UOp:
        """Partial -> replicated: a COPY of a partial node is an allreduce (naive or ring, see kernelize)."""
        source = self.put(x.contiguous(), self.placements[x])
        return self.put(UOp(Ops.COPY, x.dtype, (source, UOp(Ops.DEVICE, arg=x.device))), REPLICATED)

    def convert(self, x: UOp, want: Placement) -> UOp:
        """`x` with placement `want` (communicating as needed)."""
        have = self.placements[x]
        if have == want:
            return x
        if have.partial is not None:
            x = self.allreduce(x)
        elif have.axis is not None:
            x = self.allgather(x)
        if want.axis is None:
            return x
        # replicated -> sharded: each device keeps its block (a kernel, no communication)
        return self.put(UOp(Ops.CONTIGUOUS, x.dtype, (x,), tag=("shard", want.axis)), want)

    def gather(self, x: UOp, target: str) -> UOp:
        """Multi-device `x` -> one device: the blocks of a shard, or one replica."""
        have = self.placements[x]
        if have.partial is not None:
            x, have = self.allreduce(x), REPLICATED
        devices = UOp(Ops.DEVICE, arg=target)
        if have.axis is None or leading_block(x.shape, have.axis):
            return UOp(Ops.COPY, x.dtype, (self.copy_source(x), devices))
        if not can_compute(target):  # storage (DISK, NPY): put the blocks in order on the first device, then copy
            return UOp(Ops.COPY, x.dtype, (self.gather(x, x.device[0]), devices))
        order = to_front(len(x.shape), have.axis)
        front = self.put(self.put(x.permute(order), Placement(0)).contiguous(), Placement(0))
        # a COPY's result is contiguous memory (the prepare pass relies on it): the permuted view gets a kernel
        return UOp(Ops.COPY, x.dtype, (front, devices)).permute(inverse(order)).contiguous()

    def place_copy(self, u: UOp) -> UOp:
        """COPY(x, devices, arg): arg None replicates, an int shards along that axis; a single target gathers."""
        x, target = u.src[0], u.src[1].arg
        source_devices = devices_of(x)
        if not isinstance(target, tuple):
            return u if source_devices is None else self.gather(x, target)
        want = REPLICATED if u.arg is None else Placement(u.arg)
        if source_devices == target:
            return self.convert(x, want)
        if source_devices is not None:  # another device set: through the first device of the source
            x = self.gather(x, source_devices[0])
        if want.axis is None or leading_block(x.shape, want.axis):
            if x.op is Ops.COPY and devices_of(x.src[0]) is None:  # copied from another device first (a numpy
                x = x.src[0]  # array, say): copy from the original, no staging copy
            return self.put(u.replace(src=(x, u.src[1])), want)
        if isinstance(x.device, str) and not can_compute(x.device):  # storage (DISK, NPY): blocks laid out on target
            x = UOp(Ops.COPY, x.dtype, (x, UOp(Ops.DEVICE, arg=target[0])))
        order = to_front(len(x.shape), want.axis)
        front = UOp(Ops.COPY, x.dtype, (x.permute(order).contiguous(), u.src[1]), 0)
        back = self.put(self.put(front, Placement(0)).permute(inverse(order)), want)
        return self.put(back.contiguous(), want)

    def place_elementwise(self, u: UOp) -> UOp:
        placed = [self.placements[s] for s in u.src if s in self.placements]
        axes = [p.axis for p in placed if p.axis is not None]
        want = Placement(axes[0]) if axes else REPLICATED
        # a replicated source is read in place at any index; a partial one or one sharded elsewhere is moved
        srcs = tuple(self.convert(s, want) if self._must_move(s, want) else s for s in u.src)
        return self.put(u.replace(src=srcs), want)

    def _must_move(self, x: UOp, want: Placement) -> bool:
        have = self.placements.get(x)
        return have is not None and have != want and (have.partial is not None or have.axis is not None)

    def place_movement(self, u: UOp) -> UOp:
        x = u.src[0]
        if (moved := moved_placement(u, self.placements[x])) is not None:
            return self.put(u, moved)
        # the shard axis moves across devices: gather it everywhere first
        return self.put(u.replace(src=(self.convert(x, REPLICATED),)), REPLICATED)

    def view_placement(self, view: UOp) -> Placement | None:
        """The placement of a view of placed memory, without moving data; None where it crosses shards."""
        chain = []
        while view.op in GroupOp.Movement:
            chain.append(view)
            view = view.src[0]
        placement: Placement | None = self.placements[view]
        for node in reversed(chain):
            placement = moved_placement(node, placement) if placement is not None else None
        return placement

    def place_reduce(self, u: UOp) -> UOp:
        have = self.placements[u.src[0]]
        if have.axis is None or have.axis not in u.arg[1]:
            return self.put(u, have)
        self.put(u, Placement(partial=u.arg[0]))
        return self.allreduce(u)

    def place_assign(self, u: UOp) -> UOp:
        """ASSIGN(view of memory, value): the value moves to the view's placement; a view that crosses shards is
        written masked (every device computes the whole view and stores only into its own block)."""
        target = self.view_placement(u.src[0])  # the target is kept a view of memory (place_graph)
        value = self.convert(u.src[1], REPLICATED if target is None else target)
        return self.put(u.replace(src=(u.src[0], value)), Placement(masked=True) if target is None else target)

    def read_after_write(self, write: UOp) -> UOp:
        """A masked write read as a value: its target view over the memory after the write (moved as reads need)."""
        chain = []
        node = write.src[0]
        while node.op in GroupOp.Movement:
            chain.append(node)
            node = node.src[0]
        out = self.put(UOp(Ops.AFTER, node.dtype, (node, write)), self.placements[node])
        for view in reversed(chain):
            out = self.place_movement(view.replace(src=(out,)))
        return out

    def as_value(self, x: UOp) -> UOp:
        """`x` as an operand: a masked write is read after it; flat memory sharded along an axis of the shape it was
        stored with is viewed through that shape (so the placement's axis refers to the operand's own shape)."""
        placement = self.placements.get(x)
        if placement is None:
            return x
        if placement.masked:
            return self.read_after_write(x)
        memory = x.op in (Ops.BUFFER, Ops.AFTER) or is_kernelized(x)
        if placement.axis is not None and memory and (stored := _reference_shape(x)) != x.shape:
            return self.place_movement(self.place_movement(x.reshape(stored)).reshape(x.shape))
        return x

    def value_sources(self, u: UOp) -> UOp:
        """`u` reading its sources as values (movement ops, AFTER and SINK read memory as it is)."""
        if not (u.op in GroupOp.ALU or u.op in _VALUE_READERS) or is_kernelized(u):
            return u  # movement ops, AFTER and SINK read memory as it is; KERNEL sources are its buffers
        first = 1 if u.op is Ops.ASSIGN else 0  # an assign's target is a view of memory
        srcs = (*u.src[:first], *[self.as_value(s) for s in u.src[first:]])
        return u if srcs == u.src else u.replace(src=srcs)

    def place(self, u: UOp) -> UOp:
        """The node standing for `u` (sources already placed), with its placement recorded."""
        u = self.value_sources(u)
        if u.op is Ops.COPY:
            return self.place_copy(u)
        if devices_of(u) is None:
            return u
        if u.op is Ops.BUFFER:
            return self.put(u, multi_buffer(u).placement)
        if is_kernelized(u):
            return self.put(u, multi_buffer(u.src[0]).placement)
        if u.op in (Ops.CONST, Ops.IOTA, Ops.DEVICE):
            return self.put(u, REPLICATED)
        if u.op in GroupOp.Movement:
            return self.place_movement(u)
        if u.op is Ops.REDUCE_AXIS:
            return self.place_reduce(u)
        if u.op is Ops.CONTIGUOUS and u.tag is None and _is_copy_result(u.src[0]):
            return u.src[0]  # a COPY's result is contiguous memory already (placing may have made a reduce one)
        if u.op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD, Ops.AFTER):
            return self.put(u, self.placements[u.src[0]])
        if u.op is Ops.ASSIGN:
            return self.place_assign(u)
        if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
            return self.place_elementwise(u)
        raise NotImplementedError(f"multi: {u.op} is not supported on several devices")


# ops that read their sources as values (besides ALU)
_VALUE_READERS = (Ops.CAST, Ops.BITCAST, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD, Ops.COPY,
                  Ops.ASSIGN)  # fmt: skip


def _reference_shape(x: UOp) -> tuple[int, ...]:
    """The shape a placement's axis refers to: a buffer is flat, its axis refers to the shape it was stored with."""
    stored = x
    while stored.op is Ops.AFTER or is_kernelized(stored):  # memory after writes: the BUFFER below
        stored = stored.src[0]
    return multi_buffer(stored).shape if stored.op is Ops.BUFFER else x.shape


def moved_placement(u: UOp, have: Placement) -> Placement | None:
    """The placement of movement op `u` over a source placed `have`, or None when the shard axis moves across
    devices (a pad, shrink or flip of it, or a reshape that splits its blocks differently)."""
    x = u.src[0]
    if have.axis is None:
        return have
    axis = have.axis
    match u.op:
        case Ops.PERMUTE:
            return Placement(u.arg.index(axis))
        case Ops.EXPAND:
            return have
        case Ops.RESHAPE:
            new_axis = reshaped_axis(_reference_shape(x), axis, u.shape, len(x.device))
            return None if new_axis is None else Placement(new_axis)
        case Ops.PAD if u.arg[axis] == (0, 0):
            return have
        case Ops.SHRINK if u.arg[axis] == (0, x.shape[axis]):
            return have
        case Ops.FLIP if not u.arg[axis]:
            return have
    return None


def _raw_view(view: UOp, new: dict[UOp, UOp]) -> UOp:
    """An assign target rebuilt over the placed memory below it, without the data moves reads of it would get."""
    chain = []
    while view.op in GroupOp.Movement:
        chain.append(view)
        view = view.src[0]
    out = new[view]
    for node in reversed(chain):
        out = node.replace(src=(out,))
    return out


def _is_copy_result(x: UOp) -> bool:
    while x.op is Ops.RESHAPE:
        x = x.src[0]
    return x.op is Ops.COPY


def place_graph(sink: UOp) -> tuple[UOp, dict[UOp, UOp], dict[UOp, Placement]]:
    """Give every multi-device node a placement, inserting the COPYs that move data between placements.

    Returns the new sink, old node -> new node for every node, and the placements of the new graph's nodes."""
    state = PlaceGraph()
    new: dict[UOp, UOp] = {}
    for u in sink.toposort():
        srcs = tuple(new[s] for s in u.src)
        if u.op is Ops.ASSIGN and not is_kernelized(u) and devices_of(u) is not None:
            srcs = (_raw_view(u.src[0], new), *srcs[1:])
        node = u if srcs == u.src else u.replace(src=srcs)
        new[u] = state.place(node)
    return new[sink], new, state.placements


def has_multi(topo: dict[UOp, None]) -> bool:
    return any(u.op is Ops.DEVICE and isinstance(u.arg, tuple) for u in topo)


def multi_range(n: int) -> UOp:
    """The device index of a kernel described once for n devices."""
    return UOp.range(UOp.const(dtypes.index, n), -1, AxisType.MULTI)


def is_multi_range(u: UOp) -> bool:
    return u.op is Ops.RANGE and u.arg[1] is AxisType.MULTI


@dataclass
class DeviceIndexing:
    """A kernel described once for several devices (rangeify.build_kernel): `device_index` is its MULTI range, the
    device a copy of the kernel runs on; a sharded axis is indexed within that device's block of it."""

    placements: dict[UOp, Placement]
    device_index: UOp
    store_gate: UOp | None = None  # a masked write's store: where the index is in this device's block

    def block(self, size: int) -> int:
        """Elements of a sharded axis of `size` that one device holds."""
        return size // int(self.device_index.src[0].arg)

    def local_index(
        self, buf: UOp, node: UOp, idx: Index, shape: tuple[int, ...], valid: UOp | None, gate: bool = False
    ) -> tuple[UOp, int]:
        """(flat index into this device's memory, its size) for reading `node` at global `idx` in a multi kernel.

        With `gate` (a masked write) an index outside this device's block is allowed, and `self.store_gate` says
        where the index is inside it."""
        memory = buf
        while memory.op in GroupOp.Movement or memory.op is Ops.AFTER or is_kernelized(memory):
            memory = memory.src[0]  # a pending write's target: the memory it writes
        if memory.op is Ops.BUFFER:
            held = multi_buffer(memory)
            placement, full, size = held.placement, held.shape, held.capacity
        else:  # realized in this schedule, its buffer not made yet
            placement, full, size = self.placements[node], node.shape, prod(node.shape)
        if placement.axis is None:
            return linearize_index(idx, shape), size
        axis = placement.axis
        s = self.block(full[axis])
        if shape != full:  # a flat read: recover the shard axis' index from the flat one
            flat = linearize_index(idx, shape)
            idx = tuple(flat // prod(full[i + 1 :]) % full[i] for i in range(len(full)))
            idx = simplify_index(idx)
        local_idx = tuple(i - self.device_index * s if a == axis else i for a, i in enumerate(idx))
        local_axis = simplify_index(local_idx)[axis]
        if gate:
            self.store_gate = (idx_const(-1) < local_axis) & (local_axis < s)
        elif valid is None and (bad := self.outside_block(local_axis, s)) is not None:
            raise RuntimeError(f"multi: a kernel reads outside device {bad}'s shard of axis {axis} of {full}: "
                               f"index {local_axis.render()}, expected 0..{s - 1}")  # fmt: skip
        local_shape = tuple(s if a == axis else d for a, d in enumerate(full))
        return linearize_index(local_idx, local_shape), prod(local_shape)

    def outside_block(self, local: UOp, s: int) -> int | None:
        """A device for which index `local` can leave 0..s-1, else None (a read of another device's memory).

        Bounds of the symbolic index first; where the device offset did not cancel, each device's index on its own."""
        if local.vmin >= 0 and local.vmax < s:
            return None
        for d in range(int(self.device_index.src[0].arg)):
            on_device = simplify_index((local.substitute({self.device_index: idx_const(d)}),))[0]
            if not (on_device.vmin >= 0 and on_device.vmax < s):
                return d
        return None
