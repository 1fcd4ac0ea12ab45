"""`python -m fusegrad.nn.onnx MODEL.onnx [--inputs FILE.npz] [--bench] [--compare]`: run an ONNX model with fusegrad.

Inputs come from an .npz file (arrays named like the model's inputs; read without pickle) or are random, with
unnamed or symbolic dims set by --dim NAME=SIZE (default 1). Prints each output's shape and dtype; --bench times runs
under TinyJit, --compare prints the max difference from onnxruntime (when installed).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np

from fusegrad import Tensor, TinyJit, dtypes
from fusegrad.nn.onnx.registry import TensorSequence
from fusegrad.nn.onnx.runner import InputSpec, OnnxRunner


def random_input(spec: InputSpec, dims: dict[str, int], rng: np.random.Generator) -> np.ndarray:
    """A random array for one input: normal floats, small non-negative ints, random bools."""
    shape = tuple(d if isinstance(d, int) and d > 0 else dims.get(str(d), 1) for d in spec.shape or ())
    if dtypes.is_float(spec.dtype):
        return rng.standard_normal(shape).astype(np.dtype(spec.dtype.fmt or "f"))
    if spec.dtype == dtypes.bool:
        return rng.random(shape) < 0.5
    return rng.integers(0, 10, shape).astype(np.dtype(spec.dtype.fmt or "i"))


def load_inputs(runner: OnnxRunner, path: str | None, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """The named inputs from an .npz file, or random ones."""
    if path is not None:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    rng = np.random.default_rng(0)
    return {name: random_input(spec, dims, rng) for name, spec in runner.inputs.items()}


def tensor_outputs(outputs: dict[str, Tensor | TensorSequence]) -> dict[str, Tensor]:
    """The outputs, all tensors; NotImplementedError for a sequence output, which the command does not print."""
    if sequences := [name for name, value in outputs.items() if not isinstance(value, Tensor)]:
        raise NotImplementedError(f"python -m fusegrad.nn.onnx: sequence outputs {sequences} are not supported")
    return {name: value for name, value in outputs.items() if isinstance(value, Tensor)}


def bench(runner: OnnxRunner, inputs: dict[str, np.ndarray], runs: int) -> float:
    """Best seconds per call of the model under TinyJit (after the capture calls)."""
    jitted = TinyJit(lambda **kw: {name: t.realize() for name, t in tensor_outputs(runner(kw)).items()})
    tensors = {name: Tensor(value).realize() for name, value in inputs.items()}
    best = float("inf")
    for _ in range(runs + 2):  # two calls to capture, then the timed replays
        start = time.perf_counter()
        jitted(**tensors)
        best = min(best, time.perf_counter() - start)
    return best


def compare(model: str, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
    """Print the max absolute and relative difference of each output from onnxruntime's."""
    try:
        import onnxruntime  # type: ignore[import-untyped]  # no stubs
    except ImportError:
        print("compare: onnxruntime is not installed (pip install onnxruntime)")
        return
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    for (name, ours), theirs in zip(outputs.items(), session.run(list(outputs), inputs), strict=False):
        difference = float(np.abs(ours.astype(np.float64) - theirs).max()) if ours.size else 0.0
        scale = float(np.abs(theirs).max()) if ours.size else 0.0
        print(f"{name}: max |fusegrad - onnxruntime| = {difference:.3g} (max |onnxruntime| = {scale:.3g})")


def parse_dims(items: Sequence[str]) -> dict[str, int]:
    """NAME=SIZE pairs as a dict."""
    dims = {}
    for item in items:
        name, _, size = item.partition("=")
        dims[name] = int(size)
    return dims


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusegrad.nn.onnx", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="path of the .onnx file")
    parser.add_argument("--inputs", help=".npz file with one array per model input (default: random inputs)")
    parser.add_argument("--dim", action="append", default=[], help="NAME=SIZE for a symbolic input dim (default 1)")
    parser.add_argument("--bench", action="store_true", help="time runs under TinyJit")
    parser.add_argument("--runs", type=int, default=10, help="timed runs for --bench (default 10)")
    parser.add_argument("--compare", action="store_true", help="max difference from onnxruntime")
    args = parser.parse_args(argv)
    runner = OnnxRunner(args.model)
    inputs = load_inputs(runner, args.inputs, parse_dims(args.dim))
    start = time.perf_counter()
    outputs = {name: t.numpy() for name, t in tensor_outputs(runner(inputs)).items()}
    print(f"first run (builds and compiles): {time.perf_counter() - start:.3f} s")
    for name, value in outputs.items():
        print(f"{name}: shape {value.shape} dtype {value.dtype}")
    if args.bench:
        print(f"TinyJit: {bench(runner, inputs, args.runs) * 1e3:.2f} ms per run (best of {args.runs})")
    if args.compare:
        compare(args.model, inputs, outputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
