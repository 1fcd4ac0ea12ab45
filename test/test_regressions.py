"""Regression tests for wrong answers and crashes found by hand, each with the property test of its bug class.

- cat of two views of one padded tensor: the kernel builder reused one read's children (and so its padding validity)
  for the other read at the same index (schedule/rangeify.py).
- backward through pow: a gradient's math on kernel constants (`e - 1`) was scheduled like a tensor and crashed.
- a CPU kernel reading through a pad read past its buffer: gcc's vectorized gated loads
  (runtime/support/compiler_cpu.py).
"""

from __future__ import annotations

import math
import mmap
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from test.schedule.test_movement_chains import apply

DEVICES = ["CPU", "PYTHON"]


# ---- 1. cat of views of one padded tensor -------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_cat_of_split_padded_view_keeps_each_pieces_padding(device: str) -> None:
    # [1, 1, 0] repeated and cut to [[1, 1], [0, 1]]: both columns read one padded vector at the same index
    e = Tensor.ones(2, device=device).pad(((0, 1),)).reshape(1, 3).expand(2, 3).reshape(6)[:4].reshape(2, 2)
    np.testing.assert_array_equal(e[:, :1].cat(e[:, 1:], dim=-1).numpy(), [[1, 1], [0, 1]])


@pytest.mark.parametrize("device", DEVICES)
def test_eye_split_into_columns_and_joined(device: str) -> None:
    x = Tensor.eye(2, device=device)
    np.testing.assert_array_equal(x[:, :1].cat(x[:, 1:], dim=-1).numpy(), np.eye(2))


