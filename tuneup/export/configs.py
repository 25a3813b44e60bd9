"""tuneup's own config export: every knob as flat YAML with its help.

The tutorial's YAML block and command line are tuneup.export.tutorial.
Knob names, defaults and help come from tuneup.config (the single source of truth).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from tuneup.config import TrainConfig, knob_fields


def scalar(value: Any) -> str:
    """One value in YAML flow syntax, on one line, that reads back as the same value
    (quotes 'on', '1', ...).

    Text with a line break or another control character (a path someone named so)
    is written double-quoted with escapes, as JSON writes it, which YAML reads back
    the same: a value never spills onto a line of its own, where it would be a key.
    """
    if isinstance(value, str) and not value.isprintable():
        return json.dumps(value)
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
    one = text.removesuffix("\n...\n").rstrip("\n")
    if "\n" in one:  # a list holding such text
        return json.dumps(value)
    return one


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
