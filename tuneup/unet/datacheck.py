"""Checks that the data can be read, made before anything heavy (torch, the model) starts."""

from __future__ import annotations

from pathlib import Path

from tuneup.config import TrainConfig, loader
from tuneup.errors import DataFault, UsageError


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
    if not loader(cfg.data_loader_config).reads_files:
        return
    from tuneup.unet.boxfile import inspect_box  # h5py: only where files are read

    train, val = data_paths(cfg)
    needed = [("train_path", train)]
    if cfg.Nsamples_val > 0:
        needed.append(("val_path", val))
    if loader(cfg.data_loader_config).reads == "npy":
        # As the tutorial's DALI path, the .npy copies alone will do where both are named.
        named = dict(zip(("train_path", "val_path"), _named_npy(cfg), strict=True))
        needed = [(key, path) for key, path in needed if not named[key]]
    for key, path in needed:
        if path is None:
            if only_set:
                continue
            raise UsageError(
                f"{key} is not set: give your HDF5 box (--set {key}=FILE) or make one with "
                "`tuneup data synth --out DIR`"
            )
        inspect_box(path)
    if loader(cfg.data_loader_config).reads == "npy":
        _check_npy(cfg)


def _check_npy(cfg: TrainConfig) -> None:
    """DALI reads channels-last .npy copies: they must exist before a probe starts."""
    train_npy, val_npy = npy_copies(cfg)
    wanted = [train_npy] + ([val_npy] if cfg.Nsamples_val > 0 else [])
    from tuneup.unet.npy import npy_damage  # numpy: only where DALI's copies are read

    for (data, label), h5 in zip(wanted, data_paths(cfg), strict=False):
        for path in (data, label):
            if path is None:
                continue
            why = "missing" if not path.is_file() else npy_damage(path)
            if why:
                source = h5 or cfg.train_path or "FILE.h5"
                raise DataFault(
                    f"the dali loader reads channels-last .npy copies and {path} is {why}: "
                    f"make them again with `tuneup data convert {source} --out {path.parent}`"
                )


def _named_npy(cfg: TrainConfig) -> tuple[bool, bool]:
    """Whether the config names both .npy copies of the training, and of the validation, box."""
    return (
        bool(cfg.train_path_npy_data and cfg.train_path_npy_label),
        bool(cfg.val_path_npy_data and cfg.val_path_npy_label),
    )


def npy_copies(
    cfg: TrainConfig,
) -> tuple[tuple[Path | None, Path | None], tuple[Path | None, Path | None]]:
    """The .npy copies DALI reads, for train and validation.

    The tutorial's keys (`train_path_npy_data`, ...) win; otherwise the copies
    sit next to each HDF5 file as `<stem>_data.npy` and `<stem>_label.npy`, the
    names `tuneup data convert` writes.
    """
    train, val = data_paths(cfg)

    def pick(data: str | None, label: str | None, h5: Path | None) -> tuple[Path | None, ...]:
        if data and label:
            return Path(data).expanduser(), Path(label).expanduser()
        if h5 is None:
            return None, None
        return h5.with_name(f"{h5.stem}_data.npy"), h5.with_name(f"{h5.stem}_label.npy")

    return (
        pick(cfg.train_path_npy_data, cfg.train_path_npy_label, train),  # type: ignore[return-value]
        pick(cfg.val_path_npy_data, cfg.val_path_npy_label, val),
    )
