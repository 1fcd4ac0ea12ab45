"""fusegrad.llm.sampling: greedy cases, and draws with a fixed seed against the distribution they should follow."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fusegrad.llm.sampling import sample

LOGITS = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15]))


def _draws(n: int, **kwargs: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.bincount([sample(LOGITS, rng=rng, **kwargs) for _ in range(n)], minlength=len(LOGITS))  # type: ignore[arg-type]


def test_greedy_and_top_k_1_are_argmax() -> None:
    rng = np.random.default_rng(0)
    for row in np.random.default_rng(1).standard_normal((20, 50)):
        assert sample(row) == sample(row, 1.3, top_k=1, rng=rng) == int(row.argmax())


def _chi2_pvalue(counts: np.ndarray, expected: np.ndarray) -> float:
    keep = expected > 0
    assert counts[~keep].sum() == 0  # nothing drawn where nothing should be
    return float(stats.chisquare(counts[keep], expected[keep] * counts.sum()).pvalue)


def test_temperature_1_follows_the_softmax() -> None:
    assert _chi2_pvalue(_draws(4000, temperature=1.0), np.exp(LOGITS)) > 1e-3


def test_temperature_sharpens() -> None:
    p = np.exp(LOGITS / 0.5)
    assert _chi2_pvalue(_draws(4000, temperature=0.5), p / p.sum()) > 1e-3


def test_top_k_keeps_the_k_most_likely() -> None:
    p = np.array([0, 0.4, 0, 0.3, 0.15])
    assert _chi2_pvalue(_draws(4000, temperature=1.0, top_k=3), p / p.sum()) > 1e-3


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    # sorted 0.4, 0.3, 0.15, ...: the mass before 0.15 is 0.7 < 0.75, so three stay; at 0.7 only two
    p3 = np.array([0, 0.4, 0, 0.3, 0.15])
    assert _chi2_pvalue(_draws(4000, temperature=1.0, top_p=0.75), p3 / p3.sum()) > 1e-3
    p2 = np.array([0, 0.4, 0, 0.3, 0])
    assert _chi2_pvalue(_draws(2000, temperature=1.0, top_p=0.7), p2 / p2.sum()) > 1e-3
    assert set(np.flatnonzero(_draws(200, temperature=1.0, top_p=0.1))) == {1}


def test_a_fixed_seed_repeats() -> None:
    assert (_draws(300, temperature=0.9, top_k=4, top_p=0.9) == _draws(300, temperature=0.9, top_k=4, top_p=0.9)).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"temperature": -1.0}, "temperature must be >= 0"), ({"top_k": -2}, "top_k must be >= 0"),
     ({"top_p": 1.5}, r"top_p must be in \(0, 1\]")],
)  # fmt: skip
def test_bad_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sample(LOGITS, **kwargs)  # type: ignore[arg-type]
