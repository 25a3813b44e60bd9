"""A validated preset as a value: what a probe session runs.

Its own module, apart from the loader, so that what reads a preset (the
trainer adapters among them) does not depend on how presets are found,
parsed and checked (tuneup.preset.load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuneup.config import Boxes
from tuneup.probe.stages import default_ladder
from tuneup.probe.types import Candidate, ProbeBudget

"""The stages a preset runs when it names none, in order."""


@dataclass(frozen=True)
class Launch:
    """The ranks a preset's probes run with; None leaves it to the CLI (the allocation's GPUs)."""

    nproc: int | None = None
    nodes: int | None = None


@dataclass(frozen=True)
class ProbePreset:
    """A validated preset, ready for a probe session.

    Attributes:
        stage_candidates: a stage's own candidate values from the preset, by stage
            name; stages absent here keep their declared candidates.
        source: the bundled name, or the file's absolute path: what --resume reloads.
        origin: where it was found: "bundled", "user: PATH" or "file: PATH".
        sections: the trainers' own sections, by trainer name (each checked by its
            adapter's `check_section`).
        costs: what a probe's parts cost on the machine the preset is for, as recorded
            there (`probe.costs`: its source says where and when); the estimate's
            figures before this machine has measured its own. None: the trainer's guess.
        document: the YAML document it was read from, as JSON values (session.json keeps
            it, so a session resumes when its preset file has moved away).
        real_data: the boxes the real run reads (`real_data`; the tutorial's where the
            preset probes on a synthetic box and says nothing): what the loaders that hold
            a box whole are weighed against. None: the probes read the real files.
    """

    name: str
    description: str
    train: dict[str, Any]
    synthetic_data: dict[str, Any] | None = None
    real_data: Boxes | None = None
    stages: tuple[str, ...] = field(default_factory=default_ladder)
    budget: ProbeBudget = field(default_factory=ProbeBudget)
    hints: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    stage_candidates: dict[str, tuple[Candidate, ...]] = field(default_factory=dict)
    launch: Launch = field(default_factory=Launch)
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    origin: str = ""
    costs: dict[str, Any] | None = None
    document: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
