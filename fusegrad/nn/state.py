"""Model state: the tensors of a model as a flat dict, loading one back, and the checkpoint files that hold them.

`get_state_dict` walks a model's attributes into keys like `layers.0.weight`; `load_state_dict` assigns a dict into the
model's tensors. `safe_save`/`safe_load` write and read safetensors files and `torch_load` reads PyTorch checkpoints
(zip and legacy formats) with a pickle reader that refuses any code. Loaded tensors are views of the file on the DISK
device: nothing is read until a tensor is used (`.to(device)`), so a large checkpoint is never read at once.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import pathlib
import pickle
import secrets
import stat
import struct
import tarfile
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from fusegrad.device import Buffer, Device
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import prod
from fusegrad.llm.gguf import gguf_load as gguf_load  # GGUF files (reference: tinygrad.llm.gguf, once nn.state)
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import UOp

PathLike = str | pathlib.Path

safe_dtypes: dict[str, DType] = {
    "BOOL": dtypes.bool,
    "I8": dtypes.int8,
    "U8": dtypes.uint8,
    "I16": dtypes.int16,
    "U16": dtypes.uint16,
    "I32": dtypes.int32,
    "U32": dtypes.uint32,
    "I64": dtypes.int64,
    "U64": dtypes.uint64,
    "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "F32": dtypes.float32,
    "F64": dtypes.float64,
}
inverse_safe_dtypes: dict[DType, str] = {v: k for k, v in safe_dtypes.items()}


# *** state dicts ***


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """Every tensor reachable from `obj` through attributes, dicts, lists and tuples, keyed by its path.

    Attributes that are None or not containers are skipped; a cycle back to an enclosing object is not followed.

    Args:
        obj: a model object, or any dict, list, tuple or namedtuple of tensors and objects.
        prefix: put before every key.
        tensor_type: the class of the values to collect.

    Returns:
        Path -> tensor, in attribute order (`layers.0.weight` for `self.layers = [Linear(...)]`).

    Examples:
        >>> class Model:
        ...     def __init__(self):
        ...         self.layers = [nn.Linear(2, 3), nn.Linear(3, 1)]
        >>> list(get_state_dict(Model()))
        ['layers.0.weight', 'layers.0.bias', 'layers.1.weight', 'layers.1.bias']
    """
    ret: dict[str, Tensor] = {}
    _walk_state(obj, prefix, tensor_type, ret, set())
    return ret


def _walk_state(obj: Any, prefix: str, tensor_type: type, out: dict[str, Tensor], enclosing: set[int]) -> None:
    if isinstance(obj, tensor_type):
        out[prefix.strip(".")] = obj  # type: ignore[assignment]  # tensor_type is Tensor or a subclass of it
        return
    if id(obj) in enclosing:
        return
    if hasattr(obj, "_asdict"):  # a namedtuple: its fields by name
        items: Any = obj._asdict().items()
    elif isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list | tuple):
        items = enumerate(obj)
    elif hasattr(obj, "__dict__"):
        items = vars(obj).items()
    else:
        return
    enclosing.add(id(obj))
    for key, value in items:
        _walk_state(value, f"{prefix}{key}.", tensor_type, out, enclosing)
    enclosing.discard(id(obj))


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of `get_state_dict(obj)`, each once (a tensor reachable by two paths is listed once).

    Args:
        obj: a model object, or any container of tensors and objects.

    Returns:
        The tensors, in state-dict order: what an optimiser takes.

    Examples:
        >>> layer = nn.Linear(2, 3)
        >>> [t.shape for t in get_parameters({"a": layer, "tied": layer.weight})]
        [(3, 2), (3,)]
    """
    seen: dict[int, Tensor] = {}
    for t in get_state_dict(obj).values():
        seen.setdefault(id(t), t)
    return list(seen.values())


