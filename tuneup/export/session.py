"""A finished session's exports: what its folder says, rendered in any format.

The one place `tuneup export` and the app read a results folder for export:
the recommended values, the hints (the preset's, with the probed layout and
job), the ranks and data boxes the recommendation was measured with, and for
the `command` trainer the user's own command section.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup_plugins.command import export as command_export

from tuneup.config import build_config
from tuneup.errors import UsageError
from tuneup.export.render import FORMATS, render
from tuneup.export.slurm import hints_from_session
from tuneup.export.tutorial import SC22, TutorialRun
from tuneup.probe.journal import ResultsDir


@dataclass(frozen=True)
class SessionExport:
    """What a session's exports are made of.

    Attributes:
        command: the `command` trainer's section as the session ran it; None for
            tuneup's own trainer.
    """

    values: dict[str, Any]
    hints: dict[str, Any] = field(default_factory=dict)
    run: TutorialRun | None = None
    command: dict[str, Any] | None = None
    source: str = "command"

    @property
    def formats(self) -> tuple[str, ...]:
        return command_export.COMMAND_FORMATS if self.command is not None else FORMATS


def read_session_export(folder: Path) -> SessionExport:
    """The export inputs of the finished session in `folder`.

    Raises:
        UsageError: not a results folder, an unfinished or damaged session, or a
            command session whose command section cannot be found.
    """
    results = ResultsDir(folder)
    session = results.session()
    values = results.summary()["recommendation"]["values"]
    command = None
    source = str(session.get("preset_source") or session.get("preset") or "command")
    if session.get("trainer") == "command":
        command = _command_section(session, source)
    return SessionExport(
        values=dict(values),
        hints=hints_from_session(session),
        run=tutorial_run(session, values),
        command=command,
        source=source,
    )


def _command_section(session: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The section the session recorded; an older session's comes from its preset."""
    recorded = session.get("command")
    if isinstance(recorded, Mapping):
        return dict(recorded)
    from tuneup.preset.load import load_preset

    preset = load_preset(source)
    if preset.command is None:
        raise UsageError(
            f"cannot export the command: session.json records none and preset {source} "
            "has no command section"
        )
    return dict(preset.command)


def render_session(export: SessionExport, fmt: str, edition: str = SC22) -> str:
    """One format of a session's export.

    Raises:
        UsageError: a format the session has no meaning for, or bad values or hints.
    """
    if export.command is None:
        if fmt not in FORMATS:
            raise UsageError(
                f"--format {fmt} is for a session that tuned your own command (trainer "
                f"'command'); this one tuned tuneup's U-Net: choose one of {', '.join(FORMATS)}"
            )
        return render(fmt, export.values, hints=export.hints, run=export.run, edition=edition)
    from tuneup_plugins.command.adapter import parse_command_section

    spec = parse_command_section(export.command, export.source)
    cfg = build_config(export.values, source="the exported config")
    return command_export.render(fmt, spec, export.values, cfg, export.hints)


def tutorial_run(session: Mapping[str, Any], values: Mapping[str, Any]) -> TutorialRun:
    """The ranks the session measured with, and the box sides of the user's data files.

    tuneup's own synthetic box (in its cache folder) is not the user's data: the
    export then names the tutorial's boxes and leaves the paths to set.
    """
    from tuneup.bundled import cache_dir

    launch = session.get("launch") or {}
    world = launch.get("world_size") if isinstance(launch, Mapping) else None
    paths = [values.get(key) for key in ("train_path", "val_path")]
    cache = cache_dir().resolve()
    synthetic = any(p and Path(p).resolve().is_relative_to(cache) for p in paths)
    sides = [_box_side(Path(p)) if p and not synthetic else None for p in paths]
    train, val = sides
    return TutorialRun(
        world_size=int(world) if isinstance(world, int) else 1,
        box_size=(train, val) if train is not None and val is not None else None,
        synthetic=synthetic,
    )


def _box_side(path: Path) -> int | None:
    from tuneup.trainer.boxfile import inspect_box

    try:
        return inspect_box(path).box
    except UsageError:  # moved or unreadable since the session: the tutorial's boxes stand
        return None
