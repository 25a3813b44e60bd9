"""A finished session's exports: what its folder says, rendered in any format.

The one place `tuneup export` and the app read a results folder for export:
the recommended values, the hints (the preset's, with the probed layout and
job), the ranks and data boxes the recommendation was measured with, and the
trainer's own preset section. A trainer that declares exports of its own (the
`command` trainer: the user's command) renders them through its adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.bundled import cache_dir
from tuneup.errors import UsageError
from tuneup.export.notes import answer_notes, export_notes, with_comments
from tuneup.export.render import FORMATS, render
from tuneup.export.report import REPORT, render_report
from tuneup.export.slurm import hints_from_session
from tuneup.export.tutorial import SC22, TUTORIAL_FORMATS, TutorialRun
from tuneup.preset.load import load_preset
from tuneup.probe.targets import TUTORIAL
from tuneup.trainers.adapters import DEFAULT_TRAINER, TrainerAdapter, load_trainer, scan_trainers
from tuneup.tuning.results.journal import SUMMARY, ResultsDir, quoted
from tuneup.tuning.results.profile_traces import read_again
from tuneup.tuning.results.summary import Summary, TargetAnswer
from tuneup.tuning.results.targets import target_answers


@dataclass(frozen=True)
class SessionExport:
    """What a session's exports are made of.

    Attributes:
        adapter: the trainer the session measured with; its own `exports`, when
            it declares any, replace tuneup's formats. None: tuneup's formats
            (no session, or its trainer is no longer installed).
        section: the trainer's preset section as the session ran it (the
            `command` trainer's `command:`); None when it has none.
        source: the session's preset (a name or path), for messages.
    """

    values: dict[str, Any]
    hints: dict[str, Any] = field(default_factory=dict)
    run: TutorialRun | None = None
    adapter: TrainerAdapter | None = None
    section: dict[str, Any] | None = None
    source: str = ""
    summary: Mapping[str, Any] = field(default_factory=dict)
    folder_name: str = ""
    folder: str = "DIR"  # the session's folder, shell-quoted, for the commands notes name
    # Each target's answer (tuning.results.targets): the tutorial's formats carry the
    # tutorial's own; () for an export of bare values (no session).
    answers: tuple[TargetAnswer, ...] = ()

    @property
    def formats(self) -> tuple[str, ...]:
        own = tuple(self.adapter.exports) if self.adapter is not None else ()
        return own or FORMATS

    def answer_for(self, fmt: str) -> TargetAnswer | None:
        """The answer format `fmt` carries: the tutorial's for its YAML block and flags,
        else the trainer's own (the first); None without a session."""
        if not self.answers:
            return None
        wanted = TUTORIAL.name if fmt in TUTORIAL_FORMATS else None
        return next((a for a in self.answers if a.target == wanted), self.answers[0])

    def values_for(self, fmt: str) -> dict[str, Any]:
        answer = self.answer_for(fmt)
        return dict(answer.values) if answer is not None and answer.values else dict(self.values)

    def file_name(self, fmt: str) -> str | None:
        """The file the trainer's own export `fmt` is written to; None for tuneup's formats."""
        return self.adapter.exports.get(fmt) if self.adapter is not None else None


def read_session_export(folder: Path) -> SessionExport:
    """The export inputs of the finished session in `folder`.

    Raises:
        UsageError: not a results folder, an unfinished or damaged session, or a
            command session whose command section cannot be found.
    """
    results = ResultsDir(folder)
    session = results.session()
    recommendation = results.summary().recommendation
    values = recommendation.values
    if not recommendation.recorded:
        raise UsageError(
            f"{folder / SUMMARY} has no recommended values: nothing to export "
            "(run the session again)"
        )
    trainer = str(session.get("trainer") or DEFAULT_TRAINER)
    source = str(session.get("preset_source") or session.get("preset") or trainer)
    adapter = _installed(trainer)
    section = None
    if adapter is not None and adapter.section and adapter.exports:
        section = _trainer_section(session, trainer, source)
    summary = results.summary()
    answers = (
        target_answers(summary, adapter.own_target, adapter.targets) if adapter is not None else ()
    )
    return SessionExport(
        values=dict(values),
        hints=hints_from_session(session),
        run=tutorial_run(session, values),
        adapter=adapter,
        section=section,
        source=source,
        summary=read_again(summary.document, Path(folder)),  # profiles from their traces
        folder_name=Path(folder).name,
        folder=quoted(Path(folder)),
        answers=answers,
    )


