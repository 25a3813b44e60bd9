"""TrainConfig: every knob of the trainer, declared once, and how configs are loaded.

Each knob's default, type, allowed values and help text live in one place (the
field's metadata) and are rendered from there into CLI help, YAML exports and
the app. Loading accepts tuneup's flat YAML and the tutorial's own format
(named blocks, ``<<: *base`` merge keys) unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tuneup.errors import UsageError, did_you_mean

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
    """
    metadata = {
        "help": help,
        "choices": tuple(choices) if choices is not None else None,
        "group": group,
        "tutorial": tutorial,
        "per_process": per_process,
        "moves_data": moves_data or group == "data",
        "first_use_s": dict(first_use_s or {}),
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


INPUT_CHANNELS = 4  # the N-body fields of the tutorial's data (Nbody: 4 x L^3)
# torch.compile modes that capture CUDA graphs themselves (inductor's cudagraphs).
GRAPHING_COMPILE_MODES = ("reduce-overhead", "max-autotune")
LOADER_CHOICES = ("lowmem", "inmem", "synthetic", "dali-lowmem", "gpu")
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


def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(TrainConfig)


def _type_label(tp: Any) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    base = args[0] if args else tp
    name = getattr(base, "__name__", str(base))
    return f"{name} or null" if args else name


def _float_or_none(text: str) -> float | None:
    """YAML 1.1 reads `1e-3` (no dot) as a string; accept it as the number it means."""
    try:
        return float(text)
    except ValueError:
        return None


def _coerce(key: str, value: Any, tp: Any, choices: tuple[Any, ...] | None) -> Any:
    """Check one value against its declared type and choices; return it normalised."""
    optional = type(None) in typing.get_args(tp)
    base = next((a for a in typing.get_args(tp) if a is not type(None)), tp)
    if optional and isinstance(value, str) and value in ("None", "null", "~"):
        value = None  # the tutorial writes `use_cache: None`, which YAML reads as a string
    if value is None:
        if optional:
            return None
        raise UsageError(f"config key '{key}' cannot be null: give a {_type_label(tp)}")
    if base is bool:
        if isinstance(value, str) and value.lower() in ("on", "off", "true", "false", "yes", "no"):
            value = value.lower() in ("on", "true", "yes")
        if not isinstance(value, bool):
            raise UsageError(f"config key '{key}' must be true or false (or on/off), got {value!r}")
    elif base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"config key '{key}' must be an integer, got {value!r}")
    elif base is float:
        if isinstance(value, str):
            value = _float_or_none(value) if _float_or_none(value) is not None else value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"config key '{key}' must be a number, got {value!r}")
        value = float(value)
    elif base is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise UsageError(f"config key '{key}' must be a string, got {value!r}")
    elif base is list:
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list):
            raise UsageError(f"config key '{key}' must be a list, got {value!r}")
    elif base is dict:
        return _coerce_nested(key, value)
    if choices is not None and value not in choices:
        valid = ", ".join(str(c) for c in choices)
        raise UsageError(f"config key '{key}': {value!r} is not one of {valid}")
    return value


def _coerce_nested(key: str, value: Any) -> dict[str, Any]:
    """Validate a nested block (lr_schedule, weight_init) key by key over its defaults."""
    if not isinstance(value, Mapping):
        raise UsageError(f"config key '{key}' must be a mapping, got {value!r}")
    defaults = _NESTED_DEFAULTS[key]
    merged = dict(defaults)
    for sub, sub_value in value.items():
        if sub not in defaults:
            raise UsageError(
                f"unknown key '{key}.{sub}': {did_you_mean(sub, defaults)}"
                f"valid keys are {', '.join(defaults)}"
            )
        default = defaults[sub]
        tp = type(default) if not isinstance(default, float) else float
        merged[sub] = _coerce(f"{key}.{sub}", sub_value, tp, _NESTED_CHOICES[key].get(sub))
    return merged


def _check_consistency(cfg: TrainConfig) -> None:
    """Rules that span several knobs; a knob's own type and choices are checked earlier."""
    positive = (
        "width",
        "data_size",
        "global_batch_size",
        "base_batch_size",
        "Nsamples",
        "num_epochs",
        "N_out_channels",
        "bucket_cap_mb",
        "log_every",
        "dali_prefetch",
    )
    for name in positive:
        if getattr(cfg, name) <= 0:
            raise UsageError(f"config key '{name}' must be positive, got {getattr(cfg, name)}")
    for name in ("max_steps", "local_batch_size", "levels", "prefetch_factor"):
        value = getattr(cfg, name)
        if value is not None and value <= 0:
            raise UsageError(f"config key '{name}' must be positive or null, got {value}")
    if cfg.num_data_workers < 0:
        raise UsageError("config key 'num_data_workers' must be 0 or more")
    if cfg.Nsamples_val < 0:
        raise UsageError("config key 'Nsamples_val' must be 0 or more")
    if not 1 <= cfg.unet_levels <= MAX_LEVELS:
        raise UsageError(
            f"config key 'levels' must be 1 to {MAX_LEVELS} (the tutorial's full_scale "
            f"depth), got {cfg.unet_levels}"
        )
    if cfg.data_size % (2**cfg.unet_levels) != 0:
        step = 2**cfg.unet_levels
        raise UsageError(
            f"data_size {cfg.data_size} does not fit a {cfg.unet_levels}-level U-Net: "
            f"use a multiple of {step} (e.g. data_size={max(step, cfg.data_size // step * step)})"
        )
    if len(cfg.box_size) not in (1, 2) or not all(
        isinstance(b, int) and b > 0 for b in cfg.box_size
    ):
        raise UsageError(f"config key 'box_size' must be [train, val] sides, got {cfg.box_size}")
    if cfg.cuda_graphs and cfg.jit == "compile" and cfg.compile_mode in GRAPHING_COMPILE_MODES:
        raise UsageError(
            f"cuda_graphs and compile_mode={cfg.compile_mode} both capture CUDA graphs: pick one"
        )
    if cfg.cuda_graphs and cfg.amp_mode == "fp16":
        raise UsageError(
            "cuda_graphs cannot capture the fp16 GradScaler's checks: use amp_mode=bf16 "
            "or cuda_graphs=false"
        )


