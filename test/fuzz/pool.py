"""Runs fuzz programs in worker children (one per configuration: CPU and PYTHON, default opts and NOOPT=1) and
compares what they give, with each other and with numpy.

`Pool.check(program)` returns the problems found (empty: all agree). A child that dies or hangs is restarted, and its
death is a problem naming the signal and the last kernel it started (CRASH_REPORT=1 in the children).
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from test.fuzz.program import OrderOverflowError, Program, describe, run_numpy_bounded

REPO = Path(__file__).resolve().parents[2]
CONFIGS = (("CPU", 0), ("CPU", 1), ("PYTHON", 0), ("PYTHON", 1))  # (device, NOOPT)
MAX_STRETCH = 4.0  # the most a loaded machine stretches the hang limit (see Pool.hang_limit)
# relative tolerance by dtype, for results that went through an inexact op (libm vs Python math, summation order)
RTOL = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-9}
# steps whose result depends on libm or on the summation order, and steps that turn a tiny float difference into a
# different value (an int, a bool, another integer-valued float)
INEXACT = {"exp2", "log2", "sin", "exp", "log", "tanh", "sigmoid", "pow"}
ORDER_DEPENDENT = {"sum", "prod", "mean", "cumsum", "matmul"}  # float results depend on the summation order
DISCRETE = {"cast", "bitcast", "lt", "eq", "ne", "trunc", "floor", "ceil", "floordiv", "mod", "gather", "where"}
# steps whose result is unknown once their input is known only to a relative error: sin(x) with x off by r * |x| >= pi
# (a float32 sum of 1e19-sized terms in another order, or a 1-ulp libm difference at |x| ~ 1e8) can be anything in
# [-1, 1]; found by a 31-minute run: sin of an order-dependent sum, -0.39 on CPU vs -0.94 in numpy
PERIODIC = {"sin"}


class Child:
    """One worker process for one configuration, with its stderr kept in a file for crash reports."""

    def __init__(self, device: str, noopt: int) -> None:
        self.device, self.noopt = device, noopt
        self.proc: subprocess.Popen[str] | None = None
        self.stderr: IO[bytes] | None = None
        self.started = 0

    def start(self) -> None:
        env = {**os.environ, "DEV": self.device, "NOOPT": str(self.noopt), "CRASH_REPORT": "1", "DEBUG": "0"}
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115  # lives as long as the child; closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "test.fuzz.worker"], cwd=REPO, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)  # fmt: skip
        self.started += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.stderr is not None:
            self.stderr.close()
        self.proc, self.stderr = None, None

    def stderr_tail(self, lines: int = 40) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def send(self, request: dict[str, Any]) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            self.start()
        assert self.proc is not None, "fuzz: child not started"
        assert self.proc.stdin is not None, "fuzz: child has no stdin pipe"
        if self.stderr is not None:  # keep only this program's stderr: the crash report is about it
            self.stderr.seek(0)
            self.stderr.truncate()
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def receive(self, deadline: float) -> dict[str, Any]:
        """The child's answer, or {"crash": ...} / {"hang": ...} after restarting it."""
        assert self.proc is not None, "fuzz: child not started"
        assert self.proc.stdout is not None, "fuzz: child has no stdout pipe"
        ready, _, _ = select.select([self.proc.stdout], [], [], max(deadline - time.monotonic(), 0))
        line = self.proc.stdout.readline() if ready else None
        if line:
            return json.loads(line)  # type: ignore[no-any-return]  # a JSON object by the worker's protocol
        if line is None:
            outcome = {"hang": f"no answer within the time limit\n{self.stderr_tail()}"}
        else:
            code = self.proc.wait()
            name = signal.Signals(-code).name if code < 0 else f"exit code {code}"
            outcome = {"crash": f"the child died ({name})\n{self.stderr_tail()}"}
        self.stop()
        return outcome


