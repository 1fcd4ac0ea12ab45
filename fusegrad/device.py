"""Stage 8 of the pipeline: the device registry (`Device["CPU"]`), device memory (`Buffer` on an `Allocator` with an LRU
cache), the compile cache (`Compiler`) and `Compiled`, the device base class the runtimes in runtime/ops_*.py extend.

Entry points: `Device[name]` opens a device; `Buffer(device, size, dtype).allocate()` gets memory on it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import decimal
import errno
import functools
import importlib
import itertools
import mmap
import os
import pathlib
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from fusegrad.diskcache import CacheKey
from fusegrad.dtype import DType, _to_np_dtype, dtypes
from fusegrad.helpers import (
    ALLOW_DEVICE_USAGE,
    CCACHE,
    CRASH_REPORT,
    DEBUG,
    DEV,
    LRU,
    MAX_BUFFER_SIZE,
    PROFILE,
    VIZ,
    GlobalCounters,
    ProfileEvent,
    ProfilePointEvent,
    TracingKey,
    colored,
    diskcache_get,
    diskcache_put,
    flat_mv,
    is_numpy_ndarray,
    mv_address,
    to_mv,
)

if TYPE_CHECKING:
    import numpy as np

    from fusegrad.renderer import Renderer

# *** Device: the registry ***

ALL_DEVICES = ["CPU", "PYTHON"]  # candidates for Device.DEFAULT, best first; NULL and DISK are never picked
_HOST_ONLY_DEVICES = ("DISK", "NPY", "PYTHON")  # usable even with ALLOW_DEVICE_USAGE=0
_STORAGE_DEVICES = ("DISK", "NPY")  # hold data but run no kernels: `python -m fusegrad.device` doesn't list them


@functools.cache
def _canonicalize(device: str) -> str:
    """'cpu' -> 'CPU', 'CPU:0' -> 'CPU', 'cpu:1' -> 'CPU:1', 'disk:/tmp/x' -> 'DISK:/tmp/x' (case kept after ':')."""
    name, sep, rest = device.partition(":")
    return (name.upper() + sep + rest).removesuffix(":0")


class _Device:
    """The device registry (the singleton `Device`): `Device["cpu:1"]` opens (once) and returns that device.

    Indexing raises ValueError for an unknown name, RuntimeError for a device that cannot open (the message names
    what is missing: a driver, a compiler) or when ALLOW_DEVICE_USAGE=0 forbids it.

    Examples:
        >>> Device["cpu"] is Device["CPU"]  # opened once, under its canonical name
        True
        >>> type(Device["CPU"]).__name__
        'CPUDevice'
    """

    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._opened_devices: set[str] = set()  # compat: the names opened so far
        self._selected: str | None = None  # Device.DEFAULT when DEV is unset, picked once

    @functools.cached_property
    def _devices(self) -> list[str]:
        """Every runtime this checkout has (runtime/ops_<name>.py), found on first use rather than at import."""
        runtime = pathlib.Path(__file__).parent / "runtime"
        return sorted(p.stem.removeprefix("ops_").upper() for p in runtime.glob("ops_*.py"))

    def canonicalize(self, device: str | None) -> str:
        """The canonical name of `device` (None means Device.DEFAULT); not cached, since DEFAULT may change.

        Args:
            device: a device name in any case, with or without an index (`"cpu"`, `"CPU:1"`), or None.

        Returns:
            The name tensors report: upper case, `:0` dropped.

        Raises:
            TypeError: device is not a str (or None).

        Examples:
            >>> Device.canonicalize("cpu:0"), Device.canonicalize("cpu:1")
            ('CPU', 'CPU:1')
        """
        if device is None:
            return self.DEFAULT
        if not isinstance(device, str):
            raise TypeError(f"Device: device name must be a str: got {type(device).__name__}")
        return _canonicalize(device)

    def __getitem__(self, ix: str) -> Compiled:
        name = self.canonicalize(ix)
        if (opened := self._opened.get(name)) is not None:
            return opened
        if not ALLOW_DEVICE_USAGE and name.split(":")[0] not in _HOST_ONLY_DEVICES:
            raise RuntimeError(f"Device: usage of device {name} disallowed (ALLOW_DEVICE_USAGE=0)")
        device = self.get_class(name)(name)
        if DEBUG >= 1:
            print(f"opened device {name} from pid:{os.getpid()}")
        if not self._opened:
            if VIZ.value or PROFILE.value:  # registered before the finalizer, so it runs after: last frees included
                arm_viz_at_exit()
            atexit.register(_finalize_devices)  # registered on first open, not at import
        self._opened[name] = device
        self._opened_devices.add(name)
        return device

    def get_class(self, ix: str) -> Callable[[str], Compiled]:
        """The `<Name>Device` class of runtime/ops_<name>.py, importing it on first use.

        Args:
            ix: a device name (its index is ignored).

        Returns:
            The device class (a Compiled subclass), not an opened device.

        Raises:
            ValueError: an unknown device, or a runtime module without its device class.

        Examples:
            >>> Device.get_class("cpu:1").__name__
            'CPUDevice'
            >>> Device.get_class("TPU")
            Traceback (most recent call last):
            ValueError: Device: unknown device 'TPU': expected one of ...
        """
        base = self.canonicalize(ix).split(":")[0]
        if base not in self._devices:
            raise ValueError(f"Device: unknown device {ix!r}: expected one of {', '.join(self._devices)}")
        module = importlib.import_module(f"fusegrad.runtime.ops_{base.lower()}")
        found = [c for n, c in vars(module).items() if n.lower() == f"{base.lower()}device" and isinstance(c, type)]
        if not found or not issubclass(found[0], Compiled):
            raise ValueError(f"Device: fusegrad.runtime.ops_{base.lower()} has no {base.title()}Device(Compiled) class")
        return found[0]

    @property
    def default(self) -> Compiled:
        """The opened device object for `Device.DEFAULT` (its allocator, compiler and runtime).

        Examples:
            >>> Device.default is Device[Device.DEFAULT]
            True
        """
        return self[self.DEFAULT]

    @property
    def DEFAULT(self) -> str:  # noqa: N802  # compat name
        """DEV (e.g. `DEV=PYTHON`) when set, else the first usable device of ALL_DEVICES.

        Assigning to it raises AttributeError: set the DEV flag instead (`with Context(DEV="PYTHON"):`).

        Examples:
            >>> Tensor([1]).device == Device.DEFAULT
            True
            >>> from fusegrad.helpers import Context
            >>> with Context(DEV="PYTHON"):
            ...     Device.DEFAULT
            'PYTHON'
        """
        if DEV.value:
            return _canonicalize(DEV.value)
        if self._selected is None:
            self._selected = self._select_device()
        return self._selected

    @DEFAULT.setter
    def DEFAULT(self, value: str) -> None:  # noqa: N802  # compat name
        raise AttributeError(
            f"Device.DEFAULT can't be set: run with DEV={value} or use `with Context(DEV={value!r}):` (or DEV.value)"
        )

    def _select_device(self) -> str:
        failures: list[str] = []
        for name in ALL_DEVICES:
            try:
                self[name].check_usable()
            except Exception as err:  # any failure means "not usable"; the reason is reported below
                failures.append(f"{name}: {type(err).__name__}: {err}")
                continue
            return name
        raise RuntimeError("Device: no usable device:\n  " + "\n  ".join(failures))

    def get_available_devices(self) -> Iterator[str]:
        """The devices of ALL_DEVICES that open and pass their self-check, best first.

        Returns:
            An iterator of device names (it opens each device to check it).

        Examples:
            >>> "CPU" in list(Device.get_available_devices())
            True
        """
        for name in ALL_DEVICES:
            try:
                self[name].check_usable()
            except Exception:  # unusable devices are simply not listed
                continue
            yield name


Device: _Device = _Device()


def arm_viz_at_exit() -> None:
    """Save (and with VIZ=1 serve) the VIZ trace and profile when the process exits; called where VIZ or PROFILE is
    first found set. The one place below the programs that reaches viz (docs/ARCHITECTURE.md, Layers)."""
    from fusegrad.viz.serve import register_at_exit  # viz imports this module: import on first use

    register_at_exit()


def _finalize_devices() -> None:
    for device in list(Device._opened.values()):
        device.finalize()


def canonicalize_device(device: str | tuple[str, ...] | list[str] | None) -> str | tuple[str, ...]:
    """Canonical name(s): a one-element tuple or list collapses to its single name."""
    if not isinstance(device, tuple | list):
        return Device.canonicalize(device)
    canonical = tuple(Device.canonicalize(d) for d in device)
    return canonical[0] if len(canonical) == 1 else canonical


# *** profile events of devices (helpers.py holds the range and point events) ***


@dataclass(frozen=True)
class ProfileDeviceEvent(ProfileEvent):
    """A device's clock offset to the host clock, per queue. Also built as `(device, tdiff, props)` (one offset)."""

    device: str
    comp_tdiff: decimal.Decimal = decimal.Decimal(0)
    copy_tdiff: decimal.Decimal = decimal.Decimal(0)
    props: dict[str, Any] | None = None  # Any: backend-specific device properties, JSON-able

    def __post_init__(self) -> None:
        # the positional (device, tdiff, props) form puts props where copy_tdiff is: one offset for both queues
        if isinstance(self.copy_tdiff, dict):
            object.__setattr__(self, "props", self.copy_tdiff)
            object.__setattr__(self, "copy_tdiff", self.comp_tdiff)

    @property
    def tdiff(self) -> decimal.Decimal:
        return self.comp_tdiff


