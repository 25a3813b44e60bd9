"""One assembly of a probe session, for every front end: `tuneup probe`, the app, the benchmarks.

A new session is built from what the user asked (`SessionRequest`); a
resumed one is rebuilt from its folder's `session.json`, which records
everything the session was run with (preset as resolved, trainer, stages,
search, seed, budget, layout, and the base config with its data paths), so
a session continues on the same data whichever front end started it and
whichever resumes it. Both take the folder's lock first (tuneup.tuning.session.lock)
and give it back in `AssembledSession.close`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.bundled import cache_dir
from tuneup.cluster.job import JobEnv, default_layout, describe, read_job_env
from tuneup.cluster.launch import LaunchPlan, check_plan
from tuneup.costs.estimate import ProbeCosts
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.paths import is_storage_error
from tuneup.preset.autopick import auto_pick, gpu_inventory
from tuneup.preset.load import ProbePreset, load_preset, preset_warnings
from tuneup.probe.events import EventHandler
from tuneup.probe.stages import stage_names, unknown_stage
from tuneup.trainers.adapters import DEFAULT_TRAINER, TrainerAdapter, load_trainer
from tuneup.tuning.clock.ladder_record import LadderRecord
from tuneup.tuning.results.journal import SESSION, ResultsDir, folder_problem, quoted
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.control import Reporter, SilentReporter
from tuneup.tuning.session.datakeep import base_values, data_keeper
from tuneup.tuning.session.engine import Engine, build_engine
from tuneup.tuning.session.ladder_inputs import FrontEnd, HeldFolder, LadderInputs, Placement
from tuneup.tuning.session.lock import LOCK_FILE, Owner, ResultsLock
from tuneup.tuning.session.preflight import loader_shm_problem, refuse_baseline
from tuneup.tuning.session.probe_session import ProbeSession
from tuneup.tuning.session.realdata import RealData, real_data_for
from tuneup.tuning.session.request import SessionRequest
from tuneup.tuning.session.session_terms import Layout, ResumeTerms, SearchTerms, TimeTerms
from tuneup.tuning.session.setting import read_setting
from tuneup.tuning.session.stage_plans import (
    ladder_reads_npy,
    plugin_alerts,
    shm_free_for,
    stage_plans,
    unmapped_note,
)
from tuneup.tuning.session.time_fit import fit_to_time, job_warnings

DEFAULT_ROOT = Path("tuneup-results")
_UNSAFE_IN_FOLDER = re.compile(r"[/\\\x00-\x1f\x7f]+")  # a path separator, a control character
MAX_NAME_IN_FOLDER = 100  # a folder name holds 255 bytes
EngineFactory = Callable[..., Engine]  # build_engine's signature


@dataclass
class AssembledSession:
    """A session ready to start, what it runs with, and what to tell the user first.

    Attributes:
        notes: lines for the user before the first probe (the preset picked and
            why, the job, preset warnings); a quiet front end may leave them out.
        alerts: lines the user must see whatever the front end (a repaired
            journal, leftovers of a dead session stopped, a lock taken over).
    """

    session: ProbeSession
    engine: Engine
    results: ResultsDir
    lock: ResultsLock
    resumed: bool
    notes: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    made_folder: bool = False  # the folder is this session's own: removed if it stays empty

    def interrupt(self, why: str = "stopped by the user") -> None:
        """Stop the running probe and the ladder; `why` goes into the partial summary.

        Safe from a signal handler: it only sets flags (no lock is taken, so a
        handler that lands while the main thread holds one cannot deadlock).
        """
        self.session.stop.ask(why)
        self.engine.backend.interrupt()

    def close(self) -> None:
        try:
            self.engine.close()
        finally:
            self.lock.release()
            if self.made_folder:
                discard_if_empty(self.results.path)


def discard_if_empty(folder: Path) -> None:
    """Remove a folder this run made when nothing was written there but its lock (a disk
    full from the start): no folder is left holding only `.tuneup.lock`."""
    try:
        names = {p.name for p in folder.iterdir()}
        if names - {LOCK_FILE, "probes"}:
            return
        probes = folder / "probes"
        if probes.is_dir() and any(probes.iterdir()):
            return
        if probes.is_dir():
            probes.rmdir()
        (folder / LOCK_FILE).unlink(missing_ok=True)
        folder.rmdir()
    except OSError:
        pass  # left as it is: a later --out there says what it holds


def take_lock(lock: ResultsLock, results: ResultsDir, resumed: bool) -> Owner | None:
    """Acquire the folder's lock; a lock the storage refuses (full, read-only) is one line.

    Raises:
        FolderBusy: a live tuneup holds it.
        UsageError: the lock cannot be written (with what is kept and the way on).
    """
    try:
        return lock.acquire()
    except OSError as exc:
        if not is_storage_error(exc):
            raise
        if resumed:
            raise results.fault(exc, LOCK_FILE, "the folder's lock") from None
        raise UsageError(folder_problem(results.path, exc)) from None


def pick_preset(preset_name: str | None, machine: MachineInfo) -> tuple[str, str | None]:
    """The preset to load, and why when tuneup chose it (auto-pick by the GPUs found)."""
    if preset_name is not None:
        return preset_name, None

    inventory = gpu_inventory() if machine.gpu_count else []
    pick = auto_pick(inventory, machine.cpus_usable, cuda=machine.cuda)
    return pick.name, pick.reason


def pick_stages(preset_stages: tuple[str, ...], chosen: tuple[str, ...] | None) -> tuple[str, ...]:
    """The stages to run: the chosen ones (each must exist), else the preset's."""
    if chosen is None:
        return preset_stages

    if not chosen:
        raise UsageError("--stages names no stage: give at least one (see `tuneup plugins list`)")
    known = set(stage_names())
    for name in chosen:
        if name not in known:
            raise UsageError(f"--stages: {unknown_stage(name)}")
    return chosen


