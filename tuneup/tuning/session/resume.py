"""A stopped session, assembled again from its folder to continue where it stopped.

session.json records everything the session ran with (preset as resolved and its
document, trainer, stages, search, seed, budget, layout, the base config with its
data paths), so a session continues on the same data whichever front end started
it and whichever resumes it. A damaged or deleted session.json is rebuilt from
the journal and the preset given again; a preset file moved away is read from the
copy session.json keeps.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tuneup.cluster.job import JobEnv, describe, read_job_env
from tuneup.cluster.launch import LaunchPlan
from tuneup.cluster.leftovers import describe as describe_processes
from tuneup.cluster.leftovers import find_leftovers, stop_leftovers
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import ProbePreset, load_preset, parse_preset
from tuneup.probe.events import EventHandler
from tuneup.probe.types import ProbeBudget
from tuneup.trainers.adapters import DEFAULT_TRAINER, TrainerAdapter, load_trainer
from tuneup.tuning.clock.planner import SHORTEST_TRIAL_SHARE
from tuneup.tuning.results.journal import (
    JOURNAL,
    SESSION,
    SUMMARY,
    ResultsDir,
    SessionLost,
    SummaryDamaged,
    quoted,
)
from tuneup.tuning.results.journal_check import SESSION_ID
from tuneup.tuning.session.assembly import (
    AssembledSession,
    EngineFactory,
    SessionRequest,
    build_session,
    choose_layout,
    pick_stages,
    take_lock,
)
from tuneup.tuning.session.control import Reporter
from tuneup.tuning.session.datakeep import base_values, reads_npy
from tuneup.tuning.session.engine import build_engine
from tuneup.tuning.session.ladder_inputs import FrontEnd, HeldFolder, LadderInputs, Placement
from tuneup.tuning.session.lock import ResultsLock
from tuneup.tuning.session.setting import SETTING, differences, read_setting
from tuneup.tuning.session.stage_plans import ladder_reads_npy
from tuneup.tuning.session.time_fit import job_warnings


def assemble_resume(
    folder: Path,
    request: SessionRequest,
    machine: MachineInfo,
    *,
    reporter: Reporter | None = None,
    on_event: EventHandler | None = None,
    job: JobEnv | None = None,
    engine_factory: EngineFactory = build_engine,
    replay_only: bool = False,
) -> AssembledSession:
    """The session of `folder`, rebuilt from its session.json, to continue where it stopped.

    The data, base config, budget and preset come from the folder; a given
    preset or trainer must be the recorded one. Before anything runs, the
    journal is repaired, a damaged summary.json set aside and whatever a dead
    session left running is stopped; all are said in `alerts`. `replay_only`
    (tuning.rebuild): no setting recorded or compared, no ladder costs kept.

    Raises:
        UsageError: not a results folder, or a request that contradicts it.
        FolderBusy: a live tuneup still runs this session.
    """
    results = ResultsDir(folder)
    lost: SessionLost | None = None
    try:
        info = results.session()
    except SessionLost as exc:
        lost = exc
        info = _rebuilt_session(results, request, exc)
    _check_same(folder, request, info)
    lock = ResultsLock(results.path)
    previous = take_lock(lock, results, resumed=True)
    try:
        alerts = _recover(results, previous.describe() if previous is not None else None)
        if lost is not None:
            alerts.append(_session_rebuilt(results, info, lost))
        preset, said = _resumed_preset(request, info)
        alerts += said
        preset, shortest = _recorded_budget(preset, info)
        adapter = load_trainer(str(info.get("trainer") or DEFAULT_TRAINER))  # once a session
        job = job or read_job_env(gpu_count=machine.gpu_count if machine.cuda else 0)
        ignored = job_warnings(job, request.time_budget_s)
        plan = _resumed_layout(request, info, preset, job, machine)
        machine = dataclasses.replace(machine, world_size=plan.world_size, nodes=plan.nodes)
        stages = _resumed_stages(request, info, preset)
        base = _recorded_base(info, preset, adapter, stages, machine)
        setting = read_setting(machine, preset.document)
        changes = [] if replay_only else differences(info.get(SETTING), setting)
        alerts += changed_lines(changes, request.accept_changes)
        again = "" if request.accept_changes else "; ".join(changes)
        inputs = LadderInputs(
            preset=preset,
            adapter=adapter,
            stages=stages,
            base=base,
            search=request.search or str(info.get("search") or "staged"),
            seed=request.seed if request.seed is not None else int(info.get("seed") or 0),
            fresh_processes=_asked_or_recorded(request.fresh_processes, info, "fresh_processes"),
            time_budget_s=request.time_budget_s,
            shortest_trial_s=shortest,
            retry_failed=request.retry_failed,
            baseline_again=f"the setting changed: {again}" if again else "",
            setting=None if replay_only else setting,
        )
        front = FrontEnd(reporter, on_event, engine_factory, keep_costs=not replay_only)
        held = HeldFolder(results, lock, resumed=True)
        notes = [describe(job), *ignored]
        return build_session(inputs, Placement(machine, plan, job), held, front, notes, alerts)
    except BaseException:
        lock.release()
        raise


def _resumed_stages(
    request: SessionRequest, info: dict[str, Any], preset: ProbePreset
) -> tuple[str, ...]:
    """--stages, else the stages the session recorded, else the preset's."""
    return pick_stages(preset.stages, request.stages or tuple(info.get("stages") or preset.stages))


