"""`render(fmt, values, hints=...)`: one entry point for every export format."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tuneup.config import TrainConfig, build_config
from tuneup.errors import UsageError
from tuneup.export import tutorial
from tuneup.export.configs import render_tuneup
from tuneup.export.slurm import job_layout, render_env, render_sbatch

_Renderer = Callable[[TrainConfig, Mapping[str, Any] | None, tutorial.TutorialRun | None, str], str]


def _run(
    cfg: TrainConfig, hints: Mapping[str, Any] | None, run: tutorial.TutorialRun | None
) -> tutorial.TutorialRun:
    """The run the tutorial is asked for: the session's, else the hints' layout."""
    return run or tutorial.TutorialRun(world_size=job_layout(cfg, hints).ranks)


def _real(
    cfg: TrainConfig, hints: Mapping[str, Any] | None, run: tutorial.TutorialRun | None
) -> TrainConfig:
    """The config a real run trains with: it validates, on the user's data."""
    return tutorial.for_a_real_run(cfg, _run(cfg, hints, run))


_RENDERERS: dict[str, _Renderer] = {
    "yaml": lambda cfg, hints, run, ed: tutorial.render_yaml(cfg, _run(cfg, hints, run)),
    "flags": lambda cfg, hints, run, ed: tutorial.render_flags(cfg, _run(cfg, hints, run), ed),
    "env": lambda cfg, hints, run, ed: render_env(cfg, hints),
    "sbatch": lambda cfg, hints, run, ed: render_sbatch(_real(cfg, hints, run), hints),
    "tuneup": lambda cfg, hints, run, ed: render_tuneup(_real(cfg, hints, run)),
}
FORMATS = tuple(_RENDERERS)


def render(
    fmt: str,
    values: Mapping[str, Any],
    *,
    hints: Mapping[str, Any] | None = None,
    run: tutorial.TutorialRun | None = None,
    edition: str = tutorial.SC22,
) -> str:
    """Render a configuration (knob values over the defaults) in export format `fmt`.

    Args:
        fmt: one of FORMATS.
        values: knob values, e.g. a journal line's `config`; validated first.
        hints: machine hints (nodes, tasks_per_node, gpus_per_node,
            cpus_per_node, cpus_per_task, account, partition, qos, constraint,
            time, job_name; also accepted under a nested `slurm:` mapping): the
            preset's, or `tuneup.export.slurm.hints_from_session` for a finished
            session. env and sbatch read them; yaml and flags take the ranks from them
            when `run` is None.
        run: the ranks and data boxes the recommendation was measured with (yaml, flags).
        edition: the tutorial's edition the flags are spelt for ("sc22" or "sc21").

    Raises:
        UsageError: an unknown format, invalid values or invalid hints.
    """
    renderer = _RENDERERS.get(fmt)
    if renderer is None:
        raise UsageError(f"unknown export format '{fmt}': choose one of {', '.join(FORMATS)}")
    cfg = build_config(values, source="the exported config")
    return renderer(cfg, hints, run, edition)
