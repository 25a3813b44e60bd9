"""`tuneup probe`: run a preset's ladder headless and recommend a configuration."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from tuneup.errors import ExitCode, UsageError


def _default_out(preset: str) -> Path:
    return Path("tuneup-results") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"


def _base_values(preset: Any, trainer: str) -> dict[str, Any]:
    """The preset's training knobs, pointed at its synthetic box when it has no data path."""
    values = dict(preset.train)
    synth = preset.synthetic_data
    needs_files = values.get("data_loader_config", "lowmem") not in ("synthetic",)
    if trainer == "unet" and synth and needs_files and not values.get("train_path"):
        from tuneup.bundled import cache_dir, ensure_synthetic_data

        train, val, made = ensure_synthetic_data(
            synth["box"], synth["val_box"], synth.get("seed", 0), cache_dir()
        )
        if made:
            print(
                f"tuneup: made a synthetic {synth['box']}^3 box in {train.parent}", file=sys.stderr
            )
        values["train_path"], values["val_path"] = str(train), str(val)
    return values


def _pick_stages(preset_stages: tuple[str, ...], chosen: str | None) -> tuple[str, ...]:
    if not chosen:
        return preset_stages
    from tuneup.probe.stages import stage_names

    names = tuple(s.strip() for s in chosen.split(",") if s.strip())
    known = set(stage_names())
    for name in names:
        if name not in known:
            raise UsageError(
                f"--stages: no stage named '{name}' (known: {', '.join(sorted(known))})"
            )
    return names


