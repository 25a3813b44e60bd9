"""A step's batch, as the cost model reads it: cuDNN's search runs every algorithm at the
batch a step is taken at (local_batch_size where set, else the global one), so a search's
price grows with it (estimate.ProbeCosts.batch_exponent)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuneup.config import TrainConfig


def batch_of(values: Mapping[str, Any], default: float | None = None) -> float | None:
    """The batch `values` set for a step (local_batch_size where set, else the global one,
    as conv_key reads it), else `default` (a whole configuration: TrainConfig's)."""
    for knob in ("local_batch_size", "global_batch_size"):
        own = values.get(knob)
        if isinstance(own, int | float) and not isinstance(own, bool) and own > 0:
            return float(own)
    return default


def config_batch(config: Mapping[str, Any]) -> float:
    """A whole configuration's batch (TrainConfig's default where it gives none)."""
    return batch_of(config, float(TrainConfig.global_batch_size)) or 1.0


def batch_over(config: Mapping[str, Any], base_batch: float | None) -> float:
    """A whole configuration's batch over the baseline's (1 where that is not known)."""
    return config_batch(config) / base_batch if base_batch else 1.0


def batch_ratio(values: Mapping[str, Any], batch: float | None, at: float | None = None) -> float:
    """`values`' batch over the baseline's `batch`; where they set none, the incumbent's
    (`at`: a stage's candidates run on it; the baseline's where not given). 1 where the
    baseline's is not known."""
    if not batch:
        return 1.0
    return (batch_of(values) or at or batch) / batch
