"""Kernels the CPU compiler's flags once got wrong (found by test.fuzz, seed 10101): with -funroll-loops this host's
gcc 12 summed a uint32 column of an `omp simd` reduce loop with a computed trip count wrongly, and emitted AVX512-FP16
masked moves that binutils 2.40 can't assemble. Both checked against numpy on the CPU device, default opts and NOOPT."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.helpers import Context

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")

COLUMNS = np.array([[64301, 1538, 20742, 295], [21554, 10354, 7356, 2326], [65535, 710, 8716, 18048]], np.uint16)


@pytest.mark.parametrize("noopt", [0, 1])
def test_uint_cumsum_then_power(noopt: int) -> None:
    with Context(NOOPT=noopt):
        got = (-Tensor(COLUMNS)).cumsum(0).pow(328).numpy()
    want = np.cumsum((-COLUMNS).astype(np.uint32), axis=0, dtype=np.uint32)
    want = np.array([[pow(int(v), 328, 1 << 32) for v in row] for row in want], np.uint32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("noopt", [0, 1])
def test_masked_half_select_assembles(noopt: int) -> None:
    x = Tensor(np.array(-32768.0, np.float16))
    low = x < -1.900390625
    root = low.where(x, low.cast("float16")).sqrt()
    with Context(NOOPT=noopt):  # raised CompileError: "unsupported masking for `vmovsh'"
        got = low.where(root.reshape(1).expand(3), root)[Tensor(np.array([4, 1, -1, -4], np.int32))].numpy()
    assert got.shape == (4,)  # indices out of range read as invalid (numpy would raise): only the build is checked


@pytest.mark.parametrize("noopt", [0, 1])
def test_cumsum_over_an_expanded_bool_tensor(noopt: int) -> None:
    """A register array of ints cleared by an `omp simd` loop: gcc 12.2 put it in the red zone 8 bytes past a 16-byte
    boundary and stored to it with the aligned vmovdqa (segfault) until the renderer aligned such arrays itself."""
    bits = np.array([1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1], bool).reshape(3, 4)
    with Context(NOOPT=noopt):
        got = Tensor(bits).reshape(1, 3, 4).expand(3, 3, 4).cumsum(1).numpy()
    np.testing.assert_array_equal(got, np.cumsum(np.broadcast_to(bits, (3, 3, 4)), axis=1))
