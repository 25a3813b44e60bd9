"""Checks a probe's config must pass before it starts: what would kill it for certain,
and what the trainer itself would refuse (TrainerAdapter.refusal).

Pure: the machine's facts come in as values (tuneup.cluster.shm reads them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tuneup.cluster.shm import shm_shortfall
from tuneup.config import build_config, loader, sample_bytes
from tuneup.errors import UsageError
from tuneup.trainers.adapters import TrainerAdapter
from tuneup.unet.distributed import local_batch

if TYPE_CHECKING:
    from tuneup.config import TrainConfig


def batch_bytes(cfg: TrainConfig, ranks_per_node: int = 1) -> int:
    """Bytes of one rank's host batch: input and target crops in float32."""

    batch = local_batch(cfg.global_batch_size, cfg.local_batch_size, max(1, ranks_per_node))
    return batch * sample_bytes(cfg.data_size, cfg.N_out_channels)


def loader_shm_problem(
    values: Mapping[str, Any], ranks_per_node: int, shm_free: int | None
) -> str | None:
    """Why the loader workers of `values` would not fit in /dev/shm; None when they do.

    A config that does not build is left to the config check, which says why.
    """
    if shm_free is None:
        return None

    try:
        cfg = build_config(dict(values), source="the probe config")
        per_batch = batch_bytes(cfg, ranks_per_node)
    except UsageError:
        return None
    if not loader(cfg.data_loader_config).shared_memory:
        return None
    workers = cfg.num_data_workers * max(1, ranks_per_node)
    return shm_shortfall(shm_free, per_batch, workers, cfg.prefetch_factor)


def refuse_baseline(
    adapter: TrainerAdapter, preset: str, values: Mapping[str, Any], world_size: int, *, data: bool
) -> None:
    """Stop a session whose baseline its trainer would refuse, before anything is made or run.

    Raises:
        UsageError: the trainer's one line, naming the preset.
    """
    refused = adapter.refusal(values, world_size, data=data)
    if refused is not None:
        raise UsageError(
            f"preset {preset}: the {adapter.name} trainer would refuse its config: {refused}"
        )
