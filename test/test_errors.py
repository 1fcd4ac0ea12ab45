"""Tests for fusegrad/errors.py: every exception class of the package lives there, is both the house type and the
reference's type, and stays importable from the module that raised it before (code written against those paths)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fusegrad import errors
from fusegrad.engine import jit
from fusegrad.mixin import movement, random
from fusegrad.uop import symbolic_shape

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("cls", "bases"),
    [
        (errors.RearrangeError, (ValueError, AssertionError)),
        (errors.SampleError, (ValueError, AssertionError)),
        (errors.SymbolicError, (ValueError, AssertionError)),
        (errors.JitError, (RuntimeError, AssertionError)),
    ],
)
def test_both_types(cls: type[Exception], bases: tuple[type[Exception], ...]) -> None:
    assert all(issubclass(cls, base) for base in bases)


def test_old_homes_re_export_the_same_classes() -> None:
    assert movement.RearrangeError is errors.RearrangeError
    assert random.SampleError is errors.SampleError
    assert symbolic_shape.SymbolicError is errors.SymbolicError
    assert jit.JitError is errors.JitError


def test_user_facing_error_classes_are_defined_in_errors_py() -> None:
    """A public class whose name ends in Error is defined in fusegrad/errors.py, not beside the code that raises it;
    the listed ones are not about bad input to Tensor ops and stay with the machinery they describe."""
    internal = {
        "CompileError",  # device.py: a compiler's failure, carrying the kernel source and the compiler's stderr
        "FetchError",  # helpers.py: a download that failed, naming the URL
        "RewriteLoopError",  # uop/rewrite.py: a rule table that never settles (a bug in the rules)
        "PortInUseError",  # viz/server.py: the VIZ server's port is taken
        "TraceFileError",  # viz/trace_file.py: a saved trace that cannot be read
    }
    elsewhere = []
    for path in sorted((ROOT / "fusegrad").rglob("*.py")):
        if path.name == "errors.py" or "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):  # private: a module's own signal
                continue
            if node.name.endswith("Error") and node.name not in internal:
                elsewhere.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not elsewhere, elsewhere
