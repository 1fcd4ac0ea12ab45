"""A fuzz worker child: reads one JSON program per line on stdin, runs it with fusegrad on the device its
environment names (DEV, NOOPT), and writes one JSON result per line on its own copy of stdout.

Started by test/fuzz/pool.py as `python -m test.fuzz.worker`; a crash here kills only this child.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from typing import Any


def run_one(program: dict[str, Any], device: str) -> dict[str, Any]:
    """The program's result as {"dtype", "shape", "data" (base64 bytes), "dtypes"} or {"error": type, "message"}."""
    from test.fuzz.program import run_fusegrad

    try:
        out, value_dtypes = run_fusegrad(program, device)
    except Exception as err:  # a clean error is a result too: every configuration must raise the same type
        return {"error": type(err).__name__, "message": str(err)[:500]}
    data = base64.b64encode(out.tobytes()).decode()
    return {"dtype": out.dtype.name, "shape": list(out.shape), "data": data, "dtypes": value_dtypes}


def main() -> None:
    # answers go to a private copy of stdout; anything else printing to fd 1 (a stray print) lands on stderr
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    device = os.environ.get("DEV", "CPU")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("abort"):  # the pool's own tests: a child that dies, or hangs, mid-program
            os.abort()
        if "sleep" in request:
            time.sleep(request["sleep"])
        answers.write(json.dumps(run_one(request, device)) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
