"""Renderer tests see 32-byte vectors on every host: golden sources and the heuristic's tiles don't depend on whether
the machine running them has AVX-512 (test/codegen/test_vectorize checks the 64-byte path)."""

from __future__ import annotations

import pytest

from fusegrad.codegen import vectorize


@pytest.fixture(autouse=True)
def _avx2_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.VECTOR_BYTES)