def choose_layout(
    nproc: int | None, nodes: int | None, preset: ProbePreset, job: JobEnv, machine: MachineInfo
) -> LaunchPlan:
    """The ranks each probe runs with: the flags, else the preset's, else what the job gives.

    Raises:
        UsageError: a layout the job cannot run (tuneup.cluster.launch.check_plan), or
            more ranks per node than GPUs on a CUDA run.
    """
    given_nproc, given_nodes = default_layout(job)
    plan = LaunchPlan(
        nproc=_first(nproc, preset.launch.nproc, given_nproc),
        nodes=_first(nodes, preset.launch.nodes, given_nodes),
    )
    check_plan(plan, job)
    on_gpu = machine.cuda and preset.train.get("device", "auto") != "cpu"
    if on_gpu and plan.nproc > max(1, machine.gpu_count):
        raise UsageError(
            f"{plan.nproc} ranks per node but {machine.gpu_count} GPU(s) visible: lower "
            "--nproc (one rank per GPU)"
        )
    return plan


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


def launch_info(plan: LaunchPlan) -> dict[str, Any]:
    """The layout as session.json records it (export and --resume read it back)."""
    launcher = "local" if plan.world_size == 1 else ("srun" if plan.nodes > 1 else "torchrun")
    return {
        "nproc": plan.nproc,
        "nodes": plan.nodes,
        "world_size": plan.world_size,
        "launcher": launcher,
    }


