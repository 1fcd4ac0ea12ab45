"""Tests for fusegrad/mixin/random.py: the Threefry generator, the distributions and the initialisers.

Statistical checks use fixed seeds, so they are deterministic: moments within a few standard errors, and
Kolmogorov-Smirnov / chi-square p-values above 1e-3 (scipy; those checks skip without it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.dtype import dtypes
from fusegrad.engine.jit import TinyJit
from fusegrad.mixin.random import _next_key, threefry2x32
from fusegrad.uop import Ops

try:
    from scipy import stats as scipy_stats
except ImportError:  # pragma: no cover - scipy is optional
    scipy_stats = None

needs_scipy = pytest.mark.skipif(scipy_stats is None, reason="scipy is not installed")
N = 20000  # samples for the statistical checks (one compiled kernel per distribution)


# *** the generator ***


def threefry_reference(key: tuple[int, int], counter: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32-20 in numpy (uint32 arithmetic wraps), for counters of shape (2, n)."""
    rotations = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = [np.uint32(key[0]), np.uint32(key[1]), np.uint32(key[0] ^ key[1] ^ 0x1BD11BDA)]
    x0, x1 = counter[0] + ks[0], counter[1] + ks[1]
    for i in range(20):
        x0 = x0 + x1
        r = rotations[i % 8]
        x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
        if i % 4 == 3:
            j = i // 4 + 1
            x0, x1 = x0 + ks[j % 3], x1 + ks[(j + 1) % 3] + np.uint32(j)
    return x0, x1


def u32(values: Any, device: str = "CPU") -> Tensor:
    return Tensor(np.asarray(values, dtype=np.uint32).reshape(-1), device=device, dtype=dtypes.uint32)