def _installed(trainer: str) -> TrainerAdapter | None:
    """The session's trainer; None when it is no longer installed (its values are knobs all
    the same, which tuneup's own formats render)."""
    try:
        return load_trainer(trainer)
    except UsageError:
        return None


def _trainer_section(
    session: Mapping[str, Any], trainer: str, source: str
) -> dict[str, Any] | None:
    """The section the session recorded; an older session's comes from its preset."""
    recorded = session.get(trainer)
    if isinstance(recorded, Mapping):
        return dict(recorded)
    return load_preset(source).sections.get(trainer)


def render_session(export: SessionExport, fmt: str, edition: str = SC22) -> str:
    """One format of a session's export, with what it leaves out as comments where the
    format takes them (`session_notes`).

    Raises:
        UsageError: a format the session has no meaning for, or bad values or hints.
    """
    if fmt == REPORT:  # the session's report, whatever its trainer
        return render_report(export.summary, export.folder_name, export.answers)
    adapter = export.adapter
    if adapter is not None and adapter.exports:
        return adapter.render_export(
            fmt, export.section, export.values, export.hints, export.source
        )
    if fmt not in FORMATS:
        _refuse_anothers_format(fmt, adapter)
    values = export.values_for(fmt)
    text = render(fmt, values, hints=export.hints, run=export.run, edition=edition)
    return with_comments(text, fmt, session_notes(export, fmt))


def session_notes(export: SessionExport, fmt: str) -> list[str]:
    """What the export of `export` as `fmt` leaves out, or that it is the unchanged
    baseline: one line each, for stderr (export.notes)."""
    if fmt == REPORT or not export.summary:
        return []  # the report says it all; an export without a session has nothing to say
    recommendation = Summary.from_document(export.summary).recommendation
    own = export.adapter is not None and bool(export.adapter.exports)
    answer = export.answer_for(fmt)
    changes = recommendation.changes if answer is None or own else answer.changes
    notes = export_notes(
        fmt, changes, recommendation.headline, own_format=own, folder=export.folder
    )
    return [*answer_notes(answer, export.answers, export.folder), *notes] if not own else notes


def _refuse_anothers_format(fmt: str, adapter: TrainerAdapter | None) -> None:
    """Raise when `fmt` is another trainer's own format (render() refuses any other)."""
    adapters, _broken = scan_trainers()
    owner = next((a for a in adapters.values() if fmt in a.exports), None)
    if owner is None:
        return
    this = f"this one tuned {adapter.tunes}" if adapter is not None else "this one did not"
    raise UsageError(
        f"--format {fmt} is for a session that tuned {owner.tunes} (trainer '{owner.name}'); "
        f"{this}: choose one of {', '.join(FORMATS)}"
    )


def tutorial_run(session: Mapping[str, Any], values: Mapping[str, Any]) -> TutorialRun:
    """The ranks the session measured with, and the box sides of the user's data files.

    tuneup's own synthetic box (in its cache folder) is not the user's data: the
    export then names the tutorial's boxes and leaves the paths to set.
    """

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
    from tuneup.unet.boxfile import inspect_box  # h5py: only to read a user's box

    try:
        return inspect_box(path).box
    except UsageError:  # moved or unreadable since the session: the tutorial's boxes stand
        return None