@dataclass(frozen=True)
class ProfileProgramEvent(ProfileEvent):
    device: str
    name: str
    lib: bytes | None
    base: int | None
    tag: int | None = None
    profile_key: bytes | None = None


@dataclass(frozen=True)
class ProfileGraphEntry:
    device: str
    name: str | TracingKey
    st_id: int  # index into ProfileGraphEvent.sigs of the start timestamp
    en_id: int
    is_copy: bool = False


@dataclass(frozen=True)
class ProfileGraphEvent(ProfileEvent):
    ents: list[ProfileGraphEntry]
    deps: list[list[int]]
    sigs: list[decimal.Decimal]


# *** Buffer ***


@dataclass(frozen=True, slots=True)
class BufferSpec:
    """How a buffer's memory is allocated; part of the LRU cache key."""

    uncached: bool = False  # device memory the host reads without caching
    cpu_access: bool = False  # the host may map it
    host: bool = False  # lives in host memory
    nolru: bool = False  # freed at once, never kept for reuse
    zero: bool = False  # must start zero-filled (so never reused from the LRU cache)
    external_ptr: int | None = None  # memory owned elsewhere at this address: never allocated or freed here
    # the fields' hash, worked out once: every allocation and free looks the LRU cache up by (size, spec)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare)  # what == compares
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash


