"""Picking the next token from a row of logits: greedy, temperature, top-k and top-p (nucleus) sampling.

Runs on the host: one (vocab,) row per step is cheap to copy, and numpy's partition and sort keep it a few lines.
Entry point: `sample(logits, temperature, top_k, top_p, rng)`.
"""

from __future__ import annotations

import numpy as np


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Check sampling settings before a generation starts (a bad one fails before any work is done).

    Args:
        temperature: 0 for greedy, else the divisor of the logits (>= 0).
        top_k: keep the k most likely tokens (>= 0; 0 keeps all).
        top_p: keep the smallest set of most likely tokens with this much probability (0 < top_p <= 1).

    Raises:
        ValueError: a setting outside its range, naming it.

    Examples:
        >>> check_sampling(0.7, 40, 0.9)
        >>> check_sampling(0.7, -1, 0.9)
        Traceback (most recent call last):
        ValueError: sample: top_k must be >= 0: got -1, expected 0 (off) or a count of tokens
    """
    if not temperature >= 0.0:
        raise ValueError(f"sample: temperature must be >= 0: got {temperature}, expected 0 (greedy) or more")
    if top_k < 0:
        raise ValueError(f"sample: top_k must be >= 0: got {top_k}, expected 0 (off) or a count of tokens")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"sample: top_p must be in (0, 1]: got {top_p}, expected 1.0 (off) or less")


def sample(
    logits: np.ndarray,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    rng: np.random.Generator | None = None,
) -> int:
    """The id of the next token from `logits` (vocab,).

    temperature 0 (or top_k 1) is greedy: the argmax. Otherwise the logits are divided by the temperature, cut to the
    `top_k` largest (0: all), then to the smallest set of most likely tokens whose probability reaches `top_p`, and
    one is drawn from what is left, renormalised.

    Args:
        logits: one row of logits, (vocab,).
        temperature: 0 for greedy, else the divisor of the logits.
        top_k: keep the k largest logits (0 keeps all).
        top_p: keep the smallest set of most likely tokens with this much probability (1 keeps all).
        rng: the random generator to draw with (None: a fresh unseeded one).

    Returns:
        The chosen token id.

    Raises:
        ValueError: a setting outside its range (from `check_sampling`).

    Examples:
        >>> sample(np.array([0.1, 2.0, 1.5]))
        1
        >>> sample(np.array([0.1, 2.0, 1.5]), 0.8, top_k=2, rng=np.random.default_rng(0)) in (1, 2)
        True
    """
    check_sampling(temperature, top_k, top_p)
    row = np.asarray(logits, dtype=np.float64).reshape(-1)
    if temperature == 0.0 or top_k == 1:
        return int(row.argmax())
    candidates = _top_k_ids(row, top_k)  # ids by decreasing logit
    scaled = row[candidates] / temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if top_p < 1.0:
        # keep a token while the mass before it is below top_p: the most likely one always stays
        keep = np.cumsum(probs) - probs < top_p
        candidates, probs = candidates[keep], probs[keep] / probs[keep].sum()
    generator = np.random.default_rng() if rng is None else rng
    return int(candidates[generator.choice(len(probs), p=probs)])


def _top_k_ids(row: np.ndarray, top_k: int) -> np.ndarray:
    """Ids of the top_k largest entries (all when top_k is 0 or past the vocab), largest first, ties by lower id."""
    if 0 < top_k < len(row):
        part = np.argpartition(-row, top_k - 1)[:top_k]
        return part[np.lexsort((part, -row[part]))]
    return np.argsort(-row, kind="stable")
