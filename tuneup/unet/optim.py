"""The Adam implementations the tutorial compared: multi-tensor, fused, and NVIDIA apex."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch


def apex_fused_adam() -> type | None:
    """apex.optimizers.FusedAdam when NVIDIA apex is importable, else None."""
    try:
        from apex.optimizers import FusedAdam  # type: ignore[import-not-found]
    except Exception:
        return None
    return FusedAdam


def build_optimizer(
    params: Iterable[torch.nn.Parameter],
    impl: str,
    lr: float,
    device_type: str,
    *,
    capturable: bool = False,
) -> torch.optim.Optimizer:
    """Adam as `impl` says; apex falls back to torch's fused Adam with a message.

    `capturable` keeps the step and learning rate on the device so the update
    can live inside a CUDA graph.
    """
    params = list(params)
    if impl == "apex":
        fused_adam = apex_fused_adam() if device_type == "cuda" else None
        if fused_adam is not None and not capturable:
            return fused_adam(params, lr=lr, adam_w_mode=False, set_grad_none=True)
        why = (
            "NVIDIA apex is not importable (build it from github.com/NVIDIA/apex)"
            if device_type == "cuda" and fused_adam is None
            else "apex FusedAdam needs CUDA without graph capture"
        )
        print(f"tuneup: {why}; using torch.optim.Adam(fused=True)", file=sys.stderr)
        impl = "fused"
    kwargs: dict[str, Any] = {}
    if capturable:
        kwargs["capturable"] = True
        lr_value: Any = torch.tensor(lr, device=params[0].device)
    else:
        lr_value = lr
    if impl == "fused":
        return torch.optim.Adam(params, lr=lr_value, fused=True, **kwargs)
    return torch.optim.Adam(params, lr=lr_value, foreach=True, **kwargs)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Change the learning rate in place (a device tensor inside CUDA graphs)."""
    for group in optimizer.param_groups:
        current = group["lr"]
        if isinstance(current, torch.Tensor):
            current.fill_(lr)
        else:
            group["lr"] = lr
