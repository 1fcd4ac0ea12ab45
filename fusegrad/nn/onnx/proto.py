"""ONNX protobuf -> fusegrad values: model loading (path, bytes, Tensor), dtypes, initializers and node attributes.

The `onnx` package only parses here; every number is computed by fusegrad. Entry points: `load_model`,
`tensor_from_proto`, `attributes_of`. External data is mapped through the DISK device, so weights are read once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # protobuf ships no stubs
from onnx import numpy_helper

from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.tensor import Tensor

# the types fusegrad has no dtype for (sub-byte ones, and FLOAT8E8M0, the powers of two that scale blocks): each lives
# in a wider container dtype, holding only the values it has (casts.py keeps them so; an int type's range is below)
CONTAINED_TYPES: dict[int, DType] = {
    onnx.TensorProto.INT4: dtypes.int8,
    onnx.TensorProto.UINT4: dtypes.uint8,
    onnx.TensorProto.INT2: dtypes.int8,
    onnx.TensorProto.UINT2: dtypes.uint8,
    onnx.TensorProto.FLOAT4E2M1: dtypes.float32,
    onnx.TensorProto.FLOAT8E8M0: dtypes.float32,
}
SUBBYTE_INT_RANGES: dict[int, tuple[int, int]] = {
    onnx.TensorProto.INT4: (-8, 7),
    onnx.TensorProto.UINT4: (0, 15),
    onnx.TensorProto.INT2: (-2, 1),
    onnx.TensorProto.UINT2: (0, 3),
}
# ml_dtypes' names of those types (numpy_helper.to_array gives their arrays) -> the numpy container dtype
CONTAINED_NUMPY = {"int4": np.int8, "uint4": np.uint8, "int2": np.int8, "uint2": np.uint8, "float4_e2m1fn": np.float32,
                   "float8_e8m0fnu": np.float32}  # fmt: skip
# fusegrad dtypes numpy lacks: arrays of them (ml_dtypes) are read as their bits
BITS_DTYPES = (dtypes.bfloat16, *dtypes.fp8s)

# TensorProto.DataType -> fusegrad dtype (STRING and COMPLEX are absent; CONTAINED_TYPES map to their containers)
ONNX_DTYPES: dict[int, DType] = {
    onnx.TensorProto.FLOAT: dtypes.float32,
    onnx.TensorProto.UINT8: dtypes.uint8,
    onnx.TensorProto.INT8: dtypes.int8,
    onnx.TensorProto.UINT16: dtypes.uint16,
    onnx.TensorProto.INT16: dtypes.int16,
    onnx.TensorProto.INT32: dtypes.int32,
    onnx.TensorProto.INT64: dtypes.int64,
    onnx.TensorProto.BOOL: dtypes.bool,
    onnx.TensorProto.FLOAT16: dtypes.float16,
    onnx.TensorProto.DOUBLE: dtypes.float64,
    onnx.TensorProto.UINT32: dtypes.uint32,
    onnx.TensorProto.UINT64: dtypes.uint64,
    onnx.TensorProto.BFLOAT16: dtypes.bfloat16,
    onnx.TensorProto.FLOAT8E4M3FN: dtypes.fp8e4m3,
    onnx.TensorProto.FLOAT8E5M2: dtypes.fp8e5m2,
    onnx.TensorProto.FLOAT8E4M3FNUZ: dtypes.fp8e4m3fnuz,
    onnx.TensorProto.FLOAT8E5M2FNUZ: dtypes.fp8e5m2fnuz,
    **CONTAINED_TYPES,
}
# fusegrad dtype -> the ONNX type it holds (a container -> the wider ONNX type of the same dtype)
_ONNX_TYPE_OF: dict[DType, int] = {dt: code for code, dt in reversed(ONNX_DTYPES.items())}


def onnx_type_of(dtype: DType) -> int:
    """The ONNX TensorProto.DataType of a fusegrad dtype."""
    return _ONNX_TYPE_OF[dtype]


def dtype_of(code: int, what: str) -> DType:
    """The fusegrad dtype of an ONNX TensorProto.DataType code; NotImplementedError naming it when fusegrad has none."""
    if code not in ONNX_DTYPES:
        name = onnx.TensorProto.DataType.Name(code) if code in onnx.TensorProto.DataType.values() else str(code)
        raise NotImplementedError(f"{what}: ONNX dtype {name} is not supported (fusegrad has no such dtype)")
    return ONNX_DTYPES[code]


def load_model(model: str | os.PathLike[str] | bytes | Tensor) -> tuple[onnx.ModelProto, Path | None]:
    """The ModelProto of a path, the file's bytes or a uint8 Tensor of them, and the folder external data lives in."""
    if isinstance(model, Tensor):
        model = bytes(model.data())
    if isinstance(model, bytes):
        return parse_model(model, "<bytes>"), None
    path = Path(model)
    if not path.is_file():
        raise FileNotFoundError(f"OnnxRunner: no such model file: {path}")
    return parse_model(path.read_bytes(), str(path)), path.parent


