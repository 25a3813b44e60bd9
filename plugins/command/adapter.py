"""The `command` trainer's adapter: what it declares to tuneup, and its hooks.

It reads the preset's ``command:`` section (section.py), runs one probe per
child (run.py), reads samples/s from the output (output.py) and exports a
session as the user's own command (export.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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

    def check_section(self, data: Any) -> list[str]:
        return section_problems(data)

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