def default_folder(
    preset: str,
    clock: Callable[[], float] = time.time,
    *,
    simulated: bool = False,
    root: Path = DEFAULT_ROOT,
) -> Path:
    """A new session's folder: PRESET-TIME, "sim-" first for a simulated trainer's (its
    figures are not this machine's, and the folder says so). Always one folder inside
    `root`: a preset's name is its own to choose ("../../x" too), so what a folder name
    cannot hold becomes "-"."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(clock()))
    name = _UNSAFE_IN_FOLDER.sub("-", preset).strip(".-")[:MAX_NAME_IN_FOLDER] or "preset"
    return root / f"{'sim-' if simulated else ''}{name}-{stamp}"


def assemble_new(
    request: SessionRequest,
    machine: MachineInfo,
    *,
    out: Path | None = None,
    reporter: Reporter | None = None,
    on_event: EventHandler | None = None,
    job: JobEnv | None = None,
    engine_factory: EngineFactory = build_engine,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    known_costs: ProbeCosts | None = None,
    adapter: TrainerAdapter | None = None,
    preset: ProbePreset | None = None,
) -> AssembledSession:
    """A new session in `out` (default tuneup-results/PRESET-TIME), its folder locked.

    `clock` names the folder; `monotonic` times the ladder against its time budget (the
    GPU twin passes its own, and `known_costs`: its probes' price, not the sim's).
    `adapter` and `preset`: the request's trainer and preset where the caller loaded them
    already (the app); the session loads each once otherwise, and passes it on.

    Raises:
        UsageError: bad input (unknown preset, trainer or stage; a layout the job
            cannot run; a folder that cannot be used or already holds a session; a
            baseline whose loader cannot run here).
        FolderBusy: another live tuneup writes to `out`.
    """
    # loaded once for the session; fails early, listing the known ones, before any data is made
    adapter = adapter or load_trainer(request.trainer or DEFAULT_TRAINER)
    preset, why = _chosen_preset(request, machine, preset)
    names = pick_stages(preset.stages, request.stages)
    job = job or read_job_env(gpu_count=machine.gpu_count if machine.cuda else 0)
    plan = choose_layout(request.nproc, request.nodes, preset, job, machine)
    machine = dataclasses.replace(machine, world_size=plan.world_size, nodes=plan.nodes)
    chosen = [] if why is None else [f"no --preset given: using {preset.name} ({why})"]
    notes = [*chosen, describe(job), *job_warnings(job, request.time_budget_s)]  # or refused
    notes += [f"warning: {w}" for w in preset_warnings(preset, machine)]

    # before a synthetic box is made or a folder taken: what needs no data file
    label = preset.source or preset.name
    refuse_baseline(adapter, label, preset.train, plan.world_size, data=False)
    results = ResultsDir(out or default_folder(preset.name, clock, simulated=adapter.simulated))
    existed = _new_folder(results)
    lock = ResultsLock(results.path)
    try:
        take_lock(lock, results, resumed=False)
        if results.has_session():  # another run finished there while this one started
            raise _already_a_session(results.path)
        inputs = LadderInputs(
            preset=preset,
            adapter=adapter,
            stages=names,
            base=_new_base(preset, adapter, request.data_path, names, machine),
            search=request.search or "staged",
            seed=0 if request.seed is None else request.seed,
            fresh_processes=bool(request.fresh_processes),
            time_budget_s=request.time_budget_s,
            setting=read_setting(machine, preset.document),
        )
        front = FrontEnd(reporter, on_event, engine_factory, monotonic, known_costs)
        held = HeldFolder(results, lock, resumed=False, made_folder=not existed)
        return build_session(inputs, Placement(machine, plan, job), held, front, notes, [])
    except BaseException:
        lock.release()  # nothing to give back when taking it failed
        if not existed:
            discard_if_empty(results.path)
        raise


def _new_base(
    preset: ProbePreset,
    adapter: TrainerAdapter,
    data_path: Path | None,
    names: tuple[str, ...],
    machine: MachineInfo,
) -> dict[str, Any]:
    """A new session's base config, its synthetic box made for the loaders its ladder runs."""
    npy = ladder_reads_npy(names, machine, dict(preset.train), preset)
    return base_values(preset, adapter, data_path, npy=npy)


def _chosen_preset(
    request: SessionRequest, machine: MachineInfo, preset: ProbePreset | None
) -> tuple[ProbePreset, str | None]:
    """The request's preset (the one the caller loaded, else loaded here) with the request's
    budget where it gives one; why it was picked, where the request named none."""
    why = None
    if preset is None:
        name, why = pick_preset(request.preset, machine)
        preset = load_preset(name)
    if request.budget is not None:
        preset = dataclasses.replace(preset, budget=request.budget)
    return preset, why


def _new_folder(results: ResultsDir) -> bool:
    """Make a new session's folder, refused where one is there already; whether it existed.

    Raises:
        UsageError: the folder holds a session, or a journal, or cannot be made.
    """
    if results.has_session():
        raise _already_a_session(results.path)
    if results.has_journal():
        raise _a_journal_without_session(results.path)
    existed = True
    with contextlib.suppress(OSError):  # a name too long, say: prepare() says what is wrong
        existed = results.path.exists()
    results.prepare()
    return existed


def _a_journal_without_session(folder: Path) -> UsageError:
    return UsageError(
        f"{folder} holds the journal of an earlier session but no {SESSION}: continue it with "
        f"`tuneup probe --resume {quoted(folder)} --preset NAME` (the preset it ran), or give "
        "a new folder with --out"
    )