@st.composite
def split_and_joined(draw: Any) -> tuple[Tensor, np.ndarray]:
    """A random movement chain (pads included), cut into two random slices along one axis, joined again with cat."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    a = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)  # from 1: a dropped pad mask shows as 0
    t = Tensor(a, device=draw(st.sampled_from(DEVICES)))
    for _ in range(draw(st.integers(1, 4))):
        t, a = apply(draw, t, a)
    axis = draw(st.integers(0, a.ndim - 1))
    size = a.shape[axis]
    pieces_t, pieces_a = [], []
    for _ in range(2):  # two slices that may overlap, be empty or cover the axis in any order
        lo = draw(st.integers(0, size))
        hi = draw(st.integers(lo, size))
        pieces_t.append(t.shrink(tuple((lo, hi) if i == axis else None for i in range(a.ndim))))
        pieces_a.append(np.take(a, range(lo, hi), axis=axis))
    return pieces_t[0].cat(pieces_t[1], dim=axis), np.concatenate(pieces_a, axis=axis)


@settings(max_examples=80, deadline=None)
@given(split_and_joined())
def test_cat_of_views_of_one_chain_matches_numpy(case: tuple[Tensor, np.ndarray]) -> None:
    t, a = case
    np.testing.assert_array_equal(t.numpy(), a)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(DEVICES),
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=2, max_size=3),
)
def test_sum_of_differently_padded_copies_matches_numpy(device: str, n: int, pads: list[tuple[int, int]]) -> None:
    # every copy reads the same source at shifted indices under its own padding mask
    total = max(before + after for before, after in pads)
    a = np.arange(1, n + 1, dtype=np.float32)
    x = Tensor(a, device=device)
    out_t = sum((x.pad(((b, total - b),)) for b, _ in pads), Tensor.zeros(n + total, device=device))
    out_a = sum(np.pad(a, (b, total - b)) for b, _ in pads)
    np.testing.assert_array_equal(out_t.numpy(), out_a)


# ---- 2. backward through pow ---------------------------------------------------------------------------------------


def test_p_norm_backward_matches_torch() -> None:
    a = np.random.default_rng(0).uniform(-2, 2, (3, 4)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    x.abs().pow(3.5).sum(-1, keepdim=True).pow(1 / 3.5).sum().backward()
    ref = torch.tensor(a, requires_grad=True)
    ref.abs().pow(3.5).sum(-1, keepdim=True).pow(1 / 3.5).sum().backward()
    assert x.grad is not None
    assert ref.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(DEVICES),
    st.tuples(st.integers(1, 4), st.integers(1, 4)),
    st.floats(0.5, 4.0).map(lambda p: round(p, 2)),
    st.integers(0, 1),
)
def test_scalar_pow_chain_backward_matches_torch(device: str, shape: tuple[int, int], p: float, axis: int) -> None:
    # scalar exponents at two shapes (before and after a reduce) share their kernel-constant math in one graph
    a = np.random.default_rng(1).uniform(0.5, 2, shape).astype(np.float32)
    x = Tensor(a, device=device, requires_grad=True)
    (x.pow(p).sum(axis, keepdim=True).pow(1 / p) * x.pow(p - 1)).sum().backward()
    ref = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    (ref.pow(p).sum(axis, keepdim=True).pow(1 / p) * ref.pow(p - 1)).sum().backward()
    assert x.grad is not None
    assert ref.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=2e-4, atol=1e-5)


# ---- 3. CPU kernels read only inside their buffers' guard bytes and write only inside the buffers -----------------

PAGE = mmap.PAGESIZE
PROT_NONE = 0
SENTINEL = 0xA5


def _guarded(nbytes: int, at_end: bool) -> tuple[int, int]:
    """(address of `nbytes` of memory, address of its guard bytes): the memory has an unmapped page GUARD_BYTES before
    it (or GUARD_BYTES after it, `at_end`), the CPU allocator's readable margin, and the margin holds SENTINEL."""
    import ctypes

    from fusegrad.runtime.ops_cpu import GUARD_BYTES

    data_pages = max(1, -(-(nbytes + GUARD_BYTES) // PAGE))
    region = mmap.mmap(-1, (data_pages + 2) * PAGE)
    _kept.append(region)  # never unmapped: the kernels' addresses point into it
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    for guard in (base, base + (data_pages + 1) * PAGE):
        if libc.mprotect(ctypes.c_void_p(guard), ctypes.c_size_t(PAGE), PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
    start = base + PAGE
    margin = start + data_pages * PAGE - GUARD_BYTES if at_end else start
    ctypes.memset(margin, SENTINEL, GUARD_BYTES)
    return (margin - nbytes if at_end else start + GUARD_BYTES), margin


_kept: list[mmap.mmap] = []


def run_pad_kernels_between_guard_pages() -> None:
    """Compile each kernel of a few pads and cats and run it with every buffer GUARD_BYTES from an unmapped page, on
    each side: a read past the guard bytes faults at once instead of now and then, and a write into them changes the
    sentinel. Run in a subprocess."""
    import ctypes

    from fusegrad import Device
    from fusegrad.engine.realize import get_program
    from fusegrad.runtime.ops_cpu import GUARD_BYTES, CPUProgram

    device = Device["CPU"]
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="CPU").realize()
    cases = [x.pad((3, 3, 2, 2), mode=mode) for mode in ("circular", "reflect", "replicate", "constant")]
    cases += [x[:, :1].cat(x[:, 1:], dim=-1), x.pad((1, 2, 0, 1)).flip(1)[1:, :5]]
    for case in cases:
        for item in case.schedule():
            program = get_program(item.ast, device.renderer)
            kernel = CPUProgram(device, program.function_name, device.compiler.compile_cached(program.src))
            for at_end in (False, True):
                placed = [_guarded(buf.nbytes, at_end) for buf in item.bufs]
                kernel(*[address for address, _ in placed])
                for _, margin in placed:
                    assert ctypes.string_at(margin, GUARD_BYTES) == bytes([SENTINEL]) * GUARD_BYTES, "wrote outside"


def test_pad_kernels_stay_inside_their_buffers() -> None:
    root = Path(__file__).resolve().parent.parent
    code = "from test.test_regressions import run_pad_kernels_between_guard_pages as run; run()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"a kernel touched memory outside its buffers (exit {proc.returncode}):\n{proc.stderr}"


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dt", ["float16", "float32"])
def test_like_terms_of_opposite_sign_keep_infinities(device: str, dt: str) -> None:
    """(x + x) - x was simplified to x for floats, so inf gave inf instead of NaN (found by the fuzzer)."""
    values = np.array([np.inf, -np.inf, 3.0, np.nan], dtype=dt)
    v = Tensor(values, device=device)
    with np.errstate(invalid="ignore"):
        for got, want in [((v + v) - v, (values + values) - values), (v * 0 + v, values * 0 + values),
                          (v * 2 + v, values * 2 + values), (v - v, values - values)]:  # fmt: skip
            np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_indexing_by_a_tensor_then_padding_reads_in_bounds(device: str) -> None:
    """A pad after tensor indexing read the index buffer out of bounds: the gates pass simplified the index load's own
    gate away given the outer gate, but C computes a gated access's address anyway (found by the fuzzer; PYTHON
    reports the out-of-bounds read, CPU read it silently)."""
    table = np.arange(16, dtype=np.int32)
    picked = Tensor(table, device=device)[Tensor(np.array([0, 3], dtype=np.int32), device=device)]
    np.testing.assert_array_equal(picked.pad(((0, 1),)).numpy(), [0, 3, 0])
    np.testing.assert_array_equal((picked // picked).pad(((1, 1),)).numpy(), [0, 0, 1, 0])
