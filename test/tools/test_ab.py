"""Tests for tools/ab.py: its command line, revision export, and one real alternating comparison."""

import subprocess
import sys
from pathlib import Path

import pytest

from test.shared import ROOT, load_script

ab = load_script(ROOT / "tools" / "ab.py", "fusegrad_tools_ab")  # tools/ is not a package: imported by path


def test_help_names_every_measure() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "ab.py"), "--help"], capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    for name in ab.MEASURES:
        assert name in proc.stdout


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit):
        ab.parse_args(["--rounds", "0", "tiny"])
    with pytest.raises(SystemExit):
        ab.parse_args(["no-such-measure"])


def test_an_unknown_revision_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no revision 'no-such-rev-x'"):
        ab.export("no-such-rev-x", tmp_path)


def test_one_round_times_both_sides(tmp_path: Path) -> None:
    base = ab.export("HEAD", tmp_path)
    assert (base / "fusegrad" / "__init__.py").exists()
    found = ab.compare(base, ROOT, ["tiny-cpu"], rounds=1)
    (base_figures, work_figures) = found["tiny-cpu"]
    assert len(base_figures) == len(work_figures) == 1
    assert all(0 < f < 1e6 for f in (*base_figures, *work_figures))
    lines = ab.table(found, "HEAD").splitlines()
    assert lines[2].startswith("| tiny-cpu (µs, CPU) |")
    assert len(lines[2].split("|")) == 7


def test_a_failing_measure_names_the_tree(tmp_path: Path) -> None:
    (tmp_path / "fusegrad").mkdir()
    (tmp_path / "fusegrad" / "__init__.py").write_text("raise ImportError('a broken tree')\n")
    with pytest.raises(RuntimeError, match="a broken tree"):
        ab.run_one(tmp_path, "tiny")  # the tree's own fusegrad is imported, not the installed one


def test_each_side_imports_its_own_tree(tmp_path: Path) -> None:
    base = ab.export("HEAD", tmp_path)
    ab.MEASURES["where"] = ("path", "import fusegrad\nprint(len(fusegrad.__file__))")
    try:
        assert ab.run_one(base, "where") == len(str(base / "fusegrad" / "__init__.py"))
        assert ab.run_one(ROOT, "where") == len(str(ROOT / "fusegrad" / "__init__.py"))
    finally:
        del ab.MEASURES["where"]
