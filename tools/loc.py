"""Line budget report: code lines per module and per group of the fusegrad package (STYLE.md, "LOC budget").

A code line is a physical line that holds a token other than a comment; blank lines, comment-only lines and docstrings
(the string statement that opens a module, class or function) are not counted. Usage: python tools/loc.py [root]
[--diff REF]. Budgets are soft: a group past its budget prints a WARNING, and the exit status stays 0.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import subprocess
import sys
import tokenize
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path, PurePosixPath

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BUDGET_FILE = REPO_ROOT / "loc_budget.toml"
# tokens that never make a line count as code
NON_CODE_TOKENS = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}
Position = tuple[int, int]


@dataclass(frozen=True, slots=True)
class LineCount:
    """Counts for one module: lines holding code, and lines holding a comment (with or without code)."""

    code: int
    comment: int


@dataclass(frozen=True, slots=True)
class Budget:
    """Soft budgets per group, which top-level modules form a named group, and which paths inside a subpackage (a
    folder or a module) are a group of their own: a feature with its own budget, e.g. nn/onnx."""

    limits: dict[str, int]
    top_level_groups: dict[str, str]  # module file name -> group name
    path_groups: dict[str, str] = field(default_factory=dict)  # "nn/onnx" or "nn/datasets.py" -> group name


def docstring_spans(source: str) -> dict[Position, Position]:
    """Map the start of every module, class and function docstring in `source` to its end (tokenize positions)."""
    lines = source.splitlines()

    def position(line: int, byte_col: int) -> Position:
        # ast columns count UTF-8 bytes, tokenize columns count characters
        return (line, len(lines[line - 1].encode()[:byte_col].decode(errors="replace")))

    spans: dict[Position, Position] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) or not node.body:
            continue
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            end = position(first.end_lineno or first.lineno, first.end_col_offset or 0)
            spans[position(first.lineno, first.col_offset)] = end
    return spans


def count_lines(source: str) -> LineCount:
    """Count code and comment lines of Python `source`; a multi-line string that is not a docstring counts in full."""
    try:
        spans = docstring_spans(source)
    except SyntaxError:
        spans = {}  # still countable by tokens; docstrings then count as code
    code_lines: set[int] = set()
    comment_lines: set[int] = set()
    skip_until: Position = (0, 0)  # end of the docstring being skipped
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comment_lines.add(token.start[0])
        skip_until = spans.get(token.start, skip_until)
        if token.type in NON_CODE_TOKENS or token.end <= skip_until:
            continue
        code_lines.update(range(token.start[0], token.end[0] + 1))
    return LineCount(code=len(code_lines), comment=len(comment_lines))


def group_of(module: PurePosixPath, budget: Budget) -> str:
    """A module whose path (or a folder above it) is named in [groups] belongs to that group, the deepest name
    first; any other module in a subpackage to its first folder; a top-level module to its named group, else to
    itself."""
    for depth in range(len(module.parts), 1, -1):
        if (group := budget.path_groups.get("/".join(module.parts[:depth]))) is not None:
            return group
    if len(module.parts) > 1:
        return module.parts[0]
    return budget.top_level_groups.get(module.name, module.stem)


def load_budget(path: Path) -> Budget:
    """Read loc_budget.toml: [budget] group = code lines, [groups] group = [top-level module files, or paths inside a
    subpackage]."""
    if not path.is_file():
        return Budget(limits={}, top_level_groups={})
    data = tomllib.loads(path.read_text())
    members = [(name, group) for group, names in data.get("groups", {}).items() for name in names]
    top_level = {name: group for name, group in members if "/" not in name}
    paths = {name.strip("/"): group for name, group in members if "/" in name}
    return Budget(limits=dict(data.get("budget", {})), top_level_groups=top_level, path_groups=paths)


def count_tree(root: Path) -> dict[PurePosixPath, LineCount]:
    """Count every .py file under `root`, keyed by its path relative to `root`."""
    counts: dict[PurePosixPath, LineCount] = {}
    for path in sorted(root.rglob("*.py")):
        relative = PurePosixPath(path.relative_to(root).as_posix())
        counts[relative] = count_source(relative, path.read_text(encoding="utf-8"))
    return counts


def count_source(module: PurePosixPath, source: str) -> LineCount:
    """count_lines, reporting a file that cannot be tokenized instead of failing the whole report."""
    try:
        return count_lines(source)
    except (tokenize.TokenError, SyntaxError) as error:
        print(f"loc: cannot tokenize {module}: {error}; counted as 0", file=sys.stderr)
        return LineCount(code=0, comment=0)


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` and return its stdout; a failure ends the report with git's message."""
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"loc: git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def count_tree_at(ref: str, root: Path) -> dict[PurePosixPath, LineCount]:
    """Count every .py file under `root` as it was at git `ref` (tokenizing the blobs, no checkout)."""
    top = Path(git(root, "rev-parse", "--show-toplevel").strip()).resolve()
    prefix = root.resolve().relative_to(top).as_posix()
    git(top, "rev-parse", "--verify", f"{ref}^{{commit}}")
    counts: dict[PurePosixPath, LineCount] = {}
    for name in git(top, "ls-tree", "-r", "--name-only", ref, "--", prefix).splitlines():
        if name.endswith(".py"):
            relative = PurePosixPath(name).relative_to(prefix)
            counts[relative] = count_source(relative, git(top, "show", f"{ref}:{name}"))
    return counts


