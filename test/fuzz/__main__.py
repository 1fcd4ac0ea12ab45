"""Long fuzz runs: `python -m test.fuzz --minutes N` runs random programs until the time is up and prints each
failing program (unshrunk) as it is found, then a summary. `--help` lists the options.
"""

from __future__ import annotations

import argparse
import sys
import time

from hypothesis import HealthCheck, given, seed, settings

from test.fuzz.pool import Pool, report
from test.fuzz.strategies import programs

CHUNK = 200  # programs per hypothesis run; each chunk gets a fresh seed


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m test.fuzz", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to run (default 5)")
    parser.add_argument("--seed", type=int, default=None, help="first chunk's seed (default: time-based)")
    parser.add_argument("--max-steps", type=int, default=6, help="most steps in a program (default 6)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a program counts as hung")
    return parser.parse_args(argv)


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
    start = time.monotonic()
    deadline = start + args.minutes * 60
    chunk_seed = args.seed if args.seed is not None else int(time.time())
    try:
        while time.monotonic() < deadline:
            run_chunk(pool, chunk_seed, args.max_steps, deadline, found)
            elapsed = time.monotonic() - start
            print(f"{pool.programs} programs in {elapsed:.0f} s ({pool.programs / elapsed:.1f}/s), "
                  f"{len(found)} failures, outcomes {dict(pool.outcomes)}", flush=True)  # fmt: skip
            chunk_seed += 1
    finally:
        pool.close()
    restarts = sum(c.started - 1 for c in pool.children)
    print(f"done: {pool.programs} programs, {len(found)} failures, {restarts} child restarts", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
