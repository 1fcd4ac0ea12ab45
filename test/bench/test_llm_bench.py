"""Tests of bench/llm.py: argument checks, --quick, and a whole run on a tiny model (one capture, no compile after
the first decode step, the same greedy tokens as torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from test.shared import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench" / "llm.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script(BENCH, "bench_llm")


@pytest.mark.parametrize("argv", [["--prompt", "1"], ["--decode", "10"], ["--sizes", "7B"], ["--repeats", "0"]])
def test_bad_arguments_are_refused(bench: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_quick_shortens_the_run(bench: ModuleType) -> None:
    args = bench.parse_args(["--quick"])
    assert (args.sizes, args.prompt, args.decode, args.eager_decode) == (["15M"], 32, 80, 8)


def test_sizes_have_about_the_named_parameter_counts(bench: ModuleType) -> None:
    for size, millions in (("15M", 15), ("110M", 110)):
        shape = bench.SIZES[size]
        dim, hidden, blocks = shape["dim"], shape["hidden_dim"], shape["num_blocks"]
        params = bench.VOCAB * dim + blocks * (4 * dim * dim + 3 * dim * hidden + 2 * dim) + dim
        assert abs(params / 1e6 - millions) < 0.1 * millions


_TINY_RUN = """
import sys
from pathlib import Path
from test.shared import load_script
bench = load_script(Path("bench/llm.py"), "bench_llm")
bench.SIZES["tiny"] = {"num_blocks": 1, "dim": 16, "hidden_dim": 32, "n_heads": 2}
bench.VOCAB = 50
bench.main(["--sizes", "tiny", "--prompt", "4", "--decode", "64", "--eager-decode", "4", "--repeats", "1"])
"""


def test_a_tiny_run() -> None:
    """In a fresh interpreter, as the bench runs: the compile count after the first decode step must see only the
    decode's kernels (in the test process, layers other test modules build at collection leave pending writes that
    the capture rightly realizes first, which the count would include)."""
    root = BENCH.parents[1]
    proc = subprocess.run([sys.executable, "-c", _TINY_RUN], capture_output=True, text=True, timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "compiles after step 1: 0, captures 1" in proc.stdout
    assert "greedy 64 steps: same" in proc.stdout
