"""Helpers shared by the test modules (one home, imported as `test.shared`): loading a script that is not a package
module (bench/, tools/), and the small realized-kernel chains the JIT and graph tests replay."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from fusegrad import Tensor

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path, name: str) -> ModuleType:
    """The Python file at `path` imported as module `name` (registered in sys.modules: dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None, f"cannot load {path}"
    assert spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def vec(*values: float) -> Tensor:
    """A realized 1-d float tensor of the values."""
    return Tensor(list(values)).realize()


def steps(x: Tensor, n: int) -> Tensor:
    """n realized kernels: x -> (x + 1) * 2 -> ... ."""
    for _ in range(n):
        x = ((x + 1) * 2).realize()
    return x


def expected(values: list[float], n: int) -> list[float]:
    """What `steps` gives for these values, computed in Python."""
    for _ in range(n):
        values = [(v + 1) * 2 for v in values]
    return values
