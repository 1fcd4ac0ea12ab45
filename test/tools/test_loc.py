"""Tests for tools/loc.py: what counts as a code line, groups and budgets, and --diff against a git ref."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path, PurePosixPath

import pytest

from test.shared import ROOT, load_script

LOC_PATH = ROOT / "tools" / "loc.py"
loc = load_script(LOC_PATH, "fusegrad_tools_loc")  # tools/ is not a package: imported by path


def code(source: str) -> int:
    return int(loc.count_lines(textwrap.dedent(source)).code)


def test_blank_and_comment_lines_are_not_code() -> None:
    assert code("x = 1\n\n# a comment\n   \ny = 2  # trailing comment\n") == 2


def test_docstrings_are_not_code() -> None:
    source = '''\
        """Module docstring
        over two lines."""


        class A:
            """Class docstring."""

            def f(self) -> int:
                """Function
                docstring
                """
                return 1


        async def g() -> None:
            """Async function docstring."""
        '''
    assert code(source) == 4  # class A, def f, return 1, async def g


def test_strings_that_are_not_docstrings_count_in_full() -> None:
    source = '''\
        def f() -> str:
            x = 1
            """a string after the first statement is not a docstring"""
            template = """
        int main() {
          return 0;
        }
        """
            return template
        '''
    assert code(source) == 9  # every line but none: the bare string is not the first statement


def test_docstring_followed_by_code_on_its_line_counts_the_code() -> None:
    assert code('def f(): "doc"; return 1\n') == 1
    assert code('"""doc"""; x = 1\n') == 1


def test_continuation_lines_count() -> None:
    source = """\
        total = (
            1  # one
            + 2
        )
        y = 3 + \\
            4
        """
    assert code(source) == 6


def test_non_ascii_before_docstring_column() -> None:
    # ast columns are bytes, tokenize columns are characters: the docstring must still be recognised
    assert code('def é(): """doc"""\n') == 1


def test_comment_lines_are_counted_separately() -> None:
    count = loc.count_lines("x = 1  # why\n# because\n\ny = 2\n")
    assert (count.code, count.comment) == (2, 2)


def test_syntax_error_still_counts_tokens() -> None:
    assert code('"""not a docstring once ast fails"""\nx = = 1\n') == 2


def test_group_of_uses_first_folder_or_named_top_level_group() -> None:
    budget = loc.Budget(limits={"core": 10}, top_level_groups={"tensor.py": "core"})
    assert loc.group_of(PurePosixPath("uop/ops.py"), budget) == "uop"
    assert loc.group_of(PurePosixPath("runtime/support/elf.py"), budget) == "runtime"
    assert loc.group_of(PurePosixPath("tensor.py"), budget) == "core"
    assert loc.group_of(PurePosixPath("diskcache.py"), budget) == "diskcache"


def test_a_path_named_in_groups_is_its_own_group() -> None:
    paths = {"nn/onnx": "onnx", "nn/datasets.py": "datasets", "nn/onnx/proto.py": "proto"}
    budget = loc.Budget(limits={}, top_level_groups={}, path_groups=paths)
    assert loc.group_of(PurePosixPath("nn/onnx/runner.py"), budget) == "onnx"
    assert loc.group_of(PurePosixPath("nn/onnx/ops/math.py"), budget) == "onnx"
    assert loc.group_of(PurePosixPath("nn/onnx/proto.py"), budget) == "proto"  # the deepest name wins
    assert loc.group_of(PurePosixPath("nn/datasets.py"), budget) == "datasets"
    assert loc.group_of(PurePosixPath("nn/optim.py"), budget) == "nn"
    assert loc.group_of(PurePosixPath("nn/onnxlike.py"), budget) == "nn"


def test_the_budget_file_names_paths_inside_subpackages(tmp_path: Path) -> None:
    path = tmp_path / "budget.toml"
    path.write_text('[budget]\nonnx = 5\n[groups]\ncore = ["tensor.py"]\nonnx = ["nn/onnx/"]\n')
    budget = loc.load_budget(path)
    assert budget.top_level_groups == {"tensor.py": "core"}
    assert budget.path_groups == {"nn/onnx": "onnx"}


def test_repository_budget_file_parses() -> None:
    budget = loc.load_budget(loc.DEFAULT_BUDGET_FILE)
    assert budget.limits["uop"] == 2500
    assert budget.limits["core"] == 3500
    assert budget.top_level_groups["gradient.py"] == "core"


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


def run_loc(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(LOC_PATH), *map(str, args)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


def test_report_warns_past_a_budget_and_exits_zero(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    write_package(package, {"tensor.py": "a = 1\nb = 2\nc = 3\n", "uop/ops.py": '"""doc"""\nx = 1\n'})
    budget = tmp_path / "budget.toml"
    budget.write_text('[budget]\ncore = 2\nuop = 5\n[groups]\ncore = ["tensor.py"]\n')
    result = run_loc(package, "--budget", budget, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "WARNING: core over budget: 3 code lines > 2 (+1)" in result.stdout
    assert "WARNING: uop" not in result.stdout
    assert "     4          total (2 modules" in result.stdout


def git(cwd: Path, *args: str) -> None:
    """Run git with a fixed identity and no user or system config, so the test doesn't depend on the machine."""
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    environment = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    subprocess.run(["git", *identity, *args], cwd=cwd, env=environment, check=True, capture_output=True)


def test_diff_against_a_git_ref(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    write_package(package, {"a.py": "x = 1\n", "sub/b.py": "y = 1\ny = 2\n"})
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "base")
    write_package(package, {"a.py": "x = 1\n# comment only\nz = 2\nw = 3\n", "c.py": "q = 1\n"})
    (package / "sub" / "b.py").unlink()
    result = run_loc(package, "--diff", "HEAD", "--budget", tmp_path / "none.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    diff = result.stdout.split("(against HEAD)")[1]
    assert "     +2      1      3  a.py" in diff
    assert "     -2      2      0  sub/b.py" in diff
    assert "     +1      0      1  c.py" in diff
    assert "     +1      3      4  total" in diff


def test_diff_against_an_unknown_ref_fails(tmp_path: Path) -> None:
    write_package(tmp_path / "pkg", {"a.py": "x = 1\n"})
    git(tmp_path, "init", "-q")
    result = run_loc(tmp_path / "pkg", "--diff", "no-such-ref", cwd=tmp_path)
    assert result.returncode == 1
    assert "loc: git rev-parse" in result.stderr


@pytest.mark.parametrize("root", ["missing"])
def test_missing_root_is_a_usage_error(tmp_path: Path, root: str) -> None:
    result = run_loc(tmp_path / root, cwd=tmp_path)
    assert result.returncode == 2
    assert "not a folder" in result.stderr
