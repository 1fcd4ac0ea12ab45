#!/usr/bin/env bash
# The GPU check (issue 15), for a machine with an NVIDIA GPU, its driver and a CUDA toolkit (NVRTC), python3 with numpy
# and torch, and no network: installs nothing. Lists the devices, runs the `gpu` tests (when pytest is importable; else
# a direct smoke test), a DEV=CUDA subset of the op tests, and bench/gpu.py, each under its own time limit so the
# whole stays under 8 minutes. Everything goes to one log: gpu_check.log (or $GPU_CHECK_LOG); the summary is its tail.
# Usage: bash tools/gpu_check.sh   (from anywhere; run in the repository it lives in)
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${GPU_CHECK_LOG:-gpu_check.log}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's fusegrad, not an installed one
: >"$LOG"
status=()

# run NAME SECONDS CMD...: one step, its output appended to the log, its result recorded for the summary
run() {
  local name="$1" limit="$2"
  shift 2
  echo "== $name (limit ${limit}s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  status+=("$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
  tail -n 15 "$LOG"
}

run "nvidia-smi" 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
run "versions" 60 "$PY" -c "import sys, numpy, torch; print(sys.version); print('numpy', numpy.__version__, \
'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
run "python -m fusegrad.device" 120 "$PY" -m fusegrad.device
if "$PY" -c "import pytest" 2>/dev/null; then
  run "gpu tests" 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu test/runtime/test_cuda.py -rs
  run "DEV=CUDA elementwise ops" 120 env DEV=CUDA "$PY" -m pytest -q -x -p no:cacheprovider \
    test/test_ops_elementwise.py -k "float32 or binary"
else
  echo "pytest is not installed: a direct smoke test instead of the test files" | tee -a "$LOG"
  run "gpu smoke" 150 "$PY" - <<'EOF'
import numpy as np
from fusegrad import Tensor
a = np.random.default_rng(0).standard_normal((512, 384)).astype(np.float32)
t = Tensor(a, device="CUDA")
np.testing.assert_allclose((t @ t.T).numpy(), a @ a.T, rtol=1e-4, atol=1e-3)
np.testing.assert_allclose(t.sum(1).numpy(), a.sum(1), rtol=1e-5, atol=1e-4)
np.testing.assert_allclose(t.softmax(1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(t.half().exp().numpy(), np.exp(a.astype(np.float16)), rtol=2e-3, atol=2e-3)
print("CUDA smoke: matmul, sum, softmax, half exp match numpy")
EOF
fi
run "bench/gpu.py" 240 "$PY" bench/gpu.py --seconds 0.5

echo "== summary (rc 124: over its time limit)" | tee -a "$LOG"
printf '%s\n' "${status[@]}" | tee -a "$LOG"
