"""Copy bandwidth between devices, against numpy: CPU -> CPU:1, NPY -> CPU and DISK -> CPU vs `np.copyto` of the same
size, 1 KB ... 64 MB. Each copy is the COPY kernel's runner (BufferCopy) on buffers allocated beforehand, best of many
runs; numpy copies between page-aligned arrays like fusegrad's, DISK reads a file already in the page cache, NPY wraps
an ordinary numpy array. Then allreduce (float32 sum over 2 and 4 CPU devices, naive and ring) against message size,
next to the bytes a perfect allreduce moves per device, 2(n-1)/n x size: only the allreduce's own ExecItems are timed
(copies and combining kernels, compiled beforehand), the best time of each step, summed.
Usage: python bench/devices.py [--max-mb N] [--seconds S] [--skip-copies]. On a shared or small machine, run it with
OMP_NUM_THREADS=1: each simulated device is then one thread, and kernels don't wait on busy OpenMP workers.
"""

from __future__ import annotations

import argparse
import mmap
import pathlib
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.engine.realize import BufferCopy, ExecItem
from fusegrad.helpers import Context
from fusegrad.tensor import Tensor
from fusegrad.uop import Ops

PATHS = ["CPU -> CPU:1", "NPY -> CPU", "DISK -> CPU"]


def best_of(fn: Callable[[], Any], seconds: float) -> float:
    """The fastest of as many runs as fit in `seconds` (at least 3, at most 10000), after one warm-up run."""
    fn()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 10000):
        st = time.perf_counter()
        fn()
        times.append(time.perf_counter() - st)
    return min(times)


def source_buffer(path: str, data: np.ndarray[Any, Any], disk_file: pathlib.Path) -> Buffer:
    """The source of one copy path, holding `data` (the NPY buffer wraps it, the DISK buffer maps a file of it)."""
    src_device = path.split(" -> ")[0]
    if src_device == "NPY":
        return Buffer("NPY", data.size, dtypes.uint8, opaque=data)
    if src_device == "DISK":
        data.tofile(disk_file)
        return Buffer(f"DISK:{disk_file}", data.size, dtypes.uint8).ensure_allocated()
    return Buffer(src_device, data.size, dtypes.uint8, initial_value=data.tobytes())


def copy_seconds(path: str, data: np.ndarray[Any, Any], disk_file: pathlib.Path, seconds: float) -> float:
    src = source_buffer(path, data, disk_file)
    dest = Buffer(path.split(" -> ")[1], data.size, dtypes.uint8).ensure_allocated()
    runner = BufferCopy(data.nbytes, dest.device, src.device)
    elapsed = best_of(lambda: runner([dest, src], {}), seconds)
    if not np.array_equal(dest.numpy(), data):
        raise RuntimeError(f"{path}: the copy of {data.nbytes} bytes is wrong")
    return elapsed


def page_aligned(data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A copy of data at the start of a page, as fusegrad's host buffers are: source and destination a few bytes apart
    modulo 4096 alias in the store buffer (4K aliasing) and copy up to 10x slower, which would make numpy look slow."""
    out = np.frombuffer(mmap.mmap(-1, data.nbytes), dtype=data.dtype)
    out[:] = data
    return out


def numpy_seconds(data: np.ndarray[Any, Any], seconds: float) -> float:
    src, dest = page_aligned(data), page_aligned(np.zeros_like(data))
    return best_of(lambda: np.copyto(dest, src), seconds)


def size_label(nbytes: int) -> str:
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def allreduce_items(n: int, nbytes: int, ring: bool) -> list[ExecItem]:
    """The ExecItems of one float32 allreduce of `nbytes` per device over CPU:0..n-1, lowered and run once."""
    devices = tuple(f"CPU:{i}" for i in range(n))
    # ones, not empty(): garbage memory holds denormals, which make float adds ~100x slower
    parts = Tensor.ones(n, nbytes // 4, dtype=dtypes.float32).contiguous().shard(devices, 0).realize()
    with Context(RING=2 if ring else 0):
        items = parts.sum(0).schedule()
    # the first n items compute each device's partial sum (here: its row); the rest is the allreduce
    assert all(ei.ast.op is Ops.SINK for ei in items[:n]), "allreduce_items: expected the partial sums first"
    for ei in items:
        ei.lower().run()
    return items[n:]


def allreduce_table(sizes: list[int], seconds: float) -> None:
    print(
        "\nallreduce of float32 (sum), CPU devices; 'ideal' = 2(n-1)/n x size moved per device, 'busbw' = ideal / time"
    )
    print(
        f"{'size':>7s} {'n':>2s} {'ideal':>9s} {'naive ms':>9s} {'busbw GB/s':>11s} {'ring ms':>9s} {'busbw GB/s':>11s}"
    )
    for n in (2, 4):
        for nbytes in sizes:
            ideal = 2 * (n - 1) / n * nbytes
            row = f"{size_label(nbytes):>7s} {n:2d} {ideal / 1e6:7.3f}MB"
            for ring in (False, True):
                items = allreduce_items(n, nbytes, ring)
                # each step's best time, summed: on a shared machine a whole run rarely escapes every preemption
                share = seconds / len(items)
                elapsed = sum(best_of(lambda ei=ei: ei.run(do_update_stats=False), share) for ei in items)
                row += f" {elapsed * 1e3:9.3f} {ideal / elapsed / 1e9:11.2f}"
            print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-mb", type=int, default=64, help="largest copy, in MB (sizes go up by 4x from 1 KB)")
    parser.add_argument("--seconds", type=float, default=0.2, help="time spent on each case (the best run counts)")
    parser.add_argument("--skip-copies", action="store_true", help="only the allreduce table")
    args = parser.parse_args()
    sizes = [1 << bits for bits in range(10, 21 + (args.max_mb.bit_length() - 1) + 1, 2)]
    rng = np.random.default_rng(0)
    if not args.skip_copies:
        copy_table(sizes, rng, args.seconds)
    allreduce_table(sizes, args.seconds)


def copy_table(sizes: list[int], rng: np.random.Generator, seconds: float) -> None:
    print(f"{'size':>7s} {'np.copyto':>10s}" + "".join(f" {p:>21s}" for p in PATHS))
    print(f"{'':7s} {'GB/s':>10s}" + f" {'GB/s  (vs numpy)':>21s}" * len(PATHS))
    with tempfile.TemporaryDirectory() as tmp:
        for nbytes in sizes:
            data = rng.integers(0, 256, nbytes, dtype=np.uint8)
            numpy_rate = nbytes / numpy_seconds(data, seconds) / 1e9
            row = f"{size_label(nbytes):>7s} {numpy_rate:10.2f}"
            for i, path in enumerate(PATHS):
                rate = nbytes / copy_seconds(path, data, pathlib.Path(tmp) / f"src{i}_{nbytes}.bin", seconds) / 1e9
                row += f" {rate:11.2f} ({rate / numpy_rate:5.2f}x)"
            print(row)


if __name__ == "__main__":
    main()