def choose_layout(
    nproc: int | None,
    nodes: int | None,
    preset: Any,
    job: Any,
    machine: Any,
) -> Any:
    """The ranks each probe runs with: the flags, else the preset's, else what the job gives.

    Raises:
        UsageError: a layout the job cannot run (tuneup.cluster.launch.check_plan), or
            more ranks per node than GPUs on a CUDA run.
    """
    from tuneup.cluster.job import default_layout
    from tuneup.cluster.launch import LaunchPlan, check_plan

    given_nproc, given_nodes = default_layout(job)
    launch = getattr(preset, "launch", None)
    plan = LaunchPlan(
        nproc=_first(nproc, getattr(launch, "nproc", None), given_nproc),
        nodes=_first(nodes, getattr(launch, "nodes", None), given_nodes),
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


def pick_preset(preset_name: str | None, machine: Any) -> tuple[str, str | None]:
    """The preset to load, and why when tuneup chose it (auto-pick by the GPUs found)."""
    if preset_name is not None:
        return preset_name, None
    from tuneup.probe.autopick import auto_pick, gpu_inventory

    inventory = gpu_inventory() if machine.gpu_count else []
    pick = auto_pick(inventory, machine.cpus_usable, cuda=machine.cuda)
    return pick.name, pick.reason


def run_probe_command(
    *,
    preset_name: str | None,
    stages: str | None,
    trainer: str | None,
    search: str | None,
    seed: int | None,
    out: Path | None,
    resume: Path | None,
    as_json: bool,
    nproc: int | None = None,
    nodes: int | None = None,
) -> int:
    import dataclasses

    from tuneup.cluster.job import describe, read_job_env
    from tuneup.probe.adapters import load_trainer
    from tuneup.probe.engine import build_engine
    from tuneup.probe.journal import ResultsDir
    from tuneup.probe.machine import machine_info
    from tuneup.probe.preset import load_preset, preset_warnings

    machine = machine_info()
    if resume is not None:
        previous = ResultsDir(resume).session()
        same_preset = {previous.get("preset"), previous.get("preset_source")}
        given_path = Path(preset_name).resolve() if preset_name else None
        if given_path is not None and str(given_path) in same_preset:
            same_preset.add(preset_name)
        for flag, given, allowed in (
            ("preset", preset_name, same_preset),
            ("trainer", trainer, {previous.get("trainer")}),
        ):
            if given is not None and given not in allowed:
                raise UsageError(
                    f"cannot resume {resume}: it was a {flag} '{previous.get(flag)}' session, "
                    f"not '{given}' (drop --{flag}, or start a new session with --out)"
                )
        preset_name = preset_name or previous.get("preset_source") or previous.get("preset")
        if trainer is None:
            trainer = previous.get("trainer", "unet")
        stages = stages or ",".join(previous.get("stages", [])) or None
        seed = previous.get("seed", seed) if seed is None else seed
        search = previous.get("search", search) if search is None else search
        launched = previous.get("launch") or {}
        nproc = launched.get("nproc", nproc) if nproc is None else nproc
        nodes = launched.get("nodes", nodes) if nodes is None else nodes
    trainer = trainer or "unet"
    search = search or "staged"
    seed = 0 if seed is None else seed
    load_trainer(trainer)  # fails early, listing the known ones, before any data is made
    preset_name, why = pick_preset(preset_name, machine)
    preset = load_preset(preset_name)
    names = _pick_stages(preset.stages, stages)
    job = read_job_env(gpu_count=machine.gpu_count if machine.cuda else 0)
    plan = choose_layout(nproc, nodes, preset, job, machine)
    machine = dataclasses.replace(machine, world_size=plan.world_size, nodes=plan.nodes)
    if not as_json:
        if why is not None:
            print(f"tuneup: no --preset given: using {preset_name} ({why})", file=sys.stderr)
        print(f"tuneup: {describe(job)}", file=sys.stderr)  # the reporter says the layout
        for warning in preset_warnings(preset, machine):
            print(f"tuneup: warning: {warning}", file=sys.stderr)
    base = _base_values(preset, trainer)

    from tuneup.probe.preflight import loader_shm_problem
    from tuneup.probe.session import ProbeSession, SessionInterrupted, shm_free_for, stage_plans

    shm_free = shm_free_for(trainer)  # the U-Net's loader workers pass batches through it
    problem = loader_shm_problem(base, machine.ranks_per_node, shm_free)
    if problem is not None:
        raise UsageError(f"the baseline's loader cannot run here: {problem}")
    plans = stage_plans(names, machine, base, preset, shm_free=shm_free)
    results = ResultsDir(resume if resume is not None else (out or _default_out(preset.name)))
    reporter = _reporter(as_json)
    stop = {"requested": False}

    engine = build_engine(
        trainer,
        machine,
        results.path / "probes",
        preset.budget,
        seed,
        launch=plan,
        job=job,
        on_event=getattr(reporter, "event", None),
        preset=preset,
    )
    backend, sampler = engine.backend, engine.sampler
    interrupt = getattr(backend, "interrupt", None)

    session = ProbeSession(
        preset=preset,
        trainer=trainer,
        backend=backend,
        results=results,
        machine=machine,
        base_values=base,
        plans=plans,
        reporter=reporter,
        search=search,
        seed=seed,
        stop_requested=lambda: stop["requested"],
        sampler=sampler,
        job=job.to_dict(),
        launch=launch_info(plan),
    )

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if stop["requested"]:
            raise KeyboardInterrupt
        stop["requested"] = True
        print("\ntuneup: stopping the current probe (Ctrl-C again to abort)", file=sys.stderr)
        if interrupt is not None:
            interrupt()

    previous_handler = signal.signal(signal.SIGINT, on_sigint)
    try:
        session.start(resume=resume is not None)
        outcome = session.run()
    except SessionInterrupted:
        print(
            f"tuneup: interrupted; finished probes are in {results.path / 'journal.jsonl'}; "
            f"continue with: tuneup probe --resume {results.path}",
            file=sys.stderr,
        )
        return ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        engine.close()
        close = getattr(reporter, "close", None)
        if close is not None:
            close()

    summary = results.summary()
    if as_json:
        document = {
            "results_dir": str(results.path),
            "summary": summary,
            "probes": [p.to_journal() for p in outcome.probes],
        }
        print(json.dumps(document, default=str))
        return ExitCode.OK
    _print_outcome(outcome, summary, results.path)
    return ExitCode.OK


def launch_info(plan: Any) -> dict[str, Any]:
    """The layout as session.json records it (export and --resume read it back)."""
    launcher = "local" if plan.world_size == 1 else ("srun" if plan.nodes > 1 else "torchrun")
    return {
        "nproc": plan.nproc,
        "nodes": plan.nodes,
        "world_size": plan.world_size,
        "launcher": launcher,
    }


def _reporter(as_json: bool) -> Any:
    from tuneup.probe.report import PlainReporter, RichReporter
    from tuneup.probe.session import SilentReporter

    if as_json:
        return SilentReporter()
    if sys.stderr.isatty():
        return RichReporter()
    return PlainReporter()


def _print_outcome(outcome: Any, summary: dict[str, Any], folder: Path) -> None:
    from tuneup.probe.report import final_table
    from tuneup.probe.verdicts import confirmation_lines, stage_summary

    for note in (summary.get("stability") or {}).get("notes") or []:
        print(f"note: {note}")
    final_table(outcome.probes)
    for line in stage_summary(outcome):
        print(line)
    for line in confirmation_lines(outcome):
        print(line)
    verdict = summary.get("bottleneck", {})
    for moment in ("before", "after"):
        sentence = verdict.get(moment, {}).get("sentence") if isinstance(verdict, dict) else None
        if sentence:
            print(f"{moment}: {sentence}")
    scaling = summary.get("scaling") or {}
    for line in scaling.get("lines") or (
        [f"scaling estimate: {scaling['error']}"] if scaling.get("error") else []
    ):
        print(line)
    batch = summary.get("recommendation", {}).get("batch_note")
    if batch:
        print(f"batch: {batch}")
    headline = summary.get("recommendation", {}).get("headline")
    if headline:
        print(headline)
    print(f"results: {folder}  (export with: tuneup export {folder} --format yaml)")