# Random123's known-answer vectors for threefry2x32_20: (key, counter, result)
KNOWN_ANSWERS = [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_threefry_known_answers(device: str) -> None:
    keys = [u32([k[i] for k, _, _ in KNOWN_ANSWERS], device) for i in range(2)]
    counters = [u32([c[i] for _, c, _ in KNOWN_ANSWERS], device) for i in range(2)]
    x0, x1 = threefry2x32((keys[0], keys[1]), (counters[0], counters[1]))
    assert x0.tolist() == [r[0] for _, _, r in KNOWN_ANSWERS]
    assert x1.tolist() == [r[1] for _, _, r in KNOWN_ANSWERS]


def test_threefry_matches_a_numpy_reference() -> None:
    counter = np.random.default_rng(0).integers(0, 2**32, size=(2, 64), dtype=np.uint32)
    key = (0xDEADBEEF, 0x01234567)
    x0, x1 = threefry2x32((u32(key[0]), u32(key[1])), (u32(counter[0]), u32(counter[1])))
    ref0, ref1 = threefry_reference(key, counter)
    np.testing.assert_array_equal(x0.numpy(), ref0)
    np.testing.assert_array_equal(x1.numpy(), ref1)


# *** reproducibility and streams ***


def test_same_seed_same_numbers_and_successive_calls_differ() -> None:
    Tensor.manual_seed(42)
    a, b = Tensor.rand(64).numpy(), Tensor.rand(64).numpy()
    Tensor.manual_seed(42)
    np.testing.assert_array_equal(Tensor.rand(64).numpy(), a)
    np.testing.assert_array_equal(Tensor.rand(64).numpy(), b)
    assert not np.isin(a, b).any()
    Tensor.manual_seed(43)
    assert not np.isin(Tensor.rand(64).numpy(), a).any()


def test_values_do_not_depend_on_fusion() -> None:
    """Alone, fused into a bigger expression, realized together with other draws: the same numbers."""
    Tensor.manual_seed(7)
    alone = Tensor.rand(5, 7, contiguous=False).numpy()
    normal = Tensor.randn(33, contiguous=False).numpy()
    Tensor.manual_seed(7)
    fused = (Tensor.rand(5, 7, contiguous=False) * 2 + 1).sum(1)
    fused_normal = Tensor.randn(33, contiguous=False).exp()
    Tensor.realize(fused, fused_normal)
    np.testing.assert_allclose(fused.numpy(), (alone * 2 + 1).sum(1), rtol=1e-6)
    np.testing.assert_allclose(fused_normal.numpy(), np.exp(normal), rtol=1e-5)
    Tensor.manual_seed(7)
    np.testing.assert_array_equal(Tensor.rand(5, 7).numpy(), alone)  # contiguous (the default) too


def test_values_do_not_depend_on_the_device() -> None:
    Tensor.manual_seed(3)
    cpu = Tensor.rand(9).numpy()
    Tensor.manual_seed(3)
    np.testing.assert_array_equal(Tensor.rand(9, device="PYTHON").numpy(), cpu)


def test_multi_device_draws_and_reseeding() -> None:
    devices = ("CPU", "CPU:1")
    Tensor.manual_seed(9)
    first = Tensor.rand(6, device=devices)
    assert first.device == devices
    values = first.numpy()
    assert not np.isin(Tensor.rand(6, device=devices).numpy(), values).any()
    Tensor.manual_seed(9)  # rewrites the multi-device state with a kernel
    np.testing.assert_array_equal(Tensor.rand(6, device=devices).numpy(), values)
    Tensor.manual_seed(9)
    np.testing.assert_array_equal(Tensor.rand(6).numpy(), values)  # the same stream as one device


def test_successive_draws_reuse_one_kernel() -> None:
    """Seed and call number are an input buffer, not constants: the kernel ASTs are the same objects."""
    first = Tensor.rand(8, contiguous=False).schedule()
    second = Tensor.rand(8, contiguous=False).schedule()
    assert [item.ast for item in first] == [item.ast for item in second]


def test_realization_order_does_not_change_the_numbers() -> None:
    """Each draw copies the device state into its own key at once: realizing a later draw first changes nothing."""
    Tensor.manual_seed(11)
    first, second = Tensor.rand(6).numpy(), Tensor.rand(6).numpy()
    Tensor.manual_seed(11)
    a, b = Tensor.rand(6, contiguous=False), Tensor.rand(6, contiguous=False)
    np.testing.assert_array_equal(b.numpy(), second)
    np.testing.assert_array_equal(a.numpy(), first)


def test_each_draw_keeps_its_own_key() -> None:
    """The key is a copy of the device state in memory of its own: later advances of the state never reach it."""
    Tensor.manual_seed((7 << 32) + 5)
    keys = [_next_key(Tensor, "CPU") for _ in range(3)]
    assert [k.tolist() for k in keys] == [[5, 7, 0], [5, 7, 1], [5, 7, 2]]
    Tensor.manual_seed(11)
    expected = [Tensor.rand(5).numpy() for _ in range(3)]
    Tensor.manual_seed(11)
    lazy = [Tensor.rand(5, contiguous=False) for _ in range(3)]
    for i in (2, 0, 1):
        np.testing.assert_array_equal(lazy[i].numpy(), expected[i])


def test_a_draw_runs_no_kernel() -> None:
    """Drawing (and so making a layer) runs nothing: the numbers are computed by the first realize that needs them."""
    from fusegrad import nn
    from fusegrad.helpers import GlobalCounters

    Tensor.rand(2).realize()  # the device state exists: later draws could only run kernels to advance it
    GlobalCounters.reset()
    draws = [Tensor.rand(5), Tensor.randn(2, 3), Tensor.randint(4, high=7), Tensor.kaiming_uniform(3, 4)]
    layer = nn.Linear(16, 8)
    assert (GlobalCounters.kernel_count, GlobalCounters.global_ops) == (0, 0)
    assert all(x.uop.base.op is not Ops.BUFFER for x in [*draws, layer.weight, layer.bias])
    layer.weight.realize()
    assert GlobalCounters.kernel_count > 0


def test_an_unrealized_draw_never_repeats() -> None:
    """A draw left lazy (or never realized) still used up its call number: the next draw's numbers differ."""
    Tensor.manual_seed(4)
    realized = [Tensor.rand(64).numpy() for _ in range(2)]
    Tensor.manual_seed(4)
    Tensor.rand(64)  # never realized
    after = Tensor.rand(64).numpy()
    np.testing.assert_array_equal(after, realized[1])
    assert not np.array_equal(after, realized[0])
    Tensor.manual_seed(4)
    first = Tensor.rand(64)  # realized after the next draw
    assert not np.array_equal(Tensor.rand(64).numpy(), first.numpy())


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_realizing_draws_in_any_order(order: tuple[int, int, int]) -> None:
    """Lazy draws realized one by one in any order, or together, give the numbers of draws realized at once."""
    Tensor.manual_seed(21)
    expected = [Tensor.rand(9).numpy(), Tensor.randn(9).numpy(), Tensor.uniform(9, low=-2).numpy()]
    Tensor.manual_seed(21)
    lazy = [Tensor.rand(9), Tensor.randn(9), Tensor.uniform(9, low=-2)]
    for i in order:
        np.testing.assert_array_equal(lazy[i].numpy(), expected[i])
    Tensor.manual_seed(21)
    together = [Tensor.rand(9), Tensor.randn(9), Tensor.uniform(9, low=-2)]
    Tensor.realize(*together)
    for got, want in zip(together, expected, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


def test_a_reseed_leaves_earlier_lazy_draws_alone() -> None:
    """A draw made before manual_seed and realized after it keeps the numbers of its own seed."""
    Tensor.manual_seed(1)
    want = Tensor.rand(8).numpy()
    Tensor.manual_seed(1)
    early = Tensor.rand(8)
    Tensor.manual_seed(2)
    other = Tensor.rand(8)
    np.testing.assert_array_equal(early.numpy(), want)
    assert not np.array_equal(other.numpy(), want)


def test_lazy_draws_around_jit_replays() -> None:
    """Draws left lazy before, between and after replays never share numbers with the replays' draws, and the
    whole sequence is the one drawn without the JIT."""

    @TinyJit
    def draw() -> Tensor:
        return Tensor.rand(4).realize()

    Tensor.manual_seed(8)
    plain = [Tensor.rand(4).tolist() for _ in range(9)]
    Tensor.manual_seed(8)
    got: list[Any] = []
    for _ in range(3):  # call 1 runs eagerly, call 2 captures, call 3 replays; a lazy draw beside each
        lazy = Tensor.rand(4)
        got += [lazy, draw().tolist()]
    got += [Tensor.rand(4), draw().tolist(), Tensor.rand(4)]
    assert [x.tolist() if isinstance(x, Tensor) else x for x in got] == plain


def test_jitted_draws_advance_the_device_counter() -> None:
    """A replay re-runs the counter's assign: fresh numbers each call, the same sequence as without the JIT."""

    @TinyJit
    def draw() -> Tensor:
        return Tensor.rand(4).realize()

    Tensor.manual_seed(5)
    plain = [Tensor.rand(4).tolist() for _ in range(5)]
    Tensor.manual_seed(5)
    jitted = [draw().tolist() for _ in range(5)]
    assert jitted == plain
    assert len({tuple(x) for x in jitted[2:]}) == 3  # calls 3, 4, 5 are replays
    Tensor.manual_seed(5)  # rewrites the state in place: the replays restart too
    assert [draw().tolist() for _ in range(2)] == plain[:2]


def test_reseeding_inside_a_jitted_function() -> None:
    """manual_seed inside the function is a kernel while capturing: every replay restarts the stream, as eagerly."""

    @TinyJit
    def draw() -> Tensor:
        Tensor.manual_seed(3)
        return Tensor.rand(4).realize()

    Tensor.rand(1).realize()  # the device state exists before the capture
    Tensor.manual_seed(3)
    first = Tensor.rand(4).tolist()
    assert [draw().tolist() for _ in range(4)] == [first] * 4


def test_jitted_dropout_draws_new_masks() -> None:
    Tensor.training = True
    step = TinyJit(lambda x: x.dropout(0.5).realize())
    x = Tensor.ones(64).contiguous().realize()
    masks = [tuple(step(x).numpy() == 0) for _ in range(5)]
    assert len(set(masks)) == 5


# *** distributions ***


@needs_scipy
def test_rand_is_uniform() -> None:
    Tensor.manual_seed(0)
    t = Tensor.rand(N // 100, 100)
    assert (t.shape, t.dtype) == ((N // 100, 100), dtypes.float32)
    x = t.numpy().reshape(-1)
    assert x.min() >= 0.0
    assert x.max() < 1.0
    assert abs(x.mean() - 0.5) < 4 * math.sqrt(1 / 12 / N)
    assert abs(x.var() - 1 / 12) < 0.005
    assert scipy_stats.kstest(x, "uniform").pvalue > 1e-3


def test_rand_half_never_rounds_to_one() -> None:
    Tensor.manual_seed(1)
    x = Tensor.rand(N, dtype=dtypes.float16).numpy()
    assert x.dtype == np.float16
    assert x.max() < 1.0
    assert len(np.unique(x)) > 1000  # 11 random bits: 2048 values


@needs_scipy
def test_randn_is_standard_normal() -> None:
    Tensor.manual_seed(0)
    x = Tensor.randn(N).numpy()
    assert abs(x.mean()) < 4 / math.sqrt(N)
    assert abs(x.var() - 1) < 0.05
    assert scipy_stats.kstest(x, "norm").pvalue > 1e-3


@needs_scipy
def test_randint_is_uniform_over_the_range() -> None:
    Tensor.manual_seed(0)
    t = Tensor.randint(N, low=-3, high=5)
    assert t.dtype == dtypes.int32
    x = t.numpy()
    assert x.min() == -3
    assert x.max() == 4
    assert scipy_stats.chisquare(np.bincount(x + 3, minlength=8)).pvalue > 1e-3
    assert Tensor.randint(2, 3, dtype=dtypes.int8).dtype == dtypes.int8


def test_uniform_and_normal_parameters() -> None:
    Tensor.manual_seed(0)
    u = Tensor.uniform(N, low=-2.0, high=6.0).numpy()
    assert u.min() >= -2.0
    assert u.max() < 6.0
    assert abs(u.mean() - 2.0) < 4 * 8 / math.sqrt(12 * N)
    n = Tensor.normal(N, mean=3.0, std=0.5).numpy()
    assert abs(n.mean() - 3.0) < 4 * 0.5 / math.sqrt(N)
    assert abs(n.std() - 0.5) < 0.02


@pytest.mark.parametrize("n", [0, 1, 7, 50])
def test_randperm_is_a_permutation(n: int) -> None:
    t = Tensor.randperm(n)
    assert (t.shape, t.dtype) == ((n,), dtypes.int32)
    assert sorted(t.tolist()) == list(range(n))


@needs_scipy
def test_randperm_has_no_order_bias() -> None:
    """Where a value lands is independent of the value: a 4x4 contingency table of (position, value) quarters."""
    Tensor.manual_seed(0)
    n = 2000
    perm = Tensor.randperm(n).numpy()
    table = np.zeros((4, 4))
    np.add.at(table, (np.arange(n) * 4 // n, perm * 4 // n), 1)
    assert scipy_stats.chi2_contingency(table).pvalue > 1e-3
    assert abs(scipy_stats.spearmanr(np.arange(n), perm).statistic) < 4 / math.sqrt(n)


@needs_scipy
def test_multinomial_with_replacement_follows_the_weights() -> None:
    Tensor.manual_seed(0)
    weights = np.array([1.0, 2.0, 0.0, 5.0], dtype=np.float32)
    t = Tensor(np.stack([weights, weights[::-1].copy()])).multinomial(4000, replacement=True)
    assert (t.shape, t.dtype) == ((2, 4000), dtypes.int32)
    for row, w in zip(t.numpy(), [weights, weights[::-1]], strict=True):
        counts = np.bincount(row, minlength=4)
        assert counts[w == 0].sum() == 0
        expected = len(row) * w[w > 0] / w.sum()
        assert scipy_stats.chisquare(counts[w > 0], expected).pvalue > 1e-3
    assert Tensor([1.0, 1.0]).multinomial(3, replacement=True).shape == (3,)


@needs_scipy
def test_multinomial_without_replacement() -> None:
    Tensor.manual_seed(0)
    weights = Tensor([[1.0, 2.0, 0.0, 5.0]] * 2000)
    out = weights.multinomial(3).numpy()
    assert all(sorted(row) == [0, 1, 3] for row in out)  # distinct, never the zero-weight category
    counts = np.bincount(out[:, 0], minlength=4)  # the first draw follows the weights
    assert scipy_stats.chisquare(counts[[0, 1, 3]], 2000 * np.array([1, 2, 5]) / 8).pvalue > 1e-3


def test_multinomial_errors() -> None:
    with pytest.raises(ValueError, match="cannot draw 5 samples from 4 categories"):
        Tensor.ones(4).multinomial(5)
    with pytest.raises(ValueError, match="expected a 1-d or 2-d tensor"):
        Tensor.ones(2, 2, 2).multinomial(1)


def test_dropout() -> None:
    x = Tensor.ones(N)
    assert x.dropout(0.3) is x  # not training: identity
    Tensor.training = True
    Tensor.manual_seed(0)
    out = x.dropout(0.3).numpy()
    assert abs((out == 0).mean() - 0.3) < 4 * math.sqrt(0.3 * 0.7 / N)
    np.testing.assert_allclose(out[out != 0], 1 / 0.7, rtol=1e-6)
    assert x.dropout(0.0) is x
    assert (x.dropout(1.0).numpy() == 0).all()
    with pytest.raises(ValueError, match=r"dropout: probability must be in \[0, 1\], got 1.5"):
        x.dropout(1.5)


# *** initialisers ***


def test_initialisers_bounds_and_spread() -> None:
    Tensor.manual_seed(0)
    shape = (64, 32, 3)
    fan_in = 32 * 3
    bound = math.sqrt(3) * math.sqrt(2 / (1 + 0.01**2)) / math.sqrt(fan_in)
    ku = Tensor.kaiming_uniform(*shape).numpy()
    assert np.abs(ku).max() <= bound
    assert abs(ku.std() - bound / math.sqrt(3)) < 0.05 * bound
    kn = Tensor.kaiming_normal(*shape, a=0.5).numpy()
    assert abs(kn.std() - math.sqrt(2 / 1.25) / math.sqrt(fan_in)) < 0.05 * kn.std()
    glorot = math.sqrt(6 / (64 + fan_in))
    gu = Tensor.glorot_uniform(*shape).numpy()
    assert np.abs(gu).max() <= glorot
    assert np.abs(gu).max() > 0.9 * glorot
    su = Tensor.scaled_uniform(*shape).numpy()
    assert np.abs(su).max() <= math.prod(shape) ** -0.5


# *** shapes, dtypes and arguments ***


@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 0, 2), (2, 1, 3)])
def test_shapes_including_empty_and_scalar(shape: tuple[int, ...]) -> None:
    for t in (Tensor.rand(*shape), Tensor.randn(shape), Tensor.randint(*shape, high=3), Tensor.uniform(*shape)):
        assert t.shape == shape
        assert t.numpy().shape == shape


def test_like_functions_and_keywords() -> None:
    base = Tensor.zeros(2, 3, dtype=dtypes.float16)
    assert (base.rand_like().shape, base.rand_like().dtype) == ((2, 3), dtypes.float16)
    assert base.randn_like(dtype=dtypes.float32).dtype == dtypes.float32
    assert Tensor.zeros(2, dtype=dtypes.int32).randn_like().dtype == dtypes.float32
    assert Tensor.rand(2, requires_grad=True).requires_grad is True
    assert Tensor.kaiming_uniform(2, 3, requires_grad=True).requires_grad is True
    assert Tensor.rand(3, device="PYTHON").device == "PYTHON"


def test_argument_errors() -> None:
    with pytest.raises(TypeError, match=r"rand: expected a float dtype, got dtypes\.int"):
        Tensor.rand(2, dtype=dtypes.int32)
    with pytest.raises(TypeError, match="rand: expected a float dtype"):
        Tensor.zeros(2, dtype=dtypes.int32).rand_like()
    with pytest.raises(ValueError, match="randint: expected low < high"):
        Tensor.randint(2, low=3, high=3)
    with pytest.raises(TypeError, match="randint: expected an integer dtype"):
        Tensor.randint(2, dtype=dtypes.float32)
    with pytest.raises(ValueError, match="rand: shape must be non-negative ints"):
        Tensor.rand(-1)