def _already_a_session(folder: Path) -> UsageError:
    return UsageError(
        f"{folder} already holds a tuneup session: continue it with "
        f"`tuneup probe --resume {quoted(folder)}`, or give a new folder with --out"
    )


def checked_plans(
    adapter: TrainerAdapter,
    stages: tuple[str, ...],
    machine: MachineInfo,
    base: dict[str, Any],
    preset: ProbePreset,
    real: RealData | None = None,
) -> list[StagePlan]:
    """The ladder's stage plans, once the baseline passed what would kill it for certain
    (its loader workers in /dev/shm) and what its trainer would refuse; a stage's candidates
    that would fail either are not tried, nor (with `real`) those whose loader cannot hold
    the real run's data.

    Raises:
        UsageError: the baseline fails one of them, in one line with the fix.
    """
    shm_free = shm_free_for(adapter)  # the U-Net's loader workers pass batches through it
    problem = loader_shm_problem(base, machine.ranks_per_node, shm_free)
    if problem is not None:
        raise UsageError(f"the baseline's loader cannot run here: {problem}")
    refuse_baseline(adapter, preset.source or preset.name, base, machine.world_size, data=True)
    return stage_plans(
        stages,
        machine,
        base,
        preset,
        shm_free=shm_free,
        phases=adapter.phases,
        refusal=adapter.refusal,
        weigh=None if real is None else real.before,
        tunable=adapter.tunable(preset.sections.get(adapter.name)),
    )


def build_session(
    inputs: LadderInputs,
    place: Placement,
    folder: HeldFolder,
    front: FrontEnd,
    notes: list[str],
    alerts: list[str],
) -> AssembledSession:
    """A session on what the caller resolved, built once: nothing rewires it after."""
    preset, adapter, base, machine = inputs.preset, inputs.adapter, inputs.base, place.machine
    real = real_data_for(preset, base, machine)
    plans = checked_plans(adapter, inputs.stages, machine, base, preset, real)
    record = LadderRecord(cache_dir())
    shares = not inputs.fresh_processes and machine.world_size == 1
    limits = (inputs.time_budget_s, inputs.shortest_trial_s, front.known_costs)
    fit = fit_to_time(adapter, preset, plans, base, machine, place.job, record, shares, *limits)
    limit = fit.plan.limit_s
    damage = [f"warning: {line}" for line in record.damage]  # as the fit read it: said once
    preset, plans, notes = fit.applied(preset, plans, [*notes, *damage])
    results = folder.results
    engine = (front.engine_factory or build_engine)(
        adapter, machine, results.path / "probes", preset.budget, inputs.seed,
        launch=place.plan, job=place.job, on_event=front.on_event, preset=preset,
        fresh_processes=inputs.fresh_processes,
    )  # fmt: skip
    npy = ladder_reads_npy(inputs.stages, machine, base, preset)
    session = ProbeSession(
        preset=preset,
        adapter=adapter,
        backend=engine.backend,
        results=results,
        machine=machine,
        base_values=base,
        plans=plans,
        reporter=front.reporter or SilentReporter(),
        terms=SearchTerms(inputs.search, inputs.seed, inputs.fresh_processes),
        sampler=engine.sampler,
        layout=Layout(place.job.to_dict(), launch_info(place.plan)),
        timing=TimeTerms(
            budget_s=limit,
            limit_by=fit.whose,
            plan=fit.plan if limit is not None else None,
            shortest_trial_s=fit.shortest_trial_s,
            allocation_left=place.job.seconds_left if place.job.end_time is not None else None,
            monotonic=front.monotonic,
        ),
        record=record if front.keep_costs else None,
        data_check=data_keeper(preset, adapter, base, results.path, npy=npy),
        again=ResumeTerms(inputs.retry_failed, inputs.baseline_again),
        setting=inputs.setting,
        real_data=real,
    )
    alerts = [*alerts, *plugin_alerts(), *unmapped_note(plans, adapter.name)]
    return AssembledSession(
        session,
        engine,
        results,
        folder.lock,
        folder.resumed,
        notes,
        alerts,
        made_folder=folder.made_folder,
    )
