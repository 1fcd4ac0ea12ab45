"""Tests for fusegrad/runtime/ops_npy.py: numpy arrays as zero-copy buffers, copied to a compute device on realize."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from fusegrad.device import Buffer, Device
from fusegrad.dtype import _from_np_dtype, dtypes
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import UOp


def npy_tensor(array: np.ndarray[Any, Any]) -> Tensor:
    """A lazy tensor over `array`'s memory, as Tensor(array) would build it (see ops_npy.py)."""
    buf = UOp.new_buffer("NPY", array.size, _from_np_dtype(array.dtype))
    buf.buffer.allocate(array)
    return Tensor(buf.reshape(array.shape))


def test_buffer_wraps_the_array_without_copying() -> None:
    array = np.arange(6, dtype=np.float32)
    buf = Buffer("NPY", 6, dtypes.float32, opaque=array)
    assert np.shares_memory(np.frombuffer(buf._buf, dtype=np.float32), array)
    array[0] = 42
    assert buf.numpy().tolist() == [42, 1, 2, 3, 4, 5]
    assert buf.options.nolru  # not ours: never put in the LRU cache


def test_non_contiguous_array_is_copied_once() -> None:
    array = np.arange(12, dtype=np.int32)[::2]
    buf = Buffer("NPY", 6, dtypes.int32, opaque=array)
    assert not np.shares_memory(np.frombuffer(buf._buf, dtype=np.int32), array)
    assert buf.numpy().tolist() == [0, 2, 4, 6, 8, 10]


def test_wrong_size_array_is_refused() -> None:
    with pytest.raises(ValueError, match=r"allocate: opaque memory has the wrong size: got 12 bytes, expected 16"):
        Buffer("NPY", 4, dtypes.int32, opaque=np.zeros(3, dtype=np.int32))


def test_to_cpu_copies_when_realized() -> None:
    array = np.arange(4, dtype=np.int32)
    on_cpu = npy_tensor(array).to("CPU")
    array[1] = 100  # seen: nothing has been copied yet
    on_cpu.realize()
    array[2] = 200  # not seen: the copy was made at realize
    assert on_cpu.tolist() == [0, 100, 2, 3]


def test_read_only_and_multi_dimensional_arrays() -> None:
    array = np.frombuffer(np.arange(6, dtype=np.int16).tobytes(), dtype=np.int16).reshape(2, 3)
    assert not array.flags.writeable
    np.testing.assert_array_equal(npy_tensor(array).to("CPU").numpy(), array)


def test_copy_into_npy_gets_fresh_memory() -> None:
    out = Tensor(np.arange(5, dtype=np.uint8)).to("NPY").realize()
    assert out.uop.base.buffer.device == "NPY"
    assert out.numpy().tolist() == [0, 1, 2, 3, 4]


def test_pickle_keeps_contents() -> None:
    buf = Buffer("NPY", 3, dtypes.int64, opaque=np.array([7, 8, 9]))
    assert pickle.loads(pickle.dumps(buf)).numpy().tolist() == [7, 8, 9]


def test_npy_does_not_compute() -> None:
    with pytest.raises(RuntimeError, match=r"NPY: this device has no compiler: it stores data but can't compute"):
        (npy_tensor(np.ones(2, dtype=np.float32)) * 2).realize()
    assert Device["NPY"].allocator._as_buffer(memoryview(b"")) is not None  # host memory: copies out are one memcpy
