"""tuneup's built-in trainer adapters: the U-Net worker, the `sim` surface and `command`.

Each is a module-level `TrainerAdapter` value registered under the
entry-point group ``tuneup.trainers`` (see pyproject.toml), exactly as a
third-party package would register its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuneup.errors import UsageError
from tuneup.trainers.adapters import TrainerAdapter, TrainerContext
from tuneup.trainers.backends import Backend


@dataclass(frozen=True)
class UnetTrainer(TrainerAdapter):
    """The tutorial's 3D U-Net, trained by `python -m tuneup.worker` in a child per probe."""

    def backend(self, ctx: TrainerContext) -> Backend:
        from tuneup.trainers.backends import WorkerBackend

        return WorkerBackend(
            ctx.workdir,
            ctx.budget,
            ctx.seed,
            on_event=ctx.on_event,
            sampler=ctx.sampler,
            launch=ctx.launch,
            job=ctx.job,
        )


@dataclass(frozen=True)
class SimTrainer(TrainerAdapter):
    """A synthetic response surface shaped like the tutorial's figures: no GPU, no child.

    It simulates as many ranks as the session's launch plan runs (--nproc x --nodes).
    """

    def backend(self, ctx: TrainerContext) -> Backend:
        from tuneup.trainers.backends import sim_backend

        ranks = _world_size(ctx)
        if ranks == 1:
            return sim_backend(ctx.seed)
        from tuneup_plugins.sim import SimTrainer as Surface

        return Surface(seed=ctx.seed, world_size=ranks)


@dataclass(frozen=True)
class CommandTrainer(TrainerAdapter):
    """Any training command, set up in the preset's `command:` section."""

    def backend(self, ctx: TrainerContext) -> Backend:
        from tuneup_plugins.command.adapter import (
            CommandBackend,
            check_runnable,
            parse_command_section,
        )

        preset = ctx.preset
        section = getattr(preset, "command", None)
        name = getattr(preset, "source", "") or getattr(preset, "name", "") or "the preset"
        if section is None:
            raise UsageError(
                f"the command trainer needs a `command:` section in the preset ({name} has "
                "none): give `run` (the training command) and the knobs' flags; see "
                "plugins/README.md"
            )
        spec = parse_command_section(section, name)
        check_runnable(spec)
        return CommandBackend(spec, ctx.workdir, ctx.budget, ctx.seed, world_size=_world_size(ctx))


def _world_size(ctx: TrainerContext) -> int:
    """The ranks the session's launch plan runs a probe with (1 without a plan)."""
    return max(1, int(getattr(ctx.launch, "world_size", 1) or 1))


UNET = UnetTrainer(
    name="unet",
    description="the tutorial's 3D U-Net, one child process per probe (the default)",
)
SIM = SimTrainer(
    name="sim",
    description="a synthetic response surface shaped like the tutorial's: answers in "
    "milliseconds, for trying the ladder and the app",
)
COMMAND = CommandTrainer(
    name="command",
    description="any training script: runs the preset's `command:` and reads samples/s "
    "from its output (the tutorial's epoch lines or benchy's summary by default)",
)