def _recorded_base(
    info: dict[str, Any],
    preset: ProbePreset,
    adapter: TrainerAdapter,
    stages: tuple[str, ...],
    machine: MachineInfo,
) -> dict[str, Any]:
    """The journal is keyed by config: a resume starts from the very base the session ran
    (the preset's, where session.json lost it: its data made for the ladder's loaders)."""
    recorded = info.get("base_config")
    if isinstance(recorded, dict):
        return dict(recorded)
    npy = ladder_reads_npy(stages, machine, dict(preset.train), preset)
    return base_values(preset, adapter, None, npy=npy)


def _session_rebuilt(results: ResultsDir, info: dict[str, Any], lost: SessionLost) -> str:
    """Write the session.json rebuilt from the journal; what was done, in words."""
    kept = results.rebuild_session(info)
    return (
        f"{SESSION} was {lost.why}: rebuilt it from the journal's {lost.probes} "
        f"probe(s) and preset {info['preset']}"
        + (f" (the damaged file is kept as {quoted(kept)})" if kept else "")
    )


def _resumed_layout(
    request: SessionRequest,
    info: dict[str, Any],
    preset: ProbePreset,
    job: JobEnv,
    machine: MachineInfo,
) -> LaunchPlan:
    """The ranks a resumed session's probes run with: as asked now, else as recorded."""
    launched = info.get("launch") or {}
    nproc = request.nproc if request.nproc is not None else launched.get("nproc")
    nodes = request.nodes if request.nodes is not None else launched.get("nodes")
    return choose_layout(nproc, nodes, preset, job, machine)


def changed_lines(changes: list[str], accepted: bool) -> list[str]:
    """What a resume says of a setting that changed since the session ran: one line per
    difference, then what it does about them."""
    if not changes:
        return []
    lines = [f"since this session ran: {change}" for change in changes]
    if accepted:
        lines.append(
            "going on with the journaled baseline (--accept-changes): new probes are compared "
            "with figures measured in the setting before"
        )
    else:
        lines.append(
            "the baseline is measured again in this setting, and the new probes compare "
            "against it (--accept-changes keeps the journaled one)"
        )
    return lines


def _recorded_budget(preset: ProbePreset, info: dict[str, Any]) -> tuple[ProbePreset, float]:
    """The preset with the budget the session ran (session.json's), and the floor of its
    trials: the preset's own, so a budget the plan shortened is not shortened past it."""
    shortest = preset.budget.trial_s * SHORTEST_TRIAL_SHARE
    recorded = info.get("budget")
    if isinstance(recorded, dict):
        preset = dataclasses.replace(preset, budget=ProbeBudget.from_dict(recorded))
    return preset, shortest


def _recover(results: ResultsDir, previous_owner: str | None) -> list[str]:
    """Make a folder a dead session left fit to continue; what was done, for the user."""
    alerts = []
    if previous_owner is not None:
        alerts.append(f"the run that held {quoted(results.path)} ({previous_owner}) is gone")
    left = find_leftovers(results.path / "probes")
    if left:
        stop_leftovers(left)
        alerts.append(
            f"stopped {len(left)} process(es) a dead session left running: "
            f"{describe_processes(left)}"
        )
    return alerts + results.repair().notes(results.path) + _summary_aside(results)


def _summary_aside(results: ResultsDir) -> list[str]:
    """A damaged summary.json, set aside (the ladder writes it again), in words."""
    try:
        results.summary()
    except SummaryDamaged as damaged:
        kept = results.set_aside_summary()
        return [
            f"{SUMMARY} was damaged ({damaged.why}): kept as {quoted(kept)}; it is written "
            "again from the journal as the ladder ends"
        ]
    except UsageError:
        pass  # none: the session had not finished
    return []


