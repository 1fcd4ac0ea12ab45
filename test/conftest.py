"""Test-suite set-up: lets the tests import fusegrad from this checkout when it is not installed."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("fusegrad") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
