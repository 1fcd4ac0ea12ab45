"""Tests for fusegrad/runtime/ops_npy.py: numpy arrays as zero-copy buffers, copied to a compute device on realize."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from fusegrad.device import Buffer, Device
from fusegrad.dtype import _from_np_dtype, dtypes
from fusegrad.helpers import GlobalCounters
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Ops, UOp


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


# *** Tensor(numpy array) and Tensor.from_blob (fusegrad/tensor.py) ***


def test_tensor_from_array_wraps_it_until_realized() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(array)
    assert t.uop.op is Ops.COPY
    assert t.device == "CPU"
    npy = t.uop.src[0].base.buffer
    assert npy.device == "NPY"
    assert np.shares_memory(np.frombuffer(npy._buf, dtype=np.float32), array)
    array[0, 0] = -1  # not copied yet: seen
    before = GlobalCounters.mem_used_per_device["CPU"]
    assert t.tolist()[0][:2] == [-1, 1]
    array[0, 1] = -2  # copied at realize: not seen
    assert t.tolist()[0][:2] == [-1, 1]
    # one host copy only: the CPU buffer (numpy() reads it out, but allocates no fusegrad memory)
    assert GlobalCounters.mem_used_per_device["CPU"] - before == array.nbytes


def test_tensor_from_array_on_npy_stays_there() -> None:
    array = np.arange(3, dtype=np.int32)
    t = Tensor(array, device="NPY")
    assert t.uop.op is Ops.BUFFER
    assert np.shares_memory(np.frombuffer(t.uop.buffer._buf, dtype=np.int32), array)


ODD_ARRAYS = [np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2], np.float32(2.5), np.zeros((0, 3))]


@pytest.mark.parametrize("array", ODD_ARRAYS)
def test_tensor_from_odd_arrays(array: Any) -> None:
    np.testing.assert_array_equal(Tensor(array).numpy(), np.asarray(array))


def test_from_blob_reads_and_writes_through() -> None:
    array = np.arange(6, dtype=np.float32)
    t = Tensor.from_blob(array.ctypes.data, (2, 3), dtype=dtypes.float32)
    assert t.uop.base.buffer.options.external_ptr == array.ctypes.data
    array[0] = 10  # no copy was made: the tensor reads the array's memory
    assert t.tolist() == [[10, 1, 2], [3, 4, 5]]
    t += 1
    t.realize()
    assert array.tolist() == [11, 2, 3, 4, 5, 6]
    assert (t * 2).tolist() == [[22, 4, 6], [8, 10, 12]]


def test_from_blob_bad_input() -> None:
    with pytest.raises(ValueError, match=r"from_blob: expected a non-null integer address, got 0"):
        Tensor.from_blob(0, (2,), dtype=dtypes.float32)