def _rebuilt_session(
    results: ResultsDir, request: SessionRequest, lost: SessionLost
) -> dict[str, Any]:
    """The session record of a folder whose session.json is damaged or gone, from its
    journal and the preset given again (or the one its summary names).

    The base config is the journaled baseline's own, so every journaled probe is found
    again by its config; the stages are --stages, else those summary.json names, else
    the preset's.

    Raises:
        SessionLost: no preset given and none recorded elsewhere in the folder.
    """
    summary = _summary_fields(results)
    preset_name = request.preset or summary.get("preset")
    if not preset_name:
        raise lost
    preset = load_preset(str(preset_name))
    trainer = request.trainer or str(summary.get("trainer") or DEFAULT_TRAINER)
    adapter = load_trainer(trainer)
    probes = results.results()
    baseline = next((p for p in probes if p.stage == "baseline"), None)
    # no baseline journaled: the preset's, its data made for the baseline's loader (the data
    # check makes the .npy copies another loader of the ladder reads, before the first probe)
    base = (
        dict(baseline.config)
        if baseline is not None
        else base_values(preset, adapter, None, npy=reads_npy(preset.train))
    )
    return {
        SESSION_ID: baseline.session if baseline is not None else "",
        "preset": preset.name,
        "preset_source": preset.source or preset.name,
        "preset_document": preset.document,
        "trainer": trainer,
        "export_format": next(iter(adapter.exports), "yaml"),
        "search": request.search or "staged",
        "seed": request.seed or 0,
        "stages": list(request.stages or summary.get("stages") or preset.stages),
        "base_config": base,
        "budget": preset.budget.to_dict(),
        "hints": preset.hints,
        "rebuilt_from_journal": f"{SESSION} was {lost.why}; {len(probes)} probe(s) in {JOURNAL}",
    }


def _summary_fields(results: ResultsDir) -> dict[str, Any]:
    """What summary.json (a partial one, say) tells of the session: its preset, trainer and
    stages, where it can be read ({} otherwise)."""
    try:
        document = results.summary().document
    except (UsageError, OSError, ValueError):
        return {}
    found = {k: document[k] for k in ("preset", "trainer") if document.get(k)}
    if document.get("preset_source"):  # a preset file's path, which the name may not find
        found["preset"] = document["preset_source"]
    decided = [s.get("stage") for s in document.get("stages") or [] if isinstance(s, dict)]
    partial = document.get("partial")
    not_run = partial.get("not_run") or [] if isinstance(partial, dict) else []
    stages = list(dict.fromkeys(str(s) for s in [*decided, *not_run] if s))
    if stages:
        found["stages"] = stages
    return found


def _resumed_preset(request: SessionRequest, info: dict[str, Any]) -> tuple[ProbePreset, list[str]]:
    """The preset a resume runs with: the one given, else the recorded one (when its file
    has moved away, the copy session.json keeps, said); its budget is the preset's own
    (`_recorded_budget` then puts the session's in its place, keeping the floor)."""
    return _given_or_recorded_preset(request, info)


def _given_or_recorded_preset(
    request: SessionRequest, info: dict[str, Any]
) -> tuple[ProbePreset, list[str]]:
    source = str(info.get("preset_source") or info.get("preset"))
    if request.preset is not None:
        return load_preset(request.preset), []
    try:
        return load_preset(source), []
    except UsageError as exc:
        document = info.get("preset_document")
        if not isinstance(document, dict) or not document:
            raise UsageError(
                f"{exc}: this session ran preset {info.get('preset')!r} from {source}; give it "
                "again with --preset PATH (or --preset NAME for a preset of that name)"
            ) from None
    preset = parse_preset(document, source, default_name=str(info.get("preset") or "preset"))
    preset = dataclasses.replace(preset, source=source, origin="recorded in session.json")
    return preset, [
        f"the preset file {source} is gone: using the copy this session recorded in {SESSION} "
        "(give --preset PATH to use another)"
    ]


def _asked_or_recorded(asked: bool | None, info: dict[str, Any], key: str) -> bool:
    """A switch of a resumed session: as asked now, else as its session.json recorded it."""
    return bool(info.get(key)) if asked is None else asked


def _check_same(folder: Path, request: SessionRequest, info: dict[str, Any]) -> None:
    recorded_preset = {info.get("preset"), info.get("preset_source")}
    given: set[str | None] = {request.preset}
    if request.preset is not None and Path(request.preset).is_file():
        given.add(str(Path(request.preset).resolve()))
    for flag, asked, allowed in (
        ("preset", given, recorded_preset),
        ("trainer", {request.trainer}, {info.get("trainer")}),
    ):
        if None not in asked and not asked & allowed:
            raise UsageError(
                f"cannot resume {folder}: it was a {flag} '{info.get(flag)}' session, not "
                f"'{sorted(a for a in asked if a)[0]}' (drop --{flag}, or start a new "
                "session with --out)"
            )