def load_state_dict(
    model: Any,
    state_dict: dict[str, Tensor],
    strict: bool = True,
    verbose: bool = True,
    consume: bool = False,
    realize: bool = True,
) -> list[Tensor]:
    """Assign each `state_dict` entry into the model tensor with the same key, on the model's device and in its dtype.

    Args:
        model: the model (its tensors found by `get_state_dict`).
        state_dict: key -> tensor, e.g. from `safe_load` or `torch_load`.
        strict: raise when a key is missing or unexpected (a shape mismatch raises even when not strict).
        verbose: print the skipped keys when not strict.
        consume: delete each entry from state_dict once assigned (frees the loaded copy early).
        realize: run the copies now.

    Returns:
        The model tensors that were assigned.

    Raises:
        ValueError: one error listing every missing key, every unexpected key and every shape mismatch.

    Examples:
        >>> layer = nn.Linear(2, 1)
        >>> _ = load_state_dict(layer, {"weight": Tensor([[1.0, 2.0]]), "bias": Tensor([0.5])})
        >>> layer(Tensor([[1.0, 1.0]])).tolist()
        [[3.5]]
        >>> load_state_dict(layer, {"weight": Tensor([[1.0, 2.0]])})
        Traceback (most recent call last):
        ValueError: load_state_dict: the state dict does not fit the model: 1 missing keys: bias
    """
    model_state = get_state_dict(model)
    missing = [k for k in model_state if k not in state_dict]
    unexpected = [k for k in state_dict if k not in model_state]
    if problems := _fit_problems(model_state, state_dict, missing if strict else [], unexpected if strict else []):
        raise ValueError("load_state_dict: the state dict does not fit the model: " + "; ".join(problems))
    if verbose and (missing or unexpected):
        print(f"load_state_dict: skipped {len(missing)} missing keys {missing} and unexpected keys {unexpected}")
    loaded = []
    for key, target in model_state.items():
        if key not in state_dict:
            continue
        target.assign(_placed_like(target, state_dict[key]).cast(target.dtype))
        loaded.append(target)
        if consume:
            del state_dict[key]
    if realize and loaded:
        Tensor.realize(*loaded)
    return loaded


def _placed_like(target: Tensor, value: Tensor) -> Tensor:
    """value on target's device: a model sharded over several devices shards a one-device value along its own axis
    (so each device loads only its block); a value already on several devices is moved as it is."""
    if isinstance(target.device, tuple) and not isinstance(value.device, tuple):
        return value.shard(target.device, target.uop.axis)
    return value.to(target.device)


def _fit_problems(
    model_state: dict[str, Tensor], state_dict: dict[str, Tensor], missing: list[str], unexpected: list[str]
) -> list[str]:
    """Every reason the state dict can't be loaded: the listed missing and unexpected keys, then shape mismatches."""
    for key in model_state:
        if key in state_dict and not isinstance(value := state_dict[key], Tensor):
            raise TypeError(f"load_state_dict: value for {key!r} is not a Tensor: got {type(value).__name__}")
    problems = [f"{len(missing)} missing keys: {', '.join(missing)}"] if missing else []
    problems += [f"{len(unexpected)} unexpected keys: {', '.join(unexpected)}"] if unexpected else []
    return problems + [
        f"Shape mismatch in layer `{k}`: Expected shape {v.shape}, but found {state_dict[k].shape} in state dict."
        for k, v in model_state.items()
        if k in state_dict and state_dict[k].shape != v.shape
    ]


# *** files on the DISK device ***


