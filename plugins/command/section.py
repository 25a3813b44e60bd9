"""The `command:` section of a preset: checked, one problem a line, and parsed into a CommandSpec.

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

A script that prints no samples/s is timed by tuneup itself: `rate` counts its progress
lines as they come (pytorch/examples' mnist prints one per 10 batches of 64)::

      rate: {pattern: 'Train Epoch: \\d+ \\[(?P<samples>\\d+)/'}

the samples between two lines (from a `samples` group, the count the line prints, or
`samples`, a fixed count a line) over the time between them, each interval one trial;
`skip` then counts such lines, the first ones warm-up. `pattern` is then unused.

Pure: the section as read from YAML in, problems or a frozen spec out.
"""

from __future__ import annotations

import difflib
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.config import knob_names
from tuneup.errors import UsageError

SECTION = "command"
"""The preset key of the section, the trainer's name."""
SECTION_KEYS = (
    "run", "cwd", "flags", "env", "pattern", "loss_pattern", "skip", "limit_s", "rate",
)  # fmt: skip
RATE_KEYS = ("pattern", "samples")
ENV_ENTRY_KEYS = ("var", "values")

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
NUMBER_OR_NAN = rf"(?:{NUMBER}|(?i:[-+]?nan|[-+]?inf(?:inity)?))"
"""A decimal number (and one that may be NaN or infinite), as a regular expression."""

DEFAULT_PATTERN = rf"(?:is (?P<seconds>{NUMBER}) sec, )?avg (?P<sps>{NUMBER}) samples/sec"
"""The tutorial's epoch line; `seconds` (optional) times the warm-up epochs."""
DEFAULT_LOSS_PATTERN = rf"train loss\s*=\s*(?P<loss>{NUMBER_OR_NAN})"
"""The tutorial's per-epoch training loss line, for the divergence guard."""
DEFAULT_SKIP = 1

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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
class RateRule:
    """A rate tuneup takes itself from lines a script prints as it trains: each match's
    samples (its `samples` group, a running count, else `samples` a line) and the time
    it came."""

    pattern: re.Pattern[str]
    samples: int | None = None


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
    rate: RateRule | None = None  # tuneup times the script's progress lines itself

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


def section_problems(data: Any) -> list[str]:
    """Every problem with a ``command:`` section, one line each ([] when it is sound).

    Each line starts with where the problem is (``command.run: ...``).
    """
    where = SECTION
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
    problems += _rate_problems(data.get("rate"), f"{where}.rate")
    return problems + _number_problems(data, where)


def _number_problems(data: Mapping[str, Any], where: str) -> list[str]:
    problems = []
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


def check_command_section(data: Any, source: str) -> list[str]:
    """Every problem with a ``command:`` section, one line each ([] when it is sound).

    Args:
        data: the section as read from YAML.
        source: where it came from (a preset's name or path), to start each line.
    """
    return [f"{source}: {problem}" for problem in section_problems(data)]


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
        rate=_rate_rule(data.get("rate")),
    )


def _rate_rule(rate: Any) -> RateRule | None:
    if not isinstance(rate, Mapping):
        return None
    samples = rate.get("samples")
    return RateRule(re.compile(str(rate["pattern"])), int(samples) if samples else None)


def _rate_problems(rate: Any, where: str) -> list[str]:
    """A `rate` that cannot time anything: no pattern, or no way to count its samples."""
    if rate is None:
        return []
    if not isinstance(rate, Mapping) or "pattern" not in rate:
        return [f"{where}: must be {{pattern: REGEX, samples: N}} (a line a script prints)"]
    unknown = [k for k in rate if k not in RATE_KEYS]
    if unknown:
        return [f"{where}: unknown key {unknown[0]!r} (valid: {', '.join(RATE_KEYS)})"]
    pattern, samples = rate.get("pattern"), rate.get("samples")
    if not isinstance(pattern, str):
        return [f"{where}.pattern: must be a regular expression (text), got {pattern!r}"]
    try:
        groups = re.compile(pattern).groupindex
    except re.error as exc:
        return [f"{where}.pattern: not a regular expression: {exc}"]
    if samples is not None and (
        isinstance(samples, bool) or not isinstance(samples, int) or samples < 1
    ):
        return [f"{where}.samples: must be a whole number of samples a line, got {samples!r}"]
    if "samples" not in groups and samples is None:
        return [
            f"{where}: give the samples a line stands for (samples: N) or a (?P<samples>...) "
            "group that captures the count the line prints"
        ]
    return []


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


# A bare interpreter name in `run` is tuneup's own, which has torch: the PATH's `python`
# is often another (a system one without torch), and the baseline then fails on an import.
BARE_PYTHONS = ("python", "python3")


def _argv(run: str | list[Any]) -> tuple[str, ...]:
    argv = tuple(shlex.split(run)) if isinstance(run, str) else tuple(str(a) for a in run)
    if argv and argv[0] in BARE_PYTHONS:
        return (sys.executable, *argv[1:])
    return argv


def _mapping_problems(
    data: Any, where: str, entry_problems: Callable[[Any, str], list[str]]
) -> list[str]:
    if data is None:
        return []
    if not isinstance(data, Mapping):
        return [f"{where}: must map knob names to how the script takes them, got {data!r}"]
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