_DEFAULT_SPEC = BufferSpec()  # shared (frozen): building one per Buffer costs more than the rest of its __init__


@dataclass(eq=False, slots=True, weakref_slot=True)
class BufferStorage:
    """One allocation's handle; a view remembers its base's storage object to notice a re-allocation (and a TinyJit
    replay its inputs' weakly, engine/jit.SameCall)."""

    buf: Any  # Any: the allocator's handle (a memoryview on host devices, None on NULL, a pointer on GPUs)
    address: int | None = None  # a host allocation's address, kept by the first launch that works it out


class Buffer:
    """`size` elements of `dtype` on `device`, allocated lazily; a view (`base=`, `offset=` bytes) shares base memory.

    Raises TypeError for a non-DType dtype, ValueError for a view outside its base. Example:
    `Buffer("CPU", 4, dtypes.float32).allocate().copyin(memoryview(bytes(16)))`.
    """

    _is_finalizing = staticmethod(sys.is_finalizing)  # for __del__, which may run after this module's globals went
    profile_events: ClassVar[list[ProfileEvent]] = []  # alloc/free points; mutated in place, never rebound
    # trace numbers come from a counter, not the list's length: a streaming profile drains profile_events as it goes
    _trace_numbers: ClassVar[Iterator[int]] = itertools.count()

    def __init__(
        self,
        device: str,
        size: int,
        dtype: DType,
        opaque: object = None,
        options: BufferSpec | None = None,
        initial_value: bytes | bytearray | memoryview | None = None,
        base: Buffer | None = None,
        offset: int = 0,
        preallocate: bool = False,
        uop_refcount: int = 0,
    ) -> None:
        if not isinstance(dtype, DType):
            raise TypeError(f"Buffer: dtype must be a DType: got {type(dtype).__name__}")
        if size < 0:
            raise ValueError(f"Buffer: size must be >= 0: got {size}")
        self.device, self.size, self.dtype, self.offset = Device.canonicalize(device), size, dtype, offset
        self.nbytes = size * dtype.itemsize  # a plain attribute: every allocation, free and launch reads it
        self.options = options if options is not None else _DEFAULT_SPEC
        self._base, self.allocated_views, self._uop_refcount = base, 0, uop_refcount
        self._allocator: Allocator[Any] | None = None  # looked up on first use: a Buffer opens no device
        self._trace_num: int | None = None
        self._storage: BufferStorage | None = None
        self._base_storage: BufferStorage | None = None  # for a view: the base storage it was carved from
        if base is None:
            if offset != 0:
                raise ValueError(f"Buffer: a base buffer can't have an offset: got {offset}, expected 0")
            if opaque is not None:
                self.allocate(opaque)
            if initial_value is not None:
                self.ensure_allocated().copyin(memoryview(initial_value))
        else:
            self._check_view(base)
        if preallocate:
            self.ensure_allocated()

    def _check_view(self, base: Buffer) -> None:
        if base._base is not None:
            raise ValueError("Buffer: a view's base must be a base buffer, not another view")
        if base.device != self.device:
            raise ValueError(
                f"Buffer: a view must be on its base's device: got {self.device}, base is on {base.device}"
            )
        if self.offset < 0 or self.offset + self.nbytes > base.nbytes:
            raise ValueError(
                f"Buffer: view of {self.nbytes} bytes at offset {self.offset} is outside its {base.nbytes}-byte base"
            )

    def __del__(self) -> None:
        # suppress_finalizing's rule written out (one frame less: ~100 buffers die per training step)
        try:
            if getattr(self, "_storage", None) is not None:
                self.deallocate()
        except Exception:
            if not self._is_finalizing():  # through the class: at shutdown this module's globals may be None
                raise

    def __repr__(self) -> str:
        offset = f" offset:{self.offset}" if self._base is not None else ""
        options = f" options={self.options}" if self.options != BufferSpec() else ""
        real = f"real:{self.is_allocated()} device:{self.device} size:{self.size} dtype:{self.dtype}"
        return f"<buf {real}{offset}{options}>"

    @property
    def base(self) -> Buffer:
        return self._base if self._base is not None else self

    @property
    def allocator(self) -> Allocator[Any]:
        if (allocator := self._allocator) is None:  # a plain attribute: cached_property takes a lock on every miss
            allocator = self._base.allocator if self._base is not None else Device[self.device].allocator
            self._allocator = allocator
        return allocator

    @property
    def _buf(self) -> Any:  # Any: the allocator's handle, see BufferStorage
        storage = self.ensure_allocated()._storage
        assert storage is not None, "Buffer: ensure_allocated left no storage"
        return storage.buf

    @property
    def uop_refcount(self) -> int:
        """How many BUFFER UOps refer to this memory (kept on the base); the memory planner skips referenced buffers."""
        return self.base._uop_refcount

    def ref(self, cnt: int) -> Buffer:
        self.base._uop_refcount += cnt
        return self

    @property
    def trace_num(self) -> int:
        """This buffer's key in profile events: a number unique in this process, given when first asked for."""
        if self._trace_num is None:
            self._trace_num = next(Buffer._trace_numbers)
        return self._trace_num

    # *** allocation ***

    def is_allocated(self) -> bool:
        """True once allocated; a view also needs its base still holding the memory the view was carved from."""
        return self._storage is not None and (self._base is None or self._base_storage is self._base._storage)

    def is_initialized(self) -> bool:
        """True when the buffer holds memory of its own device, i.e. `is_allocated()` (the reference's name)."""
        return self.is_allocated()

    def ensure_allocated(self) -> Buffer:
        # is_allocated() inlined: every kernel launch asks this of each of its buffers
        if self._storage is not None and (self._base is None or self._base_storage is self._base._storage):
            return self
        return self.allocate()

    def allocate(self, opaque: object = None, external_ptr: int | None = None) -> Buffer:
        """Get memory; a view carves it from its base (allocating the base if needed). `opaque` adopts host memory."""
        if self.is_allocated():
            raise RuntimeError(f"allocate: buffer is already allocated: {self!r}")
        if DEBUG.value >= 7:
            print(f"buffer: allocate {self.nbytes} bytes on {self.device}")
        if external_ptr is not None:
            self.options = dataclasses.replace(self.options, external_ptr=external_ptr)
        self._check_max_size()
        if self._base is not None:
            base_storage = self._base.ensure_allocated()._storage
            assert base_storage is not None, "allocate: the base has no storage after ensure_allocated"
            if self._storage is None:
                self._base.allocated_views += 1
            self._storage = BufferStorage(self.allocator._offset(base_storage.buf, self.nbytes, self.offset))
            self._base_storage = base_storage
            return self
        if opaque is not None:
            self.options = dataclasses.replace(self.options, nolru=True)  # not ours: never cached for reuse
            self._storage = BufferStorage(self._check_adopted(_adopt(opaque)))
        else:
            self._storage = BufferStorage(self.allocator.alloc(self.nbytes, self.options))
        self._count_alloc()
        return self

    def _check_adopted(self, handle: object) -> object:
        """Adopted host memory must be exactly this buffer's size: a zero-copy wrap can't pad or cut."""
        if isinstance(handle, memoryview) and handle.nbytes != self.nbytes:
            raise ValueError(
                f"allocate: opaque memory has the wrong size: got {handle.nbytes} bytes, "
                f"expected {self.nbytes} ({self.size} x {self.dtype})"
            )
        return handle

    def _check_max_size(self) -> None:
        limit = MAX_BUFFER_SIZE.value
        if not self.device.startswith("NULL") and self.size > limit > 0 and self.options.external_ptr is None:
            raise RuntimeError(
                f"allocate: buffer of {self.size} elements ({self.nbytes} bytes) of {self.dtype} on {self.device} "
                f"exceeds MAX_BUFFER_SIZE={limit} elements"
            )

    def _is_counted(self) -> bool:
        return not self.device.startswith("DISK") and self.options.external_ptr is None

    def _count_alloc(self) -> None:
        if self._is_counted():
            nbytes = self.nbytes
            GlobalCounters.mem_used += nbytes
            GlobalCounters.mem_used_per_device[self.device] += nbytes
        if PROFILE.value:
            arg = {"dtype": self.dtype, "sz": self.size}
            Buffer.profile_events.append(ProfilePointEvent(self.device, "alloc", self.trace_num, arg))

    def deallocate(self) -> None:
        """Give the memory back (to the allocator's LRU cache unless LRU=0 or the options forbid it)."""
        if self._storage is None:
            raise RuntimeError(f"deallocate: buffer is not allocated: {self!r}")
        if DEBUG.value >= 7:
            print(f"buffer: deallocate {self.nbytes} bytes on {self.device}")
        if self._base is None:
            nbytes = self.nbytes  # a property: size times the dtype's itemsize, read once here
            if self._is_counted():
                GlobalCounters.mem_used -= nbytes
                GlobalCounters.mem_used_per_device[self.device] -= nbytes
            if PROFILE.value:
                Buffer.profile_events.append(ProfilePointEvent(self.device, "free", self.trace_num))
            self.allocator.free(self._storage.buf, nbytes, self.options)
        else:
            self._base.allocated_views -= 1
        self._storage, self._base_storage = None, None

    def __reduce__(self) -> tuple[type[Buffer], tuple[object, ...]]:
        """Pickle a base with its contents (when allocated); a view pickles its base and re-carves itself."""
        if self._base is not None:
            return Buffer, (
                self.device,
                self.size,
                self.dtype,
                None,
                None,
                None,
                self._base,
                self.offset,
                self.is_allocated(),
            )
        contents = bytearray(self.as_memoryview()) if self.is_allocated() else None
        return Buffer, (self.device, self.size, self.dtype, None, self.options, contents)

    # *** data in and out ***

    def _check_transfer(self, op: str, mv: memoryview) -> memoryview:
        mv = flat_mv(mv)
        if len(mv) != self.nbytes:
            raise ValueError(
                f"{op}: size mismatch: got {len(mv)} bytes, expected {self.nbytes} ({self.size} x {self.dtype})"
            )
        if not self.is_allocated():
            raise RuntimeError(f"{op}: buffer is not allocated: call allocate() first: {self!r}")
        return mv

    def copyin(self, mv: memoryview) -> Buffer:
        """Copy host bytes (exactly nbytes of them) into the buffer."""
        mv = self._check_transfer("copyin", mv)  # before touching _buf, which would allocate
        self.allocator._copyin(self._buf, mv)
        return self

    def copyout(self, mv: memoryview) -> memoryview:
        """Copy the buffer into host memory mv (exactly nbytes); returns mv as flat bytes."""
        mv = self._check_transfer("copyout", mv)
        self.allocator._copyout(mv, self._buf)
        return mv

    def as_memoryview(self, allow_zero_copy: bool = False) -> memoryview:
        """The contents as flat bytes: a copy, or with allow_zero_copy the device's own host memory where it has one."""
        if not self.is_allocated():
            raise RuntimeError(f"as_memoryview: buffer is not allocated: {self!r}")
        if (host := self.allocator._as_buffer(self._buf)) is not None:
            self.allocator.dev.synchronize()
            return host if allow_zero_copy else memoryview(bytearray(host))
        return self.copyout(memoryview(bytearray(self.nbytes)))

    def numpy(self) -> np.ndarray[Any, Any]:
        """A numpy copy of the contents. Raises TypeError for dtypes numpy lacks (bfloat16, fp8)."""
        import numpy as np

        if (np_dtype := _to_np_dtype(self.dtype)) is None:
            raise TypeError(f"numpy: no numpy dtype for {self.dtype}")
        return np.frombuffer(self.as_memoryview(), dtype=np_dtype)

    def copy_from(self, src: Buffer) -> Buffer:
        """Copy src's contents into this buffer, through host memory."""
        if self.nbytes != src.nbytes:
            raise ValueError(f"copy_from: size mismatch: got {src.nbytes} bytes, expected {self.nbytes}")
        if not (self.is_allocated() and src.is_allocated()):
            raise RuntimeError(f"copy_from: both buffers must be allocated: got {self!r} <- {src!r}")
        return self.copyin(src.as_memoryview(allow_zero_copy=True))

    def view(self, size: int, dtype: DType, offset: int) -> Buffer:
        """A buffer of `size` x `dtype` at byte `offset` into this one, sharing its memory."""
        if not 0 <= offset < self.nbytes:
            raise ValueError(f"view: offset {offset} out of range for a buffer of {self.nbytes} bytes")
        return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)


