"""Automatic mixed precision: which autocast dtype, and whether a GradScaler is needed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

AMP_DTYPES = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Precision:
    """The AMP policy of a run; fp16 needs a scaler, bf16 keeps float32's range."""

    mode: str
    device_type: str
    dtype: torch.dtype | None
    scaler: Any | None  # torch.amp.GradScaler

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.dtype is None:
            yield
            return
        with torch.autocast(self.device_type, dtype=self.dtype):
            yield


def build_precision(amp_mode: str, device_type: str) -> Precision:
    """Make the policy for `amp_mode` on `device_type` ("cpu" or "cuda")."""
    dtype = AMP_DTYPES[amp_mode]
    scaler = torch.amp.GradScaler(device_type) if amp_mode == "fp16" else None
    return Precision(amp_mode, device_type, dtype, scaler)
