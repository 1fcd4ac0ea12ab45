"""The lazy `Tensor`: a UOp graph with numpy-style broadcasting and type promotion; nothing runs until it is needed.

`realize()`, `numpy()`, `item()` and `tolist()` schedule the graph into kernels and run them; afterwards every live
tensor that referenced a realized node points at its buffer, so work is never done twice.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import itertools
import math
import sys
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import fusegrad.mixin as _mixin
from fusegrad.device import Device, canonicalize_device
from fusegrad.dtype import (
    ConstType,
    DType,
    DTypeLike,
    _from_np_dtype,
    _to_np_dtype,
    dtypes,
    least_upper_dtype,
    least_upper_float,
    sum_acc_dtype,
    to_dtype,
)
from fusegrad.engine.cache import (
    Continuation,
    GradientBuild,
    GraphRecipe,
    Structure,
    cache_counts,
    graph_structure,
    note_gradient_build,
    record,
    replay_into,
    run_hit,
    schedule_cache,
    schedule_cache_on,
)
from fusegrad.engine.realize import capturing, run_schedule
from fusegrad.errors import (
    ArangeOverflowError,
    DTypeArgumentError,
    JitError,
    OpTypeError,
    OpValueError,
    UnknownDTypeError,
)
from fusegrad.helpers import (
    _METADATA,
    CAPTURING,
    DEBUG,
    TRACEMETA,
    TRACK_MATCH_STATS,
    argfix,
    colored,
    fetch,
    prod,
)
from fusegrad.mixin import call_metadata as _call_metadata
from fusegrad.mixin import recipes as _recipes
from fusegrad.mixin import traced as _mixin_traced
from fusegrad.mixin.elementwise import ElementwiseMixin, _in_float, _sigmoid, _tanh
from fusegrad.mixin.linalg import LinalgMixin
from fusegrad.mixin.movement import MovementMixin
from fusegrad.mixin.nn import NNMixin
from fusegrad.mixin.random import RandomMixin
from fusegrad.mixin.reduce import ReduceMixin
from fusegrad.uop import Ops
from fusegrad.uop.mathtraits import OperatorTrait
from fusegrad.uop.ops import LABELS, UOp, all_metadata
from fusegrad.uop.symbolic_shape import (
    check_concrete,
    max_size,
    shape_str,
    simplify_size,
    size_tensor,
    symbolic_reshape,
    symbolic_selection,
)

F = TypeVar("F", bound=Callable[..., Any])

_contiguous_ids = itertools.count()  # makes each Tensor.contiguous() node distinct (see there)

# every live Tensor, so realized results can be swapped into all of them (weak: never keeps a Tensor alive)
_all_tensors: dict[weakref.ReferenceType[Tensor], None] = {}
# the live Tensors whose node was not a realized buffer when set (the `uop` setter adds them): the only ones a realize
# can repoint, so _apply_map visits these instead of every live tensor (weights, gradients, optimiser state)
_lazy_tensors: dict[weakref.ReferenceType[Tensor], None] = {}
# the live Tensors that view a buffer (their node is the BUFFER, a movement view of it, or either after pending writes,
# AFTER), by that BUFFER: an assign visits these instead of every live tensor. Kept by the `uop` setter and _forget;
# an entry goes when its last tensor does, so the index keeps no buffer alive
_buffer_views: dict[UOp, dict[weakref.ReferenceType[Tensor], None]] = {}
_viewed_buffer: dict[weakref.ReferenceType[Tensor], UOp] = {}  # the reverse: tensor -> the buffer it is indexed under


def is_symbolic(shape: tuple[Any, ...]) -> bool:
    """Whether any size in `shape` is a UOp: symbolic_shape.is_symbolic as one C-level scan of the sizes' types (the
    frontend asks for every reshape and slice; UOp has no subclasses)."""
    return UOp in map(type, shape)


def _canonical_device(device: str | tuple[str, ...] | None) -> str | tuple[str, ...]:
    return canonicalize_device(device) if device is not None else Device.DEFAULT


def _traced(fn: F) -> F:
    """The mixins' `traced`: kernel names and VIZ labels name the Tensor method a node came from."""
    return _mixin_traced(fn)


