"""Every public name users reach has a docstring in the house convention (the API reference is generated from them),
and the Tensor page lists every public Tensor method (docs/api/tensor.md groups them by hand).

Public: no leading underscore, defined in fusegrad (not inherited from object or re-exported from elsewhere).
Plain data attributes (`Tensor.training`, `dtypes.float32`) cannot hold a docstring and are not checked.

The convention (Google style, the sections mkdocstrings renders; docs/CONTRIBUTING-docs.md shows one):
- `Args:` names every parameter of a function, method or class constructor (a dataclass may use `Attributes:`);
- `Returns:` (or `Yields:` for a generator) when a function returns something (its return annotation is not None);
- `Raises:` names every exception class the function's own body raises (`raise ValueError(...)` in its source);
- `Examples:` holds at least one `>>>` line; every such example runs here as a doctest and must print what it shows
  (`Examples:`, plural: Google style renders that section as code, while `Example:` is a plain-text admonition).
Names that do not follow it yet are listed in docstring_gaps.txt: the list may only shrink (a listed name that now
follows the convention fails the test until it is removed, and a new name must follow it from the start).
"""

from __future__ import annotations

import ast
import builtins
import doctest
import importlib.util
import inspect
import re
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

import fusegrad.distributed
import fusegrad.helpers
import fusegrad.llm.gguf
import fusegrad.llm.model
import fusegrad.llm.sampling
import fusegrad.llm.tokenizer
import fusegrad.nn
import fusegrad.nn.optim
import fusegrad.nn.state
from fusegrad import Device, Tensor, TinyJit, dtypes
from fusegrad.dtype import DType

ROOT = Path(__file__).resolve().parents[2]
GAPS_FILE = Path(__file__).with_name("docstring_gaps.txt")
MODULES: list[tuple[str, types.ModuleType]] = [
    ("nn", fusegrad.nn),
    ("nn.optim", fusegrad.nn.optim),
    ("nn.state", fusegrad.nn.state),
    ("helpers", fusegrad.helpers),
    ("llm.model", fusegrad.llm.model),
    ("llm.gguf", fusegrad.llm.gguf),
    ("llm.tokenizer", fusegrad.llm.tokenizer),
    ("llm.sampling", fusegrad.llm.sampling),
    ("distributed", fusegrad.distributed),
]


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
    for label, module in MODULES:
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


# *** the convention: Args / Returns / Raises / Example sections ***

SECTION = re.compile(r"^(Args|Arguments|Attributes|Returns|Yields|Raises|Examples?):[ \t]*$", re.MULTILINE)
ENTRY = re.compile(r"^[ \t]+(\*{0,2}\w+)(?:[ \t]*\([^)]*\))?:", re.MULTILINE)  # "    name (type): text"


def sections(doc: str) -> dict[str, str]:
    """The docstring's sections by title (Arguments -> Args), each its indented body."""
    text = inspect.cleandoc(doc)
    found: dict[str, str] = {}
    matches = list(SECTION.finditer(text))
    ends = [m.start() for m in matches[1:]] + [len(text)] if matches else []
    for match, end in zip(matches, ends, strict=True):
        title = {"Arguments": "Args"}.get(match[1], match[1])
        found[title] = text[match.end() : end]
    return found


def _function_of(obj: Any) -> Any | None:
    """The function whose signature and body a docstring describes: a class's own __init__, else obj itself."""
    if inspect.isclass(obj):
        init = vars(obj).get("__init__")
        return init if inspect.isfunction(init) else None
    return inspect.unwrap(obj) if callable(obj) else None


def parameters(obj: Any) -> list[str]:
    """Parameter names a docstring must describe (self and cls left out; *args as `*args`)."""
    function = _function_of(obj)
    if function is None:
        return []
    if inspect.isclass(obj) and "__dataclass_fields__" in vars(obj):
        return list(vars(obj)["__dataclass_fields__"])
    marks = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    found = []
    for name, parameter in inspect.signature(function).parameters.items():
        if name not in ("self", "cls"):
            found.append(marks.get(parameter.kind, "") + name)
    return found


def _returns_something(obj: Any) -> bool:
    if inspect.isclass(obj) or isinstance(obj, type(None)):
        return False
    function = _function_of(obj)
    if function is None:
        return False
    annotation = inspect.signature(function).return_annotation
    return annotation not in (inspect.Signature.empty, None, "None") and not _is_property_getter(obj)


def _is_property_getter(obj: Any) -> bool:
    """Whether obj is the fget of a property of a checked class (a property's docstring describes a value)."""
    return getattr(obj, "__name__", "") in PROPERTY_GETTERS.get(getattr(obj, "__qualname__", "").rsplit(".", 1)[0], ())


