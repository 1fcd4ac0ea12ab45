"""Tests for fusegrad/runtime/ops_disk.py: files as device memory (round trips, views at offsets, write-through, a file
too short or missing, read-only files) and the clear error when a DISK tensor is computed on."""

from __future__ import annotations

import gc
import os
import pathlib

import numpy as np
import pytest

from fusegrad.device import Buffer, Device
from fusegrad.dtype import DType, _to_np_dtype, dtypes
from fusegrad.runtime.ops_disk import DiskDevice
from fusegrad.tensor import Tensor
from fusegrad.uop import Ops


def disk(path: pathlib.Path) -> str:
    return f"DISK:{path}"


def open_file(path: pathlib.Path) -> object:
    device = Device[disk(path)]
    assert isinstance(device, DiskDevice)
    return device._file


def test_multi_megabyte_round_trip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "weights.bin"
    values = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)  # 4 MiB
    written = Tensor(values).to(disk(path)).realize()
    assert open_file(path) is not None
    del written
    gc.collect()
    assert open_file(path) is None  # the file closes with its last buffer
    assert path.stat().st_size == values.nbytes
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), values)
    reopened = Tensor.empty(1 << 20, dtype=dtypes.float32, device=disk(path))
    np.testing.assert_array_equal(reopened.to("CPU").numpy(), values)
    np.testing.assert_array_equal(reopened.numpy(), values)  # read without a copy kernel, straight from the file


