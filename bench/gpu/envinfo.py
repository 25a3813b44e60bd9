"""What the suite ran on, as one JSON line: host, GPU, driver, CUDA, torch, tuneup.

Run in its own process so the suite's driver never starts CUDA itself.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Any


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        pass
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 else None
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def collect() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        info["cudnn"] = (
            torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        )
        info["cuda_available"] = torch.cuda.is_available()
        if info["cuda_available"]:
            info["gpu_count"] = torch.cuda.device_count()
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(info["gpu_count"])]
            props = torch.cuda.get_device_properties(0)
            info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
            info["capability"] = f"{props.major}.{props.minor}"
    except Exception as exc:
        info["torch_error"] = f"{type(exc).__name__}: {exc}"
    info["driver"] = _driver()
    try:
        import tuneup

        info["tuneup"] = getattr(tuneup, "__version__", "unknown")
    except Exception as exc:
        info["tuneup_error"] = f"{type(exc).__name__}: {exc}"
    info["gpu"] = info["gpus"][0] if info.get("gpus") else None
    return info


if __name__ == "__main__":
    print(json.dumps(collect()), flush=True)
    sys.exit(0)
