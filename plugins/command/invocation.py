"""One probe's command line: the section's run with the probe's knob values as flags and variables.

Pure: a CommandSpec and knob values in, an Invocation (arguments and the
environment changes) out; a value the section gives no way to pass raises
UnsupportedKnob, which makes the probe `unsupported`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuneup.config import unset_value
from tuneup.probe.stages import knob_defaults

from .section import CommandSpec, FlagRule, value_text


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
    for knob, variable in spec.env.items():
        if knob not in values:
            continue
        value = values[knob]
        if variable.table is None:
            # None, or the knob's own "not set" (intra_op_threads' 0): the variable is
            # left as the user's environment has it, never set to a meaningless 0
            if value is not None and value != unset_value(knob):
                env[variable.var] = value_text(value)
            continue
        found, text = _lookup(variable.table, knob, value, f"command.env.{knob}")
        if found:
            env[variable.var] = text
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
    if value_text(knob_defaults().get(knob)) == key:
        return False, None  # the default: the script runs its own
    listed = ", ".join(table)
    raise UnsupportedKnob(f"{where} lists no entry for {knob}={key} (it lists: {listed})")