def test_buffer_views_at_offsets(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ckpt.bin"
    header = np.array([3, 7], dtype=np.int64).tobytes()
    body = np.arange(6, dtype=np.float32).tobytes()
    path.write_bytes(header + body)
    base = Buffer(disk(path), len(header) + len(body), dtypes.uint8)
    assert base.view(2, dtypes.int64, 0).ensure_allocated().numpy().tolist() == [3, 7]
    floats = base.view(6, dtypes.float32, 16).ensure_allocated()
    assert floats.numpy().tolist() == [0, 1, 2, 3, 4, 5]
    tail = floats.view(2, dtypes.float32, 16)  # a view of a view is a view of the base at the summed offset
    assert (tail.base, tail.offset) == (base, 32)
    assert tail.ensure_allocated().numpy().tolist() == [4, 5]


def test_view_reads_only_its_range(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sparse.bin"
    with path.open("wb") as f:
        f.truncate(64 << 20)  # a sparse 64 MiB file: reading all of it would take real time and memory
        f.seek((64 << 20) - 8)
        f.write(np.array([42], dtype=np.int64).tobytes())
    base = Buffer(disk(path), 1 << 30, dtypes.uint8)  # a 1 GiB base over the 64 MiB file is fine until it is read
    last = base.view(1, dtypes.int64, (64 << 20) - 8).ensure_allocated()
    assert last.numpy().tolist() == [42]
    past_the_end = base.view(16, dtypes.uint8, (64 << 20) - 8).ensure_allocated()
    with pytest.raises(ValueError, match=r"too short: got 67108864 bytes, expected at least 67108872 \(reading 16"):
        past_the_end.numpy()


def test_writes_go_through_to_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "out.bin"
    base = Buffer(disk(path), 16, dtypes.uint8).ensure_allocated()
    base.view(4, dtypes.uint8, 8).ensure_allocated().copyin(memoryview(b"abcd"))
    assert path.read_bytes() == bytes(8) + b"abcd" + bytes(4)  # visible while open; grown to the base's 16 bytes
    base.copyin(memoryview(bytes(range(16))))
    assert path.read_bytes() == bytes(range(16))


def test_a_longer_file_keeps_its_tail(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "long.bin"
    path.write_bytes(b"x" * 10)
    Tensor(np.zeros(4, dtype=np.uint8)).to(disk(path)).realize()
    assert path.read_bytes() == bytes(4) + b"x" * 6  # writes never truncate


def test_too_short_file_names_both_sizes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(40))
    t = Tensor.empty(100, dtype=dtypes.float32, device=disk(path))
    with pytest.raises(ValueError, match=r"short\.bin is too short: got 40 bytes, expected at least 400"):
        t.to("CPU").realize()
    assert path.stat().st_size == 40  # a failed read doesn't grow the file


def test_missing_file_is_not_created_by_a_read(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "missing.bin"
    with pytest.raises(FileNotFoundError, match=r"missing\.bin does not exist: expected a file of at least 16 bytes"):
        Tensor.empty(4, dtype=dtypes.int32, device=disk(path)).to("CPU").realize()
    assert not path.exists()


def test_read_only_file_loads_but_refuses_writes(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "frozen.bin"
    path.write_bytes(np.arange(4, dtype=np.int32).tobytes())
    real_open = os.open

    def open_read_only(file: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_RDWR:  # as a read-only file does for a user (root may write anything, so chmod can't show it)
            raise PermissionError(13, "Permission denied", file)
        return real_open(file, flags, mode)

    monkeypatch.setattr(os, "open", open_read_only)
    buf = Buffer(disk(path), 4, dtypes.int32).ensure_allocated()
    assert buf.numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(PermissionError, match=r"frozen\.bin is read-only: can't write 8 bytes at offset 4"):
        buf.view(2, dtypes.int32, 4).ensure_allocated().copyin(memoryview(bytes(8)))
    with pytest.raises(PermissionError, match=r"frozen\.bin is read-only: can't write 32 bytes at offset 0"):
        Buffer(disk(path), 8, dtypes.int32).ensure_allocated().copyin(memoryview(bytes(32)))
    assert path.read_bytes() == np.arange(4, dtype=np.int32).tobytes()


def test_disk_memory_is_not_cached_or_counted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "nolru.bin"
    buf = Buffer(disk(path), 4, dtypes.int32).ensure_allocated()
    assert buf.allocator.lru is False
    buf.deallocate()
    assert not any(buf.allocator.cache.values())


def test_computing_on_disk_says_to_move_first(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "compute.bin"
    path.write_bytes(bytes(16))
    t = Tensor.empty(4, dtype=dtypes.float32, device=disk(path))
    with pytest.raises(RuntimeError, match=r"DISK:.*compute\.bin: this device has no compiler: .*\.to\('CPU'\)"):
        (t + 1).realize()
    np.testing.assert_array_equal((t.to("CPU") + 1).numpy(), np.ones(4, dtype=np.float32))


def test_bare_disk_device_has_no_file() -> None:
    with pytest.raises(RuntimeError, match=r"DISK: this device has no renderer: it stores data"):
        _ = Device["DISK"].renderer
    with pytest.raises(ValueError, match=r"allocate: DISK needs a file: got 'DISK'"):
        Buffer("DISK", 4, dtypes.uint8).ensure_allocated()


# weights load as `disk_tensor[offset:offset+n].bitcast(dtype)`: a view of the file (schedule/views.py), no DISK kernel


def file_tensor(path: pathlib.Path, data: bytes, dtype: DType = dtypes.uint8) -> Tensor:
    path.write_bytes(data)
    return Tensor.empty(len(data) // dtype.itemsize, dtype=dtype, device=disk(path))


def test_tensor_shrink_is_a_view(tmp_path: pathlib.Path) -> None:
    t = file_tensor(tmp_path / "shrink.bin", np.arange(8, dtype=np.int32).tobytes(), dtypes.int32)
    assert t[2:5].to("CPU").tolist() == [2, 3, 4]
    assert t[2:5].numpy().tolist() == [2, 3, 4]  # read straight from the file too


def test_tensor_bitcast_is_a_view(tmp_path: pathlib.Path) -> None:
    t = file_tensor(tmp_path / "bitcast.bin", np.array([1.5, -2.0], dtype=np.float32).tobytes(), dtypes.float32)
    assert t.bitcast(dtypes.uint32).to("CPU").tolist() == [0x3FC00000, 0xC0000000]


def test_tensor_bytes_bitcast_to_wider_dtype(tmp_path: pathlib.Path) -> None:
    t = file_tensor(tmp_path / "header.bin", np.array([123456789], dtype=np.int64).tobytes() + b"{}")
    assert t[0:8].bitcast(dtypes.int64).to("CPU").tolist() == [123456789]
    assert bytes(t[8:10].numpy()) == b"{}"


@pytest.mark.parametrize("start", [1, 3, 5, 7])
@pytest.mark.parametrize("dtype", [dtypes.int16, dtypes.int32, dtypes.float32, dtypes.int64, dtypes.float64])
def test_views_at_odd_offsets(tmp_path: pathlib.Path, start: int, dtype: DType) -> None:
    data = np.random.default_rng(start).integers(0, 256, size=40, dtype=np.uint8).tobytes()
    t = file_tensor(tmp_path / "odd.bin", data)
    end = start + 4 * dtype.itemsize
    view = t[start:end].bitcast(dtype).reshape(2, 2)
    expected = np.frombuffer(data[start:end], dtype=_to_np_dtype(dtype)).reshape(2, 2)
    np.testing.assert_array_equal(view.to("CPU").numpy(), expected)
    np.testing.assert_array_equal(view.numpy(), expected)


def test_narrower_bitcast_is_a_view(tmp_path: pathlib.Path) -> None:
    t = file_tensor(tmp_path / "narrow.bin", np.array([1, -2, 3], dtype=np.int32).tobytes(), dtypes.int32)
    assert t[1:3].bitcast(dtypes.uint8).to("CPU").tolist() == [254, 255, 255, 255, 3, 0, 0, 0]
    assert t[1:2].bitcast(dtypes.int16).to("CPU").tolist() == [-2, -1]


def test_rows_of_a_matrix_are_views(tmp_path: pathlib.Path) -> None:
    t = file_tensor(tmp_path / "matrix.bin", np.arange(24, dtype=np.int32).tobytes(), dtypes.int32).reshape(4, 6)
    assert t[1:3].to("CPU").tolist() == [list(range(6, 12)), list(range(12, 18))]
    assert t[2, 1:4].to("CPU").tolist() == [13, 14, 15]  # part of one row: still one run of bytes
    assert t[3:4].permute(1, 0).to("CPU").tolist() == [[18], [19], [20], [21], [22], [23]]  # moves a size-1 axis


def test_columns_of_a_matrix_name_device_and_view(tmp_path: pathlib.Path) -> None:
    t = file_tensor(tmp_path / "matrix.bin", np.arange(24, dtype=np.int32).tobytes(), dtypes.int32).reshape(4, 6)
    with pytest.raises(RuntimeError, match=r"DISK:.*matrix\.bin: can't read a non-contiguous view: got \(24,\) .*"
                       r"reshape \(4, 6\) -> shrink \(\(0, 4\), \(1, 3\)\), expected one run of bytes"):  # fmt: skip
        t[:, 1:3].to("CPU").realize()
    with pytest.raises(RuntimeError, match=r"can't read a non-contiguous view"):
        t[:, 1:3].numpy()
    assert t.to("CPU")[:, 1:3].tolist() == [[1, 2], [7, 8], [13, 14], [19, 20]]  # the way around it, as the error says


def test_multi_megabyte_view_round_trip(tmp_path: pathlib.Path) -> None:
    values = np.random.default_rng(1).standard_normal(3 << 20).astype(np.float32)  # 12 MiB
    header = np.array([len(values) * 4], dtype=np.int64).tobytes()
    t = file_tensor(tmp_path / "big.bin", header + values.tobytes())
    loaded = t[8:].bitcast(dtypes.float32).reshape(3, 1 << 20)
    (copy,) = loaded.to("CPU").schedule()  # no DISK kernel: the copy reads a view of the file's buffer
    assert (copy.ast.op, copy.bufs[1].base, copy.bufs[1].offset) == (Ops.COPY, t.uop.buffer, 8)
    np.testing.assert_array_equal(loaded.to("CPU").numpy(), values.reshape(3, 1 << 20))
    np.testing.assert_array_equal(loaded[1:2].numpy(), values[1 << 20 : 2 << 20].reshape(1, 1 << 20))
    assert t[0:8].bitcast(dtypes.int64).item() == len(values) * 4


def test_a_view_reads_a_write_in_the_same_schedule(tmp_path: pathlib.Path) -> None:
    written = Tensor(np.arange(6, dtype=np.int32)).to(disk(tmp_path / "written.bin"))  # not realized yet
    assert written[2:5].to("CPU").tolist() == [2, 3, 4]


def test_empty_views(tmp_path: pathlib.Path) -> None:
    t = file_tensor(tmp_path / "empty.bin", bytes(16))
    assert t[4:4].bitcast(dtypes.int32).to("CPU").tolist() == []
    assert t[4:4].to("CPU").tolist() == []


def test_rearranged_views_copy_then_rearrange_on_the_destination(tmp_path: pathlib.Path) -> None:
    t = file_tensor(tmp_path / "rearrange.bin", np.arange(24, dtype=np.int32).tobytes(), dtypes.int32)
    a = np.arange(24, dtype=np.int32)
    cases = [
        (t.reshape(4, 6).permute(1, 0), a.reshape(4, 6).T),
        (t.flip(0), a[::-1]),
        (t[2:3].expand(3), np.repeat(a[2:3], 3)),
        (t[4:6].pad(((1, 2),)), np.pad(a[4:6], (1, 2))),
        (t.reshape(4, 6)[1:3].permute(1, 0).bitcast(dtypes.uint32), a.reshape(4, 6)[1:3].T.view(np.uint32)),
    ]
    for view, expected in cases:
        copied = view.to("CPU")
        schedule = copied.schedule()
        kernels = [ei.bufs[0].device for ei in schedule if ei.ast.op is Ops.SINK]
        assert kernels == ["CPU"]  # only the rearrangement runs, after the copy: no kernel on DISK
        np.testing.assert_array_equal(copied.numpy(), expected)
    assert [ei.ast.op for ei in t[4:6].pad(((1, 2),)).to("CPU").schedule()] == [Ops.BUFFER_VIEW, Ops.COPY, Ops.SINK]


# *** writes: assign into DISK memory copies the bytes in place, no kernel runs on the device ***


def test_assign_round_trip_writes_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "assigned.bin"
    values = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)  # 4 MiB
    t = Tensor.empty(1 << 20, device=disk(path))
    t.assign(Tensor(values).realize().to(t.device))
    assert [ei.ast.op for ei in t.schedule()] == [Ops.COPY]  # one copy from the host: nothing computes on DISK
    t.realize()
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), values)
    np.testing.assert_array_equal(t.to("CPU").numpy(), values)
    t.assign((Tensor(values) * 2).to(t.device)).realize()  # a value computed on the host first
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), values * 2)


def test_assign_into_contiguous_views_writes_in_place(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rows.bin"
    m = Tensor.empty(4, 3, dtype=dtypes.int32, device=disk(path))
    m.assign(Tensor(np.arange(12, dtype=np.int32).reshape(4, 3)).to(m.device)).realize()
    m[1:3].assign(Tensor(np.full((2, 3), -1, dtype=np.int32)).to(m.device)).realize()  # whole rows
    m[3, 1:].assign(Tensor(np.array([70, 80], dtype=np.int32)).to(m.device)).realize()  # a slice of the last axis
    flat = m.reshape(12)
    flat.shrink(((0, 2),)).assign(Tensor(np.array([100, 101], dtype=np.int32)).to(m.device)).realize()
    want = [[100, 101, 2], [-1, -1, -1], [-1, -1, -1], [9, 70, 80]]
    assert np.fromfile(path, dtype=np.int32).reshape(4, 3).tolist() == want
    assert m.to("CPU").tolist() == want
    assert path.stat().st_size == 48  # written where the view is: nothing past the end, nothing at offset 0 moved


def test_assign_into_a_loaded_tensor_writes_its_bytes_of_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "offset.bin"
    path.write_bytes(b"HEAD" + np.zeros(4, dtype=np.float32).tobytes() + b"TAIL")
    w = Tensor.empty(24, dtype=dtypes.uint8, device=disk(path))[4:20].bitcast(dtypes.float32)
    w.assign(Tensor(np.array([1, 2, 3, 4], dtype=np.float32)).to(w.device)).realize()
    assert path.read_bytes() == b"HEAD" + np.array([1, 2, 3, 4], dtype=np.float32).tobytes() + b"TAIL"


def test_assign_into_a_non_contiguous_view_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "columns.bin"
    path.write_bytes(bytes(48))
    m = Tensor.empty(4, 3, dtype=dtypes.int32, device=disk(path))
    with pytest.raises(RuntimeError, match=r"columns\.bin: can't write a non-contiguous view: got \(12,\) dtypes.int"):
        m[:, 1].assign(Tensor(np.ones(4, dtype=np.int32)).to(m.device)).realize()
    with pytest.raises(RuntimeError, match=r"can't compute .* into its memory: this device runs no kernels"):
        m.assign(m + 1).realize()
    assert path.read_bytes() == bytes(48)


def test_buffers_of_a_replaced_file_keep_its_bytes(tmp_path: pathlib.Path) -> None:
    """A file replaced at its path (os.replace, as safe_save does): buffers that opened it read the old bytes, new
    buffers read the new file."""
    path = tmp_path / "replaced.bin"
    path.write_bytes(np.array([1, 2], dtype=np.int32).tobytes())
    old = Tensor.empty(2, dtype=dtypes.int32, device=disk(path))
    assert old.to("CPU").tolist() == [1, 2]  # opened now
    (tmp_path / "next.bin").write_bytes(np.array([7, 8, 9], dtype=np.int32).tobytes())
    os.replace(tmp_path / "next.bin", path)
    new = Tensor.empty(3, dtype=dtypes.int32, device=disk(path))
    assert new.to("CPU").tolist() == [7, 8, 9]
    assert old.to("CPU").tolist() == [1, 2]
    del old
    gc.collect()
    assert open_file(path) is not None  # the new file stays open for `new`
    assert Tensor.empty(3, dtype=dtypes.int32, device=disk(path)).to("CPU").tolist() == [7, 8, 9]
