"""The trainer's configuration: every knob declared once, and how configs are built.

One module per concern: `knobs` (TrainConfig, each knob's default, type, choices
and help in its field's metadata), `loaders` (the data loaders and their
properties), `coerce` (plain values to a checked TrainConfig), `files` (YAML,
the tutorial's format and `--set`) and `help` (the knobs in words). Import from
here.
"""

from tuneup.config.coerce import build_config
from tuneup.config.files import apply_overrides, load_config, load_values, parse_override, read_yaml
from tuneup.config.help import describe_knobs
from tuneup.config.knobs import (
    GRAPHING_COMPILE_MODES,
    LR_SCHEDULE_CHOICES,
    LR_SCHEDULE_DEFAULT,
    MAX_LEVELS,
    WEIGHT_INIT_CHOICES,
    WEIGHT_INIT_DEFAULT,
    TrainConfig,
    data_path_knobs,
    first_uses,
    knob,
    knob_fields,
    knob_names,
    process_kind,
    unset_value,
)
from tuneup.config.loaders import (
    INPUT_CHANNELS,
    LOADER_CHOICES,
    LOADERS,
    TUTORIAL_BOXES,
    Boxes,
    Loader,
    box_bytes,
    loader,
    loader_round,
    sample_bytes,
)

__all__ = [
    "GRAPHING_COMPILE_MODES",
    "INPUT_CHANNELS",
    "LOADERS",
    "LOADER_CHOICES",
    "LR_SCHEDULE_CHOICES",
    "LR_SCHEDULE_DEFAULT",
    "MAX_LEVELS",
    "TUTORIAL_BOXES",
    "WEIGHT_INIT_CHOICES",
    "WEIGHT_INIT_DEFAULT",
    "Boxes",
    "Loader",
    "TrainConfig",
    "apply_overrides",
    "box_bytes",
    "build_config",
    "data_path_knobs",
    "describe_knobs",
    "first_uses",
    "knob",
    "knob_fields",
    "knob_names",
    "load_config",
    "load_values",
    "loader",
    "loader_round",
    "parse_override",
    "process_kind",
    "read_yaml",
    "sample_bytes",
    "unset_value",
]
