"""Copies between devices (`Tensor.to`, the BufferCopy runner of fusegrad/engine/realize.py): every pair of CPU, CPU:1,
PYTHON, NPY and DISK round-trips bit-exactly, host destinations are written directly (no staging copy), NULL moves
nothing, and every copy records a ProfileRangeEvent with is_copy=True when PROFILE=1."""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import numpy as np
import pytest

from fusegrad.device import Buffer
from fusegrad.dtype import _from_np_dtype, dtypes
from fusegrad.engine.realize import BufferCopy
from fusegrad.helpers import Context, ProfileRangeEvent, cpu_events
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import UOp

DEVICES = ["CPU", "CPU:1", "PYTHON", "NPY", "DISK"]
HOST_DESTINATIONS = ["CPU", "CPU:1", "PYTHON", "NPY"]  # host memory: the source is copied straight into it


def device_name(kind: str, tmp_path: pathlib.Path, role: str) -> str:
    return f"DISK:{tmp_path / f'{role}.bin'}" if kind == "DISK" else kind


def tensor_on(kind: str, values: np.ndarray[Any, Any], tmp_path: pathlib.Path) -> Tensor:
    """`values` on a device, put there without a copy kernel (so only the copy under test runs)."""
    dtype = _from_np_dtype(values.dtype)
    if kind == "DISK":
        path = tmp_path / "src.bin"
        values.tofile(path)
        return Tensor.empty(*values.shape, dtype=dtype, device=f"DISK:{path}")
    if kind == "NPY":
        buf = UOp.new_buffer("NPY", values.size, dtype)
        buf.buffer.allocate(values)
        return Tensor(buf.reshape(values.shape))
    return Tensor(values, device=kind).realize()  # a numpy array is copied to its device on realize


def random_values(np_dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """Random bit patterns, so floats include NaNs with payloads, infinities and negative zeros."""
    raw = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * np.dtype(np_dtype).itemsize)
    values = raw.astype(np.uint8).view(np_dtype).reshape(shape)
    return values.astype(np.bool_) if np_dtype == "bool" else values


def assert_bit_equal(got: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> None:
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
    np.testing.assert_array_equal(got, expected)
    assert got.tobytes() == expected.tobytes()  # NaN payloads and signed zeros too


PAIRS = [p for p in itertools.product(DEVICES, DEVICES) if p[0] != p[1] or p[0] == "DISK"]  # DISK: two files


@pytest.mark.parametrize(("src", "dest"), PAIRS)
def test_copy_round_trips_exactly(src: str, dest: str, tmp_path: pathlib.Path) -> None:
    values = random_values("float32", (3, 5, 7))
    moved = tensor_on(src, values, tmp_path).to(device_name(dest, tmp_path, "dest")).realize()
    assert moved.device == device_name(dest, tmp_path, "dest")
    assert_bit_equal(moved.numpy(), values)
    back = moved.to(device_name(src, tmp_path, "back")).realize()
    assert_bit_equal(back.numpy(), values)


@pytest.mark.parametrize(("src", "dest"), PAIRS)
def test_to_then_numpy_without_realize(src: str, dest: str, tmp_path: pathlib.Path) -> None:
    values = random_values("int16", (4, 9))
    assert_bit_equal(tensor_on(src, values, tmp_path).to(device_name(dest, tmp_path, "dest")).numpy(), values)


@pytest.mark.parametrize(("src", "dest"), [(s, d) for s, d in PAIRS if s != "CPU"])
def test_chained_to_without_realize(src: str, dest: str, tmp_path: pathlib.Path) -> None:
    values = random_values("uint8", (10,))
    chained = tensor_on(src, values, tmp_path).to(device_name(dest, tmp_path, "dest")).to("CPU")
    assert_bit_equal(chained.numpy(), values)


@pytest.mark.parametrize("np_dtype", ["bool", "int8", "uint16", "float16", "int64", "float64"])
@pytest.mark.parametrize("dest", ["CPU:1", "NPY", "DISK"])
def test_copy_keeps_every_dtype(np_dtype: str, dest: str, tmp_path: pathlib.Path) -> None:
    values = random_values(np_dtype, (33,), seed=1)
    moved = Tensor(values).to(device_name(dest, tmp_path, "dest")).realize()
    assert_bit_equal(moved.to("CPU").realize().numpy(), values)


def test_disk_copy_writes_the_file(tmp_path: pathlib.Path) -> None:
    values = np.arange(1000, dtype=np.int32)
    Tensor(values, device="CPU:1").to(f"DISK:{tmp_path / 'out.bin'}").realize()
    assert (tmp_path / "out.bin").read_bytes() == values.tobytes()


@pytest.mark.parametrize(("src", "dest"), [(s, d) for s, d in itertools.product(DEVICES, HOST_DESTINATIONS) if s != d])
def test_host_destinations_are_written_directly(
    src: str, dest: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = np.arange(64, dtype=np.float32)
    moving = tensor_on(src, values, tmp_path).to(dest)

    def no_staging(self: Buffer, allow_zero_copy: bool = False) -> memoryview:
        raise AssertionError(f"as_memoryview of {self!r}: the copy staged the source in host memory")

    with monkeypatch.context() as patch:
        patch.setattr(Buffer, "as_memoryview", no_staging)
        moving.realize()
    np.testing.assert_array_equal(moving.numpy(), values)


def copy_events() -> list[tuple[str, str]]:
    return [(str(e.name), e.device) for e in cpu_events if isinstance(e, ProfileRangeEvent) and e.is_copy]


@pytest.mark.parametrize(("src", "dest"), [("CPU", "CPU:1"), ("NPY", "CPU"), ("DISK", "PYTHON"), ("CPU", "DISK")])
def test_copies_record_profile_events(src: str, dest: str, tmp_path: pathlib.Path) -> None:
    def copy_to_dest() -> Tensor:
        return tensor_on(src, np.ones(8, dtype=np.float32), tmp_path).to(device_name(dest, tmp_path, "dest"))

    cpu_events.clear()
    with Context(PROFILE=0):
        copy_to_dest().realize()
    assert copy_events() == []  # not profiling: no event
    moving = copy_to_dest()
    source_name = moving.uop.src[0].device
    with Context(PROFILE=1):
        moving.realize()
    assert copy_events() == [(f"{source_name} -> {moving.device}", moving.device)]
    cpu_events.clear()


def test_null_copies_record_events_and_move_nothing() -> None:
    cpu_events.clear()
    with Context(PROFILE=1):
        from_null = Tensor.empty(4, dtype=dtypes.int32, device="NULL").to("CPU").realize()
        Tensor([1, 2, 3, 4]).to("NULL").realize()
        # 16 GiB: had NULL's contents been staged in host memory, this would allocate them
        Tensor.empty(1 << 32, dtype=dtypes.float32, device="NULL").to("NULL:1").realize()
    assert copy_events() == [("NULL -> CPU", "CPU"), ("CPU -> NULL", "NULL"), ("NULL -> NULL:1", "NULL:1")]
    assert from_null.shape == (4,)
    cpu_events.clear()


def test_buffer_copy_checks_sizes_and_dtypes() -> None:
    dest, src = Buffer("CPU", 4, dtypes.int32).allocate(), Buffer("CPU:1", 4, dtypes.float32).allocate()
    with pytest.raises(ValueError, match=r"copy: buffer mismatch: 4 x dtypes.int <- 4 x dtypes.float"):
        BufferCopy(16, "CPU", "CPU:1")([dest, src], {})
