"""NVRTC through ctypes: CUDA C++ -> PTX for one GPU architecture, without a GPU or a driver (`NVRTCCompiler`).

The library comes from the `nvidia-cuda-nvrtc` wheel (`pip install fusegrad[cuda]`), a CUDA toolkit
(/usr/local/cuda), or the loader's path; found on first use, so importing this module never touches the system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import pathlib
import sys

from fusegrad.device import CompileError, Compiler

__all__ = ["NVRTCCompiler", "find_nvrtc", "nvrtc"]


def _candidates() -> list[str]:
    """Where libnvrtc may be, best first: the pip wheels (CUDA 13, then 12), CUDA_PATH / /usr/local/cuda, the loader."""
    ret = []
    for site in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            ret += sorted(glob.glob(os.path.join(site, sub, "libnvrtc.so.*[0-9]")))
    for root in (os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        if root:
            ret += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")))
    if (found := ctypes.util.find_library("nvrtc")) is not None:
        ret.append(found)
    return [p for p in ret if "builtins" not in p and "alt" not in pathlib.Path(p).name]


@functools.cache
def find_nvrtc() -> str:
    """The path of a loadable libnvrtc; raises RuntimeError saying where it looked and how to install it."""
    tried = _candidates()
    for path in tried:
        try:
            ctypes.CDLL(path)
        except OSError:
            continue
        return path
    raise RuntimeError(
        "CUDA: NVRTC (libnvrtc) not found: install it with `pip install fusegrad[cuda]` (the nvidia-cuda-nvrtc wheel) "
        f"or a CUDA toolkit; looked in: {', '.join(tried) or 'site-packages/nvidia, /usr/local/cuda, the loader path'}"
    )


@functools.cache
def nvrtc() -> ctypes.CDLL:
    dll = ctypes.CDLL(find_nvrtc())
    dll.nvrtcGetErrorString.restype = ctypes.c_char_p
    return dll


def _check(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"CUDA: {call} failed: {nvrtc().nvrtcGetErrorString(status).decode()} ({status})")


def _log(prog: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    _check(nvrtc().nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
    buf = ctypes.create_string_buffer(size.value)
    _check(nvrtc().nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.value.decode(errors="replace")


def compile_to_ptx(src: str, arch: str, options: tuple[str, ...] = ()) -> bytes:
    """PTX text (NUL-terminated, as cuModuleLoadData takes it) of `src` for `arch` (e.g. sm_90).

    Raises CompileError with NVRTC's log and the source when it doesn't compile."""
    prog = ctypes.c_void_p()
    _check(nvrtc().nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None), "create")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"-default-device", *(o.encode() for o in options)]
        status = nvrtc().nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        if status != 0:
            log = _log(prog)
            raise CompileError(f"CUDA: NVRTC compile for {arch} failed:\n{log}\n{src}", src, log)
        size = ctypes.c_size_t()
        _check(nvrtc().nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(size.value)
        _check(nvrtc().nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        return ptx.raw
    finally:
        nvrtc().nvrtcDestroyProgram(ctypes.byref(prog))


class NVRTCCompiler(Compiler):
    """CUDA C++ -> PTX for `arch`; binaries cached per architecture. Needs no GPU (CI compiles every kernel)."""

    def __init__(self, arch: str = "sm_90") -> None:
        self.arch = arch
        super().__init__(f"compile_cuda_{arch}")

    def compile(self, src: str) -> bytes:
        return compile_to_ptx(src, self.arch)

    def check_usable(self) -> None:
        find_nvrtc()

    def disassemble(self, lib: bytes) -> None:
        print(lib.rstrip(b"\0").decode())
