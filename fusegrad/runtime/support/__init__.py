"""Support code for the runtimes: compiler wrappers (compiler_cpu.py) and ctypes glue to system libraries."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Mapping
from typing import Any


def load_library(
    short: str, fallback: str, signatures: Mapping[str, tuple[Any, list[Any]]], missing: str
) -> ctypes.CDLL:
    """Open a system library (`ctypes.util.find_library(short)`, else `fallback`) and declare each function's
    (restype, argtypes). Raises RuntimeError with `missing` (formatted with `name` and `err`) when it can't open."""
    name = ctypes.util.find_library(short) or fallback
    try:
        dll = ctypes.CDLL(name)
    except OSError as err:
        raise RuntimeError(missing.format(name=name, err=err)) from err
    for fn, (restype, argtypes) in signatures.items():
        getattr(dll, fn).restype, getattr(dll, fn).argtypes = restype, argtypes
    return dll