def _adopt(opaque: object) -> object:
    """Host memory handed to Buffer.allocate: numpy arrays become byte memoryviews over their data."""
    if is_numpy_ndarray(opaque):
        import numpy as np

        array = np.ascontiguousarray(opaque)
        return array.data.cast("B") if array.nbytes else memoryview(bytearray(0))
    return opaque


# *** allocators ***

H = TypeVar("H")  # an allocator's handle to one allocation


class Allocator(Generic[H]):
    """Device memory: `alloc`/`free` keep freed allocations in an LRU cache by (size, options) and reuse them.

    Runtimes implement `_alloc`, `_free`, `_copyin`, `_copyout`, `_offset` and (for host memory) `_as_buffer`.
    """

    lru: ClassVar[bool] = True  # False: freed memory is released at once (DISK closes its file with the last buffer)

    def __init__(self, dev: Compiled) -> None:
        self.dev = dev
        self.default_buffer_spec = BufferSpec()
        self.cache: defaultdict[tuple[int, BufferSpec], list[H]] = defaultdict(list)

    def alloc(self, size: int, options: BufferSpec | None = None) -> H:
        """`size` bytes: a cached allocation of the same (size, options), else a new one.

        On MemoryError the cache is freed and the allocation retried once; raises MemoryError if that fails too.
        """
        if size <= 0:
            raise ValueError(f"alloc: size must be positive: got {size} bytes on {self.dev.device}")
        spec = options if options is not None else self.default_buffer_spec
        if cached := self.cache.get((size, spec)):
            return cached.pop()
        try:
            return self._alloc(size, spec)
        except MemoryError:
            held = self._describe_cache()
            self.free_cache()
        try:
            return self._alloc(size, spec)
        except MemoryError as err:
            raise MemoryError(
                f"alloc: out of memory on {self.dev.device}: {size} bytes requested; freeing the LRU cache "
                f"({held}) and retrying did not help"
            ) from err

    def _describe_cache(self) -> str:
        sizes = [size for (size, _), handles in self.cache.items() for _ in handles]
        return f"{len(sizes)} cached buffers, {sum(sizes)} bytes" if sizes else "it held nothing"

    def free(self, opaque: H, size: int, options: BufferSpec | None = None) -> None:
        spec = options if options is not None else self.default_buffer_spec
        if LRU and self.lru and not spec.nolru and not spec.zero and spec.external_ptr is None:
            self.cache[(size, spec)].append(opaque)
        else:
            self._free(opaque, spec)

    def free_cache(self) -> None:
        for (_, spec), handles in self.cache.items():
            for handle in handles:
                self._free(handle, spec)
            handles.clear()

    # *** implemented by the runtime ***

    def _alloc(self, size: int, options: BufferSpec) -> H:
        raise NotImplementedError(f"{type(self).__name__}: _alloc is not implemented")

    def _free(self, opaque: H, options: BufferSpec) -> None:
        """Release memory; the default suits handles that Python's garbage collector frees."""

    def _copyin(self, dest: H, src: memoryview) -> None:
        raise NotImplementedError(f"{type(self).__name__}: _copyin is not implemented")

    def _copyout(self, dest: memoryview, src: H) -> None:
        raise NotImplementedError(f"{type(self).__name__}: _copyout is not implemented")

    def _offset(self, buf: H, size: int, offset: int) -> H:
        raise NotImplementedError(f"{type(self).__name__}: views (_offset) are not implemented")

    def _as_buffer(self, src: H) -> memoryview | None:
        """The allocation as host memory, or None where the host can't see it directly."""
        return None


