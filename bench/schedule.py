"""Scheduling cost: seconds to schedule a chain of n `(x @ w).relu()` layers (n kernels, nothing runs), for several n.

Each size runs in a fresh process (the scheduler's index caches start empty), best of --repeats; the table shows wall
and CPU seconds (CPU time is what a loaded machine inflates least) and the ms per layer, which stays flat when the
scheduler's cost is linear. Usage: python bench/schedule.py [--layers 100 1000 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def chain_schedule(layers: int) -> dict[str, float]:
    """Wall and CPU seconds of `schedule()` on a fresh chain of `layers` layers (16x16 weights)."""
    from fusegrad import Tensor

    x, w = Tensor.empty(16, 16), Tensor.empty(16, 16)
    for _ in range(layers):
        x = (x @ w).relu()
    wall, cpu = time.perf_counter(), time.process_time()
    items = x.schedule()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert len(items) == layers, f"expected one kernel per layer, got {len(items)} for {layers}"
    return {"wall": wall, "cpu": cpu}


def measure(layers: int, repeats: int) -> dict[str, float]:
    """The fastest of `repeats` fresh processes, by CPU time."""
    runs = []
    for _ in range(repeats):
        cmd = [sys.executable, __file__, "--worker", str(layers)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=os.environ.copy())
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per size (default 3)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # one measurement, printed as JSON
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(chain_schedule(args.worker)))
        return
    load = os.getloadavg()
    print(f"schedule a (x @ w).relu() chain, best of {args.repeats}; load average {load[0]:.1f} / {load[1]:.1f}")
    print("| layers | wall s | CPU s | CPU ms per layer |")
    print("|---|---|---|---|")
    for n in args.layers:
        r = measure(n, args.repeats if n < 10000 else 1)
        print(f"| {n:,} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['cpu'] / n * 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