def parse_model(data: bytes, where: str) -> onnx.ModelProto:
    """Decode ModelProto bytes; a truncated or corrupt file is a ValueError naming where it came from."""
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as e:
        raise ValueError(f"OnnxRunner: {where} is not a valid ONNX model (truncated or corrupt): {e}") from None
    if not proto.HasField("graph"):
        raise ValueError(f"OnnxRunner: {where} is not a valid ONNX model: it has no graph ({len(data)} bytes)")
    return proto


def tensor_from_proto(proto: onnx.TensorProto, base_dir: Path | None) -> Tensor:
    """An initializer or constant as a Tensor on the default device; external data is a DISK view of its file."""
    dtype = dtype_of(proto.data_type, f"initializer {proto.name!r}")
    shape = tuple(int(d) for d in proto.dims)
    if proto.data_location == onnx.TensorProto.EXTERNAL:
        return external_tensor(proto, base_dir, dtype, shape)
    return tensor_from_numpy(numpy_helper.to_array(proto).reshape(shape), dtype)


def tensor_from_numpy(array: np.ndarray, dtype: DType) -> Tensor:
    """A numpy array as a Tensor of dtype; bfloat16 and float8 arrays (ml_dtypes, which fusegrad cannot read) are
    reinterpreted from their bits, sub-byte ones (int4, float4_e2m1fn...) widened to their containers."""
    if (container := CONTAINED_NUMPY.get(array.dtype.name)) is not None:
        array = array.astype(container)
    if dtype in BITS_DTYPES and array.dtype.itemsize == dtype.itemsize:
        bits_dtype = dtypes.uint16 if dtype.itemsize == 2 else dtypes.uint8
        bits = np.asarray(array, order="C").view(np.uint16 if dtype.itemsize == 2 else np.uint8)
        return Tensor(bits.copy(), dtype=bits_dtype).bitcast(dtype)
    return Tensor(np.asarray(array, order="C"), dtype=dtype)  # (ascontiguousarray would make 0-d arrays 1-d)


def external_tensor(proto: onnx.TensorProto, base_dir: Path | None, dtype: DType, shape: tuple[int, ...]) -> Tensor:
    """The bytes [offset, offset+length) of the external file as a DISK view, moved to the default device once."""
    info = {entry.key: entry.value for entry in proto.external_data}
    if base_dir is None:
        raise ValueError(f"OnnxRunner: initializer {proto.name!r} has external data but the model came as bytes")
    path = (base_dir / info["location"]).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"OnnxRunner: external data of {proto.name!r} not found: {path}")
    offset = int(info.get("offset", 0))
    count = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if count == 0:
        return Tensor.empty(*shape, dtype=dtype)
    if offset + count > path.stat().st_size:
        raise ValueError(f"OnnxRunner: external data of {proto.name!r} runs past the end of {path}")
    whole = Tensor.empty(path.stat().st_size, dtype=dtypes.uint8, device=f"DISK:{path}")
    # a byte range of the file bitcast to its dtype: a view, read only when moved to the compute device
    return whole.shrink(((offset, offset + count),)).bitcast(dtype).reshape(shape).to(Device.DEFAULT)


def attributes_of(node: onnx.NodeProto, base_dir: Path | None) -> dict[str, Any]:
    """A node's attributes as Python values: ints, floats, str, lists, Tensors (TENSOR) or GraphProtos (GRAPH)."""
    attrs: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR:
            attrs[attr.name] = tensor_from_proto(attr.t, base_dir)
        elif attr.type == onnx.AttributeProto.STRING:
            attrs[attr.name] = attr.s.decode()
        elif attr.type == onnx.AttributeProto.STRINGS:
            attrs[attr.name] = [s.decode() for s in attr.strings]
        elif attr.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
            attrs[attr.name] = list(onnx.helper.get_attribute_value(attr))
        else:
            attrs[attr.name] = onnx.helper.get_attribute_value(attr)
    return attrs
