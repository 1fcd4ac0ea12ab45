"""Every public name users reach has a docstring (the API reference is generated from them), and the Tensor page
lists every public Tensor method (docs/api/tensor.md groups them by hand, so a new method must be placed there).

Public: no leading underscore, defined in fusegrad (not inherited from object or re-exported from elsewhere).
Plain data attributes (`Tensor.training`, `dtypes.float32`) cannot hold a docstring and are not checked.
"""

from __future__ import annotations

import inspect
import re
import types
from pathlib import Path
from typing import Any

import pytest

import fusegrad.helpers
import fusegrad.nn
import fusegrad.nn.optim
import fusegrad.nn.state
from fusegrad import Device, Tensor, TinyJit, dtypes
from fusegrad.dtype import DType

ROOT = Path(__file__).resolve().parents[2]


def _documentable(value: Any) -> Any | None:
    """The object whose __doc__ a user sees for a class attribute (functions, properties, classes), else None."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return value.fget
    if inspect.isfunction(value) or inspect.isclass(value):
        return value
    return None


def _is_ours(obj: Any) -> bool:
    return getattr(obj, "__module__", "").startswith("fusegrad")


def class_members(cls: type) -> dict[str, Any]:
    """Public functions, properties and nested classes of `cls` and its fusegrad base classes."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if not _is_ours(klass):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and (obj := _documentable(value)) is not None:
                found[name] = obj
    return found


def module_members(module: types.ModuleType) -> dict[str, Any]:
    """Public functions and classes defined in `module` itself (or listed in its __all__)."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    found = {}
    exported = hasattr(module, "__all__")  # names it lists may be defined in a submodule (nn.BatchNorm2d)
    for name in names:
        value = getattr(module, name)
        if not (inspect.isfunction(value) or inspect.isclass(value)):
            continue
        if value.__module__ == module.__name__ or (exported and _is_ours(value)):
            found[name] = value
    return found


def public_names() -> dict[str, Any]:
    """Every checked name, as `owner.name` -> the object holding its docstring."""
    names: dict[str, Any] = {}
    for label, module in [
        ("nn", fusegrad.nn),
        ("nn.optim", fusegrad.nn.optim),
        ("nn.state", fusegrad.nn.state),
        ("helpers", fusegrad.helpers),
    ]:
        for name, obj in module_members(module).items():
            names[f"{label}.{name}"] = obj
            if inspect.isclass(obj):
                names |= {f"{label}.{name}.{m}": o for m, o in class_members(obj).items()}
    for label, cls in [("Tensor", Tensor), ("Device", type(Device)), ("TinyJit", TinyJit), ("dtypes", dtypes)]:
        names[label] = cls
        names |= {f"{label}.{m}": o for m, o in class_members(cls).items()}
    names |= {f"DType.{m}": o for m, o in class_members(DType).items()}
    return names


def test_the_check_sees_the_api() -> None:
    names = public_names()
    for expected in [
        "Tensor.reshape",
        "Tensor.gelu",
        "Tensor.shape",
        "nn.Linear",
        "nn.optim.AdamW.step",
        "Device.canonicalize",
    ]:
        assert expected in names, f"{expected} is not among the checked names"


def test_every_public_name_has_a_docstring() -> None:
    missing = sorted(name for name, obj in public_names().items() if not (obj.__doc__ or "").strip())
    assert not missing, f"{len(missing)} public names have no docstring: {', '.join(missing)}"


def test_tensor_reference_lists_every_method() -> None:
    page = (ROOT / "docs" / "api" / "tensor.md").read_text()
    listed = set(re.findall(r"^::: fusegrad\.Tensor\.(\w+)$", page, re.MULTILINE))
    public = {name for name in dir(Tensor) if not name.startswith("_")}
    assert not public - listed, f"add these to a group in docs/api/tensor.md: {sorted(public - listed)}"
    assert not listed - public, f"docs/api/tensor.md lists names Tensor does not have: {sorted(listed - public)}"


@pytest.mark.parametrize("cls", [Tensor, TinyJit])
def test_class_docstrings_have_an_example(cls: type) -> None:
    assert "Example" in (cls.__doc__ or "") or ">>>" in (cls.__doc__ or "") or "```" in (cls.__doc__ or "")
