"""`tuneup tui` (and bare `tuneup`): the interactive app.

Textual is imported only inside `run_tui_command`, so `tuneup --help` stays fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuneup.bundled import cache_dir
from tuneup.cluster.job import JobEnv, read_job_env
from tuneup.cluster.signals import StopSignals
from tuneup.commands.app_deps import require_app, require_terminal
from tuneup.commands.plugins import warn_broken_plugins
from tuneup.errors import ExitCode, UsageError
from tuneup.hardware.backends import choose_backend
from tuneup.hardware.devices import cuda_visible_devices
from tuneup.hardware.machine import machine_info
from tuneup.hardware.replay import read_trace
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import ProbePreset, load_preset
from tuneup.trainers.adapters import DEFAULT_TRAINER, load_trainer, scan_trainers
from tuneup.tuning.clock.ladder_record import LadderRecord
from tuneup.tuning.results.journal import ResultsDir, where_it_stands
from tuneup.tuning.session.assembly import choose_layout, pick_preset


def app_trainers() -> list[str]:
    """The trainers the app drives (`in_app`); others run headless (imports every trainer)."""
    adapters, _broken = scan_trainers()  # a broken plugin is reported where it is named
    return [name for name, adapter in adapters.items() if adapter.in_app]


def run_tui_command(
    *,
    preset_name: str | None = None,
    trainer: str | None = None,
    results: Path | None = None,
    replay: Path | None = None,
    out: Path | None = None,
) -> int:
    """Open the app: SETUP for a new session, or the review of `results`."""
    trainer = trainer or DEFAULT_TRAINER
    adapter = load_trainer(trainer)  # loaded once: the app and its sessions use this one
    if not adapter.in_app:
        raise UsageError(
            f"--trainer {trainer}: the app drives {', '.join(app_trainers())}; run this "
            f"trainer with `tuneup probe --trainer {trainer}`"
        )
    if results is not None:
        ResultsDir(results).session()  # not a results folder: one line, before the screen opens
    if replay is not None:
        if not replay.is_file():
            raise UsageError(f"--replay {replay}: no such trace file (record one with --record)")
        read_trace(replay)  # not a trace: one line, before the screen opens
    chosen = None
    if preset_name is not None:
        chosen = load_preset(preset_name)  # an unknown preset fails here, with the known names
    require_app("the full-screen app", "tuneup probe / tuneup monitor --once")
    require_terminal(  # Textual reads keys from stdin and draws on stderr
        "the full-screen app",
        "tuneup probe for the ladder without a screen",
        [("standard input", sys.stdin), ("standard error", sys.stderr)],
    )
    from tuneup.tui.app import TuneupApp, replayed_gpus  # Textual: only once the app can run

    # on stderr, seen again when the app gives the terminal back, and on the app's screen
    broken = warn_broken_plugins()
    machine = machine_info()
    if preset_name is None:
        preset_name, _why = pick_preset(None, machine)
    job = read_job_env(gpu_count=machine.gpu_count if machine.cuda else 0)
    preset = chosen or load_preset(preset_name)  # loaded once: the setup screen shows it
    machine = _with_layout(machine, preset, job)
    app = TuneupApp(
        machine,
        trainer=trainer,
        adapter=adapter,
        preset=preset,
        out=out,
        review=results,
        preset_name=preset_name,
        job=job,
        monitor_backend=replayed_gpus(replay) if replay is not None else None,
        gpu_memory_gib=_gpu_memory_gib() if machine.cuda else (),
        ladder_record=LadderRecord(cache_dir()),
        plugin_warnings=broken,
    )
    # The app owns the terminal: no notice. SIGTERM (SLURM's time limit) and SIGHUP (a
    # closed terminal) end the app as `q` would (on_unmount stops the running probe and
    # its journal is kept); a second one ends the process at once.
    with StopSignals(stream=io.StringIO(), hard_abort=True) as stop:
        stop.arm(lambda: _exit_soon(app))
        app.run()
    folder = app.session_folder
    if folder is not None and (folder / "session.json").is_file():
        # The terminal is the user's again: where the session stands, and how to go on.
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            for line in where_it_stands(folder):
                print(f"tuneup: {line}", file=sys.stderr, flush=True)
    return stop.exit_code if stop.requested else ExitCode.OK


def _exit_soon(app: Any) -> None:
    """Ask the app to exit from a signal handler: through the loop, which this wakes."""
    try:
        asyncio.get_running_loop().call_soon_threadsafe(app.exit)
    except RuntimeError:  # no loop running yet (or any more)
        app.exit()


def _with_layout(machine: MachineInfo, preset: ProbePreset, job: JobEnv) -> MachineInfo:
    """The machine with the rank layout the setup screen offers first (job or preset)."""
    try:
        plan = choose_layout(None, None, preset, job, machine)
    except UsageError:
        return machine  # the screen offers one rank; the user may change it
    return dataclasses.replace(machine, world_size=plan.world_size, nodes=plan.nodes)


def _gpu_memory_gib(
    nvml_module: Any = None, environ: Mapping[str, str] | None = None
) -> tuple[float, ...]:
    """Each visible GPU's memory from NVML (the parent never starts CUDA).

    Args:
        nvml_module, environ: a pynvml stand-in and the environment, for tests.
    """
    backend = choose_backend(
        cuda_visible_devices=cuda_visible_devices(environ), nvml_module=nvml_module
    )
    try:
        return tuple((d.memory_total_mb or 0.0) / 1024 for d in backend.devices())
    finally:
        backend.close()
