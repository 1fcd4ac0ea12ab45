"""Model tests: each model is written in the reference's model-zoo idiom, loads a torch twin's random weights through
`helpers.fetch` (mocked: it returns a checkpoint saved in a temporary folder) and `nn.state.torch_load`, and must match
the twin's outputs (and, for some, gradients) on random inputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fusegrad import Tensor, helpers


@pytest.fixture
def serve_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, torch.nn.Module], None]:
    """`serve(url, module)`: saves module's state dict and makes helpers.fetch(url) return that file."""
    served: dict[str, Path] = {}

    def fake_fetch(url: str, *args: object, **kwargs: object) -> Path:
        if url not in served:
            raise AssertionError(f"fetch of {url}: no such file served (the test has no network)")
        return served[url]

    def serve(url: str, module: torch.nn.Module) -> None:
        served[url] = tmp_path / f"{len(served)}.pt"
        torch.save(module.state_dict(), served[url])

    monkeypatch.setattr(helpers, "fetch", fake_fetch)
    return serve


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)
    Tensor.manual_seed(0)
