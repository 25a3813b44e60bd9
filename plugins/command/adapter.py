"""The `command` trainer: tune any training script by running it and reading its output.

A preset's ``command:`` section says how to run the script and how each knob
reaches it (a command-line flag or an environment variable); each probe runs
the command as a child process with a time limit and reads samples/s from
what it prints. The defaults read the NERSC tutorial's own ``train.py``:

- its epoch line, ``Time taken for epoch N is X sec, avg Y samples/sec``
  (the first epoch is slow, so ``skip: 1`` drops it as warm-up), and its
  ``Avg train loss=L`` line for the loss guard;
- benchy's lines when it runs with ``--enable_benchy`` (as benchy prints
  them, on rank 0): one ``BENCHY::FULL_0::Trial Throughput: Y`` per timed
  trial (warm-up trials are labelled ``FULL_WARMUP_0``), and at the end
  ``BENCHY::SUMMARY::IO average trial throughput: Y +/- S`` (also
  ``SUMMARY:: SYNTHETIC`` and ``SUMMARY::FULL``), which give the
  IO/SYNTHETIC/FULL split.

The section (every key but ``run`` is optional)::

    command:
      run: "python train.py --yaml_config config/UNet.yaml --config base --num_epochs 3"
      cwd: ~/sc22-dl-tutorial
      flags:
        num_data_workers: "--num_data_workers {value}"
        broadcast_buffers: {false: "--disable_broadcast_buffers", true: null}
      env:
        tf32: {var: NVIDIA_TF32_OVERRIDE, values: {false: "0", true: null}}
      pattern: 'avg (?P<sps>[0-9.]+) samples/sec'
      loss_pattern: 'train loss=(?P<loss>\\S+)'
      skip: 1
      limit_s: 1800

Pure parts (section checking, argument building, output parsing, judging
how a run ended) are plain functions; `CommandBackend` runs the child through
tuneup.probe.runner's ProbeRunner, so a hang, a crash or Ctrl-C costs one
probe and the whole process group is stopped.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
import shutil
import signal
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.types import Budget, Candidate, ProbeResult, ProbeSpec, Status

SECTION_KEYS = ("run", "cwd", "flags", "env", "pattern", "loss_pattern", "skip", "limit_s")
ENV_ENTRY_KEYS = ("var", "values")

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_OR_NAN = rf"(?:{_NUMBER}|(?i:[-+]?nan|[-+]?inf(?:inity)?))"

DEFAULT_PATTERN = rf"(?:is (?P<seconds>{_NUMBER}) sec, )?avg (?P<sps>{_NUMBER}) samples/sec"
"""The tutorial's epoch line; `seconds` (optional) times the warm-up epochs."""
DEFAULT_LOSS_PATTERN = rf"train loss\s*=\s*(?P<loss>{_NUMBER_OR_NAN})"
"""The tutorial's per-epoch training loss line, for the divergence guard."""
DEFAULT_SKIP = 1

# benchy's summary: the mean and standard deviation of its trials' throughputs (its
# README's older example says "average throughput", without "trial").
_BENCHY_SUMMARY = re.compile(
    rf"BENCHY::SUMMARY::\s*(?P<phase>IO|SYNTHETIC|FULL) average (?:trial )?throughput:\s*"
    rf"(?P<sps>{_NUMBER})(?:\s*\+/-\s*(?P<std>{_NUMBER}))?"
)
# One timed trial: its batches over its wall time. Warm-up trials (IO_WARMUP_0, ...)
# do not match; nor do the per-iteration lines ("Iteration Throughput", "Average
# Iteration Throughput"), which leave out the time between trials' batches.
_BENCHY_TRIAL = re.compile(
    rf"BENCHY::(?P<phase>IO|SYNTHETIC|FULL)_\d+::Trial Throughput:\s*(?P<sps>{_NUMBER})"
)
# A normal distribution's interquartile range is 1.349 standard deviations.
_IQR_PER_STD = 1.349
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OOM = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)
_OOM_SCAN_LINES = 40

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


