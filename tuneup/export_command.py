"""`tuneup export DIR --format F`: render a finished session's recommendation."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuneup.errors import ExitCode, UsageError


def run_export_command(folder: Path, fmt: str, output: Path | None, edition: str = "sc22") -> int:
    from tuneup.export import render
    from tuneup.export.slurm import hints_from_session
    from tuneup.probe.journal import ResultsDir

    results = ResultsDir(folder)
    session = results.session()
    summary = results.summary()
    values = summary["recommendation"]["values"]
    # The probed layout and the probe's job, so the script asks for what was measured.
    text = render(
        fmt,
        values,
        hints=hints_from_session(session),
        run=tutorial_run(session, values),
        edition=edition,
    )
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        print(f"wrote {output}", file=sys.stderr)
    return ExitCode.OK


def tutorial_run(session: Mapping[str, Any], values: Mapping[str, Any]) -> Any:
    """The ranks the session measured with, and the box sides of the user's data files.

    tuneup's own synthetic box (in its cache folder) is not the user's data: the
    export then names the tutorial's boxes and leaves the paths to set.
    """
    from tuneup.bundled import cache_dir
    from tuneup.export.tutorial import TutorialRun

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
