"""Tests for tools/docs_hooks.py: the generated flags page lists exactly the declared flags, screenshot marks."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

import fusegrad  # noqa: F401  # every module imported: a flag declared anywhere is in ContextVar._cache
from fusegrad.helpers import ContextVar
from test.shared import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    return load_script(ROOT / "tools" / "docs_hooks.py", "docs_hooks")


def test_flags_page_lists_every_declared_flag(hooks: ModuleType) -> None:
    on_page = {name for name, kind, _, _ in hooks.read_flags(hooks.HELPERS.read_text()) if kind == "ContextVar"}
    assert on_page == set(ContextVar._cache), f"differs: {sorted(on_page ^ set(ContextVar._cache))}"
    page = hooks.flags_page()
    assert "| `DEBUG` | `0` |" in page
    assert "kernel counts" in page  # DEBUG's effect, from its declaration's comment


def test_read_flags_takes_default_and_comment(hooks: ModuleType) -> None:
    source = 'X = ContextVar("X", 3)  # 1: do x\nY = getenv("Y", "")\nZ = 5  # not a flag\n'
    assert hooks.read_flags(source) == [("X", "ContextVar", "3", "1: do x"), ("Y", "read once", "''", "")]


def test_screenshot_mark_becomes_image_or_note(
    hooks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hooks, "ARTIFACTS", tmp_path)
    mark = "<!-- screenshot: viz_a.png | The view -->"
    assert "has run before the build" in hooks.screenshot_markdown(mark, 0)
    (tmp_path / "viz_a.png").write_bytes(b"png")
    assert hooks.screenshot_markdown(mark, 1) == "![The view](../img/viz/viz_a.png)"


def test_deliberate_differences_come_from_the_deselect_list(hooks: ModuleType) -> None:
    text = "# comment\n\ntest/test_a.py::T::test_x | 0.14 does y\n"
    assert hooks.differences_markdown(text) == "- `test/test_a.py::T::test_x`: 0.14 does y"
    listed = hooks.differences_markdown(hooks.DESELECTED.read_text()).splitlines()
    assert listed, "tools/peer_deselect.txt lists no test"
    assert all(line.startswith("- `test/test_") and "`: " in line for line in listed)
    assert hooks.DIFFERENCES_MARK in (ROOT / "docs" / "porting.md").read_text()
