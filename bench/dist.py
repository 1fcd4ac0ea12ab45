"""fusegrad.distributed over MPI on one machine: allreduce bandwidth and data-parallel GPT throughput.

1. allreduce of float32 sums across 2 ranks, 1 MB ... 64 MB: `distributed.allreduce` on a realized CPU tensor vs
   mpi4py's own `comm.Allreduce` of a numpy array (IN_PLACE both), median of timed runs after a warm-up, as algorithm
   bandwidth (message bytes / time). A middle column runs mpi4py on the tensor's own memory: fusegrad's CPU buffers
   are shared anonymous mmaps without transparent huge pages, which alone costs MPI's copies ~30% against numpy's
   huge-page arrays; the rest is fusegrad's wrapper.
2. GPT (fusegrad.examples.gpt's model at its defaults, batch 16 x 64 per rank) training steps, TinyJit, with 1 and 2
   ranks, each rank bound to one core, the whole step one TinyJit: tokens/s summed over the ranks, and the share of
   step time spent communicating (`DistributedDataParallel.comm_seconds`: staging each bucket and starting its
   Iallreduce as the backward produces it, then the wait and write-back before the optimiser step; the transfers
   themselves overlap the rest of the backward and only the blocking part counts).
Usage: python bench/dist.py [--max-mb 64] [--steps 12] [--bucket-mb 1] [--skip-allreduce]. Launches `mpiexec` itself
(the dist extra); each part runs this file as the worker.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np


def median_seconds(fns: list[Callable[[], object]], runs: int, barrier: Callable[[], object]) -> list[float]:
    """The median time of each function, run in turns (one of each per round) so a busy moment hits them alike."""
    times: list[list[float]] = [[] for _ in fns]
    for round_ in range(runs + 1):  # round 0 warms up
        for fn, spent in zip(fns, times, strict=True):
            barrier()  # both ranks start each collective together: the time is the collective's, not the skew
            st = time.perf_counter()
            fn()
            if round_:
                spent.append(time.perf_counter() - st)
    return [float(np.median(spent)) for spent in times]


GBS_KEYS = ("numpy_gbs", "memory_gbs", "fusegrad_gbs")


def worker_allreduce(max_mb: int) -> None:
    from mpi4py import MPI

    from fusegrad import Tensor, distributed

    info = distributed.init()
    comm = MPI.COMM_WORLD
    results = []
    mb = 1
    while mb <= max_mb:
        n = mb * 2**20 // 4
        array = np.ones(n, dtype=np.float32)
        tensor = Tensor.ones(n).contiguous().realize()
        runs = max(9, 256 // mb)
        memory = distributed.host_view(tensor)[0]  # the tensor's own memory: what fusegrad's allreduce hands MPI
        numpy_s, memory_s, fusegrad_s = median_seconds(
            [
                lambda a=array: comm.Allreduce(MPI.IN_PLACE, a),
                lambda m=memory: comm.Allreduce(MPI.IN_PLACE, m),
                lambda t=tensor: distributed.allreduce(t, "sum"),
            ],
            runs,
            comm.Barrier,
        )
        gbs = {
            key: n * 4 / seconds / 1e9 for key, seconds in zip(GBS_KEYS, (numpy_s, memory_s, fusegrad_s), strict=True)
        }
        results.append({"mb": mb, **gbs})
        mb *= 4 if mb < 64 else 2
    if info.rank == 0:
        print(json.dumps(results))
    distributed.shutdown()


def worker_gpt(steps: int, bucket_mb: float) -> None:
    from fusegrad import Tensor, distributed
    from fusegrad.distributed import DistributedDataParallel
    from fusegrad.examples.gpt import GPT, GPTConfig, make_step
    from fusegrad.nn import optim
    from fusegrad.nn.state import get_parameters

    info = distributed.init()
    cfg = GPTConfig(vocab_size=98)
    Tensor.manual_seed(0)
    model = GPT(cfg)
    opt = optim.AdamW(get_parameters(model), lr=1e-3, weight_decay=0.01)
    ddp = DistributedDataParallel(model, bucket_mb=bucket_mb) if info.world_size > 1 else None
    step = make_step(model, opt, ddp)
    rng = np.random.default_rng(info.rank)
    batch = [Tensor(rng.integers(0, cfg.vocab_size, (16, cfg.context), dtype=np.int32)) for _ in range(2)]
    for _ in range(3):  # eager, capture, first replay
        step(*batch).item()
    distributed.barrier()
    if ddp is not None:
        ddp.comm_seconds = 0.0
    begun = time.perf_counter()
    for _ in range(steps):
        step(*batch).item()
    took = time.perf_counter() - begun
    if info.rank == 0:
        tokens = 16 * cfg.context * steps * info.world_size
        comm = ddp.comm_seconds / took if ddp is not None else 0.0
        buckets = len(ddp.buckets) if ddp is not None else 0
        print(json.dumps({"ranks": info.world_size, "tokens_s": tokens / took, "comm": comm, "buckets": buckets}))
    distributed.shutdown()


def launch(ranks: int, *worker_args: str) -> object:
    found = shutil.which("mpiexec", path=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if found is None:
        raise SystemExit("bench/dist.py: no mpiexec; pip install -e '.[dist]'")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=False).stdout
    binding = ["--bind-to", "core"] if "Open MPI" in version else ["-bind-to", "core"]  # one core per rank
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    command = [found, "-n", str(ranks), *binding, sys.executable, __file__, "--worker", *worker_args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"bench/dist.py: {' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--max-mb", type=int, default=64, help="largest allreduce in MB (default 64)")
    parser.add_argument("--steps", type=int, default=12, help="timed GPT steps per run (default 12)")
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="DDP bucket size in MB (default 1)")
    parser.add_argument("--skip-allreduce", action="store_true", help="only the GPT part")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        if args.worker[0] == "allreduce":
            worker_allreduce(int(args.worker[1]))
        else:
            worker_gpt(int(args.worker[1]), float(args.worker[2]))
        return
    if not args.skip_allreduce:
        allreduce_table(args.max_mb)
    gpt_table(args.steps, args.bucket_mb)


def allreduce_table(max_mb: int) -> None:
    print("allreduce, float32 sum, 2 ranks (algorithm bandwidth, GB/s)")
    print(f"{'MB':>4} {'mpi4py numpy':>13} {'mpi4py on fusegrad memory':>26} {'fusegrad':>9} {'ratio':>6}")
    rows = launch(2, "allreduce", str(max_mb))
    assert isinstance(rows, list), "bench/dist.py: the allreduce worker printed no rows"
    for row in rows:
        ratio = row["fusegrad_gbs"] / row["numpy_gbs"]
        print(f"{row['mb']:>4} {row['numpy_gbs']:>13.2f} {row['memory_gbs']:>26.2f} {row['fusegrad_gbs']:>9.2f} "
              f"{ratio:>6.2f}")  # fmt: skip


def gpt_table(steps: int, bucket_mb: float) -> None:
    print("GPT training step (defaults, batch 16 x 64 per rank), one TinyJit per step, one core per rank")
    one = launch(1, "gpt", str(steps), str(bucket_mb))
    two = launch(2, "gpt", str(steps), str(bucket_mb))
    assert isinstance(one, dict), "bench/dist.py: the 1-rank GPT worker printed no result"
    assert isinstance(two, dict), "bench/dist.py: the 2-rank GPT worker printed no result"
    print(f"1 rank : {one['tokens_s']:>8,.0f} tokens/s")
    print(f"2 ranks: {two['tokens_s']:>8,.0f} tokens/s summed ({two['tokens_s'] / one['tokens_s']:.2f}x), "
          f"{100 * two['comm']:.1f}% of step time communicating ({two['buckets']} buckets)")  # fmt: skip


if __name__ == "__main__":
    main()
