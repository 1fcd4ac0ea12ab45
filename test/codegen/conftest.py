"""Codegen tests see 32-byte vectors on every host: golden sources and the heuristic's tiles don't depend on whether
the machine running them has AVX-512 (test_vectorize checks the 64-byte path on purpose), and full-width 64-byte units
where a test forces those vectors (test_split_vectors checks Zen 4's split ones)."""

from __future__ import annotations

import pytest

from fusegrad.codegen import vectorize


@pytest.fixture(autouse=True)
def _avx2_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.VECTOR_BYTES)
    monkeypatch.setattr(vectorize, "vector_exp2", lambda: True)  # AVX2's: libmvec's 8-lane exp2, or lane by lane
    monkeypatch.setattr(vectorize, "split_wide_vectors", lambda: False)