def _broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting; the error names the op and both shapes."""
    if (known := _broadcast_shapes.get(shapes)) is not None:
        return known
    shape = _broadcast_shape_of(op, shapes)
    if len(_broadcast_shapes) >= _BROADCAST_SHAPES_KEPT:
        _broadcast_shapes.clear()
    if not any(map(is_symbolic, shapes)):  # a symbolic size is a node: kept here, it would outlive its graph
        _broadcast_shapes[shapes] = shape
    return shape


# the broadcast shape of shapes met before (int sizes only): a training step broadcasts the same few pairs each time
_broadcast_shapes: dict[tuple[tuple[int, ...], ...], tuple[int, ...]] = {}
_BROADCAST_SHAPES_KEPT = 4096


def _broadcast_shape_of(op: str, shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + s for s in shapes]
    out = []
    for axis, sizes in enumerate(zip(*padded, strict=True)):
        non_one = {s for s in sizes if s != 1}
        if len(non_one) > 1:
            desc = " and ".join(str(s) for s in shapes)
            raise ValueError(f"{op}: cannot broadcast shapes {desc}: dim {axis} is {' vs '.join(map(str, sizes))}")
        out.append(non_one.pop() if non_one else 1)
    return tuple(out)


_INT_ONLY = frozenset({int})  # the set of a plain shape's size types (bool and numpy ints take the checked path)
_PY_NUMBERS = (bool, int, float)  # the Python scalars an elementwise op takes as a constant


class Tensor(ElementwiseMixin, ReduceMixin, MovementMixin, NNMixin, RandomMixin, LinalgMixin, OperatorTrait):
    """A lazily evaluated n-d array on a device: ops build a graph, and it runs when a value is read.

    Ops raise ValueError for shape mismatches (naming the op and both shapes), TypeError for unsupported dtypes.

    Args:
        data: a number, a (nested) list, a numpy array, bytes (as uint8), or a UOp.
        device: where it lives (default: Device.DEFAULT).
        dtype: its element type (default: from the data).
        requires_grad: whether backward() fills its `.grad` (None: when an optimiser takes it).

    Examples:
        >>> (Tensor([1, 2]) * 2).tolist()
        [2, 4]
        >>> Tensor([[1.5]], dtype=dtypes.half).dtype, Tensor(np.arange(3)).shape
        (dtypes.half, (3,))
    """

    __slots__ = ("__weakref__", "_ctx", "_ref", "_uop", "grad", "requires_grad")
    training: ClassVar[bool] = False

    class train(contextlib.ContextDecorator):  # noqa: N801  # the reference spells it as a method-like name
        """Training mode for a block or function: `with Tensor.train(): opt.step()`; `Tensor.train(False)` for eval.

        Sets `Tensor.training` (read by dropout, batchnorm and the optimisers) and restores it on exit.

        Args:
            mode: True for training, False for evaluation.

        Examples:
            >>> with Tensor.train():
            ...     Tensor.training
            True
            >>> Tensor.training
            False
        """

        def __init__(self, mode: bool = True) -> None:
            self.mode = mode
            self.previous: list[bool] = []

        def __enter__(self) -> None:
            self.previous.append(Tensor.training)
            Tensor.training = self.mode

        def __exit__(self, *exc: object) -> None:
            Tensor.training = self.previous.pop()

    class test(train):  # noqa: N801
        """Evaluation mode for a block: `with Tensor.test(): model(x)`.

        Args:
            mode: False sets training mode instead.

        Examples:
            >>> with Tensor.train():
            ...     with Tensor.test():
            ...         Tensor.training
            False
        """

        def __init__(self, mode: bool = False) -> None:
            super().__init__(mode)

    def __init__(self, data: Any, device: str | tuple[str, ...] | None = None, dtype: DTypeLike | None = None,
                 requires_grad: bool | None = None) -> None:  # fmt: skip
        # a node the frontend just built: the hot path of every op (~340 Tensors a GPT training step)
        uop = data if type(data) is UOp and dtype is None else _init_uop(data, device, dtype)
        self._ref: weakref.ReferenceType[Tensor] = weakref.ref(self, _forget)
        _all_tensors[self._ref] = None
        base_op = uop.base.op
        if base_op is Ops.BUFFER or base_op is Ops.AFTER:  # a view of memory: the setter indexes it by its buffer
            self.uop = uop
        else:  # the `uop` setter's work for a node that views no buffer, on a tensor that indexed none yet
            self._uop: UOp = uop
            if base_op is not Ops.CONST:
                _lazy_tensors[self._ref] = None
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        if (meta := _METADATA.get()) is not None:
            known = uop.__dict__  # all_metadata's entry, written directly (a node keeps the first label it got)
            if LABELS not in known:
                known[LABELS] = (meta,)

    # *** properties ***

    @property
    def uop(self) -> UOp:
        """This tensor's node in the lazy graph: a view of a realized buffer, or what computes it.

        Examples:
            >>> (Tensor([1.0, 2.0]) + 1).uop.op
            Ops.ADD
        """
        return self._uop

    @uop.setter
    def uop(self, value: UOp) -> None:
        self._uop = value
        base = value.base
        if base.op is Ops.BUFFER:
            buffer: UOp | None = base
        else:  # most nodes a tensor holds compute something: no buffer, unless it is one after pending writes
            buffer = _viewed_buffer_of(base) if base.op is Ops.AFTER else None
        if (old := _viewed_buffer.get(self._ref)) is not buffer:
            if old is not None:
                _unindex_view(self._ref, old)
            if buffer is not None:
                _viewed_buffer[self._ref] = buffer
                _buffer_views.setdefault(buffer, {})[self._ref] = None
        if base.op is not Ops.BUFFER and base.op is not Ops.CONST:  # not settled (_is_settled)
            _lazy_tensors[self._ref] = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each axis, as a tuple (an entry may be a bound symbolic size).

        Examples:
            >>> Tensor.ones(2, 3).shape
            (2, 3)
        """
        return self._uop.shape

    @property
    def dtype(self) -> DType:
        """The element type, a DType such as `dtypes.float32`.

        Examples:
            >>> Tensor([1]).dtype, Tensor([1.0]).dtype
            (dtypes.int, dtypes.float)
        """
        return self._uop.dtype

    @property
    def device(self) -> str | tuple[str, ...]:
        """The device name (`"CPU"`), or a tuple of names for a tensor sharded over several devices.

        Examples:
            >>> Tensor([1], device="PYTHON").device, Tensor([1, 2]).shard(("CPU", "CPU:1")).device
            ('PYTHON', ('CPU', 'CPU:1'))
        """
        return self._uop.device

    @property
    def ndim(self) -> int:
        """The number of axes.

        Examples:
            >>> Tensor.ones(2, 3).ndim, Tensor(1).ndim
            (2, 0)
        """
        return len(self._uop.shape)

    def numel(self) -> int:
        """The number of elements (the product of the shape; 1 for a 0-d tensor).

        Returns:
            The element count.

        Examples:
            >>> Tensor.ones(2, 3).numel(), Tensor(1).numel()
            (6, 1)
        """
        return prod(self.shape)

    def size(self, dim: int | None = None) -> int | tuple[int, ...]:
        """The shape, or the length of axis `dim` (negative counts from the end), like torch.

        Args:
            dim: an axis, or None for the whole shape.

        Returns:
            The shape tuple, or one size.

        Raises:
            IndexError: an axis out of range.

        Examples:
            >>> Tensor.zeros(2, 3).size(), Tensor.zeros(2, 3).size(-1)
            ((2, 3), 3)
        """
        return self.shape if dim is None else self.shape[self._axis(dim, "size")]

    def element_size(self) -> int:
        """Bytes per element.

        Returns:
            The dtype's itemsize.

        Examples:
            >>> Tensor([1], dtype=dtypes.int16).element_size()
            2
        """
        return self.dtype.itemsize

    def nbytes(self) -> int:
        """Bytes of all elements.

        Returns:
            numel() * element_size().

        Examples:
            >>> Tensor([8, 9], dtype=dtypes.float).nbytes()
            8
        """
        return self.numel() * self.element_size()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # by identity (== is elementwise), at C speed: every Tensor is hashed once for its weak reference's index
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        realized = self._uop.base.op is Ops.BUFFER
        state = " (realized)" if realized else ""
        return f"<Tensor {shape_str(self.shape)} on {self.device} with grad {self.grad!r}, {self.dtype}{state}>"

    # *** creation ***

    @staticmethod
    def empty(
        *shape: Any, device: str | tuple[str, ...] | None = None, dtype: DTypeLike | None = None, **kwargs: Any
    ) -> Tensor:
        """An uninitialised tensor: memory is allocated on first use and never written.

        Args:
            *shape: the shape, as ints or one tuple.
            device: where it lives (default: Device.DEFAULT).
            dtype: its dtype (default: the default float).
            **kwargs: requires_grad.

        Returns:
            A tensor whose values are whatever the memory held.

        Examples:
            >>> Tensor.empty(2, 3, dtype=dtypes.int32).shape
            (2, 3)
        """
        shp = _shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if is_symbolic(shp):  # memory for the largest size, viewed as its first prod(shape) elements
            buf = UOp.new_buffer(_canonical_device(device), max_size(prod(shp)), dt)
            return Tensor(buf.shrink(((0, prod(shp)),)).reshape(shp), **kwargs)
        buf = UOp.new_buffer(_canonical_device(device), prod(shp), dt)
        return Tensor(buf.reshape(shp), **kwargs)

    @staticmethod
    def from_blob(ptr: int, shape: tuple[int, ...], **kwargs: Any) -> Tensor:
        """A tensor over external memory at address `ptr` (no copy): reads see it, writes (`assign`) change it.

        Lifetime rule: the memory is not owned: it is never freed here, and the caller must keep it alive (and the
        same size) for as long as this tensor, or any tensor still reading its buffer, is used. The device must address
        host memory (CPU, NPY, ...).

        Args:
            ptr: the address of the first element.
            shape: the tensor's shape (an int for 1-d).
            **kwargs: `Tensor.empty`'s keywords: `dtype` (the memory's element type), `device`, `requires_grad`.

        Returns:
            The tensor, backed by that memory.

        Raises:
            ValueError: a null or non-integer pointer, or a multi-device target.

        Examples:
            >>> a = np.array([1.0, 2.0], dtype=np.float32)
            >>> t = Tensor.from_blob(a.ctypes.data, (2,), dtype=dtypes.float32, device="CPU")
            >>> t.tolist()
            [1.0, 2.0]
            >>> Tensor.from_blob(0, (2,))
            Traceback (most recent call last):
            ...
            ValueError: from_blob: expected a non-null integer address, got 0
        """
        if not isinstance(ptr, int) or ptr == 0:
            raise ValueError(f"from_blob: expected a non-null integer address, got {ptr!r}")
        out = Tensor.empty(*_shape_arg((shape,) if isinstance(shape, int) else tuple(shape)), **kwargs)
        if isinstance(out.device, tuple):
            raise ValueError(f"from_blob: memory lives on one device, got {out.device}")
        out.uop.base.buffer.allocate(external_ptr=ptr)
        return out

    @staticmethod
    def full(
        shape: Any,
        fill_value: ConstType,
        dtype: DTypeLike | None = None,
        device: str | tuple[str, ...] | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """A tensor of `shape` filled with `fill_value` (a constant: no memory until realized or written).

        Args:
            shape: the shape.
            fill_value: the value.
            dtype: the dtype (default: from the value).
            device: the device (default: Device.DEFAULT).
            **kwargs: requires_grad.

        Returns:
            A constant tensor.

        Examples:
            >>> Tensor.full((2, 2), 7, dtypes.int32).tolist()
            [[7, 7], [7, 7]]
        """
        shp = _shape_arg((shape,) if isinstance(shape, int) else tuple(shape))
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        return Tensor(UOp.const_tensor(dt, fill_value, _canonical_device(device), shp), **kwargs)

    @staticmethod
    def zeros(*shape: Any, **kwargs: Any) -> Tensor:
        """A tensor of `shape` (ints or one tuple) filled with 0, float32 unless `dtype=` says otherwise; takes
        `device=`.

        Args:
            *shape: the shape, as ints or one tuple.
            **kwargs: dtype, device, requires_grad.

        Returns:
            A constant tensor (no memory until realized or written).

        Examples:
            >>> Tensor.zeros(2, 3).shape, Tensor.zeros(2, dtype=dtypes.int32).tolist()
            ((2, 3), [0, 0])
        """
        kwargs.setdefault("dtype", dtypes.default_float)
        return Tensor.full(_shape_arg(shape), 0, **kwargs)

    @staticmethod
    def ones(*shape: Any, **kwargs: Any) -> Tensor:
        """A tensor of `shape` (ints or one tuple) filled with 1, float32 unless `dtype=` says otherwise; takes
        `device=`.

        Args:
            *shape: the shape, as ints or one tuple.
            **kwargs: dtype, device, requires_grad.

        Returns:
            A constant tensor (no memory until realized or written).

        Examples:
            >>> Tensor.ones(2).tolist()
            [1.0, 1.0]
        """
        kwargs.setdefault("dtype", dtypes.default_float)
        return Tensor.full(_shape_arg(shape), 1, **kwargs)

    @staticmethod
    def arange(
        start: int | float,
        stop: int | float | None = None,
        step: int | float = 1,
        dtype: DTypeLike | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Evenly spaced values in [start, stop); computed on the device (a cumulative sum of ones).

        Args:
            start: the first value (the stop, when stop is None).
            stop: one past the last value.
            step: the distance between values (not 0).
            dtype: the dtype (default: int for int arguments, else the default float).
            **kwargs: device, requires_grad.

        Returns:
            A 1-d tensor.

        Raises:
            ValueError: step 0.
            ArangeOverflowError: (a ValueError) values that overflow the dtype.

        Examples:
            >>> Tensor.arange(4).tolist(), Tensor.arange(1, 2, 0.25).tolist()
            ([0, 1, 2, 3], [1.0, 1.25, 1.5, 1.75])
        """
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be 0")
        if is_symbolic((start, stop, step)):  # a symbolic length (symbolic_shape.py): 0, 1, ..., stop - 1
            if not isinstance(stop, UOp) or start != 0 or step != 1:
                raise ValueError(
                    f"arange: a symbolic length takes start 0, step 1 and a symbolic stop: {start=} {step=}"
                )
            device = _canonical_device(kwargs.pop("device", None))
            dt = to_dtype(dtype) if dtype is not None else dtypes.int32
            return Tensor(UOp.iota(stop, device), **kwargs).cast(dt)
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
        n = max(0, math.ceil((stop - start) / step))
        ends = (start, start + (n - 1) * step)  # the first and last values
        if n and dtypes.is_int(dt) and not all(dtypes.min(dt) <= v <= dtypes.max(dt) for v in ends):
            raise ArangeOverflowError(f"arange: [{start}, {stop}) is not representable in {dt}")
        positions = Tensor(UOp.iota(n, _canonical_device(kwargs.pop("device", None))), **kwargs)
        return (positions.cast(dt) * step + start).cast(dt) if (step != 1 or start != 0) else positions.cast(dt)

    def full_like(
        self,
        fill_value: ConstType,
        dtype: DTypeLike | None = None,
        device: str | tuple[str, ...] | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """A tensor shaped like this one filled with `fill_value`; dtype and device default to this one's.

        Args:
            fill_value: the value.
            dtype: the dtype (default: this one's).
            device: the device (default: this one's).
            **kwargs: requires_grad.

        Returns:
            A constant tensor.

        Examples:
            >>> Tensor([1, 2]).full_like(7).tolist()
            [7, 7]
        """
        dt, dev = dtype if dtype is not None else self.dtype, device if device is not None else self.device
        return Tensor.full(self.shape, fill_value, dt, dev, **kwargs)

    def const_like(self, b: ConstType, dtype: DTypeLike | None = None) -> Tensor:
        """A constant tensor of value `b` with this tensor's shape and device (and dtype, unless given); it takes no
        memory until used.

        Args:
            b: the value.
            dtype: the dtype (default: this one's).

        Returns:
            A constant tensor.

        Examples:
            >>> Tensor([1.0, 2.0]).const_like(0.5).tolist()
            [0.5, 0.5]
        """
        return self.full_like(b, dtype=dtype if dtype is not None else self.dtype)

    def zeros_like(self, **kwargs: Any) -> Tensor:
        """Zeros with this tensor's shape, dtype and device (override with `dtype=`, `device=`).

        Args:
            **kwargs: dtype, device, requires_grad.

        Returns:
            A constant tensor.

        Examples:
            >>> Tensor([1, 2]).zeros_like().tolist(), Tensor([1, 2]).zeros_like(dtype=dtypes.float).tolist()
            ([0, 0], [0.0, 0.0])
        """
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs: Any) -> Tensor:
        """Ones with this tensor's shape, dtype and device (override with `dtype=`, `device=`).

        Args:
            **kwargs: dtype, device, requires_grad.

        Returns:
            A constant tensor.

        Examples:
            >>> Tensor([1, 2]).ones_like().tolist()
            [1, 1]
        """
        return self.full_like(1, **kwargs)

    def empty_like(
        self, dtype: DTypeLike | None = None, device: str | tuple[str, ...] | None = None, **kwargs: Any
    ) -> Tensor:
        """Uninitialised memory shaped like this one; dtype and device default to this one's.

        Args:
            dtype: the dtype (default: this one's).
            device: the device (default: this one's).
            **kwargs: requires_grad.

        Returns:
            An uninitialised tensor.

        Examples:
            >>> Tensor([[1, 2]]).empty_like().shape
            (1, 2)
        """
        dt, dev = dtype if dtype is not None else self.dtype, device if device is not None else self.device
        return Tensor.empty(self.shape, dtype=dt, device=dev, **kwargs)

    # *** running ***

    @staticmethod
    def _sink(tensors: Sequence[Tensor]) -> UOp:
        return UOp.sink(*[t._uop for t in tensors])

    def kernelize(self, *lst: Tensor) -> Tensor:
        """Build kernels for this tensor (and `lst`) without running them; `Tensor.kernelize(a, b)` works too.

        Args:
            *lst: more tensors to kernelize together with this one.

        Returns:
            self, whose graph now ends in kernels (a later realize or schedule runs them).

        Examples:
            >>> t = Tensor([1, 2]) + 1
            >>> t.kernelize() is t, t.tolist()
            (True, [2, 3])
        """
        _kernelize([self, *lst])
        return self

    def schedule(self, *lst: Tensor) -> list[Any]:
        """The ExecItems that would compute this tensor (and `lst`), in run order. Nothing runs.

        Once `run_schedule` has run them, the tensors read their buffers, so a later schedule does not include these
        kernels again.

        Args:
            *lst: more tensors to schedule together with this one.

        Returns:
            The list of ExecItems (kernels and copies).

        Examples:
            >>> t = Tensor([1, 2]) + 1
            >>> len(t.schedule())
            1
        """
        from fusegrad.engine.schedule import create_schedule

        _kernelize([self, *lst])
        sink = Tensor._sink([self, *lst])
        schedule = create_schedule(sink)
        if schedule:
            assigns = _kernel_assigns(sink)
            schedule[-1].settle = functools.partial(settle_assigns, assigns)
        return schedule

    def schedule_with_vars(self, *lst: Tensor) -> tuple[list[Any], dict[str, builtins.int]]:
        """`schedule()` and the values bound to the symbolic variables it uses (each ExecItem also holds its own).

        Args:
            *lst: more tensors to schedule together with this one.

        Returns:
            (the ExecItems in run order, variable name -> int value).

        Examples:
            >>> items, var_vals = (Tensor([1, 2]) + 1).schedule_with_vars()
            >>> len(items), var_vals
            (1, {})
        """
        items = self.schedule(*lst)
        var_vals: dict[str, builtins.int] = {}
        for item in items:
            var_vals.update(item.fixedvars)
        return items, var_vals

    def realize(self, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
        """Compute this tensor (and `lst`) now; `Tensor.realize(a, b)` computes both in one schedule. A realize shaped
        like an earlier one (same ops, shapes, dtypes, devices and constants) reruns its schedule (SCHEDULE_CACHE).

        Args:
            *lst: more tensors to compute in the same schedule.
            do_update_stats: count the kernels in GlobalCounters.

        Returns:
            self, now backed by a buffer.

        Examples:
            >>> a, b = Tensor([1, 2]) + 1, Tensor([3]) * 2
            >>> _ = Tensor.realize(a, b)
            >>> a.tolist(), b.tolist()
            ([2, 3], [6])
        """
        realize_tensors([self, *lst], do_update_stats=do_update_stats)
        return self

    @staticmethod
    def _realize_alone(*tensors: Tensor) -> None:
        """`realize` for tensors whose nodes no other live tensor's graph holds (a random draw's key and the generator
        state): the same path, repointing only them (see realize_tensors)."""
        realize_tensors(tensors, alone=True)

    def contiguous(self) -> Tensor:
        """This tensor's values in memory of its own, row-major. A realized buffer is returned as it is; otherwise each
        call makes a distinct node, so two `Tensor.ones(3).contiguous()` realized together still get two buffers and
        an assign into one never shows in the other.

        Returns:
            The tensor backed by (or to be backed by) a buffer of its own.

        Examples:
            >>> w = Tensor.zeros(4).contiguous().realize()  # a constant made writable
            >>> w.assign(Tensor.ones(4)).tolist()
            [1.0, 1.0, 1.0, 1.0]
        """
        if self._uop.op is Ops.BUFFER:
            return self
        return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self._uop,), arg=next(_contiguous_ids)))

    def clone(self, device: str | tuple[str, ...] | None = None) -> Tensor:
        """A copy of this tensor in a buffer of its own (on `device` if given), same shape and dtype; its `.grad`, if
        any, is cloned too. Gradients flow through it like `contiguous()`.

        Args:
            device: where the copy goes (default: this tensor's device).

        Returns:
            The copy.

        Examples:
            >>> a = Tensor([1, 2]).realize()
            >>> b = a.clone()
            >>> _ = b.assign(b + 1).realize()
            >>> a.tolist(), b.tolist()
            ([1, 2], [2, 3])
        """
        from fusegrad.schedule.views import is_storage_device

        src = self if device is None or _canonical_device(device) == self.device else self.to(device)
        # a write into a fresh buffer (the reference's clone), not CONTIGUOUS(src): the scheduler stores a CONTIGUOUS
        # of a COPY in the COPY's own buffer, which the tensor holding that COPY (`Tensor(ndarray)`) then shares
        if is_storage_device(src.device):  # DISK/NPY memory is the file or array itself: a view of it, as before
            copy = UOp(Ops.CONTIGUOUS, src.dtype, (src._uop,), arg=next(_contiguous_ids))
        else:
            copy = _empty_like(src).assign(src._uop)
        ret = Tensor(copy, requires_grad=self.requires_grad)  # no other tensor reads the new buffer: no AFTER needed
        if self.grad is not None:
            ret.grad = self.grad.clone(device)
        return ret

    def replace(self, x: Tensor) -> Tensor:
        """Point this tensor at `x`'s data (dtype and device may differ; shapes must match) and return self.

        Args:
            x: the tensor whose data this one takes (same shape).

        Returns:
            self.

        Raises:
            ValueError: a shape mismatch.

        Examples:
            >>> w = Tensor([1.0, 2.0])
            >>> w.replace(w.cast(dtypes.half)).dtype  # converts a weight in place
            dtypes.half
        """
        if self.shape != x.shape:
            raise ValueError(f"replace: shape mismatch: got {x.shape}, expected {self.shape}")
        self.uop = x._uop
        return self

    def contiguous_backward(self) -> Tensor:
        """The same values, but the gradient flowing back through here is made contiguous (realized) before use.

        A barrier that stops the backward graph from being fused across it; the forward value is unchanged.

        Returns:
            A tensor with the same values, requires_grad as this one.

        Examples:
            >>> x = Tensor([1.0, 2.0], requires_grad=True)
            >>> _ = (x.contiguous_backward() * 2).sum().backward()
            >>> x.grad.tolist()
            [2.0, 2.0]
        """
        return Tensor(UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self._uop,)), requires_grad=self.requires_grad)

    def _buffer(self) -> Any:
        """The realized, contiguous Buffer holding this tensor's values (a multi-device tensor: gathered first)."""
        _recipes.host_events += 1  # a value read: an op recording this depends on data
        if capturing and CAPTURING.value:  # a replay would return the value read now, never the new one
            raise JitError("reading tensor data during a TinyJit capture: the value would be baked into every replay")
        if isinstance(self.device, tuple):
            return self.to(self.device[0])._buffer()
        u = self._uop
        while u.op is Ops.RESHAPE:  # reshapes of a buffer read its memory as it is (a reduce's keepdim and squeeze)
            u = u.src[0]
        if u.op is Ops.BUFFER:
            return u.buffer.ensure_allocated()  # realized and contiguous (settled): a realize would find nothing to run
        return self.contiguous().realize().uop.buffer.ensure_allocated()

    def numpy(self) -> Any:
        """The values as a numpy array (a copy).

        Returns:
            A numpy array of the tensor's shape (bfloat16 and fp8 as float32).

        Raises:
            SymbolicError: (an AssertionError) a symbolic shape.
            TypeError: a dtype numpy cannot hold.

        Examples:
            >>> Tensor([[1, 2]]).numpy()
            array([[1, 2]], dtype=int32)
        """
        import numpy as np

        shape = self.shape
        if not all(type(s) is int for s in shape):  # int sizes (the usual case) need no symbolic check
            check_concrete(shape, "numpy")
        if self.dtype in (dtypes.bfloat16, *dtypes.fp8s):  # numpy has no such dtype: float32 holds every value
            return self.float().numpy()
        if (np_dt := _to_np_dtype(self.dtype)) is None:
            raise TypeError(f"numpy: no numpy dtype for {self.dtype}; cast first")
        if self.numel() == 0:
            return np.zeros(shape, dtype=np_dt)
        # one copy, straight out of the buffer's memory
        return np.frombuffer(self._buffer().as_memoryview(), dtype=np_dt).reshape(shape).copy()

    def tolist(self) -> Any:
        """The values as nested Python lists (a number for a 0-d tensor).

        Returns:
            Nested lists of Python numbers.

        Examples:
            >>> Tensor([[1, 2]]).tolist(), Tensor(3).tolist()
            ([[1, 2]], 3)
        """
        return self.numpy().tolist()

    def item(self) -> ConstType:
        """The value of a one-element tensor as a Python number (runs the graph if needed).

        Returns:
            An int, float or bool.

        Raises:
            ValueError: the tensor does not have exactly one element.

        Examples:
            >>> Tensor([[3]]).item(), Tensor(2.5).item()
            (3, 2.5)
        """
        if self.numel() != 1:
            raise ValueError(f"item: only a tensor with one element has an item, got shape {self.shape}")
        return self.numpy().reshape(()).item()  # type: ignore[no-any-return]

    def data(self) -> memoryview[Any]:
        """The realized contents as a memoryview of the device buffer, in C order (runs the graph if needed).

        The view has the dtype's struct format ("f" for float32, "i" for int32, ...) and the tensor's shape.

        Returns:
            A memoryview of format `self.dtype.fmt` and shape `self.shape` (an empty one for a tensor with no elements).

        Raises:
            OpTypeError: (a TypeError) a dtype without a buffer format (bfloat16, fp8; half before Python 3.12).

        Examples:
            >>> mv = Tensor([[1, 2], [3, 4]], dtype=dtypes.int32).data()
            >>> mv.format, mv.shape, mv.tolist()
            ('i', (2, 2), [[1, 2], [3, 4]])
            >>> Tensor([1.0], dtype=dtypes.bfloat16).data()
            Traceback (most recent call last):
            ...
            fusegrad.errors.OpTypeError: data: a dtypes.bfloat16 tensor has no typed memoryview ...
        """
        check_concrete(self.shape, "data")
        fmt = self.dtype.fmt
        if fmt is None or (fmt == "e" and sys.version_info < (3, 12)):
            why = "Python's memoryview has no format for it" if fmt is None else "memoryview casts to half need 3.12+"
            raise OpTypeError(f"data: a {self.dtype} tensor has no typed memoryview ({why}); use .numpy() instead")
        if 0 in self.shape:
            return memoryview(bytearray(0)).cast(fmt)  # type: ignore[call-overload,no-any-return]  # a struct code
        return self._buffer().as_memoryview().cast(fmt, self.shape)  # type: ignore[no-any-return]

    def assign(self, x: Tensor | ConstType | Any) -> Tensor:
        """Write `x` into this tensor's memory (in place); returns self.

        Args:
            x: a Tensor of the same shape, a number (filled everywhere), or data `Tensor()` takes (a numpy array, a
                list), made on this tensor's device in its dtype.

        Returns:
            self, lazily holding the new values.

        Raises:
            ValueError: a shape that differs.
            TypeError: a dtype or device that differs.

        Examples:
            >>> w = Tensor.zeros(3).contiguous().realize()
            >>> w.assign(Tensor([1.0, 2.0, 3.0])).tolist(), w.assign(7).tolist()
            ([1.0, 2.0, 3.0], [7.0, 7.0, 7.0])
        """
        _recipes.host_events += 1  # a write: an op doing this can't be rebuilt from a recipe
        if isinstance(x, Tensor):
            xt = x
        elif isinstance(x, (bool, int, float)):
            xt = self.full_like(x)
        else:
            xt = Tensor(x, device=self.device, dtype=self.dtype)
        if xt.shape != self.shape:
            raise ValueError(f"assign: shape {xt.shape} does not match the target's {self.shape}")
        if xt.device != self.device:
            raise ValueError(f"assign: value on {xt.device} but target on {self.device}; use .to() first")
        if xt.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {xt.dtype} does not match the target's {self.dtype}")
        _check_storage_write(self._uop, xt._uop)
        if 0 in self.shape:  # nothing to write (`t[2:2] = v`): no ASSIGN, whose empty kernel others would wait for
            return self
        self.uop = _write_target(self._uop)
        if self._uop.base.op not in (Ops.BUFFER, Ops.AFTER) and not _is_kernelized_view(self._uop):
            self.uop = xt._uop
            return self
        self._write(self._uop.assign(xt._uop))
        return self

    def _write(self, assigned: UOp) -> None:
        """Hold `assigned`, an ASSIGN into this tensor's memory (checked by the caller), and point the other tensors
        that view that memory after it. The tail of `assign`; an optimiser's rebuilt step (nn/optim.py) calls it
        with the ASSIGN it rebuilt."""
        target_base = self._uop.base
        self.uop = assigned
        # every other tensor reading this memory sees the write once it has run
        after = UOp(Ops.AFTER, target_base.dtype, (target_base, self._uop))
        # only views of the same buffer can read target_base (a view of it after an earlier write that has run, too:
        # settled first, it reads the buffer itself)
        buffer = _viewed_buffer_of(target_base)
        for ref in list(_buffer_views.get(buffer, ()) if buffer is not None else ()):
            if (t := ref()) is None or t is self:
                continue
            if t._uop.base.op is Ops.AFTER:
                t.uop = _settle_base(t._uop)
            if t._uop.base is target_base:
                t.uop = t._uop.substitute({target_base: after})

    def to(self, device: str | tuple[str, ...] | None) -> Tensor:
        """This tensor on `device`; a tuple of devices replicates it on each, one device gathers a multi-device one.

        Args:
            device: a device name, a tuple of them, or None for Device.DEFAULT.

        Returns:
            The tensor on that device (self when it is there already).

        Examples:
            >>> Tensor([1, 2]).to("CPU:1").device
            'CPU:1'
        """
        dev = _canonical_device(device)
        return self if dev == self.device else Tensor(self._uop.copy_to_device(dev))

    def shard(self, devices: tuple[str, ...] | list[str], axis: builtins.int | None = None) -> Tensor:
        """Split along `axis` into equal blocks, block d on `devices[d]` (axis None: replicate, like `to`).

        The result is one logical tensor of the same shape whose device is the tuple; ops on it run on every device.
        Args:
            devices: the device names, one block each.
            axis: the axis to split, or None to replicate.

        Returns:
            The sharded tensor.

        Raises:
            ValueError: the axis does not divide evenly.
            IndexError: an axis out of range.

        Examples:
            >>> x = Tensor.ones(4, 2).shard(("CPU", "CPU:1"), axis=0)
            >>> x.device, x.shape, x.sum().item()
            (('CPU', 'CPU:1'), (4, 2), 8.0)
        """
        dev = _canonical_device(tuple(devices))
        if not isinstance(dev, tuple) or axis is None:
            return self.to(dev)
        a = self._axis(axis, "shard")
        if self.shape[a] % len(dev) != 0:
            raise ValueError(
                f"shard: axis {a} of shape {self.shape} does not split evenly: got size {self.shape[a]}, "
                f"expected a multiple of the device count {len(dev)}"
            )
        # from several devices too: the scheduler keeps blocks in place where it can (schedule/multi.py)
        return Tensor(UOp(Ops.COPY, self.dtype, (self._uop, UOp(Ops.DEVICE, arg=dev)), a))

    def to_(self, device: str | tuple[str, ...] | None) -> Tensor:
        """In place: this tensor (and its gradient) now lives on `device`; returns self.

        Args:
            device: a device name, or a tuple of them.

        Returns:
            self.

        Examples:
            >>> t = Tensor([1, 2])
            >>> t.to_("CPU:1") is t, t.device
            (True, 'CPU:1')
        """
        return self._moved_in_place(self.to(device), None if self.grad is None else self.grad.to(device))

    def shard_(self, devices: tuple[str, ...] | list[str], axis: builtins.int | None = None) -> Tensor:
        """In place: this tensor (and its gradient) is now sharded like `shard(devices, axis)`; returns self.

        Args:
            devices: the device names.
            axis: the axis to split, or None to replicate.

        Returns:
            self.

        Examples:
            >>> t = Tensor([1, 2, 3, 4])
            >>> t.shard_(("CPU", "CPU:1"), axis=0).device
            ('CPU', 'CPU:1')
        """
        grad = None if self.grad is None else self.grad.shard(devices, axis)
        return self._moved_in_place(self.shard(devices, axis), grad)

    def shard_like(self, y: Tensor) -> Tensor:
        """This tensor placed like `y`: on y's device, or sharded over y's devices along y's shard axis.

        Args:
            y: the tensor whose placement to copy (a bias placed like its weight).

        Returns:
            The moved or sharded tensor.

        Examples:
            >>> w = Tensor([[1, 2], [3, 4]]).shard(("CPU", "CPU:1"), axis=0)
            >>> Tensor([[5, 6], [7, 8]]).shard_like(w).device
            ('CPU', 'CPU:1')
            >>> Tensor([1]).shard_like(Tensor([2], device="CPU")).device
            'CPU'
        """
        if isinstance(y.device, str):
            return self.to(y.device)
        return self.shard(y.device, y._uop.axis)

    @staticmethod
    def from_url(url: str, gunzip: builtins.bool = False, **kwargs: Any) -> Tensor:
        """The bytes at `url` as a 1-d uint8 tensor, downloaded once into the cache by `helpers.fetch`.

        It lives on DISK (memory-mapped) unless `device=` moves it; other keywords go to `Tensor.empty`. A local path
        (starting with "/" or ".") is read where it is, without copying.

        Args:
            url: what to download (http or https), or a local path.
            gunzip: keep the decompressed bytes of a gzip download.
            **kwargs: `device` (where to move the bytes), and `Tensor.empty`'s other keywords.

        Returns:
            A uint8 tensor of the file's size.

        Raises:
            FetchError: (an OSError, raised by fetch) the download failed; the message names the URL.

        Examples:
            >>> import tempfile
            >>> path = tempfile.mkdtemp() + "/hi.bin"
            >>> _ = open(path, "wb").write(b"hi")
            >>> Tensor.from_url(path, device="CPU").tolist()
            [104, 105]
            >>> Tensor.from_url("bogus://example")
            Traceback (most recent call last):
            ...
            fusegrad.helpers.FetchError: fetch: cannot download bogus://example: unknown url type: bogus
        """
        path = fetch(url, gunzip=gunzip)
        device = kwargs.pop("device", None)
        on_disk = Tensor.empty(path.stat().st_size, dtype=dtypes.uint8, device=f"disk:{path}", **kwargs)
        return on_disk if device is None else on_disk.to(device)

    def _moved_in_place(self, moved: Tensor, grad: Tensor | None) -> Tensor:
        self.uop, self.grad = moved._uop, grad
        return self

    # *** autograd ***
    # requires_grad is None (unset), True or False on each Tensor and is not propagated by ops: backward() finds the
    # tensors that need a gradient by looking for their nodes in the loss's graph (the graph is the record of ops).
    # Gradients need that graph, so call backward() before realizing the loss or the activations it is built from.

    def requires_grad_(self, requires_grad: builtins.bool = True) -> Tensor:
        """Mark this tensor (leaf or intermediate) to receive `.grad` from `backward()`; returns self.

        Args:
            requires_grad: True to receive gradients, False to stop.

        Returns:
            self.

        Examples:
            >>> w = Tensor([3.0]).requires_grad_()
            >>> _ = (w * w).sum().backward()
            >>> w.grad.tolist()
            [6.0]
        """
        self.requires_grad = requires_grad
        return self

    def detach(self) -> Tensor:
        """The same values, cut off from the graph: no gradient flows through the result.

        Returns:
            A tensor that does not require grad.

        Examples:
            >>> w = Tensor([2.0], requires_grad=True)
            >>> _ = (w * w.detach()).sum().backward()  # d/dw of w * const
            >>> w.grad.tolist()
            [2.0]
        """
        return Tensor(self._uop.detach(), requires_grad=False)

    def gradient(
        self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: builtins.bool = False
    ) -> list[Tensor]:
        """d(self)/d(target) for each target, as lazy Tensors shaped like the targets.

        `gradient` is d(loss)/d(self) (default: ones; then self must have one element). A target in the graph whose
        derivative is zero everywhere (`x.sign()`, a comparison, a detached path) and an empty target get zeros, like
        torch. Raises ValueError for a missing or mis-shaped `gradient`, TypeError for non-float tensors, and
        RuntimeError for a target outside the result's graph unless `materialize_grads` (then its gradient is zeros).

        Args:
            *targets: the tensors to differentiate with respect to.
            gradient: d(loss)/d(self) (default: ones).
            materialize_grads: give zeros for targets outside the graph instead of raising.

        Returns:
            One gradient per target.

        Raises:
            ValueError: a missing or mis-shaped gradient.
            TypeError: tensors that are not float.
            RuntimeError: a target outside the result's graph (without materialize_grads).

        Examples:
            >>> x = Tensor([3.0])
            >>> (x * x).sum().gradient(x)[0].tolist()
            [6.0]
        """
        root_grad = self._root_gradient(gradient, "gradient")
        for i, t in enumerate(targets):
            if not dtypes.is_float(t.dtype):
                raise TypeError(f"gradient: only float tensors have gradients, got {t.dtype} for target {i}")
        grads = _gradients(self._uop, root_grad._uop, {t._uop for t in targets})
        ret = []
        for i, t in enumerate(targets):
            if (g := grads.get(t._uop)) is not None:
                ret.append(Tensor(g))
            elif materialize_grads or t.numel() == 0 or t._uop in self._uop.toposort():
                ret.append(t.zeros_like(requires_grad=False))
            else:
                raise RuntimeError(f"gradient: the result does not depend on target {i} (shape {t.shape})")
        return ret

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Add d(self)/d(t) to `t.grad` for every tensor `t` with requires_grad=True that self depends on.

        Args:
            gradient: d(loss)/d(self); may be omitted only for a one-element self.

        Returns:
            self.

        Raises:
            ValueError: no gradient for a self with more than one element.
            RuntimeError: nothing self depends on requires a gradient.

        Examples:
            >>> w = Tensor([2.0], requires_grad=True)
            >>> _ = (w * w).sum().backward()
            >>> w.grad.tolist()
            [4.0]
        """
        root_grad = self._root_gradient(gradient, "backward")
        # the graph's nodes from the walk Tensor.gradient keys its recipe with: kept in the root, so it walks once
        in_graph = graph_structure(UOp.sink(self._uop), remember_first=True).position
        params = [
            t for ref in list(_all_tensors) if (t := ref()) is not None and t.requires_grad and t._uop in in_graph
        ]
        if not params:
            raise RuntimeError(
                f"backward: the {self.shape} result depends on no tensor with requires_grad=True "
                "(or its graph was realized before backward)"
            )
        for t, g in zip(params, self.gradient(*params, gradient=root_grad, materialize_grads=True), strict=True):
            assert g.shape == t.shape, f"backward: gradient shape {g.shape} differs from the tensor's {t.shape}"
            if t.grad is None:
                t.grad = g
            else:
                t.grad.assign(t.grad + g)
        return self

    def _root_gradient(self, gradient: Tensor | None, op: str) -> Tensor:
        """d(loss)/d(self): the given one, checked, or ones when self has exactly one element."""
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"{op}: only float tensors have gradients, got {self.dtype}")
        if gradient is None:
            if self.numel() != 1:
                raise ValueError(
                    f"{op}: an implicit gradient needs a one-element result, got shape {self.shape}; pass gradient="
                )
            return self.ones_like(requires_grad=False)
        if gradient.shape != self.shape:
            raise ValueError(f"{op}: gradient shape {gradient.shape} does not match the result's shape {self.shape}")
        if gradient.device != self.device:
            raise ValueError(f"{op}: gradient on {gradient.device} but the result on {self.device}; use .to() first")
        return gradient.cast(self.dtype)

    # *** elementwise ***

    def _to_tensor_like(self, y: Any) -> Tensor:
        if isinstance(y, Tensor):
            return y
        if isinstance(y, UOp) and y.dtype == dtypes.index:  # a symbolic size (bound variables) used as a value
            return Tensor(size_tensor(y, self.dtype if dtypes.is_float(self.dtype) else dtypes.int32, self.device))
        if isinstance(y, UOp):
            return Tensor(y)
        if not isinstance(y, (bool, int, float)):
            raise TypeError(f"expected a Tensor or a Python number, got {type(y).__name__}")
        if dtypes.is_float(self.dtype) or (
            dtypes.is_int(self.dtype) and isinstance(y, int) and not isinstance(y, bool)
        ):
            dt = self.dtype
        elif self.dtype == dtypes.bool and isinstance(y, bool):
            dt = dtypes.bool
        else:
            dt = dtypes.from_py(y)
        return Tensor(UOp.const_tensor(dt, y, self.device))

    def _broadcasted(self, y: Any, op: str, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
        if type(y) in _PY_NUMBERS and (const := self._const_at_shape(y)) is not None:
            return (Tensor(const), self) if reverse else (self, Tensor(const))
        x, other = self, self._to_tensor_like(y)
        if reverse:
            x, other = other, x
        if x.device != other.device:
            raise ValueError(f"{op}: tensors on different devices {x.device} and {other.device}; use .to() first")
        if match_dtype and x.dtype != other.dtype:
            dt = least_upper_dtype(x.dtype, other.dtype)
            x, other = x.cast(dt), other.cast(dt)
        shape = _broadcast_shape(op, x.shape, other.shape)
        return x._broadcast_to(shape), other._broadcast_to(shape)

    def _broadcasted_uops(self, y: Any, op: str, reverse: bool = False) -> tuple[UOp, UOp]:
        """`_broadcasted`'s nodes; a Python number on the fast path makes no Tensor for its constant, and two tensors
        of one shape, dtype and device need no broadcasting or promotion."""
        if type(y) in _PY_NUMBERS and (const := self._const_at_shape(y)) is not None:
            return (const, self._uop) if reverse else (self._uop, const)
        if type(y) is Tensor:
            x_uop, y_uop = self._uop, y._uop
            if x_uop.dtype is y_uop.dtype and x_uop.device == y_uop.device:
                if reverse:
                    x_uop, y_uop = y_uop, x_uop
                if x_uop.shape == y_uop.shape:
                    return x_uop, y_uop
                # one dtype and device, int shapes: broadcast as nodes (the ones _broadcasted's tensors would hold)
                shape = _broadcast_shape(op, x_uop.shape, y_uop.shape)
                if not is_symbolic(shape):
                    return _broadcast_uop(x_uop, shape), _broadcast_uop(y_uop, shape)
        x, other = self._broadcasted(y, op, reverse)
        return x._uop, other._uop

    def _const_at_shape(self, y: bool | int | float) -> UOp | None:
        """Python number `y` as a constant of self's dtype, device and (int) shape, built as the nodes broadcasting
        its 0-d tensor makes (CONST, RESHAPE to ones, EXPAND); None when `y` would change the dtype or the shape is
        symbolic (the general path handles both). The hot path of `x * 0.9`: no Tensor, no movement-op calls."""
        dt = self.dtype
        if not _joins(dt, y):
            return None
        shape = self._uop.shape
        if not all(type(s) is int for s in shape):
            return None
        return _labelled_const(dt, y, self._uop.device, shape)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        if all(type(s) is int for s in shape) and all(type(s) is int for s in padded):
            return Tensor(_broadcast_uop(self._uop, shape))
        return self.reshape(padded).expand(shape)

    def _binop(self, op: Ops, y: Any, name: str, reverse: bool = False) -> Tensor:
        x, other = self._broadcasted_uops(y, name, reverse)
        return Tensor(x.alu(op, other))

    @_traced
    def add(self, x: Any, reverse: bool = False) -> Tensor:
        """self + x, broadcast to a common shape and promoted to a common dtype (`reverse=True`: x + self).

        Args:
            x: a tensor or number.
            reverse: compute x + self.

        Returns:
            The sum, of the broadcast shape.

        Raises:
            ValueError: shapes that do not broadcast.

        Examples:
            >>> Tensor([1, 2]).add(1).tolist(), (Tensor([[1], [2]]) + Tensor([10, 20])).tolist()
            ([2, 3], [[11, 21], [12, 22]])
        """
        return self._binop(Ops.ADD, x, "add", reverse)

    @_traced
    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        """self * x, broadcast and promoted like `add` (`reverse=True`: x * self).

        Args:
            x: a tensor or number.
            reverse: compute x * self.

        Returns:
            The product, of the broadcast shape.

        Examples:
            >>> Tensor([2]).mul(3).item(), Tensor([2]).mul(0.5).dtype
            (6, dtypes.float)
        """
        return self._binop(Ops.MUL, x, "mul", reverse)

    @_traced
    def sub(self, x: Any, reverse: bool = False) -> Tensor:
        """self - x, broadcast and promoted like `add` (`reverse=True`: x - self).

        Args:
            x: a tensor or number.
            reverse: compute x - self.

        Returns:
            The difference, of the broadcast shape.

        Examples:
            >>> Tensor([3]).sub(1).item(), Tensor([3]).sub(1, reverse=True).item()
            (2, -2)
        """
        lhs, other = self._broadcasted_uops(x, "sub", reverse)
        return Tensor(lhs + other.alu(Ops.MUL, other.const_like(-1)))

    @_traced
    def neg(self) -> Tensor:
        """-self (for a bool tensor, logical not).

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([1, -2]).neg().tolist(), Tensor([True]).neg().tolist()
            ([-1, 2], [False])
        """
        return self.logical_not() if self.dtype == dtypes.bool else self * -1

    @_traced
    def div(self, x: Any, reverse: bool = False, rounding_mode: Literal["trunc", "floor"] | None = None) -> Tensor:
        """True division (integers are promoted to float first); `rounding_mode` "trunc" or "floor" rounds it.

        Args:
            x: the divisor (or the dividend with reverse), a tensor or number.
            reverse: compute x / self.
            rounding_mode: None, "trunc" or "floor".

        Returns:
            The quotient (integer tensors keep their dtype when rounded).

        Examples:
            >>> Tensor([7]).div(2).tolist(), Tensor([-7]).div(2, rounding_mode="floor").tolist()
            ([3.5], [-4])
        """
        if rounding_mode is not None:
            return self._div_rounded(x, reverse, rounding_mode)
        lhs, other = self._broadcasted_uops(x, "div", reverse)
        if not dtypes.is_float(lhs.dtype):
            lhs, other = lhs.cast(least_upper_float(lhs.dtype)), other.cast(least_upper_float(lhs.dtype))
        return Tensor(lhs * other.reciprocal())

    @_traced
    def idiv(self, y: Any, reverse: bool = False) -> Tensor:
        """Integer division rounding toward zero (C semantics).

        Args:
            y: the divisor (or the dividend with reverse), a tensor or int.
            reverse: compute y // self.

        Returns:
            An integer tensor.

        Raises:
            TypeError: tensors that are not integers.

        Examples:
            >>> Tensor([-7, 7]).idiv(2).tolist()
            [-3, 3]
        """
        x, other = self._broadcasted(y, "idiv", reverse)
        if not dtypes.is_int(x.dtype):
            raise TypeError(f"idiv: expected integer tensors, got {x.dtype}")
        return Tensor(x._uop.alu(Ops.IDIV, other._uop))

    @_traced
    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """The remainder with the sign of the divisor, like `%` in Python and torch, for integers and floats:
        `fmod` keeps the sign of the dividend instead.

        Args:
            x: the divisor (or the dividend with reverse), a tensor or number.
            reverse: compute x % self.

        Returns:
            The remainder, of the broadcast shape.

        Examples:
            >>> Tensor([-7, 7]).mod(3).tolist()
            [2, 1]
        """
        return self._mod_floor(x, reverse)

    def _mod_trunc(self, x: Any) -> Tensor:
        """C remainder (the sign of the dividend) of integer tensors: the MOD primitive."""
        lhs, other = self._broadcasted(x, "mod")
        return Tensor(lhs.uop.alu(Ops.MOD, other._uop))

    @_traced
    def maximum(self, x: Any) -> Tensor:
        """Elementwise max(self, x), broadcast like `add`.

        Args:
            x: a tensor or number.

        Returns:
            A tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 5]).maximum(3).tolist()
            [3, 5]
        """
        return self._binop(Ops.MAX, x, "maximum")

    @_traced
    def minimum(self, x: Any) -> Tensor:
        """Elementwise min(self, x), broadcast like `add`.

        Args:
            x: a tensor or number.

        Returns:
            A tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 5]).minimum(3).tolist()
            [1, 3]
        """
        lhs, other = self._broadcasted(x, "minimum")
        return lhs._order_inverse().maximum(other._order_inverse())._order_inverse()

    def _cmp(self, op: Ops, y: Any, name: str, reverse: bool = False) -> Tensor:
        x, other = self._broadcasted(y, name, reverse)
        return Tensor(x._uop.alu(op, other._uop))

    @_traced
    def lt(self, y: Any) -> Tensor:
        """Elementwise self < x as a bool tensor, broadcast like `add`.

        Args:
            y: a tensor or number.

        Returns:
            A bool tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 2]).lt(2).tolist()
            [True, False]
        """
        return self._cmp(Ops.CMPLT, y, "lt")

    @_traced
    def gt(self, y: Any) -> Tensor:
        """Elementwise self > x as a bool tensor, broadcast like `add`.

        Args:
            y: a tensor or number.

        Returns:
            A bool tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 3]).gt(2).tolist()
            [False, True]
        """
        return self._cmp(Ops.CMPLT, y, "gt", reverse=True)

    @_traced
    def eq(self, x: Any) -> Tensor:
        """Elementwise self == x as a bool tensor, broadcast like `add`.

        Args:
            x: a tensor or number.

        Returns:
            A bool tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 2]).eq(2).tolist()
            [False, True]
        """
        return self._cmp(Ops.CMPEQ, x, "eq")

    @_traced
    def ne(self, x: Any) -> Tensor:
        """Elementwise self != x as a bool tensor, broadcast like `add`.

        Args:
            x: a tensor or number.

        Returns:
            A bool tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 2]).ne(2).tolist()
            [True, False]
        """
        return self._cmp(Ops.CMPNE, x, "ne")

    def ge(self, y: Any) -> Tensor:
        """Elementwise self >= x as a bool tensor, broadcast like `add`.

        Args:
            y: a tensor or number.

        Returns:
            A bool tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 2]).ge(2).tolist()
            [False, True]
        """
        return self._cmp_or_equal(y, "ge", reverse=True)

    def le(self, y: Any) -> Tensor:
        """Elementwise self <= x as a bool tensor, broadcast like `add`.

        Args:
            y: a tensor or number.

        Returns:
            A bool tensor of the broadcast shape.

        Examples:
            >>> Tensor([1, 3]).le(2).tolist()
            [True, False]
        """
        return self._cmp_or_equal(y, "le")

    def _cmp_or_equal(self, y: Any, name: str, reverse: bool = False) -> Tensor:
        """x <= y (or y <= x with `reverse`). Integers use not(y < x); floats use (x < y) | (x == y), because
        NaN compares false both ways and not(<) would call NaN >= 1 true (numpy, torch and IEEE say false)."""
        x, other = self._broadcasted(y, name)
        lo, hi = (other, x) if reverse else (x, other)
        if not dtypes.is_float(x.dtype):
            return Tensor(hi.uop.alu(Ops.CMPLT, lo.uop)).logical_not()
        return Tensor(lo.uop.alu(Ops.CMPLT, hi.uop)) | Tensor(lo.uop.alu(Ops.CMPEQ, hi.uop))

    @_traced
    def logical_not(self) -> Tensor:
        """Elementwise not, as a bool tensor (nonzero is True).

        Returns:
            A bool tensor of self's shape.

        Examples:
            >>> Tensor([0, 2]).logical_not().tolist()
            [True, False]
        """
        return self.cast(dtypes.bool)._cmp(Ops.CMPNE, True, "logical_not")

    def _bitwise(self, op: Ops, y: Any, name: str, reverse: bool = False) -> Tensor:
        x, other = self._broadcasted(y, name, reverse)
        if not (dtypes.is_int(x.dtype) or x.dtype == dtypes.bool):
            raise OpTypeError(f"{name}: bitwise ops need integer or bool tensors, got {x.dtype}")
        return Tensor(x._uop.alu(op, other._uop))

    @_traced
    def bitwise_and(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise self & x for int and bool tensors, broadcast like `add`.

        Args:
            x: a tensor or int.
            reverse: compute x & self.

        Returns:
            A tensor of the broadcast shape.

        Raises:
            TypeError: float dtypes.

        Examples:
            >>> Tensor([6]).bitwise_and(3).item()
            2
        """
        return self._bitwise(Ops.AND, x, "bitwise_and", reverse)

    @_traced
    def bitwise_or(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise self | x for int and bool tensors, broadcast like `add`.

        Args:
            x: a tensor or int.
            reverse: compute x | self.

        Returns:
            A tensor of the broadcast shape.

        Raises:
            TypeError: float dtypes.

        Examples:
            >>> Tensor([4]).bitwise_or(1).item()
            5
        """
        return self._bitwise(Ops.OR, x, "bitwise_or", reverse)

    @_traced
    def bitwise_xor(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise self ^ x for int and bool tensors, broadcast like `add`.

        Args:
            x: a tensor or int.
            reverse: compute x ^ self.

        Returns:
            A tensor of the broadcast shape.

        Raises:
            TypeError: float dtypes.

        Examples:
            >>> Tensor([6]).bitwise_xor(3).item()
            5
        """
        return self._bitwise(Ops.XOR, x, "bitwise_xor", reverse)

    @_traced
    def where(self, x: Any, y: Any) -> Tensor:
        """Elementwise `x if self else y`, broadcasting all three.

        Args:
            x: the values where self is True (a tensor or number).
            y: the values where self is False (a tensor or number).

        Returns:
            A tensor of the broadcast shape, in x's and y's promoted dtype.

        Raises:
            ValueError: the condition and the values on different devices.

        Examples:
            >>> Tensor([True, False]).where(1, 2).tolist()
            [1, 2]
        """
        if (direct := self._where_uop(x, y)) is not None:
            return Tensor(direct)
        xt = x if isinstance(x, Tensor) else None
        yt = y if isinstance(y, Tensor) else None
        ref = xt if xt is not None else yt if yt is not None else self
        xt = (
            xt
            if xt is not None
            else ref._to_tensor_like(x)
            if ref is not self
            else Tensor(UOp.const_tensor(dtypes.from_py(x), x, self.device))
        )
        yt = yt if yt is not None else xt._to_tensor_like(y)
        xt, yt = xt._broadcasted(yt, "where")
        if self.device != xt.device:
            raise ValueError(f"where: condition on {self.device} but values on {xt.device}; use .to() first")
        cond = self.cast(dtypes.bool)
        shape = _broadcast_shape("where", cond.shape, xt.shape)
        cond, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
        return Tensor(cond._uop.alu(Ops.WHERE, xt._uop, yt._uop))

    def _where_uop(self, x: Any, y: Any) -> UOp | None:
        """`where`'s node for its common case, built as nodes (no Tensor per operand): a bool condition, values that
        are tensors of one dtype or a tensor and a Python number of its kind (_const_at_shape's rule), all on one
        device with int shapes. The same nodes and labels as the general path: the values broadcast to each other,
        then all three to the condition's shape. None for anything else."""
        cond = self._uop
        values = [v._uop if type(v) is Tensor else v for v in (x, y)]
        tensors = [v for v in values if type(v) is UOp]
        if cond.dtype is not dtypes.bool or not tensors:
            return None
        dtype, device = tensors[0].dtype, tensors[0].device
        if any(t.dtype is not dtype or t.device != device for t in tensors) or cond.device != device:
            return None
        if any(type(v) is not UOp and not _joins(dtype, v) for v in values):
            return None
        if is_symbolic(cond.shape) or any(is_symbolic(t.shape) for t in tensors):
            return None
        value_shape = _broadcast_shape("where", *(t.shape for t in tensors))
        shape = _broadcast_shape("where", cond.shape, value_shape)
        made = [_value_at(v, dtype, device, value_shape) for v in values]
        return _broadcast_uop(cond, shape).alu(Ops.WHERE, *(_broadcast_uop(v, shape) for v in made))

    def _unary(self, op: Ops) -> Tensor:
        x = self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))
        return Tensor(x._uop.alu(op))

    @_traced
    def exp2(self) -> Tensor:
        """Elementwise 2**x.

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> Tensor([3.0]).exp2().item()
            8.0
        """
        return self._unary(Ops.EXP2)

    @_traced
    def log2(self) -> Tensor:
        """Elementwise base-2 log; 0 gives -inf and negatives NaN.

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> Tensor([8.0, 0.0]).log2().tolist()
            [3.0, -inf]
        """
        return self._unary(Ops.LOG2)

    @_traced
    def exp(self) -> Tensor:
        """Elementwise e**x (ints are cast to float first).

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> Tensor([0]).exp().tolist()
            [1.0]
        """
        return (self._as_float() * (1 / math.log(2))).exp2()

    @_traced
    def log(self) -> Tensor:
        """Elementwise natural log; 0 gives -inf and negatives NaN.

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> Tensor([1.0]).log().item()
            0.0
        """
        return self.log2() * math.log(2)

    @_traced
    def sqrt(self) -> Tensor:
        """Elementwise square root; negatives give NaN.

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> Tensor([4.0]).sqrt().item()
            2.0
        """
        return self._unary(Ops.SQRT)

    @_traced
    def sin(self) -> Tensor:
        """Elementwise sine (radians).

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.5707963]).sin().tolist()]
            [0.0, 1.0]
        """
        return self._unary(Ops.SIN)

    @_traced
    def reciprocal(self) -> Tensor:
        """Elementwise 1/x; 0 gives inf.

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> Tensor([4.0, 0.0]).reciprocal().tolist()
            [0.25, inf]
        """
        return self._unary(Ops.RECIPROCAL)

    @_traced
    def trunc(self) -> Tensor:
        """Elementwise rounding toward zero (ints are returned unchanged).

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([-1.7, 1.7]).trunc().tolist()
            [-1.0, 1.0]
        """
        return self._unary(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

    @_traced
    def relu(self) -> Tensor:
        """Elementwise max(x, 0); NaN stays NaN (as torch), the gradient at 0 is 0.

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([-1.0, 2.0]).relu().tolist()
            [0.0, 2.0]
        """
        return (self <= 0).where(0, self)

    @_traced
    def abs(self) -> Tensor:
        """|x|; -0.0 gives 0.0 and NaN stays NaN. Its gradient is sign(x), 0 at 0 (as torch's).

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([-2.0, 0.0, 3.0]).abs().tolist()
            [2.0, 0.0, 3.0]
        """
        if self.dtype == dtypes.bool:
            return self
        return (self < 0).where(-self, (self == 0).where(0, self))

    @_traced
    def sigmoid(self) -> Tensor:
        """1 / (1 + exp(-x)), computed from exp(-|x|) so that neither it nor its gradient overflows.

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> Tensor([0.0, 100.0]).sigmoid().tolist()
            [0.5, 1.0]
        """
        return _sigmoid(self._as_float())

    @_traced
    def tanh(self) -> Tensor:
        """Elementwise hyperbolic tangent.

        Returns:
            A float tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).tanh().tolist()]
            [0.0, 0.7616]
        """
        return _in_float(self, _tanh)

    @_traced
    def square(self) -> Tensor:
        """Elementwise x * x.

        Returns:
            A tensor of self's shape and dtype.

        Examples:
            >>> Tensor([-3]).square().item()
            9
        """
        return self * self

    def _as_float(self) -> Tensor:
        return self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))

    @_traced
    def cast(self, dtype: DTypeLike) -> Tensor:
        """The tensor converted to `dtype` (a DType or its name); returns self when the dtype is already that.

        Args:
            dtype: a DType or its name ("float16").

        Returns:
            The converted tensor (self when the dtype is already that).

        Raises:
            TypeError: (AttributeError too) an unknown dtype name.

        Examples:
            >>> Tensor([1.7, -1.7]).cast(dtypes.int32).tolist(), Tensor([1]).cast("float16").dtype
            ([1, -1], dtypes.half)
        """
        dt = to_dtype(dtype)
        return self if dt == self.dtype else Tensor(self._uop.cast(dt))

    @_traced
    def bitcast(self, dtype: DTypeLike) -> Tensor:
        """The same bytes read as `dtype`. A different element size regroups the last axis' bytes (little-endian):
        (..., n) of `old` bytes -> (..., n * old / new). Raises ValueError when those bytes don't divide evenly (or the
        tensor is 0-d). On a device that runs no kernels (DISK) the result views the same memory, which must be one run
        of bytes (RuntimeError if not).

        Args:
            dtype: the dtype to read the bytes as.

        Returns:
            A tensor of dtype over the same bytes.

        Raises:
            ValueError: bytes that do not divide evenly into the new element size, or a 0-d tensor.

        Examples:
            >>> Tensor([1.0]).bitcast(dtypes.uint16).tolist()
            [0, 16256]
        """
        dt = to_dtype(dtype)
        old, new = self.dtype.itemsize, dt.itemsize
        if dt == self.dtype or old == new:
            return self if dt == self.dtype else Tensor(self._uop.bitcast(dt))
        if self.ndim == 0 or (self.shape[-1] * old) % new != 0:
            raise ValueError(
                f"bitcast: {self.dtype} -> {dt} regroups the last axis ({old} vs {new} bytes per element): got shape "
                f"{self.shape}, expected a last axis of a multiple of {new} bytes"
            )
        from fusegrad.schedule.views import bitcast_view, is_storage_device, view_chain

        if not is_storage_device(self.device):
            return self._bitcast_regrouped(dt)
        shape = (*self.shape[:-1], self.shape[-1] * old // new)
        if prod(shape) == 0:
            return Tensor.empty(*shape, dtype=dt, device=self.device)
        if view_chain(self._uop)[0].op is not Ops.BUFFER:
            Tensor(
                view_chain(self._uop)[0]
            ).realize()  # a pending write (a copy to DISK) lands first: the view reads it
        return Tensor(bitcast_view(self._uop, dt))

    def _bitcast_regrouped(self, dt: DType) -> Tensor:
        """A size-changing bitcast as a kernel: split or join the elements' unsigned bits by shifts."""
        unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
        old, new = self.dtype.itemsize, dt.itemsize
        bits = self.bitcast(unsigned[old])
        if new > old:  # (..., n) -> (..., n/r, r): r pieces, the first in the lowest bits -> (..., n/r)
            pieces = bits.reshape(*self.shape[:-1], -1, new // old).cast(unsigned[new])
            joined = pieces[..., 0]
            for i in range(1, new // old):
                joined = joined | (pieces[..., i] << (8 * old * i))
            return joined.bitcast(dt)
        # (..., n) -> (..., n, r): each element's r pieces, lowest bits first -> (..., n*r)
        split = [(bits >> (8 * new * i)).cast(unsigned[new]) for i in range(old // new)]
        return Tensor.stack(*split, dim=-1).reshape(*self.shape[:-1], -1).bitcast(dt)

    def float(self) -> Tensor:
        """`cast(dtypes.float32)`.

        Returns:
            A float32 tensor.

        Examples:
            >>> Tensor([1]).float().tolist()
            [1.0]
        """
        return self.cast(dtypes.float32)

    def double(self) -> Tensor:
        """`cast(dtypes.float64)`.

        Returns:
            A float64 tensor.

        Examples:
            >>> Tensor([1.0]).double().dtype
            dtypes.double
        """
        return self.cast(dtypes.float64)

    def bfloat16(self) -> Tensor:
        """`cast(dtypes.bfloat16)`.

        Returns:
            A bfloat16 tensor.

        Examples:
            >>> Tensor([1.0]).bfloat16().dtype
            dtypes.bfloat16
        """
        return self.cast(dtypes.bfloat16)

    def long(self) -> Tensor:
        """`cast(dtypes.int64)`.

        Returns:
            An int64 tensor.

        Examples:
            >>> Tensor([1]).long().dtype
            dtypes.long
        """
        return self.cast(dtypes.int64)

    def short(self) -> Tensor:
        """`cast(dtypes.int16)`.

        Returns:
            An int16 tensor.

        Examples:
            >>> Tensor([1]).short().dtype
            dtypes.short
        """
        return self.cast(dtypes.int16)

    def half(self) -> Tensor:
        """`cast(dtypes.float16)`.

        Returns:
            A float16 tensor.

        Examples:
            >>> Tensor([1.0]).half().dtype
            dtypes.half
        """
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        """`cast(dtypes.int32)` (floats truncate toward zero).

        Returns:
            An int32 tensor.

        Examples:
            >>> Tensor([1.9, -1.9]).int().tolist()
            [1, -1]
        """
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        """`cast(dtypes.bool)` (nonzero is True).

        Returns:
            A bool tensor.

        Examples:
            >>> Tensor([0, 3]).bool().tolist()
            [False, True]
        """
        return self.cast(dtypes.bool)

    # *** reductions ***

    def _resolve_axes(self, axis: builtins.int | Sequence[builtins.int] | None, op: str) -> tuple[builtins.int, ...]:
        ndim = len(self._uop.shape)
        if axis is None:
            return tuple(range(ndim))
        if type(axis) is int and -ndim <= axis < ndim:  # one axis in range: the common case, checked below otherwise
            return (axis % ndim,)
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        out = []
        for a in axes:
            if not -max(self.ndim, 1) <= a < max(self.ndim, 1):
                raise IndexError(
                    f"{op}: axis {a} out of range for {self.ndim}-d tensor ({-self.ndim}..{self.ndim - 1})"
                )
            out.append(a % self.ndim if self.ndim else 0)
        return tuple(dict.fromkeys(out))

    def _reduce(
        self, op: Ops, axis: builtins.int | Sequence[builtins.int] | None, keepdim: builtins.bool, name: str
    ) -> Tensor:
        axes = self._resolve_axes(axis, name)
        shape = self._uop.shape
        if not shape:
            return self
        ret = Tensor(self._uop.r(op, axes))
        if keepdim:
            return ret
        kept = tuple(s for i, s in enumerate(shape) if i not in axes)
        if kept and not is_symbolic(shape):  # what reshape makes of sizes that fit, without its argument checks
            return Tensor(ret._uop.checked_view(Ops.RESHAPE, kept))
        return ret.reshape(kept)

    @_traced
    def sum(
        self,
        axis: builtins.int | Sequence[builtins.int] | None = None,
        keepdim: builtins.bool = False,
        dtype: DTypeLike | None = None,
    ) -> Tensor:
        """Sum over `axis` (all axes when None). Integers and bools accumulate in at least int32.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.
            dtype: the accumulation (and result) dtype.

        Returns:
            The sum.

        Examples:
            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.sum().item(), x.sum(axis=0).tolist(), x.sum(axis=1, keepdim=True).tolist()
            (10, [4, 6], [[3], [7]])
        """
        acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim, "sum")
        return ret.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else ret

    @_traced
    def max(self, axis: builtins.int | Sequence[builtins.int] | None = None, keepdim: builtins.bool = False) -> Tensor:
        """The largest element over `axis` (an int, a sequence, or None for all axes), dropping it unless `keepdim`.

        Args:
            axis: an axis, a sequence of axes, or None for all.
            keepdim: keep the reduced axes with size 1.

        Returns:
            The maximum.

        Raises:
            IndexError: an axis out of range.

        Examples:
            >>> Tensor([[1, 4], [3, 2]]).max(axis=1).tolist(), Tensor([[1, 4], [3, 2]]).max().item()
            ([4, 3], 4)
        """
        return self._reduce(Ops.MAX, axis, keepdim, "max")

    @_traced
    def min(self, axis: builtins.int | Sequence[builtins.int] | None = None, keepdim: builtins.bool = False) -> Tensor:
        """The smallest element over `axis` (an int, a sequence, or None for all axes), dropping it unless `keepdim`.

        Args:
            axis: an axis, a sequence of axes, or None for all.
            keepdim: keep the reduced axes with size 1.

        Returns:
            The minimum.

        Raises:
            IndexError: an axis out of range.

        Examples:
            >>> Tensor([[1, 4], [3, 2]]).min(axis=0).tolist()
            [1, 2]
        """
        self._resolve_axes(axis, "min")
        return self._order_inverse().max(axis, keepdim)._order_inverse()

    def _order_inverse(self) -> Tensor:
        """A bijection that reverses order: min is max of it (negation overflows at INT_MIN; ~x does not)."""
        if dtypes.is_unsigned(self.dtype):
            return self ^ dtypes.max(self.dtype)
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self ^ -1 if dtypes.is_int(self.dtype) else -self

    @_traced
    def mean(self, axis: builtins.int | Sequence[builtins.int] | None = None, keepdim: builtins.bool = False) -> Tensor:
        """The mean over `axis` (None: all axes), dropping it unless `keepdim`; ints give float32.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.

        Returns:
            The mean.

        Raises:
            IndexError: an axis out of range.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).mean(axis=0).tolist()
            [2.0, 3.0]
        """
        out_dt = self.dtype if dtypes.is_float(self.dtype) else dtypes.float32
        axes = self._resolve_axes(axis, "mean")
        count = prod(self.shape[a] for a in axes) if self.ndim else 1
        total = self.cast(sum_acc_dtype(self.dtype) if dtypes.is_float(self.dtype) else dtypes.float32).sum(
            axis, keepdim
        )
        return (total / count if count else total * math.nan).cast(out_dt)

    @_traced
    def normalize(self, p: builtins.float = 2.0, dim: builtins.int = 1, eps: builtins.float = 1e-12) -> Tensor:
        """self / max(|self|_p, eps) with the p-norm taken over `dim` (kept), like torch.nn.functional.normalize;
        p=0 counts the non-zeros.

        Args:
            p: the norm's order.
            dim: the axis the norm is taken over.
            eps: the smallest norm divided by.

        Returns:
            A tensor of self's shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([[3.0, 4.0]]).normalize()[0].tolist()]
            [0.6, 0.8]
        """
        if p == 0:
            norm = (self != 0).sum(dim, keepdim=True).cast(self.dtype)
        else:
            norm = self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
        return self / norm.maximum(eps)

    @_traced
    def dot(self, w: Tensor, dtype: DTypeLike | None = None) -> Tensor:
        """Matrix product as broadcast-multiply-sum (one fused kernel). (n,k)@(k,m) -> (n,m); batches broadcast.
        With `dtype`, both operands are cast to it first (e.g. accumulate a half matmul in float32).

        Args:
            w: the right operand.
            dtype: the dtype both operands are cast to first.

        Returns:
            The matrix product.

        Raises:
            ValueError: 0-d operands.
            OpValueError: (a ValueError and RuntimeError) inner sizes that differ.

        Examples:
            >>> Tensor([1, 2]).dot(Tensor([3, 4])).item(), Tensor.ones(5, 2, 3).dot(Tensor.ones(3, 4)).shape
            (11, (5, 2, 4))
        """
        if dtype is not None:
            return self.cast(dtype).dot(w.cast(dtype))
        if self.ndim == 0 or w.ndim == 0:
            raise OpValueError(f"matmul: both operands need at least 1 dimension, got {self.shape} and {w.shape}")
        k_self, k_w = self.shape[-1], w.shape[-min(w.ndim, 2)]
        if k_self != k_w:
            raise OpValueError(f"matmul: inner dimensions differ: {self.shape} @ {w.shape} ({k_self} vs {k_w})")
        if self.device != w.device:
            raise ValueError(f"matmul: tensors on different devices {self.device} and {w.device}; use .to() first")
        # (..., n, k) @ (..., k, m): x (..., n, 1, k) * w moved to (..., 1, m, k), summed over k
        xs, ws = self._uop.shape, w._uop.shape
        ones = (1,) * min(len(xs) - 1, len(ws) - 1, 1)
        x_shape, w_shape = (*xs[:-1], *ones, xs[-1]), (*ws[:-2], *ones, *ws[-min(len(ws), 2) :])
        if is_symbolic(xs) or is_symbolic(ws):
            x, wt = self.reshape(x_shape), w.reshape(w_shape).transpose(-1, -min(w.ndim, 2))
        else:  # the nodes reshape and transpose make (sizes that fit, known axes), without their argument checks
            order = list(range(len(w_shape)))
            order[-1], order[-min(len(ws), 2)] = order[-min(len(ws), 2)], order[-1]
            x = Tensor(self._uop.checked_view(Ops.RESHAPE, x_shape))
            wt = Tensor(Tensor(w._uop.checked_view(Ops.RESHAPE, w_shape))._uop.permute(tuple(order)))
        return (x * wt).sum(-1, dtype=least_upper_dtype(x.dtype, w.dtype) if not dtypes.is_float(x.dtype) else None)

    @_traced
    def matmul(self, x: Tensor, reverse: builtins.bool = False, dtype: DTypeLike | None = None) -> Tensor:
        """self @ x (x @ self when `reverse`); see `dot`.

        Args:
            x: the other operand.
            reverse: compute x @ self.
            dtype: the dtype both operands are cast to first.

        Returns:
            The matrix product.

        Examples:
            >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([[1], [1]])).tolist()
            [[3], [7]]
        """
        return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)

    # *** movement ***

    @_traced
    def reshape(self, shape: Any = (), *args: Any) -> Tensor:
        """A view with a new shape, `x.reshape(2, 3)`, `x.reshape((2, 3))` or `x.reshape(shape=(2, 3))`; one axis may be
        -1 (inferred) and None keeps the axis (`x.reshape(None, -1)`); no shape at all (`x.reshape(*[])`) means 0-d.

        Args:
            shape: the new shape (ints, None or -1), or its first entry.
            *args: the other entries.

        Returns:
            A view with the new shape.

        Raises:
            ValueError: the sizes' products differ.
            OpValueError: (a ValueError and RuntimeError) more than one -1.
            IndexError: None for an axis the tensor does not have.

        Examples:
            >>> Tensor.arange(6).reshape(2, -1).tolist()
            [[0, 1, 2], [3, 4, 5]]
        """
        given = argfix(shape, *args)
        current = self._uop.shape
        plain = given and set(map(type, given)) == _INT_ONLY and min(given) >= 0 and not is_symbolic(current)
        if plain and prod(given) == prod(current):  # sizes that fit as they are: the checks below would pass them
            return Tensor(self._uop.reshape(given))
        if any(s is None for s in given[self.ndim :]):
            raise IndexError(f"reshape: None keeps an axis, but {tuple(given)} has more axes than shape {self.shape}")
        shp = list(_shape_arg(tuple(self.shape[i] if s is None else s for i, s in enumerate(given)), allow_neg=True))
        if is_symbolic(tuple(shp)) or is_symbolic(self.shape):
            new_shape = symbolic_reshape(self.shape, tuple(shp))
            return Tensor(self._uop.reshape(new_shape))  # type: ignore[arg-type]  # UOp.reshape takes sints too
        if shp.count(-1) > 1:
            raise OpValueError(f"reshape: only one axis can be -1, got {tuple(shp)}")
        if -1 in shp:
            known = prod(s for s in shp if s != -1)
            if known == 0 or self.numel() % known:
                raise ValueError(f"reshape: cannot reshape {self.shape} ({self.numel()} elements) to {tuple(shp)}")
            shp[shp.index(-1)] = self.numel() // known
        if any(s < 0 for s in shp):
            raise ValueError(f"reshape: negative size in {tuple(shp)}")
        if prod(shp) != self.numel():
            raise ValueError(
                f"reshape: cannot reshape {self.shape} ({self.numel()} elements) to {tuple(shp)} ({prod(shp)} elements)"
            )
        return Tensor(self._uop.reshape(tuple(shp)))

    def view(self, shape: Any, *args: Any) -> Tensor:
        """Same as `reshape`: `x.view(2, -1)`.

        Args:
            shape: the new shape, or its first entry.
            *args: the other entries.

        Returns:
            A view with the new shape.

        Examples:
            >>> Tensor.arange(6).view(2, -1).shape
            (2, 3)
        """
        return self.reshape(shape, *args)

    @_traced
    def permute(self, order: Any = (), *args: Any) -> Tensor:
        """Reorder the axes: `x.permute(1, 0)`, `x.permute((1, 0))` or `x.permute(order=(1, 0))`.

        Args:
            order: the new order of the axes, or its first entry.
            *args: the other entries.

        Returns:
            A view with the axes reordered.

        Raises:
            OpValueError: (a ValueError and RuntimeError) not a permutation of the axes.

        Examples:
            >>> Tensor.zeros(2, 3, 4).permute(2, 0, 1).shape
            (4, 2, 3)
        """
        axes = [self._axis(a, "permute") for a in argfix(order, *args)]
        if sorted(axes) != list(range(self.ndim)):
            raise OpValueError(f"permute: {tuple(argfix(order, *args))} is not a permutation of {self.ndim} axes")
        return Tensor(self._uop.permute(tuple(axes)))

    @_traced
    def expand(self, shape: Any = (), *args: Any) -> Tensor:
        """Broadcast size-1 axes (and new leading ones) to `shape`; -1 keeps an axis: `(3, 1) -> expand(2, 3, 4)`.

        Args:
            shape: the new shape, or its first entry.
            *args: the other entries.

        Returns:
            A view (no copy).

        Raises:
            ValueError: an axis whose size is neither 1 nor the new size.

        Examples:
            >>> Tensor([[1], [2]]).expand(2, 3).tolist()
            [[1, 1, 1], [2, 2, 2]]
        """
        shp = _shape_arg((shape, *args), allow_neg=True)
        if len(shp) < self.ndim:
            raise ValueError(f"expand: cannot expand {self.shape} to fewer dims {shp}")
        padded = (1,) * (len(shp) - self.ndim) + self.shape
        new = tuple(p if s == -1 else s for s, p in zip(shp, padded, strict=True))
        for p, s in zip(padded, new, strict=True):
            if p != s and p != 1:
                raise ValueError(f"expand: cannot expand {self.shape} to {shp}: only size-1 axes can grow")
        return Tensor(self._uop.reshape(padded).expand(new))

    @_traced
    def pad(self, padding: Sequence[Any], mode: str | ConstType = "constant", value: ConstType = 0.0) -> Tensor:
        """Pad each axis by (before, after) (or a flat torch-style tuple) with `value`, or in `mode` "reflect",
        "replicate" or "circular"; negative pads shrink.

        Args:
            padding: one (before, after) per axis (None: none), or a flat torch-style tuple for the last axes.
            mode: "constant", "reflect", "replicate" or "circular".
            value: the fill value for "constant".

        Returns:
            The padded tensor.

        Raises:
            ValueError: a padding of the wrong length, an unknown mode, or a reflect pad wider than the axis.

        Examples:
            >>> Tensor.ones(2).pad(((1, 0),)).tolist(), Tensor([1, 2, 3]).pad((1, 1), mode="reflect").tolist()
            ([0.0, 1.0, 1.0], [2, 1, 2, 3, 2])
        """
        if not isinstance(mode, str):  # the older `pad(padding, value)` call shape
            return self.pad(padding, "constant", mode)
        if mode != "constant" or any(isinstance(p, builtins.int) for p in padding):
            return self._pad_mode(padding, mode, value)
        if len(padding) != self.ndim:
            raise ValueError(
                f"pad: expected {self.ndim} (before, after) pairs for shape {self.shape}, got {len(padding)}"
            )
        pads = [(0, 0) if p is None else (_pad_size(p[0]), _pad_size(p[1])) for p in padding]
        shrink = tuple((_cut(b), s - _cut(a)) for (b, a), s in zip(pads, self.shape, strict=True))
        x = self.shrink(shrink) if any(_cut(b) or _cut(a) for b, a in pads) else self
        pos = tuple((_grow(b), _grow(a)) for b, a in pads)
        if not any(b or a for b, a in pos):
            return x
        padded = Tensor(x._uop.pad(pos))
        if value == 0:
            return padded
        mask = Tensor(Tensor.full(x.shape, True, dtype=dtypes.bool, device=x.device).uop.pad(pos))
        return mask.where(padded, value)

    @_traced
    def shrink(self, arg: Sequence[tuple[builtins.int, builtins.int] | None]) -> Tensor:
        """The view keeping `[start, end)` of each axis; `arg` has one pair (or None: the whole axis) per axis.

        Args:
            arg: one (start, end) pair or None per axis.

        Returns:
            A view.

        Raises:
            ValueError: a wrong number of pairs or a range outside the axis.

        Examples:
            >>> Tensor([1, 2, 3]).shrink(((1, 3),)).tolist(), Tensor([[1, 2], [3, 4]]).shrink((None, (0, 1))).tolist()
            ([2, 3], [[1], [3]])
        """
        if len(arg) != self.ndim:
            raise ValueError(f"shrink: expected {self.ndim} (start, end) pairs for shape {self.shape}, got {len(arg)}")
        pairs = zip(arg, self.shape, strict=True)
        bounds = tuple((0, s) if a is None else (_size(a[0]), _size(a[1])) for a, s in pairs)
        for (b, e), s in zip(bounds, self.shape, strict=True):
            if is_symbolic((b, e, s)):
                continue  # checked at the variables' bound values by the SHRINK node itself
            if not 0 <= b <= e <= s:
                raise ValueError(f"shrink: bounds {bounds} do not fit shape {self.shape}")
        return Tensor(self._uop.shrink(bounds))

    def shrink_to(self, shape: Any, *args: builtins.int | None) -> Tensor:
        """Keep the first `shape[i]` entries of each axis (None keeps it): `(4, 8) -> shrink_to(2, None) -> (2, 8)`.

        Args:
            shape: the sizes to keep (None keeps an axis), or the first of them.
            *args: the other sizes.

        Returns:
            A view.

        Raises:
            ValueError: not one entry per axis, or a size larger than its axis.

        Examples:
            >>> Tensor.zeros(4, 8).shrink_to(2, None).shape
            (2, 8)
        """
        return self.shrink(tuple(None if s is None else (0, s) for s in argfix(shape, *args)))

    @_traced
    def flip(self, axis: builtins.int | Sequence[builtins.int], *args: builtins.int) -> Tensor:
        """Reverse the order along the given axes: `x.flip(0)`, `x.flip(0, 1)` or `x.flip((0, 1))`.

        Args:
            axis: an axis or a tuple of them.
            *args: more axes.

        Returns:
            A view with those axes reversed.

        Raises:
            IndexError: an axis out of range.
            OpValueError: (a ValueError and RuntimeError) a repeated axis.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).flip(1).tolist()
            [[2, 1], [4, 3]]
        """
        given = [self._axis(a, "flip") for a in argfix(axis, *args)]
        if len(set(given)) != len(given):
            raise OpValueError(f"flip: each axis can appear once, got {tuple(argfix(axis, *args))}")
        axes = set(given)
        return Tensor(self._uop.flip(tuple(i in axes for i in range(self.ndim))))

    def _axis(self, a: builtins.int, op: str) -> builtins.int:
        ndim = len(self._uop.shape)
        bound = max(ndim, 1)
        if not -bound <= a < bound:
            raise IndexError(f"{op}: axis {a} out of range for {ndim}-d tensor ({-ndim}..{ndim - 1})")
        return a % bound

    def transpose(self, dim0: builtins.int = 1, dim1: builtins.int = 0) -> Tensor:
        """The view with axes `dim0` and `dim1` swapped.

        Args:
            dim0: one axis.
            dim1: the other.

        Returns:
            A view.

        Raises:
            IndexError: an axis out of range.

        Examples:
            >>> Tensor.ones(2, 3, 4).transpose(0, 2).shape
            (4, 3, 2)
        """
        order = list(range(self.ndim))
        a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        """The tensor with its first two axes swapped (`transpose()`); for a matrix, its transpose.

        Examples:
            >>> Tensor([[1, 2, 3]]).T.tolist()
            [[1], [2], [3]]
        """
        return self.transpose()

    def flatten(self, start_dim: builtins.int = 0, end_dim: builtins.int = -1) -> Tensor:
        """Axes `start_dim`..`end_dim` (inclusive) merged into one; a 0-d tensor becomes shape (1,).

        Args:
            start_dim: the first axis to merge.
            end_dim: the last axis to merge (inclusive).

        Returns:
            A view.

        Raises:
            IndexError: an axis out of range.

        Examples:
            >>> Tensor.ones(2, 3, 4).flatten(1).shape, Tensor.ones(2, 3, 4).flatten().shape
            ((2, 12), (24,))
        """
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim, "flatten"), self._axis(end_dim, "flatten")
        return self.reshape(*self.shape[:s], prod(self.shape[s : e + 1]), *self.shape[e + 1 :])

    def unsqueeze(self, dim: builtins.int) -> Tensor:
        """A new axis of size 1 inserted at `dim` (negative counts from the end of the result).

        Args:
            dim: where the new axis goes.

        Returns:
            A view.

        Raises:
            IndexError: a dim outside -ndim-1..ndim.

        Examples:
            >>> Tensor.ones(3).unsqueeze(0).shape, Tensor.ones(3).unsqueeze(-1).shape
            ((1, 3), (3, 1))
        """
        d = dim if dim >= 0 else dim + self.ndim + 1
        if not 0 <= d <= self.ndim:
            raise IndexError(
                f"unsqueeze: dim {dim} out of range for {self.ndim}-d tensor ({-self.ndim - 1}..{self.ndim})"
            )
        return self.reshape(*self.shape[:d], 1, *self.shape[d:])

    def squeeze(self, dim: builtins.int | None = None) -> Tensor:
        """The tensor without axis `dim` if its size is 1 (unchanged otherwise), or without every size-1 axis for None.

        Args:
            dim: the axis to drop, or None for every size-1 axis.

        Returns:
            A view.

        Raises:
            IndexError: an axis out of range.

        Examples:
            >>> Tensor.ones(1, 3, 1).squeeze().shape, Tensor.ones(1, 3, 1).squeeze(0).shape
            ((3,), (3, 1))
        """
        if dim is None:
            return self.reshape(*[s for s in self.shape if s != 1])
        d = self._axis(dim, "squeeze")  # a 0-d tensor takes dim 0 or -1, like torch, and stays as it is
        return self if self.ndim == 0 or self.shape[d] != 1 else self.reshape(*self.shape[:d], *self.shape[d + 1 :])

    def _expand_index(self, indices: Any) -> list[Any]:
        """The index as one entry per axis (plus None entries): Ellipsis and missing trailing axes become slices."""
        idx = list(indices) if isinstance(indices, tuple) else [indices]
        if sum(1 for i in idx if i is Ellipsis) > 1:
            raise IndexError("getitem: an index can only have a single ellipsis")
        n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
        if n_real > self.ndim:
            raise IndexError(f"getitem: too many indices for {self.ndim}-d tensor: got {n_real}")
        if Ellipsis in idx:
            e = idx.index(Ellipsis)
            idx = idx[:e] + [slice(None)] * (self.ndim - n_real) + idx[e + 1 :]
        return idx + [slice(None)] * (self.ndim - sum(1 for i in idx if i is not None))

    @_traced
    def __getitem__(self, indices: Any) -> Tensor:
        """Indexing: ints, slices (any step), None, Ellipsis, integer tensors/lists and boolean masks."""
        if self._is_advanced_index(indices):
            return self._getitem_advanced(indices)
        bounds, flips, steps = [], [], []
        kept: list[int | None] = []  # the result's axes: an input axis, or None for a new size-1 axis
        axis = 0
        for i in self._expand_index(indices):
            if i is None:
                kept.append(None)
                continue
            if isinstance(i, bool) or not isinstance(i, (int, slice)):
                raise TypeError(f"getitem: unsupported index type {type(i).__name__}; expected int, slice, None or ...")
            bound, flip, step = _axis_selection(i, self.shape[axis], axis)
            bounds.append(bound)
            flips.append(flip)
            steps.append(step)
            if isinstance(i, slice):
                kept.append(axis)  # an int index drops its axis
            axis += 1
        x = self.shrink(bounds)
        if any(flips):
            x = x.flip([a for a, f in enumerate(flips) if f])
        x = x._stride(steps)
        return x.reshape(*[1 if a is None else x.shape[a] for a in kept])

    def _stride(self, steps: list[builtins.int]) -> Tensor:
        """Every steps[a]-th element along each axis a (pad to a multiple, split the axis, keep index 0)."""
        if all(s == 1 for s in steps):
            return self
        x = self
        for a, st in enumerate(steps):
            if st == 1:
                continue
            n = x.shape[a]
            m = math.ceil(n / st)
            x = x.pad([(0, m * st - n) if i == a else None for i in range(x.ndim)])
            x = x.reshape(*x.shape[:a], m, st, *x.shape[a + 1 :]).shrink(
                [(0, 1) if i == a + 1 else None for i in range(x.ndim + 1)]
            )
            x = x.reshape(*x.shape[: a + 1], *x.shape[a + 2 :])
        return x

    # *** Python operators (OperatorTrait has those that mean the same on a UOp: + - * / & | ^ << >> < >) ***

    # `//` and `%` follow Python (and torch, numpy, tinygrad): floor division, remainder with the divisor's sign;
    # `idiv` and `mod` are the C operations (toward zero), as kernels compute them
    def __floordiv__(self, y: Any) -> Tensor:
        return self._div_rounded(y, False, "floor")

    def __rfloordiv__(self, y: Any) -> Tensor:
        return self._div_rounded(y, True, "floor")

    def __mod__(self, y: Any) -> Tensor:
        return self._mod_floor(y)

    def __rmod__(self, y: Any) -> Tensor:
        return self._mod_floor(y, True)

    def __matmul__(self, y: Tensor) -> Tensor:
        return self.dot(y)

    def __le__(self, y: Any) -> Tensor:
        return self.le(y)

    def __ge__(self, y: Any) -> Tensor:
        return self.ge(y)

    def __eq__(self, y: Any) -> Tensor:  # type: ignore[override]  # elementwise, like numpy
        return self.eq(y)

    def __ne__(self, y: Any) -> Tensor:  # type: ignore[override]  # elementwise, like numpy
        return self.ne(y)

    # in-place operators write into self (like tinygrad): a realized tensor is updated in its own memory
    def __iadd__(self, y: Any) -> Tensor:
        return self.assign(self.add(y))

    def __isub__(self, y: Any) -> Tensor:
        return self.assign(self.sub(y))

    def __imul__(self, y: Any) -> Tensor:
        return self.assign(self.mul(y))

    def __itruediv__(self, y: Any) -> Tensor:
        return self.assign(self.div(y))

    def __imatmul__(self, y: Tensor) -> Tensor:
        return self.assign(self.dot(y))

    def __rmatmul__(self, y: Tensor) -> Tensor:
        return y.dot(self)

    def __bool__(self) -> builtins.bool:
        """Always TypeError, like the reference: `if t:` and `t in [a, b]` would realize silently; use `.item()`."""
        raise TypeError(f"__bool__ on Tensor is not defined: use .item() or .any()/.all() for the {self.shape} tensor")


# *** operator labels ***

# operators that kernel metadata and VIZ name as the reference does (`a * b` -> "__mul__", not the "mul" inside it)
_LABELLED_OPERATORS = ("__neg__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__matmul__", "__rmatmul__", "__pow__",
    "__rpow__", "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__invert__", "__lshift__",
    "__rshift__", "__rlshift__", "__rrshift__", "__lt__", "__gt__", "__le__", "__ge__", "__eq__", "__ne__")  # fmt: skip


def _label_operator(fn: F) -> F:
    """`fn` with its nodes labelled by its own name. Unlike `traced` it adds no op name to errors: the method it
    calls (`mul` for `__mul__`) already names itself in them."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _METADATA.get() is not None or not TRACEMETA.value:  # inside a labelled call, or labels are off
            return fn(*args, **kwargs)
        token = _METADATA.set(_call_metadata(fn.__name__, sys._getframe(1)))  # the user's line that used it
        try:
            return fn(*args, **kwargs)
        finally:
            _METADATA.reset(token)

    return wrapper  # type: ignore[return-value]  # same signature as fn (functools.wraps keeps it for inspect)


for _name in _LABELLED_OPERATORS:
    setattr(Tensor, _name, _label_operator(getattr(Tensor, _name)))

# op recipes: the outermost traced call of a composite method rebuilds its first call's graph (mixin/recipes.py)
_recipes.tensor_type = Tensor
_mixin._reuse = _recipes.call


# *** module helpers ***


def _axis_selection(i: int | slice, size: int, axis: int) -> tuple[tuple[int, int], bool, int]:
    """(shrink bounds, flip?, step) selecting index or slice `i` of an axis of `size`."""
    if isinstance(size, UOp) or (isinstance(i, slice) and is_symbolic((i.start, i.stop))):
        return symbolic_selection(i, size, axis)  # type: ignore[return-value]  # shrink takes sints too
    if isinstance(i, int):
        if not -size <= i < size:
            raise IndexError(f"getitem: index {i} is out of bounds for axis {axis} with size {size}")
        return (i % size, i % size + 1), False, 1
    start, stop, step = i.indices(size)
    if step > 0:
        n = max(0, math.ceil((stop - start) / step))
        return ((start, start + (n - 1) * step + 1) if n else (0, 0)), False, step
    n = max(0, math.ceil((start - stop) / -step))
    return ((start - (n - 1) * -step, start + 1) if n else (0, 0)), True, -step


def _init_uop(data: Any, device: str | tuple[str, ...] | None, dtype: DTypeLike | None) -> UOp:
    """Tensor()'s node for `data` (a node, None, a number, a list or an array) on `device`, cast to `dtype`."""
    dt = _init_dtype(dtype) if dtype is not None else None
    if data is None:  # like the reference: Tensor(None) is the scalar 0.0
        data = 0.0
    uop = data if isinstance(data, UOp) else _uop_from_data(data, _canonical_device(device), dt)
    if dt is not None and uop.dtype != dt:
        uop = uop.cast(dt)
    return uop


def _init_dtype(dtype: DTypeLike) -> DType:
    """`to_dtype` with the reference's exception type for a bad `dtype=` argument to Tensor()."""
    try:
        return to_dtype(dtype)
    except UnknownDTypeError as e:  # already an AttributeError too, like the reference's; say where it came from
        raise UnknownDTypeError(f"Tensor: {e}") from e
    except TypeError as e:
        raise DTypeArgumentError(f"Tensor: {e}") from e


def _check_storage_write(target: UOp, value: UOp) -> None:
    """A write into DISK (or NPY) memory must be a copy into one run of its bytes: refused here, before the write
    joins the graph, rather than when it is scheduled."""
    from fusegrad.schedule.views import check_storage_write, is_storage_device

    if is_storage_device(target.device) and prod(target.shape) != 0:
        check_storage_write(target, value)


def _kernel_assigns(sink: UOp) -> list[UOp]:
    """The ASSIGN(BUFFER, KERNEL) nodes of a kernelized graph: each kernel's write, settled once the kernel has run."""
    return [u for u in sink.toposort() if u.op is Ops.ASSIGN and u.src[1].op is Ops.KERNEL]


def settle_assigns(assigns: Sequence[UOp]) -> None:
    """Kernels that have run: every tensor reading one of these ASSIGN(BUFFER, KERNEL) nodes reads its buffer."""
    _apply_map({u: u.src[0] for u in assigns})


def _forget(
    ref: weakref.ReferenceType[Tensor],
    forget: Callable[..., Any] = _all_tensors.pop,
    forget_lazy: Callable[..., Any] = _lazy_tensors.pop,
    viewed: dict[weakref.ReferenceType[Tensor], UOp] = _viewed_buffer,
    views: dict[UOp, dict[weakref.ReferenceType[Tensor], None]] = _buffer_views,
) -> None:
    """The weakref callback of a dead tensor. `forget` and the indexes are bound when this is defined: at interpreter
    exit the module's globals may already be None when the last tensors die."""
    forget(ref, None)
    forget_lazy(ref, None)
    if (buffer := viewed.pop(ref, None)) is not None and (entry := views.get(buffer)) is not None:
        entry.pop(ref, None)
        if not entry:
            del views[buffer]


def _broadcast_uop(u: UOp, shape: tuple[int, ...]) -> UOp:
    """`u` (int shape) broadcast to int `shape`, checked by _broadcast_shape: the view built directly, without
    reshape()'s and expand()'s argument handling (the nodes Tensor.reshape and Tensor.expand make, labelled alike)."""
    if (current := u.shape) == shape:
        return u
    view = u.checked_view(Ops.RESHAPE, (1,) * (len(shape) - len(current)) + current)
    if _METADATA.get() is None:
        return view.checked_view(Ops.EXPAND, shape)
    _label_nodes(view, view.op)
    expanded = view.checked_view(Ops.EXPAND, shape)
    if expanded not in all_metadata:  # what Tensor(expanded) would label
        all_metadata[expanded] = (_METADATA.get(),)  # type: ignore[assignment]  # checked not None above
    return expanded


def _joins(dtype: DType, y: Any) -> bool:
    """Whether Python number `y` becomes a constant of `dtype` without promotion: any number for a float dtype, an int
    for an int dtype, a bool for bool (as `_to_tensor_like` gives it)."""
    if dtypes.is_float(dtype):
        return type(y) in _PY_NUMBERS
    if type(y) is int:
        return dtypes.is_int(dtype)
    return type(y) is bool and dtype == dtypes.bool


def _labelled_const(dtype: DType, y: bool | int | float, device: str | tuple[str, ...], shape: tuple[int, ...]) -> UOp:
    """UOp.const_tensor, labelled like the tensors the general path makes (kernel names read them)."""
    const = UOp.const_tensor(dtype, y, device, shape)
    if _METADATA.get() is not None:
        _label_nodes(const, Ops.CONST)
    return const


def _value_at(v: UOp | bool | int | float, dtype: DType, device: str | tuple[str, ...], shape: tuple[int, ...]) -> UOp:
    """A `where` value broadcast to the values' common `shape`: a node as _broadcast_uop makes it, a number as the
    constant of `dtype` (checked to join it)."""
    if type(v) is UOp:
        return _broadcast_uop(v, shape)
    return _labelled_const(dtype, v, device, shape)  # type: ignore[arg-type]  # a Python number here


def _label_nodes(u: UOp, down_to: Ops) -> None:
    """Label `u` and the nodes under it (first sources) down to the first `down_to` node with the running Tensor
    call, as a Tensor made of each would (a node keeps the first label it got)."""
    meta = _METADATA.get()
    while True:
        if u not in all_metadata:
            all_metadata[u] = (meta,)  # type: ignore[assignment]  # the caller checked meta is not None
        if u.op is down_to or not u.src:
            return
        u = u.src[0]


def _viewed_buffer_of(base: UOp) -> UOp | None:
    """The BUFFER a tensor whose node has this base views: the base itself, or the buffer below pending writes.

    Kept in each AFTER node (a node never changes): `a += a` 10,000 times stacks 10,000 AFTERs, and walking the whole
    chain at every write made that loop quadratic (48 s)."""
    chain: list[UOp] = []
    while base.op is Ops.AFTER and (kept := base.__dict__.get(_VIEWED_BUFFER, _NOT_KEPT)) is _NOT_KEPT:
        chain.append(base)
        base = base.src[0].base
    found = kept if base.op is Ops.AFTER else base if base.op is Ops.BUFFER else None
    for after in chain:
        after.__dict__[_VIEWED_BUFFER] = found
    return found


_VIEWED_BUFFER = "_viewed_buffer"  # an AFTER node's __dict__ entry: _viewed_buffer_of's answer
_NOT_KEPT = object()


def _unindex_view(ref: weakref.ReferenceType[Tensor], buffer: UOp) -> None:
    del _viewed_buffer[ref]
    entry = _buffer_views[buffer]
    del entry[ref]
    if not entry:
        del _buffer_views[buffer]


def _size(x: Any) -> Any:
    """A size or bound as given: an int, or a symbolic size (a UOp of bound variables, symbolic_shape.py)."""
    return x if isinstance(x, UOp) else int(x)


def _pad_size(x: Any) -> Any:
    """A pad amount: an int, or a symbolic one folded (cat's `total - offset - size` may fold to an int)."""
    return simplify_size(x) if isinstance(x, UOp) else int(x)


# a negative pad shrinks: the part cut off and the part added. A symbolic pad is a size, never negative; Python's
# max would compare it, and a UOp comparison is truthy whatever its value
def _cut(x: Any) -> Any:
    return 0 if isinstance(x, UOp) else max(0, -x)


def _grow(x: Any) -> Any:
    return x if isinstance(x, UOp) else max(0, x)


def _shape_arg(shape: tuple[Any, ...], allow_neg: bool = False) -> tuple[int, ...]:
    shp = tuple(argfix(*shape)) if shape else ()
    if not all((isinstance(s, int) and not isinstance(s, bool)) or isinstance(s, UOp) for s in shp):
        raise TypeError(f"shape must be ints, got {shp}")
    if not allow_neg and any(isinstance(s, int) and s < 0 for s in shp):
        raise ValueError(f"shape must be non-negative, got {shp}")
    return shp


def _empty_like(x: Tensor) -> UOp:
    """New memory for x's values: x's shape, dtype and device, and on several devices x's shards (a sharded tensor's
    clone is sharded the same way, not replicated)."""
    from fusegrad.schedule.multi import Placement, register_multi_buffer

    target = Tensor.empty(*x.shape, device=x.device, dtype=x.dtype).uop
    if isinstance(x.device, tuple) and (axis := x._uop.axis) is not None:
        register_multi_buffer(target.base, Placement(axis=axis), x.shape)
    return target


def _is_kernelized_view(u: UOp) -> bool:
    base = u.base
    return base.op is Ops.ASSIGN and base.src[1].op is Ops.KERNEL


def _uop_from_data(data: Any, device: str | tuple[str, ...], dtype: DType | None) -> UOp:
    """Constants become CONST nodes; lists, tuples, numpy arrays and bytes become a buffer filled on the device."""
    import numpy as np

    if isinstance(data, (bool, int, float)):
        dt = dtype if dtype is not None else dtypes.from_py(data)
        return UOp.const_tensor(dt, data, device)
    if isinstance(data, bytes):
        arr = np.frombuffer(data, dtype=np.uint8)
        dt = dtype if dtype is not None else dtypes.uint8
    elif isinstance(data, (list, tuple)):
        dt = dtype if dtype is not None else _infer_list_dtype(data)
        np_dt = _to_np_dtype(dt)
        if np_dt is None and dtypes.is_float(dt):  # bfloat16, fp8: numpy has no such type; made in float32, then cast
            return _uop_from_data(data, device, dtypes.float32).cast(dt)
        if np_dt is None:
            raise TypeError(f"Tensor: cannot build a {dt} tensor from a list")
        arr = _list_to_numpy(data, np_dt)
    elif isinstance(data, (np.ndarray, np.generic)):
        return _uop_from_numpy(np.asarray(data), device)
    else:
        raise TypeError(
            f"Tensor: cannot build a tensor from {type(data).__name__}; "
            "expected a number, list, tuple, numpy array, bytes or UOp"
        )
    arr = np.ascontiguousarray(arr).reshape(arr.shape)  # ascontiguousarray makes 0-d arrays 1-d
    if isinstance(device, tuple):  # several devices: fill the first, replicate on realize
        return _uop_from_data(arr, device[0], dt).copy_to_device(device)
    buf = UOp.new_buffer(device, arr.size, dt)
    if arr.size:
        buf.buffer.allocate().copyin(arr.reshape(-1).view(np.uint8).data)
    return buf.reshape(arr.shape)


def _list_to_numpy(data: Any, np_dt: Any) -> Any:
    """A nested list as a numpy array of `np_dt`, converted the way a cast does: ints wrap modulo the width
    ([-1] as uint8 is [255], 1 << 33 as uint32 is 0), floats truncate towards zero, and large floats saturate to inf.
    Raises ValueError for ragged lists."""
    import numpy as np

    try:
        natural = np.array(data)
    except ValueError as e:
        raise ValueError(f"Tensor: the nested list is ragged (every row needs the same length): {e}") from e
    if natural.dtype == object:  # ints past int64 mixed with negatives: numpy's own checked conversion
        return np.array(data, dtype=np_dt)
    with np.errstate(over="ignore", invalid="ignore"):
        return natural.astype(np_dt)


def _uop_from_numpy(array: Any, device: str | tuple[str, ...]) -> UOp:
    """A numpy array without a host copy: an NPY buffer wraps its memory, copied to `device` only when realized.

    Only a non-contiguous array is copied (once, into a contiguous one); until the COPY runs, writes to the array are
    seen by the tensor. Empty arrays need no memory: an unallocated buffer on the device."""
    dt = _from_np_dtype(array.dtype)
    if array.size == 0:
        return UOp.new_buffer(device, 0, dt).reshape(array.shape)
    npy = UOp.new_buffer("NPY", array.size, dt)
    npy.buffer.allocate(array)
    view = npy.reshape(array.shape)
    return view if device == "NPY" else view.copy_to_device(device)


def _infer_list_dtype(data: Any) -> DType:
    flat: list[Any] = []
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        else:
            flat.append(x)
    if not flat:
        return dtypes.default_float
    if all(isinstance(x, bool) for x in flat):
        return dtypes.bool
    if all(isinstance(x, (bool, int)) for x in flat):
        return dtypes.default_int
    return dtypes.default_float


# *** gradients: built by compute_gradient, rebuilt for a graph of a structure seen before ***

GRADIENT_RECIPES = 64  # gradient graphs kept; the oldest goes first
# (structure of (root, root_grad), targets' positions) -> (the positions compute_gradient gave gradients, their
# graph over the structure's nodes, or None when it can't be rebuilt, and the realize walks its builds continued:
# GradientBuild.continuations). Mutated in place, never rebound.
gradient_recipes: dict[
    tuple[Any, ...], tuple[tuple[int, ...], GraphRecipe | None, dict[tuple[int, ...], Continuation | None]]
] = {}


def _gradients(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
    """compute_gradient's result. The gradient graph is a function of the graph's structure (ops, dtypes, args,
    sharing) and the targets' places in it, and a training step differentiates a graph of one structure every time:
    the second time on, it is rebuilt from the first one's recipe on this graph's nodes (a walk of the forward graph
    and one node made per gradient node, instead of a derivative rule matched per node). VIZ's rewrite tracking
    (TRACK_MATCH_STATS >= 2) and graphs the schedule cache can't key (symbolic, sharded) are built every time."""
    from fusegrad.gradient import compute_gradient

    if TRACK_MATCH_STATS.value >= 2:
        return compute_gradient(root, root_grad, targets)
    structure = graph_structure(UOp.sink(root, root_grad), remember_first=True)  # the realize of root walks on
    if structure.key is None:
        return compute_gradient(root, root_grad, targets)
    position = structure.position
    key = (structure.key, tuple(sorted(position[t] for t in targets if t in position)))
    if (entry := gradient_recipes.get(key)) is None:
        grads = compute_gradient(root, root_grad, targets)
        if len(gradient_recipes) >= GRADIENT_RECIPES:
            del gradient_recipes[next(iter(gradient_recipes))]
        recipe = GraphRecipe.of(list(grads.values()), structure.nodes)
        gradient_recipes[key] = (tuple(position[u] for u in grads), recipe, {})
        return grads
    places, recipe, continuations = entry
    if recipe is None:
        return compute_gradient(root, root_grad, targets)
    nodes = structure.nodes
    made = recipe.build_all(nodes)
    outputs = [made[i] for i in recipe.outputs]
    note_gradient_build(GradientBuild(root, made, {u: i for i, u in enumerate(outputs)}, continuations))
    return dict(zip([nodes[i] for i in places], outputs, strict=True))


# *** realizing: the one path from lazy tensors to buffers (Tensor.realize, a random draw inside a capture) ***


def realize_tensors(tensors: Sequence[Tensor], do_update_stats: bool = True, alone: bool = False) -> None:
    """Compute `tensors` in one schedule: a cached one when an earlier realize had this structure (SCHEDULE_CACHE,
    engine/cache.py). `alone`: no other live tensor's graph holds their nodes (a random draw's key and state), so
    only they are repointed, without the walk over every lazy tensor's graph."""
    _recipes.host_events += 1  # a realize: an op doing this can't be rebuilt from a recipe
    only = tensors if alone else None
    bases = [t._uop.base for t in tensors]
    if all(b.op in _SETTLED_OPS for b in bases):  # realized memory and constants (`loss.item()`): nothing to run
        return  # (before any SINK node is made: an optimiser's step asks this of its realized gradients)
    sink = UOp.sink(*[t._uop for t in tensors])
    if all(b.op in _SETTLED_OPS or (b.op is Ops.ASSIGN and b.src[1].op is Ops.KERNEL) for b in bases):
        # nothing to kernelize (_is_done); kernels an earlier kernelize() built still run
        _schedule_and_run(tensors, None, do_update_stats, only, kernelized=True)
        return
    if not schedule_cache_on():
        cache_counts["off"] += 1
        _schedule_and_run(tensors, None, do_update_stats, only)
        return
    start = time.perf_counter()
    structure = graph_structure(sink)
    entry = schedule_cache.get(structure.key) if structure.key is not None else None
    if entry is None:
        cache_counts["miss"] += 1
        _schedule_and_run(tensors, structure, do_update_stats, only)
        return
    # the replay frees the graph before its kernels run, once the tensors are repointed: no local here holds it
    held = [structure]
    del structure, sink, bases
    run_hit(entry, start, lambda: replay_into(entry, held, do_update_stats, functools.partial(_apply_map, only=only)))


def _schedule_and_run(
    tensors: Sequence[Tensor],
    structure: Structure | None,
    do_update_stats: bool,
    only: Sequence[Tensor] | None,
    kernelized: bool = False,
) -> None:
    """The scheduler's path: kernelize (unless every tensor is `kernelized` already), create the schedule, run it,
    settle the tensors (`only` these, see realize_tensors); then remember it under `structure`."""
    from fusegrad.engine.schedule import create_schedule  # the scheduler loads on the first realize
    from fusegrad.schedule.kernelize import kernelize

    becomes: dict[UOp, UOp] = {}
    start = time.perf_counter()
    if not kernelized:
        result = kernelize(UOp.sink(*[t._uop for t in tensors]))
        becomes = result.becomes
        _apply_map(becomes, only)
    sink = UOp.sink(*[t._uop for t in tensors])
    items = create_schedule(sink)
    if DEBUG.value >= 1 and not kernelized:  # the kernels that run: after create_schedule merged siblings
        took = (time.perf_counter() - start) * 1e3
        hit = "" if structure is None else " (schedule cache miss)"
        print(colored(f"scheduled {len(items)} kernels in {took:.2f} ms{hit}", "cyan"))
    ran = list(items)  # run_schedule pops them
    run_schedule(items, do_update_stats=do_update_stats)
    assigns = _kernel_assigns(sink)
    settle = {u: u.src[0] for u in assigns}
    _apply_map(settle, only)
    if structure is not None and structure.key is not None:
        leaves = set(structure.leaves)
        made = list(dict.fromkeys(a.src[0] for a in assigns if a.src[0] not in leaves))
        record(structure, ran, made, {old: new.substitute(settle) for old, new in becomes.items()})


def _kernelize(tensors: list[Tensor]) -> None:
    from fusegrad.schedule.kernelize import kernelize

    sink = Tensor._sink(tensors)
    if all(_is_done(u) for u in sink.src):
        return
    start = time.perf_counter()
    result = kernelize(sink)
    if DEBUG.value >= 1:
        took = (time.perf_counter() - start) * 1e3
        print(colored(f"scheduled {result.kernel_count} kernels in {took:.2f} ms", "cyan"))
    _apply_map(result.becomes)


def _is_done(u: UOp) -> bool:
    """Nothing to schedule: memory, a constant, or a buffer whose kernel is already built."""
    return _is_settled(u) or _is_kernelized_view(u)


def _settle_base(u: UOp) -> UOp:
    """Below a view: AFTER(memory, write) becomes the memory once the write has been kernelized or run."""
    from fusegrad.schedule.kernelize import after_written

    while u.base.op is Ops.AFTER and (written := after_written(u.base)) is not None:
        u = u.substitute({u.base: written})
    return u


def _write_target(u: UOp) -> UOp:
    """The memory an assign to `u` writes: a pending write's target (after that write), else `u` settled."""
    if u.op is Ops.ASSIGN and u.src[1].op is not Ops.KERNEL:  # a pending in-place write (e.g. `a += 1` twice)
        view, base = u.src[0], u.src[0].base
        return view.substitute({base: UOp(Ops.AFTER, base.dtype, (base, u))})
    return _settle_base(u)


def _is_plain_buffer(u: UOp) -> bool:
    """A realized buffer (or a view of one, or a constant): nothing below it can be replaced.

    Movement ops have one source and these bases only DEVICE/UNIQUE ones, so the base decides (no graph walk)."""
    return u.base.op in (Ops.BUFFER, Ops.CONST, Ops.IOTA)


def _is_settled(u: UOp) -> bool:
    """A realized buffer, a view of one or a constant: no realize can repoint it. An IOTA (arange) is not: nothing
    below it can be replaced, but a realize replaces the IOTA itself with its buffer."""
    return u.base.op in (Ops.BUFFER, Ops.CONST)


_SETTLED_OPS = frozenset({Ops.BUFFER, Ops.CONST})  # a base that is memory or a constant: _is_settled


def _apply_map(becomes: Mapping[UOp, UOp], only: Sequence[Tensor] | None = None) -> None:
    """Point every live tensor whose graph contains a key of `becomes` at the replacement (only lazy tensors can:
    a realized buffer's graph holds nothing to replace; those that became one leave the lazy set here). `only`
    limits that to these tensors, for a caller that knows no other tensor's graph holds their nodes: it skips the
    walk over every lazy tensor's graph."""
    if not becomes:
        return
    others: list[Tensor] = []
    for ref in list(_lazy_tensors) if only is None else [t._ref for t in only if t._ref in _lazy_tensors]:
        if (t := ref()) is None:
            continue
        if (u := t._uop) in becomes:
            t.uop = u = becomes[u]
        elif not _is_plain_buffer(u):
            others.append(t)
        if _is_settled(u):
            del _lazy_tensors[ref]
    if not others:
        return
    sink = UOp.sink(*[t._uop for t in others])
    if isinstance(becomes, dict):
        replacements = becomes
    else:  # a replay's map builds a node when looked up: only those these graphs hold (often none: unrelated tensors)
        held = {s for u in sink.toposort(gate=lambda u: u not in becomes) for s in u.src if s in becomes}
        if not held:
            return
        replacements = {u: becomes[u] for u in held}
    new_sink = sink.substitute(replacements, name="apply becomes map")
    for t, new in zip(others, new_sink.src, strict=True):
        t.uop = new
