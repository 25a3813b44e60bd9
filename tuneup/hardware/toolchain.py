"""What torch.compile needs besides torch: a C compiler, and on CUDA Triton and libcuda.

Inductor compiles generated C++ (CPU) or Triton kernels (CUDA); Triton builds a
small C launcher and links against the driver's libcuda.so. Where one of them is
missing, a compile probe fails after a minute of work: this says so before it starts.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_COMPILERS = ("cc", "gcc", "clang")
_LIBCUDA_GLOBS = (
    "/usr/lib/x86_64-linux-gnu/libcuda.so*",
    "/usr/lib64/libcuda.so*",
    "/usr/lib/aarch64-linux-gnu/libcuda.so*",
    "/usr/local/cuda/compat/libcuda.so*",
    "/usr/lib/wsl/lib/libcuda.so*",
)


@dataclass(frozen=True)
class Toolchain:
    """The compile toolchain found on this machine."""

    c_compiler: str | None  # the path of $CC or the first of cc, gcc, clang on PATH
    triton: bool  # importable
    libcuda: str | None  # where the driver library was found


def find_toolchain(
    which: Callable[[str], str | None] = shutil.which,
    env: Mapping[str, str] | None = None,
    find_spec: Callable[[str], Any] = importlib.util.find_spec,
    find_library: Callable[[str], str | None] = ctypes.util.find_library,
    globber: Callable[[str], list[str]] = glob.glob,
) -> Toolchain:
    """Look for the compiler, Triton and libcuda; every source is injectable for tests."""
    environ = os.environ if env is None else env
    compiler = None
    wanted = environ.get("CC")
    for name in ([wanted] if wanted else []) + list(_COMPILERS):
        compiler = which(name)
        if compiler:
            break
    try:
        triton = find_spec("triton") is not None
    except (ImportError, ValueError):
        triton = False
    libcuda = find_library("cuda")
    if libcuda is None:
        extra = environ.get("TRITON_LIBCUDA_PATH")
        patterns = ([os.path.join(extra, "libcuda.so*")] if extra else []) + list(_LIBCUDA_GLOBS)
        hits = [hit for pattern in patterns for hit in sorted(globber(pattern))]
        libcuda = hits[0] if hits else None
    return Toolchain(compiler, triton, libcuda)


def compile_blocker(toolchain: Toolchain, device_is_cuda: bool) -> str | None:
    """Why torch.compile cannot run here, in one line with the fix; None when it can."""
    if toolchain.c_compiler is None:
        return "torch.compile needs a C compiler: none on PATH (install gcc, or set CC)"
    if not device_is_cuda:
        return None
    if not toolchain.triton:
        return "torch.compile on CUDA needs Triton: not importable (pip install triton)"
    if toolchain.libcuda is None:
        return (
            "Triton needs the driver's libcuda.so: not found (set TRITON_LIBCUDA_PATH "
            "to its folder, or run ldconfig)"
        )
    return None
