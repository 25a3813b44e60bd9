"""The knobs in words: the `tuneup train --help` epilog."""

from __future__ import annotations

from typing import Any

from tuneup.config.knobs import _field_default, knob_fields


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
