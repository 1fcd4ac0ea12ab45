"""Tests for tools/layering.py: how imports are read (function-local, TYPE_CHECKING, relative), which layer a module
is in, and the package itself: no import reaches up a layer beyond the allow-list below, the allow-list holds no
entry that is no longer needed, and docs/ARCHITECTURE.md names only modules that exist and the layers enforced here."""

from __future__ import annotations

import ast
import re
import textwrap

import pytest

from test.shared import ROOT, load_script

layering = load_script(ROOT / "tools" / "layering.py", "fusegrad_tools_layering")

# Upward imports that exist today, (module, imported module) -> why it is still there. Remove an entry when its
# import goes: test_allow_list_has_no_stale_entries fails until you do. Do not add one without a reason.
ALLOWED: dict[tuple[str, str], str] = {
    # device core reaching up
    ("fusegrad.device", "fusegrad.renderer"):
        "type annotation only (TYPE_CHECKING): Compiled holds a renderer factory; Renderer lives above uop. "
        "Such imports count (docs/ARCHITECTURE.md): every caller of Device[d].renderer is typed through this one",
    ("fusegrad.device", "fusegrad.tensor"):
        "enumerate_devices_str runs one Tensor kernel per device, as the reference's does, and is the reference's "
        "public name in its device module (tinygrad.device.enumerate_devices_str), so it cannot move out",
    ("fusegrad.device", "fusegrad.viz.serve"):
        "arm_viz_at_exit, the one helper through which the first device open (VIZ/PROFILE) and the first traced "
        "rewrite (VIZ) arm the exit hook that saves the trace",
    ("fusegrad.uop.ops", "fusegrad.schedule.multi"):
        "UOp.axis (the reference's property) reads a sharded tensor's axis off the scheduler's placement",
    # between the kernel stages (owned by the codegen/renderer/schedule work)
    ("fusegrad.codegen.search", "fusegrad.engine.realize"):
        "BEAM times candidate kernels on the device through CompiledRunner; passing the runner in from the engine "
        "changes beam_ast(ast, device) and Bench.of(ast, device), which test/codegen/test_search.py calls",
    # runtime and engine reaching up
    ("fusegrad.runtime.ops_cpu", "fusegrad.runtime.graph.cpu"):
        "a device names its graph class (Compiled.graph); imported when the device opens",
    ("fusegrad.runtime.ops_null", "fusegrad.runtime.graph.null"): "as above, for NULL",
    ("fusegrad.engine.jit", "fusegrad.tensor"):
        "TinyJit takes and returns Tensors (the reference's engine/jit.py too); its public path is engine.jit, and "
        "only the facade, nn (llm) and examples import it: a frontend module kept at the reference's path",
}  # fmt: skip


def edges(source: str, module: str = "fusegrad.pkg.mod", is_package: bool = False) -> list[str]:
    known = frozenset({"fusegrad.pkg.sub", "fusegrad.other.mod"})
    return [i.target for i in layering.imports_of(textwrap.dedent(source), module, is_package, known)]


def test_reads_every_kind_of_import() -> None:
    source = """
        import os
        import fusegrad.helpers
        from typing import TYPE_CHECKING
        from fusegrad.dtype import dtypes
        if TYPE_CHECKING:
            from fusegrad.tensor import Tensor
        def f():
            from fusegrad.other import mod
            from . import sub
            from .. import viz
    """
    got = edges(source)
    expected = ["fusegrad.helpers", "fusegrad.dtype", "fusegrad.tensor", "fusegrad.other.mod", "fusegrad.pkg.sub"]
    expected.append("fusegrad")  # `from .. import viz` names the package: viz is not a module it knows
    assert sorted(got) == sorted(expected)


