"""The NPY device: numpy arrays as buffers, without copying. It stores host memory, it doesn't compute.

`Buffer("NPY", a.size, dtype, opaque=a)` wraps the memory of a C-contiguous array `a` (any other array is copied
once, by `np.ascontiguousarray`). A tensor over such a buffer is copied to a compute device only when `.to("CPU")` is
realized, so writes to the array before then are seen, and writes after are not. Copies into NPY get fresh host memory.
"""

from __future__ import annotations

from fusegrad.device import Compiled, MallocAllocator


class NpyDevice(Compiled):
    def __init__(self, device: str) -> None:
        # host memory like CPU's, so copies to and from it are one memcpy; no renderer, compiler or runtime
        super().__init__(device, MallocAllocator(self), None, None, None)
