"""tuneup's own config export: every knob as flat YAML with its help.

The tutorial's YAML block and command line are tuneup.export.tutorial.
Knob names, defaults and help come from tuneup.config (the single source of truth).
"""

from __future__ import annotations

from typing import Any

import yaml

from tuneup.config import TrainConfig, knob_fields


def scalar(value: Any) -> str:
    """One value in YAML flow syntax that reads back as the same value (quotes 'on', '1', ...)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
    return text.removesuffix("\n...\n").rstrip("\n")


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
