"""The configs the U-Net trainer refuses, each declared once.

`tuneup train` and the probe worker refuse them as they build a run; a probe
session asks the same questions of its baseline and candidates before the first
probe (the `unet` adapter's `refusal`), so a config no run could train is one
line at once, not two baseline timeouts and a word about the node. Pure: no
torch, no files; the box side comes in as a value.
"""

from __future__ import annotations

from tuneup.config import TrainConfig
from tuneup.config.loaders import loader

SYNTHETIC_BOX_MAX = 256
"""Cap on the synthetic box side: a 1024^3 random box of 9 float32 channels
would take 36 GiB of host memory, while 256^3 (0.6 GB) already spans many
64^3 crops, so the crop-and-rotate I/O pattern is the same."""


def ranks_problem(global_batch: int, local_override: int | None, world_size: int) -> str | None:
    """Why the global batch cannot be shared out over the ranks; None when it can."""
    if local_override is None and global_batch < world_size:
        return (
            f"global_batch_size {global_batch} is smaller than the {world_size} ranks: "
            f"raise it or set local_batch_size"
        )
    return None


def samples_problem(n_samples: int, local_batch: int, world_size: int) -> str | None:
    """Why an epoch of `n_samples` over the ranks holds no full step; None when it does."""
    if (n_samples // max(1, world_size)) // max(1, local_batch) > 0:
        return None
    batch = local_batch * world_size
    return (
        f"Nsamples {n_samples} gives no full batch of {batch} per step: raise Nsamples to "
        f"at least {batch} or lower global_batch_size to at most {n_samples}"
    )


def crop_problem(crop: int, box: int, where: str) -> str | None:
    """Why a crop does not fit the box it is cut from; None when it does."""
    if crop > box:
        return (
            f"crop {crop} is larger than the box side {box} of {where}; "
            f"choose a crop of at most {box}"
        )
    return None


def config_problem(cfg: TrainConfig, world_size: int, box: int | None = None) -> str | None:
    """The first refusal of `cfg` on `world_size` ranks, None when the trainer would start.

    Args:
        cfg: a checked config (tuneup.config.build_config).
        world_size: the ranks it trains on.
        box: the side of the training box its loader reads (a data file's); None:
            not known here (the synthetic loader's own box is always known).
    """
    problem = ranks_problem(cfg.global_batch_size, cfg.local_batch_size, world_size)
    if problem is not None:
        return problem
    batch = cfg.local_batch_size or cfg.global_batch_size // world_size
    problem = samples_problem(cfg.Nsamples, batch, world_size)
    if problem is not None:
        return problem
    if not loader(cfg.data_loader_config).reads_files:
        side = min(cfg.box_size[0], SYNTHETIC_BOX_MAX)
        return crop_problem(cfg.data_size, side, "the synthetic data")
    if box is not None:
        return crop_problem(cfg.data_size, box, "the training data")
    return None
