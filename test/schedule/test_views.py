"""Tests for fusegrad/schedule/views.py: which view chains read one run of bytes (checked against numpy on random
chains), the BUFFER_VIEW kernel a storage device gets instead of a copy kernel, and size-changing bitcasts, which are
views on DISK and kernels elsewhere."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.dtype import DType, dtypes
from fusegrad.schedule.rangeify import is_kernelized
from fusegrad.schedule.views import (
    byte_run,
    copy_then_rearrange,
    describe_view,
    is_storage_device,
    longest_run,
    storage_view_kernel,
    view_chain,
)
from fusegrad.tensor import Tensor
from fusegrad.uop import Ops

# *** which chains are one run of bytes ***


def apply(draw: Any, t: Tensor, a: np.ndarray, kinds: list[str]) -> tuple[Tensor, np.ndarray]:
    """One random movement op applied to both the tensor and the array of element numbers."""
    kind = draw(st.sampled_from(kinds))
    if kind == "reshape":
        d = draw(st.sampled_from([d for d in range(1, a.size + 1) if a.size % d == 0]))
        shape = (d, a.size // d) if draw(st.booleans()) else (d, 1, a.size // d)
        return t.reshape(shape), a.reshape(shape)
    if kind == "shrink":
        bounds = []
        for s in a.shape:
            lo = draw(st.integers(0, s - 1))
            bounds.append((lo, draw(st.integers(lo + 1, s))))
        return t.shrink(bounds), a[tuple(slice(lo, hi) for lo, hi in bounds)]
    if kind == "permute":
        order = draw(st.permutations(list(range(a.ndim))))
        return t.permute(order), a.transpose(order)
    if kind == "flip":
        axis = draw(st.integers(0, a.ndim - 1))
        return t.flip(axis), np.flip(a, axis)
    if kind == "expand" and 1 in a.shape:
        shape = tuple(2 if s == 1 else s for s in a.shape)
        return t.expand(shape), np.broadcast_to(a, shape)
    pads = [(draw(st.integers(0, 1)), draw(st.integers(0, 1))) for _ in a.shape]
    return t.pad(pads), np.pad(a, pads)  # zeros: never a run, as element 0 can't repeat in one


@st.composite
def chains(draw: Any, kinds: list[str]) -> tuple[Tensor, np.ndarray]:
    n = draw(st.integers(1, 24))
    t, a = Tensor.empty(n, dtype=dtypes.int32), np.arange(n)
    for _ in range(draw(st.integers(1, 4))):
        t, a = apply(draw, t, a, kinds)
    return t, a


def is_run_at(a: np.ndarray, start: int) -> bool:
    return bool(np.array_equal(a.reshape(-1), np.arange(start, start + a.size)))


@settings(max_examples=200, deadline=None)
@given(chains(["reshape", "shrink", "permute", "flip", "expand", "pad"]))
def test_a_run_is_what_numpy_reads(case: tuple[Tensor, np.ndarray]) -> None:
    t, a = case
    if (run := byte_run(t.uop)) is not None:  # sound: a run read in order is exactly elements start, start+1, ...
        assert run.offset % 4 == 0
        assert run.nbytes == a.size * 4
        assert is_run_at(a, run.offset // 4)
        assert run.base is t.uop.base


@st.composite
def shrunk_boxes(draw: Any) -> tuple[Tensor, np.ndarray]:
    """A reshape to 2 or 3 axes, shrinks, then maybe a flat reshape: every step has strides, so runs are exact."""
    n = draw(st.integers(1, 24))
    t, a = apply(draw, Tensor.empty(n, dtype=dtypes.int32), np.arange(n), ["reshape"])
    for _ in range(draw(st.integers(1, 3))):
        t, a = apply(draw, t, a, ["shrink"])
    return (t.reshape(-1), a.reshape(-1)) if draw(st.booleans()) else (t, a)


@settings(max_examples=150, deadline=None)
@given(shrunk_boxes())
def test_every_run_of_a_shrunk_box_is_found(case: tuple[Tensor, np.ndarray]) -> None:
    t, a = case
    run = byte_run(t.uop)
    assert (run is not None) == is_run_at(a, int(a.reshape(-1)[0]))


def test_runs_and_their_byte_offsets() -> None:
    rows = Tensor.empty(24, dtype=dtypes.int32).reshape(4, 6)
    assert (run := byte_run(rows[1:3].uop)) is not None
    assert (run.offset, run.nbytes, run.shape) == (24, 48, (2, 6))
    assert (run := byte_run(rows[2:3, 1:4].uop)) is not None
    assert (run.offset, run.nbytes) == (52, 12)
    assert (run := byte_run(rows[1:2].permute(1, 0).uop)) is not None
    assert run.offset == 24
    as_bytes = Tensor.empty(10, dtype=dtypes.uint8)[3:9].bitcast(dtypes.int8)
    assert (run := byte_run(as_bytes.uop)) is not None
    assert (run.offset, run.dtype) == (3, dtypes.int8)
    for not_a_run in (
        rows[:, 1:3],
        rows.permute(1, 0),
        rows.flip(1),
        rows[0:1].expand(2, 6),
        rows.pad(((0, 0), (1, 0))),
    ):
        assert byte_run(not_a_run.uop) is None
    assert (run := byte_run(rows[:, 1:1].uop)) is not None
    assert run.nbytes == 0


def test_chain_and_its_description() -> None:
    t = Tensor.empty(24, dtype=dtypes.int32)
    view = t.reshape(4, 6)[:, 1:3].bitcast(dtypes.float32)
    base, ops = view_chain(view.uop)
    assert base is t.uop
    assert [op.op for op in ops] == [Ops.RESHAPE, Ops.SHRINK, Ops.BITCAST]
    described = describe_view(view.uop)
    assert described == f"(24,) {dtypes.int32} -> reshape (4, 6) -> shrink ((0, 4), (1, 3)) -> bitcast {dtypes.float32}"


# *** the BUFFER_VIEW kernel ***


def disk_tensor(tmp_path: pathlib.Path, values: np.ndarray) -> Tensor:
    path = tmp_path / "values.bin"
    path.write_bytes(values.tobytes())
    return Tensor.empty(values.size, dtype=dtypes.int32, device=f"DISK:{path}")


def test_only_storage_devices_get_views(tmp_path: pathlib.Path) -> None:
    assert is_storage_device(f"DISK:{tmp_path}/x")
    assert is_storage_device("NPY")
    assert not is_storage_device("CPU")
    assert not is_storage_device(("DISK:/a", "DISK:/b"))
    cpu = Tensor.empty(8, dtype=dtypes.int32)[2:5].contiguous()
    assert storage_view_kernel(cpu.uop, {}) is None  # a compute device copies: contiguous() must not alias memory
    computed = disk_tensor(tmp_path, np.arange(8, dtype=np.int32)) + 1
    assert storage_view_kernel(computed.contiguous().uop, {}) is None  # not a view of memory: an ordinary kernel


def test_view_kernel_is_a_buffer_view_of_the_base(tmp_path: pathlib.Path) -> None:
    t = disk_tensor(tmp_path, np.arange(8, dtype=np.int32))
    kernel = storage_view_kernel(t[2:5].contiguous().uop, {})
    assert kernel is not None
    assert is_kernelized(kernel)
    out, ast = kernel.src[0], kernel.src[1].arg.ast
    assert (ast.op, ast.arg, kernel.src[1].src[1]) == (Ops.BUFFER_VIEW, (3, 8), t.uop)
    assert (out.buffer.base, out.buffer.offset, out.buffer.size) == (t.uop.buffer, 8, 3)


def test_a_copy_of_a_view_runs_no_kernel_on_disk(tmp_path: pathlib.Path) -> None:
    t = disk_tensor(tmp_path, np.arange(8, dtype=np.int32))
    schedule = t[2:5].to("CPU").schedule()
    assert [ei.ast.op for ei in schedule] == [Ops.BUFFER_VIEW, Ops.COPY]
    view, copy = schedule
    assert copy.bufs[1] is view.bufs[0]
    assert view.bufs[1] is t.uop.buffer


def test_non_contiguous_view_names_device_and_view(tmp_path: pathlib.Path) -> None:
    t = disk_tensor(tmp_path, np.arange(24, dtype=np.int32))
    with pytest.raises(RuntimeError, match=r"DISK:.*values\.bin: can't read a non-contiguous view: got .*shrink"):
        t.reshape(4, 6)[:, 1:3].to("CPU").realize()
    with pytest.raises(RuntimeError, match=r"bitcast: DISK:.*values\.bin runs no kernels.*shrink \(\(0, 4\), \(1, 3\)"):
        t.reshape(4, 6)[:, 1:3].bitcast(dtypes.int64)


# *** size-changing bitcasts: a kernel on compute devices, a view on DISK, both like numpy's view ***

SIZED = [dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.float16, dtypes.int32, dtypes.float32, dtypes.int64]


def numpy_dtype(dt: DType) -> Any:
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(SIZED), st.sampled_from(SIZED), st.integers(1, 3), st.sampled_from(["CPU", "PYTHON"]))
def test_bitcast_regroups_the_last_axis_like_numpy(src: DType, dst: DType, rows: int, device: str) -> None:
    width = 8 // src.itemsize  # 8 bytes per row: every pair of sizes divides it
    raw = np.random.default_rng(rows).integers(0, 256, size=rows * 8, dtype=np.uint8)
    bits = raw.view(numpy_dtype(src)).reshape(rows, width)
    t = Tensor(bits, device=device).bitcast(src).bitcast(dst)
    assert t.shape == (rows, 8 // dst.itemsize)
    assert t.dtype == dst
    got = t.bitcast({1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dst.itemsize]).numpy()
    np.testing.assert_array_equal(got, raw.view(numpy_dtype(dst)).reshape(rows, -1))


def test_bitcast_of_a_computed_value() -> None:
    x = Tensor(np.array([1.0, -2.5], dtype=np.float32)) * 2
    np.testing.assert_array_equal(x.bitcast(dtypes.uint8).numpy(), np.array([2.0, -5.0], np.float32).view(np.uint8))


def test_bitcast_that_cant_regroup() -> None:
    with pytest.raises(ValueError, match=r"bitcast: .* \(1 vs 2 bytes per element\): got shape \(2, 3\), expected"):
        Tensor.empty(2, 3, dtype=dtypes.uint8).bitcast(dtypes.int16)
    with pytest.raises(ValueError, match=r"got shape \(\)"):
        Tensor(np.array(1, dtype=np.int32)).bitcast(dtypes.uint8)
    assert Tensor.empty(2, 0, dtype=dtypes.uint8).bitcast(dtypes.int64).shape == (2, 0)


def test_disk_bitcast_is_a_view_of_pending_writes_too(tmp_path: pathlib.Path) -> None:
    values = np.arange(6, dtype=np.int32)
    written = Tensor(values).to(f"DISK:{tmp_path / 'written.bin'}")  # not realized: the bitcast lands the write first
    view = written[1:3].bitcast(dtypes.int64)
    assert written.uop.base.op is Ops.BUFFER  # written now
    assert view.uop.base.op is Ops.BUFFER  # the memory is there: a buffer over it, with nothing to run
    assert (view.uop.buffer.base, view.uop.buffer.offset) == (written.uop.buffer, 4)
    assert view.to("CPU").tolist() == values[1:3].view(np.int64).tolist()


def test_longest_run_and_what_is_rearranged_after_a_copy(tmp_path: pathlib.Path) -> None:
    t = disk_tensor(tmp_path, np.arange(24, dtype=np.int32))
    rows = t.reshape(4, 6)[1:3]
    base, ops = view_chain(rows.permute(1, 0).flip(0).uop)
    assert longest_run(base, ops) == 2  # reshape, shrink; then permute and flip rearrange
    moved = copy_then_rearrange(rows.permute(1, 0).flip(0).to("CPU").uop)
    assert moved is not None
    assert moved.op is Ops.CONTIGUOUS
    assert [u.op for u in view_chain(moved.src[0])[1]] == [Ops.PERMUTE, Ops.FLIP]
    copy = view_chain(moved.src[0])[0]
    assert copy.op is Ops.COPY
    assert copy.src[0] is rows.uop
    assert copy.device == "CPU"
    assert copy_then_rearrange(t.reshape(4, 6)[:, 1:3].to("CPU").uop) is None  # a selection past the run: an error
    assert copy_then_rearrange(rows.to("CPU").uop) is None  # one run already: a BUFFER_VIEW, nothing to rearrange
    cpu = Tensor.empty(24, dtype=dtypes.int32).reshape(4, 6).permute(1, 0)
    assert copy_then_rearrange(cpu.to("CPU:1").uop) is None  # a compute device rearranges before copying


def test_npy_memory_is_viewed_like_a_file() -> None:
    a = np.arange(12, dtype=np.int32)
    t = Tensor(a, device="NPY")
    assert [ei.ast.op for ei in t[2:5].to("CPU").schedule()] == [Ops.BUFFER_VIEW, Ops.COPY]
    assert t[2:5].to("CPU").tolist() == [2, 3, 4]
    assert t[1:3].bitcast(dtypes.int64).to("CPU").tolist() == a[1:3].view(np.int64).tolist()
    np.testing.assert_array_equal(t.reshape(3, 4).permute(1, 0).to("CPU").numpy(), a.reshape(3, 4).T)