HUGEPAGE_BYTES = 2 << 20  # allocations this large ask for transparent huge pages (x86-64 and arm64 PMD size)


def host_memory(size: int, lead: int = 0) -> memoryview:
    """`size` zero-filled bytes of a page-aligned anonymous mapping, private to this process where the OS allows.

    Python's mmap maps shared memory by default; on Linux that is shmem, which gets no transparent huge pages unless
    shmem_enabled says so (it rarely does), and memory-bound kernels on it ran ~30% below numpy arrays. Nothing
    shares host buffers across processes (MPI copies through its own transport, the fuzz pool talks over pipes), so a
    private mapping loses nothing; a fork child gets a copy-on-write view, as with numpy's memory.

    An allocation of HUGEPAGE_BYTES or more is advised to use transparent huge pages, and its byte `lead` (where the
    caller's data starts: CPUAllocator keeps a guard before it) sits on a huge-page boundary of a mapping two huge
    pages longer (address space only: pages never touched take no memory), so that data of 2 MB multiples fills whole
    huge pages. Unaligned, its first and last partial huge pages stay 4 KB pages: on a 2-core KVM guest (Zen 4),
    where a 4 KB page's TLB miss costs a walk of two page tables, a sum of 64 MB on 4 KB pages ran 1.87 ms against
    0.94 on huge pages, and the unaligned buffers (62 of 64 MB huge) 5% slower than aligned ones. The guards, read
    at most, are never written: a read of an untouched page maps the zero page and takes no memory.
    """
    if not hasattr(mmap, "MAP_PRIVATE"):  # Windows: anonymous memory is private already
        return memoryview(mmap.mmap(-1, size, access=mmap.ACCESS_WRITE))
    if size < HUGEPAGE_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE))  # fileno -1: CPython adds MAP_ANONYMOUS
    mem = mmap.mmap(-1, size + 2 * HUGEPAGE_BYTES, flags=mmap.MAP_PRIVATE)
    with contextlib.suppress(OSError):  # EINVAL where the kernel has no THP: small pages still work
        mem.madvise(mmap.MADV_HUGEPAGE)
    whole = memoryview(mem)
    start = -(mv_address(whole) + lead) % HUGEPAGE_BYTES
    return whole[start : start + size]


