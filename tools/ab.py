"""A/B of fusegrad's host overhead between a git revision and the working tree, on a noisy machine.

Each measure runs in a fresh interpreter, alternating base and work tree round by round, so load that comes and goes
hits both sides alike; the table gives each side's best and median and their ratios (work / base: below 1 is faster).
CPU-time measures (process time, not wall) are the steadier ones on a shared host: time the hypervisor takes from the
guest is not the process's. Nothing is asserted: `bench/` holds the targets, this only says whether a change helped.

    python tools/ab.py tiny mlp                    # HEAD vs the working tree, 5 rounds
    python tools/ab.py --base main~3 --rounds 9 chain
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_BEST = """
def best(fn, number, rounds, clock=time.perf_counter):
    found = float("inf")
    for _ in range(rounds):
        start = clock()
        for _ in range(number):
            fn()
        found = min(found, (clock() - start) / number)
    return found
"""

# name -> (unit, code printing one number); the code runs with the tree's root as cwd and first on sys.path
MEASURES: dict[str, tuple[str, str]] = {
    "tiny": (
        "µs, wall",
        """
from fusegrad import Tensor
a, b = Tensor.rand(10).realize(), Tensor.rand(10).realize()
for _ in range(300):
    (a + b).realize()
print(best(lambda: (a + b).realize(), 300, 15) * 1e6)
""",
    ),
    "tiny-cpu": (
        "µs, CPU",
        """
from fusegrad import Tensor
a, b = Tensor.rand(10).realize(), Tensor.rand(10).realize()
for _ in range(300):
    (a + b).realize()
print(best(lambda: (a + b).realize(), 300, 15, time.process_time) * 1e6)
""",
    ),
    "mlp": (
        "ms, wall",
        """
import fusegrad, fusegrad.nn, fusegrad.nn.optim, fusegrad.nn.state
sys.path.insert(0, "bench")
import overhead
fusegrad.Tensor.training = True
eager, _ = overhead.mlp_step(fusegrad, "fusegrad")
for _ in range(20):
    eager()
print(best(eager, 20, 15) * 1e3)
""",
    ),
    "gpt-python": (
        "ms, CPU on NULL",
        """
import fusegrad, fusegrad.nn, fusegrad.nn.optim, fusegrad.nn.state
sys.path.insert(0, "bench")
import overhead
fusegrad.Tensor.training = True
print(overhead.python(fusegrad, "fusegrad", 1.0)["GPT step Python ms, total with GC (NULL)"])
""",
    ),
    "chain": (
        "s, CPU",
        """
import fusegrad
sys.path.insert(0, "bench")
import overhead
print(overhead.chain(fusegrad, "fusegrad", 0.0)["schedule 1,000-layer chain s CPU time"])
""",
    ),
}
# the GPT and chain figures are bench/overhead.py's own measures (its `python` and `chain`), taken in a tree's bench/
_ENV = {"gpt-python": {"DEV": "NULL"}}


def run_one(tree: Path, measure: str) -> float:
    """One fresh interpreter's figure for `measure` with fusegrad from `tree`."""
    code = f"import sys, time\n{_BEST}\n{MEASURES[measure][1]}"
    env = {**os.environ, "PYTHONPATH": str(tree), **_ENV.get(measure, {})}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"ab: {measure} failed in {tree}:\n{proc.stderr[-3000:]}")
    return float(proc.stdout.split()[-1])


def export(rev: str, into: Path) -> Path:
    """The tracked files of `rev` (any git revision) unpacked into `into`; ValueError for an unknown revision."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=False)
    if archive.returncode != 0:
        raise ValueError(f"ab: no revision {rev!r}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def compare(base: Path, work: Path, measures: list[str], rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    """{measure: (base figures, work figures)}, alternating base and work each round."""
    found: dict[str, tuple[list[float], list[float]]] = {m: ([], []) for m in measures}
    for r in range(rounds):
        for m in measures:
            for side, tree in enumerate((base, work)):
                found[m][side].append(run_one(tree, m))
            print(f"  round {r + 1}/{rounds} {m}: base {found[m][0][-1]:.4g}, work {found[m][1][-1]:.4g}",
                  file=sys.stderr, flush=True)  # fmt: skip
    return found


def table(found: dict[str, tuple[list[float], list[float]]], base_name: str) -> str:
    lines = [f"| measure | {base_name} best / median | work tree best / median | work/base best | work/base median |",
             "|---|---|---|---|---|"]  # fmt: skip
    for m, (b, w) in found.items():
        unit = MEASURES[m][0]
        bm, wm = statistics.median(b), statistics.median(w)
        lines.append(f"| {m} ({unit}) | {min(b):.4g} / {bm:.4g} | {min(w):.4g} / {wm:.4g} | "
                     f"{min(w) / min(b):.3f} | {wm / bm:.3f} |")  # fmt: skip
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measures", nargs="+", choices=sorted(MEASURES), help="what to time")
    parser.add_argument("--base", default="HEAD", help="git revision to compare against (default HEAD)")
    parser.add_argument("--rounds", type=int, default=5, help="interpreter starts per side and measure (default 5)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fusegrad-ab-") as tmp:
        base = export(args.base, Path(tmp))
        print(table(compare(base, ROOT, list(dict.fromkeys(args.measures)), args.rounds), args.base))


if __name__ == "__main__":
    main()