def sum_groups(counts: dict[PurePosixPath, LineCount], budget: Budget) -> dict[str, int]:
    """Total code lines per group; every budgeted group appears, even when it has no module yet."""
    totals: dict[str, int] = defaultdict(int, dict.fromkeys(budget.limits, 0))
    for module, count in counts.items():
        totals[group_of(module, budget)] += count.code
    return dict(totals)


def print_report(root: Path, counts: dict[PurePosixPath, LineCount], budget: Budget) -> None:
    """Print modules in layout order, groups by size with their budgets, the total, and a WARNING per overrun."""
    print(f"{'code':>6} {'comment':>7}  module (under {os.path.relpath(root)})")
    for module, count in sorted(counts.items()):
        print(f"{count.code:6d} {count.comment:7d}  {module}")
    groups = sum_groups(counts, budget)
    print(f"\n{'code':>6} {'budget':>7}  group")
    for group, code in sorted(sorted(groups.items()), key=itemgetter(1), reverse=True):  # stable: ties by name
        limit = budget.limits.get(group)
        print(f"{code:6d} {limit if limit is not None else '-':>7}  {group}")
    total_code = sum(count.code for count in counts.values())
    total_comment = sum(count.comment for count in counts.values())
    print(f"{total_code:6d} {'':7}  total ({len(counts)} modules, {total_comment} comment lines)")
    for group, code in sorted(groups.items()):
        limit = budget.limits.get(group)
        if limit is not None and code > limit:
            print(f"WARNING: {group} over budget: {code} code lines > {limit} (+{code - limit}); say why in the PR")


def print_diff(ref: str, before: dict[PurePosixPath, LineCount], after: dict[PurePosixPath, LineCount]) -> None:
    """Print the change in code lines per module that changed, and in total, from `ref` to the working tree."""
    print(f"\n{'change':>7} {'before':>6} {'after':>6}  module (against {ref})")
    for module in sorted(before.keys() | after.keys()):
        old = before[module].code if module in before else 0
        new = after[module].code if module in after else 0
        if old != new:
            print(f"{new - old:+7d} {old:6d} {new:6d}  {module}")
    old_total = sum(count.code for count in before.values())
    new_total = sum(count.code for count in after.values())
    print(f"{new_total - old_total:+7d} {old_total:6d} {new_total:6d}  total")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", type=Path, default=REPO_ROOT / "fusegrad", help="package folder to count")
    parser.add_argument("--diff", metavar="REF", help="also print the change in code lines against this git ref")
    parser.add_argument("--budget", type=Path, default=DEFAULT_BUDGET_FILE, help="budget file (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"root: not a folder: got {args.root}")
    budget = load_budget(args.budget)
    counts = count_tree(args.root)
    print_report(args.root, counts, budget)
    if args.diff is not None:
        print_diff(args.diff, count_tree_at(args.diff, args.root), counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