class _File:
    """A file as one DISK buffer of bytes; tensors are views of it at byte offsets, read only when used."""

    def __init__(self, path: PathLike, op: str) -> None:
        self.path = os.path.abspath(os.fspath(path))
        try:
            self.size = os.path.getsize(self.path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{op}: no such file: {self.path}") from None
        self.tensor = Tensor.empty(self.size, dtype=dtypes.uint8, device=f"DISK:{self.path}")
        self.base: Buffer = self.tensor.uop.base.buffer

    def read(self, offset: int, count: int) -> bytes:
        """count bytes at offset (the caller has checked they lie inside the file)."""
        if count == 0:
            return b""
        return bytes(self.base.view(count, dtypes.uint8, offset).ensure_allocated().as_memoryview())

    def tensor_at(self, offset: int, dtype: DType, shape: tuple[int, ...]) -> Tensor:
        """A DISK tensor over prod(shape) elements of dtype at byte offset; nothing is read yet."""
        if prod(shape) == 0:
            return Tensor.empty(*shape, dtype=dtype, device=f"DISK:{self.path}")
        # a byte range of the file, bitcast: a view of the file's buffer (schedule/views.py), no kernel and no read
        return self.tensor.shrink(((offset, offset + prod(shape) * dtype.itemsize),)).bitcast(dtype).reshape(shape)


class _Bytes(_File):
    """A file already in memory as a 1-d uint8 tensor (not on DISK): its tensors are copies on that tensor's device."""

    def __init__(self, t: Tensor) -> None:  # no file to open, so no _File.__init__
        assert isinstance(t.device, str), "checked by _open"
        self.path, self.device = f"<uint8 tensor {t.shape} on {t.device}>", t.device
        self.tensor, self.memory = t, bytes(t.data()) if t.numel() else b""
        self.size = len(self.memory)

    def read(self, offset: int, count: int) -> bytes:
        return self.memory[offset : offset + count]

    def tensor_at(self, offset: int, dtype: DType, shape: tuple[int, ...]) -> Tensor:
        node = UOp.new_buffer(self.device, prod(shape), dtype)
        if prod(shape):
            node.buffer.allocate().copyin(memoryview(self.memory)[offset : offset + prod(shape) * dtype.itemsize])
        return Tensor(node.reshape(shape))


def _open(source: Tensor | PathLike, op: str, in_memory: bool) -> _File:
    """A path, the file behind a uint8 DISK tensor, or (if in_memory) the bytes of a 1-d uint8 tensor elsewhere."""
    if not isinstance(source, Tensor):
        return _File(source, op)
    on_disk = isinstance(source.device, str) and source.device.startswith("DISK:")
    if source.dtype == dtypes.uint8 and on_disk:
        return _File(str(source.device).partition(":")[2], op)
    if source.dtype == dtypes.uint8 and source.ndim == 1 and isinstance(source.device, str) and in_memory:
        return _Bytes(source)
    expected = "a path or a 1-d uint8 tensor" if in_memory else "a path or a uint8 DISK tensor"
    raise TypeError(f"{op}: expected {expected}: got a {source.dtype} tensor {source.shape} on {source.device}")


# *** safetensors ***


SAVE_CHUNK_BYTES = 16 << 20  # safe_save copies each tensor to the file in pieces of at most this many bytes


def safe_save(tensors: dict[str, Tensor], fn: PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` as a safetensors file: an 8-byte little-endian header length, a JSON header of dtype, shape and
    data_offsets per tensor (plus `__metadata__`, str to str), then the raw little-endian data in the dict's order.

    Crash-safe: the file is written beside `fn` under a temporary name and renamed over it only once complete and on
    disk (`write_atomically`), so `fn` always holds the complete old or the complete new checkpoint. Tensors loaded
    from the old file (`safe_load(fn)`) keep reading the old bytes through their open file, so they can be saved to
    `fn` itself; load again to see the new file. Data is copied in pieces of SAVE_CHUNK_BYTES: a DISK tensor larger
    than memory is streamed from its file.

    Args:
        tensors: name -> tensor, written in this order.
        fn: the file to write.
        metadata: str -> str, stored in the header's `__metadata__`.

    Raises:
        ValueError: a name that is not a str, or is "__metadata__".
        TypeError: a dtype safetensors lacks, or metadata that is not str to str.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        >>> safe_save({"w": Tensor([[1.0, 2.0]])}, path, metadata={"step": "7"})
        >>> safe_load(path)["w"].tolist(), safe_load_metadata(path)[2]["__metadata__"]
        ([[1.0, 2.0]], {'step': '7'})
    """
    header: dict[str, Any] = {}
    offset = 0
    for name, t in tensors.items():
        if name == "__metadata__" or not isinstance(name, str):
            raise ValueError(f"safe_save: tensor names must be str and not '__metadata__': got {name!r}")
        if t.dtype not in inverse_safe_dtypes:
            raise TypeError(f"safe_save: {name!r} has dtype {t.dtype}: expected one of {', '.join(safe_dtypes)}")
        header[name] = {"dtype": inverse_safe_dtypes[t.dtype], "shape": list(t.shape)}
        header[name]["data_offsets"] = [offset, offset + t.nbytes()]
        offset += t.nbytes()
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError(f"safe_save: metadata must map str to str: got {metadata!r}")
        header["__metadata__"] = metadata
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-aligned, as the safetensors library writes it
    with write_atomically(fn) as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        chunk = memoryview(bytearray(min(SAVE_CHUNK_BYTES, max((t.nbytes() for t in tensors.values()), default=0))))
        for t in tensors.values():
            if t.numel():
                _write_in_chunks(f, t._buffer(), chunk)


def _write_in_chunks(f: IO[bytes], buf: Buffer, chunk: memoryview) -> None:
    """buf's bytes to f, len(chunk) at a time through `chunk`: a DISK buffer is read a piece at a time, never whole."""
    for start in range(0, buf.nbytes, len(chunk)):
        count = min(len(chunk), buf.nbytes - start)
        piece = buf if count == buf.nbytes else buf.view(count, dtypes.uint8, start)
        piece.ensure_allocated().copyout(chunk[:count])
        f.write(chunk[:count])


@contextlib.contextmanager
def write_atomically(fn: PathLike) -> Iterator[IO[bytes]]:
    """A binary file that takes `fn`'s place only once it is complete, so a crash never leaves `fn` half written.

    It is written in fn's folder under a hidden temporary name, flushed and fsynced, renamed over fn with os.replace
    (atomic on POSIX), then the folder is fsynced so the rename itself survives a power cut. An exception inside the
    block removes the temporary file and leaves fn as it was; a killed process may leave the temporary file behind
    (`.<name>.<random>.tmp`), never a damaged fn. The new file keeps the old one's permission bits; a symlink at fn
    stays one (the file it points to is the one replaced).

    Args:
        fn: the file to replace (or create).

    Yields:
        The temporary file, open for binary writing.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "cache.bin")
        >>> with write_atomically(path) as f:
        ...     _ = f.write(b"complete")
        >>> open(path, "rb").read()
        b'complete'
    """
    path = os.path.realpath(os.fspath(fn))
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open(fn, "wb")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(os.stat(path).st_mode))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)


def _fsync_folder(folder: str) -> None:
    """Make a rename in `folder` durable. Filesystems that can't sync a directory (EINVAL) have nothing to sync."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def safe_load_metadata(fn: Tensor | PathLike) -> tuple[Tensor, int, dict[str, Any]]:
    """(the file as a uint8 DISK tensor, the JSON header's length, the parsed header) of a safetensors file.

    The header's entries are checked against the file: ValueError names the file and what is wrong (too short, a
    header that is not JSON, an unknown dtype, offsets that disagree with the shape, overlap or run past the end).

    Args:
        fn: a path, or a 1-d uint8 tensor of the file's bytes.

    Returns:
        (the file as a uint8 tensor, the header's length in bytes, the parsed header).

    Raises:
        ValueError: a truncated or corrupt file (from the checks this runs).

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        >>> safe_save({"w": Tensor([1, 2], dtype=dtypes.int16)}, path)
        >>> safe_load_metadata(path)[2]["w"]
        {'dtype': 'I16', 'shape': [2], 'data_offsets': [0, 4]}
    """
    file = _open(fn, "safe_load", in_memory=True)
    header = _read_header(file)
    _check_entries(file, header, file.size - 8 - _header_length(file))
    return file.tensor, _header_length(file), header


def safe_load(fn: Tensor | PathLike) -> dict[str, Tensor]:
    """The tensors of a safetensors file, in header order, as DISK views of the file: move them with `.to(device)`.

    Args:
        fn: a path, or a 1-d uint8 tensor of the file's bytes (its tensors are then copies on that tensor's device).

    Returns:
        Name -> tensor.

    Raises:
        ValueError: a corrupt or truncated file (see safe_load_metadata).

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        >>> safe_save({"w": Tensor([1.5, 2.5])}, path)
        >>> w = safe_load(path)["w"]
        >>> w.device.startswith("DISK"), w.to("CPU").tolist()
        (True, [1.5, 2.5])
    """
    file = _open(fn, "safe_load", in_memory=True)
    header = _read_header(file)
    entries = _check_entries(file, header, file.size - 8 - _header_length(file))
    start = 8 + _header_length(file)
    return {name: file.tensor_at(start + begin, dt, shape) for name, (dt, shape, begin) in entries.items()}


def _header_length(file: _File) -> int:
    if file.size < 8:
        raise ValueError(f"safe_load: {file.path} is too short: got {file.size} bytes, expected at least 8")
    (length,) = struct.unpack("<Q", file.read(0, 8))
    if 8 + length > file.size:
        raise ValueError(
            f"safe_load: {file.path} has a bad header length: got {length}, expected at most {file.size - 8} "
            f"(the file has {file.size} bytes)"
        )
    return int(length)


def _read_header(file: _File) -> dict[str, Any]:
    raw = file.read(8, _header_length(file))
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"safe_load: {file.path} has a header that is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"safe_load: {file.path} has a bad header: got a {type(header).__name__}, expected an object")
    return header


def _check_entries(
    file: _File, header: dict[str, Any], data_size: int
) -> dict[str, tuple[DType, tuple[int, ...], int]]:
    """name -> (dtype, shape, start in the data section) for every tensor entry, after checking each against the
    file and the entries against each other (sorted by offset, none may overlap another)."""
    entries: dict[str, tuple[DType, tuple[int, ...], int]] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (begin, end) = _check_entry(file, name, entry)
        if end > data_size:
            raise ValueError(
                f"safe_load: {file.path}: offsets of {name!r} run past the end of the file: got data_offsets "
                f"[{begin}, {end}], expected at most {data_size} (the data section's size)"
            )
        entries[name] = (dt, shape, begin)
        spans.append((begin, end, name))
    spans.sort()
    for (_, end, name), (begin, _, other) in itertools.pairwise(spans):
        if begin < end:
            raise ValueError(
                f"safe_load: {file.path}: tensors overlap: {other!r} starts at {begin}, "
                f"expected at least {end} where {name!r} ends"
            )
    return entries


def _check_entry(file: _File, name: str, entry: Any) -> tuple[DType, tuple[int, ...], tuple[int, int]]:
    where = f"safe_load: {file.path}: tensor {name!r}"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise ValueError(f"{where} has a bad entry: got {entry!r}, expected dtype, shape and data_offsets")
    if (dt := safe_dtypes.get(entry["dtype"])) is None:
        raise ValueError(
            f"{where} has an unknown dtype: got {entry['dtype']!r}, expected one of {', '.join(safe_dtypes)}"
        )
    shape, offsets = entry["shape"], entry["data_offsets"]
    if not isinstance(shape, list) or not all(_is_count(s) for s in shape):
        raise ValueError(f"{where} has a bad shape: got {shape!r}, expected a list of non-negative ints")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
        raise ValueError(f"{where} has bad data_offsets: got {offsets!r}, expected [begin, end]")
    begin, end = offsets
    if end - begin != prod(shape) * dt.itemsize:
        raise ValueError(
            f"{where} has data_offsets that disagree with its shape: got [{begin}, {end}] ({end - begin} bytes), "
            f"expected {prod(shape) * dt.itemsize} bytes for {entry['dtype']} {tuple(shape)}"
        )
    return dt, tuple(shape), (begin, end)


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


# *** PyTorch checkpoints ***

_TORCH_STORAGES: dict[str, DType] = {
    "DoubleStorage": dtypes.float64,
    "FloatStorage": dtypes.float32,
    "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16,
    "LongStorage": dtypes.int64,
    "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16,
    "CharStorage": dtypes.int8,
    "ByteStorage": dtypes.uint8,
    "BoolStorage": dtypes.bool,
}
_TORCH_DTYPES: dict[str, DType] = {
    "float64": dtypes.float64,
    "float32": dtypes.float32,
    "float16": dtypes.float16,
    "bfloat16": dtypes.bfloat16,
    "int64": dtypes.int64,
    "int32": dtypes.int32,
    "int16": dtypes.int16,
    "int8": dtypes.int8,
    "uint8": dtypes.uint8,
    "uint16": dtypes.uint16,
    "uint32": dtypes.uint32,
    "uint64": dtypes.uint64,
    "bool": dtypes.bool,
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


@dataclass(frozen=True, slots=True)
class _StorageType:
    """What a pickled `torch.FloatStorage` (etc.) global stands for here: its element dtype."""

    dtype: DType


@dataclass(frozen=True, slots=True)
class _Storage:
    """A storage named by the pickle: `numel` elements of dtype at byte `offset` of the checkpoint file."""

    dtype: DType
    offset: int
    numel: int


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles only what tensors and plain containers need; any other global is refused before it is imported, so
    a checkpoint can't run code. Storages come from `locate(key, dtype, numel)` (the file offset of their data)."""

    def __init__(self, f: IO[bytes], file: _File, locate: Callable[[str, DType, int], int], build: bool = True):
        super().__init__(f)
        self.file, self.locate, self.build = file, locate, build

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return self.rebuild_tensor
        if (module, name) == ("torch._utils", "_rebuild_tensor_v3"):
            return self.rebuild_tensor_v3
        if (module, name) == ("torch.storage", "UntypedStorage"):
            return _StorageType(dtypes.uint8)  # bytes: _rebuild_tensor_v3 names the dtype
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return _rebuild_parameter
        if module == "torch" and name in _TORCH_STORAGES:
            return _StorageType(_TORCH_STORAGES[name])
        if (module, name) == ("torch", "Size"):
            return tuple  # a tuple subclass: torch.Size((2, 3)) -> (2, 3)
        if module == "torch" and name in _TORCH_DTYPES:
            return _TORCH_DTYPES[name]  # a dtype as a value, e.g. in a checkpoint's config
        raise ValueError(
            f"torch_load: {self.file.path}: refusing the pickled global {module}.{name}: expected only "
            "torch._utils._rebuild_tensor_v2/_v3 and _rebuild_parameter, torch storages, dtypes and Size, "
            "collections.OrderedDict"
        )

    def persistent_load(self, pid: Any) -> _Storage:
        # ('storage', storage type, key, location, numel), legacy files add a sixth field: a view of another storage
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"):
            raise ValueError(f"torch_load: {self.file.path}: bad storage reference: got {pid!r}")
        kind, key, numel = pid[1], str(pid[2]), pid[4]
        if not isinstance(kind, _StorageType) or not _is_count(numel) or (len(pid) == 6 and pid[5] is not None):
            raise ValueError(f"torch_load: {self.file.path}: unsupported storage reference: got {pid!r}")
        return _Storage(kind.dtype, self.locate(key, kind.dtype, numel), numel)

    def rebuild_tensor(self, storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> Tensor | None:
        """torch._utils._rebuild_tensor_v2: `size` elements of storage at element `offset`, `stride` apart."""
        if not (isinstance(storage, _Storage) and _is_count(offset) and isinstance(size, tuple | list)):
            raise ValueError(f"torch_load: {self.file.path}: bad tensor: got {storage!r}, {offset!r}, {size!r}")
        if len(size) != len(stride) or not all(_is_count(v) for v in (*size, *stride)):
            raise ValueError(f"torch_load: {self.file.path}: bad size {size!r} or stride {stride!r}")
        if not self.build:
            return None
        return _strided_tensor(self.file, storage, offset, tuple(size), tuple(stride))

    def rebuild_tensor_v3(self, storage: Any, offset: Any, size: Any, stride: Any, *args: Any) -> Tensor | None:
        """torch._utils._rebuild_tensor_v3: as v2, over an untyped (byte) storage with the dtype given after the
        hooks: (storage, offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])."""
        dt = args[2] if len(args) >= 3 else None
        if not isinstance(dt, DType) or not isinstance(storage, _Storage) or storage.dtype != dtypes.uint8:
            raise ValueError(f"torch_load: {self.file.path}: bad tensor: got dtype {dt!r} for storage {storage!r}")
        return self.rebuild_tensor(_Storage(dt, storage.offset, storage.numel // dt.itemsize), offset, size, stride)


def _rebuild_parameter(data: Tensor, requires_grad: Any, backward_hooks: Any, *_: Any) -> Tensor:
    return data


def _strided_tensor(
    file: _File, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...]
) -> Tensor:
    """The tensor that views storage at element offset with size and stride (a DISK view when contiguous)."""
    if prod(size) == 0:
        return Tensor.empty(*size, dtype=storage.dtype, device=f"DISK:{file.path}")
    span = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1
    if span > storage.numel:
        raise ValueError(
            f"torch_load: {file.path}: a tensor {size} with stride {stride} at offset {offset} reads element "
            f"{span - 1}: expected less than the storage's {storage.numel}"
        )
    itemsize = storage.dtype.itemsize
    contiguous = tuple(prod(size[i + 1 :]) for i in range(len(size)))
    if all(n == 1 or s == c for n, s, c in zip(size, stride, contiguous, strict=True)):
        return file.tensor_at(storage.offset + offset * itemsize, storage.dtype, size)
    # non-contiguous: read the elements the view spans, lay them out with numpy (as same-size unsigned ints, so every
    # dtype works, bfloat16 too) and put the bytes in a buffer of the storage's dtype on the default device
    import numpy as np

    raw = np.frombuffer(file.read(storage.offset + offset * itemsize, (span - offset) * itemsize), f"<u{itemsize}")
    picked = np.ascontiguousarray(np.lib.stride_tricks.as_strided(raw, size, tuple(s * itemsize for s in stride)))
    node = UOp.new_buffer(Device.DEFAULT, prod(size), storage.dtype)
    node.buffer.allocate().copyin(memoryview(picked.tobytes()))
    return Tensor(node.reshape(size))


def torch_load(fn: Tensor | PathLike) -> Any:
    """The object saved by `torch.save` (usually a state dict), its tensors as fusegrad Tensors, without torch.

    Reads the zip format and the legacy pickle format. The pickle may reference only tensor rebuilding, torch storage
    types and OrderedDict: any other global (os.system, a custom class) raises ValueError naming it, and nothing
    runs. Contiguous tensors are DISK views of the file (move them with `.to(device)`); strided ones are read at once.

    Args:
        fn: a path, or a uint8 DISK tensor of the file.

    Returns:
        The saved object, with fusegrad Tensors where it held torch tensors.

    Raises:
        ValueError: a tar checkpoint (torch < 0.4), a global the pickle may not reference, or a corrupt file.

    Examples:
        >>> import os, tempfile, torch
        >>> path = os.path.join(tempfile.mkdtemp(), "model.pt")
        >>> torch.save({"w": torch.tensor([[1.0, 2.0]])}, path)
        >>> torch_load(path)["w"].to("CPU").tolist()  # then load_state_dict(model, torch_load(path))
        [[1.0, 2.0]]
    """
    file = _open(fn, "torch_load", in_memory=False)
    if zipfile.is_zipfile(file.path):
        return _load_zip(file)
    if tarfile.is_tarfile(file.path):
        raise ValueError(f"torch_load: {file.path} is a tar checkpoint (torch < 0.4): expected zip or pickle")
    return _load_legacy(file)


def _load_zip(file: _File) -> Any:
    """Zip format: `<archive>/data.pkl` is the pickle; storage `key` is the entry `<archive>/data/<key>`."""
    with zipfile.ZipFile(file.path) as archive:
        pickles = [info for info in archive.infolist() if info.filename.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ValueError(f"torch_load: {file.path} is a zip without one data.pkl: got {len(pickles)} of them")
        root = pickles[0].filename.removesuffix("data.pkl")
        entries = {info.filename: info for info in archive.infolist()}

        def locate(key: str, dt: DType, numel: int) -> int:
            if (info := entries.get(f"{root}data/{key}")) is None:
                raise ValueError(f"torch_load: {file.path}: storage {key!r} is missing: expected {root}data/{key}")
            if info.compress_type != zipfile.ZIP_STORED or info.file_size < numel * dt.itemsize:
                raise ValueError(
                    f"torch_load: {file.path}: storage {key!r} is compressed or short: got {info.file_size} bytes, "
                    f"expected {numel * dt.itemsize} stored bytes"
                )
            # the data follows the entry's local header: 30 bytes, then the name and the extra field
            name_length, extra_length = struct.unpack("<HH", file.read(info.header_offset + 26, 4))
            return int(info.header_offset + 30 + name_length + extra_length)

        with archive.open(pickles[0]) as f:
            return _RestrictedUnpickler(f, file, locate).load()


def _load_legacy(file: _File) -> Any:
    """Legacy format: pickles of the magic number, the protocol version, system info, the object and the storage
    keys, then each storage in key order as an 8-byte little-endian element count and its data. The object is read
    twice: first to learn each storage's dtype (so the data's offsets follow from the counts), then to build it."""
    dtypes_of: dict[str, DType] = {}

    def record(key: str, dt: DType, numel: int) -> int:
        dtypes_of[key] = dt
        return 0

    with open(file.path, "rb") as f:
        try:
            magic = _RestrictedUnpickler(f, file, record).load()
        except (pickle.UnpicklingError, EOFError) as e:
            raise ValueError(f"torch_load: {file.path} is not a PyTorch checkpoint: {e}") from None
        if magic != _LEGACY_MAGIC:
            raise ValueError(f"torch_load: {file.path} is not a PyTorch checkpoint: got magic {magic!r}")
        for _ in range(2):  # protocol version, system info
            _RestrictedUnpickler(f, file, record).load()
        start = f.tell()
        _RestrictedUnpickler(f, file, record, build=False).load()
        keys = _RestrictedUnpickler(f, file, record).load()
        offsets = _legacy_offsets(file, f.tell(), keys, dtypes_of)

        def locate(key: str, dt: DType, numel: int) -> int:
            offset, count = offsets[key]
            if count < numel:
                raise ValueError(f"torch_load: {file.path}: storage {key!r} is short: got {count}, expected {numel}")
            return offset

        f.seek(start)
        return _RestrictedUnpickler(f, file, locate).load()


def _legacy_offsets(file: _File, position: int, keys: Any, dtypes_of: dict[str, DType]) -> dict[str, tuple[int, int]]:
    """key -> (file offset of the data, element count) for the storages that follow the keys, in key order."""
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"torch_load: {file.path}: bad storage key list: got {keys!r}")
    offsets = {}
    for key in keys:
        if position + 8 > file.size:
            raise ValueError(f"torch_load: {file.path} is truncated: storage {key!r} starts past its end")
        (count,) = struct.unpack("<q", file.read(position, 8))
        itemsize = dtypes_of[key].itemsize if key in dtypes_of else 1
        offsets[key] = (position + 8, count)
        position += 8 + count * itemsize
        if count < 0 or position > file.size:
            raise ValueError(
                f"torch_load: {file.path} is truncated: storage {key!r} ends at byte {position}, "
                f"expected at most {file.size}"
            )
    return offsets
