"""TrainConfig: every knob of the trainer, declared once in its field's metadata.

Each knob's default, type, allowed values and help text live in one place and are
rendered from there into CLI help, YAML exports and the app.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuneup.config.loaders import LOADER_CHOICES

# The tutorial's full_scale depth (64^3 crops come down to 1^3); its blocks are named
# conv_down1..6 and conv_up6..2, so a deeper model would not be the tutorial's.
MAX_LEVELS = 6

_MISSING = object()


def knob(
    default: Any,
    help: str,
    *,
    choices: Iterable[Any] | None = None,
    group: str = "training",
    tutorial: bool = False,
    per_process: bool = False,
    moves_data: bool = False,
    first_use_s: Mapping[Any, float] | None = None,
    unset: Any = _MISSING,
) -> Any:
    """Declare a config field with its help, allowed values and group.

    Args:
        default: the value used when nothing sets the knob (copied for mutables).
        help: one line shown in `tuneup train --help` and exports.
        choices: allowed values, when the knob is an enumeration.
        group: heading the knob is listed under.
        tutorial: True for keys kept only so the tutorial's YAML loads unchanged.
        per_process: read once, or kept, by a process: probes that differ in it never
            share a worker process.
        moves_data: what the loader delivers, or how it reaches the device, depends on
            it (the IO phase measures it again); every knob of the "data" group does.
        first_use_s: what a value's first use in a session costs beyond its steps, as
            a guess until measured (torch.compile's cold compile): a time budget keeps
            room for it before such a probe starts.
        unset: the value that means "not set: the library picks" (intra_op_threads' 0):
            a variable a command trainer maps the knob to is then left as it is.
    """
    metadata = {
        "help": help,
        "choices": tuple(choices) if choices is not None else None,
        "group": group,
        "tutorial": tutorial,
        "per_process": per_process,
        "moves_data": moves_data or group == "data",
        "first_use_s": dict(first_use_s or {}),
        "unset": unset,
    }
    if isinstance(default, (dict, list)):
        return field(default_factory=functools.partial(_deep_copy, default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _field_default(f: dataclasses.Field[Any]) -> Any:
    """A knob's default, made fresh where it is a factory (dicts and lists)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    factory = f.default_factory
    return factory() if callable(factory) else None


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


# torch.compile modes that capture CUDA graphs themselves (inductor's cudagraphs).
GRAPHING_COMPILE_MODES = ("reduce-overhead", "max-autotune")
LR_SCHEDULE_DEFAULT = {"scaling": "sqrt", "start_lr": 2e-4, "end_lr": 0.0, "warmup_steps": 128}
LR_SCHEDULE_CHOICES: dict[str, tuple[str, ...]] = {"scaling": ("none", "sqrt", "linear")}
WEIGHT_INIT_DEFAULT = {"conv_init": "normal", "conv_scale": 0.02, "conv_bias": 0.0}
WEIGHT_INIT_CHOICES: dict[str, tuple[str, ...]] = {"conv_init": ("normal",)}


@dataclass
class TrainConfig:
    """Every knob of the U-Net trainer, with tutorial key names where the tutorial had one."""

    # model
    full_scale: bool = knob(
        True, "all 6 U-Net levels (False: the tutorial's 5-level variant)", group="model"
    )
    levels: int | None = knob(
        None, "U-Net levels; overrides full_scale (tests use 3-4)", group="model"
    )
    width: int = knob(
        64, "channels of the first U-Net level (doubles per level, capped at 8x)", group="model"
    )
    N_out_channels: int = knob(5, "output channels (the Hydro fields)", group="model")
    data_size: int = knob(
        64, "side of the cubic crops fed to the model", group="model", moves_data=True
    )
    weight_init: dict = knob(
        WEIGHT_INIT_DEFAULT, "conv weights ~ normal(0, conv_scale), biases conv_bias", group="model"
    )
    lambda_rho: float = knob(
        0.0, "weight of the extra L1 term on exp(14 x) of channel 0", group="model"
    )

    # training
    global_batch_size: int = knob(64, "samples per step over all ranks", moves_data=True)
    base_batch_size: int = knob(64, "batch size the learning rate was tuned for")
    local_batch_size: int | None = knob(
        None, "per-rank batch; overrides global_batch_size", moves_data=True
    )
    Nsamples: int = knob(65536, "training samples per epoch")
    Nsamples_val: int = knob(8192, "validation samples per epoch")
    num_epochs: int = knob(10, "epochs to run")
    max_steps: int | None = knob(None, "stop after this many training steps (a step budget)")
    max_seconds: float | None = knob(None, "stop after this many seconds of training")
    lr_schedule: dict = knob(
        LR_SCHEDULE_DEFAULT,
        "cosine decay from start_lr to end_lr; "
        "scaling none|sqrt|linear by global/base batch with linear warm-up",
    )
    seed: int = knob(0, "seed of weights, crops and rotations (fixed-seed losses are comparable)")
    log_every: int = knob(10, "steps between metrics lines (the loss is read back this often)")

    # data
    data_loader_config: str = knob(
        "lowmem", "how samples are loaded", choices=LOADER_CHOICES, group="data"
    )
    train_path: str | None = knob(None, "HDF5 training box (Nbody, Hydro)", group="data")
    val_path: str | None = knob(None, "HDF5 validation box", group="data")
    box_size: list = knob(
        [1024, 512], "box sides (train, val); the synthetic loader uses the first", group="data"
    )
    num_data_workers: int = knob(2, "DataLoader worker processes per rank", group="data")
    pin_memory: bool = knob(True, "page-locked host batches (CUDA only)", group="data")
    persistent_workers: bool = knob(False, "keep loader workers alive across epochs", group="data")
    prefetch_factor: int | None = knob(
        None, "batches each worker loads ahead (torch default 2)", group="data"
    )
    dali_prefetch: int = knob(
        2, "batches DALI prepares ahead (its prefetch queue depth)", group="data"
    )
    non_blocking: bool = knob(
        True,
        "asynchronous host-to-device copies of pinned batches, the next one overlapping the "
        "step on a side stream (CUDA only)",
        group="data",
    )

    # performance
    device: str = knob(
        "auto",
        "where to train",
        choices=("auto", "cpu", "cuda"),
        group="performance",
        per_process=True,
        moves_data=True,
    )
    amp_mode: str = knob(
        "none", "automatic mixed precision", choices=("none", "fp16", "bf16"), group="performance"
    )
    tf32: bool = knob(
        True,
        "TF32 tensor cores for float32 matmuls and convolutions (off sets NVIDIA_TF32_OVERRIDE=0)",
        group="performance",
    )
    optimizer_impl: str = knob(
        "foreach", "Adam implementation", choices=("foreach", "fused", "apex"), group="performance"
    )
    jit: str = knob(
        "none",
        "compile the model",
        choices=("none", "script", "compile"),
        group="performance",
        # a cold torch.compile of the U-Net (gpu-ladder.md's time box); scripting, seconds
        first_use_s={"compile": 60.0, "script": 5.0},
    )
    compile_mode: str = knob(
        "default",
        "torch.compile mode",
        choices=("default", "reduce-overhead", "max-autotune"),
        group="performance",
    )
    cuda_graphs: bool = knob(
        False, "capture forward, backward and step in a CUDA graph", group="performance"
    )
    channels_last: bool = knob(
        False, "channels_last_3d memory format", group="performance", moves_data=True
    )
    intra_op_threads: int = knob(
        0,
        "torch's intra-op threads per rank (0: what torch picks); loader workers keep one each",
        group="performance",
        unset=0,
    )
    cudnn_benchmark: bool = knob(
        True,
        "let cuDNN pick the fastest convolution algorithms",
        group="performance",
        # cuDNN's algorithm cache, filled by benchmarking, is consulted with the flag off too.
        per_process=True,
    )

    # distributed
    bucket_cap_mb: int = knob(25, "DDP gradient bucket size in MB", group="distributed")
    broadcast_buffers: bool = knob(
        True, "DDP broadcasts buffers every step (the model has none)", group="distributed"
    )
    gradient_as_bucket_view: bool = knob(
        False, "DDP gradients are views into the buckets", group="distributed"
    )
    noddp: bool = knob(
        False,
        "several ranks but no gradient communication (measures its cost)",
        group="distributed",
    )

    # the tutorial's keys, accepted so its YAML loads unchanged
    enable_amp: bool = knob(
        False, "tutorial: same as amp_mode=fp16", group="tutorial", tutorial=True
    )
    enable_apex: bool = knob(
        False, "tutorial: same as optimizer_impl=apex", group="tutorial", tutorial=True
    )
    enable_jit: bool = knob(False, "tutorial: same as jit=script", group="tutorial", tutorial=True)
    enable_benchy: bool = knob(
        False,
        "tutorial: benchy timing (tuneup probe measures IO, SYNTHETIC and FULL itself)",
        group="tutorial",
        tutorial=True,
    )
    expdir: str | None = knob(
        None, "tutorial: experiment log folder", group="tutorial", tutorial=True
    )
    use_cache: str | None = knob(
        None,
        "tutorial: folder holding copies of the data files",
        group="tutorial",
        tutorial=True,
        moves_data=True,
    )
    train_path_npy_data: str | None = knob(
        None,
        "channels-last Nbody copy for DALI",
        group="tutorial",
        tutorial=True,
        moves_data=True,
    )
    train_path_npy_label: str | None = knob(
        None,
        "channels-last Hydro copy for DALI",
        group="tutorial",
        tutorial=True,
        moves_data=True,
    )
    val_path_npy_data: str | None = knob(
        None, "channels-last validation Nbody for DALI", group="tutorial", tutorial=True
    )
    val_path_npy_label: str | None = knob(
        None, "channels-last validation Hydro for DALI", group="tutorial", tutorial=True
    )

    @property
    def unet_levels(self) -> int:
        """Levels of the U-Net: `levels` when set, else 6 or 5 from `full_scale`."""
        if self.levels is not None:
            return self.levels
        return 6 if self.full_scale else 5

    def to_dict(self) -> dict[str, Any]:
        """Every knob as plain data (for JSON, YAML and the journal)."""
        return {f.name: _deep_copy(getattr(self, f.name)) for f in dataclasses.fields(self)}


_NESTED_CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "lr_schedule": LR_SCHEDULE_CHOICES,
    "weight_init": WEIGHT_INIT_CHOICES,
}
_NESTED_DEFAULTS = {"lr_schedule": LR_SCHEDULE_DEFAULT, "weight_init": WEIGHT_INIT_DEFAULT}


def knob_fields() -> tuple[dataclasses.Field, ...]:
    """The declared knobs, in declaration order."""
    return dataclasses.fields(TrainConfig)


def knob_names() -> tuple[str, ...]:
    return tuple(f.name for f in knob_fields())


def first_uses(values: Mapping[str, Any]) -> dict[tuple[str, Any], float]:
    """The (knob, value) pairs of `values` whose first use costs extra, with that cost."""
    found = {}
    for f in knob_fields():
        costs = f.metadata["first_use_s"]
        value = values.get(f.name, _field_default(f))
        if costs and _hashable(value) and value in costs:
            found[(f.name, value)] = float(costs[value])
    return found


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def process_kind(values: Mapping[str, Any]) -> dict[str, Any]:
    """What a worker process that runs `values` is bound to: probes of another kind never
    share it. A knob missing from `values` counts at its default."""
    return {
        f.name: values.get(f.name, _field_default(f))
        for f in knob_fields()
        if f.metadata["per_process"]
    }


def data_path_knobs() -> tuple[str, ...]:
    """Knobs the IO phase depends on: a probe that keeps them all measures no new IO."""
    return tuple(f.name for f in knob_fields() if f.metadata["moves_data"])


def unset_value(name: str) -> Any:
    """The value of knob `name` that means "not set" (`knob(unset=...)`); a sentinel no
    value equals where the knob has none."""
    for f in knob_fields():
        if f.name == name:
            return f.metadata.get("unset", _MISSING)
    return _MISSING