def test_relative_imports_of_a_package_resolve_inside_it() -> None:
    assert edges("from .sub import x", module="fusegrad.pkg", is_package=True) == ["fusegrad.pkg.sub"]
    assert edges("from .sub import x", module="fusegrad.pkg.mod") == ["fusegrad.pkg.sub"]


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("fusegrad.helpers", "base"),
        ("fusegrad.uop.ops", "uop"),
        ("fusegrad.gradient", "uop"),
        ("fusegrad.runtime.ops_cpu", "runtime"),
        ("fusegrad.runtime.graph.cpu", "graphs"),  # the longest prefix wins
        ("fusegrad.nn.onnx.runner", "nn"),
        ("fusegrad.nn.onnx.__main__", "app"),  # a program may import anything
        ("fusegrad", "app"),
        ("fusegrad.viz.serve", "viz"),
    ],
)
def test_layer_of(module: str, layer: str) -> None:
    assert layering.layer_of(module) == layer


def test_what_counts_as_upward() -> None:
    def upward(module: str, target: str) -> bool:
        return bool(layering.is_upward(layering.Import(module, target, 1)))

    assert upward("fusegrad.device", "fusegrad.tensor")
    assert upward("fusegrad.uop.rewrite", "fusegrad.viz.serve")  # nothing below the programs imports viz
    assert upward("fusegrad.viz.serve", "fusegrad.engine.jit")  # viz reads traces, not the engine
    assert not upward("fusegrad.tensor", "fusegrad.engine.realize")
    assert not upward("fusegrad.viz.serve", "fusegrad.uop.ops")
    assert not upward("fusegrad.viz.__main__", "fusegrad.viz.serve")
    assert not upward("fusegrad.schedule.rangeify", "fusegrad.schedule.multi")  # within a layer


def test_no_new_upward_imports() -> None:
    """A lower layer importing a higher one (docs/ARCHITECTURE.md, Layers) fails here unless listed in ALLOWED."""
    new = [
        f"{i.module} -> {i.target} line {i.line}"
        for i in layering.upward_imports(ROOT)
        if (i.module, i.target) not in ALLOWED
    ]
    assert not new, "imports reaching up a layer (move the piece down, or pass it in):\n" + "\n".join(new)


def test_allow_list_has_no_stale_entries() -> None:
    """Every entry is still an upward import (entries of modules not in this checkout are skipped)."""
    found = {(i.module, i.target) for i in layering.upward_imports(ROOT)}
    modules = {i.module for i in layering.scan(ROOT)}
    stale = [pair for pair in ALLOWED if pair not in found and pair[0] in modules]
    assert not stale, f"no longer needed, remove from ALLOWED: {stale}"


def runtime_imports_of_tensor(source: str) -> list[int]:
    """Lines importing fusegrad.tensor outside an `if TYPE_CHECKING:` block (at module level or in a function)."""
    tree = ast.parse(source)
    type_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "fusegrad.tensor" and id(node) not in type_only
    ]


def test_runtime_imports_of_tensor_are_found() -> None:
    source = """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from fusegrad.tensor import Tensor
        def f(x):
            from fusegrad.tensor import Tensor
            return Tensor(x)
    """
    assert runtime_imports_of_tensor(textwrap.dedent(source)) == [6]


def test_mixins_never_import_tensor() -> None:
    """Tensor inherits the mixins, so they build results with `type(self)` / `cls`, not an import of Tensor (issue
    18: such imports made tensor.py and mixin/ depend on each other both ways)."""
    found = {
        path.name: lines
        for path in sorted((ROOT / "fusegrad" / "mixin").glob("*.py"))
        if (lines := runtime_imports_of_tensor(path.read_text(encoding="utf-8")))
    }
    assert not found, f"mixin modules importing fusegrad.tensor at run time (file: lines): {found}"


def test_architecture_doc_names_real_modules_and_the_enforced_layers() -> None:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:fusegrad|test|tools|docs)/[\w/.<>]*)`", text))
    missing = [p for p in paths if "<" not in p and not (ROOT / p).exists()]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"
    assert len(paths) > 20
    rows = re.findall(r"^\| (\w+) \|", text, flags=re.MULTILINE)[1:]  # below the header row
    assert rows == [name for name, _ in layering.LAYERS]
