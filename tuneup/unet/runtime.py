"""Process-wide switches that must be set before the model is built (device, TF32, seeds)."""

from __future__ import annotations

import os
import random
import warnings
from dataclasses import dataclass

from tuneup.errors import UsageError

TF32_ENV = "NVIDIA_TF32_OVERRIDE"


def set_tf32_env(enabled: bool, environ: dict[str, str] | None = None) -> None:
    """Set NVIDIA_TF32_OVERRIDE=0 when TF32 is off.

    The CUDA libraries read it once, when CUDA starts, so this must run before
    anything touches the GPU: `tuneup train` and the probe worker call it first.
    """
    env = os.environ if environ is None else environ
    if not enabled:
        env[TF32_ENV] = "0"
    elif env.get(TF32_ENV) == "0":
        del env[TF32_ENV]


def apply_backend_flags(tf32: bool, cudnn_benchmark: bool) -> None:
    """Set torch's TF32 and cuDNN switches; warns if TF32-off came after CUDA started."""
    import torch  # torch: the worker imports this before it may start CUDA

    cuda_started = torch.cuda.is_available() and torch.cuda.is_initialized()
    if not tf32 and cuda_started and os.environ.get(TF32_ENV) != "0":
        warnings.warn(
            f"CUDA started before {TF32_ENV}=0 was set: cuBLAS/cuDNN may still use TF32",
            stacklevel=2,
        )
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.benchmark = cudnn_benchmark


_TORCH_THREADS: list[int] = []  # what torch picked in this process, read once


def torch_threads() -> int:
    """The intra-op threads torch picked when this process started (its own count)."""
    import torch

    if not _TORCH_THREADS:
        _TORCH_THREADS.append(torch.get_num_threads())
    return _TORCH_THREADS[0]


def capped_threads(threads: int, cap: int | None) -> int:
    """The intra-op threads a config asks for under a cap (ProbeSpec.threads_cap): its own
    count where it sets one, else torch's own, lowered to the cap; 0 (torch's own) where
    the cap lowers nothing."""
    if threads > 0 or not cap:
        return threads
    return cap if cap < torch_threads() else 0


def apply_threads(threads: int) -> int:
    """Set torch's intra-op threads (0: what torch picked when this process started, so a
    serving worker's next probe is not left with the last one's); returns the count set.
    DataLoader workers run one thread each (torch sets it in each worker)."""
    import torch

    own = torch_threads()  # read before any count is set: torch's own, kept for 0
    chosen = threads if threads > 0 else own
    if torch.get_num_threads() != chosen:
        torch.set_num_threads(chosen)
    return chosen


@dataclass(frozen=True)
class DeviceChoice:
    """Where the run happens: `type` is "cpu" or "cuda"; `index` the local GPU."""

    type: str
    index: int = 0

    @property
    def name(self) -> str:
        return "cpu" if self.type == "cpu" else f"cuda:{self.index}"


def choose_device(requested: str, local_rank: int, cuda_available: bool) -> DeviceChoice:
    """Resolve `device: auto|cpu|cuda` against what the machine has."""
    if requested == "cuda" and not cuda_available:
        raise UsageError(
            "device=cuda but no CUDA GPU is visible: run on a GPU node or set device=cpu"
        )
    if requested == "cpu" or (requested == "auto" and not cuda_available):
        return DeviceChoice("cpu")
    return DeviceChoice("cuda", local_rank)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch so a fixed seed gives a fixed loss curve."""
    import numpy as np  # torch: the worker imports this before it may start CUDA
    import torch  # torch: the worker imports this before it may start CUDA

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
