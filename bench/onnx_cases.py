"""Run every ONNX backend node test case through fusegrad.nn.onnx and count the failures by reason.

A case's reason is the expected-failure reason test/nn/test_onnx_node_cases.py gives it (unsupported op or dtype,
known wrong) when it has one, else the first line of its error, with case-specific numbers and names cut so similar
errors group. Prints the pass count, then the reasons by count with a few case names each; --json writes every
case's outcome (name -> [passed, reason, error]) for comparing two runs.
Usage: python bench/onnx_cases.py [-k SUBSTRING] [--json out.json] [--examples N]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

# this file's folder comes first on sys.path, where bench/onnx.py would shadow the onnx package: swap it for the repo
# root (test/ holds the case runner and the expected-failure lists)
HERE = Path(__file__).resolve().parent
sys.path = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from test.nn.onnx_cases import node_cases, run_case  # noqa: E402
from test.nn.test_onnx_node_cases import expected_failure  # noqa: E402


def error_reason(error: BaseException) -> str:
    """The error's type and first line, with numbers, quoted names and long tails cut so that similar errors group."""
    line = (str(error).strip().splitlines() or [""])[0]
    if isinstance(error, AssertionError) and ("Not equal" in str(error) or "Mismatch" in str(error)):
        return "AssertionError: values differ from the reference"
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", line)
    line = re.sub(r"\d+(\.\d+)?", "N", line)
    return f"{type(error).__name__}: {line[:110]}"


def run_all(substring: str) -> dict[str, tuple[bool, str, str]]:
    """name -> (passed, reason, error line) for every case whose name contains substring."""
    outcomes = {}
    for name, case in sorted(node_cases().items()):
        if substring not in name:
            continue
        expected = expected_failure(name, case)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_case(case)
            outcomes[name] = (True, expected[0] if expected else "", "")
        except Exception as error:  # every failure is counted, whatever its type
            reason = expected[0] if expected else error_reason(error)
            outcomes[name] = (False, reason, (str(error).strip().splitlines() or [""])[0][:200])
    return outcomes


def report(outcomes: dict[str, tuple[bool, str, str]], examples: int) -> None:
    """Print the pass count, cases passing despite an expected-failure reason, and the failure reasons by count."""
    passed = sum(ok for ok, _, _ in outcomes.values())
    print(f"{passed} of {len(outcomes)} cases pass ({100 * passed / max(len(outcomes), 1):.1f}%)")
    unexpected = sorted(name for name, (ok, reason, _) in outcomes.items() if ok and reason)
    if unexpected:
        print(f"passing despite an expected-failure reason ({len(unexpected)}): {', '.join(unexpected)}")
    by_reason: dict[str, list[str]] = defaultdict(list)
    for name, (ok, reason, _) in outcomes.items():
        if not ok:
            by_reason[reason].append(name)
    for reason, names in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(names[:examples]) + (", …" if len(names) > examples else "")
        print(f"{len(names):5d}  {reason}\n       {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("--json", type=Path, help="write name -> [passed, reason, error] here")
    parser.add_argument("--examples", type=int, default=4, help="case names printed per reason")
    args = parser.parse_args()
    start = time.perf_counter()
    outcomes = run_all(args.k)
    report(outcomes, args.examples)
    print(f"{time.perf_counter() - start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=0, sort_keys=True))


if __name__ == "__main__":
    main()
