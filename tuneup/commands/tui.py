"""`tuneup tui` (and bare `tuneup`): the interactive app.

Textual is imported only inside `run_tui_command`, so `tuneup --help` stays fast.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from tuneup.cluster.signals import StopSignals
from tuneup.errors import ExitCode, UsageError

# The app drives the U-Net worker or the sim surface; other trainers run headless.
TRAINERS = ("unet", "sim")


def run_tui_command(
    *,
    preset_name: str | None = None,
    trainer: str | None = None,
    results: Path | None = None,
    replay: Path | None = None,
    out: Path | None = None,
) -> int:
    """Open the app: SETUP for a new session, or the review of `results`."""
    from tuneup.hardware.machine import machine_info
    from tuneup.monitor.slurm import read_job
    from tuneup.probe.journal import ResultsDir

    trainer = trainer or "unet"
    if trainer not in TRAINERS:
        raise UsageError(f"--trainer {trainer}: choose one of {', '.join(TRAINERS)}")
    if results is not None:
        ResultsDir(results).session()  # not a results folder: one line, before the screen opens
    if replay is not None and not replay.is_file():
        raise UsageError(f"--replay {replay}: no such trace file (record one with --record)")
    if preset_name is not None:
        from tuneup.preset.load import load_preset

        load_preset(preset_name)  # an unknown preset fails here, with the known names
    from tuneup.commands.app_deps import require_app

    require_app("the full-screen app", "tuneup probe / tuneup monitor --once")
    from tuneup.tui.app import TuneupApp, replayed_gpus

    machine = machine_info()
    if preset_name is None:
        from tuneup.probe.assembly import pick_preset

        preset_name, _why = pick_preset(None, machine)
    machine = _with_layout(machine, preset_name)
    app = TuneupApp(
        machine,
        trainer=trainer,
        out=out,
        review=results,
        preset_name=preset_name,
        job=read_job(),
        monitor_backend=replayed_gpus(replay) if replay is not None else None,
        gpu_memory_gib=_gpu_memory_gib() if machine.cuda else (),
    )
    # The app owns the terminal: no notice. SIGTERM (SLURM's time limit) and SIGHUP (a
    # closed terminal) end the app as `q` would (on_unmount stops the running probe and
    # its journal is kept); a second one ends the process at once.
    with StopSignals(stream=io.StringIO(), hard_abort=True) as stop:
        stop.arm(lambda: _exit_soon(app))
        app.run()
    return stop.exit_code if stop.requested else ExitCode.OK


def _exit_soon(app: Any) -> None:
    """Ask the app to exit from a signal handler: through the loop, which this wakes."""
    try:
        asyncio.get_running_loop().call_soon_threadsafe(app.exit)
    except RuntimeError:  # no loop running yet (or any more)
        app.exit()


def _with_layout(machine: Any, preset_name: str) -> Any:
    """The machine with the rank layout the setup screen offers first (job or preset)."""
    import dataclasses

    from tuneup.cluster.job import read_job_env
    from tuneup.preset.load import load_preset
    from tuneup.probe.assembly import choose_layout

    job = read_job_env(gpu_count=machine.gpu_count if machine.cuda else 0)
    try:
        plan = choose_layout(None, None, load_preset(preset_name), job, machine)
    except UsageError:
        return machine  # the screen offers one rank; the user may change it
    return dataclasses.replace(machine, world_size=plan.world_size, nodes=plan.nodes)


def _gpu_memory_gib() -> tuple[float, ...]:
    """Each visible GPU's memory from NVML (the parent never starts CUDA)."""
    from tuneup.hardware.backends import choose_backend
    from tuneup.monitor.slurm import visible_gpu_indices

    backend = choose_backend(visible=visible_gpu_indices())
    try:
        return tuple((d.memory_total_mb or 0.0) / 1024 for d in backend.devices())
    finally:
        backend.close()
