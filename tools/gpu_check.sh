#!/usr/bin/env bash
# The whole GPU check of issue 15 in one command, for a machine with an NVIDIA GPU, its driver and NVRTC (a CUDA
# toolkit or the nvidia-cuda-nvrtc wheel), python3 >= 3.11 with numpy and torch, and no network: it installs nothing.
# Steps, most informative first, each under its own time limit and all within one budget (GPU_CHECK_SECONDS, 450 s):
#   environment, devices, the CUDA runtime's tests (`gpu` marked) and the GPU docs page, a GPT training step checked
#   against the CPU device, bench/gpu.py (fusegrad vs torch on the GPU), then the op test files with DEV=CUDA.
# A step that can't run is skipped with its reason (no GPU, no pytest, out of time); one over its limit is killed and
# recorded as TIMEOUT; nothing waits forever. Results go to $OUT (default ./gpu_check_out): gpu_check.log (everything),
# summary.txt (one line per step), logs/<step>.log and bench.json. Exit status 0 when no step failed or timed out.
#
# Usage: bash tools/gpu_check.sh [--dry-run]   print the plan, the limits and every skip reason; run no step
#        bash tools/gpu_check.sh --prepare     copy pytest (pure Python) from this python into build/gpu_site, for
#                                              a machine without it: carry build/gpu_site with the checkout
# Environment: OUT, GPU_CHECK_SECONDS, PYTHON (default python3), GPU_CHECK_SITE (default build/gpu_site),
# GPU_CHECK_DEVICE (default CUDA; CL runs the same plan on an OpenCL device such as PoCL, smaller: how the script's
# own logic is tested without a GPU, test/tools/test_gpu_check.py).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO="$PWD"
PY="${PYTHON:-python3}"
DEVICE="${GPU_CHECK_DEVICE:-CUDA}"
BUDGET="${GPU_CHECK_SECONDS:-450}"
OUT="${OUT:-$REPO/gpu_check_out}"
SITE="${GPU_CHECK_SITE:-$REPO/build/gpu_site}"  # where --prepare puts pytest, and where a run looks for it
MODE="run"
case "${1:-}" in
  --dry-run) MODE="dry" ;;
  --prepare) MODE="prepare" ;;
  "") ;;
  *) echo "usage: bash tools/gpu_check.sh [--dry-run | --prepare]" >&2; exit 2 ;;
esac
if [[ "$DEVICE" != "CUDA" && "$DEVICE" != "CL" ]]; then
  echo "gpu_check: GPU_CHECK_DEVICE must be CUDA or CL, got $DEVICE" >&2
  exit 2
fi

# pytest and its pure-Python dependencies, copied (not installed) so a machine without pip can run the test files
if [[ "$MODE" == "prepare" ]]; then
  rm -rf "$SITE" && mkdir -p "$SITE" || exit 2
  exec "$PY" - "$SITE" <<'EOF'