class MallocAllocator(Allocator[memoryview]):
    """Host memory: each allocation is a page-aligned, zero-filled private anonymous mmap (`host_memory`), handled as
    a byte memoryview; 2 MB and larger ones start on a huge-page boundary and are advised to use transparent huge
    pages."""

    LEAD = 0  # bytes an allocation holds before its data (host_memory's `lead`): a subclass's guard

    def _alloc(self, size: int, options: BufferSpec) -> memoryview:
        if options.external_ptr is not None:
            return to_mv(options.external_ptr, size)
        try:
            return host_memory(size, self.LEAD)
        except OSError as err:
            if err.errno == errno.ENOMEM:
                raise MemoryError(f"mmap of {size} bytes failed on {self.dev.device}: {err}") from err
            raise

    def _copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def _copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview:
        return buf[offset : offset + size]

    def _as_buffer(self, src: memoryview) -> memoryview:
        return src


# *** compilers ***


class CompileError(RuntimeError):
    """A kernel failed to compile; the message holds the compiler's output and the kernel source."""

    def __init__(self, msg: str, src: str = "", stderr: str = "") -> None:
        super().__init__(msg)
        self.src, self.stderr = src, stderr


class Compiler:
    """Source -> binary. `compile_cached` keeps binaries in the disk cache table `cachekey` (when CCACHE is on)."""

    joins_sources: ClassVar[bool] = False  # True: sources joined into one text compile to one binary holding them all

    def __init__(self, cachekey: str | None = None) -> None:
        self.cachekey = cachekey  # the diskcache table, "compile_<name>"; None: never cached

    def compile(self, src: str) -> bytes:
        return src.encode()  # the default "compiler" passes the source through

    def cache_key(self, src: str) -> CacheKey:
        """What identifies a binary in the cache; compilers add their executable and flags."""
        return src

    def compile_cached(self, src: str) -> bytes:
        table = self.cachekey if CCACHE else None
        key = self.cache_key(src) if table is not None else None
        if table is not None and isinstance(lib := diskcache_get(table, key), bytes):
            return lib
        lib = self.compile(src)
        if table is not None:
            diskcache_put(table, key, lib)
        return lib

    def compile_cached_many(self, srcs: list[str]) -> list[bytes]:
        """Binaries of several sources whose kernels have distinct names. Where the compiler `joins_sources`, those not
        in the disk cache are built by one compiler run over the joined text (one process instead of one each: most of
        a small kernel's compile is process start-up), and that binary, holding them all, is cached under each source;
        when the joined build fails, each is built alone, so an error names its own kernel."""
        table = self.cachekey if CCACHE else None
        cached: dict[str, bytes] = {}
        for src in srcs:
            if table is not None and isinstance(lib := diskcache_get(table, self.cache_key(src)), bytes):
                cached[src] = lib
        todo = [src for src in dict.fromkeys(srcs) if src not in cached]
        if self.joins_sources and not CRASH_REPORT and len(todo) > 1:
            try:
                joined = self.compile("\n".join(todo))
            except CompileError:
                todo = []  # built one by one below
            for src in todo:
                cached[src] = joined if table is None else diskcache_put(table, self.cache_key(src), joined)
        return [cached[src] if src in cached else self.compile_cached(src) for src in srcs]

    def check_usable(self) -> None:
        """Raise (with how to fix it) if this compiler can't work here, e.g. no C compiler is installed."""

    def disassemble(self, lib: bytes) -> None:
        """Print the binary's assembly, where the backend can."""


