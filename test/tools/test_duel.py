"""tools/duel.py: a training step's kernels with their heuristic opts, and duels of other opts against them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fusegrad.codegen.opt import Opt, OptOps

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def duel() -> ModuleType:
    spec = importlib.util.spec_from_file_location("duel_tool", ROOT / "tools" / "duel.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["duel_tool"] = module
    spec.loader.exec_module(module)
    return module


def test_opts_are_parsed_and_bad_ones_refused(duel: ModuleType) -> None:
    assert duel.parse_opts("UPCAST(2,16) UNROLL(3, 4)") == (Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.UNROLL, 3, 4))
    assert duel.parse_opts("") == ()
    with pytest.raises(ValueError, match="no opt 'FOO'"):
        duel.parse_opts("FOO(1,2)")
    with pytest.raises(ValueError, match=r"OP\(axis,amount\)"):
        duel.parse_opts("UPCAST 2 16")


def test_the_convnet_steps_kernels_are_listed_and_dueled(duel: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert duel.main(["convnet", "--batch", "2"]) == 0
    listed = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in listed]
    assert len(names) == len(set(names)) > 20
    # the batchnorm's per-channel sum over 2 images of 26 x 26, merged into (2, 676) (a suffix where this process
    # named a kernel of that shape before: kernel names are process-wide)
    name = next(n for n in names if n.startswith("r_16_2_676"))
    assert duel.main(["convnet", name, "UPCAST(0,4)", "UPCAST(9,4)", "--batch", "2", "--turns", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{name}: heuristic")
    assert out[1].startswith("  UPCAST(0,4): heuristic vs this, us per turn: ")
    assert out[2] == "  UPCAST(9,4): failed (does not apply, or gave other outputs)"


def test_bad_arguments_are_refused(duel: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["mlp"], ["convnet", "--turns", "0"], ["convnet", "nope", "--batch", "2"]):
        with pytest.raises(SystemExit) as exit_info:
            duel.main(argv)
        assert exit_info.value.code == 2
        assert "error:" in capsys.readouterr().err
