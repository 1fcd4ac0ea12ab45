"""Test-suite set-up: lets the tests import fusegrad from this checkout when it is not installed."""

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

if importlib.util.find_spec("fusegrad") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# HYPOTHESIS_PROFILE=ci (.ci/run sets it): every property test draws the same examples on every run and keeps no
# example database, so a red CI is reproducible and never a roll of the dice; locally the examples stay random (and the
# local database replays failures) so new cases keep being found
settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _training_mode_off() -> Iterator[None]:
    """Every test starts and ends outside training mode: one that switches `Tensor.training` on by assignment cannot
    leak it into the later tests of its worker (optimiser and JIT tests check the mode)."""
    from fusegrad import Tensor

    Tensor.training = False
    yield
    Tensor.training = False


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Every test ends with os.environ as it began. The reference system writes DEV=<its default> into the environment
    the first time it picks a device (CL where PoCL is installed); fusegrad reads DEV at call time, so one test that
    built a reference tensor ran the later tests of its worker on CL, and their subprocesses (mpiexec ranks) too."""
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)
