"""Checks that the data can be read, made before anything heavy (torch, the model) starts."""

from __future__ import annotations

from pathlib import Path

from tuneup.config import TrainConfig
from tuneup.errors import UsageError


def data_paths(cfg: TrainConfig) -> tuple[Path | None, Path | None]:
    """Train and validation files, redirected to `use_cache` when the tutorial's key is set."""

    def resolve(value: str | None) -> Path | None:
        if value is None:
            return None
        path = Path(value).expanduser()
        return Path(cfg.use_cache) / path.name if cfg.use_cache else path

    return resolve(cfg.train_path), resolve(cfg.val_path)


def check_data(cfg: TrainConfig, *, only_set: bool = False) -> None:
    """Fail before anything heavy starts when the data cannot be read.

    With `only_set`, paths left unset are not an error (the default run fills
    them with its synthetic box afterwards).
    """
    if cfg.data_loader_config == "dali-lowmem":
        raise UsageError(
            "data_loader_config=dali-lowmem: the DALI loader is not in this tuneup version yet; "
            "use lowmem or inmem"
        )
    if cfg.data_loader_config == "synthetic":
        return
    from tuneup.trainer.boxfile import inspect_box

    train, val = data_paths(cfg)
    needed = [("train_path", train)]
    if cfg.Nsamples_val > 0:
        needed.append(("val_path", val))
    for key, path in needed:
        if path is None:
            if only_set:
                continue
            raise UsageError(
                f"{key} is not set: give your HDF5 box (--set {key}=FILE) or make one with "
                "`tuneup data synth --out DIR`"
            )
        inspect_box(path)