def raised_exceptions(obj: Any) -> set[str]:
    """Names of the exception classes the function's own source raises (`raise X(...)` / `raise X`)."""
    function = _function_of(obj)
    try:
        source = textwrap.dedent(inspect.getsource(function)) if function is not None else ""
    except (OSError, TypeError):  # generated functions (a dataclass's __init__) have no source
        return set()
    scope = {**vars(builtins), **getattr(inspect.getmodule(function), "__dict__", {})}
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
            if isinstance(scope.get(name), type) and issubclass(scope[name], BaseException):
                found.add(name)
    return found


def convention_gaps(obj: Any) -> list[str]:
    """What the docstring of obj lacks under the convention: section names, or `Args(name)` / `Raises(Error)`."""
    found = sections(obj.__doc__ or "")
    gaps = []
    wanted_args = parameters(obj)
    documented = set(ENTRY.findall(found.get("Args", "") + found.get("Attributes", "")))
    if wanted_args and "Args" not in found and "Attributes" not in found:
        gaps.append("Args")
    else:
        gaps += [f"Args({name})" for name in wanted_args if name not in documented]
    if _returns_something(obj) and "Returns" not in found and "Yields" not in found:
        gaps.append("Returns")
    raised = raised_exceptions(obj)
    if raised and "Raises" not in found:
        gaps.append("Raises")
    elif raised:
        gaps += [f"Raises({name})" for name in sorted(raised) if name not in found["Raises"]]
    if ">>>" not in found.get("Examples", ""):
        gaps.append("Examples")
    return gaps


def _property_getters() -> dict[str, set[str]]:
    """Class qualname -> names of its properties (their getters are checked like values: no Returns needed)."""
    getters: dict[str, set[str]] = {}
    classes = [obj for obj in public_names().values() if inspect.isclass(obj)]
    for cls in [*classes, type(Device), type(dtypes), DType]:
        for klass in cls.__mro__:
            for name, value in vars(klass).items():
                if isinstance(value, property) and value.fget is not None:
                    getters.setdefault(value.fget.__qualname__.rsplit(".", 1)[0], set()).add(name)
    return getters


PROPERTY_GETTERS = _property_getters()


def listed_gaps() -> set[str]:
    """The names in docstring_gaps.txt (one per line; # starts a comment)."""
    lines = (line.split("#", 1)[0].strip() for line in GAPS_FILE.read_text().splitlines())
    return {line for line in lines if line}


def test_the_convention_check_can_fail() -> None:
    def documented(x: int, *rest: int) -> int:
        """Add.

        Args:
            x: a number.
            *rest: more numbers.

        Returns:
            The sum.

        Raises:
            ValueError: for a negative x.

        Examples:
            >>> 1
            1
        """
        if x < 0:
            raise ValueError("negative")
        return x + sum(rest)

    def bare(x: int) -> int:
        """Add."""
        if x < 0:
            raise ValueError("negative")
        return x

    assert convention_gaps(documented) == []
    assert convention_gaps(bare) == ["Args", "Returns", "Raises", "Examples"]
    documented.__doc__ = (documented.__doc__ or "").replace("*rest", "other")
    assert convention_gaps(documented) == ["Args(*rest)"]


def test_public_names_follow_the_convention() -> None:
    gaps = {name: convention_gaps(obj) for name, obj in public_names().items()}
    failing = {name for name, missing in gaps.items() if missing}
    listed = listed_gaps()
    new = sorted(failing - listed)
    assert not new, "these docstrings lack sections (see this file's docstring):\n" + "\n".join(
        f"  {name}: {', '.join(gaps[name])}" for name in new
    )
    fixed = sorted(listed & (gaps.keys() - failing))
    assert not fixed, f"these now follow the convention: remove them from {GAPS_FILE.name}: {fixed}"
    unknown = sorted(listed - gaps.keys())
    assert not unknown, f"{GAPS_FILE.name} lists names that are not checked public names: {unknown}"


def _doctest_globals(obj: Any) -> dict[str, Any]:
    import numpy as np

    from fusegrad import nn

    module = inspect.getmodule(_function_of(obj) or obj)
    return {**getattr(module, "__dict__", {}), "Tensor": Tensor, "dtypes": dtypes, "Device": Device, "nn": nn,
            "TinyJit": TinyJit, "np": np}  # fmt: skip


def _examples() -> list[tuple[str, Any]]:
    return sorted((name, obj) for name, obj in public_names().items() if ">>>" in (obj.__doc__ or ""))


@pytest.mark.parametrize(("name", "obj"), _examples(), ids=[name for name, _ in _examples()])
def test_docstring_examples_run(name: str, obj: Any) -> None:
    if name.startswith("distributed.") and importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpi4py (the dist extra)")
    test = doctest.DocTestParser().get_doctest(inspect.cleandoc(obj.__doc__), _doctest_globals(obj), name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    output: list[str] = []
    runner.run(test, out=output.append)
    assert runner.failures == 0, "".join(output)
