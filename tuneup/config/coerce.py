"""Building a TrainConfig from plain values: type coercion, the tutorial's aliases, and
the checks across knobs, each problem one line naming the knob and the fix."""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from typing import Any

from tuneup.config.knobs import (
    _NESTED_CHOICES,
    _NESTED_DEFAULTS,
    GRAPHING_COMPILE_MODES,
    MAX_LEVELS,
    TrainConfig,
    knob_fields,
)
from tuneup.errors import UsageError, did_you_mean


def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(TrainConfig)


def _type_label(tp: Any) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    base = args[0] if args else tp
    name = getattr(base, "__name__", str(base))
    return f"{name} or null" if args else name


def is_finite(value: float) -> bool:
    """Whether a number is one a float holds and finite: NaN, infinity and an integer
    too large for a float are no figure."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


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
        if not is_finite(value):  # YAML's .nan and .inf, 1e400, an integer past a float
            raise UsageError(f"config key '{key}' must be a finite number, got {value!r}")
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
    if cfg.intra_op_threads < 0:
        raise UsageError("config key 'intra_op_threads' must be 0 (torch's choice) or more")
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
