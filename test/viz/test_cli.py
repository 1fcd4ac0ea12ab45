"""Tests for fusegrad/viz/cli.py: the terminal view of saved traces (text and --json)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fusegrad.helpers import Context
from fusegrad.viz.cli import graph_text, main
from fusegrad.viz.trace_file import save_profile, save_rewrites

if TYPE_CHECKING:  # the fixture's type; conftest is not importable in importlib mode
    from conftest import RealTrace

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def files(real_trace: RealTrace, tmp_path: Path) -> list[str]:
    rewrites = save_rewrites(real_trace.trace, tmp_path / "r.json.gz")
    profile = save_profile(real_trace.events, tmp_path / "p.json")
    return ["--rewrites", str(rewrites), "--profile", str(profile)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, "--json", *argv)
    assert code == 0, err
    return json.loads(out)


class TestRewrites:
    def test_groups(self, files: list[str], real_trace: RealTrace, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = run(capsys, *files, "groups")
        assert code == 0
        first = real_trace.trace.keys[0].display_name
        assert out.splitlines()[0] == f"[0] {first}"
        assert "matches" in out
        assert "(kernel)" in out
        groups = run_json(capsys, *files, "groups")
        assert [g["name"] for g in groups] == [k.display_name for k in real_trace.trace.keys]

    def test_graph_as_indented_text(
        self, files: list[str], real_trace: RealTrace, capsys: pytest.CaptureFixture[str]
    ) -> None:
        rewrites = real_trace.trace.rewrites
        ctx, idx, step = next((c, i, s) for c, steps in enumerate(rewrites) for i, s in enumerate(steps) if s.matches)
        code, out, _ = run(capsys, *files, "graph", str(ctx), str(idx))
        assert code == 0
        lines = out.splitlines()
        assert lines[0].startswith("%0 ")
        assert lines[1].startswith("  ")
        code, after, _ = run(capsys, *files, "graph", str(ctx), str(idx), "--match", str(len(step.matches)))
        assert code == 0
        assert after != out
        graph = run_json(capsys, *files, "graph", str(ctx), str(idx))
        assert len([line for line in lines if "^%" not in line]) == len(graph)

    def test_graph_text_shares_nodes(self) -> None:
        graph = {1: {"label": "x", "src": []}, 2: {"label": "MUL\nint", "src": [(0, 1), (1, 1)]}}
        assert graph_text(graph) == ["%0 MUL | int", "  0: %1 x", "  1: ^%1"]
        assert graph_text(graph, max_lines=1) == ["%0 MUL | int", "... cut at 1 lines (--max-lines)"]

    def test_source(self, files: list[str], real_trace: RealTrace, capsys: pytest.CaptureFixture[str]) -> None:
        ctx, key = next((i, k) for i, k in enumerate(real_trace.trace.keys) if k.ret is not None)
        code, out, _ = run(capsys, *files, "source", str(ctx))
        assert code == 0
        assert out.strip() == key.ret.src.strip()

    def test_errors_are_one_line(self, files: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run(capsys, *files, "graph", "999", "0")
        assert code == 2
        assert err.startswith("viz: ")
        assert err.count("\n") == 1
        code, _, err = run(capsys, "--rewrites", str(tmp_path / "missing.json"), "groups")
        assert code == 2
        assert "missing.json: can't read" in err
        assert err.count("\n") == 1


class TestProfile:
    def test_top_kernels(self, files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        rows = run_json(capsys, *files, "kernels", "--top", "5")
        assert rows
        assert len(rows) <= 5
        assert [r["total_us"] for r in rows] == sorted((r["total_us"] for r in rows), reverse=True)
        assert all(r["device"] == "CPU" and r["runs"] >= 1 for r in rows)  # host work (compiles) is not a kernel
        code, out, _ = run(capsys, *files, "kernels")
        assert code == 0
        assert "GFLOPS" in out.splitlines()[0]

    def test_markers_and_events_between_them(self, files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        markers = run_json(capsys, *files, "markers")
        assert [m["name"] for m in markers] == ["start", "middle", "end"]
        first = run_json(capsys, *files, "between", "start", "middle")
        second = run_json(capsys, *files, "between", "1", "end")
        assert any(e["name"].startswith("r_7_3") or "r_7_3" in e["name"] for e in first)
        assert not any(e["name"] == "r_7_3" for e in second)
        assert all(e["start_us"] >= 0 for e in first + second)
        code, _, err = run(capsys, *files, "between", "start", "no-such-marker")
        assert code == 2
        assert "no marker named 'no-such-marker'" in err


def test_defaults_to_the_files_viz_saved(
    real_trace: RealTrace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Context(PROFILEPATH=str(tmp_path / "fusegrad_profile.json")):
        code, _, err = run(capsys, "groups")
        assert code == 2
        assert "no saved traces" in err
        save_profile(real_trace.events, tmp_path / "fusegrad_profile.json")
        save_rewrites(real_trace.trace, tmp_path / "fusegrad_profile.rewrites.json.gz")
        code, out, _ = run(capsys, "groups")
        assert code == 0
        assert out.startswith("[0] ")


def test_runs_as_a_module_without_a_browser(files: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "fusegrad.viz.cli", *files, "kernels"], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "total us" in proc.stdout


def test_a_reader_that_stops_early_ends_it_quietly(files: list[str]) -> None:
    """`python -m fusegrad.viz.cli ... | head`: the pipe closes before the output is written."""
    proc = subprocess.Popen([sys.executable, "-m", "fusegrad.viz.cli", *files, "--json", "groups"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={"PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # like `head` exiting: the writes that follow get EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert err == ""


@pytest.mark.parametrize("argv", [["source", "-1"], ["source", "99999"], ["graph", "-53", "0"], ["graph", "0", "-1"]])
def test_out_of_range_numbers_are_refused(
    files: list[str], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *files, *argv)
    assert code == 2
    assert out == ""
    assert re.fullmatch(r"viz: no (group|step) -?\d+.*: .*numbered 0 to \d+\n", err), err


def test_match_out_of_range_says_which_exist(files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *files, "graph", "0", "0", "--match", "-1")
    assert code == 2
    assert "--match goes from 0 (the input graph) to" in err