import importlib.util, pathlib, shutil, sys
site = pathlib.Path(sys.argv[1])
# pytest and what it imports on python >= 3.11 (pytest-timeout: the per-test limits of pyproject.toml)
for name in ("pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "pygments", "pytest_timeout"):
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        print(f"prepare: {name} is not importable here: skipped")
        continue
    origin = pathlib.Path(spec.origin)
    src = origin.parent if origin.name == "__init__.py" else origin
    if any(p.suffix in (".so", ".pyd") for p in ([src] if src.is_file() else src.rglob("*"))):
        sys.exit(f"prepare: {name} has compiled modules: not portable")
    dest = site / src.name
    if src.is_dir():
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy2(src, dest)
size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
print(f"prepare: {site} holds {', '.join(sorted(p.name for p in site.iterdir()))} ({size / 2**20:.1f} MiB)")
EOF
fi

mkdir -p "$OUT/logs" || exit 2
LOG="$OUT/gpu_check.log"
SUMMARY="$OUT/summary.txt"
: >"$LOG"
: >"$SUMMARY"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" # this checkout's fusegrad, not an installed one
export PYTHONUNBUFFERED=1                              # a killed step still leaves what it printed
START=$SECONDS
failed=0
PLANNED=0 # --dry-run: the steps' limits added up

say() { echo "$*" | tee -a "$LOG"; }

# record NAME STATUS RC SECONDS REASON: one summary line
record() {
  local line
  line="$(printf '%-24s %-8s rc=%-4s %4ss  %s' "$1" "$2" "$3" "$4" "$5")"
  echo "$line" >>"$SUMMARY"
  say "-- $line"
  if [[ "$2" == "FAIL" || "$2" == "TIMEOUT" ]]; then failed=1; fi
}

# step NAME LIMIT CMD...: run CMD under min(LIMIT, what is left of the budget), or record why it was skipped.
# SKIP_ALL (set once the device is known to be missing) skips every later step with its reason.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((BUDGET - (SECONDS - START)))
  if [[ -n "${SKIP_ALL:-}" ]]; then
    record "$name" SKIP - 0 "$SKIP_ALL"
    return
  fi
  if ((left < 20)); then
    record "$name" SKIP - 0 "out of time: ${left}s of the ${BUDGET}s budget left"
    return
  fi
  ((limit > left - 5)) && limit=$((left - 5))
  if [[ "$MODE" == "dry" ]]; then
    record "$name" DRY - 0 "would run (limit ${limit}s): $*"
    PLANNED=$((PLANNED + limit))
    return
  fi
  say "== $name (limit ${limit}s): $*"
  local began=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/logs/$name.log" 2>&1
  local rc=$?
  cat "$OUT/logs/$name.log" >>"$LOG"
  tail -n 8 "$OUT/logs/$name.log"
  local took=$((SECONDS - began)) status=PASS reason="" last
  # the log's last non-blank line, without terminal colours, as the summary's reason
  last="$(sed 's/\x1b\[[0-9;]*m//g' "$OUT/logs/$name.log" | grep -v '^\s*$' | tail -n 1 | cut -c1-150)"
  if ((rc == 124 || rc == 137)); then
    status=TIMEOUT reason="killed after ${limit}s; last line: $last"
  elif ((rc == 5)) && [[ "$1" == "env" || "$*" == *pytest* ]]; then
    status=SKIP reason="no tests collected: $last"
  elif ((rc != 0)); then
    status=FAIL reason="$last"
  else
    reason="$last"
  fi
  record "$name" "$status" "$rc" "$took" "$reason"
}

skip() { record "$1" SKIP - 0 "$2"; }

say "gpu_check: device $DEVICE, budget ${BUDGET}s, results in $OUT, mode $MODE, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"

# *** what this machine has: python, pytest (or the carried copy), the device ***
PYTHON_WHY=""
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  PYTHON_WHY="$PY is missing or older than 3.11 (fusegrad needs 3.11): $("$PY" --version 2>&1 | head -n 1)"
fi
HAS_PYTEST=""
if "$PY" -c "import pytest" 2>/dev/null; then
  HAS_PYTEST="installed"
elif [[ -d "$SITE" ]] && PYTHONPATH="$PYTHONPATH:$SITE" "$PY" -c "import pytest" 2>/dev/null; then
  export PYTHONPATH="$PYTHONPATH:$SITE"
  HAS_PYTEST="carried in $SITE"
fi
TIMEOUT_OPT=()
"$PY" -c "import pytest_timeout" 2>/dev/null && TIMEOUT_OPT=(--timeout 120)
say "python: $("$PY" --version 2>&1 | head -n 1); pytest: ${HAS_PYTEST:-not available (run --prepare where it is, and carry build/gpu_site)}"

DEVICE_WHY=""
if [[ -z "$PYTHON_WHY" ]]; then
  DEVICE_WHY="$(timeout -k 5 60 "$PY" -c "
from fusegrad.device import Device
try:
    Device['$DEVICE']
except Exception as err:
    print(f'{type(err).__name__}: {err}'.splitlines()[0])
" 2>&1 | tail -n 1)"
  [[ -n "$DEVICE_WHY" ]] && say "device $DEVICE cannot open: $DEVICE_WHY"
  DEVICE_WHY="${DEVICE_WHY:0:160}"  # the summary lines: the full text is in the log
fi

# *** the steps (the environment whatever the python: it says what is there) ***
step environment 60 "$PY" - "$DEVICE" <<'EOF'
import platform, shutil, subprocess, sys
print("python", sys.version.split()[0], platform.machine(), platform.platform())
if shutil.which("nvidia-smi"):
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"]
    print("nvidia-smi:", subprocess.run(query, capture_output=True, text=True, timeout=20).stdout.strip())
else:
    print("nvidia-smi: not on PATH")
import numpy
print("numpy", numpy.__version__)
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
except ImportError as err:
    print("torch: not importable:", err)
print("C compiler for the CPU device:", shutil.which("cc") or shutil.which("gcc") or shutil.which("clang") or "none")
try:
    from fusegrad.runtime.support.nvrtc import find_nvrtc
    print("NVRTC:", find_nvrtc())
except RuntimeError as err:
    print("NVRTC:", err)
