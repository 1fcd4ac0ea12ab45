"""Tests for what the reference's test_jit.py and test_randomness.py need beside the engine: device.is_dtype_supported,
Tensor._threefry_random_bits, the per-device generator registries and multinomial's error type (mixin/random.py), and
helpers.suppress_finalizing at interpreter shutdown."""

from __future__ import annotations

import sys

import pytest

from fusegrad import Tensor, helpers
from fusegrad.device import is_dtype_supported
from fusegrad.dtype import dtypes


def test_is_dtype_supported_follows_the_renderer() -> None:
    assert is_dtype_supported(dtypes.float32)
    assert is_dtype_supported(dtypes.half, "CPU")
    assert is_dtype_supported(dtypes.bfloat16, "CPU")  # stored as bits, computed in float (renderer/cstyle.py)
    assert is_dtype_supported(dtypes.bfloat16, "PYTHON")
    assert Tensor.rand(3, dtype=dtypes.bfloat16, device="PYTHON").float().numpy().shape == (3,)


def test_threefry_random_bits_match_jax() -> None:
    """JAX's threefry_2x32((0, 1337), arange(20)): the counters' first halves then second halves, 20 rounds."""
    counts0, counts1 = Tensor.arange(20, dtype=dtypes.uint32).chunk(2)
    key = Tensor([0, 1337], dtype=dtypes.uint32)
    bits = Tensor._threefry_random_bits(key, counts0, counts1)
    assert bits.dtype == dtypes.uint32
    assert bits.tolist()[:8] == [2221762175, 1752107825, 653745012, 1967534793, 1395205442, 3840423848, 2159346757,
                                 603508235]  # fmt: skip
    assert bits.tolist()[-3:] == [403244401, 2560861638, 1692360114]


def test_device_registries_list_devices_drawn_from_since_the_seed() -> None:
    Tensor.manual_seed(1337)
    assert len(Tensor._device_seeds) == len(Tensor._device_rng_counters) == 0
    first = Tensor.rand(4).tolist()
    assert len(Tensor._device_rng_counters) == 1
    Tensor.rand(4, device="CPU:1").realize()
    assert len(Tensor._device_seeds) == 2
    Tensor.manual_seed(1337)
    assert len(Tensor._device_rng_counters) == 0
    assert Tensor.rand(4).tolist() == first  # the reseeded state is reused: the stream restarts


def test_multinomial_misuse_is_a_value_error_and_an_assertion_error() -> None:
    """ValueError is the house type; the reference raises AssertionError and its tests catch that."""
    with pytest.raises(AssertionError, match="expected a 1-d or 2-d tensor of weights, got shape"):
        Tensor(2.0).multinomial(1)
    with pytest.raises(ValueError, match=r"cannot draw 0 samples from 2 categories"):
        Tensor([1.0, 9.0]).multinomial(0)
    with pytest.raises(AssertionError, match=r"cannot draw 100 samples from 2 categories \(without replacement\)"):
        Tensor([0.1, 0.9]).multinomial(100, replacement=False)


def test_suppress_finalizing_survives_a_torn_down_sys(monkeypatch: pytest.MonkeyPatch) -> None:
    """At shutdown module globals become None; the wrapper must not need `sys` then."""
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)

    @helpers.suppress_finalizing
    def fail() -> None:
        raise RuntimeError("half torn down")

    monkeypatch.setattr(helpers, "sys", None)
    assert fail() is None
