"""Every ```python and ```console block on every docs page runs, and its output is checked (docs/CONTRIBUTING-docs.md).

A page's python blocks run in order in one fresh interpreter (a later block sees an earlier block's names), in a
temporary working folder, on the default device (CPU here). A block followed by an ```output block must print that
text (doctest's ELLIPSIS: `...` matches anything, and runs of whitespace compare equal). A block preceded by
`<!-- docs-test: gpu -->` needs a GPU and is skipped without one; `<!-- docs-test: file NAME -->` saves the block as
NAME in the working folder instead of running it (for the console blocks to run). Then each ```console block's
`$ command` lines run in bash in the same folder, each checked against the lines under it (ELLIPSIS again). A console
block marked `gpu` is skipped without a GPU, one marked `mpi` without mpi4py and mpiexec (the `dist` extra).
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from test.shared import load_script

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# ```python ... ``` then optionally blank lines and ```output ... ```; an HTML comment just before sets a mark
BLOCK = re.compile(
    r"(?:<!--\s*docs-test:\s*(?P<mark>gpu|file [\w.-]+)\s*-->\s*\n)?"
    r"^```python[^\n]*\n(?P<code>.*?)^```[ \t]*\n"
    r"(?:\s*^```output[^\n]*\n(?P<output>.*?)^```[ \t]*$)?",
    re.DOTALL | re.MULTILINE,
)
CONSOLE = re.compile(
    r"(?:<!--\s*docs-test:\s*(?P<mark>gpu|mpi)\s*-->\s*\n)?^```console[^\n]*\n(?P<body>.*?)^```[ \t]*$",
    re.DOTALL | re.MULTILINE,
)
SEPARATOR = "\n# ---- docs-test block boundary ----\n"
MARKER = "\x1e--docs-test-block--\x1e"


@dataclass(frozen=True)
class Block:
    """One fenced python block of a page: its code, the output it must print (None: unchecked), its mark."""

    code: str
    output: str | None
    mark: str | None


def extract_blocks(markdown: str) -> list[Block]:
    """The page's python blocks, in order, each with the ```output block that follows it (if any)."""
    return [Block(m["code"], m["output"], m["mark"]) for m in BLOCK.finditer(markdown)]


def extract_commands(markdown: str, marks: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """(command, expected output) for every `$ ` line of every ```console block, in order; a marked block only when
    its mark is among `marks` (the machine has what it needs)."""
    commands: list[tuple[str, str]] = []
    for match in CONSOLE.finditer(markdown):
        if match["mark"] is not None and match["mark"] not in marks:
            continue
        for chunk in re.split(r"^\$ ", match["body"], flags=re.MULTILINE)[1:]:
            command, _, expected = chunk.partition("\n")
            commands.append((command, expected))
    return commands


def _generated_pages() -> dict[str, str]:
    """Pages the build generates (tools/docs_hooks.py), checked like the files under docs/."""
    hooks = load_script(ROOT / "tools" / "docs_hooks.py", "docs_hooks")
    return {"flags.md": hooks.flags_page()}


def all_pages() -> dict[str, str]:
    """Every page's markdown by its path under docs/ (KERNEL_IR.md too: a python block there must run as well)."""
    pages = {str(p.relative_to(DOCS)): p.read_text() for p in sorted(DOCS.rglob("*.md"))}
    return pages | _generated_pages()


def has_gpu() -> bool:
    """Whether a GPU device is the default here (GPU examples run only then)."""
    from fusegrad import Device

    return not Device.DEFAULT.startswith(("CPU", "PYTHON", "NULL"))


def has_mpi() -> bool:
    """Whether mpi4py imports and mpiexec is on the examples' PATH (MPI examples run only then)."""
    if importlib.util.find_spec("mpi4py") is None:
        return False
    return shutil.which("mpiexec", path=_environment()["PATH"]) is not None


def available_marks() -> frozenset[str]:
    """The console-block marks this machine can run."""
    return frozenset(mark for mark, present in [("gpu", has_gpu()), ("mpi", has_mpi())] if present)


def _environment() -> dict[str, str]:
    """The examples' environment: this checkout importable, this interpreter's folder first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0", "PATH": path}


def run_page(blocks: list[Block], cwd: Path) -> list[str]:
    """Run the blocks in one interpreter; the text each printed, split at the marker printed between blocks."""
    program = SEPARATOR.join(f"{b.code}\nprint({MARKER!r}, end='')" for b in blocks)
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=cwd, env=_environment(), capture_output=True, text=True, timeout=240
    )
    if result.returncode != 0:
        pytest.fail(f"docs example failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout.split(MARKER)[: len(blocks)]


def run_command(command: str, cwd: Path) -> str:
    """One console command's stdout and stderr together, as a terminal shows them; a failing command fails."""
    result = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=120,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"docs command `{command}` failed (exit {result.returncode}):\n{result.stdout[-4000:]}")
    return result.stdout


def check_output(where: str, expected: str, got: str) -> None:
    """Fail unless `got` matches `expected` (doctest ELLIPSIS and NORMALIZE_WHITESPACE)."""
    if not doctest.OutputChecker().check_output(expected, got, doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE):
        pytest.fail(f"{where} printed\n{got}\nexpected\n{expected}")


PAGES = all_pages()
RUNNABLE = sorted(p for p, text in PAGES.items() if extract_blocks(text) or extract_commands(text))


def test_pages_have_examples() -> None:
    """The harness finds blocks (a regex that matched nothing would make every page pass vacuously)."""
    counted = sum(len(extract_blocks(text)) + len(extract_commands(text)) for text in PAGES.values())
    assert counted >= 30, f"only {counted} examples found under docs/"


def test_extract_pairs_output_with_its_block() -> None:
    text = "```python\nprint(1)\n```\n\n```output\n1\n```\n<!-- docs-test: gpu -->\n```python\nx = 2\n```\n"
    assert extract_blocks(text) == [Block("print(1)\n", "1\n", None), Block("x = 2\n", None, "gpu")]
    console = "```console\n$ echo a\na\n$ true\n```\n<!-- docs-test: mpi -->\n```console\n$ mpiexec -n 2 true\n```\n"
    assert extract_commands(console) == [("echo a", "a\n"), ("true", "")]
    assert extract_commands(console, frozenset({"mpi"}))[-1] == ("mpiexec -n 2 true", "")


def test_a_wrong_output_fails(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="expected"):
        check_output("page", "2\n", run_page([Block("print(1)\n", "2\n", None)], tmp_path)[0])


@pytest.mark.parametrize("page", RUNNABLE)
def test_page_examples(page: str, tmp_path: Path) -> None:
    blocks = [b for b in extract_blocks(PAGES[page]) if b.mark != "gpu" or has_gpu()]
    for block in blocks:
        if block.mark is not None and block.mark.startswith("file "):
            (tmp_path / block.mark.removeprefix("file ")).write_text(block.code)
    runnable = [b for b in blocks if b.mark is None or b.mark == "gpu"]
    printed = run_page(runnable, tmp_path) if runnable else []
    for i, (block, got) in enumerate(zip(runnable, printed, strict=True)):
        if block.output is not None:
            check_output(f"{page}, python block {i + 1}", block.output, got)
    for command, expected in extract_commands(PAGES[page], available_marks()):
        check_output(f"{page}, `$ {command}`", expected, run_command(command, tmp_path))
