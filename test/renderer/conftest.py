"""Renderer tests see 32-byte vectors and FMA on every host: golden sources and the heuristic's tiles don't depend on
whether the machine running them has AVX-512 (test/codegen/test_vectorize checks the 64-byte path) or FMA (without
it, a fused kernel still runs: fmaf from libm, the same bits)."""

from __future__ import annotations

import pytest

from fusegrad.codegen import vectorize
from fusegrad.renderer import cstyle


@pytest.fixture(autouse=True)
def _avx2_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.VECTOR_BYTES)
    monkeypatch.setattr(vectorize, "vector_exp2", lambda: True)  # AVX2's: libmvec's 8-lane exp2, or lane by lane


@pytest.fixture(autouse=True)
def _fma_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cstyle, "host_has_fma", lambda: True)
