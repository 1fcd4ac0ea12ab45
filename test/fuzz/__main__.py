"""Long fuzz runs: `python -m test.fuzz --minutes N` runs random programs until the time is up and prints each
failing program (unshrunk) as it is found, then a summary. `python -m test.fuzz --replay FILE...` runs recorded
programs again: a file holds one program as JSON, or is a fuzz log (each "json:" line's next line is a program).
`--help` lists the options.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

from test.fuzz.pool import Pool, report
from test.fuzz.program import Program
from test.fuzz.strategies import programs

CHUNK = 200  # programs per hypothesis run; each chunk gets a fresh seed


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m test.fuzz", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to run (default 5)")
    parser.add_argument("--seed", type=int, default=None, help="first chunk's seed (default: time-based)")
    parser.add_argument("--max-steps", type=int, default=6, help="most steps in a program (default 6)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds before a program counts as hung on an idle machine (default 120; stretched by "
                        "the load average per core, up to 4 times)")  # fmt: skip
    parser.add_argument("--replay", nargs="+", metavar="FILE", default=None,
                        help="rerun the programs in FILEs (JSON programs or fuzz logs)")  # fmt: skip
    return parser.parse_args(argv)


def load_programs(path: Path) -> list[Program]:
    """The programs in a file: one JSON program, or every program a fuzz log printed after a "json:" line."""
    text = path.read_text()
    if text.lstrip().startswith("{"):
        return [json.loads(text)]
    lines = text.splitlines()
    found = [json.loads(lines[i + 1]) for i, line in enumerate(lines[:-1]) if line == "json:"]
    if not found:
        raise ValueError(f"--replay: {path} holds no JSON program and no fuzz log 'json:' lines")
    return found


def replay(pool: Pool, paths: list[Path]) -> int:
    """Checks each recorded program on every configuration and prints what it finds; 1 if any program fails."""
    failed = 0
    for path in paths:
        for n, program in enumerate(load_programs(path), 1):
            before = dict(pool.outcomes)
            problems = pool.check(program)
            outcome = [k for k, v in pool.outcomes.items() if v != before.get(k, 0)]
            verdict = f"FAILS\n{report(program, problems)}" if problems else f"agrees ({', '.join(outcome) or '-'})"
            print(f"=== {path} program {n}: {verdict}", flush=True)
            failed += bool(problems)
    return 1 if failed else 0


def run_chunk(pool: Pool, chunk_seed: int, max_steps: int, deadline: float, found: list[str]) -> None:
    @seed(chunk_seed)
    @settings(max_examples=CHUNK, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(programs(max_steps=max_steps))
    def fuzz(program: dict[str, object]) -> None:
        if time.monotonic() > deadline:
            return
        if problems := pool.check(program):
            found.append(text := report(program, problems))
            print(f"=== failure {len(found)} (program {pool.programs})\n{text}", flush=True)

    fuzz()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    pool, found = Pool(timeout=args.timeout), []
    if args.replay is not None:
        try:
            return replay(pool, [Path(p) for p in args.replay])
        except (OSError, ValueError) as err:  # a missing file or one without a program (JSONDecodeError included)
            print(f"python -m test.fuzz: {err}", file=sys.stderr)
            return 2
        finally:
            pool.close()
    start = time.monotonic()
    deadline = start + args.minutes * 60
    first_seed = chunk_seed = args.seed if args.seed is not None else int(time.time())
    try:
        while time.monotonic() < deadline:
            run_chunk(pool, chunk_seed, args.max_steps, deadline, found)
            print(progress(pool, len(found), time.monotonic() - start), flush=True)
            chunk_seed += 1
    except KeyboardInterrupt:  # Ctrl-C ends a long run early: the summary below still says what it did
        print("interrupted", flush=True)
    finally:
        pool.close()
    restarts = sum(c.started - 1 for c in pool.children)
    elapsed = time.monotonic() - start
    summary = f"{progress(pool, len(found), elapsed)}, {restarts} child restarts, first seed {first_seed}"
    print(f"done: {summary}", flush=True)
    return 1 if found else 0


def progress(pool: Pool, failures: int, elapsed: float) -> str:
    """Programs run, failures, elapsed time and rate, the slowest program (against the hang limit), outcomes."""
    rate = pool.programs / elapsed if elapsed > 0 else 0.0
    limit = pool.hang_limit()
    return (f"{pool.programs} programs, {failures} failures, {elapsed:.0f} s elapsed ({rate:.1f} programs/s), "
            f"slowest {pool.slowest:.1f} s (hang limit now {limit:.0f} s), outcomes {dict(pool.outcomes)}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