# *** compiled devices ***


class Program(Protocol):
    """A loaded kernel: called with the buffers' handles (slot order) and the variables' values."""

    def __call__(
        self,
        *bufs: Any,  # Any: allocator handles, see BufferStorage
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None: ...


# a runtime's program class: (device, function name, binary) -> Program; Any: each runtime takes its own device type
ProgramClass = Callable[[Any, str, bytes], Program]


class Compiled:
    """A device that compiles kernels: its `allocator`, `renderer` (made on first use), `compiler` and `runtime`.

    `runtime(name, lib)` loads a compiled kernel. Raises RuntimeError when asked for a part the device lacks.
    """

    profile_events: ClassVar[list[ProfileEvent]] = [ProfileDeviceEvent("CPU")]  # CPU is the host clock

    def __init__(
        self,
        device: str,
        allocator: Allocator[Any],
        renderer: Callable[[], Renderer] | None,
        compiler: Compiler | None,
        runtime: ProgramClass | None,
        graph: object = None,
    ) -> None:
        self.device, self.allocator, self.graph = device, allocator, graph
        self._make_renderer, self._compiler, self._program_class = renderer, compiler, runtime

    @functools.cached_property
    def renderer(self) -> Renderer:
        """Made on first use: renderers live in fusegrad/renderer, imported only when a kernel is rendered."""
        if self._make_renderer is None:
            raise RuntimeError(f"{self.device}: this device has no renderer{self._compute_hint()}")
        return self._make_renderer()

    @property
    def compiler(self) -> Compiler:
        if self._compiler is None:
            raise RuntimeError(f"{self.device}: this device has no compiler{self._compute_hint()}")
        return self._compiler

    def _compute_hint(self) -> str:
        if self.device.split(":")[0] not in _STORAGE_DEVICES:
            return ""
        return ": it stores data but can't compute: move the tensor to a compute device first, e.g. .to('CPU')"

    def runtime(self, name: str, lib: bytes) -> Program:
        """Load kernel `name` from a binary made by this device's compiler."""
        if self._program_class is None:
            raise RuntimeError(f"{self.device}: this device can't run programs")
        return self._program_class(self, name, lib)

    def check_usable(self) -> None:
        """Raise if this device can't run kernels here (used to pick Device.DEFAULT)."""
        if self._compiler is not None:
            self._compiler.check_usable()

    def synchronize(self) -> None:
        """Wait for queued work; host devices run synchronously."""

    def device_props(self) -> dict[str, Any]:  # Any: backend-specific, JSON-able
        return {}

    def finalize(self) -> None:
        """Called at exit for every opened device."""
        try:
            self.synchronize()
        except RuntimeError as err:
            print(f"{self.device} synchronization failed before finalizing: {err}")


def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
    """Whether kernels on `device` (default Device.DEFAULT) can compute in `dtype`: its renderer writes that type.
    A storage-only device (DISK, NPY) holds every dtype. Example: `is_dtype_supported(dtypes.bfloat16, "CPU")`."""
    dev = Device[device if device is not None else Device.DEFAULT]
    if dev._make_renderer is None:
        return True
    return dtype.scalar() not in getattr(dev.renderer, "unsupported_dtypes", frozenset())


# *** `python -m fusegrad.device`: which devices work here ***


def _smoke_test(name: str) -> None:
    """Open the device, check its compiler, round-trip a buffer, and run a kernel through Tensor where it exists."""
    device = Device[name]
    device.check_usable()
    buf = Buffer(name, 3, dtypes.int32, initial_value=bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]))
    if not name.startswith("NULL") and buf.as_memoryview().cast("i").tolist() != [1, 2, 3]:
        raise ValueError(f"buffer round trip gave {buf.as_memoryview().cast('i').tolist()} instead of [1, 2, 3]")
    try:
        from fusegrad.tensor import Tensor  # type: ignore[import-not-found, unused-ignore]  # lands with the frontend
    except ImportError:
        return
    if not name.startswith("NULL") and (got := (Tensor([1, 2, 3], device=name) * 2).tolist()) != [2, 4, 6]:
        raise ValueError(f"(Tensor([1, 2, 3]) * 2) gave {got} instead of [2, 4, 6]")


def enumerate_devices_str() -> Iterator[str]:
    """One line per runtime: PASS, or FAIL and why; `*` marks Device.DEFAULT."""
    try:
        default: str | None = Device.DEFAULT
    except RuntimeError:
        default = None
    for name in [d for d in Device._devices if d not in _STORAGE_DEVICES]:
        try:
            _smoke_test(name)
            result = colored("PASS", "green")
        except Exception as err:  # report every failure, whatever it is
            result = f"{colored('FAIL', 'red')} {type(err).__name__}: {err}"
        yield f"{'*' if name == default else ' '} {name:8s}: {result}"


if __name__ == "__main__":
    # run through the imported module: as __main__ this file is a second copy whose classes the runtimes don't use
    from fusegrad.device import enumerate_devices_str as _enumerate

    for line in _enumerate():
        print(line)
