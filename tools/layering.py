"""The package's layering, checked: which layer each fusegrad module is in, and every import (function-local and
TYPE_CHECKING ones too) that reaches from a lower layer into a higher one. docs/ARCHITECTURE.md explains the layers.

Usage: python tools/layering.py [root]   prints each upward import as `module -> target (layer -> layer) line N`
and exits 1 when there is one. test/tools/test_layering.py runs the same check with its allow-list of today's ones.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# bottom to top: a module may import modules of its own layer and of the layers before it. Prefixes are module
# names; the longest prefix that matches a module decides its layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("fusegrad.helpers", "fusegrad.dtype", "fusegrad.errors", "fusegrad.diskcache")),
    ("device", ("fusegrad.device",)),
    ("uop", ("fusegrad.uop", "fusegrad.gradient")),
    ("renderer", ("fusegrad.renderer",)),
    ("codegen", ("fusegrad.codegen",)),
    ("schedule", ("fusegrad.schedule",)),
    ("runtime", ("fusegrad.runtime",)),
    ("engine", ("fusegrad.engine",)),
    ("graphs", ("fusegrad.runtime.graph",)),  # device graphs extend engine.graph's GraphRunner
    ("tensor", ("fusegrad.tensor", "fusegrad.mixin")),
    ("nn", ("fusegrad.nn", "fusegrad.distributed", "fusegrad.llm")),
    ("app", ("fusegrad", "fusegrad.examples")),  # the package facade, runnable examples, and every __main__
)
# viz stands beside the stack: it reads traces of the layers below it, and only programs (app) import it
VIZ = ("viz", ("fusegrad.viz",))
VIZ_READS = frozenset({"base", "device", "uop", "renderer", "codegen"})
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement's edge: `module` imports `target` (both dotted module names) at `line`."""

    module: str
    target: str
    line: int


def layer_of(module: str) -> str:
    """The layer a fusegrad module belongs to: app for a `__main__` (a program), else the longest matching prefix."""
    if module.endswith(".__main__"):
        return "app"
    best, best_len = "app", 0
    for name, prefixes in (*LAYERS, VIZ):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    return best


def module_name(path: Path, root: Path) -> str:
    """fusegrad/uop/ops.py -> fusegrad.uop.ops; a package's __init__.py is the package itself."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, is_package: bool, known: frozenset[str]) -> list[Import]:
    """Every fusegrad import in `source` anywhere in the file (module level, in functions, under TYPE_CHECKING).

    `from a.b import c` names the module a.b.c when that is a module in `known`, else a.b; relative imports resolve
    against the module's package."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.append(Import(module, target if target in known else base, node.lineno))
    ours = [i for i in found if i.target == "fusegrad" or i.target.startswith("fusegrad.")]
    return list(dict.fromkeys(ours))  # `from m import a, b` is one edge


def is_upward(imp: Import) -> bool:
    """Whether the import reaches up: into a higher layer, into viz from below the programs, or from viz beyond the
    layers it reads."""
    src, dst = layer_of(imp.module), layer_of(imp.target)
    if src == dst:
        return False
    if dst == "viz":
        return src != "app"
    if src == "viz":
        return dst not in VIZ_READS
    return RANK[dst] > RANK[src]


def scan(root: Path = REPO_ROOT) -> list[Import]:
    """Every fusegrad import of every module under root/fusegrad, in file order."""
    paths = sorted(p for p in (root / "fusegrad").rglob("*.py") if "__pycache__" not in p.parts)
    known = frozenset(module_name(p, root) for p in paths)
    found: list[Import] = []
    for path in paths:
        name = module_name(path, root)
        found += imports_of(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known)
    return found


def upward_imports(root: Path = REPO_ROOT) -> list[Import]:
    return [imp for imp in scan(root) if is_upward(imp)]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else REPO_ROOT
    found = upward_imports(root)
    for imp in found:
        print(f"{imp.module} -> {imp.target} ({layer_of(imp.module)} -> {layer_of(imp.target)}) line {imp.line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
