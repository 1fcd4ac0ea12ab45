"""The CUDA runtime (runtime/ops_cuda.py). Without an NVIDIA driver, opening CUDA fails with an error naming what is
missing (checked here); with a GPU the `gpu` tests run kernels against numpy, time them, and copy between GPUs."""

from __future__ import annotations

import ctypes.util

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.device import Device


def _cuda_missing() -> str | None:
    try:
        Device["CUDA"]
    except RuntimeError as err:
        return str(err)
    return None


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="the NVIDIA driver is installed here")
def test_missing_driver_is_named() -> None:
    with pytest.raises(RuntimeError, match=r"CUDA: .*(libcuda|NVRTC)"):
        Device["CUDA"]


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="the NVIDIA driver is installed here")
def test_device_listing_says_why_cuda_fails() -> None:
    from fusegrad.device import enumerate_devices_str

    (line,) = [x for x in enumerate_devices_str() if x[2:].startswith("CUDA")]
    assert "FAIL" in line
    assert "libcuda" in line or "NVRTC" in line


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3, 5), (256, 300)])
def test_ops_match_numpy(shape: tuple[int, int]) -> None:
    if (why := _cuda_missing()) is not None:
        pytest.skip(f"no CUDA device: {why}")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    ta, tb = Tensor(a, device="CUDA"), Tensor(b, device="CUDA")
    np.testing.assert_allclose(((ta * tb).sum(1) + ta.max(1)).numpy(), (a * b).sum(1) + a.max(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((ta @ tb.T).numpy(), a @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ta.half().exp().numpy(), np.exp(a.astype(np.float16)), rtol=2e-3, atol=2e-3)


@pytest.mark.gpu
def test_kernel_time_and_copies_between_gpus() -> None:
    if (why := _cuda_missing()) is not None:
        pytest.skip(f"no CUDA device: {why}")
    from fusegrad.runtime.support.cuda import device_count

    dev = Device["CUDA"]
    src = 'extern "C" __global__ void fill(float* a) { a[blockIdx.x * blockDim.x + threadIdx.x] = 2.0f; }'
    prg = dev.runtime("fill", dev.compiler.compile(src))
    out = Tensor.empty(1024, device="CUDA").realize()
    seconds = prg(out.uop.buffer._buf, global_size=(8, 1, 1), local_size=(128, 1, 1), wait=True)
    assert isinstance(seconds, float)
    assert seconds > 0
    np.testing.assert_array_equal(out.numpy(), np.full(1024, 2.0, np.float32))
    if device_count() > 1:
        a = np.arange(100, dtype=np.float32)
        np.testing.assert_array_equal((Tensor(a, device="CUDA").to("CUDA:1") + 1).numpy(), a + 1)
