"""fusegrad: a lazy Tensor whose computation is a UOp graph, rewritten by rule tables into fused kernels.

`from fusegrad import Tensor, Device, dtypes` is all most programs need; see README.md for the pipeline.
"""

from fusegrad.device import Device
from fusegrad.dtype import dtypes
from fusegrad.engine.jit import TinyJit
from fusegrad.helpers import Context, GlobalCounters, fetch, getenv, raise_gc_threshold
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import UOp

Variable = UOp.variable
raise_gc_threshold()  # an eager step's graph nodes make no cycles: see helpers.raise_gc_threshold

__all__ = ["Context", "Device", "GlobalCounters", "Tensor", "TinyJit", "UOp", "Variable", "dtypes", "fetch", "getenv"]
