"""`tuneup presets list` and `tuneup presets show NAME`: what presets exist and what one holds."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from tuneup.errors import ExitCode
from tuneup.hardware.machine import machine_info
from tuneup.preset.load import (
    list_presets,
    load_preset,
    preset_warnings,
    preset_yaml,
    user_presets_dir,
)


def list_lines(entries: list[Any]) -> list[str]:
    """One line per preset: name, origin, description, in aligned columns."""
    rows = []
    for entry in entries:
        text = entry.description if entry.error is None else f"does not load: {entry.error}"
        if entry.shadowed:
            text = f"shadowed by the bundled {entry.name}: load it by its path. {text}"
        rows.append((entry.name, entry.origin, text))
    name_w = max((len(r[0]) for r in rows), default=0)
    origin_w = max((len(r[1]) for r in rows), default=0)
    return [f"{n:<{name_w}}  {o:<{origin_w}}  {d}".rstrip() for n, o, d in rows]


def run_presets_list(*, environ: Mapping[str, str] | None = None, out: TextIO | None = None) -> int:
    """Print every preset, bundled then the user's; a broken user preset says why."""

    out = out or sys.stdout
    entries = list_presets(environ)
    for line in list_lines(entries):
        print(line, file=out)
    if not any(e.origin.startswith("user") for e in entries):
        print(f"tuneup: no user presets in {user_presets_dir(environ)}", file=sys.stderr)
    return ExitCode.OK


def run_presets_show(
    name: str,
    *,
    machine: Any = None,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the preset as it will be used (YAML) and where it came from; warnings on stderr.

    Args:
        name: a preset name or a path to a YAML file.
        machine: the MachineInfo to check it against; this machine's when None.
    """

    out = out or sys.stdout
    err = err or sys.stderr
    preset = load_preset(name, environ=environ)
    if machine is None:
        machine = machine_info()
    print(f"# preset {preset.name} ({preset.origin})", file=out)
    print(preset_yaml(preset), end="", file=out)
    for warning in preset_warnings(preset, machine):
        print(f"tuneup: warning: {warning}", file=err)
    return ExitCode.OK