_ALIAS_OF = {"amp_mode": "enable_amp", "optimizer_impl": "enable_apex", "jit": "enable_jit"}


def _apply_tutorial_aliases(values: dict[str, Any]) -> None:
    """Map the tutorial's enable_* switches onto the knobs that replaced them."""
    if values.get("enable_amp") and values.get("amp_mode", "none") == "none":
        values["amp_mode"] = "fp16"
    if values.get("enable_apex") and values.get("optimizer_impl", "foreach") == "foreach":
        values["optimizer_impl"] = "apex"
    if values.get("enable_jit") and values.get("jit", "none") == "none":
        values["jit"] = "script"
    for legacy in ("enable_amp", "enable_apex", "enable_jit"):
        values[legacy] = False


def build_config(values: Mapping[str, Any], *, source: str = "config") -> TrainConfig:
    """Validate a mapping of knob values (over the defaults) into a TrainConfig.

    Raises:
        UsageError: an unknown key, a wrong type or a value outside its choices,
            as one line naming the key and what would be valid.
    """
    fields = {f.name: f for f in knob_fields()}
    types = _field_types()
    checked: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            raise UsageError(
                f"unknown config key '{key}' in {source}: {did_you_mean(key, fields)}"
                "`tuneup train --help` lists every key"
            )
        checked[key] = _coerce(key, value, types[key], fields[key].metadata["choices"])
    _apply_tutorial_aliases(checked)
    cfg = TrainConfig(**checked)
    _check_consistency(cfg)
    return cfg


def parse_override(text: str) -> tuple[str, Any]:
    """Split one `--set key=value` (value in YAML syntax; `a.b=v` reaches a nested key)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--set expects key=value, got {text!r} (e.g. --set amp_mode=bf16)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_overrides(values: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of `values` with every `--set key=value` applied in order."""
    merged = _deep_copy(dict(values))
    for text in overrides:
        key, value = parse_override(text)
        head, dot, sub = key.partition(".")
        if head not in knob_names():
            raise UsageError(
                f"unknown config key '{head}' in --set: {did_you_mean(head, knob_names())}"
                "`tuneup train --help` lists every key"
            )
        if dot:
            if head not in _NESTED_DEFAULTS:
                raise UsageError(f"'{key}': only lr_schedule.* and weight_init.* have sub-keys")
            block = dict(merged.get(head) or {})
            block[sub] = value
            merged[head] = block
        else:
            merged[key] = value
            if key in _ALIAS_OF:  # an explicit modern knob beats the file's enable_* switch
                merged[_ALIAS_OF[key]] = False
    return merged


def read_yaml(path: Path) -> Any:
    """Read a YAML file; a missing or malformed file is a one-line UsageError."""
    if not path.is_file():
        raise UsageError(f"config file not found: {path}")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UsageError(f"{path}{where}: {problem}") from None


def _looks_like_named_blocks(data: Mapping[str, Any]) -> bool:
    names = set(knob_names())
    return bool(data) and all(k not in names and isinstance(v, Mapping) for k, v in data.items())


def load_values(path: Path, name: str | None = None) -> dict[str, Any]:
    """Knob values from a tuneup YAML file, or from block `name` of a tutorial-format file.

    The tutorial's files hold named blocks (``base: &base``, ``short: <<: *base``);
    PyYAML resolves the merge keys, so a block arrives complete.
    """
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise UsageError(f"{path}: expected a mapping of config keys at the top level")
    if name is not None:
        if name not in data:
            blocks = ", ".join(str(k) for k in data) or "none"
            raise UsageError(f"no config named '{name}' in {path}: it has {blocks}")
        block = data[name]
        if not isinstance(block, Mapping):
            raise UsageError(f"config '{name}' in {path} is not a mapping of keys")
        return dict(block)
    if _looks_like_named_blocks(data):
        blocks = ", ".join(str(k) for k in data)
        raise UsageError(
            f"{path} holds named configs ({blocks}): pick one with "
            f"--yaml_config {path} --config NAME"
        )
    return dict(data)


def load_config(
    path: Path | None = None,
    name: str | None = None,
    overrides: Iterable[str] = (),
    base: Mapping[str, Any] | None = None,
) -> TrainConfig:
    """Load, override and validate: the whole path from files and flags to a TrainConfig."""
    values: dict[str, Any] = dict(base or {})
    source = "config"
    if path is not None:
        values.update(load_values(path, name))
        source = f"{path}" + (f" [{name}]" if name else "")
    return build_config(apply_overrides(values, overrides), source=source)


def describe_knobs() -> str:
    """Every knob with its default and help, grouped: the `tuneup train --help` epilog."""
    lines: list[str] = []
    group = None
    for f in knob_fields():
        meta = f.metadata
        if meta["group"] != group:
            group = meta["group"]
            lines.append(f"{group} knobs:")
        default = _field_default(f)
        choices = f" [{'|'.join(str(c) for c in meta['choices'])}]" if meta["choices"] else ""
        lines.append(f"  {f.name}={_render(default)}{choices}  {meta['help']}")
    return "\n".join(lines)


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_render(v)}" for k, v in value.items()) + "}"
    return str(value)
