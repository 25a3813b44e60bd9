"""The runs a session's answer is for: each program the user trains with, and what it runs.

tuneup's own trainer (`tuneup train`) runs every knob. A user of the NERSC tutorial
trains with its train.py (SC22), which has no GPU-resident loader and no CUDA graphs
(its train_graph.py is another script), and takes torch.compile, fused Adam,
channels_last, cuDNN's benchmark switch and TF32 off as the one-line edits and the
variable the tutorial export's notes give. Where a recommended value is one a target
cannot run, the session tunes that target an answer of its own (the knobs it cannot run
back at the baseline's values, and the stages that set them, and the knobs that go with
them, run again on what it can: tuning.search.targets), and every export says which
answer it carries. Pure: knob values in, reasons out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuneup.config.loaders import loader

Unrunnable = Callable[[Mapping[str, Any]], dict[str, str]]
"""The knobs of some values a target cannot run, each with why, in a few words."""


def runs_everything(values: Mapping[str, Any]) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Target:
    """One program a session's answer is for.

    Attributes:
        name: its key in summary.json and the journal's stage names ("tutorial").
        label: how the user knows it ("the tutorial's train.py").
        unrunnable: the knobs of some values it cannot run, with why.
        follows: for a knob it cannot run, the knobs tuned again with it (a loader's
            workers: the best count of one loader's is not another's).
    """

    name: str
    label: str
    unrunnable: Unrunnable = runs_everything
    follows: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def reset_knobs(self, values: Mapping[str, Any]) -> dict[str, str]:
        """The knobs this target needs set back and tuned again for `values`, with why (a
        knob that only goes with another says so)."""
        cannot = self.unrunnable(values)
        reset = dict(cannot)
        for knob in cannot:
            for other in self.follows.get(knob, ()):
                reset.setdefault(other, f"tuned again with {knob}")
        return reset


def _tutorial_cannot(values: Mapping[str, Any]) -> dict[str, str]:
    found = {}
    name = str(values.get("data_loader_config", "lowmem"))
    if not loader(name).tutorial:
        found["data_loader_config"] = f"the tutorial has no {name} loader"
    if values.get("cuda_graphs") is True:
        found["cuda_graphs"] = "its train.py has no CUDA graphs (train_graph.py is another script)"
    return found


TUNEUP = Target("tuneup", "tuneup train")
TUTORIAL = Target(
    "tutorial",
    "the tutorial's train.py",
    _tutorial_cannot,
    follows={"data_loader_config": ("num_data_workers",)},
)
PRIMARY = TUNEUP.name
"""The target the search's own recommendation is for: the trainer the probes ran."""

TARGET_SEPARATOR = "@"
"""A stage run again for a target is journaled as `STAGE@TARGET` ("data@tutorial")."""


def target_stage(stage: str, target: str) -> str:
    return f"{stage}{TARGET_SEPARATOR}{target}"


def split_target_stage(stage: str) -> tuple[str, str | None]:
    """("data", "tutorial") for "data@tutorial"; (stage, None) for a ladder's own stage."""
    base, sep, target = stage.partition(TARGET_SEPARATOR)
    return (base, target) if sep and target else (stage, None)
