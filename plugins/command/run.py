"""Running one probe of the `command` trainer: the user's command in its own process group.

The child is started through tuneup.probe.runner's ProbeRunner, so a hang, a
crash or Ctrl-C costs one probe and the whole process group is stopped; the
runner's time limit and its verdict on how the child ended stand, and the
command's output adds what only it can tell (its throughput, an
out-of-memory line, its last words).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneup.cluster.launch import LocalLauncher
from tuneup.errors import UsageError
from tuneup.hardware.machine import THREAD_VARIABLES
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.confine import THREADS_VARIABLE
from tuneup.probe.outcome import EXITED, TIMEOUT, signal_reason, with_detail
from tuneup.probe.plan import ProbeSpec, plan_for
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import Candidate, Contention, ProbeBudget, ProbeResult, Status

from .invocation import Invocation, UnsupportedKnob, build_invocation
from .output import (
    measurements,
    no_throughput_reason,
    no_timed_rate_reason,
    parse_output,
    timed_measurements,
)
from .section import CommandSpec

COMMAND_PHASES = ("full",)
"""What a command's probe measures apart: its throughput as the command prints it (FULL)."""

_OOM = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)
_OOM_SCAN_LINES = 40
_REASON_CHARS = 300

# Runs in the child before the user's command: merge stdout into stderr (the log
# file the runner keeps, so every line lands there in order), enter the working
# folder and exec the command. Only os and sys, so it starts in milliseconds.
_EXEC = """\
import os, sys
cwd, argv = sys.argv[1], sys.argv[2:]
os.dup2(2, 1)
sys.stderr.write("tuneup: running " + " ".join(argv) + (" in " + cwd if cwd else "") + "\\n")
sys.stderr.flush()
try:
    if cwd:
        os.chdir(cwd)
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write("tuneup: cannot run %r: %s\\n" % (argv[0], exc.strerror or exc))
    sys.exit(127)
"""
_EXEC_MARK = "tuneup: running "

