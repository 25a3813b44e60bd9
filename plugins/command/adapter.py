"""The `command` trainer's adapter: what it declares to tuneup, and its hooks.

It reads the preset's ``command:`` section (section.py), runs one probe per
child (run.py), reads samples/s from the output (output.py) and exports a
session as the user's own command (export.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneup.config import build_config
from tuneup.errors import UsageError
from tuneup.probe.targets import Target
from tuneup.trainers.adapters import TrainerAdapter, TrainerContext
from tuneup.trainers.backends import Backend

from . import export
from .run import COMMAND_PHASES, CommandBackend, check_runnable
from .section import SECTION, parse_command_section, section_problems


@dataclass(frozen=True)
class CommandTrainer(TrainerAdapter):
    """Any training command, set up in the preset's `command:` section."""

    def backend(self, ctx: TrainerContext) -> Backend:
        section = self.section_of(ctx)
        preset = ctx.preset
        name = (preset.source or preset.name) if preset is not None else "the preset"
        if section is None:
            raise UsageError(
                f"the command trainer needs a `command:` section in the preset ({name} has "
                "none): give `run` (the training command) and the knobs' flags; see "
                "plugins/README.md"
            )
        spec = parse_command_section(section, name)
        check_runnable(spec)
        return CommandBackend(spec, ctx.workdir, ctx.budget, ctx.seed, world_size=ctx.world_size)

    def tunable(self, section: Mapping[str, Any] | None) -> frozenset[str] | None:
        """The knobs the command section maps to flags or variables (a section that does
        not parse: every knob, and the session says what is wrong with it)."""
        if section is None:
            return frozenset()
        try:
            return frozenset(parse_command_section(section, "the preset").mapped)
        except UsageError:
            return None

    def check_section(self, data: Any) -> list[str]:
        return section_problems(data)

    def no_profile(
        self, section: Mapping[str, Any] | None, values: Mapping[str, Any], report: Path
    ) -> str:
        """tuneup's profiler runs inside its own worker, and torch.profiler has no switch
        that profiles a script from outside: the user takes the profile, and is told how."""
        return (
            "tuneup cannot profile your own command (its profiler runs inside tuneup's "
            f"worker): take a timeline with Nsight Systems, {_under_nsys(section, values, report)}"
            ", or a torch.profiler trace in your script, and read it with "
            "`tuneup profile --trace FILE`"
        )

    def render_export(
        self,
        fmt: str,
        section: Mapping[str, Any] | None,
        values: Mapping[str, Any],
        hints: Mapping[str, Any],
        source: str,
    ) -> str:
        if section is None:
            raise UsageError(
                f"cannot export the command: session.json records none and preset {source} "
                "has no command section"
            )
        spec = parse_command_section(section, source)
        cfg = build_config(dict(values), source="the exported config")
        return export.render(fmt, spec, values, cfg, hints)


def _under_nsys(section: Mapping[str, Any] | None, values: Mapping[str, Any], report: Path) -> str:
    """The probe's command line under `nsys profile`, as its probe ran it; a template where
    the session's section is gone or no longer passes its values."""
    nsys = f"nsys profile -o {shlex.quote(str(report))}"
    if section is None:
        return f"`{nsys} YOUR-COMMAND`"
    try:
        spec = parse_command_section(section, "the session's command section")
        line = export.render_command(spec, values).rstrip("\n")
        argv = shlex.join(export.invocation(spec, values).argv)
    except UsageError:
        return f"`{nsys} YOUR-COMMAND`"
    return f"`{line[: len(line) - len(argv)]}{nsys} {argv}`"


COMMAND = CommandTrainer(
    name=SECTION,
    description="any training script: runs the preset's `command:` and reads samples/s "
    "from its output (the tutorial's epoch lines or benchy's summary by default)",
    tunes="your own command",
    section=True,
    phases=COMMAND_PHASES,
    exports=export.EXPORT_FILES,
    own_target=Target("command", "your command"),  # every knob it tunes is one it passes
)
