"""One verify run as a child process: each target's program started the way its user
starts it, its output kept in a log, ended at its time limit or on a stop.

The child runs under a guardian in a session of its own (cluster/guardian.py), so
nothing it started outlives tuneup, and a stop reaches its loader workers too. A run
killed at its limit keeps the epochs it finished: it is a bounded run, not a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneup.cluster.guardian import guarded
from tuneup.config import build_config
from tuneup.export.configs import render_tuneup
from tuneup.export.tutorial import SC22, YAML_BLOCK, TutorialRun, flag_tokens, render_yaml
from tuneup.paths import atomic_write_text
from tuneup.probe.childproc import has_exited, signal_group, tail_lines, wait_exit
from tuneup.quoting import one_line, shell_word
from tuneup.verify.lines import read_figures

GRACE_S = 5.0  # after SIGTERM, before SIGKILL
POLL_S = 0.1
TUNEUP = "tuneup"
TUTORIAL = "tutorial"


@dataclass(frozen=True)
class Launch:
    """A run ready to start: its argv, where it starts, and its command in the user's words
    (`tuneup train ...`, `python train.py ...`) to run it again by hand."""

    argv: list[str]
    cwd: Path
    command: str


def tuneup_launch(values: Mapping[str, Any], config_file: Path) -> Launch:
    """`tuneup train --config FILE`, FILE tuneup's own export of `values`."""
    atomic_write_text(config_file, render_tuneup(build_config(values)), "a verify run's config")
    args = ["train", "--config", str(config_file)]
    return Launch(
        argv=[sys.executable, "-m", "tuneup", *args],
        cwd=config_file.parent,
        command=_words(["tuneup", *args]),
    )


def tutorial_launch(
    values: Mapping[str, Any], config_file: Path, train_py: Path, run_num: str
) -> Launch:
    """The tutorial's train.py with the export's YAML block and flags (SC22), started in its
    own folder as its README runs it; its logs go to the values' expdir."""
    cfg = build_config(values)
    sides = values.get("box_size")
    box = (int(sides[0]), int(sides[1])) if isinstance(sides, (list, tuple)) else None
    run = TutorialRun(world_size=1, box_size=box)
    atomic_write_text(config_file, render_yaml(cfg, run), "a verify run's config")
    args = [
        str(train_py),
        "--yaml_config",
        str(config_file),
        "--config",
        YAML_BLOCK,
        *flag_tokens(cfg, run, SC22),
        "--num_epochs",
        str(cfg.num_epochs),
        "--run_num",
        run_num,
    ]
    return Launch(
        argv=[sys.executable, *args],
        cwd=train_py.parent,
        command=_words(["python", *args]),
    )


@dataclass(frozen=True)
class Ended:
    """How a run ended: "ok", "failed", "timeout" or "stopped", why, and its seconds."""

    status: str
    reason: str
    wall_s: float


def run_launch(
    launch: Launch,
    log: Path,
    limit_s: Callable[[tuple[float, float] | None], float],
    stop: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
) -> Ended:
    """Run `launch` with its output (stdout and stderr) in `log`, ended when `stop()` turns
    true or at its limit: `limit_s(first)`, `first` being (when, its seconds) of its first
    epoch once its line is in the log. A Ctrl-C that reaches here ends it before going on."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    began = clock()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            guarded(launch.argv, os.getpid()),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=launch.cwd,
            env=env,
            start_new_session=True,
        )
    first: tuple[float, float] | None = None
    try:
        while not has_exited(proc):
            if stop():
                _end(proc)
                return Ended("stopped", "stopped before its end", clock() - began)
            if first is None:
                first = _first_epoch(log, clock() - began)
            limit = limit_s(first)
            if clock() - began > limit:
                _end(proc)
                return Ended("timeout", f"ended at its limit of {limit:.0f} s", clock() - began)
            time.sleep(POLL_S)
    except BaseException:
        _end(proc)
        raise
    code = proc.wait()
    wall = clock() - began
    if code == 0:
        return Ended("ok", "", wall)
    said = [line for line in tail_lines(log, 20) if line.strip()]
    why = one_line(said[-1].strip()) if said else f"exit status {code}"
    return Ended("failed", f"{why} (exit status {code}; its log: {log})", wall)


def _first_epoch(log: Path, now: float) -> tuple[float, float] | None:
    """(now, its seconds) once the first epoch's line is in the log."""
    figures = read_figures(tail_lines(log, 200))
    return (now, figures.epochs[0][0]) if figures.epochs else None


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Its whole process group: SIGTERM, then SIGKILL after a grace."""
    signal_group(proc, signal.SIGTERM)
    wait_exit(proc, time.monotonic() + GRACE_S)
    if not has_exited(proc):
        signal_group(proc, signal.SIGKILL)
    proc.wait()


def _words(args: list[str]) -> str:
    """A command line as a shell reads it back, on one line."""
    return " ".join(shell_word(a) for a in args)