# The shim for a section with `rate`: it starts the command with its output on a pipe,
# copies every line to the log as it comes and, for each line `rate.pattern` matches,
# writes when it came to a file of its own (the time, a tab, the line). It ends as the
# command did: its exit status, or the signal that killed it.
_EXEC_TIMED = """\
import os, re, signal, subprocess, sys, time
cwd, stamps, pattern, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
sys.stderr.write("tuneup: running " + " ".join(argv) + (" in " + cwd if cwd else "") + "\\n")
sys.stderr.flush()
rx = re.compile(pattern)
try:
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    child = subprocess.Popen(argv, cwd=cwd or None, **pipes)
except OSError as exc:
    sys.stderr.write("tuneup: cannot run %r: %s\\n" % (argv[0], exc.strerror or exc))
    sys.exit(127)
with open(stamps, "w", encoding="utf-8") as out:
    for raw in iter(child.stdout.readline, b""):
        line = raw.decode("utf-8", "replace")
        sys.stderr.write(line)
        sys.stderr.flush()
        if rx.search(line):
            out.write("%.6f\\t%s\\n" % (time.monotonic(), line.rstrip("\\n")))
            out.flush()
code = child.wait()
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


# --- how a run ended ------------------------------------------------------------------------


def judge(
    outcome: ProbeResult,
    ended: str,
    returncode: int | None,
    lines: list[str],
    spec: CommandSpec,
    limit_s: float,
    oom_kills_before: int | None = None,
    stamped: list[tuple[float, str]] | None = None,
) -> tuple[Status, str, dict[str, Any]]:
    """Status, one human reason and the ProbeResult fields for one ended run.

    The runner has judged how the child ended (tuneup.probe.outcome.classify
    and transient); its verdict stands where the output can say nothing more
    (interrupted, the event handler failed, a command that never started), a
    timeout adds how far the command got, and an exit is judged by the output.

    Args:
        outcome: the runner's result for the run: its status, reason and transience.
        ended: how the runner saw the child end (runner.EXITED, TIMEOUT, ...).
        returncode: the child's exit status (negative: killed by that signal);
            None when it never started.
        lines: everything the command printed (stdout and stderr, in order).
        spec: the command section (its patterns and skip).
        limit_s: the wall-clock limit the run had.
        oom_kills_before: the memory cgroup's OOM-kill count when it started.
        stamped: with `rate`, the lines its pattern matched and when each came.
    """
    facts = parse_output(lines, spec.pattern, spec.loss_pattern)
    if ended == TIMEOUT:
        reason = (
            f"no result within {limit_s:g} s ({len(facts.sps)} throughput line(s) by then); "
            "killed; raise command.limit_s or run fewer epochs"
        )
        return Status.TIMEOUT, reason, {}
    if ended != EXITED:
        return outcome.status, outcome.reason, {}
    if returncode is None:  # the launch itself failed
        return Status.CRASH, _last_line(lines) or "the command did not start", {}
    if returncode != 0:
        return _failure(outcome, returncode, lines, oom_kills_before)
    fields = measurements(facts, spec.skip)
    if spec.rate is not None:  # tuneup's own timing of its lines, not a printed rate
        fields = {**_losses(fields), **timed_measurements(stamped or [], spec.rate, spec.skip)}
        if "full_sps" not in fields:
            return Status.CRASH, no_timed_rate_reason(stamped or [], spec), {}
    if "full_sps" not in fields:
        return Status.CRASH, no_throughput_reason(facts, spec), {}
    return Status.OK, "", fields


def _losses(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k in ("losses", "loss_start", "loss_end")}


def _failure(
    outcome: ProbeResult, returncode: int, lines: list[str], oom_kills_before: int | None
) -> tuple[Status, str, dict[str, Any]]:
    """A command that exited with an error or was killed: out of memory, or a crash."""
    oom = _oom_line(lines)
    if oom is not None:
        return Status.OOM, f"out of memory: {oom}", {}
    last = _last_line(lines)
    if returncode < 0:  # the runner judges whether the signal came from outside
        reason = with_detail(signal_reason(-returncode, "command", oom_kills_before), last)
        return Status.CRASH, reason, {"transient": outcome.transient}
    return Status.CRASH, with_detail(f"command exited with status {returncode}", last), {}


def _oom_line(lines: list[str]) -> str | None:
    for line in reversed(lines[-_OOM_SCAN_LINES:]):
        if _OOM.search(line):
            return _short(line)
    return None


def _last_line(lines: list[str]) -> str:
    """The command's last words: the last line it printed (the exec shim's own left out)."""
    for line in reversed(lines):
        if line.strip() and not line.startswith(_EXEC_MARK):
            return _short(line)
    return ""


def _short(line: str) -> str:
    text = " ".join(line.split())
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."


# --- running probes --------------------------------------------------------------------------


@dataclass(frozen=True)
class _CommandLauncher:
    """Starts the exec shim, which runs `invocation` in `cwd` with stdout merged into the log."""

    invocation: Invocation
    cwd: str | None
    python: str = sys.executable
    stamps: Path | None = None  # `rate`: where the timed shim writes its lines' times
    rate_pattern: str = ""

    def command(self, spec_path: Path) -> list[str]:
        del spec_path  # the command reads no spec; the file still records the probe's knobs
        head = [self.python, "-I", "-S", "-c"]
        if self.stamps is not None:
            stamped = [str(self.stamps), self.rate_pattern]
            return [*head, _EXEC_TIMED, self.cwd or "", *stamped, *self.invocation.argv]
        return [*head, _EXEC, self.cwd or "", *self.invocation.argv]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        # A block-buffered stdout would lose a crashed script's last lines.
        env = {**base, "PYTHONUNBUFFERED": "1"}
        for name, text in self.invocation.env.items():
            if text is None:
                env.pop(name, None)
            else:
                env[name] = text
        return env


class CommandBackend(ProbeBackend):
    """Each probe runs the section's command in its own process group, with a time limit.

    The limit is the section's `limit_s`, else the preset's probe budget's.
    Everything the command prints (stdout and stderr) is kept in
    ``NNNN-<stage>.stderr.log`` under `workdir`, next to the probe's knobs in
    ``NNNN-<stage>.json``.
    """

    def __init__(
        self,
        spec: CommandSpec,
        workdir: Path,
        budget: ProbeBudget,
        seed: int = 0,
        *,
        world_size: int = 1,
        python: str = sys.executable,
        grace_s: float = 5.0,
    ) -> None:
        self.spec = spec
        self.budget = budget
        self.seed = seed
        self.world_size = world_size
        self.python = python
        self.runner = ProbeRunner(LocalLauncher(), workdir, grace_s=grace_s)
        self.threads: int | None = None  # confined to, under others' load (confine.py)

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        variant = dict(candidate.values)
        try:
            if candidate.ranks is not None and candidate.ranks != self.world_size:
                raise UnsupportedKnob(
                    f"this probe asks for {candidate.ranks} rank(s); the command trainer runs "
                    "the command as written and cannot change how many ranks it starts"
                )
            invocation = build_invocation(self.spec, values, variant)
        except UnsupportedKnob as exc:
            return ProbeResult(stage, variant, dict(values), Status.UNSUPPORTED, str(exc))
        invocation, confined = self._confined(invocation)
        stamps = None
        if self.spec.rate is not None:  # the script prints no rate: its lines are timed
            stamps = self.runner.workdir / f".rate-{secrets.token_hex(4)}.tsv"
        rate_pattern = self.spec.rate.pattern.pattern if self.spec.rate is not None else ""
        launcher = _CommandLauncher(invocation, self.spec.cwd, self.python, stamps, rate_pattern)
        # The command measures what it measures (its epochs, or benchy's phases): the
        # plan records that FULL judges it and bounds the run with the budget's limit.
        plan = plan_for(self.budget, candidate, available=COMMAND_PHASES)
        probe = ProbeSpec(config=dict(values), plan=plan, seed=self.seed)
        outcome = self.runner.run(
            stage, variant, probe, limit_s=self.spec.limit_s, launcher=launcher
        )
        record = self.runner.last_run
        if record is None:  # run() records every run it starts; nothing to read otherwise
            return outcome
        lines = _read_lines(record.stderr_path)
        if record.returncode is None:
            lines += record.stderr_tail  # the launch itself failed: the runner's own words
        status, reason, fields = judge(
            outcome,
            record.ended,
            record.returncode,
            lines,
            self.spec,
            record.limit_s,
            record.oom_kills_before,
            stamped=_stamped(stamps),
        )
        held = Contention(confined_threads=confined) if confined else None
        return ProbeResult(
            stage,
            variant,
            dict(values),
            status,
            reason,
            wall_s=outcome.wall_s,
            contention=held,
            **fields,
        )

    def confine_threads(self, threads: int) -> bool:
        """Later probes run with OMP_NUM_THREADS set to `threads` (probe/confine.py); not
        where the user's environment or the section sets a thread count: theirs holds."""
        if any(name in os.environ for name in THREAD_VARIABLES) or self._sets_threads():
            return False
        self.threads = threads
        return True

    def _sets_threads(self) -> bool:
        """The section maps a knob to a thread variable: the threads are its knob's to set."""
        return any(rule.var in THREAD_VARIABLES for rule in self.spec.env.values())

    def _confined(self, invocation: Invocation) -> tuple[Invocation, int | None]:
        """The invocation with the confined thread count, where the count is torch's own."""
        given = {*invocation.env, *os.environ}  # the section's knob, or the user's own
        if self.threads is None or any(name in given for name in THREAD_VARIABLES):
            return invocation, None
        env = {**invocation.env, THREADS_VARIABLE: str(self.threads)}
        return dataclasses.replace(invocation, env=env), self.threads

    @property
    def limit_s(self) -> float | None:
        """The section's `limit_s`: the session starts no probe the allocation would cut."""
        return self.spec.limit_s

    def interrupt(self) -> None:
        """Stop the running probe and any later one (safe from a signal handler)."""
        self.runner.interrupt()


def _stamped(stamps: Path | None) -> list[tuple[float, str]] | None:
    """The timed shim's lines (when each came, the line), the file removed; None without
    `rate`."""
    if stamps is None:
        return None
    found = []
    for line in _read_lines(stamps):
        when, _, text = line.partition("\t")
        with contextlib.suppress(ValueError):
            found.append((float(when), text))
    stamps.unlink(missing_ok=True)
    return found


def _read_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()


def check_runnable(spec: CommandSpec) -> None:
    """Fail before the session starts when the folder or the program is missing.

    Raises:
        UsageError: command.cwd is not a folder, or the program is not found.
    """
    if spec.cwd is not None and not Path(spec.cwd).is_dir():
        raise UsageError(f"{spec.source}: command.cwd: no such folder: {spec.cwd}")
    program = spec.argv[0]
    if "/" in program:
        path = Path(program)
        if not path.is_absolute() and spec.cwd is not None:
            path = Path(spec.cwd) / path
        if not path.is_file():
            raise UsageError(f"{spec.source}: command.run: no such program: {path}")
    elif shutil.which(program) is None:
        raise UsageError(
            f"{spec.source}: command.run: '{program}' is not on PATH (give its full path)"
        )
