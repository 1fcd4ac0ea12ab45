"""MkDocs hooks (mkdocs.yml `hooks:`): generate the environment flags page from fusegrad/helpers.py and place the
VIZ screenshots that test/viz/test_browser.py saves in test/artifacts/, so neither can drift from the code.

The flags page is built from the declarations themselves (`NAME = ContextVar("NAME", default)  # effect`), the one
place STYLE.md allows a flag to be declared. `python tools/docs_hooks.py` prints the page, for reading without MkDocs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "fusegrad" / "helpers.py"
DESELECTED = ROOT / "tools" / "peer_deselect.txt"
# <!-- deliberate-differences --> in a page becomes the list in tools/peer_deselect.txt (what tools/peer.sh deselects)
DIFFERENCES_MARK = "<!-- deliberate-differences -->"
ARTIFACTS = ROOT / "test" / "artifacts"
FLAGS_PAGE = "flags.md"
SCREENSHOT_DIR = "img/viz"
# <!-- screenshot: NAME.png | caption --> in a page becomes the image when the browser tests have saved it
SCREENSHOT_MARK = re.compile(r"<!--\s*screenshot:\s*(?P<name>[\w.-]+\.png)\s*\|\s*(?P<caption>[^>]*?)\s*-->")


def _flag_declaration(node: ast.stmt) -> tuple[str, str, str] | None:
    """(flag name, how it is read, default source) for `X = ContextVar("X", d)`, `X = _LazyDefault("X", lambda: d)`
    (a default computed at the first read) or `X = getenv("X", d) ...`."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        return None
    for call in ast.walk(node.value):
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or not call.args:
            continue
        name = call.args[0]
        if call.func.id in ("ContextVar", "_LazyDefault", "getenv") and isinstance(name, ast.Constant):
            given = call.args[1] if len(call.args) > 1 else ast.Constant(0)
            default = ast.unparse(given.body if isinstance(given, ast.Lambda) else given)
            return str(name.value), "getenv" if call.func.id == "getenv" else "ContextVar", default
    return None


def read_flags(source: str) -> list[tuple[str, str, str, str]]:
    """Every module-level flag in helpers.py as (name, kind, default, effect); effect is the trailing comment."""
    lines = source.splitlines()
    flags = []
    for node in ast.parse(source).body:
        if (declared := _flag_declaration(node)) is None:
            continue
        name, reader, default = declared
        end_line = lines[(node.end_lineno or node.lineno) - 1]
        effect = end_line.split("#", 1)[1].strip() if "#" in end_line else ""
        kind = "ContextVar" if reader == "ContextVar" else "read once"
        flags.append((name, kind, default, effect))
    return flags


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def flags_page() -> str:
    """The environment flags page (markdown), one table row per flag declared in fusegrad/helpers.py."""
    rows = [
        f"| `{name}` | `{_cell(default)}` | {_cell(effect)} |"
        for name, kind, default, effect in read_flags(HELPERS.read_text())
        if kind == "ContextVar"
    ]
    others = [f"`{name}`" for name, kind, _, _ in read_flags(HELPERS.read_text()) if kind != "ContextVar"]
    return "\n".join(
        [
            "# Environment flags",
            "",
            "This page is generated from the declarations in `fusegrad/helpers.py` each time the site is built",
            "(`tools/docs_hooks.py`), so it lists exactly the flags the code reads. Set a flag in the environment",
            "(`DEBUG=2 python train.py`) or scope it in code with `Context`:",
            "",
            "```python",
            "from fusegrad import Context",
            "from fusegrad.helpers import DEBUG",
            "",
            "with Context(DEBUG=0):",
            "    print(DEBUG.value)",
            "```",
            "",
            "```output",
            "0",
            "```",
            "",
            "| Flag | Default | Effect |",
            "| --- | --- | --- |",
            *rows,
            "",
            f"Read once at import, not scoped by `Context`: {', '.join(others)}." if others else "",
            "",
        ]
    )


def on_files(files: Any, config: Any) -> Any:
    """Add the generated flags page and whichever VIZ screenshots the browser tests have saved."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, FLAGS_PAGE, content=flags_page()))
    for png in sorted(ARTIFACTS.glob("viz_*.png")) if ARTIFACTS.is_dir() else []:
        files.append(File.generated(config, f"{SCREENSHOT_DIR}/{png.name}", abs_src_path=str(png)))
    return files


def screenshot_markdown(markdown: str, page_depth: int) -> str:
    """Replace each screenshot mark by its image, or by a note when test/viz/test_browser.py has not saved it yet."""

    def replace(match: re.Match[str]) -> str:
        name, caption = match["name"], match["caption"]
        if (ARTIFACTS / name).is_file():
            return f"![{caption}]({'../' * page_depth}{SCREENSHOT_DIR}/{name})"
        return (
            f"*({caption}: this screenshot is added when `pytest test/viz/test_browser.py` has run before the build.)*"
        )

    return SCREENSHOT_MARK.sub(replace, markdown)


def differences_markdown(text: str) -> str:
    """tools/peer_deselect.txt (`node id | why` a line, `#` comments) as a markdown list."""
    items = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            node, _, why = line.partition(" | ")
            items.append(f"- `{node.strip()}`: {why.strip()}")
    return "\n".join(items)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Resolve screenshot marks relative to the page's folder; fill in the deliberate differences."""
    if DIFFERENCES_MARK in markdown:
        markdown = markdown.replace(DIFFERENCES_MARK, differences_markdown(DESELECTED.read_text()))
    return screenshot_markdown(markdown, page.file.src_uri.count("/"))


if __name__ == "__main__":
    print(flags_page())
