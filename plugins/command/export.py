"""Exports of a session that tuned the user's own command (the `command` trainer).

The export is the user's command, not tuneup's: the preset's `run` with the
flags and variables its `command:` section maps, for every tuned value (a
value equal to one of tuneup's defaults included), exactly as the probes ran
it. Pure: the section, the tuned values and the hints in, text out.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from tuneup.config import TrainConfig
from tuneup.errors import UsageError
from tuneup.export.slurm import job_layout, script_head, site_env_lines

from .invocation import Invocation, UnsupportedKnob, build_invocation
from .section import CommandSpec

EXPORT_FILES = {
    "command": "command.sh",
    "flags": "flags.txt",
    "env": "env.sh",
    "sbatch": "job.sbatch",
}
"""The formats of a command session, each with the file the app's export-all writes."""
COMMAND_FORMATS = tuple(EXPORT_FILES)


def invocation(spec: CommandSpec, values: Mapping[str, Any]) -> Invocation:
    """The arguments and variables the confirmation ran the command with.

    Raises:
        UsageError: a tuned value the section cannot pass (the session is not this
            section's, or the preset changed since).
    """
    try:
        return build_invocation(spec, values)
    except UnsupportedKnob as exc:
        raise UsageError(
            f"cannot export the command: {exc} (was the preset's command section changed "
            "since the session?)"
        ) from None


def tuned_flags(spec: CommandSpec, values: Mapping[str, Any]) -> list[str]:
    """Only the mapped flags, in the section's order, as the command receives them."""
    return list(invocation(spec, values).argv[len(spec.argv) :])


def _env_words(env: Mapping[str, str | None]) -> list[str]:
    """`env -u A B=1` (or just `B=1`) to set and unset variables for one command."""
    unset = [name for name, text in env.items() if text is None]
    assign = [f"{name}={shlex.quote(text)}" for name, text in env.items() if text is not None]
    if not unset:
        return assign
    return ["env", *(f"-u {shlex.quote(name)}" for name in unset), *assign]


def render_command(spec: CommandSpec, values: Mapping[str, Any]) -> str:
    """One line to paste: enter the folder, set the variables, run the tuned command."""
    run = invocation(spec, values)
    words = [*_env_words(run.env), shlex.join(run.argv)]
    line = " ".join(words)
    if spec.cwd:
        line = f"cd {shlex.quote(spec.cwd)} && {line}"
    return line + "\n"


def render_flags(spec: CommandSpec, values: Mapping[str, Any]) -> str:
    return shlex.join(tuned_flags(spec, values)) + "\n"


def env_lines(env: Mapping[str, str | None]) -> list[str]:
    return [
        f"export {name}={shlex.quote(text)}" if text is not None else f"unset {name}"
        for name, text in env.items()
    ]


def render_env(spec: CommandSpec, values: Mapping[str, Any]) -> str:
    run = invocation(spec, values)
    lines = ["# tuneup: the variables your command was tuned with; source this file first"]
    lines += env_lines(run.env)
    left = [f"{rule.var} ({knob})" for knob, rule in spec.env.items() if rule.var not in run.env]
    if left:  # mapped, and the tuned value sets none (a thread count left to torch)
        lines.append(
            f"# left as your environment has them (nothing tuned sets them): {', '.join(left)}"
        )
    if not spec.env:
        lines.append("# (none: the command section maps no knob to a variable)")
    return "\n".join(lines) + "\n"


def render_sbatch(
    spec: CommandSpec,
    values: Mapping[str, Any],
    cfg: TrainConfig,
    hints: Mapping[str, Any] | None,
) -> str:
    """A batch script that runs the tuned command as the probes ran it: one task a node.

    The command starts its own ranks (a torchrun in `run`) or trains on one GPU,
    as it did in the probes, so the task holds the node's GPUs and their share of
    the node's CPUs.
    """
    layout = job_layout(cfg, hints, one_task=True)
    run = invocation(spec, values)
    lines = [*script_head(layout), *site_env_lines(layout.site)]
    if run.env:
        lines.append("# the variables your command was tuned with")
        lines += env_lines(run.env)
    if spec.cwd:
        lines.append(f"cd {shlex.quote(spec.cwd)}")
    lines += [
        "",
        "# your command with its tuned flags, as the probes ran it",
        f"srun --ntasks-per-node=1 --cpus-per-task={layout.cpus_per_task} {shlex.join(run.argv)}",
    ]
    return "\n".join(lines) + "\n"


def render(
    fmt: str,
    spec: CommandSpec,
    values: Mapping[str, Any],
    cfg: TrainConfig,
    hints: Mapping[str, Any] | None,
) -> str:
    """One export of a command session.

    Raises:
        UsageError: a format that has no meaning for the user's own command.
    """
    if fmt == "command":
        return render_command(spec, values)
    if fmt == "flags":
        return render_flags(spec, values)
    if fmt == "env":
        return render_env(spec, values)
    if fmt == "sbatch":
        return render_sbatch(spec, values, cfg, hints)
    raise UsageError(
        f"--format {fmt}: this session tuned your own command (trainer 'command'), which "
        f"reads no tuneup config; export it with --format {', '.join(COMMAND_FORMATS)}"
    )