EOF
[[ -n "$PYTHON_WHY" ]] && SKIP_ALL="$PYTHON_WHY"
step devices 60 "$PY" -m fusegrad.device
[[ -n "$DEVICE_WHY" && -z "${SKIP_ALL:-}" ]] && SKIP_ALL="no $DEVICE device: $DEVICE_WHY"

if [[ "$DEVICE" == "CUDA" ]]; then
  RUNTIME_TESTS=(test/runtime/test_cuda.py)
else
  RUNTIME_TESTS=(test/runtime/test_cl.py -k "not beam")
fi
if [[ -n "$HAS_PYTEST" ]]; then
  step runtime-tests 120 env DEV="$DEVICE" "$PY" -m pytest -q -rs -p no:cacheprovider "${TIMEOUT_OPT[@]}" \
    "${RUNTIME_TESTS[@]}"
  step docs-gpu-page 90 env DEV="$DEVICE" "$PY" -m pytest -q -rs -p no:cacheprovider "${TIMEOUT_OPT[@]}" \
    test/docs/test_docs_examples.py -k "gpu.md"
else
  skip runtime-tests "pytest is not available: run tools/gpu_check.sh --prepare where it is and carry build/gpu_site"
  skip docs-gpu-page "pytest is not available"
fi

# a few training steps of a small GPT under TinyJit on the device; the first loss against the CPU device's when a C
# compiler is there (same seed, same weights), and the loss must fall
step gpt-train-step 120 "$PY" - "$DEVICE" <<'EOF'
import math, sys, time
import numpy as np
from fusegrad import Tensor, nn
from fusegrad.device import Device
from fusegrad.examples.gpt import GPT, GPTConfig, make_step
from fusegrad.helpers import Context

device = sys.argv[1]
config = GPTConfig(vocab_size=256, context=64, dim=128, heads=4, layers=2) if device == "CUDA" else \
    GPTConfig(vocab_size=64, context=16, dim=32, heads=2, layers=1)
ids = np.random.default_rng(0).integers(0, config.vocab_size, (8, config.context + 1))

def losses(dev: str, steps: int) -> list[float]:
    with Context(DEV=dev):
        Tensor.manual_seed(0)
        model = GPT(config)
        opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=3e-3)
        step = make_step(model, opt, None)
        x, y = Tensor(ids[:, :-1], device=dev), Tensor(ids[:, 1:], device=dev)
        ret = []
        for i in range(steps):
            start = time.perf_counter()
            ret.append(float(step(x, y).item()))
            print(f"{dev} step {i}: loss {ret[-1]:.5f} in {(time.perf_counter() - start) * 1e3:.1f} ms", flush=True)
        return ret

ours = losses(device, 8)
assert all(math.isfinite(x) for x in ours), f"non-finite loss on {device}: {ours}"
assert ours[-1] < ours[0], f"the loss did not fall on {device}: {ours}"
try:
    Device["CPU"]
except Exception as err:
    print(f"no CPU device to compare with ({type(err).__name__}: {err}); checked: finite, falling")
else:
    cpu = losses("CPU", 2)
    diff = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(ours[:2], cpu, strict=True))
    assert diff < 1e-3, f"{device} losses {ours[:2]} vs CPU {cpu}: relative difference {diff:.2e}"
    print(f"first two losses match the CPU device's to {diff:.1e}")
print(f"gpt train step on {device}: loss {ours[0]:.4f} -> {ours[-1]:.4f} in 8 steps")
EOF

if [[ "$DEVICE" == "CUDA" ]]; then
  step bench-gpu 240 "$PY" bench/gpu.py --seconds 0.3 --json "$OUT/bench.json"
else
  step bench-gpu 240 "$PY" bench/gpu.py --cl --seconds 0.05 --cases "matmul fp32" softmax --json "$OUT/bench.json"
fi

for ops in elementwise reduce movement; do
  if [[ -n "$HAS_PYTEST" ]]; then
    step "ops-$ops" 150 env DEV="$DEVICE" "$PY" -m pytest -q -p no:cacheprovider --maxfail 30 "${TIMEOUT_OPT[@]}" \
      "test/test_ops_$ops.py"
  else
    skip "ops-$ops" "pytest is not available"
  fi
done

if [[ "$MODE" == "dry" ]]; then
  say "== plan: the steps' limits add up to ${PLANNED}s; past the ${BUDGET}s budget the last steps get what is left"
fi
say "== summary: $((SECONDS - START))s of the ${BUDGET}s budget (rc 124/137: killed at its limit)"
cat "$SUMMARY" | tee -a "$LOG"
exit "$failed"