# --- the section -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagRule:
    """How one knob becomes command-line arguments.

    Either `template` (tokens with ``{value}`` replaced) or `table` (a
    rendered value -> the tokens for it; None means pass nothing).
    """

    knob: str
    template: tuple[str, ...] | None = None
    table: dict[str, tuple[str, ...] | None] | None = None


@dataclass(frozen=True)
class EnvRule:
    """How one knob becomes an environment variable: the value as text, or by `table`."""

    knob: str
    var: str
    table: dict[str, str | None] | None = None


@dataclass(frozen=True)
class CommandSpec:
    """A checked ``command:`` section."""

    argv: tuple[str, ...]
    cwd: str | None = None
    flags: dict[str, FlagRule] = field(default_factory=dict)
    env: dict[str, EnvRule] = field(default_factory=dict)
    pattern: re.Pattern[str] = re.compile(DEFAULT_PATTERN)
    loss_pattern: re.Pattern[str] | None = re.compile(DEFAULT_LOSS_PATTERN)
    skip: int = DEFAULT_SKIP
    limit_s: float | None = None
    source: str = "command"

    @property
    def mapped(self) -> set[str]:
        """The knobs this command can be driven by."""
        return set(self.flags) | set(self.env)


def value_text(value: Any) -> str:
    """A knob value as the script sees it: YAML spelling for booleans and null."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return ",".join(value_text(v) for v in value)
    return str(value)


def check_command_section(data: Any, source: str) -> list[str]:
    """Every problem with a ``command:`` section, one line each ([] when it is sound).

    Args:
        data: the section as read from YAML.
        source: where it came from (a preset's name or path), to start each line.
    """
    where = f"{source}: command"
    if not isinstance(data, Mapping):
        return [f"{where}: must be a mapping with at least `run` (the training command)"]
    problems: list[str] = []
    for key in data:
        if key not in SECTION_KEYS:
            problems.append(
                f"{where}: unknown key '{key}'{_suggest(str(key), SECTION_KEYS)} "
                f"(valid: {', '.join(SECTION_KEYS)})"
            )
    if "run" not in data:
        problems.append(f"{where}.run: missing: the command that trains, e.g. 'python train.py'")
    else:
        problems += _run_problems(data["run"], f"{where}.run")
    cwd = data.get("cwd")
    if cwd is not None and not (isinstance(cwd, str) and cwd.strip()):
        problems.append(f"{where}.cwd: must be a folder path, got {cwd!r}")
    problems += _mapping_problems(data.get("flags"), f"{where}.flags", _flag_problems)
    problems += _mapping_problems(data.get("env"), f"{where}.env", _env_problems)
    problems += _pattern_problems(data.get("pattern", DEFAULT_PATTERN), f"{where}.pattern", "sps")
    loss = data.get("loss_pattern", DEFAULT_LOSS_PATTERN)
    if loss is not None:
        problems += _pattern_problems(loss, f"{where}.loss_pattern", "loss")
    skip = data.get("skip", DEFAULT_SKIP)
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        problems.append(
            f"{where}.skip: must be a whole number of throughput lines (0 or more), got {skip!r}"
        )
    limit = data.get("limit_s")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0
    ):
        problems.append(f"{where}.limit_s: must be a positive number of seconds, got {limit!r}")
    return problems


def parse_command_section(data: Any, source: str) -> CommandSpec:
    """A checked CommandSpec.

    Raises:
        UsageError: the first problem check_command_section finds (and how many more).
    """
    problems = check_command_section(data, source)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise UsageError(problems[0] + more)
    loss = data.get("loss_pattern", DEFAULT_LOSS_PATTERN)
    limit = data.get("limit_s")
    return CommandSpec(
        argv=_argv(data["run"]),
        cwd=str(Path(data["cwd"]).expanduser()) if data.get("cwd") else None,
        flags={str(k): _flag_rule(str(k), v) for k, v in (data.get("flags") or {}).items()},
        env={str(k): _env_rule(str(k), v) for k, v in (data.get("env") or {}).items()},
        pattern=re.compile(data.get("pattern", DEFAULT_PATTERN)),
        loss_pattern=re.compile(loss) if loss is not None else None,
        skip=int(data.get("skip", DEFAULT_SKIP)),
        limit_s=float(limit) if limit is not None else None,
        source=source,
    )


def _run_problems(run: Any, where: str) -> list[str]:
    if isinstance(run, str):
        try:
            tokens = shlex.split(run)
        except ValueError as exc:
            return [f"{where}: cannot split {run!r} into arguments: {exc}"]
        return [] if tokens else [f"{where}: is empty; give the command that trains"]
    if isinstance(run, list):
        if not run:
            return [f"{where}: is empty; give the command that trains"]
        bad = [
            item
            for item in run
            if isinstance(item, bool) or not isinstance(item, (str, int, float))
        ]
        if bad:
            return [f"{where}: every argument must be text, got {bad[0]!r}"]
        return []
    return [f"{where}: must be a command line (text) or a list of arguments, got {run!r}"]


def _argv(run: str | list[Any]) -> tuple[str, ...]:
    return tuple(shlex.split(run)) if isinstance(run, str) else tuple(str(a) for a in run)


def _mapping_problems(data: Any, where: str, entry_problems: Any) -> list[str]:
    if data is None:
        return []
    if not isinstance(data, Mapping):
        return [f"{where}: must map knob names to how the script takes them, got {data!r}"]
    from tuneup.config import knob_names

    knobs = knob_names()
    problems: list[str] = []
    for knob, rule in data.items():
        if knob not in knobs:
            problems.append(
                f"{where}: '{knob}' is not a TrainConfig knob{_suggest(str(knob), knobs)} "
                "(stages drive knobs; see `tuneup train --help` for their names)"
            )
            continue
        problems += entry_problems(rule, f"{where}.{knob}")
    return problems


def _flag_problems(rule: Any, where: str) -> list[str]:
    if isinstance(rule, (str, list)):
        tokens = _tokens(rule, where)
        if isinstance(tokens, str):
            return [tokens]
        if not tokens:
            return [f"{where}: is empty; give the flags, e.g. '--name {{value}}'"]
        if not any("{value}" in t for t in tokens):
            return [
                f"{where}: {rule!r} has no {{value}}, so every value would pass the same "
                f"arguments; use a table instead, e.g. {{true: {rule!r}, false: null}}"
            ]
        return []
    if isinstance(rule, Mapping):
        if not rule:
            return [f"{where}: the table is empty; list the values the script accepts"]
        problems = []
        for value, entry in rule.items():
            if entry is None:
                continue
            tokens = _tokens(entry, f"{where}.{value_text(value)}")
            if isinstance(tokens, str):
                problems.append(tokens)
        return problems
    return [
        f"{where}: must be a flag template ('--name {{value}}'), a list of arguments, or a table "
        f"of values to flags, got {rule!r}"
    ]


def _tokens(entry: Any, where: str) -> list[str] | str:
    """Arguments from a template string (split like a shell) or a list; a problem as text."""
    if isinstance(entry, str):
        try:
            return shlex.split(entry)
        except ValueError as exc:
            return f"{where}: cannot split {entry!r} into arguments: {exc}"
    if isinstance(entry, list) and all(
        isinstance(t, (str, int, float)) and not isinstance(t, bool) for t in entry
    ):
        return [str(t) for t in entry]
    return f"{where}: must be text or a list of arguments, got {entry!r}"


def _env_problems(rule: Any, where: str) -> list[str]:
    if isinstance(rule, str):
        return [] if _ENV_NAME.match(rule) else [f"{where}: {rule!r} is not a variable name"]
    if not isinstance(rule, Mapping):
        return [f"{where}: must be a variable name or {{var: NAME, values: {{...}}}}, got {rule!r}"]
    problems = [
        f"{where}: unknown key '{key}' (valid: {', '.join(ENV_ENTRY_KEYS)})"
        for key in rule
        if key not in ENV_ENTRY_KEYS
    ]
    var = rule.get("var")
    if not isinstance(var, str) or not _ENV_NAME.match(var):
        problems.append(f"{where}.var: must be an environment variable name, got {var!r}")
    values = rule.get("values")
    if values is not None:
        if not isinstance(values, Mapping) or not values:
            problems.append(f"{where}.values: must map knob values to the variable's text")
        else:
            for value, text in values.items():
                if isinstance(text, (Mapping, list)):
                    problems.append(
                        f"{where}.values.{value_text(value)}: must be text or null, got {text!r}"
                    )
    return problems


def _pattern_problems(pattern: Any, where: str, group: str) -> list[str]:
    if not isinstance(pattern, str):
        return [f"{where}: must be a regular expression (text), got {pattern!r}"]
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return [f"{where}: not a valid regular expression: {exc}"]
    if group not in compiled.groupindex:
        return [f"{where}: needs a group named '{group}' around the number, as (?P<{group}>...)"]
    return []


def _flag_rule(knob: str, rule: Any) -> FlagRule:
    if isinstance(rule, Mapping):
        table = {
            value_text(v): (None if entry is None else tuple(_tokens(entry, knob)) or None)
            for v, entry in rule.items()
        }
        return FlagRule(knob, table=table)
    return FlagRule(knob, template=tuple(_tokens(rule, knob)))


def _env_rule(knob: str, rule: Any) -> EnvRule:
    if isinstance(rule, str):
        return EnvRule(knob, rule)
    values = rule.get("values")
    table = None
    if values is not None:
        table = {value_text(v): (None if t is None else value_text(t)) for v, t in values.items()}
    return EnvRule(knob, rule["var"], table)


def _suggest(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


# --- one probe's command line ----------------------------------------------------------------


class UnsupportedKnob(Exception):
    """A knob value the command section gives no way to pass; the probe is `unsupported`."""


@dataclass(frozen=True)
class Invocation:
    """One probe's child: its arguments and the environment changes on top of tuneup's own."""

    argv: tuple[str, ...]
    env: dict[str, str | None] = field(default_factory=dict)  # None: remove the variable


def build_invocation(
    spec: CommandSpec, values: Mapping[str, Any], varied: Iterable[str] = ()
) -> Invocation:
    """The command line and environment for a probe of `values`.

    Mapped knobs present in `values` are passed (in the order of the section);
    knobs absent from `values`, or None with a plain template, are left to the
    script's own defaults.

    Args:
        spec: the command section.
        values: the probe's knob values (the incumbent plus the candidate's).
        varied: the knobs the stage sets; each must be mapped.

    Raises:
        UnsupportedKnob: a varied knob is not mapped, or a value has no entry in
            its table (and is not the knob's default, which the script is taken
            to have already).
    """
    unmapped = [k for k in varied if k not in spec.mapped]
    if unmapped:
        names = ", ".join(unmapped)
        raise UnsupportedKnob(
            f"the command section maps no flag or environment variable for {names}; "
            f"add {unmapped[0]} under command.flags or command.env"
        )
    argv = list(spec.argv)
    for knob, rule in spec.flags.items():
        if knob in values:
            argv += _flag_args(rule, values[knob])
    env: dict[str, str | None] = {}
    for knob, rule in spec.env.items():
        if knob not in values:
            continue
        value = values[knob]
        if rule.table is None:
            if value is not None:
                env[rule.var] = value_text(value)
            continue
        found, text = _lookup(rule.table, knob, value, f"command.env.{knob}")
        if found:
            env[rule.var] = text
    return Invocation(tuple(argv), env)


def _flag_args(rule: FlagRule, value: Any) -> list[str]:
    if rule.table is None:
        if value is None:
            return []
        text = value_text(value)
        return [token.replace("{value}", text) for token in rule.template or ()]
    found, tokens = _lookup(rule.table, rule.knob, value, f"command.flags.{rule.knob}")
    if not found or tokens is None:
        return []
    text = value_text(value)
    return [token.replace("{value}", text) for token in tokens]


def _lookup(table: Mapping[str, Any], knob: str, value: Any, where: str) -> tuple[bool, Any]:
    key = value_text(value)
    if key in table:
        return True, table[key]
    from tuneup.probe.stages import knob_defaults

    if value_text(knob_defaults().get(knob)) == key:
        return False, None  # the default: the script runs its own
    listed = ", ".join(table)
    raise UnsupportedKnob(f"{where} lists no entry for {knob}={key} (it lists: {listed})")


# --- reading the output ----------------------------------------------------------------------


@dataclass(frozen=True)
class OutputFacts:
    """What a run printed that tuneup can use, in order."""

    sps: tuple[float, ...] = ()  # every pattern match
    seconds: tuple[float | None, ...] = ()  # the matches' `seconds` group, when there is one
    losses: tuple[float, ...] = ()
    benchy_summary: dict[str, float] = field(default_factory=dict)  # io/synthetic/full
    benchy_trials: dict[str, tuple[float, ...]] = field(default_factory=dict)
    benchy_std: dict[str, float] = field(default_factory=dict)  # the summary's +/- S

    @property
    def benchy(self) -> bool:
        return bool(self.benchy_summary or self.benchy_trials)


def parse_output(
    lines: Iterable[str],
    pattern: re.Pattern[str] = re.compile(DEFAULT_PATTERN),
    loss_pattern: re.Pattern[str] | None = re.compile(DEFAULT_LOSS_PATTERN),
) -> OutputFacts:
    """Throughput, loss and benchy lines found in the output, searched line by line."""
    sps: list[float] = []
    seconds: list[float | None] = []
    losses: list[float] = []
    summary: dict[str, float] = {}
    std: dict[str, float] = {}
    trials: dict[str, list[float]] = {}
    for line in lines:
        if "BENCHY::" in line:
            found = _BENCHY_SUMMARY.search(line)
            if found:
                summary[found["phase"].lower()] = float(found["sps"])
                if found["std"] is not None:
                    std[found["phase"].lower()] = float(found["std"])
                continue
            found = _BENCHY_TRIAL.search(line)
            if found:
                trials.setdefault(found["phase"].lower(), []).append(float(found["sps"]))
            continue
        match = pattern.search(line)
        if match:
            rate = _float(match.group("sps"))
            if rate is not None:
                sps.append(rate)
                secs = match.groupdict().get("seconds")
                seconds.append(_float(secs) if secs is not None else None)
        if loss_pattern is not None:
            found = loss_pattern.search(line)
            if found:
                loss = _float(found.group("loss"))
                if loss is not None:
                    losses.append(loss)
    return OutputFacts(
        tuple(sps),
        tuple(seconds),
        tuple(losses),
        summary,
        {phase: tuple(values) for phase, values in trials.items()},
        std,
    )


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def measurements(facts: OutputFacts, skip: int) -> dict[str, Any]:
    """ProbeResult fields from the output; no `full_sps` when it has no throughput.

    With benchy's lines, IO/SYNTHETIC/FULL come from benchy and the epoch
    lines are ignored (under benchy the epochs are benchy's own trials): each
    phase is the median of its `Trial Throughput` lines, as tuneup's own
    phases are, and FULL's trials are the trials. A phase with a summary but
    no trial line (a log cut short, an older benchy) takes the summary's mean,
    and FULL's spread is the summary's +/- as an interquartile range; its one
    figure stands as one trial, so the noise it has is not claimed as known.
    """
    from tuneup.probe.stats import iqr_pct, median

    fields: dict[str, Any] = {}
    if facts.losses:
        fields["losses"] = list(facts.losses)
        fields["loss_start"], fields["loss_end"] = facts.losses[0], facts.losses[-1]
    if facts.benchy:
        for phase in ("io", "synthetic", "full"):
            trials = list(facts.benchy_trials.get(phase, ()))
            value = median(trials) if trials else facts.benchy_summary.get(phase)
            if value is not None:
                fields[f"{phase}_sps"] = value
        full_trials = list(facts.benchy_trials.get("full", ()))
        if full_trials:
            fields["full_sps_trials"] = full_trials
            fields["iqr_pct"] = iqr_pct(full_trials)
        elif "full_sps" in fields:
            fields["full_sps_trials"] = [fields["full_sps"]]
            std = facts.benchy_std.get("full")
            if std is not None and fields["full_sps"] > 0:
                fields["iqr_pct"] = 100.0 * _IQR_PER_STD * std / fields["full_sps"]
        return fields
    trials = [t for t in facts.sps[skip:] if math.isfinite(t)]
    if trials:
        fields["full_sps"] = median(trials)
        fields["full_sps_trials"] = trials
        fields["iqr_pct"] = iqr_pct(trials)
    warm = [s for s in facts.seconds[:skip] if s is not None]
    if warm:
        fields["warmup_s"] = sum(warm)
    return fields


def no_throughput_reason(facts: OutputFacts, spec: CommandSpec) -> str:
    """Why a run that ended cleanly has no throughput, saying what to change."""
    if facts.benchy:
        return (
            "benchy printed no FULL throughput (its full benchmark did not run; "
            "check benchy's configuration)"
        )
    pattern = spec.pattern.pattern
    if facts.sps:
        return (
            f"only {len(facts.sps)} throughput line(s), all skipped as warm-up "
            f"(command.skip is {spec.skip}): run more epochs or lower skip"
        )
    if pattern == DEFAULT_PATTERN:
        return (
            "no throughput found in the output (looked for the tutorial's 'avg Y samples/sec' "
            "epoch lines and benchy's BENCHY::SUMMARY lines; set command.pattern to match "
            "this script's)"
        )
    return f"no throughput found in the output (pattern {pattern!r})"


# --- how a run ended ------------------------------------------------------------------------


def judge(
    ended: str,
    returncode: int | None,
    limit_s: float,
    lines: list[str],
    spec: CommandSpec,
) -> tuple[Status, str, dict[str, Any]]:
    """Status, one human reason and the ProbeResult fields for one ended run.

    Args:
        ended: how the runner saw the child end (runner.EXITED, TIMEOUT, ...).
        returncode: the child's exit status (negative: killed by that signal);
            None when it never started.
        limit_s: the time limit, quoted when it was hit.
        lines: everything the command printed (stdout and stderr, in order).
        spec: the command section (its patterns and skip).
    """
    from tuneup.probe import runner

    facts = parse_output(lines, spec.pattern, spec.loss_pattern)
    fields = measurements(facts, spec.skip)
    last = _last_line(lines)
    if ended == runner.INTERRUPTED:
        return Status.CRASH, "interrupted by user", {}
    if ended == runner.TIMEOUT:
        seen = len(facts.sps)
        return (
            Status.TIMEOUT,
            f"no result within {limit_s:g} s ({seen} throughput line(s) by then); killed; "
            "raise command.limit_s or run fewer epochs",
            {},
        )
    if ended != runner.EXITED:
        return Status.CRASH, "stopped: the event handler failed", {}
    if returncode is None:
        return Status.CRASH, last or "the command did not start", {}
    if returncode != 0:
        oom = _oom_line(lines)
        if oom is not None:
            return Status.OOM, f"out of memory: {oom}", {}
        if returncode < 0:  # killed from outside, it may well run the next time
            from tuneup.probe.runner import CRASH_SIGNALS

            reason = _with_detail(_signal_reason(-returncode), last)
            return Status.CRASH, reason, {"transient": -returncode not in CRASH_SIGNALS}
        return Status.CRASH, _with_detail(f"command exited with status {returncode}", last), {}
    if "full_sps" not in fields:
        return Status.CRASH, no_throughput_reason(facts, spec), {}
    return Status.OK, "", fields


def _oom_line(lines: list[str]) -> str | None:
    for line in reversed(lines[-_OOM_SCAN_LINES:]):
        if _OOM.search(line):
            return _short(line)
    return None


def _signal_reason(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    reason = f"command killed by {name}"
    if signum == signal.SIGKILL:
        reason += " (the kernel's out-of-memory killer does this when host memory runs out)"
    elif signum == signal.SIGSEGV:
        reason += " (segmentation fault)"
    return reason


def _last_line(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.strip() and not line.startswith(_EXEC_MARK):
            return _short(line)
    return ""


def _short(line: str, limit: int = 300) -> str:
    text = " ".join(line.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _with_detail(reason: str, detail: str) -> str:
    return f"{reason}: {detail}" if detail else reason


# --- running probes --------------------------------------------------------------------------


@dataclass(frozen=True)
class _CommandLauncher:
    """Starts the exec shim, which runs `invocation` in `cwd` with stdout merged into the log."""

    invocation: Invocation
    cwd: str | None
    python: str = sys.executable

    def command(self, spec_path: Path) -> list[str]:
        del spec_path  # the command reads no spec; the file still records the probe's knobs
        return [self.python, "-I", "-S", "-c", _EXEC, self.cwd or "", *self.invocation.argv]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        # A block-buffered stdout would lose a crashed script's last lines.
        env = {**base, "PYTHONUNBUFFERED": "1"}
        for name, text in self.invocation.env.items():
            if text is None:
                env.pop(name, None)
            else:
                env[name] = text
        return env


class CommandBackend:
    """Each probe runs the section's command in its own process group, with a time limit.

    Everything the command prints (stdout and stderr) is kept in
    ``NNNN-<stage>.stderr.log`` under `workdir`, next to the probe's knobs in
    ``NNNN-<stage>.json``.
    """

    def __init__(
        self,
        spec: CommandSpec,
        workdir: Path,
        budget: Budget,
        seed: int = 0,
        *,
        world_size: int = 1,
        python: str = sys.executable,
        grace_s: float = 5.0,
    ) -> None:
        from tuneup.probe.runner import LocalLauncher, ProbeRunner

        self.spec = spec
        self.budget = budget
        self.seed = seed
        self.world_size = world_size
        self.python = python
        self.runner = ProbeRunner(LocalLauncher(), workdir, grace_s=grace_s)

    @property
    def limit_s(self) -> float:
        return self.spec.limit_s if self.spec.limit_s is not None else self.budget.limit_s

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
        launcher = _CommandLauncher(invocation, self.spec.cwd, self.python)
        probe = ProbeSpec(config=dict(values), budget=self.budget, seed=self.seed)
        measured = self.runner.run(stage, variant, probe, limit_s=self.limit_s, launcher=launcher)
        record = self.runner.last_run
        lines = _read_lines(record.stderr_path) if record is not None else []
        if record is not None and record.returncode is None:
            lines += record.stderr_tail  # the launch itself failed: the runner's own words
        status, reason, fields = judge(
            record.ended if record is not None else "exited",
            record.returncode if record is not None else None,
            self.limit_s,
            lines,
            self.spec,
        )
        result = ProbeResult(stage, variant, dict(values), status, reason, wall_s=measured.wall_s)
        for name, value in fields.items():
            setattr(result, name, value)
        return result

    def interrupt(self) -> None:
        """Stop the running probe and any later one (safe from a signal handler)."""
        self.runner.interrupt()


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
