"""`render(fmt, values, hints=...)`: one entry point for every export format."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tuneup.config import TrainConfig, build_config
from tuneup.errors import UsageError
from tuneup.export.configs import render_flags, render_tuneup, render_yaml
from tuneup.export.slurm import render_env, render_sbatch

_Renderer = Callable[[TrainConfig, Mapping[str, Any] | None], str]

_RENDERERS: dict[str, _Renderer] = {
    "yaml": lambda cfg, hints: render_yaml(cfg),
    "flags": lambda cfg, hints: render_flags(cfg),
    "env": render_env,
    "sbatch": render_sbatch,
    "tuneup": lambda cfg, hints: render_tuneup(cfg),
}
FORMATS = tuple(_RENDERERS)


def render(fmt: str, values: Mapping[str, Any], *, hints: Mapping[str, Any] | None = None) -> str:
    """Render a configuration (knob values over the defaults) in export format `fmt`.

    Args:
        fmt: one of FORMATS.
        values: knob values, e.g. a journal line's `config`; validated first.
        hints: machine hints (nodes, tasks_per_node, gpus_per_node,
            cpus_per_node, cpus_per_task, account, partition, qos, constraint,
            time, job_name; also accepted under a nested `slurm:` mapping): the
            preset's, or `tuneup.export.slurm.hints_from_session` for a finished
            session. Only env and sbatch read them.

    Raises:
        UsageError: an unknown format, invalid values or invalid hints.
    """
    renderer = _RENDERERS.get(fmt)
    if renderer is None:
        raise UsageError(f"unknown export format '{fmt}': choose one of {', '.join(FORMATS)}")
    cfg = build_config(values, source="the exported config")
    return renderer(cfg, hints)
