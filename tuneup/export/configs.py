"""Config exports: the tutorial's YAML block, tuneup's flat YAML, and command-line flags.

Pure functions of a validated TrainConfig. Knob names, defaults and help come
from tuneup.config (the single source of truth); the tutorial's flags come
from tuneup.cli, which declares what `tuneup train` accepts.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from tuneup.config import TrainConfig, knob_fields

# The keys of the tutorial's YAML (its `base` block, SC22 edition), which its
# train.py reads; `enable_amp` is the SC21 edition's switch for fp16.
TUTORIAL_KEYS = (
    "weight_init",
    "lambda_rho",
    "full_scale",
    "global_batch_size",
    "base_batch_size",
    "Nsamples",
    "Nsamples_val",
    "num_epochs",
    "amp_mode",
    "enable_amp",
    "enable_apex",
    "enable_benchy",
    "enable_jit",
    "expdir",
    "lr_schedule",
    "data_loader_config",
    "box_size",
    "data_size",
    "num_data_workers",
    "N_out_channels",
    "train_path",
    "val_path",
    "train_path_npy_data",
    "train_path_npy_label",
    "val_path_npy_data",
    "val_path_npy_label",
    "use_cache",
)

# Tutorial switches derived from the knobs that replaced them.
_LEGACY = ("enable_amp", "enable_apex", "enable_jit")
YAML_BLOCK = "tuned"


def scalar(value: Any) -> str:
    """One value in YAML flow syntax that reads back as the same value (quotes 'on', '1', ...)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
    return text.removesuffix("\n...\n").rstrip("\n")


def defaults() -> dict[str, Any]:
    return TrainConfig().to_dict()


def tutorial_view(cfg: TrainConfig) -> dict[str, Any]:
    """The tutorial's keys for `cfg`, its enable_* switches set from tuneup's knobs."""
    values = cfg.to_dict()
    values["enable_amp"] = cfg.amp_mode == "fp16"
    values["enable_apex"] = cfg.optimizer_impl == "apex"
    values["enable_jit"] = cfg.jit == "script"
    return {key: values[key] for key in TUTORIAL_KEYS}


def changed_knobs(cfg: TrainConfig) -> dict[str, Any]:
    """Knobs whose value differs from the default, in declaration order."""
    base = defaults()
    return {k: v for k, v in cfg.to_dict().items() if v != base[k] and k not in _LEGACY}


def _tutorial_needs(cfg: TrainConfig) -> set[str]:
    """Path keys the tutorial's train.py opens for this loader (tuneup can do without them)."""
    needed = {"expdir"}
    if cfg.data_loader_config == "dali-lowmem":
        needed |= {f"{s}_path_npy_{k}" for s in ("train", "val") for k in ("data", "label")}
    elif cfg.data_loader_config != "synthetic":
        needed |= {"train_path", "val_path"}
    return needed


def render_yaml(cfg: TrainConfig) -> str:
    """A `tuned: &tuned` block in the tutorial's format, loadable by both train scripts."""
    lines = [
        "# tuneup: the tuned configuration as a block of the tutorial's config file.",
        f"#   tuneup train --yaml_config FILE --config {YAML_BLOCK}",
        f"#   python train.py --yaml_config FILE --config {YAML_BLOCK}   (the tutorial)",
        f"{YAML_BLOCK}: &{YAML_BLOCK}",
    ]
    needed = _tutorial_needs(cfg)
    for key, value in tutorial_view(cfg).items():
        note = "  # set this for the tutorial's train.py" if value is None and key in needed else ""
        lines.append(f"  {key}: {scalar(value)}{note}")
    extra = {k: v for k, v in changed_knobs(cfg).items() if k not in TUTORIAL_KEYS}
    if extra:
        lines.append("  # tuneup's own knobs (the tutorial's train.py ignores them)")
        lines.extend(f"  {key}: {scalar(value)}" for key, value in extra.items())
    return "\n".join(lines) + "\n"


def render_tuneup(cfg: TrainConfig) -> str:
    """Every knob as flat YAML with its help, for `tuneup train --config FILE`."""
    lines = ["# tuneup: the full training configuration; tuneup train --config FILE"]
    values = cfg.to_dict()
    group = None
    for f in knob_fields():
        if f.metadata["group"] != group:
            group = f.metadata["group"]
            lines.append(f"\n# {group}")
        lines.append(f"{f.name}: {scalar(values[f.name])}  # {f.metadata['help']}")
    return "\n".join(lines) + "\n"


def flag_tokens(cfg: TrainConfig) -> list[str]:
    """Arguments for `tuneup train` that turn the default config into `cfg`.

    The tutorial's own flags where one exists (its train.py accepts them on top
    of its `base` block, whose values are tuneup's defaults), `--set key=value`
    for everything else.
    """
    from tuneup.cli import TUTORIAL_FLAGS, TUTORIAL_VALUE_FLAGS

    changed = changed_knobs(cfg)
    tokens: list[str] = []
    switches = {"amp_mode": ("fp16", "--enable_amp"), "optimizer_impl": ("apex", "--enable_apex")}
    switches["jit"] = ("script", "--enable_jit")
    for knob, (value, flag) in switches.items():
        if changed.get(knob) == value:
            tokens.append(flag)
            del changed[knob]
    for flag, (knob, text) in TUTORIAL_FLAGS.items():
        if knob in changed and changed[knob] == yaml.safe_load(text):
            tokens.append(flag)
            del changed[knob]
    for name in TUTORIAL_VALUE_FLAGS:
        if name in changed and changed[name] is not None:
            tokens += [f"--{name}", str(changed.pop(name))]
    base = defaults()
    for key, value in changed.items():
        if isinstance(value, dict):  # only the sub-keys that changed
            tokens += [
                item
                for sub, sub_value in value.items()
                if sub_value != base[key].get(sub)
                for item in ("--set", f"{key}.{sub}={scalar(sub_value)}")
            ]
        else:
            tokens += ["--set", f"{key}={scalar(value)}"]
    return tokens


def render_flags(cfg: TrainConfig) -> str:
    """The flags as one shell-quoted line."""
    return shlex.join(flag_tokens(cfg)) + "\n"