@dataclass
class Pool:
    """The four configuration children; `check` runs one program on all of them."""

    timeout: float = 120.0  # seconds for one program on an idle machine; stretched by the load (hang_limit)
    children: list[Child] = field(default_factory=lambda: [Child(d, n) for d, n in CONFIGS])
    programs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # how programs ended: compared, raised <type>, numpy, ...
    slowest: float = 0.0  # the longest any program took to answer (seconds): the margin below the hang limit

    def close(self) -> None:
        for child in self.children:
            child.stop()

    def hang_limit(self) -> float:
        """`timeout` stretched by the load per core, at most 4 times: four children share the cores with whatever else
        runs (a 2-core machine shared by a team), and a slow answer there is not a hang."""
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
        return self.timeout * min(max(per_core, 1.0), MAX_STRETCH)

    def run(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        start = time.monotonic()
        for child in self.children:
            child.send(request)
        deadline = start + self.hang_limit()
        results = [child.receive(deadline) for child in self.children]
        self.slowest = max(self.slowest, time.monotonic() - start)
        return results

    def check(self, program: Program) -> list[str]:
        """Problems with `program`: crashes, hangs, differing errors or results, numpy disagreement."""
        self.programs += 1
        results = self.run(program)
        names = [f"{d}{' NOOPT=1' if n else ''}" for d, n in CONFIGS]
        problems = [f"{name}: {kind}: {r[kind]}" for name, r in zip(names, results, strict=True)
                    for kind in ("crash", "hang") if kind in r]  # fmt: skip
        if problems:
            return problems
        errors = {r.get("error") for r in results}
        if len(errors) > 1:
            raised = [(name, r.get("error"), r.get("message")) for name, r in zip(names, results, strict=True)]
            return [f"configurations disagree on raising: {raised}"]
        if None not in errors:
            self.outcomes[f"raised {results[0]['error']}"] += 1
            return []  # every configuration raised the same exception type: a clean error
        self.outcomes["compared"] += 1
        arrays = [_decode(r) for r in results]
        rtol = _tolerance(program, results[0]["dtypes"])
        expected, overflow_order, bound = _numpy(program, results[0]["dtypes"])
        if overflow_order:
            self.outcomes["order decides overflow"] += 1
        if bound is not None:
            self.outcomes["order's rounding bound applied"] += 1
        for name, got in zip(names[1:], arrays[1:], strict=True):
            if not _same(arrays[0], got, rtol, finite_only=overflow_order, bound=bound):
                problems.append(f"{name} differs from CPU: {_diff(arrays[0], got)}")
        if not problems and expected is not None:
            self.outcomes["checked against numpy"] += 1
            if not _same(expected, arrays[0], rtol, bound=bound):
                problems.append(f"CPU differs from numpy: {_diff(expected, arrays[0])}")
        return problems


def _numpy(program: Program, value_dtypes: list[str]) -> tuple[np.ndarray | None, bool, np.ndarray | None]:
    """numpy's result (None: nothing to compare), whether a reduction's overflow depends on the order, and the
    result's absolute rounding bound where a reduction's order sets it (see program.order_error_bound)."""
    try:
        expected, bound = run_numpy_bounded(program, value_dtypes)
        return expected, False, bound
    except OrderOverflowError:  # no expected value, but the configurations' orders still differ within the bound
        return None, True, run_numpy_bounded(program, value_dtypes, overflow_ok=True)[1]
    except (ValueError, TypeError, IndexError, OverflowError):
        return None, False, None  # numpy defines no result (e.g. a shape it won't broadcast): nothing to compare


def _decode(result: dict[str, Any]) -> np.ndarray:
    data = base64.b64decode(result["data"])
    return np.frombuffer(data, dtype=result["dtype"]).reshape(result["shape"])


def _tolerance(program: Program, value_dtypes: list[str]) -> float | None:
    """None: results must match exactly (NaN-aware for floats). A float: the relative tolerance, when an inexact step
    feeds the result. inf: nothing to compare (an inexact float feeds a step that makes it discrete or periodic)."""
    inexact, base = False, len(program["inputs"])
    for k, (op, refs, _params) in enumerate(program["steps"]):
        float_in = any(value_dtypes[r].startswith("float") for r in refs)
        if inexact and (op in DISCRETE or op in PERIODIC):
            return float("inf")
        if float_in and (op in INEXACT or op in ORDER_DEPENDENT):
            inexact = True
        if inexact and op in ORDER_DEPENDENT and not value_dtypes[base + k].startswith("float"):
            return float("inf")
    return RTOL.get(value_dtypes[-1], 0.0) if inexact else None


def _same(
    expected: np.ndarray,
    got: np.ndarray,
    rtol: float | None,
    finite_only: bool = False,
    bound: np.ndarray | None = None,
) -> bool:
    """Whether two results agree: same shape and dtype, ints bit for bit, floats NaN-aware within `rtol` (None:
    exactly). finite_only: positions where either is inf or NaN are not compared (an order-dependent overflow).
    bound: how far each element may be from the exact value in any summation order; two orders may differ by twice
    it (cancelling terms: the result's own size says nothing of the error)."""
    if expected.shape != got.shape or expected.dtype != got.dtype:
        return False
    if rtol == float("inf"):
        return True
    if expected.dtype.kind != "f":
        return expected.tobytes() == got.tobytes()
    slack = np.zeros(expected.shape) if bound is None else np.broadcast_to(2 * bound, expected.shape)
    if finite_only:
        both = np.isfinite(expected) & np.isfinite(got)
        expected, got, slack = expected[both], got[both], slack[both]
    nan_e, nan_g = np.isnan(expected), np.isnan(got)
    if not np.array_equal(nan_e, nan_g):
        return False
    e, g = expected[~nan_e].astype(np.float64), got[~nan_g].astype(np.float64)
    if rtol is None:
        return bool(np.array_equal(e, g))  # -0.0 == 0.0
    with np.errstate(all="ignore"):
        # relative, and absolute near 0: composed ops (tanh as 2*sigmoid(2x)-1) lose tiny values entirely
        scale = np.maximum(np.maximum(np.abs(e), np.abs(g)), 1.0)
        return bool(np.all((e == g) | (np.abs(e - g) <= rtol * scale + slack[~nan_e])))


def _diff(expected: np.ndarray, got: np.ndarray) -> str:
    return f"expected {expected.dtype}{list(expected.shape)} {expected.tolist()}, got {got.dtype}{list(got.shape)} {got.tolist()}"  # noqa: E501


def report(program: Program, problems: list[str]) -> str:
    """A failing example as text: the problems, then the program as Python."""
    return "\n".join([*problems, "program:", describe(program), "json:", json.dumps(program)])
