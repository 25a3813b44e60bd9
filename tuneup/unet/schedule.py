"""The tutorial's learning-rate schedule: batch-size scaling, linear warm-up, cosine decay."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def initial_lr(start_lr: float, scaling: str, global_batch: int, base_batch: int) -> float:
    """The peak learning rate after scaling by the global/base batch ratio."""
    ratio = global_batch / base_batch
    if scaling == "sqrt":
        return math.sqrt(ratio) * start_lr
    if scaling == "linear":
        return ratio * start_lr
    if scaling == "none":
        return start_lr
    raise ValueError(f"lr scaling must be none, sqrt or linear, got {scaling!r}")


def lr_at(
    step: int,
    *,
    total_steps: int,
    global_batch: int,
    base_batch: int,
    scaling: str = "sqrt",
    start_lr: float = 2e-4,
    end_lr: float = 0.0,
    warmup_steps: int = 128,
) -> float:
    """Learning rate at 1-based `step` of a run of `total_steps`.

    Warm-up only happens when the batch was scaled up (global > base and a
    scaling rule is set); the cosine then spans the steps left after warm-up,
    so the run ends at `end_lr` (the tutorial's code divided by the whole run
    and stopped short of it).
    """
    peak = initial_lr(start_lr, scaling, global_batch, base_batch)
    total = max(total_steps, 1)
    if global_batch > base_batch and scaling != "none" and warmup_steps > 0:
        if step < warmup_steps:
            return step / warmup_steps * peak
        progress = (step - warmup_steps) / max(total - warmup_steps, 1)
    else:
        progress = step / total
    progress = min(max(progress, 0.0), 1.0)
    return end_lr + 0.5 * (peak - end_lr) * (1.0 + math.cos(math.pi * progress))


def schedule_for(
    lr_schedule: Mapping[str, Any], *, total_steps: int, global_batch: int, base_batch: int
) -> LrSchedule:
    """Bind a config's `lr_schedule` block to one run."""
    return LrSchedule(dict(lr_schedule), total_steps, global_batch, base_batch)


class LrSchedule:
    """A schedule bound to a run: call it with the step number."""

    def __init__(
        self, params: dict[str, Any], total_steps: int, global_batch: int, base_batch: int
    ) -> None:
        self.params = params
        self.total_steps = total_steps
        self.global_batch = global_batch
        self.base_batch = base_batch

    def __call__(self, step: int) -> float:
        return lr_at(
            step,
            total_steps=self.total_steps,
            global_batch=self.global_batch,
            base_batch=self.base_batch,
            **self.params,
        )
