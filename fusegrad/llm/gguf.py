"""GGUF model files: the key-value metadata and the tensors, with the quantised block formats dequantised to float32.

The header is parsed on the host; quantised blocks (Q4_0, Q4_1, Q8_0, Q6_K) are unpacked with numpy when the file is
loaded, so the model holds plain float32 weights. Entry point: `gguf_load(path)` -> (metadata, state dict), named as
in the reference's `tinygrad.llm.gguf`.
"""

from __future__ import annotations

import pathlib
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from fusegrad.tensor import Tensor

# ggml type ids of the plain element types -> numpy dtype (bf16 is widened to float32 on load)
_GGML_NATIVE: dict[int, np.dtype[Any]] = {
    0: np.dtype(np.float32),
    1: np.dtype(np.float16),
    24: np.dtype(np.int8),
    25: np.dtype(np.int16),
    26: np.dtype(np.int32),
    27: np.dtype(np.int64),
    28: np.dtype(np.float64),
}
_GGML_BF16 = 30
# quantised ggml type ids -> (name, elements per block, bytes per block)
_GGML_QUANT: dict[int, tuple[str, int, int]] = {2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34),
                                                14: ("Q6_K", 256, 210)}  # fmt: skip


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The little-endian float16 at byte `start` of each block, as a (blocks, 1) float32 column."""
    return blocks[:, start : start + 2].copy().view(np.float16).astype(np.float32)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """(blocks, 16) bytes -> (blocks, 32) values 0..15: the low nibbles are elements 0..15, the high ones 16..31."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    values: np.ndarray = (_nibbles(blocks[:, 2:]) - 8.0) * _f16(blocks, 0)  # x = d * (q - 8)
    return values


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    values: np.ndarray = _nibbles(blocks[:, 4:]) * _f16(blocks, 0) + _f16(blocks, 2)  # x = d * q + m
    return values


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    values: np.ndarray = blocks[:, 2:].view(np.int8).astype(np.float32) * _f16(blocks, 0)  # x = d * q
    return values


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    """256 6-bit values per block: low 4 bits in ql[128], high 2 bits in qh[64], 16 int8 scales, one f16 d at the end.

    Each half of 128 values is four runs of 32: run r takes its low bits from ql[32*(r%2)...] (low nibble for r < 2,
    high for r >= 2) and its high bits from qh at shift 2r; every 16 values share one scale.
    """
    ql, qh = blocks[:, :128].reshape(-1, 2, 2, 32), blocks[:, 128:192].reshape(-1, 2, 1, 32)  # (B, half, ., 32)
    scales = blocks[:, 192:208].view(np.int8).astype(np.float32).reshape(-1, 2, 4, 2)  # (B, half, run, 16-group)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2)  # (B, half, run, 32)
    high = (qh >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3  # (B, half, run, 32)
    q = (low | (high << 4)).astype(np.float32) - 32.0
    per_value_scale = np.repeat(scales, 16, axis=3)  # (B, half, run, 32)
    values: np.ndarray = (q * per_value_scale).reshape(-1, 256) * _f16(blocks, 208)
    return values


_DEQUANTISE: dict[int, Callable[[np.ndarray], np.ndarray]] = {2: _q4_0, 3: _q4_1, 8: _q8_0, 14: _q6_k}


def _dequantise(raw: np.ndarray, n: int, ggml_type: int) -> np.ndarray:
    """n values of ggml_type from the uint8 bytes `raw`, as a flat numpy array."""
    if (native := _GGML_NATIVE.get(ggml_type)) is not None:
        return raw[: n * native.itemsize].view(native)
    if ggml_type == _GGML_BF16:  # the high half of a float32
        return (raw[: 2 * n].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if (quant := _GGML_QUANT.get(ggml_type)) is None:
        known = sorted([*_GGML_NATIVE, _GGML_BF16, *_GGML_QUANT])
        raise ValueError(f"gguf_load: ggml type {ggml_type} is not supported: expected one of {known}")
    name, per_block, block_bytes = quant
    if n % per_block:
        raise ValueError(f"gguf_load: {name} holds blocks of {per_block} values: got {n} values")
    blocks = raw[: n // per_block * block_bytes].reshape(-1, block_bytes)
    return _DEQUANTISE[ggml_type](blocks).reshape(-1)


def ggml_data_to_tensor(t: Tensor, n: int, ggml_type: int) -> Tensor:
    """n values of ggml type `ggml_type` from the bytes in t (uint8): plain types keep their dtype (bf16 becomes
    float32), Q4_0/Q4_1/Q8_0/Q6_K are dequantised to float32.

    Args:
        t: the raw bytes, a uint8 tensor.
        n: how many values they hold.
        ggml_type: the ggml type number (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 14 Q6_K, ...).

    Returns:
        A flat (n,) tensor on t's device.

    Examples:
        >>> raw = Tensor(np.array([1.5, -2.0], dtype=np.float32).view(np.uint8))
        >>> ggml_data_to_tensor(raw, 2, 0).tolist()
        [1.5, -2.0]
    """
    return Tensor(np.ascontiguousarray(_dequantise(t.numpy().view(np.uint8), n, ggml_type)), device=t.device)


class _Reader:
    """Little-endian reads from a byte buffer, with a clear error at a truncated file."""

    def __init__(self, data: np.ndarray) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"gguf_load: the file ends inside its header (at byte {self.pos}, {n} more needed)")
        out = self.data[self.pos : self.pos + n].tobytes()
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("Q")).decode("utf-8")

    def value(self, kind: int) -> Any:
        """One metadata value of GGUF type `kind` (8 string, 9 array, the rest fixed-size numbers and bool)."""
        if kind == 8:
            return self.string()
        if kind == 9:
            item_kind, count = self.unpack("I"), self.unpack("Q")
            return [self.value(item_kind) for _ in range(count)]
        if (fmt := _SCALARS.get(kind)) is None:
            raise ValueError(f"gguf_load: unknown metadata value type {kind}")
        return self.unpack(fmt)


_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _file_bytes(fn: Tensor | str | pathlib.Path) -> tuple[np.ndarray, str | None]:
    """The file's bytes (memory-mapped for a path) and the device the tensors go to (None: the default)."""
    if isinstance(fn, Tensor):
        if not isinstance(fn.device, str):
            raise ValueError(f"gguf_load: the file must be on one device: got {fn.device}")
        return fn.numpy().view(np.uint8).reshape(-1), fn.device
    path = pathlib.Path(fn)
    if not path.is_file():
        raise FileNotFoundError(f"gguf_load: no file at {path}")
    return np.memmap(path, dtype=np.uint8, mode="r"), None


def gguf_load(fn: Tensor | str | pathlib.Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Read a GGUF (version 2 or 3) file: (metadata key -> value, tensor name -> Tensor).

    Shapes are the file's dims reversed (ggml lists the fastest axis first), so a weight is (out, in) like
    `nn.Linear`'s.

    Args:
        fn: a path, or a uint8 Tensor of the file's bytes.

    Returns:
        (metadata key -> value, tensor name -> Tensor), quantised tensors dequantised to float32.

    Raises:
        FileNotFoundError: no file at the path.
        ValueError: a file that is not GGUF, a version other than 2 or 3, or a tensor type other than the plain ones
            and Q4_0, Q4_1, Q8_0, Q6_K.

    Examples:
        >>> gguf_load(Tensor(np.frombuffer(b"GGML" + bytes(20), dtype=np.uint8)))
        Traceback (most recent call last):
        ValueError: gguf_load: not a GGUF file: starts with b'GGML', expected b'GGUF'

        A real file: `kv, weights = gguf_load("model.Q4_0.gguf"); kv["general.architecture"]` (see the LLM guide).
    """
    data, device = _file_bytes(fn)
    reader = _Reader(data)
    magic = reader.take(4)
    if magic != b"GGUF":
        raise ValueError(f"gguf_load: not a GGUF file: starts with {magic!r}, expected b'GGUF'")
    version = reader.unpack("I")
    if version not in (2, 3):
        raise ValueError(f"gguf_load: GGUF version {version} is not supported: expected 2 or 3")
    n_tensors, n_kv = reader.unpack("Q"), reader.unpack("Q")
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
        key = reader.string()
        kv[key] = reader.value(reader.unpack("I"))
    infos = []
    for _ in range(n_tensors):
        name = reader.string()
        dims = tuple(reader.unpack("Q") for _ in range(reader.unpack("I")))
        infos.append((name, dims, reader.unpack("I"), reader.unpack("Q")))
    alignment = int(kv.get("general.alignment", 32))
    start = -(-reader.pos // alignment) * alignment  # the data begins at the next multiple of the alignment
    state: dict[str, Tensor] = {}
    for name, dims, kind, offset in infos:
        n = int(np.prod(dims, dtype=np.int64))
        values = _dequantise(np.asarray(data[start + offset :]), n, kind)
        state[name] = Tensor(np.ascontiguousarray(values).reshape(tuple(reversed(dims))), device=device)
    return kv, state
