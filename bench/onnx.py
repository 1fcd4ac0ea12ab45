"""ONNX inference side by side in one process: fusegrad.nn.onnx (TinyJit) vs onnxruntime (CPU, 2 threads).

Cases: the torch-exported models of test/nn/onnx_models.py: the ResNet-18-like convnet (width 8, batch --batch of
3x--size x--size images) and the transformer encoder (2 pre-norm layers, dim 32, 4 heads, batch 2 x 16 tokens with a
padding mask). Each model is exported once; both runtimes get the same inputs.

Timing: fusegrad's first call (graph build, compile) and TinyJit capture call are reported, not counted; then the
median (and best) of --runs replays, each from ready input tensors to the output as a numpy array, and fusegrad's 90th
percentile (a replay that waits on an OpenMP thread the busy machine has descheduled shows there, not in the median).
onnxruntime runs --runs times after one warm-up. The ratio is onnxruntime's median time over fusegrad's (above 1:
fusegrad is faster). --omp-threads sets OMP_NUM_THREADS for fusegrad's kernels (1: every kernel on the calling thread).
The max difference of the outputs, relative to the largest output, is printed beside the times, then the kernels one
fusegrad replay runs and how many of them open an OpenMP parallel region (a region waits for every thread at its end:
on an oversubscribed machine that wait, not the arithmetic, sets the time). The 1-minute load average is printed
first: on a shared machine the figures mean little without it.
Usage: python bench/onnx.py [--runs N] [--batch B] [--size S] [--omp-threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

# OMP_NUM_THREADS is read when the first kernel loads libgomp: set it before anything runs
if "--omp-threads" in sys.argv[:-1]:
    os.environ["OMP_NUM_THREADS"] = sys.argv[sys.argv.index("--omp-threads") + 1]

# this file's folder comes first on sys.path, where this file would shadow the onnx package: swap it for the repo
# root (test/ holds the exported models)
HERE = Path(__file__).resolve().parent
sys.path = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from fusegrad import Tensor, TinyJit  # noqa: E402
from fusegrad.engine.realize import CompiledRunner  # noqa: E402
from fusegrad.nn.onnx import OnnxRunner  # noqa: E402
from test.nn.onnx_models import export_convnet, export_encoder  # noqa: E402


def time_calls(call: Callable[[], object], runs: int) -> list[float]:
    """Seconds of each of runs calls."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def bench_fusegrad(
    model: bytes, inputs: dict[str, np.ndarray], runs: int
) -> tuple[list[float], float, np.ndarray, str]:
    """(replay times, first + capture call seconds, output, "kernels (threaded)") of the model under TinyJit."""
    runner = OnnxRunner(model)
    jitted = TinyJit(lambda **kw: runner(kw)["output"].realize())
    tensors = {name: Tensor(value).realize() for name, value in inputs.items()}
    start = time.perf_counter()
    for _ in range(2):  # the first call runs eagerly, the second captures
        jitted(**tensors)
    setup = time.perf_counter() - start
    # to numpy, as onnxruntime returns it: also waits for the last kernel
    times = time_calls(lambda: jitted(**tensors).numpy(), runs)
    assert jitted.captured is not None, "TinyJit captured nothing"
    kernels = [item.prg for item in jitted.captured.items if isinstance(item.prg, CompiledRunner)]
    threaded = sum("omp parallel" in kernel.p.src for kernel in kernels)
    return times, setup, jitted(**tensors).numpy(), f"{len(kernels)} ({threaded})"


def bench_onnxruntime(model: bytes, inputs: dict[str, np.ndarray], runs: int) -> tuple[list[float], np.ndarray]:
    """(run times, output) of the model in onnxruntime with 2 intra-op threads."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    output = session.run(None, inputs)[0]
    return time_calls(lambda: session.run(None, inputs), runs), output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per runtime (default 20)")
    parser.add_argument("--batch", type=int, default=2, help="convnet batch (default 2)")
    parser.add_argument("--size", type=int, default=64, help="convnet image size (default 64)")
    parser.add_argument("--omp-threads", type=int, help="OMP_NUM_THREADS for fusegrad's kernels (default: unset)")
    args = parser.parse_args()
    cases = {
        f"convnet {args.batch}x3x{args.size}x{args.size}": export_convnet(args.batch, args.size),
        "encoder 2x16 tokens": export_encoder(),
    }
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; median (best) of {args.runs} runs")
    if args.omp_threads is not None:
        print(f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} for fusegrad")
    header = f"{'case':<26}{'fusegrad ms':>14}{'p90':>7}{'onnxruntime ms':>17}{'ratio':>8}{'max rel diff':>14}"
    print(f"{header}{'kernels (threaded)':>20}  first+capture")
    for name, (model, inputs) in cases.items():
        ours, setup, our_output, kernels = bench_fusegrad(model, inputs, args.runs)
        theirs, their_output = bench_onnxruntime(model, inputs, args.runs)
        difference = np.abs(our_output - their_output).max() / np.abs(their_output).max()
        ratio = statistics.median(theirs) / statistics.median(ours)
        print(
            f"{name:<26}{statistics.median(ours) * 1e3:>9.2f} ({min(ours) * 1e3:.2f})"
            f"{statistics.quantiles(ours, n=10)[-1] * 1e3:>7.2f}"
            f"{statistics.median(theirs) * 1e3:>11.2f} ({min(theirs) * 1e3:.2f})"
            f"{ratio:>7.2f}x{difference:>14.2e}{kernels:>20}  {setup:.1f} s"
        )


if __name__ == "__main__":
    main()
